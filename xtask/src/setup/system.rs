//! The system prerequisites: what `setup` cannot put into its cache because it comes from the
//! system's packages (Java 17+, Node.js with npm, Python 3.10+ with venv, curl, Chromium).
//!
//! [`ensure`] runs first in every command that needs them, before anything is built or
//! downloaded: what is missing is installed with `apt-get` when this process is root and the
//! system has apt (as CI runs, and a fresh container), else the command stops with one sentence
//! that names the command to run. So `cargo xtask test` on a fresh machine either gets as far as
//! `.ci/run` does or says at once what is missing, instead of stopping at its browser step half
//! an hour in. `.ci/run` installs only Rust's own components; everything else is decided here.
//!
//! The decision reads the machine only through a [`System`] (its variables, whether we are
//! root), so tests hand it a `PATH` of stand-in `apt-get`, `java`, … scripts.

use std::collections::BTreeMap;
use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{self, bail, info, CmdExt, Result};

/// Oldest Java DynamoDB Local 3 runs on.
const MIN_JAVA: u32 = 17;

/// Oldest Python that all the pinned packages support (aws-sam-cli 1.170.0 needs 3.10;
/// cfn-lint alone would run on 3.9).
pub const MIN_PYTHON: (u32, u32) = (3, 10);

/// One system prerequisite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// DynamoDB Local.
    Java,
    /// The page's dev server, the web client's checks, and the npm downloads (DynamoDB Local's
    /// jar, the web packages).
    Node,
    /// The venv of cargo-lambda, cfn-lint and sam.
    Python,
    /// The stress harness's unit tests run a small sh + curl stand-in for a function.
    Curl,
    /// The browser tests drive Debian's Chromium (a test tool's own browser download is not
    /// possible here, and not wanted).
    Chromium,
}

impl Need {
    /// Everything: `cargo xtask setup` and `cargo xtask test`.
    pub const ALL: &'static [Need] = &[
        Need::Java,
        Need::Node,
        Need::Python,
        Need::Curl,
        Need::Chromium,
    ];
    /// What the stack needs (`cargo xtask dev`, the stress commands).
    pub const STACK: &'static [Need] = &[Need::Java, Need::Node, Need::Python];

    /// For messages.
    fn what(self) -> String {
        match self {
            Need::Java => format!("Java {MIN_JAVA}+"),
            Need::Node => "Node.js with npm".into(),
            Need::Python => format!("Python {}.{}+ with venv", MIN_PYTHON.0, MIN_PYTHON.1),
            Need::Curl => "curl".into(),
            Need::Chromium => "Chromium".into(),
        }
    }
}

/// The apt packages that provide a prerequisite, alternatives in order of preference (the
/// first that installs wins).
type Packages = &'static [&'static [&'static str]];

/// What a check found: its version line, or the packages that would provide it.
type Found = std::result::Result<String, Packages>;

/// The machine, as far as the decision goes.
pub struct System {
    /// The variables lookups read (`PATH`, `JAVA_HOME`, `CHROMIUM`) and commands run with.
    vars: BTreeMap<OsString, OsString>,
    /// Whether we may install system packages (effective uid 0).
    root: bool,
    /// Slim Debian images lack `/usr/share/man/man1`, and the JRE's postinst fails without it.
    man_dir: PathBuf,
}

impl System {
    /// This process's machine.
    pub fn real() -> System {
        System {
            vars: env::vars_os().collect(),
            root: nix::unistd::geteuid().is_root(),
            man_dir: "/usr/share/man/man1".into(),
        }
    }

    fn var(&self, name: &str) -> Option<&OsString> {
        self.vars.get(OsStr::new(name)).filter(|v| !v.is_empty())
    }

    /// `program args` with exactly this system's variables and no input.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .envs(&self.vars)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// The executable `name` on `PATH`.
    fn find(&self, name: &str) -> Option<PathBuf> {
        let mut files = env::split_paths(self.var("PATH")?).map(|dir| dir.join(name));
        files.find(|file| executable(file))
    }

    /// The `java` to run: `$JAVA_HOME/bin/java` if set (the usual way to pick a JDK), else the
    /// one on `PATH`.
    pub fn java(&self) -> PathBuf {
        let java = self.java_home().or_else(|| self.find("java"));
        java.unwrap_or_else(|| "java".into())
    }

    fn java_home(&self) -> Option<PathBuf> {
        let java = Path::new(self.var("JAVA_HOME")?).join("bin/java");
        executable(&java).then_some(java)
    }

    /// The Chromium to drive: `$CHROMIUM` if it is a file, else `chromium` (Debian's) or
    /// `chromium-browser` on `PATH`.
    pub fn chromium(&self) -> Option<PathBuf> {
        let set = self
            .var("CHROMIUM")
            .map(PathBuf::from)
            .filter(|p| p.is_file());
        set.or_else(|| self.find("chromium"))
            .or_else(|| self.find("chromium-browser"))
    }

    /// The first line `program arg` prints, if it runs and succeeds.
    fn version(&self, program: &Path, arg: &str) -> Option<String> {
        util::first_line(&mut self.command(program, &[arg]))
    }

    /// What is there of `need`; Err when it is there but unusable in a way a package install
    /// does not fix (one sentence saying what to do).
    fn state(&self, need: Need) -> Result<Found> {
        let version = |exe: &Path| self.version(exe, "--version").unwrap_or_default();
        Ok(match need {
            Need::Java => return self.java_state(),
            Need::Node => match (self.find("node"), self.find("npm")) {
                (Some(node), Some(npm)) => {
                    Ok(format!("node {}, npm {}", version(&node), version(&npm)))
                }
                _ => Err(&[&["nodejs", "npm"]]),
            },
            Need::Python => return self.python_state(),
            Need::Curl => self
                .find("curl")
                .map(|curl| version(&curl))
                .ok_or(&[&["curl"]]),
            Need::Chromium => match self.chromium() {
                Some(exe) => Ok(self
                    .version(&exe, "--version")
                    .unwrap_or_else(|| exe.display().to_string())),
                None => Err(&[&["chromium"]]),
            },
        })
    }

    fn java_state(&self) -> Result<Found> {
        // Debian 13 has no openjdk-17; its default JRE is newer, which is fine.
        const JRE: Packages = &[&["openjdk-17-jre-headless"], &["default-jre-headless"]];
        let home = self.java_home();
        let Some(java) = home.clone().or_else(|| self.find("java")) else {
            return Ok(Err(JRE));
        };
        let line = self.version(&java, "-version");
        match line.as_deref().and_then(java_major) {
            Some(major) if major >= MIN_JAVA => Ok(Ok(line.unwrap_or_default())),
            // An install would not change which Java runs.
            _ if home.is_some() => bail!(
                "JAVA_HOME points at {}, but DynamoDB Local needs Java {MIN_JAVA} or newer: point JAVA_HOME at a JDK {MIN_JAVA}+ or unset it.",
                line.unwrap_or_else(|| java.display().to_string())
            ),
            _ => Ok(Err(JRE)),
        }
    }

    fn python_state(&self) -> Result<Found> {
        let Some(python) = self.find("python3") else {
            return Ok(Err(&[&["python3", "python3-venv"]]));
        };
        let version = self.version(&python, "--version").unwrap_or_default();
        let succeeds = |code: &str| {
            let mut cmd = self.command(&python, &["-c", code]);
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .run()
                .is_ok()
        };
        // Python compares its own version: no version string to parse.
        if !succeeds(&format!(
            "import sys; sys.exit(sys.version_info < {MIN_PYTHON:?})"
        )) {
            bail!(
                "found `{version}`, but cargo-lambda, cfn-lint and aws-sam-cli need Python {}.{} or newer: put one first on PATH as `python3`.",
                MIN_PYTHON.0, MIN_PYTHON.1
            );
        }
        // Debian ships the venv machinery (ensurepip) separately.
        match succeeds("import ensurepip") {
            true => Ok(Ok(version)),
            false => Ok(Err(&[&["python3-venv"]])),
        }
    }

    /// `apt-get update` once, then each missing prerequisite's packages (an alternative only
    /// when the one before it would not install).
    fn apt_install(&self, apt: &Path, missing: &[(Need, Packages)]) -> Result {
        let apt = |args: &[&str]| {
            let mut cmd = self.command(apt, args);
            cmd.env("DEBIAN_FRONTEND", "noninteractive").run()
        };
        apt(&["update", "-qq"])?;
        for &(need, alternatives) in missing {
            if need == Need::Java {
                fs::create_dir_all(&self.man_dir)?;
            }
            let mut last = Ok(());
            for packages in alternatives {
                info(format!(
                    "{}: apt-get install {}",
                    need.what(),
                    packages.join(" ")
                ));
                let install = ["install", "-y", "-qq", "--no-install-recommends"];
                last = apt(&[&install[..], packages].concat());
                if last.is_ok() {
                    break;
                }
            }
            last?;
        }
        Ok(())
    }
}

/// Makes sure every one of `needs` is there: installs what is missing with apt-get when root,
/// else fails with one sentence naming the command to run. Prints what it found.
pub fn ensure(sys: &System, needs: &[Need]) -> Result {
    let mut missing = Vec::new();
    for &need in needs {
        if let Err(packages) = sys.state(need)? {
            missing.push((need, packages));
        }
    }
    if !missing.is_empty() {
        match (sys.root, sys.find("apt-get")) {
            (true, Some(apt)) => sys.apt_install(&apt, &missing)?,
            (root, apt) => bail!(refusal(&missing, root, apt.is_some())),
        }
    }
    for &need in needs {
        let Ok(version) = sys.state(need)? else {
            bail!(
                "{} is still missing after its apt-get install.",
                need.what()
            );
        };
        info(format!("{:<24}{version}", format!("{}:", need.what())));
    }
    Ok(())
}

/// The one sentence for prerequisites that are missing and that this process may not install.
fn refusal(missing: &[(Need, Packages)], root: bool, apt: bool) -> String {
    let names: Vec<String> = missing.iter().map(|(n, _)| n.what()).collect();
    let names = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    };
    let packages: Vec<String> = missing.iter().map(|(_, alts)| alts[0].join(" ")).collect();
    let packages = packages.join(" ");
    let (verb, them) = match missing.len() {
        1 => ("is", "it"),
        _ => ("are", "them"),
    };
    // Debian 13 and later have no openjdk-17.
    let jre = "default-jre-headless instead of openjdk-17-jre-headless on Debian 13 and later";
    let (paren, comma) = match missing.iter().any(|(n, _)| *n == Need::Java) {
        true => (format!(" ({jre})"), format!(", {jre}")),
        false => Default::default(),
    };
    match (root, apt) {
        (false, true) => format!(
            "{names} {verb} missing and installing {them} needs root: run `sudo apt-get install {packages}`{paren}, or run this command as root, which installs {them} itself."
        ),
        _ => format!(
            "{names} {verb} missing and there is no apt-get here to install {them}: install {them} with this system's package manager (on Debian: `apt-get install {packages}`{comma})."
        ),
    }
}

/// The major version in `java -version`'s first line: 8 for `"1.8.0_392"`, 17 for
/// `"17.0.15"`, 21 for `"21-ea"`.
fn java_major(line: &str) -> Option<u32> {
    let mut parts = line.split('"').nth(1)?.split(['.', '-', '_', '+']);
    let first = parts.next()?;
    let major = if first == "1" { parts.next()? } else { first };
    major.parse().ok()
}

fn executable(file: &Path) -> bool {
    fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stand_in::StandIn;

    /// Everything present except Chromium: Java 17, node and npm, Python with ensurepip, curl;
    /// and an `apt-get` that "installs" `chromium` by writing a stand-in one.
    fn all_but_chromium(name: &str) -> StandIn {
        let machine = StandIn::new(name);
        let chromium = machine.bin().join("chromium");
        let chromium = chromium.display();
        machine
            .script("java", r#"echo 'openjdk version "17.0.15" 2025-04-15' >&2"#)
            .script("node", "echo v20.19.2")
            .script("npm", "echo 9.2.0")
            .script("python3", "echo Python 3.11.2")
            .script("curl", "echo curl 7.88.1")
            .script(
                "apt-get",
                &format!(
                    r#"case "$*" in *install*chromium*)
  printf '#!/bin/sh\necho Chromium 140.0\n' > '{chromium}'; /bin/chmod +x '{chromium}';;
esac"#
                ),
            );
        machine
    }

    /// The machine with `PATH` = the stand-ins' `bin/` alone.
    fn system(machine: &StandIn, root: bool) -> System {
        let vars = [("PATH".into(), machine.bin().into_os_string())];
        let man_dir = machine.dir.join("man1");
        System {
            vars: vars.into(),
            root,
            man_dir,
        }
    }

    /// The calls that change the machine: anything but a version query.
    fn installs(machine: &StandIn) -> Vec<String> {
        let queries = ["--version", "-version", "-c "];
        let mut calls = machine.calls();
        calls.retain(|c| !queries.iter().any(|q| c.contains(q)));
        calls
    }

    const INSTALL: &str = "apt-get install -y -qq --no-install-recommends";

    /// Once installed, nothing is missing: the next run installs nothing.
    #[test]
    fn missing_chromium_as_root_is_installed_with_apt_get_once() {
        let machine = all_but_chromium("root");
        let install = format!("{INSTALL} chromium");
        for root in [true, false] {
            ensure(&system(&machine, root), Need::ALL).unwrap();
            assert_eq!(installs(&machine), ["apt-get update -qq", &install]);
        }
    }

    #[test]
    fn missing_chromium_not_as_root_stops_with_one_sentence_and_installs_nothing() {
        let machine = all_but_chromium("user");
        let err = ensure(&system(&machine, false), Need::ALL)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`sudo apt-get install chromium`"), "{err}");
        assert_eq!(err.matches(". ").count(), 0, "one sentence: {err}");
        assert!(err.starts_with("Chromium is missing"), "{err}");
        assert_eq!(installs(&machine), [""; 0], "nothing installed or built");
    }

    #[test]
    fn without_apt_get_the_sentence_names_the_packages() {
        let machine = StandIn::new("no-apt");
        machine.script("node", "echo v20").script("npm", "echo 9");
        let needs = [Need::Java, Need::Node, Need::Chromium];
        let err = ensure(&system(&machine, true), &needs)
            .unwrap_err()
            .to_string();
        let start = "Java 17+ and Chromium are missing and there is no apt-get";
        assert!(err.starts_with(start), "{err}");
        let install = "`apt-get install openjdk-17-jre-headless chromium`";
        assert!(
            err.contains(install) && err.contains("default-jre-headless"),
            "{err}"
        );
        assert_eq!(installs(&machine), [""; 0]);
    }

    /// Java 11 on PATH as root: openjdk-17 first; where it is not to be had (Debian 13+), the
    /// default JRE. Python without ensurepip gets python3-venv, and nothing else is touched.
    #[test]
    fn an_old_java_and_a_python_without_venv_are_installed_in_turn() {
        let machine = all_but_chromium("old-java");
        let java = machine.bin().join("java");
        let java = java.display();
        machine
            .script("java", r#"echo 'openjdk version "11.0.2" 2019-01-15' >&2"#)
            .script(
                "python3",
                r#"case "$*" in *ensurepip*) exit 1;; *) echo Python 3.11.2;; esac"#,
            )
            .script(
                "apt-get",
                &format!(
                    r#"case "$*" in
  *openjdk-17*) exit 100;;
  *default-jre*) printf '#!/bin/sh\necho "openjdk version \\"21.0.8\\"" >&2\n' > '{java}';;
  *python3-venv*) exit 0;;
esac"#
                ),
            );
        let err = ensure(&system(&machine, true), &[Need::Java, Need::Python]).unwrap_err();
        let packages = [
            "openjdk-17-jre-headless",
            "default-jre-headless",
            "python3-venv",
        ];
        let mut expected = vec!["apt-get update -qq".to_string()];
        expected.extend(packages.map(|p| format!("{INSTALL} {p}")));
        assert_eq!(installs(&machine), expected);
        assert!(
            machine.dir.join("man1").is_dir(),
            "the JRE's postinst needs it"
        );
        // The stand-in python3-venv installed nothing, which is said as such.
        let still = "Python 3.10+ with venv is still missing";
        assert!(err.to_string().contains(still), "{err}");
    }

    #[test]
    fn chromium_from_the_variable_or_the_path() {
        let machine = StandIn::new("chromium");
        let mut sys = system(&machine, false);
        assert_eq!(sys.chromium(), None);
        machine.script("chromium-browser", "");
        assert_eq!(sys.chromium(), Some(machine.bin().join("chromium-browser")));
        let own = machine.dir.join("own-chromium");
        fs::write(&own, "").unwrap();
        sys.vars.insert("CHROMIUM".into(), own.clone().into());
        assert_eq!(sys.chromium(), Some(own));
    }

    #[test]
    fn java_versions() {
        let major = |version: &str| java_major(&format!(r#"openjdk version "{version}" 2025"#));
        assert_eq!(major("17.0.15"), Some(17));
        assert_eq!(major("1.8.0_392"), Some(8));
        assert_eq!(major("21-ea"), Some(21));
        assert_eq!(java_major("no java here"), None);
    }
}
