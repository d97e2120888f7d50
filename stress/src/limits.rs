//! Both functions' rate limits for one run: what each function is given, in its own limits
//! variable (the catalog's), and what the report states. The drill, bench part 3 and part 4
//! each pick their own limits; how they reach the functions and the report is written here.

use serde::Serialize;
use tollgate_functions::catalog;

/// `ephemeral-key`'s and `transfer`'s limits, with the variables that carry them (for the
/// report's prose: `{{ limits.session_variable }}={{ limits.session }}`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Limits {
    pub session: String,
    pub transfer: String,
    pub session_variable: &'static str,
    pub transfer_variable: &'static str,
}

impl Limits {
    pub fn new(session: impl Into<String>, transfer: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            transfer: transfer.into(),
            session_variable: catalog::EPHEMERAL_KEY.limits_variable,
            transfer_variable: catalog::TRANSFER.limits_variable,
        }
    }

    /// The functions' variables: each function's limits in its own variable.
    pub fn env(&self) -> [(String, String); 2] {
        [
            (self.session_variable.into(), self.session.clone()),
            (self.transfer_variable.into(), self.transfer.clone()),
        ]
    }
}
