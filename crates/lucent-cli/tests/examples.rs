//! Every example a user is shown runs: each `lucent … --help`'s examples (found by
//! walking the subcommands) and every `lucent` command in the README, each through
//! `sh -c` in one scratch folder (so pipes and redirections work, and a run folder one
//! example writes is there for the next), with the built `lucent` first on the PATH.
//!
//! One thing is changed, and only this: a training example gets `--minutes 0.05` (three
//! seconds instead of its 5–15 minutes; the budget logic is the same). The files an
//! example reads (`examples/speech.wav`, `benches/sentences.txt`) are the repo's own,
//! copied to the same relative paths: nothing is supplied by hand. Training examples
//! run first, since `generate -m runs/moby` and `attention -m runs/reverse` read their
//! runs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn lucent() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lucent"))
}

fn help(args: &[&str]) -> String {
    let out = Command::new(lucent())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "lucent {args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists (the words under "Commands:", `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line starts two spaces in; wrapped description lines further.
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .map(str::to_string)
        .collect()
}

/// The example commands of a help text: the lines of an `Examples:` block that run
/// `lucent` (a trailing comment after two spaces dropped), and `Example: <command>`.
fn examples(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in help.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Example:") {
            let rest = rest.trim();
            if rest.contains("lucent ") {
                out.push(rest.to_string());
            } else {
                in_block = true;
            }
            continue;
        }
        if t.starts_with("Examples:") {
            in_block = true;
            continue;
        }
        if in_block {
            if !line.starts_with("  ") || t.is_empty() {
                in_block = false;
                continue;
            }
            if t.contains("lucent ") {
                // A comment after the command is separated by two or more spaces
                // (outside quotes: no example quotes two spaces).
                let cmd = t.split("  ").next().unwrap_or(t).trim();
                out.push(cmd.to_string());
            }
        }
    }
    out
}

/// Every example of every help text, walking the subcommand tree.
fn all_help_examples() -> Vec<String> {
    let mut found = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = stack.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&args);
        found.extend(examples(&h));
        for sub in subcommands(&h) {
            let mut p = path.clone();
            p.push(sub);
            stack.push(p);
        }
    }
    found
}

/// The `lucent` commands the README shows: in code blocks (`cargo run --release --`
/// stands for `lucent`; the test command itself is left out) and in the commands
/// table's example column.
fn readme_examples() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let mut out = Vec::new();
    let mut in_code = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            let cmd = line.split(" #").next().unwrap_or(line).trim();
            if let Some(rest) = cmd.strip_prefix("cargo run --release -- ") {
                out.push(format!("lucent {rest}"));
            } else if cmd.starts_with("lucent ") {
                out.push(cmd.to_string());
            }
            continue;
        }
        if line.starts_with('|') {
            for cell in line.split('|') {
                let c = cell.trim();
                if let Some(cmd) = c.strip_prefix("`lucent ").and_then(|c| c.strip_suffix('`')) {
                    out.push(format!("lucent {cmd}"));
                }
            }
        }
    }
    out
}

/// The example as the test runs it (see the module doc for what changes).
fn as_run(cmd: &str) -> String {
    if cmd.contains("lucent train ") {
        let cmd = match cmd.find("--minutes ") {
            Some(at) => {
                let rest = &cmd[at + "--minutes ".len()..];
                let end = rest.find(' ').unwrap_or(rest.len());
                format!("{}--minutes 0.05{}", &cmd[..at], &rest[end..])
            }
            None => format!("{cmd} --minutes 0.05"),
        };
        return cmd;
    }
    cmd.to_string()
}

#[test]
fn every_help_and_readme_example_runs() {
    let dir = std::env::temp_dir().join(format!("lucent-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The files the examples read are the repo's own, at the same relative paths as in a
    // fresh clone (`lucent transcribe examples/speech.wav`, made by
    // scripts/make-speech-sample.sh; `lucent embed --file benches/sentences.txt`;
    // `lucent generate --json-schema examples/city.schema.json`): none
    // is written by hand.
    for file in [
        "examples/speech.wav",
        "benches/sentences.txt",
        "examples/city.schema.json",
        "examples/arithmetic.lark",
    ] {
        let to = dir.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(file),
            to,
        )
        .unwrap();
    }

    let mut cmds = all_help_examples();
    cmds.extend(readme_examples());
    assert!(
        cmds.len() > 40,
        "found only {} examples: {cmds:?}",
        cmds.len()
    );
    // Training first (other examples read its runs), each command once.
    let mut seen = std::collections::HashSet::new();
    cmds.retain(|c| seen.insert(c.clone()));
    cmds.sort_by_key(|c| {
        if c.contains("--resume") {
            1
        } else if c.contains("lucent train ") {
            0
        } else {
            2
        }
    });
    let bin_dir = lucent().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for cmd in &cmds {
        let run = as_run(cmd);
        let out = Command::new("sh")
            .arg("-c")
            .arg(&run)
            .current_dir(&dir)
            .env("PATH", &path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{run}\n  → {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("(no output)")
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {} examples failed:\n{}",
        failures.len(),
        cmds.len(),
        failures.join("\n")
    );
}

#[test]
fn every_help_shows_its_defaults() {
    // A flag whose value has a default says so: clap prints `[default: …]` for the ones
    // it knows, and the others write theirs into the text.
    let mut stack: Vec<Vec<String>> = vec![vec![]];
    let mut missing = Vec::new();
    while let Some(path) = stack.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&args);
        for sub in subcommands(&h) {
            let mut p = path.clone();
            p.push(sub);
            stack.push(p);
        }
        // Options with a value (`--x <X>`), each with its description (which may wrap,
        // or come on the following lines, with a blank line before clap's `[default]`);
        // required ones (in the usage line) need no default.
        let usage = h.lines().find(|l| l.starts_with("Usage:")).unwrap_or("");
        let is_option = |l: &str| {
            let indent = l.len() - l.trim_start().len();
            (2..=6).contains(&indent) && l.trim_start().starts_with('-')
        };
        let mut lines = h.lines().peekable();
        while let Some(l) = lines.next() {
            let t = l.trim_start();
            if !is_option(l) || !t.contains(" <") {
                continue;
            }
            let mut text = t.to_string();
            while let Some(next) = lines.peek() {
                if is_option(next) || (!next.is_empty() && !next.starts_with(' ')) {
                    break;
                }
                text.push(' ');
                text.push_str(next.trim());
                lines.next();
            }
            let flag = t.split(" <").next().unwrap_or(t);
            let long = flag.rsplit(", ").next().unwrap_or(flag);
            if usage.contains(&format!("{long} <")) {
                continue;
            }
            let optional_by_nature = ["--json", "--png", "--out", "--resume", "--file"]
                .iter()
                .any(|f| t.starts_with(f) || t.contains(&format!(", {f}")));
            if !text.contains("default") && !text.contains("required unless") && !optional_by_nature
            {
                missing.push(format!("lucent {}: {}", args.join(" "), t));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "options without a stated default:\n{}",
        missing.join("\n")
    );
}
