//! Just enough signal handling to always stop DynamoDB Local.
//!
//! Without it, Ctrl-C or `kill` ends xtask on the spot: no destructor runs,
//! and a Java child started with its own output redirected would keep
//! running (and holding its port) after xtask is gone. Instead we only
//! *record* SIGINT/SIGTERM; the normal code path notices, returns, and the
//! `Drop` guard in `dynamodb_local` stops the child.
//!
//! This is a few lines of libc FFI rather than a crate dependency (`ctrlc`,
//! `signal-hook`) to keep xtask dependency-free. The handler only stores to
//! an atomic, which is async-signal-safe.

use std::sync::atomic::{AtomicBool, Ordering};

static RECEIVED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived since [`install`].
pub fn received() -> bool {
    RECEIVED.load(Ordering::SeqCst)
}

#[cfg(unix)]
mod sys {
    use std::os::raw::c_int;

    // Same numbers on Linux and macOS.
    const SIGINT: c_int = 2;
    const SIGTERM: c_int = 15;

    unsafe extern "C" {
        // glibc's and macOS's `signal` give BSD semantics: the handler stays
        // installed and interrupted system calls are restarted.
        fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
        fn kill(pid: i32, sig: c_int) -> c_int;
    }

    extern "C" fn on_signal(_: c_int) {
        super::RECEIVED.store(true, super::Ordering::SeqCst);
    }

    pub fn install() {
        // SAFETY: `on_signal` is async-signal-safe (a single atomic store).
        unsafe {
            signal(SIGINT, on_signal);
            signal(SIGTERM, on_signal);
        }
    }

    pub fn terminate(pid: u32) -> bool {
        let Ok(pid) = i32::try_from(pid) else {
            return false;
        };
        // SAFETY: plain syscall; `pid` is our own child, not yet reaped.
        unsafe { kill(pid, SIGTERM) == 0 }
    }
}

#[cfg(not(unix))]
mod sys {
    pub fn install() {}
    pub fn terminate(_pid: u32) -> bool {
        false
    }
}

/// From now on, SIGINT/SIGTERM no longer end xtask but are recorded for
/// [`received`]. Installing twice is harmless.
pub fn install() {
    sys::install();
}

/// Politely asks a child process to exit (SIGTERM), so Java runs its
/// shutdown hooks (matters for an on-disk database). Returns false if the
/// signal could not be sent; the caller then falls back to `Child::kill`.
pub fn terminate(pid: u32) -> bool {
    sys::terminate(pid)
}
