//! `kairos kv serve --config FILE`: a member's settings in a TOML file beside (or instead of)
//! its flags, as a service manager would start it.
//!
//! The file's keys are `serve`'s long flags without the dashes (`id = 1`, `peers = ["1=10.0.0.1:7380",
//! ...]`, `secret-file = "/etc/kairos/secret"`, `fsync = "always"`, `no-fd = true`): a string or
//! number becomes `--key=value`, an array the comma-separated list, `true` the bare flag and
//! `false` nothing. The file is turned into flags before the command line is parsed, so every
//! check a flag has applies to its key too, and a flag given on the command line wins over the
//! file's key. A key that is no flag of `serve` is an error that names it.

use std::ffi::OsString;
use std::path::Path;

/// The largest config file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// `args` (the whole command line, program first) with a `kv serve` command's `--config FILE`
/// replaced by the file's settings as flags; other commands as they were. `flags` are the
/// long flags `serve` takes.
pub fn expand(args: Vec<OsString>, flags: &[String]) -> Result<Vec<OsString>, String> {
    let is_serve = args.get(1).is_some_and(|a| a == "kv") && args.get(2).is_some_and(|a| a == "serve");
    if !is_serve {
        return Ok(args);
    }
    let mut rest: Vec<OsString> = Vec::new();
    let mut file = None;
    let mut it = args[3..].iter();
    while let Some(arg) = it.next() {
        let text = arg.to_string_lossy();
        if text == "--config" {
            file = Some(it.next().ok_or("--config needs a FILE")?.clone());
        } else if let Some(path) = text.strip_prefix("--config=") {
            file = Some(OsString::from(path));
        } else {
            rest.push(arg.clone());
        }
    }
    let Some(file) = file else { return Ok(args) };
    let path = Path::new(&file);
    let bytes = kairos_sys::fs::read_bytes(path, MAX_CONFIG_BYTES).map_err(|e| format!("--config {e}"))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("--config {}: not UTF-8 text", path.display()))?;
    let given: Vec<String> = rest
        .iter()
        .filter_map(|a| a.to_str()?.strip_prefix("--").map(|f| f.split('=').next().unwrap_or(f).to_string()))
        .collect();
    let from_file =
        flags_of(&text, flags, &given).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let mut out: Vec<OsString> = args[..3].to_vec();
    out.extend(from_file.into_iter().map(OsString::from));
    out.extend(rest);
    Ok(out)
}

/// The flags a config file's text stands for, leaving out those in `given`.
fn flags_of(text: &str, flags: &[String], given: &[String]) -> Result<Vec<String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let mut out = Vec::new();
    for (key, value) in &table {
        if key == "config" || !flags.iter().any(|f| f == key) {
            return Err(format!("'{key}' is no flag of kairos kv serve (see kairos kv serve --help)"));
        }
        if given.iter().any(|g| g == key) {
            continue;
        }
        let scalar = |v: &toml::Value| match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            _ => Err(format!("'{key}': a string or a number, or a list of them")),
        };
        match value {
            toml::Value::Boolean(true) => out.push(format!("--{key}")),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                let items: Vec<String> = items.iter().map(scalar).collect::<Result<_, _>>()?;
                out.push(format!("--{key}={}", items.join(",")));
            }
            v => out.push(format!("--{key}={}", scalar(v)?)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Vec<String> {
        ["id", "peers", "listen", "data", "fsync", "no-fd", "join", "tick-us"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn keys_become_flags_and_the_command_line_wins() {
        let text = "id = 2\npeers = [\"1=127.0.0.1:7001\", \"2=127.0.0.1:7002\"]\nfsync = \"never\"\nno-fd = true\njoin = false\ntick-us = 500\n";
        let got = flags_of(text, &flags(), &["fsync".to_string()]).unwrap();
        // In the table's order (by key).
        assert_eq!(got, ["--id=2", "--no-fd", "--peers=1=127.0.0.1:7001,2=127.0.0.1:7002", "--tick-us=500"]);
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_named() {
        assert!(flags_of("idd = 1", &flags(), &[]).unwrap_err().contains("'idd' is no flag"));
        assert!(flags_of("config = \"x\"", &flags(), &[]).unwrap_err().contains("'config' is no flag"));
        assert!(
            flags_of("id = { a = 1 }", &flags(), &[]).unwrap_err().contains("'id': a string or a number")
        );
        assert!(!flags_of("id = ", &flags(), &[]).unwrap_err().is_empty());
    }

    #[test]
    fn the_example_config_names_only_serve_flags() {
        use clap::CommandFactory as _;
        let cli = crate::Cli::command();
        let serve = cli.find_subcommand("kv").and_then(|kv| kv.find_subcommand("serve")).unwrap();
        let flags: Vec<String> =
            serve.get_arguments().filter_map(|a| a.get_long()).map(String::from).collect();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/kv/kv.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let got = flags_of(&text, &flags, &[]).unwrap();
        assert!(
            got.contains(&"--peers=1=10.0.0.1:7380,2=10.0.0.2:7380,3=10.0.0.3:7380".to_string()),
            "{got:?}"
        );
        assert!(got.contains(&"--fsync=always".to_string()), "{got:?}");
    }

    #[test]
    fn only_kv_serve_reads_a_config_file() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let other = args(&["kairos", "kv", "cluster", "--config", "x"]);
        assert_eq!(expand(other.clone(), &flags()).unwrap(), other);
        let plain = args(&["kairos", "kv", "serve", "--id", "1"]);
        assert_eq!(expand(plain.clone(), &flags()).unwrap(), plain);
        let missing = expand(args(&["kairos", "kv", "serve", "--config", "/nonexistent/kv.toml"]), &flags());
        assert!(missing.unwrap_err().starts_with("--config "), "one line naming the flag");
    }
}
