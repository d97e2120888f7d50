//! One `cargo xtask dev` per state directory.
//!
//! Two stacks writing the same `.dev/stack.json` would each point tools at
//! the other's ports, so a second start is refused while the first runs. The
//! lock is a file holding the owner's pid, created with `O_EXCL`. A lock
//! whose pid is gone (the owner was SIGKILLed, the machine rebooted) is
//! stale and taken over, so a crash never needs manual cleanup. A live pid
//! counts only if it still is an xtask, in case the pid was reused.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::processes;
use crate::util::{info, Result};

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
}

/// What happened to a previous lock holder.
#[derive(Debug)]
pub enum Previous {
    /// No lock file: a clean start.
    None,
    /// A stale lock of this pid was taken over; its files may be left over.
    #[allow(dead_code)] // read by tests; callers only need to know it was stale
    Stale(u32),
}

impl Lock {
    /// Takes the lock at `path`, or explains who holds it. `what` names the
    /// command for the message, e.g. "`cargo xtask dev`".
    pub fn acquire(path: &Path, what: &str) -> Result<(Lock, Previous)> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut previous = Previous::None;
        // Two rounds: the second one after removing a stale lock. Should a
        // concurrent start win the race in between, it holds the lock now.
        for _ in 0..2 {
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut file) => {
                    writeln!(file, "{}", std::process::id())?;
                    return Ok((
                        Lock {
                            path: path.to_path_buf(),
                        },
                        previous,
                    ));
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let text = fs::read_to_string(path).unwrap_or_default();
                    let owner: Option<u32> = text.trim().parse().ok();
                    match owner {
                        Some(pid) if holder_alive(pid) => {
                            return Err(format!(
                                "{what} is already running (pid {pid}, lock {}): use that one, or stop it with Ctrl-C in its terminal or `kill {pid}` and start again.",
                                path.display()
                            )
                            .into());
                        }
                        _ => {
                            info(format!(
                                "taking over a stale lock {} (pid {} is gone)",
                                path.display(),
                                owner.map_or("?".to_string(), |p| p.to_string())
                            ));
                            previous = Previous::Stale(owner.unwrap_or(0));
                            let _ = fs::remove_file(path);
                        }
                    }
                }
                Err(e) => return Err(format!("cannot create {}: {e}", path.display()).into()),
            }
        }
        Err(format!(
            "{what} is being started by another process right now (lock {}); try again in a moment.",
            path.display()
        )
        .into())
    }
}

/// Whether a live process holds the lock at `path`.
pub fn is_held(path: &Path) -> bool {
    fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .is_some_and(holder_alive)
}

/// Alive and, where procfs tells, an xtask (pids get reused).
fn holder_alive(pid: u32) -> bool {
    if pid == 0 || !processes::is_alive(pid) {
        return false;
    }
    match processes::cmdline(pid) {
        Some(cmd) => cmd.contains("xtask"),
        None => true,
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Only remove the file if it is still ours.
        let ours = fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            == Some(std::process::id());
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_is_refused_and_stale_lock_taken_over() {
        let dir = std::env::temp_dir().join(format!("xtask-lock-test-{}", std::process::id()));
        let path = dir.join("dev.lock");
        let _ = fs::remove_dir_all(&dir);
        {
            let (_lock, prev) = Lock::acquire(&path, "test").unwrap();
            assert!(matches!(prev, Previous::None));
            // Our own pid is alive and an xtask test binary ("xtask-<hash>").
            let err = Lock::acquire(&path, "test").unwrap_err().to_string();
            assert!(err.contains("already running"), "{err}");
        }
        assert!(!path.exists(), "released on drop");
        // A pid that cannot exist: stale.
        fs::create_dir_all(&dir).unwrap();
        fs::write(&path, "4194304999\n").unwrap();
        let (_lock, prev) = Lock::acquire(&path, "test").unwrap();
        assert!(matches!(prev, Previous::Stale(4194304999)));
        drop(_lock);
        let _ = fs::remove_dir_all(&dir);
    }
}
