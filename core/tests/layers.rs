//! The core's modules are layered: no top-level module imports one that
//! imports it back, and within any module no file imports another that
//! imports it back, however long the way round (tests and test rigs
//! aside). Read from the source, so a change that closes a circle fails
//! here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules each top-level module names as `crate::<module>`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in files() {
        let top = module.first().cloned().unwrap_or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != top {
                out.entry(top.clone()).or_default().insert(name);
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

/// A non-test source file's module path (`snapshot::sidecar::content`)
/// and text (without its inline tests).
fn files() -> Vec<(Vec<String>, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the source tree reads") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).expect("beneath the root");
            let rel = rel.to_string_lossy().to_string();
            let test_only =
                rel.contains("tests") || rel.ends_with("rig.rs") || rel.ends_with("chaos.rs");
            if !rel.ends_with(".rs") || test_only {
                continue;
            }
            let mut module: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_string)
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            let text = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or("")
                .to_string();
            out.push((module, text));
        }
    }
    out
}

/// The module paths `text`, in module `at`, names through `crate::` or
/// `super::` (each as far as it names a module of `known`).
fn named(at: &[String], text: &str, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for start in ["crate::", "super::"] {
        for (i, _) in text.match_indices(start) {
            // Not the tail of a longer path (`super::super::`, `x::crate::`).
            if i >= 2 && &text[i - 2..i] == "::" {
                continue;
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            let mut module: Vec<String> = Vec::new();
            if parts.first() == Some(&"crate") {
                parts.remove(0);
            } else {
                module = at.to_vec();
                while parts.first() == Some(&"super") {
                    parts.remove(0);
                    module.pop();
                }
            }
            let mut longest = None;
            for p in parts {
                module.push(p.to_string());
                if known.contains(&module) {
                    longest = Some(module.clone());
                }
            }
            if let Some(m) = longest {
                out.insert(m);
            }
        }
    }
    out
}

#[test]
fn no_file_imports_one_that_imports_it_back_however_far_round() {
    let files = files();
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    // Edges between modules neither of which holds the other (a module and
    // its own submodules share `super::*` by design).
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (at, text) in &files {
        for to in named(at, text, &known) {
            let related = to.starts_with(at) || at.starts_with(&to);
            if !related {
                edges.entry(at.clone()).or_default().insert(to);
            }
        }
    }
    // A circle: a module that reaches itself again.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut ways = vec![vec![start.clone()]];
        while let Some(way) = ways.pop() {
            let last = way.last().expect("a way has a start");
            for next in edges.get(last).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> = way.iter().map(|m| m.join("::")).collect();
                    circles.push(names.join(" -> "));
                } else if seen.insert(next.clone()) {
                    let mut longer = way.clone();
                    longer.push(next.clone());
                    ways.push(longer);
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other round: {circles:#?}"
    );
    assert!(
        edges.len() > 20,
        "the reading found the imports: {}",
        edges.len()
    );
}
