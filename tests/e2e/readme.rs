//! The README's "Try it" examples, run as written against the stack: a README that drifts from
//! the code fails here.
//!
//! The commands between `<!-- e2e:begin -->` and `<!-- e2e:end -->` run in `bash -euo
//! pipefail` from a scratch directory holding the stack's `.dev/env` (what `source .dev/env`
//! reads), with the built `tollgate` CLI first on `PATH`. Every `curl` there uses
//! `--fail-with-body`, so an unexpected status fails the run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::stack::{session_lock, stack_file};

const BEGIN: &str = "<!-- e2e:begin -->";
const END: &str = "<!-- e2e:end -->";

/// The shell commands of the marked part of the README.
fn readme_commands(readme: &str) -> String {
    let start = readme.find(BEGIN).expect("README has an e2e:begin marker") + BEGIN.len();
    let end = readme[start..]
        .find(END)
        .expect("README has an e2e:end marker")
        + start;
    let mut commands = String::new();
    let mut in_block = false;
    for line in readme[start..end].lines() {
        match line.trim() {
            "```sh" => in_block = true,
            "```" => in_block = false,
            _ if in_block => {
                commands.push_str(line);
                commands.push('\n');
            }
            _ => {}
        }
    }
    assert!(
        commands.contains("curl"),
        "the marked part has shell blocks"
    );
    commands
}

/// `target/debug`, where the dev stack built the `tollgate` binary.
pub(crate) fn cli_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    assert!(
        debug.join("tollgate").is_file(),
        "no tollgate binary in {}: the dev stack builds it",
        debug.display()
    );
    debug
}

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn the_readme_examples_work_as_written() {
    let _one_at_a_time = session_lock();
    let readme = tollgate_tests::workspace_root().join("README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let commands = readme_commands(&readme);

    let scratch = std::env::temp_dir().join(format!("tollgate-readme-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join(".dev")).unwrap();
    let env_file = stack_file().with_file_name("env");
    std::fs::copy(&env_file, scratch.join(".dev/env"))
        .unwrap_or_else(|e| panic!("{}: {e} (the dev stack writes it)", env_file.display()));

    let path = format!(
        "{}:{}",
        cli_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &commands])
        .current_dir(&scratch)
        .env("PATH", path)
        .output()
        .expect("bash runs");
    let _ = std::fs::remove_dir_all(&scratch);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's commands failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // Compare with white space folded: the CLI aligns its `name: value` lines.
    let folded = stdout
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    for expected in [
        "\"client_secret\":\"ek_",
        "http/1.1 201",
        "idempotent-replayed: true",
        "enabled: true",
        "enabled: false",
    ] {
        assert!(
            folded.contains(expected),
            "{expected:?} missing from the README run:\n{stdout}"
        );
    }
}
