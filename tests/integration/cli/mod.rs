//! The operator CLI against DynamoDB Local, run in process through `tollgate_cli::run`.
//!
//! Each test gets its own tables, created from `template.yaml` by the CLI's template module, and
//! its own `.dev/stack.json` pointing at DynamoDB Local, so the connection path under test is the
//! one an operator uses with the local stack.

mod accounts;
mod errors;
mod harness;
mod idempotency;
mod kill_switch;
mod limits;
mod tables;
