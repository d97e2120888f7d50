//! Limits as configured: `ip=10/1h,client=60/1m,global=2000/1d`, parsed once into typed values.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What a layer counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// The client address (IPv6 per /64). Checked before authentication, so failed logins count.
    Ip,
    /// A verified client id. Never an unverified token: a sender could mint a fresh key per request.
    Client,
    /// One counter for the whole function: a spend cap.
    Global,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Ip => "ip",
            Layer::Client => "client",
            Layer::Global => "global",
        }
    }

    /// Internal callers skip the per-caller layers; the spend cap still applies to them.
    pub fn skipped_for_internal_callers(self) -> bool {
        matches!(self, Layer::Ip | Layer::Client)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Layer {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "ip" => Ok(Layer::Ip),
            "client" => Ok(Layer::Client),
            "global" => Ok(Layer::Global),
            other => Err(SpecError(format!(
                "unknown layer {other:?} (expected ip, client or global)"
            ))),
        }
    }
}

/// Why a limit specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(String);

/// One layer's limit: at most `limit` requests per fixed window of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    layer: Layer,
    limit: u32,
    window: Duration,
}

impl RateLimit {
    pub fn new(layer: Layer, limit: u32, window: Duration) -> Result<Self, SpecError> {
        if limit == 0 {
            return Err(SpecError(format!("{layer}: the limit must be at least 1")));
        }
        if window.as_secs() == 0 || window.subsec_nanos() != 0 {
            return Err(SpecError(format!(
                "{layer}: the window must be a whole number of seconds, at least 1"
            )));
        }
        Ok(Self {
            layer,
            limit,
            window,
        })
    }

    pub fn layer(&self) -> Layer {
        self.layer
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    pub fn window_secs(&self) -> u64 {
        self.window.as_secs()
    }

    /// Start and end (milliseconds) of the fixed window holding `now_ms`. Windows are aligned to
    /// the Unix epoch, so every process and every retry agrees on where a window ends.
    pub fn window_at(&self, now_ms: u64) -> (u64, u64) {
        let len = self.window_secs() * 1000;
        let start = now_ms - now_ms % len;
        (start, start + len)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.window_secs();
        let (n, unit) = [(86_400, 'd'), (3_600, 'h'), (60, 'm')]
            .into_iter()
            .find(|(u, _)| secs % u == 0)
            .map(|(u, c)| (secs / u, c))
            .unwrap_or((secs, 's'));
        write!(f, "{}={}/{}{}", self.layer, self.limit, n, unit)
    }
}

impl FromStr for RateLimit {
    type Err = SpecError;

    /// `layer=N/<count><s|m|h|d>`, e.g. `ip=10/1h`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        let (layer, rest) = s
            .split_once('=')
            .ok_or_else(|| SpecError(format!("{s:?}: expected layer=N/<window>, e.g. ip=10/1h")))?;
        let layer: Layer = layer.trim().parse()?;
        let (limit, window) = rest
            .split_once('/')
            .ok_or_else(|| SpecError(format!("{s:?}: expected N/<window>, e.g. 10/1h")))?;
        let limit: u32 = limit
            .trim()
            .parse()
            .map_err(|_| SpecError(format!("{s:?}: the limit {limit:?} is not a whole number")))?;
        let window = parse_window(window.trim()).ok_or_else(|| {
            SpecError(format!(
                "{s:?}: the window {window:?} is not like 30s, 1m, 1h or 1d"
            ))
        })?;
        RateLimit::new(layer, limit, window)
    }
}

fn parse_window(s: &str) -> Option<Duration> {
    let unit = s.chars().last()?;
    let count: u64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    };
    count.checked_mul(secs).map(Duration::from_secs)
}

/// A function's layers, in the order they are checked: `ip`, then `client`, then `global`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits(Vec<RateLimit>);

impl RateLimits {
    /// Parses a comma-separated list; each layer at most once.
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        let mut limits: Vec<RateLimit> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let limit: RateLimit = part.parse()?;
            if limits.iter().any(|l| l.layer == limit.layer) {
                return Err(SpecError(format!("layer {} is given twice", limit.layer)));
            }
            limits.push(limit);
        }
        limits.sort_by_key(|l| l.layer);
        Ok(Self(limits))
    }

    /// The limit for `layer`, if configured.
    pub fn get(&self, layer: Layer) -> Option<&RateLimit> {
        self.0.iter().find(|l| l.layer == layer)
    }

    pub fn iter(&self) -> impl Iterator<Item = &RateLimit> {
        self.0.iter()
    }
}

impl fmt::Display for RateLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{l}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_contract_examples() {
        let l = RateLimits::parse("ip=10/1h,global=2000/1d").unwrap();
        let ip = l.get(Layer::Ip).unwrap();
        assert_eq!((ip.limit(), ip.window_secs()), (10, 3600));
        assert_eq!(l.get(Layer::Global).unwrap().window_secs(), 86_400);
        assert!(l.get(Layer::Client).is_none());
        assert_eq!(
            RateLimits::parse(" client=60/1m , ip=300/1m ")
                .unwrap()
                .to_string(),
            "ip=300/1m,client=60/1m"
        );
        assert_eq!(
            RateLimit::from_str("ip=5/90s").unwrap().to_string(),
            "ip=5/90s"
        );
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        for bad in [
            "ip",
            "ip=10",
            "ip=10/",
            "ip=10/1w",
            "ip=-1/1h",
            "ip=0/1h",
            "ip=10/0s",
            "user=10/1h",
            "ip=10/1h,ip=5/1m",
            "ip=1.5/1h",
            "ip=10/h",
        ] {
            assert!(RateLimits::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let l: RateLimit = "ip=10/1h".parse().unwrap();
        assert_eq!(l.window_at(3_600_000), (3_600_000, 7_200_000));
        assert_eq!(l.window_at(7_199_999), (3_600_000, 7_200_000));
    }
}
