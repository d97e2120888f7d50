//! The workspace-hack (`project/workspace-hack`) holds: every package that a step of
//! `cargo xtask test` builds on its own (a function under `cargo lambda watch`, the CLI, the
//! stress harness, an example) resolves each of its dependencies with the same features as
//! `cargo test --workspace` does, so no step compiles the AWS SDK again for a feature set of its
//! own (a cold CI run took 830 s without the hack, 570 s with it).
//!
//! Kept by hand, checked here: `cargo tree` (no build, offline from the lock file) for each such
//! package against the whole workspace, on this host's target. A dependency that turns on a new
//! feature somewhere fails this test with the crate and its features to add to the hack.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use crate::deploy::tools::{assert_success, repo_root, run};

/// Members cargo never builds on their own in a test run, or that must stay free of the hack:
/// the library (it packages alone), the small project crates below it, xtask (built first, on
/// its own small dependencies) and the hack itself.
const NOT_CHECKED: [&str; 5] = [
    "tollgate",
    "tollgate-catalog",
    "tollgate-template",
    "tollgate-workspace-hack",
    "xtask",
];

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(repo_root());
    cmd
}

/// `(package and version, its features)` for every dependency of `selection`, as cargo
/// resolves them when it builds that selection.
fn resolved(selection: &[&str]) -> BTreeSet<String> {
    let mut cmd = cargo();
    cmd.arg("tree")
        .args(selection)
        .args(["--locked", "-e", "normal,build", "--prefix", "none"])
        .args(["--format", "{p}|{f}"]);
    let out = run(&mut cmd);
    assert_success(&cmd, &out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // A package seen before is marked `(*)`; workspace members carry their path.
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .filter(|l| !l.contains(" (/"))
        .collect()
}

fn members() -> Vec<String> {
    let mut cmd = cargo();
    cmd.args(["metadata", "--no-deps", "--format-version", "1", "--locked"]);
    let out = run(&mut cmd);
    assert_success(&cmd, &out);
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .filter(|name| !NOT_CHECKED.contains(&name.as_str()))
        .collect()
}

#[test]
fn every_package_built_alone_resolves_its_dependencies_as_the_workspace_does() {
    let workspace = resolved(&["--workspace"]);
    let members = members();
    assert!(
        members.iter().any(|m| m == "transfer") && members.len() >= 8,
        "{members:?}"
    );
    let mut differ = Vec::new();
    for member in &members {
        for line in resolved(&["-p", member]).difference(&workspace) {
            differ.push(format!("{member}: {line}"));
        }
    }
    assert!(
        differ.is_empty(),
        "built alone, these resolve other features than `cargo test --workspace` does, so a step \
         compiles them (and everything above them) once more; add the workspace's features to \
         project/workspace-hack/Cargo.toml:\n{}",
        differ.join("\n")
    );
}
