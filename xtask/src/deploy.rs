//! `cargo xtask deploy`: the stack on AWS in one command.
//!
//! The SSM parameters checked (a missing one stops the deploy before anything is built or
//! changed, with the command that creates it) → `sam build` → `sam deploy` → the stack's outputs read back →
//! the page uploaded and CloudFront's copies invalidated (`Frontend=cloudfront`) → the URLs
//! printed and the outputs recorded in `.dev/deployed.json`, where the operator CLI finds the
//! stack's region and table names (`tollgate …` then needs no exported variables, and says
//! which stack it talks to).
//!
//! Choices worth knowing:
//!
//! - The first deploy asks four questions (stack name, region, frontend, alarm e-mail) when it
//!   runs in a terminal; the answers are kept in `.dev/deployed.json` and reused, and
//!   `--guided` asks again. Without a terminal nothing is asked: flags, then the record, then
//!   the defaults (`tollgate`, the profile's region, `cloudfront`, no e-mail).
//! - `OriginVerifySecret` (what CloudFront sends the functions) is a `NoEcho` parameter that
//!   CloudFormation cannot read from a SecureString itself, so it is read from SSM here and
//!   handed to `sam deploy` in a config file that only this user can read and that is removed
//!   afterwards: never on a command line, where any local user could read it, and never
//!   printed. The rest of `samconfig.toml` (capabilities, the change set to confirm, SAM's
//!   bucket) is that file's too: the config is a copy of the committed one with the
//!   parameters added.
//! - `sam` is the pinned one `cargo xtask setup` puts in the cache's venv, with cargo-lambda
//!   and zig beside it on `PATH` (`sam build` runs `cargo lambda build --release --arm64`);
//!   `aws` is the AWS CLI on `PATH` (a prerequisite, like an AWS account). `--profile` and
//!   `--region` go to every `sam` and `aws` call.
//! - The page upload sends only the page's own files (the top-level `*.html`, `*.js`, `*.css`
//!   of `web/`, not its tooling or tests), `config.json` from the `PageConfig` output, all with
//!   `max-age=300`, then invalidates `/*` so the edges fetch the new files at once.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::util::{self, info, step, Result};

/// Where the deployment is recorded, relative to the workspace root (`.dev/` is not committed).
pub const RECORD: &str = ".dev/deployed.json";
const DEFAULT_STACK: &str = "tollgate";
const FRONTENDS: [&str; 2] = ["cloudfront", "httpapi"];

/// The SecureString parameters the functions read: (template parameter that names it, its
/// default name in `template.yaml`, the value `put-parameter` is shown with).
const SSM_PARAMETERS: [(&str, &str, &str); 3] = [
    (
        "OpenAiApiKeyParam",
        "/tollgate/openai-api-key",
        "\"$OPENAI_API_KEY\"",
    ),
    (
        "InternalTokenParam",
        "/tollgate/internal-token",
        "\"$(openssl rand -hex 32)\"",
    ),
    (
        "OriginVerifySecretParam",
        "/tollgate/origin-verify-secret",
        "\"$(openssl rand -hex 32)\"",
    ),
];

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Ask the first-deploy questions again (stack name, region, frontend, alarm e-mail)
    #[arg(long)]
    pub guided: bool,
    /// The AWS profile every `sam` and `aws` call uses
    #[arg(long)]
    pub profile: Option<String>,
    /// The AWS region (default: the recorded one, else the profile's)
    #[arg(long)]
    pub region: Option<String>,
    /// The CloudFormation stack (default: the recorded one, else `tollgate`)
    #[arg(long)]
    pub stack_name: Option<String>,
    /// A template parameter, e.g. `Frontend=httpapi` or `SessionRateLimits=ip=5/1h,global=500/1d`
    /// (repeatable; kept for the next deploy)
    #[arg(long = "parameter", value_name = "KEY=VALUE")]
    pub parameters: Vec<String>,
    /// Apply the change set without asking (`sam deploy --no-confirm-changeset`)
    #[arg(long)]
    pub yes: bool,
}

/// `.dev/deployed.json`: what was chosen and what the stack answered. The CLI reads
/// `stack_name`, `region`, `profile` and `outputs`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployed {
    pub stack_name: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Template parameters chosen here (never the origin secret).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// The stack's outputs after the last deploy.
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Unix seconds of the last deploy.
    #[serde(default)]
    pub deployed_at: u64,
}

/// The executables a deploy runs, and the `PATH` they run with.
pub struct Tools {
    pub sam: PathBuf,
    pub aws: PathBuf,
    pub path: OsString,
}

/// `cargo xtask deploy`.
pub fn run(args: Args) -> Result {
    let venv_bin = crate::setup::python_tools_alone()?;
    let path = util::path_with(&venv_bin)?;
    let aws = std::env::split_paths(&path)
        .map(|dir| dir.join("aws"))
        .find(|p| p.is_file())
        .ok_or("the AWS CLI (`aws`) is not on PATH: install it (https://aws.amazon.com/cli/) and configure credentials")?;
    let tools = Tools {
        sam: venv_bin.join("sam"),
        aws,
        path,
    };
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    deploy(
        &args,
        &tools,
        &util::workspace_root(),
        interactive.then(|| stdin.lock()),
    )
}

/// The deploy from `root`, asking through `answers` when there is a terminal (tests pass a
/// buffer).
pub fn deploy(args: &Args, tools: &Tools, root: &Path, answers: Option<impl BufRead>) -> Result {
    let record_path = root.join(RECORD);
    let before = read_record(&record_path)?;
    let mut d = choose(args, tools, before.as_ref(), answers)?;

    step("check the SSM parameters");
    let origin_secret = check_parameters(tools, &d)?;

    step("sam build");
    util::run(&mut sam(tools, &d, root, "build"))?;

    step("sam deploy");
    let config = PrivateFile::write(
        &root.join(".dev/deploy-samconfig.toml"),
        &sam_config(root, &d, origin_secret.as_deref())?,
    )?;
    let mut deploy = sam(tools, &d, root, "deploy");
    deploy
        .arg("--config-file")
        .arg(&config.0)
        .args(["--stack-name", &d.stack_name]);
    if args.yes {
        deploy.arg("--no-confirm-changeset");
    }
    util::run(&mut deploy)?;
    drop(config);

    step("read the stack's outputs");
    d.outputs = outputs(tools, &d)?;
    d.deployed_at = util::unix_now();
    write_record(&record_path, &d)?;

    if let Some(bucket) = d.outputs.get("PageBucketName") {
        step("upload the page");
        upload_page(tools, &d, root, bucket)?;
    }
    print_summary(&d);
    Ok(())
}

/// Flags, then the record, then (first time or `--guided`, in a terminal) the answers, then
/// the defaults.
fn choose(
    args: &Args,
    tools: &Tools,
    before: Option<&Deployed>,
    answers: Option<impl BufRead>,
) -> Result<Deployed> {
    let mut d = before.cloned().unwrap_or_default();
    d.outputs.clear();
    if args.profile.is_some() {
        d.profile = args.profile.clone();
    }
    for p in &args.parameters {
        let (key, value) = parse_parameter(p)?;
        d.parameters.insert(key.into(), value.into());
    }
    let ask = (before.is_none() || args.guided)
        .then_some(answers)
        .flatten();
    let profile_region = || aws_line(tools, d.profile.as_deref(), &["configure", "get", "region"]);
    let stack = args
        .stack_name
        .clone()
        .or_else(|| Some(d.stack_name.clone()).filter(|s| !s.is_empty()));
    let region = args
        .region
        .clone()
        .or_else(|| Some(d.region.clone()).filter(|r| !r.is_empty()));
    let frontend = d.parameters.get("Frontend").cloned();
    let email = d.parameters.get("AlarmEmail").cloned();
    if let Some(mut answers) = ask {
        eprintln!(
            "First deploy from here (or --guided): four questions; Enter keeps [the default]."
        );
        d.stack_name = prompt(
            &mut answers,
            "Stack name",
            stack.unwrap_or_else(|| DEFAULT_STACK.into()),
        )?;
        d.region = prompt(
            &mut answers,
            "AWS region",
            region.or_else(profile_region).unwrap_or_default(),
        )?;
        let frontend = prompt(
            &mut answers,
            "Frontend (cloudfront or httpapi)",
            frontend.unwrap_or_else(|| FRONTENDS[0].into()),
        )?;
        d.parameters.insert("Frontend".into(), frontend);
        let email = prompt(
            &mut answers,
            "Alarm e-mail (empty: none)",
            email.unwrap_or_default(),
        )?;
        match email.is_empty() {
            true => d.parameters.remove("AlarmEmail"),
            false => d.parameters.insert("AlarmEmail".into(), email),
        };
    } else {
        d.stack_name = stack.unwrap_or_else(|| DEFAULT_STACK.into());
        d.region = region.or_else(profile_region).unwrap_or_default();
    }
    if d.region.is_empty() {
        return Err("no AWS region: pass --region, or set one in your AWS profile (`aws configure set region …`)".into());
    }
    let frontend = d
        .parameters
        .get("Frontend")
        .map_or(FRONTENDS[0], String::as_str);
    if !FRONTENDS.contains(&frontend) {
        return Err(format!("Frontend must be cloudfront or httpapi, not {frontend:?}").into());
    }
    for (key, value) in &d.parameters {
        check_value(key, value)?;
    }
    Ok(d)
}

/// One question; an empty answer (or the end of input) keeps `default`.
fn prompt(answers: &mut impl BufRead, question: &str, default: String) -> Result<String> {
    eprint!("{question} [{default}]: ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    answers.read_line(&mut line)?;
    let line = line.trim();
    Ok(if line.is_empty() {
        default
    } else {
        line.into()
    })
}

fn parse_parameter(p: &str) -> Result<(&str, &str)> {
    match p.split_once('=') {
        Some((key, value)) if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()) => {
            if key == "OriginVerifySecret" {
                return Err("OriginVerifySecret is read from its SSM parameter, never passed on a command line".into());
            }
            Ok((key, value))
        }
        _ => Err(format!(
            "--parameter wants KEY=VALUE with a template parameter's name, not {p:?}"
        )
        .into()),
    }
}

/// SAM's `parameter_overrides` separates parameters by spaces and quotes with `"`.
fn check_value(key: &str, value: &str) -> Result {
    if value
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(format!(
            "parameter {key}: spaces, quotes and backslashes are not supported in values"
        )
        .into());
    }
    Ok(())
}

/// The SSM parameters the stack names must exist; returns the origin-verify secret's value
/// when CloudFront needs it.
fn check_parameters(tools: &Tools, d: &Deployed) -> Result<Option<String>> {
    let names: Vec<(&str, String, &str)> = SSM_PARAMETERS
        .iter()
        .map(|(param, default, value)| {
            let name = d
                .parameters
                .get(*param)
                .cloned()
                .unwrap_or_else(|| (*default).into());
            (*param, name, *value)
        })
        .collect();
    let mut args = vec!["ssm", "get-parameters", "--output", "json", "--names"];
    args.extend(names.iter().map(|(_, name, _)| name.as_str()));
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Found {
        #[serde(default)]
        invalid_parameters: Vec<String>,
    }
    let found: Found = serde_json::from_str(&aws_output(tools, d, &args)?)
        .map_err(|e| format!("`aws ssm get-parameters` answered something unreadable: {e}"))?;
    let target = target_flags(d).join(" ");
    let missing: Vec<String> = names
        .iter()
        .filter(|(_, name, _)| found.invalid_parameters.contains(name))
        .map(|(_, name, value)| format!("  aws ssm put-parameter --type SecureString --name {name} --value {value} {target}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} SSM parameter(s) the functions read do not exist in {}; nothing was deployed. Create them with:\n{}",
            missing.len(),
            d.region,
            missing.join("\n")
        )
        .into());
    }
    if d.parameters
        .get("Frontend")
        .is_some_and(|f| f != "cloudfront")
    {
        return Ok(None);
    }
    let origin = &names[2].1;
    let value = aws_output(
        tools,
        d,
        &[
            "ssm",
            "get-parameter",
            "--with-decryption",
            "--name",
            origin,
            "--query",
            "Parameter.Value",
            "--output",
            "text",
        ],
    )?;
    let value = value.trim();
    if value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(format!("the value of {origin} is empty or holds spaces or quotes: put a new one (e.g. `openssl rand -hex 32`)").into());
    }
    Ok(Some(value.to_string()))
}

/// `samconfig.toml` with the deploy's parameters added to its `[default.deploy.parameters]`.
fn sam_config(root: &Path, d: &Deployed, origin_secret: Option<&str>) -> Result<String> {
    let committed = fs::read_to_string(root.join("samconfig.toml"))?;
    let mut overrides: Vec<String> = d
        .parameters
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    if let Some(secret) = origin_secret {
        overrides.push(format!("OriginVerifySecret=\"{secret}\""));
    }
    let header = "[default.deploy.parameters]";
    let (head, tail) = committed
        .split_once(header)
        .ok_or("samconfig.toml has no [default.deploy.parameters] table")?;
    let line = serde_json::to_string(&overrides.join(" "))?;
    Ok(format!(
        "{head}{header}\nparameter_overrides = {line}{tail}"
    ))
}

/// A file only this user can read, removed when dropped.
struct PrivateFile(PathBuf);

impl PrivateFile {
    fn write(path: &Path, text: &str) -> Result<Self> {
        fs::create_dir_all(path.parent().ok_or("no parent")?)?;
        util::write_private(path, text)?;
        Ok(Self(path.to_path_buf()))
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn outputs(tools: &Tools, d: &Deployed) -> Result<BTreeMap<String, String>> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Stacks {
        stacks: Vec<Described>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Described {
        #[serde(default)]
        outputs: Vec<Output>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Output {
        output_key: String,
        output_value: String,
    }
    let text = aws_output(
        tools,
        d,
        &[
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            &d.stack_name,
            "--output",
            "json",
        ],
    )?;
    let stacks: Stacks = serde_json::from_str(&text).map_err(|e| {
        format!("`aws cloudformation describe-stacks` answered something unreadable: {e}")
    })?;
    let stack = stacks
        .stacks
        .into_iter()
        .next()
        .ok_or("describe-stacks found no stack")?;
    Ok(stack
        .outputs
        .into_iter()
        .map(|o| (o.output_key, o.output_value))
        .collect())
}

fn upload_page(tools: &Tools, d: &Deployed, root: &Path, bucket: &str) -> Result {
    let dest = format!("s3://{bucket}/");
    let web = root.join("web");
    let mut sync = aws(tools, d);
    sync.args(["s3", "sync"])
        .arg(format!("{}/", web.display()))
        .arg(&dest)
        .args(["--delete", "--cache-control", "max-age=300"])
        // Later filters win and `*` also matches `/`: only the page's own top-level files.
        .args([
            "--exclude",
            "*",
            "--include",
            "*.html",
            "--include",
            "*.js",
            "--include",
            "*.css",
            "--exclude",
            "*/*",
        ]);
    util::run(&mut sync)?;
    let config = d
        .outputs
        .get("PageConfig")
        .ok_or("the stack has a page bucket but no PageConfig output")?;
    let mut cp = aws(tools, d);
    cp.args(["s3", "cp", "-"])
        .arg(format!("{dest}config.json"))
        .args([
            "--content-type",
            "application/json",
            "--cache-control",
            "max-age=300",
        ])
        .stdin(Stdio::piped());
    let mut child = cp
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", util::display(&cp)))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(config.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", util::display(&cp)).into());
    }
    if let Some(id) = d.outputs.get("DistributionId") {
        let mut invalidate = aws(tools, d);
        invalidate
            .args([
                "cloudfront",
                "create-invalidation",
                "--distribution-id",
                id,
                "--paths",
                "/*",
                "--output",
                "json",
            ])
            .stdout(Stdio::null());
        util::run(&mut invalidate)?;
        info(format!("invalidated /* on distribution {id}"));
    }
    Ok(())
}

fn print_summary(d: &Deployed) {
    step(&format!("deployed stack {} in {}", d.stack_name, d.region));
    for key in ["PageUrl", "ApiBaseUrl", "SessionUrl", "TransferUrl"] {
        if let Some(url) = d.outputs.get(key) {
            println!("{key}={url}");
        }
    }
    info(format!(
        "recorded in {RECORD}: `tollgate …` now talks to this stack (e.g. `tollgate clients create --name acme`)"
    ));
}

fn read_record(path: &Path) -> Result<Option<Deployed>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(serde_json::from_str(&text).map_err(|e| {
            format!("{} is unreadable ({e}): fix or remove it", path.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display()).into()),
    }
}

fn write_record(path: &Path, d: &Deployed) -> Result {
    fs::create_dir_all(path.parent().ok_or("no parent")?)?;
    fs::write(path, serde_json::to_string_pretty(d)? + "\n")?;
    Ok(())
}

/// `--profile`/`--region` as every call gets them.
fn target_flags(d: &Deployed) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(p) = &d.profile {
        flags.extend(["--profile".to_string(), p.clone()]);
    }
    if !d.region.is_empty() {
        flags.extend(["--region".to_string(), d.region.clone()]);
    }
    flags
}

/// `sam <subcommand> --profile … --region …` from `root` (SAM's options follow the subcommand).
fn sam(tools: &Tools, d: &Deployed, root: &Path, subcommand: &str) -> Command {
    let mut cmd = Command::new(&tools.sam);
    cmd.current_dir(root)
        .env("PATH", &tools.path)
        .arg(subcommand)
        .args(target_flags(d));
    cmd
}

fn aws(tools: &Tools, d: &Deployed) -> Command {
    let mut cmd = Command::new(&tools.aws);
    cmd.env("PATH", &tools.path).args(target_flags(d));
    cmd
}

/// What an `aws` call prints on stdout; its stderr goes to the terminal.
fn aws_output(tools: &Tools, d: &Deployed, args: &[&str]) -> Result<String> {
    let mut cmd = aws(tools, d);
    cmd.args(args).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", util::display(&cmd)))?;
    if !out.status.success() {
        return Err(format!("`{}` failed ({})", util::display(&cmd), out.status).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// One line from `aws`, e.g. the profile's region; `None` if it has none.
fn aws_line(tools: &Tools, profile: Option<&str>, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new(&tools.aws);
    cmd.env("PATH", &tools.path);
    if let Some(p) = profile {
        cmd.args(["--profile", p]);
    }
    let out = cmd.args(args).stderr(Stdio::null()).output().ok()?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}

#[cfg(test)]
mod tests {
    //! The deploy against stand-in `sam` and `aws` executables that record their arguments and
    //! answer as the real ones do (no AWS is reachable from a test).

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    /// A workspace with the committed `samconfig.toml` and a page, and stand-ins on `PATH`.
    struct Bench {
        root: PathBuf,
        bin: PathBuf,
    }

    impl Bench {
        /// `missing`: the SSM parameters the stand-in reports as absent; `outputs`: the
        /// stack's outputs as `describe-stacks` gives them.
        fn new(name: &str, missing: &[&str], outputs: &[(&str, &str)]) -> Self {
            let root =
                std::env::temp_dir().join(format!("xtask-deploy-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            let bin = root.join("bin");
            fs::create_dir_all(&bin).unwrap();
            fs::create_dir_all(root.join("web/test")).unwrap();
            fs::write(root.join("web/index.html"), "<!doctype html>").unwrap();
            fs::copy(
                util::workspace_root().join("samconfig.toml"),
                root.join("samconfig.toml"),
            )
            .unwrap();
            let outputs: Vec<_> = outputs
                .iter()
                .map(|(k, v)| serde_json::json!({"OutputKey": k, "OutputValue": v}))
                .collect();
            let stacks = serde_json::json!({"Stacks": [{"StackName": "x", "Outputs": outputs}]});
            fs::write(root.join("stacks.json"), stacks.to_string()).unwrap();
            let invalid = serde_json::json!({"Parameters": [], "InvalidParameters": missing});
            fs::write(root.join("parameters.json"), invalid.to_string()).unwrap();
            let dir = root.display();
            // Each call appends one line to calls.log: the program and its arguments.
            let aws = format!(
                r#"#!/bin/sh
echo "aws $*" >> {dir}/calls.log
case "$*" in
  *"configure get region"*) echo us-test-1 ;;
  *"ssm get-parameters"*) cat {dir}/parameters.json ;;
  *"ssm get-parameter "*) echo {SECRET} ;;
  *"cloudformation describe-stacks"*) cat {dir}/stacks.json ;;
  *"s3 cp -"*) cat > {dir}/uploaded-config.json ;;
  *"s3 sync"*) echo "upload: web/index.html" ;;
  *"cloudfront create-invalidation"*) echo '{{"Invalidation": {{"Id": "I1"}}}}' ;;
  *) echo "unexpected aws call" >&2; exit 2 ;;
esac
"#
            );
            let sam = format!(
                r#"#!/bin/sh
echo "sam $*" >> {dir}/calls.log
[ "$1" = deploy ] || exit 0
while [ $# -gt 0 ]; do
  if [ "$1" = --config-file ]; then cp "$2" {dir}/seen-samconfig.toml; stat -c %a "$2" > {dir}/seen-mode; fi
  shift
done
"#
            );
            for (name, text) in [("aws", aws), ("sam", sam)] {
                fs::write(bin.join(name), text).unwrap();
                fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
            }
            Self { root, bin }
        }

        fn tools(&self) -> Tools {
            let path =
                std::env::join_paths([self.bin.clone(), "/usr/bin".into(), "/bin".into()]).unwrap();
            Tools {
                sam: self.bin.join("sam"),
                aws: self.bin.join("aws"),
                path,
            }
        }

        fn calls(&self) -> Vec<String> {
            fs::read_to_string(self.root.join("calls.log"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect()
        }

        fn read(&self, name: &str) -> String {
            fs::read_to_string(self.root.join(name)).unwrap_or_default()
        }

        fn record(&self) -> Deployed {
            serde_json::from_str(&self.read(RECORD)).unwrap()
        }
    }

    impl Drop for Bench {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    const CLOUDFRONT_OUTPUTS: &[(&str, &str)] = &[
        ("PageUrl", "https://d1.cloudfront.net/"),
        ("ApiBaseUrl", "https://d1.cloudfront.net/api"),
        ("PageBucketName", "page-bucket"),
        ("DistributionId", "E1"),
        (
            "PageConfig",
            r#"{"api":"/api","realtime":"https://api.openai.com"}"#,
        ),
        ("ClientsTableName", "mystack-ClientsTable-1"),
    ];

    #[test]
    fn a_first_deploy_asks_then_builds_deploys_uploads_and_records_the_stack() {
        let b = Bench::new("first", &[], CLOUDFRONT_OUTPUTS);
        let answers = std::io::Cursor::new("mystack\n\n\nops@example.com\n");
        deploy(&Args::default(), &b.tools(), &b.root, Some(answers)).unwrap();

        let calls = b.calls();
        // Every call in order, each known by a part of its command line.
        const ORDER: [&str; 9] = [
            "configure get region",
            "ssm get-parameters",
            "ssm get-parameter --with-decryption",
            "sam build --region us-test-1",
            "sam deploy --region us-test-1",
            "describe-stacks",
            "s3 sync",
            "s3 cp -",
            "create-invalidation",
        ];
        let kinds: Vec<&str> = calls
            .iter()
            .map(|c| ORDER.into_iter().find(|k| c.contains(k)).unwrap_or(c))
            .collect();
        assert_eq!(kinds, ORDER, "{calls:#?}");
        assert!(
            calls.iter().all(|c| !c.contains(SECRET)),
            "the secret reached a command line: {calls:#?}"
        );
        assert!(calls[4].contains("--stack-name mystack"), "{}", calls[4]);
        assert!(calls[1].contains("--names /tollgate/openai-api-key /tollgate/internal-token /tollgate/origin-verify-secret"), "{}", calls[1]);
        assert!(
            calls[6].contains(
                "--exclude * --include *.html --include *.js --include *.css --exclude */*"
            ),
            "{}",
            calls[6]
        );

        // The secret went to sam in a file only this user could read, removed afterwards.
        let seen = b.read("seen-samconfig.toml");
        assert!(seen.contains(&format!(r#"parameter_overrides = "AlarmEmail=\"ops@example.com\" Frontend=\"cloudfront\" OriginVerifySecret=\"{SECRET}\"""#)), "{seen}");
        assert!(
            seen.contains("capabilities = \"CAPABILITY_IAM\""),
            "the committed settings are kept: {seen}"
        );
        assert_eq!(b.read("seen-mode").trim(), "600");
        assert!(!b.root.join(".dev/deploy-samconfig.toml").exists());

        assert_eq!(b.read("uploaded-config.json"), CLOUDFRONT_OUTPUTS[4].1);
        let record = b.record();
        assert_eq!(
            (record.stack_name.as_str(), record.region.as_str()),
            ("mystack", "us-test-1")
        );
        assert_eq!(
            record.outputs.get("ClientsTableName").map(String::as_str),
            Some("mystack-ClientsTable-1")
        );
        assert_eq!(
            record.parameters.get("AlarmEmail").map(String::as_str),
            Some("ops@example.com")
        );
        assert!(!b.read(RECORD).contains(SECRET));
    }

    #[test]
    fn a_missing_parameter_stops_the_deploy_before_anything_changes_and_names_the_command() {
        let b = Bench::new("missing", &["/tollgate/internal-token"], CLOUDFRONT_OUTPUTS);
        let args = Args {
            region: Some("eu-west-1".into()),
            ..Args::default()
        };
        let err = deploy(&args, &b.tools(), &b.root, None::<&[u8]>)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "aws ssm put-parameter --type SecureString --name /tollgate/internal-token"
            ),
            "{err}"
        );
        assert!(err.contains("--region eu-west-1"), "{err}");
        assert!(
            !err.contains("openai-api-key"),
            "only the missing one is named: {err}"
        );
        assert!(
            b.calls().iter().all(|c| !c.starts_with("sam")),
            "{:#?}",
            b.calls()
        );
        assert!(!b.root.join(RECORD).exists());
    }

    #[test]
    fn a_later_deploy_reuses_the_record_asks_nothing_and_passes_profile_and_region_through() {
        let b = Bench::new(
            "later",
            &[],
            &[(
                "ApiBaseUrl",
                "https://x.execute-api.eu-west-1.amazonaws.com",
            )],
        );
        let before = Deployed {
            stack_name: "api".into(),
            region: "eu-west-1".into(),
            parameters: [("Frontend".to_string(), "httpapi".to_string())].into(),
            ..Deployed::default()
        };
        write_record(&b.root.join(RECORD), &before).unwrap();
        let args = Args {
            profile: Some("prod".into()),
            yes: true,
            ..Args::default()
        };
        // Answers are there but unused: a record exists and --guided is not given.
        deploy(
            &args,
            &b.tools(),
            &b.root,
            Some(std::io::Cursor::new("other\n")),
        )
        .unwrap();
        let calls = b.calls();
        assert!(
            calls
                .iter()
                .all(|c| c.contains("--profile prod --region eu-west-1")),
            "{calls:#?}"
        );
        assert!(
            calls.iter().any(|c| c.contains("deploy")
                && c.contains("--stack-name api")
                && c.contains("--no-confirm-changeset")),
            "{calls:#?}"
        );
        // No CloudFront: no origin secret read, no page upload.
        assert!(
            calls
                .iter()
                .all(|c| !c.contains("--with-decryption") && !c.contains("s3 ")),
            "{calls:#?}"
        );
        assert!(b
            .read("seen-samconfig.toml")
            .contains(r#"parameter_overrides = "Frontend=\"httpapi\"""#));
        assert_eq!(b.record().profile.as_deref(), Some("prod"));
    }

    #[test]
    fn bad_parameters_are_refused_with_a_reason() {
        for (p, why) in [
            ("OriginVerifySecret=x", "never passed on a command line"),
            ("Frontend", "KEY=VALUE"),
            ("AlarmEmail=a b", "spaces"),
            ("Frontend=alb", "cloudfront or httpapi"),
        ] {
            let b = Bench::new("bad", &[], &[]);
            let args = Args {
                region: Some("r".into()),
                parameters: vec![p.into()],
                ..Args::default()
            };
            let err = deploy(&args, &b.tools(), &b.root, None::<&[u8]>)
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{p}: {err}");
            assert!(b.calls().is_empty(), "{p}: {:#?}", b.calls());
        }
    }

    #[test]
    fn the_parameter_names_checked_are_the_templates_defaults() {
        let template = fs::read_to_string(util::workspace_root().join("template.yaml")).unwrap();
        for (param, default, _) in SSM_PARAMETERS {
            let at = template
                .find(&format!("\n  {param}:"))
                .unwrap_or_else(|| panic!("{param} is not a template parameter"));
            let next = template[at..].find("Default:").unwrap() + at;
            assert!(
                template[next..].starts_with(&format!("Default: {default}\n")),
                "{param}"
            );
        }
    }
}
