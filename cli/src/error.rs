//! The CLI's one error type: a message that fits on one line.
//!
//! Operators read these in a terminal and scripts grep them, so every failure ends up as a single
//! `error: ...` line on stderr with exit status 1. Store failures carry their whole source chain
//! (the SDK's top-level message alone, "service error", says nothing). No error message ever
//! contains a token: tokens only exist in the one reply of `clients create`.

use std::fmt;

/// A failed command, already phrased for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError(String);

impl CliError {
    /// An error with this message (line breaks are folded into spaces).
    pub fn new(message: impl fmt::Display) -> Self {
        Self(one_line(&message.to_string()))
    }

    /// A failure of the store behind `what`, with the error's source chain.
    pub fn store(what: impl fmt::Display, error: &dyn std::error::Error) -> Self {
        Self::new(format!("{what}: {}", chain(error)))
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

/// `error: source: source ...` on one line, skipping a source that only repeats its parent.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut next = error.source();
    while let Some(source) = next {
        let text = source.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        next = source.source();
    }
    one_line(&parts.join(": "))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner\nbroke")]
    struct Inner;

    #[test]
    fn the_chain_is_one_line() {
        assert_eq!(chain(&Outer(Inner)), "outer failed: inner broke");
        assert_eq!(CliError::new("a\n  b").message(), "a b");
    }
}
