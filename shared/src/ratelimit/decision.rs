//! What a layer decided, and the response fields that tell the client.

use crate::clock::{retry_after_secs, UnixMillis};

use super::spec::RateLimit;

/// One layer's view of a request: its limit, what is left, and when the window resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The layer's limit, for `RateLimit-Policy`.
    pub limit: RateLimit,
    /// Requests left in the window after this one (0 when refused).
    pub remaining: u32,
    /// The `RateLimit` reset: a fixed layer's window end; for a sliding layer, when it admits
    /// again (refused) or when what it holds has left the window (admitted).
    pub reset_at_ms: UnixMillis,
    /// When the decision was taken: `Retry-After` is counted from here, not from when the
    /// response is written.
    pub now_ms: UnixMillis,
}

impl Decision {
    /// Seconds until the window reopens, rounded up, at least 1: the `Retry-After` value.
    pub fn retry_after_secs(&self) -> u64 {
        retry_after_secs(self.now_ms, self.reset_at_ms)
    }

    /// `RateLimit-Policy` field value (draft-ietf-httpapi-ratelimit-headers-10), e.g.
    /// `"ip";q=10;w=3600`.
    pub fn policy_header(&self) -> String {
        format!(
            "\"{}\";q={};w={}",
            self.limit.layer(),
            self.limit.limit(),
            self.limit.window_secs()
        )
    }

    /// `RateLimit` field value, e.g. `"ip";r=3;t=1200`.
    pub fn ratelimit_header(&self) -> String {
        format!(
            "\"{}\";r={};t={}",
            self.limit.layer(),
            self.remaining,
            self.retry_after_secs()
        )
    }

    /// Whether `self` is a tighter constraint than `other`: fewer requests left, or as few and a
    /// longer wait.
    pub fn is_tighter_than(&self, other: &Decision) -> bool {
        (self.remaining, std::cmp::Reverse(self.reset_at_ms))
            < (other.remaining, std::cmp::Reverse(other.reset_at_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_draft_10() {
        let d = Decision {
            limit: "ip=10/1h".parse().unwrap(),
            remaining: 3,
            reset_at_ms: 3_600_000,
            now_ms: 2_400_000,
        };
        assert_eq!(d.policy_header(), "\"ip\";q=10;w=3600");
        assert_eq!(d.ratelimit_header(), "\"ip\";r=3;t=1200");
        assert_eq!(d.retry_after_secs(), 1200);
    }
}
