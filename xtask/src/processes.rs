//! Starting long-running helpers so that stopping them leaves nothing behind.
//!
//! `cargo lambda watch` is the hard case. It does not run the functions as
//! its own children in its own process group: it hands them to watchexec,
//! which starts every function (`cargo run --bin …`, which then `exec`s the
//! binary) in a *new session*. So neither the terminal's Ctrl-C nor a signal
//! to cargo-lambda's process group reaches them, and if cargo-lambda dies
//! before it has stopped them they are orphaned and keep their ports.
//!
//! What we do about it (Linux; on macOS without the subreaper and the parent-death signal),
//! with `nix` for the system calls:
//!
//! - xtask makes itself a *child subreaper* ([`become_subreaper`]): an
//!   orphaned descendant is re-parented to xtask instead of to init, so it
//!   stays findable as "a descendant of xtask" and is never lost.
//! - [`spawn`] starts a helper in its own process group (Ctrl-C in the
//!   terminal goes to xtask only, which then stops things in order) and asks
//!   the kernel to SIGTERM it should xtask itself die without cleaning up
//!   (`PR_SET_PDEATHSIG`, e.g. after a SIGKILL).
//! - [`Tree::stop`] first asks politely (SIGTERM to the group: cargo-lambda
//!   then stops its functions itself), waits, and then SIGKILLs whatever of
//!   the tree, including those other sessions, is still alive, and reaps it.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::process::{Child, Command, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::util::Result;

/// Sends `sig` to `pid`; false if it is gone (or not ours to signal).
fn signal(pid: u32, sig: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), sig).is_ok())
}

/// Reaps `pid` if it is our child and has exited; never blocks.
fn reap(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
    }
}

/// Makes orphaned descendants re-parent to this process instead of init, so
/// [`Tree::stop`] can still find and end them. Harmless to call twice; a
/// no-op outside Linux.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Prepares `cmd` to run as an independent helper: its own process group,
/// and (Linux) a SIGTERM if xtask dies without stopping it.
fn isolate(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: the closure only makes one async-signal-safe syscall (prctl).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
}

/// Whether a process with this id exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    // Exists (zombies included) and we may signal it, or it is someone else's.
    if !matches!(kill(Pid::from_raw(raw), None), Ok(()) | Err(Errno::EPERM)) {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_fields(&stat).is_some_and(|(state, _)| state != 'Z'),
        // No procfs (macOS): trust kill(pid, 0).
        Err(_) => fs::metadata("/proc/self").is_err(),
    }
}

/// The command line of a process, if procfs shows it.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        String::from_utf8_lossy(&raw)
            .replace('\0', " ")
            .trim()
            .to_string(),
    )
}

/// `(state, ppid)` from `/proc/<pid>/stat`. The command name (field 2) may
/// contain spaces and parentheses, so parse from its closing parenthesis.
fn stat_fields(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Every live process's parent, from procfs (empty without procfs).
fn parents() -> HashMap<u32, u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, ppid) = stat_fields(&stat)?;
            Some((pid, ppid))
        })
        .collect()
}

/// All descendants of `root` (not `root` itself).
fn descendants(root: u32, parents: &HashMap<u32, u32>) -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (&pid, &ppid) in parents {
            if ppid == parent && found.insert(pid) {
                frontier.push(pid);
            }
        }
    }
    found
}

/// Live descendants of this process (`pid`, command line): what a clean
/// stop must leave empty. Zombies among our own children are reaped first.
pub fn leftovers() -> Vec<(u32, String)> {
    let me = std::process::id();
    let parents = parents();
    for (&pid, &ppid) in &parents {
        if ppid == me {
            reap(pid);
        }
    }
    descendants(me, &parents)
        .into_iter()
        .filter(|&pid| is_alive(pid))
        .map(|pid| (pid, cmdline(pid).unwrap_or_default()))
        .collect()
}

/// A helper process and everything it starts. Dropping it stops them all.
#[derive(Debug)]
pub struct Tree {
    name: &'static str,
    child: Child,
    /// Descendants seen so far. Kept up to date by [`Tree::try_wait`], so
    /// that if the leader dies first, the orphans it leaves (re-parented to
    /// us, no longer its descendants) are still known to be this tree's.
    members: BTreeSet<u32>,
}

/// Starts `cmd` (see [`isolate`]) as a [`Tree`]; `name` is for messages.
pub fn spawn(name: &'static str, cmd: &mut Command) -> Result<Tree> {
    isolate(cmd);
    let child = cmd
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", crate::util::display(cmd)))?;
    Ok(Tree {
        name,
        child,
        members: BTreeSet::new(),
    })
}

impl Tree {
    /// `Some(status)` once the leader has exited on its own. Also records
    /// the tree's current members (see [`Tree::members`]).
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let status = self.child.try_wait()?;
        if status.is_none() {
            self.members.retain(|&pid| is_alive(pid));
            self.members
                .extend(descendants(self.child.id(), &parents()));
        }
        Ok(status)
    }

    /// Err, naming the tree and showing the tail of its `log`, once the leader has exited on
    /// its own.
    pub fn check_alive(&mut self, log: &std::path::Path) -> Result {
        match self.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited unexpectedly ({status}); last lines of {}:\n{}",
                self.name,
                log.display(),
                crate::util::tail(log, 20)
            )
            .into()),
        }
    }

    /// Stops the leader and every descendant, waiting up to `grace` for a
    /// clean exit before SIGKILL. Idempotent; also done on drop.
    pub fn stop(&mut self, grace: Duration) {
        let me = std::process::id();
        let leader = self.child.id();
        // Everything the tree holds right now, including processes in other
        // sessions. Taken before the leader goes, because afterwards its
        // children are re-parented (to us, as subreaper).
        let mut members = std::mem::take(&mut self.members);
        members.extend(descendants(leader, &parents()));
        let leader_running = matches!(self.child.try_wait(), Ok(None));
        if let (true, Ok(pgid)) = (leader_running, i32::try_from(leader)) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            let leader_done = !matches!(self.child.try_wait(), Ok(None));
            let left = self.survivors(&mut members, me);
            if leader_done && left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            sleep(Duration::from_millis(50));
        }
        // Whatever did not listen.
        let _ = self.child.kill();
        let _ = self.child.wait();
        for _ in 0..20 {
            let left = self.survivors(&mut members, me);
            if left.is_empty() {
                return;
            }
            for pid in &left {
                crate::util::info(format!(
                    "{}: killing leftover process {pid} ({})",
                    self.name,
                    cmdline(*pid).unwrap_or_default()
                ));
                signal(*pid, Signal::SIGKILL);
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Members still alive, refreshed with the leader's current descendants.
    /// A pid counts only while it is still our descendant, so a pid reused
    /// by an unrelated process after its owner died is never signalled.
    /// Members that died after being re-parented to us are reaped here.
    fn survivors(&self, members: &mut BTreeSet<u32>, me: u32) -> Vec<u32> {
        let parents = parents();
        members.extend(descendants(self.child.id(), &parents));
        let ours = descendants(me, &parents);
        let mut left = Vec::new();
        for &pid in members.iter() {
            if pid == self.child.id() || !ours.contains(&pid) {
                continue;
            }
            if parents.get(&pid) == Some(&me) {
                reap(pid);
            }
            if is_alive(pid) {
                left.push(pid);
            }
        }
        left
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let stat = "1234 (cargo (lambda) x) S 99 1234 1234 0 -1";
        assert_eq!(stat_fields(stat), Some(('S', 99)));
    }

    /// Starts a leader whose child escapes into a new session and ignores
    /// SIGTERM, like a function started by watchexec that does not stop in
    /// time; returns the tree and the grandchild's pid.
    #[cfg(target_os = "linux")]
    fn tree_with_escaped_grandchild() -> (Tree, u32) {
        use std::io::BufRead;
        become_subreaper();
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
        (tree, grandchild)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stop_kills_orphans_of_a_leader_that_died_first() {
        let (mut tree, grandchild) = tree_with_escaped_grandchild();
        tree.try_wait().unwrap(); // records the members, as the dev loop does
        tree.child.kill().unwrap(); // the leader crashes; the grandchild is orphaned
        tree.child.wait().unwrap();
        assert!(is_alive(grandchild));
        tree.stop(Duration::from_millis(100));
        assert!(!is_alive(grandchild), "orphan {grandchild} survived");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stop_kills_grandchildren_in_other_sessions() {
        let (mut tree, grandchild) = tree_with_escaped_grandchild();
        let t = Instant::now();
        tree.stop(Duration::from_millis(300));
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "waited for the grace period"
        );
        assert!(!is_alive(grandchild), "grandchild {grandchild} survived");
    }
}
