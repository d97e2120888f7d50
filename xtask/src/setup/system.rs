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
//! root), so tests hand it a fake `PATH` with fake `apt-get`, `java`, … scripts.

use std::collections::BTreeMap;
use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{info, Result};

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

/// What a check found.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// There, with its version line.
    Present(String),
    /// Missing; the apt packages that provide it, alternatives in order of preference (the
    /// first that installs wins).
    Missing(&'static [&'static [&'static str]]),
    /// There but unusable in a way a package install does not fix: one sentence saying what to do.
    Unusable(String),
}

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

    fn var(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .get(OsStr::new(name))
            .map(OsString::as_os_str)
            .filter(|v| !v.is_empty())
    }

    /// `program` with exactly this system's variables.
    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear().envs(&self.vars);
        cmd
    }

    /// The executable `name` on `PATH`.
    fn find(&self, name: &str) -> Option<PathBuf> {
        let path = self.var("PATH")?;
        env::split_paths(path)
            .map(|dir| dir.join(name))
            .find(|file| executable(file))
    }

    /// The `java` to run: `$JAVA_HOME/bin/java` if set (the usual way to pick a JDK), else the
    /// one on `PATH`.
    pub fn java(&self) -> PathBuf {
        self.java_home()
            .or_else(|| self.find("java"))
            .unwrap_or_else(|| "java".into())
    }

    fn java_home(&self) -> Option<PathBuf> {
        let java = Path::new(self.var("JAVA_HOME")?).join("bin").join("java");
        executable(&java).then_some(java)
    }

    /// The Chromium to drive: `$CHROMIUM` if it is a file, else `chromium` (Debian's) or
    /// `chromium-browser` on `PATH`.
    pub fn chromium(&self) -> Option<PathBuf> {
        let set = self.var("CHROMIUM").map(PathBuf::from);
        set.filter(|p| p.is_file())
            .or_else(|| self.find("chromium"))
            .or_else(|| self.find("chromium-browser"))
    }

    /// The first line `program args` prints (stdout, else stderr: `java -version` writes
    /// there), if it runs and succeeds.
    fn first_line(&self, program: &Path, args: &[&str]) -> Option<String> {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let text = [out.stdout, out.stderr]
            .into_iter()
            .find(|t| !t.is_empty())?;
        let line = String::from_utf8_lossy(&text)
            .lines()
            .next()?
            .trim()
            .to_string();
        Some(line)
    }

    /// Whether `program args` runs and exits 0 (its output unseen).
    fn succeeds(&self, program: &Path, args: &[&str]) -> bool {
        let mut cmd = self.command(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.status().is_ok_and(|s| s.success())
    }

    fn state(&self, need: Need) -> State {
        match need {
            Need::Java => self.java_state(),
            Need::Node => match (self.find("node"), self.find("npm")) {
                (Some(node), Some(npm)) => {
                    let node = self.first_line(&node, &["--version"]).unwrap_or_default();
                    let npm = self.first_line(&npm, &["--version"]).unwrap_or_default();
                    State::Present(format!("node {node}, npm {npm}"))
                }
                _ => State::Missing(&[&["nodejs", "npm"]]),
            },
            Need::Python => self.python_state(),
            Need::Curl => match self.find("curl") {
                Some(curl) => {
                    State::Present(self.first_line(&curl, &["--version"]).unwrap_or_default())
                }
                None => State::Missing(&[&["curl"]]),
            },
            Need::Chromium => match self.chromium() {
                Some(chromium) => {
                    let line = self.first_line(&chromium, &["--version"]);
                    State::Present(line.unwrap_or_else(|| chromium.display().to_string()))
                }
                None => State::Missing(&[&["chromium"]]),
            },
        }
    }

    fn java_state(&self) -> State {
        // Debian 13 has no openjdk-17; its default JRE is newer, which is fine.
        const JRE: &[&[&str]] = &[&["openjdk-17-jre-headless"], &["default-jre-headless"]];
        let (java, from_home) = match self.java_home() {
            Some(java) => (java, true),
            None => match self.find("java") {
                Some(java) => (java, false),
                None => return State::Missing(JRE),
            },
        };
        let line = self.first_line(&java, &["-version"]);
        let major = line.as_deref().and_then(java_major);
        match major {
            Some(major) if major >= MIN_JAVA => State::Present(line.unwrap_or_default()),
            // An install would not change which Java runs.
            _ if from_home => State::Unusable(format!(
                "JAVA_HOME points at {}, but DynamoDB Local needs Java {MIN_JAVA} or newer: point JAVA_HOME at a JDK {MIN_JAVA}+ or unset it.",
                line.unwrap_or_else(|| java.display().to_string())
            )),
            _ => State::Missing(JRE),
        }
    }

    fn python_state(&self) -> State {
        let Some(python) = self.find("python3") else {
            return State::Missing(&[&["python3", "python3-venv"]]);
        };
        let version = self.first_line(&python, &["--version"]).unwrap_or_default();
        // Python compares its own version: no version string to parse.
        let check = format!("import sys; sys.exit(sys.version_info < {MIN_PYTHON:?})");
        if !self.succeeds(&python, &["-c", &check]) {
            return State::Unusable(format!(
                "found `{version}`, but cargo-lambda, cfn-lint and aws-sam-cli need Python {}.{} or newer: put one first on PATH as `python3`.",
                MIN_PYTHON.0, MIN_PYTHON.1
            ));
        }
        // Debian ships the venv machinery (ensurepip) separately.
        match self.succeeds(&python, &["-c", "import ensurepip"]) {
            true => State::Present(version),
            false => State::Missing(&[&["python3-venv"]]),
        }
    }

    /// `apt-get update` once, then each missing prerequisite's packages (an alternative only
    /// when the one before it would not install).
    fn apt_install(
        &self,
        apt: &Path,
        missing: &[(Need, &'static [&'static [&'static str]])],
    ) -> Result {
        let apt = |args: &[&str]| {
            let mut cmd = self.command(apt);
            cmd.env("DEBIAN_FRONTEND", "noninteractive")
                .args(args)
                .stdin(Stdio::null());
            crate::util::run(&mut cmd)
        };
        apt(&["update", "-qq"])?;
        for (need, alternatives) in missing {
            if *need == Need::Java {
                fs::create_dir_all(&self.man_dir)?;
            }
            let mut last = Ok(());
            for packages in *alternatives {
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
    let states: Vec<(Need, State)> = needs.iter().map(|&n| (n, sys.state(n))).collect();
    if let Some(why) = states.iter().find_map(|(_, s)| match s {
        State::Unusable(why) => Some(why.clone()),
        _ => None,
    }) {
        return Err(why.into());
    }
    let missing: Vec<_> = states
        .iter()
        .filter_map(|(need, s)| match s {
            State::Missing(packages) => Some((*need, *packages)),
            _ => None,
        })
        .collect();
    if !missing.is_empty() {
        match (sys.root, sys.find("apt-get")) {
            (true, Some(apt)) => sys.apt_install(&apt, &missing)?,
            (root, apt) => return Err(refusal(&missing, root, apt.is_some()).into()),
        }
    }
    for &need in needs {
        match sys.state(need) {
            State::Present(version) => {
                info(format!("{:<24}{version}", format!("{}:", need.what())))
            }
            State::Unusable(why) => return Err(why.into()),
            State::Missing(_) => {
                return Err(format!(
                    "{} is still missing after its apt-get install.",
                    need.what()
                )
                .into())
            }
        }
    }
    Ok(())
}

/// The one sentence for prerequisites that are missing and that this process may not install.
fn refusal(
    missing: &[(Need, &'static [&'static [&'static str]])],
    root: bool,
    apt: bool,
) -> String {
    let names: Vec<String> = missing.iter().map(|(n, _)| n.what()).collect();
    let names = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    let packages: Vec<&str> = missing
        .iter()
        .flat_map(|(_, alts)| alts[0].iter().copied())
        .collect();
    let packages = packages.join(" ");
    // Debian 13 and later have no openjdk-17.
    let java = missing.iter().any(|(n, _)| *n == Need::Java);
    let java = |before: &str, after: &str| {
        match java {
        true => format!("{before}default-jre-headless instead of openjdk-17-jre-headless on Debian 13 and later{after}"),
        false => String::new(),
    }
    };
    let (verb, them) = match missing.len() {
        1 => ("is", "it"),
        _ => ("are", "them"),
    };
    match (root, apt) {
        (false, true) => format!(
            "{names} {verb} missing and installing {them} needs root: run `sudo apt-get install {packages}`{}, or run this command as root, which installs {them} itself.",
            java(" (", ")")
        ),
        _ => format!(
            "{names} {verb} missing and there is no apt-get here to install {them}: install {them} with this system's package manager (on Debian: `apt-get install {packages}`{}).",
            java(", ", "")
        ),
    }
}

/// The major version in `java -version`'s first line: 8 for `"1.8.0_392"`, 17 for
/// `"17.0.15"`, 21 for `"21-ea"`.
fn java_major(line: &str) -> Option<u32> {
    let version = line.split('"').nth(1)?;
    let mut parts = version.split(['.', '-', '_', '+']);
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

    /// A fake machine: a `bin/` holding only the scripts a test writes, `PATH` = that `bin/`,
    /// and a log each fake command appends its arguments to.
    struct Fake {
        dir: PathBuf,
    }

    impl Fake {
        fn new(name: &str) -> Fake {
            let dir = env::temp_dir().join(format!("xtask-system-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("bin")).unwrap();
            Fake { dir }
        }

        fn bin(&self) -> PathBuf {
            self.dir.join("bin")
        }

        fn log(&self) -> PathBuf {
            self.dir.join("calls.log")
        }

        /// A fake `name` that logs `name args…` and then runs `body` (sh).
        fn script(&self, name: &str, body: &str) -> &Fake {
            let file = self.bin().join(name);
            let log = self.log().display().to_string();
            fs::write(
                &file,
                format!("#!/bin/sh\necho \"{name} $*\" >> '{log}'\n{body}\n"),
            )
            .unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
            self
        }

        /// Everything present except Chromium: Java 17, node and npm, Python with ensurepip,
        /// curl; and an `apt-get` that "installs" `chromium` by writing a fake one.
        fn all_but_chromium(name: &str) -> Fake {
            let fake = Fake::new(name);
            let chromium = fake.bin().join("chromium");
            let chromium = chromium.display();
            fake.script("java", r#"echo 'openjdk version "17.0.15" 2025-04-15' >&2"#)
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
            fake
        }

        fn system(&self, root: bool) -> System {
            let vars = [("PATH", self.bin().into_os_string())];
            System {
                vars: vars.into_iter().map(|(k, v)| (k.into(), v)).collect(),
                root,
                man_dir: self.dir.join("man1"),
            }
        }

        fn calls(&self) -> Vec<String> {
            let text = fs::read_to_string(self.log()).unwrap_or_default();
            text.lines().map(String::from).collect()
        }

        /// The calls that change the machine: anything but a version query.
        fn installs(&self) -> Vec<String> {
            let queries = ["--version", "-version", "-c "];
            let calls = self.calls().into_iter();
            calls
                .filter(|c| !queries.iter().any(|q| c.contains(q)))
                .collect()
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn missing_chromium_as_root_is_installed_with_apt_get() {
        let fake = Fake::all_but_chromium("root");
        ensure(&fake.system(true), Need::ALL).unwrap();
        assert_eq!(
            fake.installs(),
            [
                "apt-get update -qq",
                "apt-get install -y -qq --no-install-recommends chromium"
            ]
        );
        assert!(fake.bin().join("chromium").is_file());
    }

    #[test]
    fn missing_chromium_not_as_root_stops_with_one_sentence_and_installs_nothing() {
        let fake = Fake::all_but_chromium("user");
        let err = ensure(&fake.system(false), Need::ALL)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`sudo apt-get install chromium`"), "{err}");
        assert_eq!(err.matches(". ").count(), 0, "one sentence: {err}");
        assert!(err.starts_with("Chromium is missing"), "{err}");
        assert_eq!(
            fake.installs(),
            Vec::<String>::new(),
            "nothing installed or built"
        );
    }

    #[test]
    fn without_apt_get_the_sentence_names_the_packages() {
        let fake = Fake::new("no-apt");
        fake.script("node", "echo v20").script("npm", "echo 9");
        let err = ensure(
            &fake.system(true),
            &[Need::Java, Need::Node, Need::Chromium],
        );
        let err = err.unwrap_err().to_string();
        assert!(
            err.starts_with("Java 17+ and Chromium are missing and there is no apt-get"),
            "{err}"
        );
        assert!(
            err.contains("`apt-get install openjdk-17-jre-headless chromium`"),
            "{err}"
        );
        assert!(err.contains("default-jre-headless"), "{err}");
        assert_eq!(fake.installs(), Vec::<String>::new());
    }

    /// Java 11 on PATH as root: openjdk-17 first; where it is not to be had (Debian 13+), the
    /// default JRE. Python without ensurepip gets python3-venv, and nothing else is touched.
    #[test]
    fn an_old_java_and_a_python_without_venv_are_installed_in_turn() {
        let fake = Fake::all_but_chromium("old-java");
        let java = fake.bin().join("java");
        let java = java.display();
        fake.script("java", r#"echo 'openjdk version "11.0.2" 2019-01-15' >&2"#)
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
        let err = ensure(&fake.system(true), &[Need::Java, Need::Python]).unwrap_err();
        assert_eq!(
            fake.installs(),
            [
                "apt-get update -qq",
                "apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless",
                "apt-get install -y -qq --no-install-recommends default-jre-headless",
                "apt-get install -y -qq --no-install-recommends python3-venv",
            ]
        );
        assert!(
            fake.dir.join("man1").is_dir(),
            "the JRE's postinst needs it"
        );
        // The fake python3-venv installed nothing, which is said as such.
        assert!(
            err.to_string()
                .contains("Python 3.10+ with venv is still missing"),
            "{err}"
        );
    }

    #[test]
    fn nothing_missing_installs_nothing() {
        let fake = Fake::all_but_chromium("complete");
        fake.script("chromium", "echo Chromium 140.0");
        ensure(&fake.system(false), Need::ALL).unwrap();
        assert_eq!(fake.installs(), Vec::<String>::new());
    }

    #[test]
    fn chromium_from_the_variable_or_the_path() {
        let fake = Fake::new("chromium");
        let mut sys = fake.system(false);
        assert_eq!(sys.chromium(), None);
        fake.script("chromium-browser", "");
        assert_eq!(sys.chromium(), Some(fake.bin().join("chromium-browser")));
        let own = fake.dir.join("own-chromium");
        fs::write(&own, "").unwrap();
        sys.vars.insert("CHROMIUM".into(), own.clone().into());
        assert_eq!(sys.chromium(), Some(own));
    }

    #[test]
    fn java_versions() {
        assert_eq!(
            java_major(r#"openjdk version "17.0.15" 2025-04-15"#),
            Some(17)
        );
        assert_eq!(java_major(r#"java version "1.8.0_392""#), Some(8));
        assert_eq!(
            java_major(r#"openjdk version "21-ea" 2023-09-19"#),
            Some(21)
        );
        assert_eq!(java_major("no java here"), None);
    }
}
