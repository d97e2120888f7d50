//! Ctrl-C and SIGTERM are recorded, not fatal.
//!
//! Ended on the spot, xtask would run no destructor, and a child started with its output
//! redirected (DynamoDB Local, `cargo lambda watch`) would keep running and holding its port.
//! Instead the signal is only recorded (`ctrlc`, whose `termination` feature adds SIGTERM); the
//! normal code path notices through [`received`], returns, and the `Drop` guards stop the
//! children in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static RECEIVED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived since [`install`].
pub fn received() -> bool {
    RECEIVED.load(Ordering::SeqCst)
}

/// From now on, SIGINT/SIGTERM no longer end xtask but are recorded for [`received`].
/// Installing twice is harmless.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = ctrlc::set_handler(|| RECEIVED.store(true, Ordering::SeqCst)) {
            crate::util::info(format!(
                "warning: Ctrl-C will not stop things in order: {e}"
            ));
        }
    });
}
