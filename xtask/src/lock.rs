//! One `cargo xtask dev` per state directory.
//!
//! Two stacks writing the same `.dev/stack.json` would each point tools at the other's ports,
//! so a second start is refused while the first runs. The lock is an exclusive `flock` on
//! `dev.lock`: the kernel releases it when its holder exits, however it exits (SIGKILL, a
//! crash), so there is no stale lock to detect or take over. The file stays; it holds the
//! holder's pid only for the message a second start prints.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::util::{bail, Context, Result};

/// Holds the lock until dropped (or until the process ends).
#[derive(Debug)]
pub struct Lock {
    _file: Flock<File>,
}

impl Lock {
    /// Takes the lock at `path`, or explains who holds it. `what` names the command for the
    /// message, e.g. "`cargo xtask dev`".
    pub fn acquire(path: &Path, what: &str) -> Result<Lock> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut options = OpenOptions::new();
        let file = options.write(true).create(true).truncate(false).open(path);
        let file = file.with_context(|| format!("cannot open {}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut file) => {
                file.set_len(0)?;
                writeln!(file, "{}", std::process::id())?;
                Ok(Lock { _file: file })
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                let pid = fs::read_to_string(path).unwrap_or_default();
                let pid = pid.trim();
                bail!(
                    "{what} is already running (pid {pid}, lock {}): use that one, or stop it with Ctrl-C in its terminal or `kill {pid}` and start again.",
                    path.display()
                )
            }
            Err((_, e)) => bail!("cannot lock {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: that the kernel frees a killed holder's flock is flock's contract, not ours.
    #[test]
    fn second_acquire_is_refused_until_the_first_is_dropped() {
        let dir = crate::stand_in::StandIn::new("lock");
        let path = dir.dir.join("dev.lock");
        let lock = Lock::acquire(&path, "test").unwrap();
        let err = Lock::acquire(&path, "test").unwrap_err().to_string();
        let running = format!("already running (pid {}", std::process::id());
        assert!(err.contains(&running), "{err}");
        drop(lock);
        drop(Lock::acquire(&path, "test").expect("released on drop"));
    }
}
