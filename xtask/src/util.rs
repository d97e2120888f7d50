//! Helpers shared by the tasks: where things live, running commands, probing a local server
//! over HTTP (`ureq`), and progress output.
//!
//! Progress goes to stderr so that stdout stays free for values a caller may want to capture
//! (e.g. the endpoint printed by `cargo xtask dynamodb`).

use std::env;
use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use anyhow::{anyhow, bail, Context};

/// Errors are only ever reported to a human: a message with its context is all we need.
pub type Result<T = ()> = anyhow::Result<T>;

/// Prints the one-line header that starts a step, e.g. `==> clippy`.
pub fn step(name: &str) {
    eprintln!("==> {name}");
}

/// Prints a progress line that belongs to the current step.
pub fn info(msg: impl std::fmt::Display) {
    eprintln!("    {msg}");
}

/// The workspace root, whichever directory `cargo xtask` was started from.
pub fn workspace_root() -> PathBuf {
    // `cargo xtask` (`cargo run`) sets it for this run; the value compiled in is the fallback.
    // Two clones sharing one `CARGO_TARGET_DIR` share this binary too: the compiled-in
    // directory may be the other clone's.
    let dir = env::var_os("CARGO_MANIFEST_DIR");
    let dir = dir.map_or(env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    dir.parent().expect("xtask is a workspace member").into()
}

/// Where tools, venv and logs are kept: `$TOLLGATE_CACHE_DIR`, else `$HOME/.cache/tollgate`.
/// Never inside the repository, so nothing downloaded can end up in a commit, and CI can keep
/// it warm between runs.
pub fn cache_dir() -> Result<PathBuf> {
    let var = |name| env::var_os(name).filter(|d| !d.is_empty());
    let home = || Some(Path::new(&var("HOME")?).join(".cache/tollgate"));
    let dir = var("TOLLGATE_CACHE_DIR").map(PathBuf::from).or_else(home);
    let dir = dir.context("neither TOLLGATE_CACHE_DIR nor HOME is set")?;
    // Child processes run in other directories, so a relative path is pinned down now.
    Ok(std::path::absolute(dir)?)
}

/// A `cargo` command run from the workspace root, with `$CARGO` (set by `cargo run`) so the
/// toolchain that built xtask does the work.
pub fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Running a command with its failure as an error that names it.
pub trait CmdExt {
    /// Runs it (stdio as set, inherited by default); Err unless it exits 0.
    fn run(&mut self) -> Result;
    /// Its stdout; Err unless it exits 0, with what it wrote to stderr (unless inherited).
    fn read(&mut self) -> Result<String>;
    /// The command line, for messages.
    fn display(&self) -> String;
}

impl CmdExt for Command {
    fn run(&mut self) -> Result {
        let status = self.status();
        let status = status.with_context(|| format!("could not start `{}`", self.display()))?;
        match status.success() {
            true => Ok(()),
            false => bail!("`{}` failed ({status})", self.display()),
        }
    }

    fn read(&mut self) -> Result<String> {
        let out = self.output();
        let out = out.with_context(|| format!("could not start `{}`", self.display()))?;
        if !out.status.success() {
            let (shown, status) = (self.display(), out.status);
            let stderr = String::from_utf8_lossy(&out.stderr);
            match stderr.trim() {
                "" => bail!("`{shown}` failed ({status})"),
                stderr => bail!("`{shown}` failed ({status}): {stderr}"),
            }
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    fn display(&self) -> String {
        let words = std::iter::once(self.get_program()).chain(self.get_args());
        let words: Vec<_> = words.map(|s| s.to_string_lossy()).collect();
        words.join(" ")
    }
}

/// `cmd` (a `cargo`) with `build <args>`, returning the path of each binary in `bins` as cargo
/// reports it (so `CARGO_TARGET_DIR` and profiles need no guessing). Diagnostics go to the
/// terminal.
pub fn build_bins(mut cmd: Command, args: &[&str], bins: &[&str]) -> Result<Vec<PathBuf>> {
    cmd.arg("build").args(args);
    cmd.arg("--message-format=json-render-diagnostics");
    let out = cmd.stderr(Stdio::inherit()).read()?;
    /// The part of a `compiler-artifact` message read here.
    #[derive(serde::Deserialize)]
    struct Artifact {
        target: Target,
        executable: Option<PathBuf>,
    }
    #[derive(serde::Deserialize)]
    struct Target {
        name: String,
    }
    let artifacts = out.lines().filter_map(|l| serde_json::from_str(l).ok());
    let artifacts: Vec<Artifact> = artifacts.collect();
    let find = |bin: &&str| {
        let mut built = artifacts.iter().filter(|a| a.target.name == *bin);
        let exe = built.find_map(|a| a.executable.clone());
        exe.with_context(|| format!("`{}` reported no `{bin}` binary", cmd.display()))
    };
    bins.iter().map(find).collect()
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
    let config = ureq::Agent::config_builder().timeout_global(Some(timeout));
    let agent: ureq::Agent = config.http_status_as_error(false).build().into();
    let mut request = ureq::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = match body {
        Some(body) => agent.run(request.body(body)?)?,
        None => agent.run(request.body(())?)?,
    };
    let content_type = response.headers().get("content-type");
    let content_type = content_type.and_then(|v| v.to_str().ok());
    Ok(Answer {
        status: response.status().as_u16(),
        content_type: content_type.unwrap_or_default().to_string(),
        body: response.body_mut().read_to_string().unwrap_or_default(),
    })
}

/// The first line `cmd` prints (stdout, else stderr: `java -version` writes there), if it runs
/// and succeeds; for version strings.
pub fn first_line(cmd: &mut Command) -> Option<String> {
    let out = cmd.stdin(Stdio::null()).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().next().filter(|_| out.status.success());
    line.map(|l| l.trim().to_string())
}

/// Dummy AWS credentials and region set, real ones removed, and DynamoDB calls sent to
/// `endpoint` (also those of an SDK client built from the environment alone): a local child
/// never sends anything to real AWS, not even to a local port.
pub fn local_aws(cmd: &mut Command, endpoint: &str) {
    cmd.env("DYNAMODB_ENDPOINT", endpoint);
    cmd.env("AWS_ENDPOINT_URL_DYNAMODB", endpoint);
    cmd.env("AWS_ACCESS_KEY_ID", "test");
    cmd.env("AWS_SECRET_ACCESS_KEY", "test");
    cmd.env("AWS_REGION", "us-east-1");
    // No lookup of real credentials from instance metadata.
    cmd.env("AWS_EC2_METADATA_DISABLED", "true");
    cmd.env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE");
}

/// Err if Ctrl-C or SIGTERM arrived: the caller unwinds and the `Drop` guards clean up.
pub fn interrupted() -> Result {
    match crate::signal::received() {
        true => bail!("interrupted"),
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

/// A free TCP port. It is released again before the caller binds it, so another process could
/// grab it in between; callers that care retry (see `dynamodb_local::start`). Probes the
/// wildcard address: DynamoDB Local listens on all interfaces, so the port must be free on all.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Whether `port` can be listened on (on all interfaces, as for [`free_port`]).
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

/// `$PATH` with `dir` in front, so tools installed in the cache win over other copies.
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
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap_or_default().as_secs()
}

/// Writes a file only the owner can read (it holds tokens), atomically, so a reader never sees
/// half of it.
pub fn write_private(path: &Path, text: &str) -> Result {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(0o600);
    let file = options.open(&tmp);
    let mut file = file.with_context(|| format!("cannot write {}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(fs::rename(&tmp, path)?)
}
