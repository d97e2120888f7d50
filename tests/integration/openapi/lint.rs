//! `openapi.yaml` linted by Redocly CLI with the repository's `redocly.yaml`: the document's own
//! structure (OpenAPI 3.1, resolvable `$ref`s, operation ids, examples valid against their
//! schemas, path parameters declared, ...) and the project's conventions for every response
//! (problem+json errors of their own status, `X-Request-Id`, `Retry-After` on 409/429/503,
//! `Allow` on 405, the preflight's CORS headers, ...). Each rule says why it exists in
//! `redocly.yaml`; the two that relate two places of the document are in `redocly-rules.cjs`.
//!
//! The CLI is the version `web/package.json` pins, installed by `cargo xtask setup` with the
//! other web packages into the cache (`<cache>/web-npm`, nothing in the repository) and run
//! with `node`. It reaches no network: the rulesets are built in, the plugin is a local file,
//! telemetry is off (in `redocly.yaml` and here) and the update check is suppressed.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::deploy::tools::{assert_success, repo_root, run};
use crate::openapi::spec::spec;

/// Redocly CLI's entry point in the cache `cargo xtask setup` fills (`$TOLLGATE_CACHE_DIR`, else
/// `~/.cache/tollgate`, as xtask's `util::cache_dir`), checked to be the pinned version. Panics
/// with what to run when it is missing or stale: a missing linter fails the test, never skips it.
fn redocly() -> PathBuf {
    let cache = match env::var_os("TOLLGATE_CACHE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env::var_os("HOME").expect("neither TOLLGATE_CACHE_DIR nor HOME"))
            .join(".cache/tollgate"),
    };
    let package = cache.join("web-npm/node_modules/@redocly/cli");
    let version = |path: &Path, pointer: &str| -> Option<String> {
        let json: Value = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
        json.pointer(pointer)?.as_str().map(str::to_string)
    };
    let pinned = version(
        &repo_root().join("web/package.json"),
        "/devDependencies/@redocly~1cli",
    )
    .expect("web/package.json pins @redocly/cli");
    let installed = version(&package.join("package.json"), "/version");
    assert_eq!(
        installed.as_deref(),
        Some(pinned.as_str()),
        "@redocly/cli in {}: install the pinned web packages with `cargo xtask setup`",
        package.display()
    );
    package.join("bin/cli.js")
}

/// `redocly lint document` with the repository's configuration, from the repository root (where
/// `.redocly.lint-ignore.yaml` applies to `openapi.yaml`). A problem in the configuration itself
/// is an error too (`--lint-config error`), so a misspelt rule cannot pass unnoticed.
fn lint(document: &Path, format: &str) -> (Command, Output) {
    let mut cmd = Command::new("node");
    cmd.current_dir(repo_root())
        .arg(redocly())
        .arg("lint")
        .arg(document)
        .args(["--config", "redocly.yaml", "--lint-config", "error"])
        .args(["--max-problems", "1000", "--format", format])
        .env("REDOCLY_TELEMETRY", "off")
        .env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true");
    let out = run(&mut cmd);
    (cmd, out)
}

#[test]
fn redocly_lint_passes() {
    let (cmd, out) = lint(Path::new("openapi.yaml"), "codeframe");
    assert_success(&cmd, &out);
}

/// Each line breaks one rule in a copy of the document: the rule that must report, the JSON
/// pointer of the change, and the new value (JSON), or `-` to remove what is there.
const BROKEN: &str = r##"
rule/openapi-3-1                   /openapi "3.1.1"
operation-tag-defined              /paths/~1transfers/post/tags ["money"]
rule/operation-tags                /paths/~1session/post/tags []
rule/operation-security            /paths/~1transfers~1{id}/get/security -
rule/path-servers                  /paths/~1accounts~1{id}/servers -
rule/path-preflight                /paths/~1accounts~1{id}/options -
rule/preflight-statuses            /paths/~1session/options/responses/405 -
rule/path-parameters-required      /paths/~1transfers~1{id}/get/parameters/0/required false
rule/numeric-statuses              /paths/~1transfers/post/responses/4XX {"$ref": "#/components/responses/InternalError"}
rule/response-headers              /components/responses/ViewerAddressInvalid/headers -
rule/response-request-id           /components/responses/RouteNotFound/headers/X-Request-Id -
rule/contract-headers-required     /components/headers/X-Request-Id/required false
rule/retry-after                   /components/responses/RequestInProgress/headers/Retry-After -
rule/rate-limited-headers          /components/responses/RateLimited/headers/RateLimit-Policy -
rule/rate-limited-headers-required /components/responses/RateLimited/headers/RateLimit/required false
rule/method-not-allowed-allow      /components/responses/MethodNotAllowedGet/headers/Allow -
rule/unauthorized-www-authenticate /components/responses/Unauthorized/headers/WWW-Authenticate -
rule/created-location              /paths/~1transfers/post/responses/201/headers/Location -
rule/session-no-store              /paths/~1session/post/responses/200/headers/Cache-Control -
rule/preflight-headers             /components/responses/PreflightGet/headers/Vary -
rule/preflight-headers-required    /components/responses/PreflightGetPut/headers/Vary/required false
rule/preflight-no-body             /components/responses/PreflightPost/content {"text/plain": {}}
rule/response-body                 /paths/~1transfers~1{id}/get/responses/200/content -
rule/success-media-type            /paths/~1accounts~1{id}/get/responses/200/content/text~1plain {}
rule/error-media-type              /components/responses/PayloadTooLarge/content/application~1json {}
no-invalid-schema-examples         /components/schemas/AccountId/examples ["not an id"]
tollgate/problem-codes             /components/schemas/ProblemUnauthorized/title "Unauthorized"
tollgate/allowed-methods           /components/responses/PreflightGetPut/headers/Access-Control-Allow-Methods/schema/const "GET"
"##;

/// The ruleset is only worth its green runs if it goes red: linting a copy of the document
/// broken as [`BROKEN`] says must report every one of those rules. A rule whose `where` no
/// longer matches (after an edit, or a new CLI version), or a plugin that no longer loads, fails
/// here instead of passing everything.
#[test]
fn the_lint_catches_broken_documents() {
    let mut doc = spec().doc.clone();
    let mut rules = Vec::new();
    for line in BROKEN.lines().filter(|l| !l.trim().is_empty()) {
        let words = |text: &'static str| text.trim().split_once(char::is_whitespace);
        let (rule, rest) = words(line).unwrap_or_else(|| panic!("{line}: no pointer"));
        let (pointer, change) = words(rest).unwrap_or_else(|| panic!("{line}: no change"));
        let change = change.trim();
        rules.push(rule);
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        let parent = doc
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("openapi.yaml has no object at {parent}"));
        if change == "-" {
            assert!(parent.remove(&key).is_some(), "nothing at {pointer}");
        } else {
            let value = serde_json::from_str(change).unwrap_or_else(|e| panic!("{line}: {e}"));
            parent.insert(key, value);
        }
    }
    let broken = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openapi-broken.json");
    fs::write(&broken, serde_json::to_string_pretty(&doc).unwrap()).unwrap();

    let (cmd, out) = lint(&broken, "json");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{cmd:?} printed no JSON report ({e}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let reported: Vec<&str> = report["problems"]
        .as_array()
        .expect("the report lists problems")
        .iter()
        .filter_map(|p| p["ruleId"].as_str())
        .collect();
    let missed: Vec<&str> = rules
        .into_iter()
        .filter(|rule| !reported.contains(rule))
        .collect();
    assert!(!out.status.success(), "the broken copy passed the lint");
    assert!(
        missed.is_empty(),
        "rules that did not report their broken case: {missed:?}\nreported: {reported:?}"
    );
}
