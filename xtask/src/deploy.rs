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

pub fn run(args: Args) -> Result {
    setup::ensure(&[Need::Python])?;
    let venv_bin = setup::python_tools()?;
    let path = util::path_with(&venv_bin)?;
    let dirs = std::env::split_paths(&path);
    let aws = dirs.map(|dir| dir.join("aws")).find(|p| p.is_file());
    let aws = aws.context("the AWS CLI (`aws`) is not on PATH: install it (https://aws.amazon.com/cli/) and configure credentials")?;
    let sam = venv_bin.join("sam");
    let stdin = std::io::stdin();
    let answers = stdin.is_terminal().then(|| stdin.lock());
    let root = util::workspace_root();
    deploy(&args, &Tools { sam, aws, path }, &root, answers)
}

/// The deploy from `root`, asking through `answers` when there is a terminal (tests pass a
/// buffer).
pub fn deploy(args: &Args, tools: &Tools, root: &Path, answers: Option<impl BufRead>) -> Result {
    let record = root.join(RECORD);
    let before = match fs::read_to_string(&record) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        text => Some(
            serde_json::from_str(&text?)
                .with_context(|| format!("{} is unreadable: fix or remove it", record.display()))?,
        ),
    };
    let mut d = choose(args, tools, before, answers)?;
    let call = Call { tools, d: &d, root };

    step("check the SSM parameters");
    let origin_secret = check_parameters(&call)?;

    step("sam build");
    call.sam("build").run()?;

    step("sam deploy");
    let config = root.join(".dev/deploy-samconfig.toml");
    fs::create_dir_all(root.join(".dev"))?;
    let text = sam_config(root, &d, origin_secret.as_deref())?;
    util::write_private(&config, &text)?;
    let mut deploy = call.sam("deploy");
    deploy.arg("--config-file").arg(&config);
    deploy.args(["--stack-name", &d.stack_name]);
    if args.yes {
        deploy.arg("--no-confirm-changeset");
    }
    let deployed = deploy.run();
    // The file holds the origin secret: gone whether the deploy worked or not.
    let _ = fs::remove_file(&config);
    deployed?;

    step("read the stack's outputs");
    let describe = call.aws_json("cloudformation describe-stacks", &d.stack_name)?;
    let stack = describe["Stacks"].get(0);
    let stack = stack.context("describe-stacks found no stack")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let outputs = stack["Outputs"].as_array().into_iter().flatten();
    let outputs = outputs.map(|o| (text(&o["OutputKey"]), text(&o["OutputValue"])));
    d.outputs = outputs.collect();
    d.deployed_at = util::unix_now();
    fs::write(&record, serde_json::to_string_pretty(&d)? + "\n")?;

    if let Some(bucket) = d.outputs.get("PageBucketName") {
        step("upload the page");
        upload_page(&Call { tools, d: &d, root }, bucket)?;
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
    let ask = answers.filter(|_| before.is_none() || args.guided);
    let mut d = before.unwrap_or_default();
    d.outputs.clear();
    d.profile = args.profile.clone().or(d.profile);
    for p in &args.parameters {
        let name = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric());
        let Some((key, value)) = p.split_once('=').filter(|(k, _)| name(k)) else {
            bail!("--parameter wants KEY=VALUE with a template parameter's name, not {p:?}");
        };
        if key == "OriginVerifySecret" {
            bail!(
                "OriginVerifySecret is read from its SSM parameter, never passed on a command line"
            );
        }
        d.parameters.insert(key.into(), value.into());
    }
    let recorded = |v: &String| Some(v.clone()).filter(|v| !v.is_empty());
    let stack = args.stack_name.clone().or(recorded(&d.stack_name));
    d.stack_name = stack.unwrap_or_else(|| DEFAULT_STACK.into());
    let region = args.region.clone().or(recorded(&d.region));
    // The profile's region, if it has one: asked only when no region is known, so the call
    // names none.
    let root = Path::new(".");
    let mut get = Call { tools, d: &d, root }.aws("configure get region");
    let profile_region = || get.stderr(Stdio::null()).read().ok();
    let region = region.or_else(profile_region).unwrap_or_default();
    d.region = region.trim().to_string();
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
            let line = line.trim();
            Ok(if line.is_empty() {
                default
            } else {
                line.into()
            })
        };
        d.stack_name = ask("Stack name", d.stack_name.clone())?;
        d.region = ask("AWS region", d.region.clone())?;
        let frontend = d.parameters.remove("Frontend");
        let frontend = frontend.unwrap_or(FRONTENDS[0].into());
        let frontend = ask("Frontend (cloudfront or httpapi)", frontend)?;
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
    let frontend = d.parameters.get("Frontend").map(String::as_str);
    if let Some(other) = frontend.filter(|f| !FRONTENDS.contains(f)) {
        bail!("Frontend must be cloudfront or httpapi, not {other:?}");
    }
    // SAM's `parameter_overrides` separates parameters by spaces and quotes with `"`.
    if let Some((key, _)) = d.parameters.iter().find(|(_, v)| !plain(v)) {
        bail!("parameter {key}: spaces, quotes and backslashes are not supported in values");
    }
    Ok(d)
}

/// Whether `value` can stand in `parameter_overrides` as it is.
fn plain(value: &str) -> bool {
    !value.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\')
}

/// The SSM parameters the stack names must exist; returns the origin-verify secret's value
/// when CloudFront needs it.
fn check_parameters(call: &Call) -> Result<Option<String>> {
    let names = SSM_PARAMETERS.map(|(param, default)| {
        let chosen = call.d.parameters.get(param);
        chosen.map_or(default.into(), String::clone)
    });
    let found = call.aws_json("ssm get-parameters --names", &names.join(" "))?;
    let invalid = found["InvalidParameters"].as_array().cloned();
    let target = target_flags(call.d).join(" ");
    let mut missing = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if invalid.iter().flatten().any(|n| n == name.as_str()) {
            // The API key is the user's; the other two are any random secret.
            let value = ["\"$OPENAI_API_KEY\"", "\"$(openssl rand -hex 32)\""][i.min(1)];
            missing.push(format!("  aws ssm put-parameter --type SecureString --name {name} --value {value} {target}"));
        }
    }
    if !missing.is_empty() {
        bail!(
            "{} SSM parameter(s) the functions read do not exist in {}; nothing was deployed. Create them with:\n{}",
            missing.len(),
            call.d.region,
            missing.join("\n")
        );
    }
    let frontend = call.d.parameters.get("Frontend");
    if frontend.is_some_and(|f| f != "cloudfront") {
        return Ok(None);
    }
    let origin = &names[2];
    let mut get = call.aws("ssm get-parameter --with-decryption --query Parameter.Value");
    let value = get.args(["--output", "text", "--name", origin]).read()?;
    let value = value.trim();
    if value.is_empty() || !plain(value) {
        bail!("the value of {origin} is empty or holds spaces or quotes: put a new one (e.g. `openssl rand -hex 32`)");
    }
    Ok(Some(value.to_string()))
}

/// `samconfig.toml` with the deploy's parameters added to its `[default.deploy.parameters]`.
fn sam_config(root: &Path, d: &Deployed, origin_secret: Option<&str>) -> Result<String> {
    let committed = fs::read_to_string(root.join("samconfig.toml"))?;
    let secret = origin_secret.map(|s| format!("OriginVerifySecret=\"{s}\""));
    let overrides = d.parameters.iter().map(|(k, v)| format!("{k}=\"{v}\""));
    let overrides: Vec<String> = overrides.chain(secret).collect();
    let header = "[default.deploy.parameters]";
    let parts = committed.split_once(header);
    let (head, tail) = parts.context("samconfig.toml has no [default.deploy.parameters] table")?;
    let line = serde_json::to_string(&overrides.join(" "))?;
    Ok(format!(
        "{head}{header}\nparameter_overrides = {line}{tail}"
    ))
}

fn upload_page(call: &Call, bucket: &str) -> Result {
    let dest = format!("s3://{bucket}/");
    let mut sync = call.aws("s3 sync");
    sync.arg(format!("{}/", call.root.join("web").display()))
        .arg(&dest);
    // Later filters win and `*` also matches `/`: only the page's own top-level files.
    let filters = "--exclude * --include *.html --include *.js --include *.css --exclude */*";
    let options = "--delete --cache-control max-age=300 ".to_string() + filters;
    sync.args(options.split(' ')).run()?;
    let config = call.d.outputs.get("PageConfig");
    let config = config.context("the stack has a page bucket but no PageConfig output")?;
    let file = call.root.join(".dev/page-config.json");
    fs::write(&file, config)?;
    let mut cp = call.aws("s3 cp -");
    cp.arg(format!("{dest}config.json"))
        .stdin(fs::File::open(&file)?);
    let options = "--content-type application/json --cache-control max-age=300";
    cp.args(options.split(' ')).run()?;
    if let Some(id) = call.d.outputs.get("DistributionId") {
        let mut invalidate = call.aws("cloudfront create-invalidation --paths /* --output json");
        invalidate.args(["--distribution-id", id]);
        invalidate.stdout(Stdio::null()).run()?;
        info(format!("invalidated /* on distribution {id}"));
    }
    Ok(())
}

/// `--profile`/`--region` as every call gets them.
fn target_flags(d: &Deployed) -> Vec<String> {
    let mut flags = Vec::new();
    let region = Some(d.region.as_str());
    for (flag, value) in [("--profile", d.profile.as_deref()), ("--region", region)] {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            flags.extend([flag.to_string(), value.to_string()]);
        }
    }
    flags
}

/// What every `sam` and `aws` call of a deploy is made with.
#[derive(Clone, Copy)]
struct Call<'a> {
    tools: &'a Tools,
    d: &'a Deployed,
    root: &'a Path,
}

impl Call<'_> {
    /// `sam <subcommand> --profile … --region …` from the root (SAM's options follow the
    /// subcommand).
    fn sam(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new(&self.tools.sam);
        cmd.current_dir(self.root).env("PATH", &self.tools.path);
        cmd.arg(subcommand).args(target_flags(self.d));
        cmd
    }

    /// `aws --profile … --region … <words>`.
    fn aws(&self, words: &str) -> Command {
        let mut cmd = Command::new(&self.tools.aws);
        cmd.env("PATH", &self.tools.path).args(target_flags(self.d));
        cmd.args(words.split(' '));
        cmd
    }

    /// What `aws <words> <more words> --output json` prints.
    fn aws_json(&self, words: &str, more: &str) -> Result<Value> {
        let mut cmd = self.aws(&format!("{words} {more} --output json"));
        let out = cmd.read()?;
        let what = || format!("`aws {words}` answered something unreadable");
        serde_json::from_str(&out).with_context(what)
    }
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
    fn workspace(name: &str, missing: &[&str], outputs: &[(&str, &str)]) -> (StandIn, Tools) {
        let w = StandIn::new(&format!("deploy-{name}"));
        let root = &w.dir;
        fs::create_dir_all(root.join("web/test")).unwrap();
        fs::write(root.join("web/index.html"), "<!doctype html>").unwrap();
        let samconfig = util::workspace_root().join("samconfig.toml");
        fs::copy(samconfig, root.join("samconfig.toml")).unwrap();
        let output = |(k, v): &(&str, &str)| serde_json::json!({"OutputKey": k, "OutputValue": v});
        let outputs: Vec<_> = outputs.iter().map(output).collect();
        let stacks = serde_json::json!({"Stacks": [{"StackName": "x", "Outputs": outputs}]});
        let parameters = serde_json::json!({"Parameters": [], "InvalidParameters": missing});
        let dir = root.display();
        w.script(
            "aws",
            &format!(
                r#"case "$*" in
  *"configure get region"*) echo us-test-1 ;;
  *"ssm get-parameters"*) echo '{parameters}' ;;
  *"ssm get-parameter "*) echo {SECRET} ;;
  *"cloudformation describe-stacks"*) echo '{stacks}' ;;
  *"s3 cp -"*) cat > {dir}/uploaded-config.json ;;
  *"s3 sync"*) echo "upload: web/index.html" ;;
  *"cloudfront create-invalidation"*) echo '{{"Invalidation": {{"Id": "I1"}}}}' ;;
  *) echo "unexpected aws call" >&2; exit 2 ;;
esac"#
            ),
        );
        w.script(
            "sam",
            &format!(
                r#"[ "$1" = deploy ] || exit 0
while [ $# -gt 0 ]; do
  if [ "$1" = --config-file ]; then cp "$2" {dir}/seen-samconfig.toml; stat -c %a "$2" > {dir}/seen-mode; fi
  shift
done"#
            ),
        );
        let path = std::env::join_paths([w.bin(), "/usr/bin".into(), "/bin".into()]).unwrap();
        let (sam, aws) = (w.bin().join("sam"), w.bin().join("aws"));
        (w, Tools { sam, aws, path })
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
        let (w, tools) = workspace("first", &[], CLOUDFRONT_OUTPUTS);
        let answers = std::io::Cursor::new("mystack\n\n\nops@example.com\n");
        deploy(&Args::default(), &tools, &w.dir, Some(answers)).unwrap();

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
        let kind = |c: &String| ORDER.into_iter().find(|k| c.contains(k));
        let kinds: Vec<_> = calls.iter().map(kind).collect();
        assert_eq!(kinds, ORDER.map(Some), "{calls:#?}");
        assert!(
            !calls.iter().any(|c| c.contains(SECRET)),
            "the secret in: {calls:#?}"
        );
        assert!(calls[4].contains("--stack-name mystack"), "{}", calls[4]);
        let names =
            "/tollgate/openai-api-key /tollgate/internal-token /tollgate/origin-verify-secret";
        assert!(calls[1].contains(names), "{}", calls[1]);
        let filters = "--exclude * --include *.html --include *.js --include *.css --exclude */*";
        assert!(calls[6].contains(filters), "{}", calls[6]);

        // The secret went to sam in a file only this user could read, removed afterwards.
        let seen = w.read("seen-samconfig.toml");
        let overrides = format!(
            r#"parameter_overrides = "AlarmEmail=\"ops@example.com\" Frontend=\"cloudfront\" OriginVerifySecret=\"{SECRET}\"""#
        );
        assert!(seen.contains(&overrides), "{seen}");
        let kept = "capabilities = \"CAPABILITY_IAM\"";
        assert!(
            seen.contains(kept),
            "the committed settings are kept: {seen}"
        );
        assert_eq!(w.read("seen-mode").trim(), "600");
        assert!(!w.dir.join(".dev/deploy-samconfig.toml").exists());

        assert_eq!(w.read("uploaded-config.json"), CLOUDFRONT_OUTPUTS[4].1);
        let r = record(&w);
        assert_eq!((&*r.stack_name, &*r.region), ("mystack", "us-test-1"));
        assert_eq!(r.parameters["AlarmEmail"], "ops@example.com");
        assert_eq!(r.outputs["ClientsTableName"], "mystack-ClientsTable-1");
        assert!(!w.read(RECORD).contains(SECRET));
    }

    #[test]
    fn a_missing_parameter_stops_the_deploy_before_anything_changes_and_names_the_command() {
        let (w, tools) = workspace("missing", &["/tollgate/internal-token"], CLOUDFRONT_OUTPUTS);
        let region = Some("eu-west-1".into());
        let args = Args {
            region,
            ..Args::default()
        };
        let err = deploy(&args, &tools, &w.dir, None::<&[u8]>)
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
        let calls = w.calls();
        assert!(!calls.iter().any(|c| c.starts_with("sam")), "{calls:#?}");
        assert!(!w.dir.join(RECORD).exists());
    }

    #[test]
    fn a_later_deploy_reuses_the_record_asks_nothing_and_passes_profile_and_region_through() {
        let url = "https://x.execute-api.eu-west-1.amazonaws.com";
        let (w, tools) = workspace("later", &[], &[("ApiBaseUrl", url)]);
        let before = r#"{"stack_name": "api", "region": "eu-west-1", "parameters": {"Frontend": "httpapi"}}"#;
        fs::create_dir_all(w.dir.join(".dev")).unwrap();
        fs::write(w.dir.join(RECORD), before).unwrap();
        let profile = Some("prod".into());
        let args = Args {
            profile,
            yes: true,
            ..Args::default()
        };
        // Answers are there but unused: a record exists and --guided is not given.
        let answers = Some(std::io::Cursor::new("other\n"));
        deploy(&args, &tools, &w.dir, answers).unwrap();
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
            let (w, tools) = workspace("bad", &[], &[]);
            let (region, parameters) = (Some("r".into()), vec![p.into()]);
            let args = Args {
                region,
                parameters,
                ..Args::default()
            };
            let err = deploy(&args, &tools, &w.dir, None::<&[u8]>).unwrap_err();
            assert!(err.to_string().contains(why), "{p}: {err}");
            assert!(w.calls().is_empty(), "{p}: {:#?}", w.calls());
        }
    }

    #[test]
    fn the_parameter_names_checked_are_the_templates_defaults() {
        let template = fs::read_to_string(util::workspace_root().join("template.yaml")).unwrap();
        for (param, default) in SSM_PARAMETERS {
            let at = template.find(&format!("\n  {param}:")).expect(param);
            let next = template[at..].find("Default:").unwrap() + at;
            let line = format!("Default: {default}\n");
            assert!(template[next..].starts_with(&line), "{param}");
        }
    }
}
