//! One integration test binary for the guards, both functions, the OpenAPI document and the
//! deploy checks, against DynamoDB Local with OpenAI and SSM stood in for over HTTP. The
//! operator CLI's tests are the CLI's own (`cli/tests`).
//!
//! One binary, not one per area, because each test binary links the AWS SDK, and linking is
//! what a build of the tests spends most of its time on. Each module is what used to be a
//! binary of its own; run one with a filter, e.g.
//! `cargo test -p tollgate-tests --test integration transfer::`. Tests share a process now, so
//! none may rely on process-wide state: each makes its own tables and stand-ins.
//!
//! `e2e`, `replay` and `drill` stay binaries of their own: each needs a stack of its own and
//! xtask runs them by name.

mod deploy;
mod examples;
mod guards;
mod openapi;
mod session;
mod transfer;
mod workspace;
