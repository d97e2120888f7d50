//! What a command prints, and how: one JSON object with `--json`, readable lines without.
//!
//! Commands never print; they return a [`Reply`]. [`Output`] is what the whole invocation
//! produced (exit status, stdout, stderr), so the binary writes it to the terminal and tests
//! read it from memory, and both see exactly the same bytes.

use serde::Serialize;
use serde_json::Value;

use crate::error::CliError;

/// The result of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// 0 on success, 1 for a failed command, 2 for a usage error (as clap does).
    pub code: u8,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == 0
    }

    pub(crate) fn reply(reply: Reply, json: bool) -> Self {
        let stdout = if json {
            reply.json_line()
        } else {
            reply
                .human
                .unwrap_or_else(|| fields_as_lines(&reply.fields))
                + &reply.notes
        };
        Self {
            code: 0,
            stdout,
            stderr: String::new(),
        }
    }

    pub(crate) fn error(error: &CliError) -> Self {
        Self {
            code: 1,
            stdout: String::new(),
            stderr: format!("error: {error}\n"),
        }
    }

    /// Help and version go to stdout with status 0; usage errors keep clap's text and status.
    pub(crate) fn clap(error: clap::Error) -> Self {
        let text = error.render().to_string();
        let code = u8::try_from(error.exit_code()).unwrap_or(2);
        if error.use_stderr() {
            Self {
                code,
                stdout: String::new(),
                stderr: text,
            }
        } else {
            Self {
                code,
                stdout: text,
                stderr: String::new(),
            }
        }
    }
}

/// A command's answer: named fields in the order they were added (for JSON and for the human
/// form), optionally a hand-written human form, and notes for the human form only.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    fields: Vec<(&'static str, Value)>,
    human: Option<String>,
    notes: String,
}

impl Reply {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a field. The human form is one `name: value` line per field unless [`Self::human`]
    /// replaces it.
    pub fn field(mut self, name: &'static str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.fields.push((name, value));
        self
    }

    /// Replaces the generated human form.
    pub fn human(mut self, text: String) -> Self {
        self.human = Some(text);
        self
    }

    /// A line shown after the human form (never in JSON).
    pub fn note(mut self, line: impl AsRef<str>) -> Self {
        self.notes.push_str(line.as_ref());
        self.notes.push('\n');
        self
    }

    /// The fields as one JSON object, in order (serde_json's own map would sort them).
    fn json_line(&self) -> String {
        let mut line =
            serde_json::to_string(&InOrder(&self.fields)).expect("JSON values serialise");
        line.push('\n');
        line
    }
}

/// Fields serialised as one JSON object whose members keep the fields' order.
struct InOrder<'a>(&'a [(&'static str, Value)]);

impl Serialize for InOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (name, value)))
    }
}

/// `name: value` lines, values aligned; strings unquoted, null as `-`.
fn fields_as_lines(fields: &[(&'static str, Value)]) -> String {
    let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 1;
    fields
        .iter()
        .map(|(name, value)| format!("{:<width$} {}\n", format!("{name}:"), plain(value)))
        .collect()
}

/// A JSON value as a person would write it in a line of text.
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_one_object_on_one_line() {
        let reply = Reply::new()
            .field("b", "x\"y")
            .field("a", 1)
            .note("not in json");
        let out = Output::reply(reply, true);
        assert_eq!(out.stdout, "{\"b\":\"x\\\"y\",\"a\":1}\n");
    }

    #[test]
    fn human_form_aligns_fields() {
        let reply = Reply::new()
            .field("id", "a")
            .field("balance", 5)
            .field("m", None::<u8>)
            .note("done");
        let out = Output::reply(reply, false);
        assert_eq!(out.stdout, "id:      a\nbalance: 5\nm:       -\ndone\n");
    }
}
