//! The ready-to-paste lines `cargo xtask dev` prints once the stack answers.

use tollgate_catalog as catalog;

use super::demo::DEMO_CURRENCY;
use super::env::user;
use super::stack::{env_file, DevStack};
use crate::util::{self, Result};

/// The ready-to-paste lines; `{{name}}` marks a value.
const BANNER: &str = include_str!("../../templates/dev-banner.txt");

/// Quotes a value for a POSIX shell (`shlex`); the values quoted here (URLs, tokens, ids,
/// headers) never hold the one thing it refuses, a NUL byte.
pub fn sh(value: &str) -> String {
    shlex::try_quote(value)
        .expect("a value to quote holds no NUL byte")
        .into_owned()
}

/// The ready-to-paste commands: [`BANNER`] rendered (minijinja) with the stack's facts; `sh`
/// quotes a value for the shell, `label` pads `name:` so the URLs line up.
pub fn banner(stack: &DevStack) -> Result<String> {
    let (info, session) = (&stack.info, catalog::EPHEMERAL_KEY);
    let demo = &info.demo;
    let body = serde_json::json!({"from": demo.accounts[0], "to": demo.accounts[1], "amount": 2500, "memo": "demo"});
    let mut jinja = minijinja::Environment::new();
    jinja.set_keep_trailing_newline(true);
    jinja.set_trim_blocks(true);
    jinja.add_filter("sh", |value: String| sh(&value));
    jinja.add_filter("label", |name: String| {
        format!("{:<16}", format!("{name}:"))
    });
    let context = minijinja::context! {
        info, session, transfer => catalog::TRANSFER,
        session_limits => user(session.limits_variable).unwrap_or(session.default_limits.into()),
        body => body.to_string(), key => format!("demo-{}", util::unix_now()),
        currency => DEMO_CURRENCY, stack_file => stack.stack_file,
        env_file => env_file(&stack.stack_file), functions_log => stack.functions_log,
    };
    Ok(jinja.render_str(BANNER, context)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::demo::Demo;
    use crate::dev::stack::StackFile;

    #[test]
    fn shell_quoting() {
        assert_eq!(sh("http://127.0.0.1:9/x"), "http://127.0.0.1:9/x");
        assert_eq!(sh("a b"), "'a b'");
        assert_eq!(sh("it's"), r#""it's""#);
        assert_eq!(sh(""), "''");
    }

    #[test]
    fn banner_fills_every_value() {
        let mut stack = DevStack::default();
        (stack.stack_file, stack.functions_log) = ("/s/stack.json".into(), "/l".into());
        stack.info = StackFile {
            ephemeral_key_url: "http://127.0.0.1:9/lambda-url/s".into(),
            transfer_url: "http://127.0.0.1:9/lambda-url/t".into(),
            internal_token: Some("dev-1".into()),
            demo: Demo {
                client_id: "cl_1".into(),
                token: "tok en".into(),
                accounts: vec!["acc_1".into(), "acc_2".into()],
            },
            ..StackFile::default()
        };
        let (session, transfer) = (catalog::EPHEMERAL_KEY, catalog::TRANSFER);
        let text = banner(&stack).unwrap();
        let has = |part: &str| assert!(text.contains(part), "{part:?} not in {text}");
        assert!(!text.contains("{{"), "{text}");
        has("-H 'Authorization: Bearer tok en'");
        has(r#"-d '{"amount":2500,"from":"acc_1","memo":"demo","to":"acc_2"}'"#);
        has("-H 'X-Internal-Token: dev-1'");
        let name = session.name;
        has(&format!(r#"-d '{{"function":"{name}","enabled":false}}'"#));
        has(&format!("kill-switch off --function {name}\n"));
        let limits = user(session.limits_variable).unwrap_or(session.default_limits.into());
        let (route, variable) = (session.route, session.limits_variable);
        has(&format!("\n{route} is limited to {limits} ({variable}), "));
        let label = format!("{:<16}", format!("{}:", transfer.name));
        has(&format!("\n{label}http://127.0.0.1:9/lambda-url/t\n"));
        has("source /s/env ");
    }
}
