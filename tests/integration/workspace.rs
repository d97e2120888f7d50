//! The workspace-hack (`project/workspace-hack`) holds: every package that a step of
//! `cargo xtask test` builds on its own (a function under `cargo lambda watch`, the CLI, the
//! stress harness, an example) resolves each of its dependencies with the same features as
//! `cargo test --workspace` does, so no step compiles the AWS SDK again for a feature set of its
//! own (a cold CI run took 830 s without the hack, 570 s with it).
//!
//! `cargo hakari` (0.9.39, `.config/hakari.toml`) generates the hack; CI does not install it (a
//! cold `cargo install cargo-hakari` compiles for minutes) but checks the property it is for with
//! cargo alone: `cargo tree` (no build, offline from the lock file) for each such package against
//! the whole workspace, on this host's target. A dependency that turns on a new feature somewhere
//! fails this test with the crate and its features; `cargo hakari generate` puts them in the hack.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use crate::deploy::tools::{assert_success, repo_root, run};

/// The hack itself.
const HACK: &str = "tollgate-workspace-hack";

/// Members that must stay free of the hack, as `.config/hakari.toml`'s `[final-excludes]` names
/// them: the library (it packages alone), the small project crates below it and xtask (built
/// first, on its own small dependencies). Not checked for the property: where a test run builds
/// them alone, a build of their own is the point (the library's package, doc and feature steps;
/// xtask).
const FREE_OF_THE_HACK: [&str; 4] = ["tollgate", "tollgate-catalog", "tollgate-template", "xtask"];

/// What to run when the hack no longer holds.
const REGENERATE: &str = "cargo install cargo-hakari --version 0.9.39 --locked, then cargo \
    hakari generate && cargo hakari manage-deps (see .config/hakari.toml)";

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
        .filter(|name| name != HACK && !FREE_OF_THE_HACK.contains(&name.as_str()))
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
         compiles them (and everything above them) once more; regenerate the workspace-hack \
         ({REGENERATE}):\n{}",
        differ.join("\n")
    );
}

/// The members hakari leaves out are the ones listed above, and none of them reaches the hack,
/// not even through another member: `cargo package -p tollgate` packs the library alone, and
/// xtask builds without the AWS SDK.
#[test]
fn the_library_its_small_crates_and_xtask_stay_free_of_the_hack() {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Hakari {
        final_excludes: FinalExcludes,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct FinalExcludes {
        workspace_members: BTreeSet<String>,
    }
    let config = std::fs::read_to_string(repo_root().join(".config/hakari.toml")).unwrap();
    let hakari: Hakari = toml::from_str(&config).expect(".config/hakari.toml");
    let excluded = hakari.final_excludes.workspace_members;
    assert_eq!(
        excluded,
        BTreeSet::from(FREE_OF_THE_HACK.map(String::from)),
        ".config/hakari.toml's [final-excludes] against FREE_OF_THE_HACK here"
    );
    for member in FREE_OF_THE_HACK {
        // Every kind of edge, dev-dependencies included, and every member it reaches.
        let mut cmd = cargo();
        cmd.args(["tree", "-p", member, "--locked", "--prefix", "none"])
            .args(["--format", "{p}"]);
        let out = run(&mut cmd);
        assert_success(&cmd, &out);
        let hack = format!("{HACK} v");
        assert!(
            !String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|line| line.starts_with(&hack)),
            "{member} reaches the workspace-hack, through a line of its own (`cargo hakari \
             manage-deps` removes it) or through a member that has one"
        );
    }
}
