//! Starting long-running helpers so that stopping them leaves nothing behind.
//!
//! `cargo lambda watch` is the hard case. It does not run the functions as its own children in
//! its own process group: it hands them to watchexec, which starts every function (`cargo run
//! --bin …`, which then `exec`s the binary) in a *new session*. So neither the terminal's Ctrl-C
//! nor a signal to cargo-lambda's process group reaches them, and if cargo-lambda dies before it
//! has stopped them they are orphaned and keep their ports.
//!
//! So a tree is not found by parentage (which a new session or an orphaning breaks) but by a
//! mark: [`spawn`] puts `TOLLGATE_XTASK_TREE=<xtask pid>/<n>` in the helper's environment, every
//! process it starts inherits it (cargo-lambda and watchexec pass the environment through), and
//! a tree's members are the processes whose `/proc/<pid>/environ` holds that exact entry. A pid
//! reused by an unrelated process has no mark, so it is never signalled; a zombie's environment
//! reads empty, so it counts as gone. (Linux; without procfs only the leader's group is
//! stopped.) With `nix` for the system calls:
//!
//! - [`spawn`] starts a helper in its own process group (Ctrl-C in the terminal goes to xtask
//!   only, which then stops things in order) and asks the kernel to SIGTERM it should xtask
//!   itself die without cleaning up (`PR_SET_PDEATHSIG`, e.g. after a SIGKILL).
//! - [`Tree::stop`] first asks politely (SIGTERM to the group: cargo-lambda then stops its
//!   functions itself), waits, and then SIGKILLs whatever still carries the mark.

use std::fs;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::util::{self, bail, CmdExt, Context, Result};

/// The variable carrying a tree's mark.
const MARK: &str = "TOLLGATE_XTASK_TREE";

/// The processes whose environment holds `MARK=<value>` (or, with `prefix`, `MARK=<value>…`),
/// with their command lines.
fn marked(value: &str, prefix: bool) -> Vec<(u32, String)> {
    let entry = format!("{MARK}={value}");
    let entries = fs::read_dir("/proc").into_iter().flatten();
    let pids = entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    let has_mark = |pid: &u32| {
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let mut vars = environ.split(|&b| b == 0);
        vars.any(|var| var == entry.as_bytes() || prefix && var.starts_with(entry.as_bytes()))
    };
    let cmdline = |pid| {
        let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&raw)
            .replace('\0', " ")
            .trim()
            .to_string()
    };
    pids.filter(has_mark)
        .map(|pid| (pid, cmdline(pid)))
        .collect()
}

/// Live processes of every tree this xtask started: what a clean stop must leave empty.
pub fn leftovers() -> Vec<(u32, String)> {
    marked(&format!("{}/", std::process::id()), true)
}

/// A helper process and everything it starts. Dropping it stops them all.
#[derive(Debug)]
pub struct Tree {
    name: &'static str,
    child: Child,
    /// This tree's value of [`MARK`].
    mark: String,
}

/// Starts `cmd` as a [`Tree`]: its own process group, the tree's mark, and (Linux) a SIGTERM if
/// xtask dies without stopping it. `name` is for messages.
pub fn spawn(name: &'static str, cmd: &mut Command) -> Result<Tree> {
    use std::os::unix::process::CommandExt;
    static TREES: AtomicU32 = AtomicU32::new(0);
    let n = TREES.fetch_add(1, Ordering::Relaxed);
    let mark = format!("{}/{n}", std::process::id());
    cmd.process_group(0).env(MARK, &mark);
    #[cfg(target_os = "linux")]
    // SAFETY: the closure only makes one async-signal-safe syscall (prctl).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd.display()))?;
    Ok(Tree { name, child, mark })
}

impl Tree {
    /// `Some(status)` once the leader has exited on its own.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Err, naming the tree and showing the tail of its `log`, once the leader has exited on
    /// its own.
    pub fn check_alive(&mut self, log: &std::path::Path) -> Result {
        match self.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited unexpectedly ({status}); last lines of {}:\n{}",
                self.name,
                log.display(),
                util::tail(log, 20)
            ),
        }
    }

    /// The tree's live processes other than the leader.
    fn members(&self) -> Vec<(u32, String)> {
        let leader = self.child.id();
        let mut members = marked(&self.mark, false);
        members.retain(|&(pid, _)| pid != leader);
        members
    }

    /// Stops the leader and every process with the tree's mark, waiting up to `grace` for a
    /// clean exit before SIGKILL. Idempotent; also done on drop.
    pub fn stop(&mut self, grace: Duration) {
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) && self.members().is_empty() {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        // Whatever did not listen.
        let _ = self.child.kill();
        let _ = self.child.wait();
        for _ in 0..20 {
            let left = self.members();
            if left.is_empty() {
                return;
            }
            for (pid, cmdline) in left {
                util::info(format!(
                    "{}: killing leftover process {pid} ({cmdline})",
                    self.name
                ));
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether `pid` is a live process (not gone, not a zombie).
    fn is_alive(pid: u32) -> bool {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ")
            .is_some_and(|(_, state)| !state.starts_with('Z'))
    }

    /// Starts a leader whose child escapes into a new session and ignores SIGTERM, like a
    /// function started by watchexec that does not stop in time; returns the tree and the
    /// grandchild's pid.
    fn tree_with_escaped_grandchild() -> (Tree, u32) {
        use std::io::BufRead;
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            // The grandchild prints its pid once it ignores TERM in its own session.
            "setsid sh -c 'trap \"\" TERM; echo $$; while :; do sleep 0.1; done' & wait",
        ])
        .stdout(std::process::Stdio::piped());
        let mut tree = spawn("test", &mut cmd).unwrap();
        let out = tree.child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(is_alive(grandchild));
        assert!(tree.members().iter().any(|&(pid, _)| pid == grandchild));
        (tree, grandchild)
    }

    #[test]
    fn stop_kills_orphans_of_a_leader_that_died_first() {
        let (mut tree, grandchild) = tree_with_escaped_grandchild();
        tree.child.kill().unwrap(); // the leader crashes; the grandchild is orphaned
        tree.child.wait().unwrap();
        assert!(is_alive(grandchild));
        tree.stop(Duration::from_millis(100));
        assert!(!is_alive(grandchild), "orphan {grandchild} survived");
    }

    #[test]
    fn stop_kills_grandchildren_in_other_sessions() {
        let (mut tree, grandchild) = tree_with_escaped_grandchild();
        let (t, grace) = (Instant::now(), Duration::from_millis(300));
        tree.stop(grace);
        assert!(t.elapsed() >= grace, "waited for the grace period");
        assert!(!is_alive(grandchild), "grandchild {grandchild} survived");
    }
}
