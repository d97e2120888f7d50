//! The guard crate `tollgate` checked as a published crate would be, in the lint step of
//! `cargo xtask test`:
//!
//! - **msrv**: every crate in its dependency tree (normal and build dependencies, every
//!   platform; not its dev-dependencies, which an adopter never builds) declares a
//!   `rust-version` no later than tollgate's own, or none. Only one toolchain is installed, so
//!   the crate itself cannot be built with the stated version; clippy's `incompatible_msrv`
//!   (on by default, and `-D warnings` in the clippy step) catches our own use of a newer std
//!   API, and this catches a dependency that would refuse the stated toolchain. Neither sees a
//!   language feature newer than the MSRV in our code: building with that toolchain would.
//! - **features**: `cargo clippy -p tollgate --all-targets --no-default-features` with no
//!   feature, with each feature alone (read from the manifest, so a new one is checked without
//!   a change here) and with the set `tollgate::gate::Gate` needs alone, warnings denied: an
//!   adopter who turns off what it does not use gets a crate that builds warning-free. Every
//!   feature at once is the clippy step's (the workspace builds the defaults). In check mode
//!   each set recompiles tollgate alone (seconds): the dependencies' metadata is reused.
//! - **doc**: `cargo doc -p tollgate --no-deps` with warnings denied (broken or private links,
//!   `missing_docs` is the crate's own `deny`). It checks the crate's dependencies with
//!   tollgate's features alone, as an adopter's build has them.
//! - **package**: `cargo package -p tollgate --no-verify`, which packs the crate as it would
//!   be published (a path dependency fails here), then `cargo check` of the packed copy on its
//!   own, outside the workspace, so a file left out of the package or a feature only the
//!   workspace turned on fails too. Cargo's own verify step builds the packed copy instead
//!   (code generation too): cold, that compiles every dependency once more (7 min on 2 shared
//!   cores), where the check reuses the dependencies the doc step just checked with the same
//!   features and profile (seconds). A library is not linked, so a check misses nothing a
//!   build of it would catch but a code generation bug of the compiler.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::util::{self, bail, CmdExt, Context, Result};

/// The crate these checks are about.
const CRATE: &str = "tollgate";

/// The part of `cargo metadata --format-version 1` read here.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    packages: Vec<Package>,
    resolve: Resolve,
}

#[derive(Debug, Deserialize)]
struct Package {
    id: String,
    name: String,
    version: String,
    rust_version: Option<String>,
    #[serde(default)]
    features: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Debug, Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

/// `kind` is `null` for a normal dependency, `"build"` or `"dev"` otherwise.
#[derive(Debug, Deserialize)]
struct DepKind {
    kind: Option<String>,
}

impl Metadata {
    /// The workspace's, as `cargo metadata` gives it.
    fn read() -> Result<Metadata> {
        let mut cmd = util::cargo();
        cmd.args(["metadata", "--format-version", "1", "--locked"]);
        Ok(serde_json::from_str(&cmd.stderr(Stdio::inherit()).read()?)?)
    }

    fn package(&self, name: &str) -> Result<&Package> {
        let mut packages = self.packages.iter();
        packages
            .find(|p| p.name == name)
            .with_context(|| format!("no package {name} in cargo metadata"))
    }
}

/// A Rust version as manifests write it (`1.85`, `1.85.0`); a missing part is 0, so `1.85`
/// and `1.85.0` are the same version.
fn version(s: &str) -> Result<[u64; 3]> {
    let mut parsed = [0; 3];
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 3 {
        bail!("rust-version {s:?} has more than three parts");
    }
    for (slot, part) in parsed.iter_mut().zip(parts) {
        *slot = part
            .parse()
            .with_context(|| format!("rust-version {s:?}"))?;
    }
    Ok(parsed)
}

/// The crates in `root`'s dependency tree whose `rust-version` is later than `root`'s, as
/// `name version (rust-version X)` lines; an error if `root` states none.
pub fn newer_than_msrv(metadata: &Metadata, root: &str) -> Result<Vec<String>> {
    let packages: HashMap<&str, &Package> = metadata.packages.iter().map(|p| (&*p.id, p)).collect();
    let nodes: HashMap<&str, &Node> = metadata.resolve.nodes.iter().map(|n| (&*n.id, n)).collect();
    let root = metadata.package(root)?;
    let msrv = root
        .rust_version
        .as_deref()
        .with_context(|| format!("{} states no rust-version", root.name))?;
    let msrv = version(msrv)?;
    let (mut seen, mut stack) = (BTreeSet::new(), vec![root.id.as_str()]);
    while let Some(id) = stack.pop() {
        if seen.insert(id) {
            let node = nodes
                .get(id)
                .with_context(|| format!("{id} is not in the resolve graph"))?;
            let used = node
                .deps
                .iter()
                .filter(|d| d.dep_kinds.iter().any(|k| k.kind.as_deref() != Some("dev")));
            stack.extend(used.map(|d| d.pkg.as_str()));
        }
    }
    let mut newer = Vec::new();
    for id in seen {
        let package = packages
            .get(id)
            .with_context(|| format!("{id} is not among the packages"))?;
        if let Some(theirs) = &package.rust_version {
            if version(theirs)? > msrv {
                newer.push(format!(
                    "{} {} (rust-version {theirs})",
                    package.name, package.version
                ));
            }
        }
    }
    newer.sort();
    Ok(newer)
}

/// The `msrv` lint step: fails naming every dependency that needs a later Rust than stated.
pub fn msrv() -> Result {
    let newer = newer_than_msrv(&Metadata::read()?, CRATE)?;
    if !newer.is_empty() {
        let newer = newer.join("\n  ");
        bail!("{CRATE}'s rust-version is earlier than these dependencies need:\n  {newer}");
    }
    util::info(format!(
        "every dependency of {CRATE} builds with its stated rust-version"
    ));
    Ok(())
}

/// The features `Gate` needs, checked together without the others.
const GATE_FEATURES: &str = "ratelimit,kill-switch";

/// The feature sets the features step checks, each as `--features` takes it (`""`: none):
/// none, each feature of `features` alone but `default`, in name order, then `extra`.
pub fn feature_sets<'a>(
    features: &'a BTreeMap<String, Vec<String>>,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let alone = features.keys().filter(|f| *f != "default");
    let sets = alone.map(String::as_str).chain(extra.iter().copied());
    std::iter::once("").chain(sets).collect()
}

/// The `features` lint step: clippy over each feature set of [`feature_sets`], warnings denied.
/// Every set is checked, whatever an earlier one gave; the step fails naming each that failed.
pub fn features() -> Result {
    let metadata = Metadata::read()?;
    let mut failed = Vec::new();
    for set in feature_sets(&metadata.package(CRATE)?.features, &[GATE_FEATURES]) {
        let name = if set.is_empty() { "no feature" } else { set };
        util::info(format!("features: {name}"));
        let mut cmd = util::cargo();
        let clippy = format!("clippy -p {CRATE} --locked --all-targets --no-default-features");
        cmd.args(clippy.split(' '));
        if !set.is_empty() {
            cmd.args(["--features", set]);
        }
        if let Err(e) = cmd.args(["--", "-D", "warnings"]).run() {
            eprintln!("error: {e}");
            failed.push(name);
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => bail!("{CRATE} fails with features: {}", failed.join("; ")),
    }
}

/// The `package` lint step: pack, unpack into a scratch directory, check there alone.
pub fn package() -> Result {
    // The working tree is what is checked, committed or not (a local run before a commit).
    let pack = format!("package -p {CRATE} --locked --allow-dirty --no-verify");
    util::cargo().args(pack.split(' ')).run()?;
    let packed = format!("{CRATE}-{}", Metadata::read()?.package(CRATE)?.version);
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
    let target = target.unwrap_or_else(|| util::workspace_root().join("target"));
    let scratch = std::env::temp_dir().join(format!("tollgate-packed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let crate_file = target.join(format!("package/{packed}.crate"));
    let mut tar = Command::new("tar");
    tar.arg("-xzf").arg(crate_file).arg("-C").arg(&scratch);
    let checked = tar.run().and_then(|()| {
        let mut check = util::cargo();
        check.current_dir(scratch.join(&packed));
        check.env("CARGO_TARGET_DIR", &target);
        // The workspace's dev profile (the packed manifest has none), so the check shares the
        // workspace's dependency artifacts.
        let profile = [
            "profile.dev.debug=\"line-tables-only\"",
            "profile.dev.package.\"*\".debug=false",
        ];
        let config = profile.iter().flat_map(|p| ["--config", p]);
        check.args(["check", "--locked"]).args(config).run()
    });
    let _ = std::fs::remove_dir_all(&scratch);
    checked
}

/// The `doc` lint step.
pub fn doc() -> Result {
    let mut cmd = util::cargo();
    cmd.args(["doc", "-p", CRATE, "--no-deps", "--locked"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .run()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `root` 1.85 → `a` (normal, 1.85.0) → `c` (build, 1.90); `root` → `b` (dev only, 1.99);
    /// `b` → `d` (normal, 1.99); `a` → `e` (no rust-version).
    fn metadata(root_msrv: Option<&str>) -> Metadata {
        let package = |id: &str, rv: Option<&str>| serde_json::json!({"id": id, "name": id, "version": "1.0.0", "rust_version": rv});
        let dep = |pkg: &str, kind: Option<&str>| serde_json::json!({"pkg": pkg, "dep_kinds": [{"kind": kind, "target": null}]});
        let value = serde_json::json!({
            "packages": [
                package("root", root_msrv),
                package("a", Some("1.85.0")),
                package("b", Some("1.99")),
                package("c", Some("1.90")),
                package("d", Some("1.99")),
                package("e", None),
            ],
            "resolve": {"nodes": [
                {"id": "root", "deps": [dep("a", None), dep("b", Some("dev"))]},
                {"id": "a", "deps": [dep("c", Some("build")), dep("e", None)]},
                {"id": "b", "deps": [dep("d", None)]},
                {"id": "c", "deps": []},
                {"id": "d", "deps": []},
                {"id": "e", "deps": []},
            ]},
        });
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_build_dependency_counts_and_dev_dependencies_do_not() {
        let newer = newer_than_msrv(&metadata(Some("1.85")), "root").unwrap();
        assert_eq!(newer, ["c 1.0.0 (rust-version 1.90)"]);
        let newer = newer_than_msrv(&metadata(Some("1.90.0")), "root").unwrap();
        assert!(
            newer.is_empty(),
            "nothing is newer when the msrv is late enough: {newer:?}"
        );
        assert!(
            newer_than_msrv(&metadata(None), "root").is_err(),
            "no stated msrv is refused"
        );
    }

    #[test]
    fn feature_sets_are_none_then_each_alone_then_the_extra_ones() {
        let features = serde_json::json!({"default": ["b", "a"], "b": [], "a": ["dep:x"]});
        let features: BTreeMap<String, Vec<String>> = serde_json::from_value(features).unwrap();
        assert_eq!(feature_sets(&features, &["a,b"]), ["", "a", "b", "a,b"]);
    }

    #[test]
    fn versions_compare_by_number_with_missing_parts_as_zero() {
        assert_eq!(version("1.85").unwrap(), version("1.85.0").unwrap());
        assert!(version("1.100").unwrap() > version("1.99.9").unwrap());
        assert!(version("1.94.1").unwrap() > version("1.94").unwrap());
        assert!(version("one").is_err());
    }
}
