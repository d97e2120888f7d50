//! Reports: the prose is in `templates/*.md` (compiled in); Rust computes the figures and
//! renders them with minijinja.
//!
//! Blocks (`{% for %}`, `{% if %}`) take their own line and leave no blank line behind
//! (`trim_blocks`, `lstrip_blocks`), so a template reads like the Markdown it makes.

use std::path::Path;

use minijinja::Environment;
use serde::Serialize;

/// Renders `template` (a file of `templates/`, by name, which may include `others`) with
/// `context`; undefined values are errors, and `x|fixed(n)` prints `n` decimals.
pub fn render(
    name: &str,
    template: &str,
    others: &[(&'static str, &'static str)],
    context: impl Serialize,
) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_filter("fixed", |value: f64, digits: usize| {
        format!("{value:.digits$}")
    });
    for (name, source) in others {
        env.add_template(name, source)?;
    }
    env.add_template(name, template)?;
    env.get_template(name)?.render(context)
}

/// Renders `template` with `figures`, prints the report and, when `path` is given, writes it
/// there too: how replay and drill hand their reports back.
pub fn publish(
    name: &str,
    template: &str,
    figures: impl Serialize,
    path: Option<&Path>,
) -> Result<(), crate::Error> {
    let report = render(name, template, &[], figures)?;
    println!("{report}");
    if let Some(path) = path {
        std::fs::write(path, &report)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_leave_no_blank_lines() {
        let out = render(
            "t",
            "# T\n\n{% for x in xs %}\n- {{ x }}\n{% endfor %}\nend\n",
            &[],
            serde_json::json!({"xs": [1, 2]}),
        )
        .unwrap();
        assert_eq!(out, "# T\n\n- 1\n- 2\nend\n");
    }
}
