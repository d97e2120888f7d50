//! The functions' log on the terminal, without cargo-lambda's bookkeeping.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::util::Result;

/// Copies what the functions log to the terminal (stderr), from the moment it is opened (once
/// the stack is ready): a developer watching `cargo xtask dev` wants to see requests and
/// rebuilds, not cargo's build chatter from before, nor cargo-lambda's internal bookkeeping
/// (see [`echo_worthy`]). [`run`]'s wait loop pumps it, so it falls silent before the stack
/// stops and cargo-lambda's shutdown chatter stays in the log.
pub struct Echo {
    log: PathBuf,
    /// Where the next line starts: a half-written line is left for the next call.
    offset: u64,
}

impl Echo {
    pub fn open(log: &Path) -> Result<Echo> {
        let (log, offset) = (log.into(), fs::metadata(log)?.len());
        Ok(Echo { log, offset })
    }

    /// Shows the whole lines written since the last call.
    pub fn pump(&mut self) {
        let mut text = Vec::new();
        let read = fs::File::open(&self.log).and_then(|mut file| {
            file.seek(SeekFrom::Start(self.offset))?;
            file.read_to_end(&mut text)
        });
        let end = text.iter().rposition(|&b| b == b'\n');
        let whole = end.map_or(0, |end| end + 1);
        if read.is_ok() && whole > 0 {
            self.offset += whole as u64;
            let lines = String::from_utf8_lossy(&text[..whole]);
            for line in lines.lines().filter_map(echo_worthy) {
                eprintln!("{line}");
            }
        }
    }
}

/// The line to show for a line of the functions' log, if any. cargo-lambda
/// logs each file event and process start as one huge `Debug` dump; those
/// are dropped, and any other line is cut at a readable length.
fn echo_worthy(line: &str) -> Option<String> {
    const NOISE: &[&str] = &[
        "action constructed",
        "outcome resolved",
        "spawning command",
        "process group spawned",
        "run{config=",
        "waiting on process group",
        "propagating graceful exit",
    ];
    const MAX: usize = 400;
    let line = line.trim_end();
    if line.is_empty() || NOISE.iter().any(|n| line.contains(n)) {
        return None;
    }
    if line.len() <= MAX {
        return Some(line.to_string());
    }
    let cut = (0..=MAX).rev().find(|&i| line.is_char_boundary(i));
    Some(format!("{}…", &line[..cut.unwrap_or(0)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_drops_cargo_lambda_bookkeeping() {
        let line = r#"{"level":"INFO","message":"kill switch on"}"#;
        assert_eq!(echo_worthy(line).as_deref(), Some(line));
        let noise = " INFO action constructed action=Action { events: [] }";
        assert_eq!(echo_worthy(noise), None);
        assert!(echo_worthy(&"é".repeat(300)).unwrap().ends_with('…'));
    }
}
