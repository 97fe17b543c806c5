//! The core's modules are layered: no top-level module imports one that
//! imports it back (tests and test rigs aside). Read from the source, so
//! a change that closes a circle fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules each top-level module names as `crate::<module>`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the source tree reads") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).expect("beneath the root");
            let rel = rel.to_string_lossy();
            let test_only = rel.contains("/tests")
                || rel.ends_with("tests.rs")
                || rel.ends_with("rig.rs")
                || rel.ends_with("chaos.rs");
            if !rel.ends_with(".rs") || test_only {
                continue;
            }
            let top = rel.split('/').next().unwrap_or("").trim_end_matches(".rs");
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            // What follows an inline test module is the tests'.
            let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
            for (i, _) in text.match_indices("crate::") {
                let name: String = text[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != top {
                    out.entry(top.to_string()).or_default().insert(name);
                }
            }
        }
    }
    out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let imports = imports();
    let mut circles = Vec::new();
    for (a, names) in &imports {
        for b in names {
            if a < b && imports.get(b).is_some_and(|back| back.contains(a)) {
                circles.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that import each other: {circles:?}"
    );
    assert!(imports.len() > 10, "the source tree was not read");
}
