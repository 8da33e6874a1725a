//! The manual cannot drift from the binary: every `kafka-dlq` command line, flag of a settings
//! table, environment variable and config file in README.md, ARCHITECTURE.md, docs/ and the
//! runbook is checked against what the binary takes (`--help` of each subcommand, and its
//! config reader). Metric names are checked where something serves `/metrics`
//! (tests/dashboard.rs, tests/console.rs, tests/share.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn kafka_dlq(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A subcommand's path (`run`, `dlq list`, `config check`) and what its `--help` lists.
#[derive(Debug, Default)]
struct Help {
    flags: BTreeSet<String>,
    variables: BTreeSet<String>,
}

/// Every subcommand of the binary, by path ("" for the root), from `--help` down.
fn commands() -> BTreeMap<String, Help> {
    let mut out = BTreeMap::new();
    let mut todo = vec![String::new()];
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.split_whitespace().collect();
        args.push("--help");
        let (code, help, err) = kafka_dlq(&args);
        assert_eq!(code, 0, "kafka-dlq {}: {err}", args.join(" "));
        let mut in_commands = false;
        let mut parsed = Help::default();
        for line in help.lines() {
            if line == "Commands:" {
                in_commands = true;
                continue;
            }
            if in_commands {
                match line
                    .strip_prefix("  ")
                    .and_then(|l| l.split_whitespace().next())
                {
                    Some(name) if !line.starts_with("   ") && name != "help" => {
                        todo.push(format!("{path} {name}").trim().to_string())
                    }
                    Some(_) => {}
                    None => in_commands = false,
                }
            }
            for word in line.split(|c: char| c.is_whitespace() || c == ',') {
                if let Some(flag) = word.strip_prefix("--") {
                    let flag: String = flag
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    if !flag.is_empty()
                        && word.starts_with("--")
                        && line.trim_start().starts_with('-')
                    {
                        parsed.flags.insert(flag);
                    }
                }
            }
            for marker in ["[alias: --", "[aliases: --"] {
                if let Some(at) = line.find(marker) {
                    for alias in line[at + marker.len() - 2..].split(['[', ']', ',', ' ']) {
                        if let Some(flag) = alias.strip_prefix("--") {
                            parsed.flags.insert(flag.to_string());
                        }
                    }
                }
            }
            let mut rest = line;
            while let Some(at) = rest.find("[env: ") {
                let name: String = rest[at + 6..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                parsed.variables.insert(name);
                rest = &rest[at + 6..];
            }
        }
        out.insert(path, parsed);
    }
    out
}

/// The manual: README.md, ARCHITECTURE.md, docs/*.md and the runbook, with their text.
fn manual() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("alerting/RUNBOOK.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(root).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// The `kafka-dlq` command lines of `text`: (line number, subcommand path, the flags after it).
/// A command line starts with `kafka-dlq ` (after a prompt, a path or `cargo run … --`) and is
/// read to the end of its line, a closing backtick or a comment.
fn command_lines(text: &str, known: &BTreeMap<String, Help>) -> Vec<(usize, String, Vec<String>)> {
    let mut out = Vec::new();
    // A line ending in `\` continues the command on the next.
    let mut joined: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let (start, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        acc.push_str(line.trim_end_matches('\\'));
        acc.push(' ');
        if line.trim_end().ends_with('\\') {
            pending = Some((start, acc));
        } else {
            joined.push((start, acc));
        }
    }
    for (number, line) in joined {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("kafka-dlq ") {
            let before = rest[..at].chars().last();
            let after = &rest[at + "kafka-dlq ".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                continue;
            }
            let end = after.find(['`', '#', '|', ';', ')']).unwrap_or(after.len());
            let words: Vec<&str> = after[..end].split_whitespace().collect();
            // The longest known subcommand path the words start with, skipping global options.
            let mut path = String::new();
            let mut index = 0;
            while index < words.len() {
                let word = words[index];
                if word == "--config" || word == "--log-format" {
                    index += 2;
                    continue;
                }
                let candidate = format!("{path} {word}").trim().to_string();
                if known.contains_key(&candidate) {
                    path = candidate;
                    index += 1;
                } else {
                    break;
                }
            }
            if path.is_empty() {
                continue;
            }
            let flags = words[index..]
                .iter()
                .filter_map(|w| w.strip_prefix("--"))
                .map(|f| f.split('=').next().unwrap().to_string())
                .filter(|f| {
                    !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                })
                .collect();
            out.push((number, path, flags));
        }
    }
    out
}

#[test]
fn every_command_line_in_the_manual_uses_flags_its_command_takes() {
    let known = commands();
    assert!(known.contains_key("dlq replay"), "{:?}", known.keys());
    let global = &known[""].flags;
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (file, text) in manual() {
        for (line, path, flags) in command_lines(&text, &known) {
            for flag in flags {
                checked += 1;
                if !known[&path].flags.contains(&flag) && !global.contains(&flag) {
                    wrong.push(format!(
                        "{}:{line}: `kafka-dlq {path}` has no --{flag}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} flags found: the parser lost them"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_flag_in_a_settings_table_is_the_binarys() {
    let known = commands();
    let all: BTreeSet<&String> = known.values().flat_map(|h| h.flags.iter()).collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    // The benchmark's tables are kafka-dlq-bench's flags.
    for (file, text) in manual()
        .iter()
        .filter(|(f, _)| !f.ends_with("benchmark.md"))
    {
        for (i, line) in text.lines().enumerate() {
            let Some(cell) = line.strip_prefix("| `--") else {
                continue;
            };
            // A build's row (`--features vendored`) is cargo's.
            if cell.starts_with("features") {
                continue;
            }
            let flag: String = cell
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            checked += 1;
            if !all.contains(&flag) {
                wrong.push(format!(
                    "{}:{}: no command takes --{flag}",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} table rows found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Variables the manual names that are not the binary's: the test script's, the tests', the
/// simulation's, and the scripts' own.
const NOT_THE_BINARYS: &[&str] = &[
    "KAFKA_DLQ_TEST_BROKERS",
    "KAFKA_DLQ_TEST_SCHEMA_REGISTRY",
    "KAFKA_DLQ_TEST_PYTHON",
    "KAFKA_DLQ_SIMULATION_SEED",
    "KAFKA_DLQ_SIMULATION_SCHEDULES",
    "KAFKA_DLQ_SIMULATION_FIRST_SEED",
    "KAFKA_DLQ_SIMULATION_TRACE",
    "KAFKA_LIBS",
    "KAFKA_VERSION",
    "KAFKA_TLS_PORT",
    "KAFKA_FEATURES",
    "KAFKA_HEAP_OPTS",
    "KAFKA_OPTS",
];

#[test]
fn every_variable_the_manual_names_is_read_by_the_binary() {
    let known = commands();
    let read: BTreeSet<&String> = known.values().flat_map(|h| h.variables.iter()).collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (file, text) in manual() {
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line
                .match_indices("KAFKA_")
                .chain(line.match_indices("SLACK_"))
            {
                if at > 0 && line.as_bytes()[at - 1].is_ascii_alphanumeric() {
                    continue;
                }
                let name: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.ends_with('_') || NOT_THE_BINARYS.contains(&name.as_str()) {
                    continue;
                }
                checked += 1;
                if !read.contains(&name) {
                    wrong.push(format!(
                        "{}:{}: nothing reads {name}",
                        file.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} variables found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The ```toml blocks of `text`, with the line each starts on.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut block: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut block {
            None if line.trim_start().starts_with("```toml") => {
                block = Some((i + 1, String::new()))
            }
            Some(_) if line.trim_start().starts_with("```") => out.push(block.take().unwrap()),
            Some((_, b)) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn every_config_file_in_the_manual_is_read_without_an_unknown_key() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (file, text) in manual() {
        for (line, block) in toml_blocks(&text) {
            checked += 1;
            let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
            std::io::Write::write_all(&mut f, block.as_bytes()).unwrap();
            let path = f.path().to_str().unwrap();
            // The file is read and every key checked before anything else is.
            let (_, _, err) = kafka_dlq(&["--config", path, "config", "check", "run"]);
            let refused = [
                "has no setting",
                "no command has this setting",
                "no command of kafka-dlq takes it",
                "unknown section",
                "not valid TOML",
                "is a setting of the library",
            ];
            if refused.iter().any(|r| err.contains(r)) {
                wrong.push(format!("{}:{line}: {}", file.display(), err.trim()));
            }
        }
    }
    assert!(checked >= 5, "only {checked} config files found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
