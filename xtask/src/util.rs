//! Helpers shared by the tasks: where things live, running commands (and reading what
//! `cargo build` reports, through serde), probing a local server over HTTP (`ureq`), and
//! progress output.
//!
//! Progress goes to stderr so that stdout stays free for values a caller may
//! want to capture (e.g. the endpoint printed by `cargo xtask dynamodb`).

use std::env;
use std::error::Error;
use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Errors are only ever reported to a human, so a boxed error carrying a
/// readable message is all we need.
pub type Result<T = (), E = Box<dyn Error>> = std::result::Result<T, E>;

/// Prints the one-line header that starts a step, e.g. `==> clippy`.
pub fn step(name: &str) {
    eprintln!("==> {name}");
}

/// Prints a progress line that belongs to the current step.
pub fn info(msg: impl std::fmt::Display) {
    eprintln!("    {msg}");
}

/// The workspace root, whichever directory `cargo xtask` was started from, so every command
/// works the same.
pub fn workspace_root() -> PathBuf {
    // `cargo xtask` (`cargo run`) sets it for this run; the value compiled in is the fallback.
    // Cargo keys a workspace member's artifacts by its path relative to the workspace, so two
    // clones sharing one `CARGO_TARGET_DIR` share this binary too: the compiled-in directory
    // may be the other clone's.
    let dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Where tools, venv and logs are kept: `$TOLLGATE_CACHE_DIR`, else
/// `$HOME/.cache/tollgate`. Never inside the repository, so nothing
/// downloaded can end up in a commit, and CI can keep it warm between runs.
pub fn cache_dir() -> Result<PathBuf> {
    let dir = match env::var_os("TOLLGATE_CACHE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => Path::new(&home).join(".cache").join("tollgate"),
            None => return Err("neither TOLLGATE_CACHE_DIR nor HOME is set".into()),
        },
    };
    // Child processes run in other directories, so a relative path must be
    // pinned down now.
    Ok(std::path::absolute(dir)?)
}

/// A `cargo` command run from the workspace root. Uses `$CARGO` (set by
/// `cargo run`) so the same toolchain that built xtask does the work.
pub fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// `cargo build <args>`, returning the path of each binary in `bins` as cargo reports it (so
/// `CARGO_TARGET_DIR` and profiles need no guessing). Diagnostics go to the terminal.
pub fn cargo_build_bins(args: &[&str], bins: &[&str]) -> Result<Vec<PathBuf>> {
    build_bins(cargo(), args, bins)
}

/// [`cargo_build_bins`] with `cmd` as the `cargo` to run (another directory, another target
/// dir).
pub fn build_bins(mut cmd: Command, args: &[&str], bins: &[&str]) -> Result<Vec<PathBuf>> {
    cmd.arg("build")
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{}` failed ({})", display(&cmd), out.status).into());
    }
    /// The part of a `compiler-artifact` message we read.
    #[derive(serde::Deserialize)]
    struct Artifact {
        reason: String,
        target: Target,
        executable: Option<PathBuf>,
    }
    #[derive(serde::Deserialize)]
    struct Target {
        name: String,
    }
    let artifacts: Vec<Artifact> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Artifact>(line).ok())
        .filter(|a| a.reason == "compiler-artifact")
        .collect();
    bins.iter()
        .map(|bin| {
            artifacts
                .iter()
                .filter(|a| a.target.name == *bin)
                .find_map(|a| a.executable.clone())
                .ok_or_else(|| format!("`{}` reported no `{bin}` binary", display(&cmd)).into())
        })
        .collect()
}

/// An HTTP answer to a probe.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// One plain-HTTP request to a local part of the stack (`ureq`), waiting at most `timeout`.
/// Every status is an [`Answer`]; only a transport failure is an error.
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    timeout: Duration,
) -> Result<Answer> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = ureq::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = match body {
        Some(body) => agent.run(request.body(body)?)?,
        None => agent.run(request.body(())?)?,
    };
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok(Answer {
        status: response.status().as_u16(),
        content_type,
        body: response.body_mut().read_to_string().unwrap_or_default(),
    })
}

/// Runs a command with inherited stdio and turns failure into an error that
/// names the command.
pub fn run(cmd: &mut Command) -> Result {
    let status = cmd
        .status()
        .map_err(|e| format!("could not start `{}`: {e}", display(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", display(cmd)).into())
    }
}

/// The first line a command prints (stdout, else stderr: `java -version` writes there), or
/// "unknown" if it cannot run; for version strings.
pub fn first_line(cmd: &mut Command) -> String {
    let Ok(out) = cmd.output() else {
        return "unknown".into();
    };
    let text = [out.stdout, out.stderr].into_iter().find(|t| !t.is_empty());
    let text = text.unwrap_or_default();
    let line = String::from_utf8_lossy(&text)
        .lines()
        .next()
        .map(str::trim)
        .map(String::from);
    line.unwrap_or_else(|| "unknown".into())
}

/// Dummy AWS credentials and region: what a local child process gets, so nothing real is
/// ever sent, not even to a local port.
pub const DUMMY_AWS: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
    // No lookup of real credentials from instance metadata.
    ("AWS_EC2_METADATA_DISABLED", "true"),
];
/// Where real credentials would come from otherwise; removed from a local child's environment.
pub const REAL_AWS: [&str; 2] = ["AWS_SESSION_TOKEN", "AWS_PROFILE"];

/// [`DUMMY_AWS`] set and [`REAL_AWS`] removed, and DynamoDB calls sent to `endpoint` (also those
/// of an SDK client built from the environment alone: never to real AWS by accident).
pub fn local_aws(cmd: &mut Command, endpoint: &str) {
    cmd.env("DYNAMODB_ENDPOINT", endpoint)
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        .envs(DUMMY_AWS);
    for key in REAL_AWS {
        cmd.env_remove(key);
    }
}

/// Err if Ctrl-C or SIGTERM arrived: the caller unwinds and the `Drop` guards clean up.
pub fn interrupted() -> Result {
    match crate::signal::received() {
        true => Err("interrupted".into()),
        false => Ok(()),
    }
}

/// Calls `probe` every `every` until it gives a value; `Ok(None)` once `deadline` has passed.
/// Ctrl-C, or an error from `probe` (a part that died), ends the wait at once.
pub fn poll<T>(
    deadline: Instant,
    every: Duration,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    loop {
        interrupted()?;
        if let Some(value) = probe()? {
            return Ok(Some(value));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(every);
    }
}

/// The command line, for messages.
pub fn display(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Asks the OS for a free TCP port. The port is released again before the
/// caller binds it, so another process could grab it in between; callers
/// that care retry (see `dynamodb_local::start`).
///
/// Probes the wildcard address, not just 127.0.0.1: DynamoDB Local listens
/// on all interfaces, so the port has to be free on all of them.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))?
        .local_addr()?
        .port())
}

/// Whether `port` can be listened on (on all interfaces, as for [`free_port`]).
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

/// `$PATH` with `dir` in front, so tools installed in the cache win over any
/// other copies on the machine.
pub fn path_with(dir: &Path) -> Result<OsString> {
    let rest = env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(dir.to_path_buf()).chain(env::split_paths(&rest));
    Ok(env::join_paths(dirs)?)
}

/// The last `n` lines of a (log) file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Writes a file only the owner can read (it holds tokens), atomically, so
/// a reader never sees half of it.
pub fn write_private(path: &Path, text: &str) -> Result {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(0o600);
    let mut file = options
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    drop(file);
    fs::rename(&tmp, path)?;
    Ok(())
}
