//! The library's layers, checked from its source: each module imports only from the layers
//! below it, and no files import each other round in a circle.
//!
//! The layers (ARCHITECTURE.md says what each holds), lowest first. A module may use a module
//! of a lower layer, never one of its own layer or a higher one:
//!
//! | layer | modules |
//! |---|---|
//! | pure core | `stopped`, then `backoff`, `breaker`, `fingerprint`, then `failure` (classification uses backoff) |
//! | Kafka glue | `kafka`, `metrics` |
//! | the record | `record`, then `handler` |
//! | formats | `dlq` (the envelope, Spring's headers, the publisher) and `park` (the park log's events and table), then `retry_tier` |
//! | settings | `config`, `telemetry` |
//! | record formats | `schema` (Schema Registry payloads decoded to JSON) |
//! | consuming and reading | `consumer`, `dlq_reader` |
//! | kafka-dlq's own state | `state` (the audit and positions topics, the ledger of what is outstanding) |
//! | application | `replay`, `sidecar`, `server`, then `outstanding`, then `monitor`, then `console` (its requests for approval go to Slack as the monitor's alerts do), and the binary's `cli` |
//!
//! Imports are the `crate::` and `super::` paths of code (comments, doc links and strings are
//! not imports; a file's `#[cfg(test)] mod tests` is left out). Within a folder, its files and
//! sub-folders must not form a cycle either (its `mod.rs` may use its children and they it).
//! And the library alone (the default features) needs none of the application's dependencies.
//!
//! Every `select!` in the source is `biased;`: tokio picks the first ready branch of an
//! unbiased one at random, and a simulated schedule would then not replay from its seed (the
//! simulations' `a_seed_replays_the_same_trace` tests catch one that matters; this catches
//! them all, tests included, before they matter).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first; a module may import only from modules of an earlier entry.
const LAYERS: &[&[&str]] = &[
    &["stopped"],
    &["backoff", "breaker", "fingerprint"],
    &["failure"],
    &["kafka", "metrics"],
    &["record"],
    &["handler"],
    &["dlq", "park"],
    &["retry_tier"],
    &["config", "telemetry"],
    &["schema"],
    &["consumer", "dlq_reader"],
    &["state"],
    &["replay", "sidecar", "server"],
    &["outstanding"],
    &["monitor"],
    &["console"],
];

/// What `lib.rs` re-exports at the crate root, and the module each comes from.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("ConfigError", "config"),
    ("ConsumerConfig", "config"),
    ("Consumer", "consumer"),
    ("ConsumerError", "consumer"),
    ("DeadLetterKind", "failure"),
    ("FailureKind", "failure"),
    ("HandlerError", "failure"),
    ("Handler", "handler"),
    ("Record", "record"),
    ("RecordHeader", "record"),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The code of a file: comments, string contents and its test module left out.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            // A trailing comment (a `//` inside a string is rare enough here to ignore).
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        let mut in_string = false;
        let mut escaped = false;
        for c in line.chars() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_string = false;
                    out.push('"');
                }
            } else {
                if c == '"' {
                    in_string = true;
                }
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The paths a piece of code names with `prefix` (`crate` or `super`), braces expanded:
/// `crate::{a::B, c::{d, E}}` gives `a::B`, `c::d` and `c::E`.
fn paths(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let needle = format!("{prefix}::");
    let mut from = 0;
    while let Some(i) = code[from..].find(&needle) {
        let start = from + i;
        from = start + needle.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `super::super::x` is one path, `my_crate::x` none
        }
        tree("", &code[from..], &mut out);
    }
    out
}

/// Expands one use tree at the start of `text` (after `stem::`) into `out`; returns the
/// length of text it took.
fn tree(stem: &str, text: &str, out: &mut Vec<String>) -> usize {
    let name: String = text
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    let full = match (stem.is_empty(), name.trim_end_matches("::")) {
        (true, n) => n.to_string(),
        (false, "") => stem.to_string(),
        (false, n) => format!("{stem}::{n}"),
    };
    let after = &text[name.len()..];
    if !after.starts_with('{') {
        if !full.is_empty() {
            out.push(full);
        }
        return name.len();
    }
    // A group: each comma-separated tree inside the braces.
    let mut at = 1;
    loop {
        let inner = &after[at..];
        let skipped = inner.len() - inner.trim_start().len();
        at += skipped;
        let inner = &after[at..];
        if inner.starts_with('}') || inner.is_empty() {
            return name.len() + at + 1;
        }
        at += tree(&full, inner, out);
        let inner = &after[at..];
        // Past ` as Name`, `self` and the like, to the next comma or the group's end.
        let end = inner.find([',', '}']).unwrap_or(inner.len());
        at += end;
        if after[at..].starts_with(',') {
            at += 1;
        }
    }
}

/// The directory whose modules `file`'s `super::` names.
fn super_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap();
    if file.file_name().unwrap() == "mod.rs" {
        dir.parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The deepest file a path names, starting from `dir`: `a::b::C` from `src` is `src/a/b.rs`,
/// `src/a/b/mod.rs` or `src/a/mod.rs`, whichever exists deepest; `None` when its first
/// segment is no module there (an item of `dir`'s own `mod.rs`).
fn resolve(dir: &Path, path: &str) -> Option<PathBuf> {
    let mut at = dir.to_path_buf();
    let mut found = None;
    for segment in path.split("::") {
        let file = at.join(format!("{segment}.rs"));
        let folder = at.join(segment);
        if folder.is_dir() {
            // Its items are those of its `mod.rs` until a later segment names a child.
            found = Some(folder.join("mod.rs"));
            at = folder;
        } else if file.is_file() {
            found = Some(file);
            break;
        } else {
            break;
        }
    }
    found
}

/// For an edge between two files, the folder in which they are siblings and the child of it
/// each lies in; `None` when one is that folder's own `mod.rs` (a folder's `mod.rs` and its
/// children may use each other).
fn siblings(from: &Path, to: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let from_dir = from.parent().unwrap();
    let common: PathBuf = from_dir
        .ancestors()
        .find(|d| to.starts_with(d))
        .unwrap()
        .to_path_buf();
    let child = |p: &Path| -> PathBuf {
        let rest = p.strip_prefix(&common).unwrap();
        common.join(rest.components().next().unwrap())
    };
    let (a, b) = (child(from), child(to));
    let is_mod = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
    };
    if a == b || is_mod(&a) || is_mod(&b) {
        return None;
    }
    Some((common, a, b))
}

/// The top-level module a file or folder of `src` belongs to.
fn top_module(path: &Path) -> String {
    let rest = path.strip_prefix(src()).unwrap();
    let first = rest
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every import edge between files of the library: (from, to).
fn edges() -> Vec<(PathBuf, PathBuf)> {
    let root = src();
    let mut out = Vec::new();
    for file in rust_files(&root) {
        let rel = file.strip_prefix(&root).unwrap();
        if rel == Path::new("lib.rs") || rel == Path::new("main.rs") || rel.starts_with("cli") {
            continue; // the crate root and the binary
        }
        let code = code(&std::fs::read_to_string(&file).unwrap());
        for path in paths(&code, "crate") {
            let first = path.split("::").next().unwrap();
            let path = match ROOT_ITEMS.iter().find(|(item, _)| *item == first) {
                Some((_, module)) => format!("{module}::{path}"),
                None => path,
            };
            if let Some(target) = resolve(&root, &path) {
                out.push((file.clone(), target));
            }
        }
        for path in paths(&code, "super") {
            // `super::super::x`: each further `super` is one folder up.
            let mut dir = super_dir(&file);
            let mut path = path.as_str();
            while let Some(rest) = path.strip_prefix("super::") {
                dir = dir.parent().unwrap().to_path_buf();
                path = rest;
            }
            if let Some(target) = resolve(&dir, path) {
                out.push((file.clone(), target));
            }
        }
    }
    out
}

#[test]
fn every_module_imports_only_from_the_layers_below_it() {
    let mut upward = BTreeSet::new();
    for (from, to) in edges() {
        let (a, b) = (top_module(&from), top_module(&to));
        if a == b {
            continue;
        }
        let la = layer_of(&a).unwrap_or_else(|| panic!("module `{a}` is in no layer of LAYERS"));
        let lb = layer_of(&b).unwrap_or_else(|| panic!("module `{b}` is in no layer of LAYERS"));
        if lb >= la {
            let rel = from.strip_prefix(src()).unwrap().display().to_string();
            upward.insert(format!("{rel} imports `{b}` (layer {lb}) from layer {la}"));
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a layer not below:\n{}",
        upward.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn every_module_of_the_library_has_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(name) = line.strip_prefix("pub mod ").or(line.strip_prefix("mod ")) {
            let name = name.trim_end_matches(';');
            assert!(
                layer_of(name).is_some(),
                "`{name}` is in no layer of LAYERS"
            );
        }
    }
}

#[test]
fn no_files_of_one_folder_import_each_other_round_in_a_circle() {
    let mut graphs: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<PathBuf>>> = BTreeMap::new();
    for (from, to) in edges() {
        if let Some((folder, a, b)) = siblings(&from, &to) {
            graphs
                .entry(folder)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
    }
    let mut cycles = Vec::new();
    for (folder, graph) in &graphs {
        // Depth-first search for a path back to where it started.
        for start in graph.keys() {
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = BTreeSet::new();
            while let Some((node, path)) = stack.pop() {
                for next in graph.get(&node).into_iter().flatten() {
                    if next == start {
                        let names: Vec<String> = path
                            .iter()
                            .chain([start])
                            .map(|p| p.strip_prefix(folder).unwrap().display().to_string())
                            .collect();
                        cycles.push(format!("{}: {}", folder.display(), names.join(" → ")));
                    } else if seen.insert(next.clone()) {
                        let mut longer = path.clone();
                        longer.push(next.clone());
                        stack.push((next.clone(), longer));
                    }
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// Folders that decide and never do, and what they must never import: the consumer's
/// settle step says how a record's calls ended and where it goes; writing it, and storing
/// positions, are the progress's (ARCHITECTURE.md, "Pure logic decides; the worker does").
const NEVER: &[(&str, &[&str])] = &[(
    "consumer/settle",
    &[
        "consumer/progress",
        "consumer/worker",
        "consumer/poll",
        "consumer/client.rs",
        "dlq",
        "retry_tier/write.rs",
        "kafka",
    ],
)];

#[test]
fn the_settle_step_decides_and_never_writes() {
    let root = src();
    let mut found = Vec::new();
    for (from, to) in edges() {
        let (from, to) = (
            from.strip_prefix(&root).unwrap().to_path_buf(),
            to.strip_prefix(&root).unwrap().to_path_buf(),
        );
        for (folder, never) in NEVER {
            if from.starts_with(folder) {
                if let Some(n) = never.iter().find(|n| to.starts_with(n)) {
                    found.push(format!("{} imports {} ({n})", from.display(), to.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "imports a deciding folder must not make:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_imports_through_braces_and_super() {
    let code = code(
        "use crate::{dlq::Envelope, kafka::{headers, LogContext}};\n\
         // use crate::monitor::Alert;\n\
         let s = \"crate::replay\";\n\
         use super::context::Assigned;\n\
         use super::super::client::Client;\n",
    );
    assert_eq!(
        paths(&code, "crate"),
        ["dlq::Envelope", "kafka::headers", "kafka::LogContext"]
            .map(String::from)
            .to_vec()
    );
    assert_eq!(
        paths(&code, "super"),
        ["context::Assigned", "super::client::Client"]
            .map(String::from)
            .to_vec()
    );
}

#[test]
fn the_library_alone_depends_on_nothing_of_the_application() {
    // What a service gets with `kafka-dlq = "…"`: the default features, which must be none,
    // and no dependency of the command line, HTTP or Slack unless a feature asks for it.
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let section = |name: &str| -> String {
        let start = manifest.find(&format!("\n[{name}]\n")).unwrap() + name.len() + 4;
        let end = manifest[start..]
            .find("\n[")
            .map_or(manifest.len(), |e| start + e);
        manifest[start..end].to_string()
    };
    let features = section("features");
    assert!(
        features.lines().any(|l| l.trim() == "default = []"),
        "default features must be the library alone:\n{features}"
    );
    let dependencies = section("dependencies");
    for application in [
        "clap",
        "axum",
        "hyper",
        "hyper-util",
        "hyper-rustls",
        "reqwest",
        "slack-morphism",
        "mimalloc",
        "anyhow",
        "tracing-subscriber",
        "url",
    ] {
        let line = dependencies
            .lines()
            .find(|l| l.split_whitespace().next() == Some(application))
            .unwrap_or_else(|| {
                panic!("`{application}` is not a dependency any more: update this list")
            });
        assert!(
            line.contains("optional = true"),
            "`{application}` is the application's; the library must not need it: {line}"
        );
    }
}

/// The `select!`s of `text` that are not `biased;`, as 1-based line numbers.
fn unbiased_selects(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_code = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with("//")
    };
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_code(l) && l.contains("select! {"))
        .filter(|(i, _)| {
            let next = lines[i + 1..].iter().find(|l| is_code(l));
            next.map(|l| l.trim()) != Some("biased;")
        })
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_select_is_biased_so_that_a_seed_replays() {
    let mut unbiased = Vec::new();
    for file in rust_files(&src()) {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in unbiased_selects(&text) {
            unbiased.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` (put the branch that must win first, e.g. the stop):\n{}",
        unbiased.join("\n")
    );
}

#[test]
fn the_select_check_sees_past_comments_to_the_first_line() {
    let text = "tokio::select! {\n    // why\n    biased;\n    _ = a => {}\n}\n\
                tokio::select! {\n    _ = b => {}\n}\n// tokio::select! {\n";
    assert_eq!(unbiased_selects(text), vec![6]);
}
