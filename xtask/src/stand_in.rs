//! The tests' stand-in machine: a scratch directory whose `bin/` holds `sh` scripts standing in
//! for real executables (`apt-get`, `java`, `sam`, `aws`, …). Each records its call (`name
//! args…`, one line in `calls.log`), then does what the test wrote for it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Removed when dropped.
pub struct StandIn {
    pub dir: PathBuf,
}

impl StandIn {
    /// A fresh directory named after the test (tests run in parallel in one process).
    pub fn new(name: &str) -> StandIn {
        let dir = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).unwrap();
        StandIn { dir }
    }

    pub fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// A stand-in `name` that records its call and then runs `body` (sh).
    pub fn script(&self, name: &str, body: &str) -> &StandIn {
        let (file, log) = (self.bin().join(name), self.dir.join("calls.log"));
        let text = format!(
            "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n",
            log.display()
        );
        fs::write(&file, text).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.read("calls.log").lines().map(String::from).collect()
    }

    /// A file in the directory ("" if there is none).
    pub fn read(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
