//! Random identifiers and tokens.

/// `n` random bytes as lowercase hex (from the operating system's generator).
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    // The OS generator failing is not something a request can recover from.
    getrandom::fill(&mut buf).expect("operating system random generator unavailable");
    hex::encode(buf)
}

/// A new identifier with a type prefix, e.g. `tr_3f2a…` (128 random bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex(16))
}

/// A random 64-bit number (jitter, not secrets).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    getrandom::fill(&mut buf).expect("operating system random generator unavailable");
    u64::from_le_bytes(buf)
}
