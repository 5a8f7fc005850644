//! The crate's modules form no cycle: each imports only modules below it, and none imports
//! the crate root (which only declares and re-exports). Read from the sources' `crate::` paths.

use std::collections::{BTreeMap, BTreeSet};

#[test]
fn modules_import_no_cycle() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut modules = BTreeSet::new();
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if name != "lib" {
            modules.insert(name.clone());
            sources.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(modules.len() >= 10, "{modules:?}");
    for (name, source) in &sources {
        let mut uses = BTreeSet::new();
        // Code only: not comments (doc links name other modules), not the unit tests.
        let code = source.split("#[cfg(test)]").next().unwrap();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let target: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                assert!(
                    modules.contains(&target),
                    "{name} uses `crate::{rest}`, an item of the crate root: import it from its module"
                );
                uses.insert(target);
            }
        }
        imports.insert(name.clone(), uses);
    }
    // Peel off modules that import nothing left; a cycle leaves some behind.
    let mut left = imports.clone();
    while !left.is_empty() {
        let free: Vec<String> = left
            .iter()
            .filter(|(_, uses)| uses.iter().all(|u| !left.contains_key(u)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(!free.is_empty(), "a cycle among the crate's modules: {left:?}");
        for m in free {
            left.remove(&m);
        }
    }
    // The layering the module docs state.
    assert!(imports["alloc"].contains("adj") && imports["alloc"].contains("opt"));
    for low in ["adj", "opt", "tunnel"] {
        assert!(!imports[low].contains("alloc"), "{low} imports alloc");
    }
    for low in ["units", "topology", "request", "generate", "tunnel", "adj", "opt", "alloc"] {
        assert!(!imports[low].contains("validator"), "{low} imports the validator");
    }
    assert!(imports["plan"].contains("alloc") && imports["plan"].contains("validator"));
}
