//! `tollgate-stress`: the harness that proves the project under load and faults.
//!
//! Run through `cargo xtask replay|drill|bench`, which starts DynamoDB Local, builds the
//! function binaries and passes their paths and `DYNAMODB_ENDPOINT` in the environment; see
//! the library's docs (`src/lib.rs`) for the layout.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tollgate_stress::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate-stress: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tollgate_stress::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate-stress: {e}");
            ExitCode::FAILURE
        }
    }
}
