//! `cargo xtask deploy`: the stack on AWS in one command.
//!
//! The SSM parameters checked (a missing one stops the deploy before anything is built or
//! changed, with the command that creates it) → `sam build` → `sam deploy` → the stack's
//! outputs read back → the page uploaded and CloudFront's copies invalidated
//! (`Frontend=cloudfront`) → the URLs printed and the outputs recorded in `.dev/deployed.json`,
//! where the operator CLI finds the stack's region and table names (`tollgate …` then needs no
//! exported variables, and says which stack it talks to).
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
use serde_json::Value;

use crate::setup::{self, Need};
use crate::util::{self, bail, info, step, CmdExt, Context, Result};

/// Where the deployment is recorded, relative to the workspace root (`.dev/` is not committed).
pub const RECORD: &str = ".dev/deployed.json";
const DEFAULT_STACK: &str = "tollgate";
const FRONTENDS: [&str; 2] = ["cloudfront", "httpapi"];

/// The SecureString parameters the functions read: the template parameter that names each,
/// and its default name in `template.yaml`. The origin-verify secret is the last.
const SSM_PARAMETERS: [(&str, &str); 3] = [
    ("OpenAiApiKeyParam", "/tollgate/openai-api-key"),
    ("InternalTokenParam", "/tollgate/internal-token"),
    ("OriginVerifySecretParam", "/tollgate/origin-verify-secret"),
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
    setup::ensure(&[Need::Python])?;
    let venv_bin = setup::python_tools()?;
    let path = util::path_with(&venv_bin)?;
    let aws = std::env::split_paths(&path)
        .map(|dir| dir.join("aws"))
        .find(|p| p.is_file());
    let aws = aws.context("the AWS CLI (`aws`) is not on PATH: install it (https://aws.amazon.com/cli/) and configure credentials")?;
    let tools = Tools {
        sam: venv_bin.join("sam"),
        aws,
        path,
    };
    let stdin = std::io::stdin();
    let answers = stdin.is_terminal().then(|| stdin.lock());
    deploy(&args, &tools, &util::workspace_root(), answers)
}

/// The deploy from `root`, asking through `answers` when there is a terminal (tests pass a
/// buffer).
pub fn deploy(args: &Args, tools: &Tools, root: &Path, answers: Option<impl BufRead>) -> Result {
    let record_path = root.join(RECORD);
    let before = match fs::read_to_string(&record_path) {
        Ok(text) => Some(serde_json::from_str(&text).with_context(|| {
            format!("{} is unreadable: fix or remove it", record_path.display())
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => bail!("cannot read {}: {e}", record_path.display()),
    };
    let mut d = choose(args, tools, before, answers)?;

    step("check the SSM parameters");
    let origin_secret = check_parameters(tools, &d)?;

    step("sam build");
    sam(tools, &d, root, "build").run()?;

    step("sam deploy");
    let config = root.join(".dev/deploy-samconfig.toml");
    fs::create_dir_all(root.join(".dev"))?;
    util::write_private(&config, &sam_config(root, &d, origin_secret.as_deref())?)?;
    let mut deploy = sam(tools, &d, root, "deploy");
    deploy
        .arg("--config-file")
        .arg(&config)
        .args(["--stack-name", &d.stack_name]);
    if args.yes {
        deploy.arg("--no-confirm-changeset");
    }
    let deployed = deploy.run();
    // The file holds the origin secret: gone whether the deploy worked or not.
    let _ = fs::remove_file(&config);
    deployed?;

    step("read the stack's outputs");
    let describe = [
        "cloudformation",
        "describe-stacks",
        "--stack-name",
        &d.stack_name,
    ];
    let stacks: Value = aws_json(tools, &d, &describe)?;
    let stack = stacks["Stacks"]
        .get(0)
        .context("describe-stacks found no stack")?;
    let outputs = stack["Outputs"].as_array().into_iter().flatten();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    d.outputs = outputs
        .map(|o| (text(&o["OutputKey"]), text(&o["OutputValue"])))
        .collect();
    d.deployed_at = util::unix_now();
    fs::write(&record_path, serde_json::to_string_pretty(&d)? + "\n")?;

    if let Some(bucket) = d.outputs.get("PageBucketName") {
        step("upload the page");
        upload_page(tools, &d, root, bucket)?;
    }
    step(&format!("deployed stack {} in {}", d.stack_name, d.region));
    for key in ["PageUrl", "ApiBaseUrl", "SessionUrl", "TransferUrl"] {
        if let Some(url) = d.outputs.get(key) {
            println!("{key}={url}");
        }
    }
    info(format!("recorded in {RECORD}: `tollgate …` now talks to this stack (e.g. `tollgate clients create --name acme`)"));
    Ok(())
}

/// Flags, then the record, then (first time or `--guided`, in a terminal) the answers, then
/// the defaults.
fn choose(
    args: &Args,
    tools: &Tools,
    before: Option<Deployed>,
    answers: Option<impl BufRead>,
) -> Result<Deployed> {
    let ask = (before.is_none() || args.guided)
        .then_some(answers)
        .flatten();
    let mut d = before.unwrap_or_default();
    d.outputs.clear();
    d.profile = args.profile.clone().or(d.profile);
    for p in &args.parameters {
        let (key, value) = p
            .split_once('=')
            .filter(|(key, _)| !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()))
            .with_context(|| {
                format!("--parameter wants KEY=VALUE with a template parameter's name, not {p:?}")
            })?;
        if key == "OriginVerifySecret" {
            bail!(
                "OriginVerifySecret is read from its SSM parameter, never passed on a command line"
            );
        }
        d.parameters.insert(key.into(), value.into());
    }
    let recorded = |value: &String| Some(value.clone()).filter(|v| !v.is_empty());
    d.stack_name = (args.stack_name.clone().or(recorded(&d.stack_name)))
        .unwrap_or_else(|| DEFAULT_STACK.into());
    let region = args.region.clone().or(recorded(&d.region));
    // The profile's region, if it has one.
    let profile_region = || {
        // Asked only when no region is known, so the call has none.
        let mut cmd = aws(tools, &d);
        let out = cmd
            .args(["configure", "get", "region"])
            .stderr(Stdio::null())
            .read();
        out.ok()
            .map(|line| line.trim().to_string())
            .filter(|l| !l.is_empty())
    };
    d.region = region.or_else(profile_region).unwrap_or_default();
    if let Some(mut answers) = ask {
        eprintln!(
            "First deploy from here (or --guided): four questions; Enter keeps [the default]."
        );
        let mut ask = |question: &str, default: String| -> Result<String> {
            eprint!("{question} [{default}]: ");
            std::io::stderr().flush()?;
            let mut line = String::new();
            answers.read_line(&mut line)?;
            // An empty answer (or the end of input) keeps the default.
            Ok(Some(line.trim().to_string())
                .filter(|l| !l.is_empty())
                .unwrap_or(default))
        };
        d.stack_name = ask("Stack name", d.stack_name.clone())?;
        d.region = ask("AWS region", d.region.clone())?;
        let frontend = d.parameters.get("Frontend").cloned();
        let frontend = ask(
            "Frontend (cloudfront or httpapi)",
            frontend.unwrap_or(FRONTENDS[0].into()),
        )?;
        d.parameters.insert("Frontend".into(), frontend);
        let email = d.parameters.remove("AlarmEmail").unwrap_or_default();
        let email = ask("Alarm e-mail (empty: none)", email)?;
        if !email.is_empty() {
            d.parameters.insert("AlarmEmail".into(), email);
        }
    }
    if d.region.is_empty() {
        bail!("no AWS region: pass --region, or set one in your AWS profile (`aws configure set region …`)");
    }
    let frontend = d
        .parameters
        .get("Frontend")
        .map_or(FRONTENDS[0], String::as_str);
    if !FRONTENDS.contains(&frontend) {
        bail!("Frontend must be cloudfront or httpapi, not {frontend:?}");
    }
    // SAM's `parameter_overrides` separates parameters by spaces and quotes with `"`.
    if let Some(key) = d.parameters.iter().find(|(_, v)| !plain(v)).map(|(k, _)| k) {
        bail!("parameter {key}: spaces, quotes and backslashes are not supported in values");
    }
    Ok(d)
}

/// Whether `value` can stand in `parameter_overrides` as it is.
fn plain(value: &str) -> bool {
    !value
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
}

/// The SSM parameters the stack names must exist; returns the origin-verify secret's value
/// when CloudFront needs it.
fn check_parameters(tools: &Tools, d: &Deployed) -> Result<Option<String>> {
    let names = SSM_PARAMETERS.map(|(param, default)| {
        d.parameters
            .get(param)
            .cloned()
            .unwrap_or_else(|| default.into())
    });
    let mut args = vec!["ssm", "get-parameters", "--names"];
    args.extend(names.iter().map(String::as_str));
    let found = aws_json(tools, d, &args)?;
    let invalid = found["InvalidParameters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let target = target_flags(d).join(" ");
    let missing: Vec<String> = (names.iter().enumerate())
        .filter(|(_, name)| invalid.iter().any(|i| i == name.as_str()))
        .map(|(i, name)| {
            let value = match i {
                0 => "\"$OPENAI_API_KEY\"",
                _ => "\"$(openssl rand -hex 32)\"",
            };
            format!("  aws ssm put-parameter --type SecureString --name {name} --value {value} {target}")
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} SSM parameter(s) the functions read do not exist in {}; nothing was deployed. Create them with:\n{}",
            missing.len(),
            d.region,
            missing.join("\n")
        );
    }
    if d.parameters
        .get("Frontend")
        .is_some_and(|f| f != "cloudfront")
    {
        return Ok(None);
    }
    let origin = &names[2];
    let get = "ssm get-parameter --with-decryption --query Parameter.Value --output text --name";
    let mut cmd = aws(tools, d);
    let value = cmd
        .args(get.split(' '))
        .arg(origin)
        .stderr(Stdio::inherit())
        .read()?;
    let value = value.trim();
    if value.is_empty() || !plain(value) {
        bail!("the value of {origin} is empty or holds spaces or quotes: put a new one (e.g. `openssl rand -hex 32`)");
    }
    Ok(Some(value.to_string()))
}

/// `samconfig.toml` with the deploy's parameters added to its `[default.deploy.parameters]`.
fn sam_config(root: &Path, d: &Deployed, origin_secret: Option<&str>) -> Result<String> {
    let committed = fs::read_to_string(root.join("samconfig.toml"))?;
    let secret = origin_secret.map(|s| ("OriginVerifySecret".to_string(), s.to_string()));
    let overrides: Vec<String> = (d.parameters.clone().into_iter().chain(secret))
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    let header = "[default.deploy.parameters]";
    let (head, tail) = committed
        .split_once(header)
        .context("samconfig.toml has no [default.deploy.parameters] table")?;
    let line = serde_json::to_string(&overrides.join(" "))?;
    Ok(format!(
        "{head}{header}\nparameter_overrides = {line}{tail}"
    ))
}

fn upload_page(tools: &Tools, d: &Deployed, root: &Path, bucket: &str) -> Result {
    let dest = format!("s3://{bucket}/");
    // Later filters win and `*` also matches `/`: only the page's own top-level files.
    let filters = "--exclude * --include *.html --include *.js --include *.css --exclude */*";
    let mut sync = aws(tools, d);
    sync.args(["s3", "sync"])
        .arg(format!("{}/", root.join("web").display()))
        .arg(&dest);
    sync.args(["--delete", "--cache-control", "max-age=300"])
        .args(filters.split(' '))
        .run()?;
    let config = d
        .outputs
        .get("PageConfig")
        .context("the stack has a page bucket but no PageConfig output")?;
    let mut cp = aws(tools, d);
    cp.args(["s3", "cp", "-", &format!("{dest}config.json")]);
    cp.args([
        "--content-type",
        "application/json",
        "--cache-control",
        "max-age=300",
    ]);
    let mut child = cp
        .stdin(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", cp.display()))?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(config.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        bail!("`{}` failed ({status})", cp.display());
    }
    if let Some(id) = d.outputs.get("DistributionId") {
        let mut invalidate = aws(tools, d);
        invalidate.args(["cloudfront", "create-invalidation", "--distribution-id", id]);
        invalidate
            .args(["--paths", "/*", "--output", "json"])
            .stdout(Stdio::null())
            .run()?;
        info(format!("invalidated /* on distribution {id}"));
    }
    Ok(())
}

/// `--profile`/`--region` as every call gets them.
fn target_flags(d: &Deployed) -> Vec<String> {
    let profile = d
        .profile
        .iter()
        .flat_map(|p| ["--profile".into(), p.clone()]);
    let region = Some(&d.region).filter(|r| !r.is_empty());
    profile
        .chain(
            region
                .into_iter()
                .flat_map(|r| ["--region".into(), r.clone()]),
        )
        .collect()
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

/// What an `aws … --output json` call prints; its stderr goes to the terminal.
fn aws_json(tools: &Tools, d: &Deployed, args: &[&str]) -> Result<Value> {
    let mut cmd = aws(tools, d);
    let out = cmd
        .args(args)
        .args(["--output", "json"])
        .stderr(Stdio::inherit())
        .read()?;
    serde_json::from_str(&out).with_context(|| {
        format!(
            "`aws {}` answered something unreadable",
            args[..2].join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    //! The deploy against stand-in `sam` and `aws` executables that record their arguments and
    //! answer as the real ones do (no AWS is reachable from a test).

    use super::*;
    use crate::stand_in::StandIn;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    /// A workspace with the committed `samconfig.toml` and a page, and stand-ins on `PATH`:
    /// `missing` are the SSM parameters reported absent, `outputs` the stack's outputs.
    fn workspace(name: &str, missing: &[&str], outputs: &[(&str, &str)]) -> StandIn {
        let w = StandIn::new(&format!("deploy-{name}"));
        fs::create_dir_all(w.dir.join("web/test")).unwrap();
        fs::write(w.dir.join("web/index.html"), "<!doctype html>").unwrap();
        fs::copy(
            util::workspace_root().join("samconfig.toml"),
            w.dir.join("samconfig.toml"),
        )
        .unwrap();
        let outputs: Vec<_> = outputs
            .iter()
            .map(|(k, v)| serde_json::json!({"OutputKey": k, "OutputValue": v}))
            .collect();
        let stacks = serde_json::json!({"Stacks": [{"StackName": "x", "Outputs": outputs}]});
        fs::write(w.dir.join("stacks.json"), stacks.to_string()).unwrap();
        let invalid = serde_json::json!({"Parameters": [], "InvalidParameters": missing});
        fs::write(w.dir.join("parameters.json"), invalid.to_string()).unwrap();
        let dir = w.dir.display();
        let aws = format!(
            r#"case "$*" in
  *"configure get region"*) echo us-test-1 ;;
  *"ssm get-parameters"*) cat {dir}/parameters.json ;;
  *"ssm get-parameter "*) echo {SECRET} ;;
  *"cloudformation describe-stacks"*) cat {dir}/stacks.json ;;
  *"s3 cp -"*) cat > {dir}/uploaded-config.json ;;
  *"s3 sync"*) echo "upload: web/index.html" ;;
  *"cloudfront create-invalidation"*) echo '{{"Invalidation": {{"Id": "I1"}}}}' ;;
  *) echo "unexpected aws call" >&2; exit 2 ;;
esac"#
        );
        let sam = format!(
            r#"[ "$1" = deploy ] || exit 0
while [ $# -gt 0 ]; do
  if [ "$1" = --config-file ]; then cp "$2" {dir}/seen-samconfig.toml; stat -c %a "$2" > {dir}/seen-mode; fi
  shift
done"#
        );
        w.script("aws", &aws).script("sam", &sam);
        w
    }

    fn tools(w: &StandIn) -> Tools {
        let path = std::env::join_paths([w.bin(), "/usr/bin".into(), "/bin".into()]).unwrap();
        Tools {
            sam: w.bin().join("sam"),
            aws: w.bin().join("aws"),
            path,
        }
    }

    fn record(w: &StandIn) -> Deployed {
        serde_json::from_str(&w.read(RECORD)).unwrap()
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
        let w = workspace("first", &[], CLOUDFRONT_OUTPUTS);
        let answers = std::io::Cursor::new("mystack\n\n\nops@example.com\n");
        deploy(&Args::default(), &tools(&w), &w.dir, Some(answers)).unwrap();

        let calls = w.calls();
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
        let names = "--names /tollgate/openai-api-key /tollgate/internal-token /tollgate/origin-verify-secret";
        assert!(calls[1].contains(names), "{}", calls[1]);
        let filters = "--exclude * --include *.html --include *.js --include *.css --exclude */*";
        assert!(calls[6].contains(filters), "{}", calls[6]);

        // The secret went to sam in a file only this user could read, removed afterwards.
        let seen = w.read("seen-samconfig.toml");
        assert!(seen.contains(&format!(r#"parameter_overrides = "AlarmEmail=\"ops@example.com\" Frontend=\"cloudfront\" OriginVerifySecret=\"{SECRET}\"""#)), "{seen}");
        assert!(
            seen.contains("capabilities = \"CAPABILITY_IAM\""),
            "the committed settings are kept: {seen}"
        );
        assert_eq!(w.read("seen-mode").trim(), "600");
        assert!(!w.dir.join(".dev/deploy-samconfig.toml").exists());

        assert_eq!(w.read("uploaded-config.json"), CLOUDFRONT_OUTPUTS[4].1);
        let record = record(&w);
        assert_eq!(
            (record.stack_name.as_str(), record.region.as_str()),
            ("mystack", "us-test-1")
        );
        let output = record.outputs.get("ClientsTableName").map(String::as_str);
        assert_eq!(output, Some("mystack-ClientsTable-1"));
        let email = record.parameters.get("AlarmEmail").map(String::as_str);
        assert_eq!(email, Some("ops@example.com"));
        assert!(!w.read(RECORD).contains(SECRET));
    }

    #[test]
    fn a_missing_parameter_stops_the_deploy_before_anything_changes_and_names_the_command() {
        let w = workspace("missing", &["/tollgate/internal-token"], CLOUDFRONT_OUTPUTS);
        let args = Args {
            region: Some("eu-west-1".into()),
            ..Args::default()
        };
        let err = deploy(&args, &tools(&w), &w.dir, None::<&[u8]>)
            .unwrap_err()
            .to_string();
        let command = "aws ssm put-parameter --type SecureString --name /tollgate/internal-token";
        assert!(
            err.contains(command) && err.contains("--region eu-west-1"),
            "{err}"
        );
        assert!(
            !err.contains("openai-api-key"),
            "only the missing one is named: {err}"
        );
        assert!(
            w.calls().iter().all(|c| !c.starts_with("sam")),
            "{:#?}",
            w.calls()
        );
        assert!(!w.dir.join(RECORD).exists());
    }

    #[test]
    fn a_later_deploy_reuses_the_record_asks_nothing_and_passes_profile_and_region_through() {
        let url = "https://x.execute-api.eu-west-1.amazonaws.com";
        let w = workspace("later", &[], &[("ApiBaseUrl", url)]);
        let before = Deployed {
            stack_name: "api".into(),
            region: "eu-west-1".into(),
            parameters: [("Frontend".to_string(), "httpapi".to_string())].into(),
            ..Deployed::default()
        };
        fs::create_dir_all(w.dir.join(".dev")).unwrap();
        fs::write(w.dir.join(RECORD), serde_json::to_string(&before).unwrap()).unwrap();
        let args = Args {
            profile: Some("prod".into()),
            yes: true,
            ..Args::default()
        };
        // Answers are there but unused: a record exists and --guided is not given.
        let answers = Some(std::io::Cursor::new("other\n"));
        deploy(&args, &tools(&w), &w.dir, answers).unwrap();
        let calls = w.calls();
        let target = "--profile prod --region eu-west-1";
        assert!(calls.iter().all(|c| c.contains(target)), "{calls:#?}");
        let deploy = ["deploy", "--stack-name api", "--no-confirm-changeset"];
        assert!(
            calls.iter().any(|c| deploy.iter().all(|d| c.contains(d))),
            "{calls:#?}"
        );
        // No CloudFront: no origin secret read, no page upload.
        let cloudfront = |c: &String| c.contains("--with-decryption") || c.contains("s3 ");
        assert!(!calls.iter().any(cloudfront), "{calls:#?}");
        let overrides = r#"parameter_overrides = "Frontend=\"httpapi\"""#;
        assert!(w.read("seen-samconfig.toml").contains(overrides));
        assert_eq!(record(&w).profile.as_deref(), Some("prod"));
    }

    #[test]
    fn bad_parameters_are_refused_with_a_reason() {
        for (p, why) in [
            ("OriginVerifySecret=x", "never passed on a command line"),
            ("Frontend", "KEY=VALUE"),
            ("AlarmEmail=a b", "spaces"),
            ("Frontend=alb", "cloudfront or httpapi"),
        ] {
            let w = workspace("bad", &[], &[]);
            let args = Args {
                region: Some("r".into()),
                parameters: vec![p.into()],
                ..Args::default()
            };
            let err = deploy(&args, &tools(&w), &w.dir, None::<&[u8]>)
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{p}: {err}");
            assert!(w.calls().is_empty(), "{p}: {:#?}", w.calls());
        }
    }

    #[test]
    fn the_parameter_names_checked_are_the_templates_defaults() {
        let template = fs::read_to_string(util::workspace_root().join("template.yaml")).unwrap();
        for (param, default) in SSM_PARAMETERS {
            let at = template.find(&format!("\n  {param}:")).expect(param);
            let next = template[at..].find("Default:").unwrap() + at;
            assert!(
                template[next..].starts_with(&format!("Default: {default}\n")),
                "{param}"
            );
        }
    }
}
