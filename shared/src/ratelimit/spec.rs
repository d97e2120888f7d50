//! Limits as configured: `ip=10/1h,client=60/1m,global=2000/1d`, parsed once into typed values.
//!
//! Each layer may add options after its window, each after a colon:
//!
//! - `:sliding`: a sliding window instead of the fixed one (see [`super::sliding`]), so a client
//!   cannot spend its limit at the end of one window and again at the start of the next;
//! - `:shards=N` or `:shards=auto`: the limit spread over N counter items instead of one, for a
//!   key so hot that one item (one DynamoDB partition, about 1,000 writes per second) would
//!   throttle; `auto` is one shard per [`AUTO_SHARD_UNITS`] of the limit, at most [`MAX_SHARDS`].
//!
//! e.g. `ip=10/1h:sliding,global=100000/1d:shards=auto`.

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
    /// The layer's name in the limits syntax, counter keys and `RateLimit-Policy`.
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

/// How a layer's window moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Windows aligned to the epoch; a counter per window, reset at its end.
    Fixed,
    /// The last `window` before each request, whatever the alignment.
    Sliding,
}

/// How many counter items a layer's limit is spread over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shards {
    /// Exactly this many items.
    Count(u32),
    /// One per [`AUTO_SHARD_UNITS`] of the limit.
    Auto,
}

/// The most shards a layer may have.
pub const MAX_SHARDS: u32 = 64;
/// `shards=auto` gives a layer one shard per this many units of its limit: an item holding at
/// most this many admissions per window can never be asked for more than that many writes in a
/// second by admissions, half of a partition's 1,000 writes per second.
pub const AUTO_SHARD_UNITS: u32 = 500;

/// One layer's limit: at most `limit` requests per window of `window`, fixed or sliding,
/// counted in one item or spread over shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    layer: Layer,
    limit: u32,
    window: Duration,
    kind: WindowKind,
    shards: Shards,
}

impl RateLimit {
    /// A fixed-window limit in one item. Refuses a zero limit (a layer that admits nothing is
    /// `off` by another name, or a typo) and a window that is not a whole number of seconds.
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
            kind: WindowKind::Fixed,
            shards: Shards::Count(1),
        })
    }

    /// The same limit with a sliding window.
    pub fn sliding(self) -> Self {
        Self {
            kind: WindowKind::Sliding,
            ..self
        }
    }

    /// The same limit spread over `shards`; at least 1, at most [`MAX_SHARDS`] and at most the
    /// limit (a shard holds at least one unit).
    pub fn with_shards(self, shards: Shards) -> Result<Self, SpecError> {
        let limit = Self { shards, ..self };
        let n = limit.shards();
        if let Shards::Count(n) = shards {
            if n == 0 || n > MAX_SHARDS || n > self.limit {
                return Err(SpecError(format!(
                    "{}: shards must be from 1 to {MAX_SHARDS} and at most the limit ({}), not {n}",
                    self.layer, self.limit
                )));
            }
        }
        debug_assert!((1..=MAX_SHARDS.min(self.limit)).contains(&n));
        Ok(limit)
    }

    /// The same limit over `shards` items whatever the limit (the layout a window was started
    /// with, which may have more shards than a since lowered limit has units: those hold none).
    #[cfg(feature = "ratelimit")]
    pub(crate) fn in_layout(self, shards: u32) -> Self {
        Self {
            shards: Shards::Count(shards.clamp(1, MAX_SHARDS)),
            ..self
        }
    }

    /// Fixed or sliding.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }

    /// Whether the window slides (`:sliding`).
    pub fn is_sliding(&self) -> bool {
        self.kind == WindowKind::Sliding
    }

    /// How many items the limit is spread over (`auto` resolved).
    pub fn shards(&self) -> u32 {
        match self.shards {
            Shards::Count(n) => n,
            Shards::Auto => self
                .limit
                .div_ceil(AUTO_SHARD_UNITS)
                .clamp(1, MAX_SHARDS.min(self.limit)),
        }
    }

    /// The units shard `i` holds: the limit split as evenly as whole units allow, the first
    /// `limit % shards` shards one more, so the shards add up to the limit exactly.
    pub fn shard_limit(&self, i: u32) -> u32 {
        let n = self.shards();
        self.limit / n + u32::from(i < self.limit % n)
    }

    /// What the limit counts by.
    pub fn layer(&self) -> Layer {
        self.layer
    }

    /// Requests admitted per window.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The window's length in seconds, as the `RateLimit` fields carry it.
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
            .find(|(u, _)| secs.is_multiple_of(*u))
            .map(|(u, c)| (secs / u, c))
            .unwrap_or((secs, 's'));
        write!(f, "{}={}/{}{}", self.layer, self.limit, n, unit)?;
        if self.is_sliding() {
            f.write_str(":sliding")?;
        }
        match self.shards {
            Shards::Count(1) => Ok(()),
            Shards::Count(n) => write!(f, ":shards={n}"),
            Shards::Auto => f.write_str(":shards=auto"),
        }
    }
}

impl FromStr for RateLimit {
    type Err = SpecError;

    /// `layer=N/<count><s|m|h|d>[:sliding][:shards=<N|auto>]`, e.g. `ip=10/1h:sliding`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        let mut options = s.split(':');
        let base = options.next().unwrap_or_default();
        let mut limit: RateLimit = parse_base(base)?;
        let (mut kind_given, mut shards_given) = (false, false);
        for option in options.map(str::trim) {
            let twice = || SpecError(format!("{s:?}: {option:?} is given twice"));
            match option.split_once('=') {
                None if option == "sliding" || option == "fixed" => {
                    if std::mem::replace(&mut kind_given, true) {
                        return Err(twice());
                    }
                    if option == "sliding" {
                        limit = limit.sliding();
                    }
                }
                Some(("shards", n)) => {
                    if std::mem::replace(&mut shards_given, true) {
                        return Err(twice());
                    }
                    let shards = match n.trim() {
                        "auto" => Shards::Auto,
                        n => Shards::Count(n.parse().map_err(|_| {
                            SpecError(format!("{s:?}: shards={n:?} is neither a whole number nor auto"))
                        })?),
                    };
                    limit = limit.with_shards(shards)?;
                }
                _ => {
                    return Err(SpecError(format!(
                        "{s:?}: unknown option {option:?} (expected sliding, fixed, shards=N or shards=auto)"
                    )))
                }
            }
        }
        Ok(limit)
    }
}

/// `layer=N/<window>`, the part before any option.
fn parse_base(s: &str) -> Result<RateLimit, SpecError> {
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

/// A function's layers, in the order they are checked: `ip`, then `client`, then `global`; and
/// the layers the operator turned off on purpose (`global=off`).
///
/// A guard that is missing from the configuration is not counted, so a typo (`","`, an
/// unintended empty list) would silently turn a limit off. The parser therefore refuses a list
/// without entries, and `<layer>=off` says "unlimited, on purpose": a function that needs a layer
/// (a spend cap) can tell "forgotten" from "chosen".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    limits: Vec<RateLimit>,
    off: Vec<Layer>,
}

/// The value that marks a layer as deliberately unlimited.
const OFF: &str = "off";

impl FromStr for RateLimits {
    type Err = SpecError;

    /// [`RateLimits::parse`].
    fn from_str(s: &str) -> Result<Self, SpecError> {
        Self::parse(s)
    }
}

impl RateLimits {
    /// Parses a comma-separated list of `layer=N/<window>` or `layer=off`; each layer at most
    /// once, and at least one entry.
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        let mut parsed = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some((layer, value)) if value.trim() == OFF => {
                    let layer: Layer = layer.trim().parse()?;
                    parsed.add_layer(layer)?;
                    parsed.off.push(layer);
                }
                _ => {
                    let limit: RateLimit = part.parse()?;
                    parsed.add_layer(limit.layer)?;
                    parsed.limits.push(limit);
                }
            }
        }
        if parsed.limits.is_empty() && parsed.off.is_empty() {
            return Err(SpecError(
                "no layers given: write at least one, e.g. ip=10/1h, or <layer>=off (e.g. global=off) to run a layer unlimited on purpose".into(),
            ));
        }
        parsed.limits.sort_by_key(|l| l.layer);
        parsed.off.sort();
        Ok(parsed)
    }

    /// Refuses a layer already given, as a limit or as `off`.
    fn add_layer(&self, layer: Layer) -> Result<(), SpecError> {
        if self.get(layer).is_some() || self.is_off(layer) {
            return Err(SpecError(format!(
                "layer {layer} is given twice (a layer is either off or has one limit)"
            )));
        }
        Ok(())
    }

    /// The limit for `layer`, if configured (never for a layer that is off).
    pub fn get(&self, layer: Layer) -> Option<&RateLimit> {
        self.limits.iter().find(|l| l.layer == layer)
    }

    /// Whether the operator wrote `<layer>=off`: the layer counts nothing, on purpose.
    pub fn is_off(&self, layer: Layer) -> bool {
        self.off.contains(&layer)
    }

    /// The configured limits (layers that are off are not among them).
    pub fn iter(&self) -> impl Iterator<Item = &RateLimit> {
        self.limits.iter()
    }
}

impl fmt::Display for RateLimits {
    /// The canonical form, in check order; `RateLimits::parse` reads it back unchanged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut entries: Vec<(Layer, String)> = self
            .limits
            .iter()
            .map(|l| (l.layer, l.to_string()))
            .chain(self.off.iter().map(|l| (*l, format!("{l}={OFF}"))))
            .collect();
        entries.sort_by_key(|(layer, _)| *layer);
        for (i, (_, entry)) in entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(entry)?;
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
    fn a_list_without_entries_is_refused() {
        for empty in ["", ",", " , ", ",,,"] {
            let err = RateLimits::parse(empty).unwrap_err();
            assert!(err.to_string().contains("=off"), "{empty:?}: {err}");
        }
    }

    #[test]
    fn off_marks_a_layer_unlimited_on_purpose() {
        let l = RateLimits::parse("global=off, ip=10/1h").unwrap();
        assert!(l.get(Layer::Global).is_none());
        assert!(l.is_off(Layer::Global));
        assert!(!l.is_off(Layer::Ip) && !l.is_off(Layer::Client));
        assert_eq!(l.iter().count(), 1);
        assert_eq!(l.to_string(), "ip=10/1h,global=off");
        assert_eq!(RateLimits::parse(&l.to_string()).unwrap(), l);
        // Only `off` entries: explicit, so allowed.
        let none = RateLimits::parse("ip=off,global=off").unwrap();
        assert_eq!(none.iter().count(), 0);
        assert_eq!(none.to_string(), "ip=off,global=off");
        assert_eq!(RateLimits::parse(&none.to_string()).unwrap(), none);
    }

    #[test]
    fn a_layer_is_either_off_or_limited() {
        for bad in [
            "global=off,global=10/1h",
            "global=10/1h,global=off",
            "global=off,global=off",
            "global=of",
            "global=OFF",
            "=off",
        ] {
            assert!(RateLimits::parse(bad).is_err(), "{bad} should be refused");
        }
        assert!(
            RateLimit::from_str("global=off").is_err(),
            "off is not a limit"
        );
    }

    #[test]
    fn display_round_trips() {
        for spec in [
            "ip=10/1h,global=2000/1d",
            "ip=300/1m,client=60/1m",
            "ip=5/90s,client=off,global=3/1d",
            "client=off",
        ] {
            let l = RateLimits::parse(spec).unwrap();
            assert_eq!(l.to_string(), spec);
            assert_eq!(RateLimits::parse(&l.to_string()).unwrap(), l);
        }
    }

    #[test]
    fn options_choose_the_window_and_the_shards() {
        let l = RateLimits::parse("ip=10/1h:sliding,global=100000/1d:shards=auto").unwrap();
        let ip = l.get(Layer::Ip).unwrap();
        assert!(ip.is_sliding());
        assert_eq!(ip.shards(), 1);
        let global = l.get(Layer::Global).unwrap();
        assert!(!global.is_sliding());
        // One shard per 500 units, at most 64.
        assert_eq!(global.shards(), 64);
        assert_eq!(
            RateLimit::from_str("global=2000/1d:shards=auto")
                .unwrap()
                .shards(),
            4
        );
        assert_eq!(
            RateLimit::from_str("global=3/1d:shards=auto")
                .unwrap()
                .shards(),
            1
        );
        assert_eq!(
            l.to_string(),
            "ip=10/1h:sliding,global=100000/1d:shards=auto"
        );
        let both = RateLimit::from_str(" global=10/1m : sliding : shards=3 ").unwrap();
        assert_eq!(both.to_string(), "global=10/1m:sliding:shards=3");
        assert_eq!(
            RateLimit::from_str("ip=10/1h:fixed").unwrap().to_string(),
            "ip=10/1h"
        );
    }

    #[test]
    fn shards_split_the_limit_exactly() {
        let l = RateLimit::from_str("global=10/1d:shards=4").unwrap();
        let shares: Vec<u32> = (0..4).map(|i| l.shard_limit(i)).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        let l = RateLimit::from_str("global=100000/1d:shards=auto").unwrap();
        assert_eq!(
            (0..l.shards()).map(|i| l.shard_limit(i)).sum::<u32>(),
            100_000
        );
    }

    #[test]
    fn options_it_cannot_mean_are_refused() {
        for bad in [
            "ip=10/1h:",
            "ip=10/1h:slide",
            "ip=10/1h:sliding:sliding",
            "ip=10/1h:sliding:fixed",
            "global=10/1d:shards=0",
            "global=10/1d:shards=11",
            "global=1000/1d:shards=65",
            "global=10/1d:shards=two",
            "global=10/1d:shards=2:shards=3",
            "global=off:sliding",
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
