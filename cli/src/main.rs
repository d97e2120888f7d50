//! The `tollgate` binary: runs [`tollgate_cli::run`] on the process's arguments and environment
//! and prints what it returns.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let ctx = match tollgate_cli::Context::from_process() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = runtime.block_on(tollgate_cli::run(&ctx, std::env::args_os().skip(1)));
    // A closed pipe (`tollgate ... | head`) is not worth a panic.
    let _ = std::io::stdout().lock().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().lock().write_all(out.stderr.as_bytes());
    ExitCode::from(out.code)
}
