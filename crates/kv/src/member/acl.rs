//! Who may run what at a member: Redis's `AUTH` and the part of its ACL a store of strings
//! needs, so that a client that reaches the port is not yet a client that may write.
//!
//! A member knows users from `--requirepass-file` (the `default` user's password, as Redis's
//! `requirepass`) and `--users-file` (lines in Redis's ACL file syntax, the subset below). A
//! connection starts as `default` when that user is on and needs no password, and otherwise
//! unauthenticated: then every command but `AUTH`, `HELLO` and `QUIT` gets Redis's `NOAUTH`.
//! `AUTH [user] password` checks the password (compared as SHA-256 digests, as Redis keeps
//! them) and a wrong one gets `WRONGPASS`; a command outside the user's rules gets `NOPERM`.
//! The users are this member's own (read at start, not replicated): give every member the
//! same files.
//!
//! Rules, applied in order as Redis does: `on`/`off`, `nopass`, `>password`, `#sha256hex`,
//! `resetpass`, `~*` and `allkeys` (key patterns narrower than every key are refused: the
//! store does not check keys), `+@category`/`-@category` for `all`, `read`, `write`, `admin`
//! (also spelled `dangerous`) and `connection`, `+command`/`-command`, `allcommands`,
//! `nocommands`. Which category a command is in is [`Category::of`]: the store's writes are
//! `@write`, its reads `@read`, membership, faults and configuration `@admin`, and the
//! connection's own commands `@connection`.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// A category of commands, as Redis's ACL names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Reads of the data.
    Read,
    /// Changes to the data.
    Write,
    /// The cluster and the member: membership, faults, configuration, other clients.
    Admin,
    /// The connection's own: PING, ECHO, SELECT, CLIENT SETNAME, INFO, COMMAND.
    Connection,
}

impl Category {
    /// The category of a command by its name (and subcommand, for CONFIG and CLIENT), given
    /// whether the store takes it as a write, a read or a local command.
    /// Compared without case and without copying: it runs for every command.
    pub fn of(args: &[Vec<u8>], store: Option<Category>) -> Category {
        let is = |at: usize, words: &[&[u8]]| {
            args.get(at).is_some_and(|a| words.iter().any(|w| a.eq_ignore_ascii_case(w)))
        };
        if is(0, &[b"acl"]) && is(1, &[b"whoami"]) {
            Category::Connection
        } else if is(0, &[b"kairos.member", b"kairos.fault", b"shutdown", b"debug", b"monitor", b"acl"])
            || (is(0, &[b"config"]) && is(1, &[b"set", b"resetstat", b"rewrite"]))
            || (is(0, &[b"client"]) && is(1, &[b"kill", b"list"]))
        {
            Category::Admin
        } else if is(0, &[b"flushall", b"flushdb"]) {
            Category::Write
        } else {
            store.unwrap_or(Category::Connection)
        }
    }

    fn parse(name: &str) -> Option<Rule> {
        Some(match name {
            "all" => Rule::All,
            "read" => Rule::Category(Category::Read),
            "write" => Rule::Category(Category::Write),
            "admin" | "dangerous" => Rule::Category(Category::Admin),
            "connection" => Rule::Category(Category::Connection),
            _ => return None,
        })
    }
}

/// What one `+`/`-` rule is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    All,
    Category(Category),
    Command(Vec<u8>),
}

/// One user.
#[derive(Debug, Clone)]
struct User {
    on: bool,
    nopass: bool,
    /// SHA-256 digests of the passwords.
    passwords: Vec<[u8; 32]>,
    /// `+` (true) and `-` rules, in order.
    rules: Vec<(bool, Rule)>,
}

impl User {
    fn new() -> Self {
        Self { on: false, nopass: false, passwords: Vec::new(), rules: Vec::new() }
    }

    fn permits(&self, name: &[u8], category: Category) -> bool {
        let mut allowed = false;
        for (allow, rule) in &self.rules {
            let applies = match rule {
                Rule::All => true,
                Rule::Category(c) => *c == category,
                Rule::Command(c) => c.eq_ignore_ascii_case(name),
            };
            if applies {
                allowed = *allow;
            }
        }
        allowed
    }
}

/// Redis's words for a client that has not authenticated.
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// Redis's words for a wrong user or password.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// A line of a users file that is not a user this store can keep ([`Acl::new`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {rule}")]
pub struct UsersFileError {
    /// The line, 1-based.
    pub line: usize,
    /// What is wrong with it.
    pub rule: UserRuleError,
}

/// What is wrong with one line of a users file ([`UsersFileError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserRuleError {
    /// The line does not start with `user` (the line as written).
    #[error("'{0}' is not 'user NAME RULES...'")]
    NotAUserLine(String),
    /// `user` alone.
    #[error("a user without a name")]
    NoName,
    /// A `#` rule that is not 64 hexadecimal digits.
    #[error("user {user}: '{word}' is not # and 64 hex digits of a SHA-256")]
    BadDigest {
        /// The user the line is about.
        user: String,
        /// The rule as written.
        word: String,
    },
    /// A key or channel pattern narrower than every key (the store does not check keys).
    #[error("user {user}: '{word}' limits keys or channels, which this store does not check: use ~*")]
    NarrowPattern {
        /// The user the line is about.
        user: String,
        /// The rule as written.
        word: String,
    },
    /// A `+@` or `-@` rule naming no [`Category`].
    #[error(
        "user {user}: unknown category '{category}' (known: all, read, write, admin, dangerous, connection)"
    )]
    UnknownCategory {
        /// The user the line is about.
        user: String,
        /// The category as written.
        category: String,
    },
    /// A rule this store does not know.
    #[error("user {user}: unknown rule '{word}'")]
    UnknownRule {
        /// The user the line is about.
        user: String,
        /// The rule as written.
        word: String,
    },
}

/// The users a member knows.
#[derive(Debug, Clone)]
pub struct Acl {
    users: BTreeMap<String, User>,
}

impl Default for Acl {
    /// Redis's default: the `default` user, on, no password, every command.
    fn default() -> Self {
        let mut default = User::new();
        default.on = true;
        default.nopass = true;
        default.rules.push((true, Rule::All));
        Self { users: BTreeMap::from([("default".to_string(), default)]) }
    }
}

fn digest(password: &[u8]) -> [u8; 32] {
    Sha256::digest(password).into()
}

impl Acl {
    /// The users of a users file (`users`, if any) and a password for `default` (`requirepass`,
    /// if any). With a users file, `default` is off unless the file says otherwise or a
    /// password is given; with a password alone, `default` needs it.
    pub fn new(users: Option<&str>, requirepass: Option<&[u8]>) -> Result<Self, UsersFileError> {
        let mut acl = Self::default();
        if let Some(text) = users {
            acl.users.get_mut("default").expect("default is there").on = false;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                acl.apply_line(line).map_err(|rule| UsersFileError { line: n + 1, rule })?;
            }
        }
        if let Some(password) = requirepass {
            let default = acl.users.get_mut("default").expect("default is there");
            default.on = true;
            default.nopass = false;
            default.passwords = vec![digest(password)];
        }
        Ok(acl)
    }

    fn apply_line(&mut self, line: &str) -> Result<(), UserRuleError> {
        let mut words = line.split_whitespace();
        if words.next() != Some("user") {
            return Err(UserRuleError::NotAUserLine(line.to_string()));
        }
        let name = words.next().ok_or(UserRuleError::NoName)?.to_string();
        let user = self.users.entry(name.clone()).or_insert_with(User::new);
        for word in words {
            match word {
                "on" => user.on = true,
                "off" => user.on = false,
                "nopass" => {
                    user.nopass = true;
                    user.passwords.clear();
                }
                "resetpass" => {
                    user.nopass = false;
                    user.passwords.clear();
                }
                "~*" | "allkeys" | "%RW~*" => {}
                "allcommands" => user.rules.push((true, Rule::All)),
                "nocommands" => user.rules.push((false, Rule::All)),
                _ if word.starts_with('>') => {
                    user.nopass = false;
                    user.passwords.push(digest(&word.as_bytes()[1..]));
                }
                _ if word.starts_with('#') => {
                    let hex = &word[1..];
                    let bytes = (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
                        .then(|| {
                            (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect()
                        })
                        .flatten()
                        .ok_or_else(|| UserRuleError::BadDigest {
                            user: name.clone(),
                            word: word.to_string(),
                        })?;
                    let bytes: Vec<u8> = bytes;
                    user.nopass = false;
                    user.passwords.push(bytes.try_into().expect("32 bytes"));
                }
                _ if word.starts_with('~') || word.starts_with('%') || word.starts_with('&') => {
                    return Err(UserRuleError::NarrowPattern { user: name, word: word.to_string() });
                }
                _ if word.starts_with("+@") || word.starts_with("-@") => {
                    let rule = Category::parse(&word[2..]).ok_or_else(|| UserRuleError::UnknownCategory {
                        user: name.clone(),
                        category: word[2..].to_string(),
                    })?;
                    user.rules.push((word.starts_with('+'), rule));
                }
                _ if (word.starts_with('+') || word.starts_with('-')) && word.len() > 1 => {
                    user.rules.push((word.starts_with('+'), Rule::Command(word.as_bytes()[1..].to_vec())));
                }
                _ => return Err(UserRuleError::UnknownRule { user: name, word: word.to_string() }),
            }
        }
        Ok(())
    }

    /// The user a new connection is: `default` when it is on and needs no password.
    pub fn initial_user(&self) -> Option<String> {
        self.users.get("default").filter(|u| u.on && u.nopass).map(|_| "default".to_string())
    }

    /// Whether the `default` user needs a password (AUTH with one argument then means it).
    pub fn default_needs_password(&self) -> bool {
        self.users.get("default").is_some_and(|u| !u.nopass)
    }

    /// The user `name` if it is on and `password` is one of its passwords (or it needs none).
    pub fn authenticate(&self, name: &str, password: &[u8]) -> bool {
        let Some(user) = self.users.get(name).filter(|u| u.on) else { return false };
        if user.nopass {
            return true;
        }
        let given = digest(password);
        // Every digest compared in full, so the time says nothing of which matched how far.
        let same = |d: &[u8; 32]| d.iter().zip(&given).fold(0u8, |x, (a, b)| x | (a ^ b)) == 0;
        user.passwords.iter().fold(false, |found, d| found | same(d))
    }

    /// Whether user `name` may run command `command` (its name) of `category`.
    pub fn permits(&self, name: &str, command: &[u8], category: Category) -> bool {
        self.users.get(name).is_some_and(|u| u.on && u.permits(command, category))
    }
}

/// Redis's words for a command a user may not run.
pub fn noperm(command: &[u8]) -> String {
    format!(
        "NOPERM this user has no permissions to run the '{}' command",
        String::from_utf8_lossy(command).to_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn without_files_everyone_is_default_and_may_do_anything() {
        let acl = Acl::new(None, None).unwrap();
        assert_eq!(acl.initial_user().as_deref(), Some("default"));
        assert!(!acl.default_needs_password());
        assert!(acl.permits("default", b"set", Category::Write));
        assert!(acl.permits("default", b"kairos.member", Category::Admin));
    }

    #[test]
    fn requirepass_makes_default_need_its_password() {
        let acl = Acl::new(None, Some(b"s3cret")).unwrap();
        assert_eq!(acl.initial_user(), None);
        assert!(acl.default_needs_password());
        assert!(acl.authenticate("default", b"s3cret"));
        assert!(!acl.authenticate("default", b"s3cre"));
        assert!(!acl.authenticate("nobody", b"s3cret"));
    }

    #[test]
    fn users_get_what_their_rules_give_in_order() {
        let hash = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // "secret"
        let file = format!(
            "# readers and writers\nuser reader on >pw ~* +@read +@connection\nuser writer on #{hash} allkeys +@all -@admin -flushall\nuser gone off >x +@all\n"
        );
        let acl = Acl::new(Some(&file), None).unwrap();
        assert_eq!(acl.initial_user(), None, "with a users file, default is off");
        assert!(acl.authenticate("reader", b"pw") && acl.authenticate("writer", b"secret"));
        assert!(!acl.authenticate("gone", b"x"), "a user that is off");
        assert!(acl.permits("reader", b"get", Category::Read));
        assert!(!acl.permits("reader", b"set", Category::Write));
        assert!(acl.permits("writer", b"set", Category::Write));
        assert!(!acl.permits("writer", b"kairos.member", Category::Admin));
        assert!(!acl.permits("writer", b"FLUSHALL", Category::Write));
        assert_eq!(noperm(b"SET"), "NOPERM this user has no permissions to run the 'set' command");
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number_and_reason() {
        let err = |text: &str| Acl::new(Some(text), None).unwrap_err().to_string();
        assert!(err("user a on >x +@bogus").contains("line 1: user a: unknown category 'bogus'"));
        assert!(
            err("\nuser a on ~cache:*").contains("line 2") && err("\nuser a on ~cache:*").contains("use ~*")
        );
        assert!(err("group a").contains("not 'user NAME RULES...'"));
        assert!(err("user a #abc").contains("64 hex digits"));
        assert!(
            err(&format!("user a #{}é", "0".repeat(62))).contains("64 hex digits"),
            "no panic on a multi-byte character"
        );
        assert!(err("user a frobnicate").contains("unknown rule 'frobnicate'"));
    }

    #[test]
    fn commands_fall_in_their_categories() {
        let of = |w: &[&str], store| Category::of(&args(w), store);
        assert_eq!(of(&["SET", "k", "v"], Some(Category::Write)), Category::Write);
        assert_eq!(of(&["get", "k"], Some(Category::Read)), Category::Read);
        assert_eq!(of(&["KAIROS.MEMBER", "LIST"], None), Category::Admin);
        assert_eq!(of(&["config", "set", "x", "y"], None), Category::Admin);
        assert_eq!(of(&["config", "get", "x"], None), Category::Connection);
        assert_eq!(of(&["acl", "whoami"], None), Category::Connection);
        assert_eq!(of(&["ping"], None), Category::Connection);
    }
}
