//! Finding and running the Python tools `cargo xtask setup` installs (cfn-lint, sam).

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

/// The workspace root, where `template.yaml` and `samconfig.toml` live.
pub fn repo_root() -> PathBuf {
    tollgate_tests::workspace_root()
}

/// `template.yaml` at the workspace root.
pub fn template_path() -> PathBuf {
    repo_root().join("template.yaml")
}

/// An executable named `name`: first on PATH (`cargo xtask test` puts the venv's `bin/` first),
/// then in the venv `cargo xtask setup` creates (`$TOLLGATE_CACHE_DIR/venv/bin`, else
/// `$HOME/.cache/tollgate/venv/bin`). Panics with what to run when it is nowhere: a missing
/// tool must fail the test, never skip it.
pub fn find(name: &str) -> PathBuf {
    let mut searched = Vec::new();
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return candidate;
            }
        }
        searched.push("PATH".to_string());
    }
    for venv_bin in venv_bins() {
        let candidate = venv_bin.join(name);
        if is_executable(&candidate) {
            return candidate;
        }
        searched.push(venv_bin.display().to_string());
    }
    panic!(
        "`{name}` not found (looked in: {}). Install the pinned tools with `cargo xtask setup`, \
         or run the tests through `cargo xtask test`, which also puts the venv first on PATH.",
        searched.join(", ")
    );
}

fn venv_bins() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(cache) = env::var_os("TOLLGATE_CACHE_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(cache).join("venv").join("bin"));
    }
    if let Some(home) = env::var_os("HOME").filter(|h| !h.is_empty()) {
        dirs.push(
            Path::new(&home)
                .join(".cache")
                .join("tollgate")
                .join("venv")
                .join("bin"),
        );
    }
    dirs
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Runs `cmd` to completion, capturing its output; panics if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("could not start `{}`: {e}", describe(cmd)))
}

/// Asserts that `out` is a success, printing the command's whole output otherwise.
pub fn assert_success(cmd: &Command, out: &Output) {
    assert!(
        out.status.success(),
        "`{}` failed ({}).\n--- stdout ---\n{}\n--- stderr ---\n{}",
        describe(cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A `sam` command that cannot reach AWS or anything else, and leaves no trace in `~/.aws-sam`:
///
/// - a fixed region and dummy credentials, with the user's AWS config and credential files,
///   profile, session token and instance metadata out of reach;
/// - every HTTP(S) request sent to a closed local port through a proxy, so a SAM feature that
///   would call an AWS API (e.g. resolving a managed policy by name) fails loudly instead of
///   calling AWS;
/// - telemetry off, and the weekly "newer version" check (a request to the package index after
///   every command) marked as just done, in a SAM config directory of the test's own (`test`
///   names it, so tests running at once do not share the file SAM rewrites).
pub fn offline_sam(sam: &Path, test: &str) -> Command {
    let app_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("sam-cli-config")
        .join(test);
    fs::create_dir_all(&app_dir).expect("create the SAM CLI config directory");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    fs::write(
        app_dir.join("metadata.json"),
        serde_json::json!({"lastVersionCheck": now, "telemetryEnabled": false}).to_string(),
    )
    .expect("write the SAM CLI metadata file");

    let mut cmd = Command::new(sam);
    cmd.current_dir(repo_root())
        .env("SAM_CLI_TELEMETRY", "0")
        // Where SAM CLI keeps its global config (default `~/.aws-sam`).
        .env("__SAM_CLI_APP_DIR", &app_dir)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("https_proxy", "http://127.0.0.1:9")
        .env("http_proxy", "http://127.0.0.1:9")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    cmd
}
