//! The operator CLI against DynamoDB Local, run in process through `tollgate_cli::run` (so a
//! test can hand it a manual clock and read its output from memory; `cli/src/main.rs` only
//! prints what `run` returns).
//!
//! One test binary, the CLI's own, in the CLI's package: the tests crate does not depend on the
//! CLI. DynamoDB Local clients and unique prefixes come from `tollgate-tests`.
//!
//! Each test gets its own tables, created from `template.yaml` by `tollgate-template`, and
//! its own `.dev/stack.json` pointing at DynamoDB Local, so the connection path under test is the
//! one an operator uses with the local stack.

mod accounts;
mod catalog;
mod deployed;
mod errors;
mod harness;
mod idempotency;
mod kill_switch;
mod limits;
mod tables;
