//! What a million requests of each kind cost in AWS: DynamoDB on-demand request units (parts 1
//! and 2, billed by [`super::capacity`]) plus Lambda arm64 (one request charge and GB-seconds,
//! at the memory `template.yaml` gives the functions and the warm median duration part 3
//! measured for that kind of request, billed in whole milliseconds, rounded up).
//!
//! The prices are [`PRICES`], the one place they are written.

use serde::Serialize;
use serde_norway::Value;
use tollgate::ratelimit::RateLimits;

use super::binaries::{self, Figures as Binaries};
use super::capacity::Units;
use super::idempotency::Idempotency;
use super::limiter::Limiter;
use super::BenchError;

/// Published list prices, us-east-1 (US East, N. Virginia), in USD.
///
/// - DynamoDB on-demand, Standard table class: $0.625 per million write request units and
///   $0.125 per million read request units. Page: <https://aws.amazon.com/dynamodb/pricing/on-demand/>;
///   its stored copy searched for this bench holds the unit definitions but not the rates,
///   so the rates are those that copies of the page quote (one "checked 2026-10-04"), the
///   prices since AWS halved on-demand throughput prices in November 2024.
/// - Lambda, Arm (Graviton2): $0.20 per million requests and $0.0000133334 per GB-second (the
///   first tier, up to 7.5 billion GB-seconds a month). Page: <https://aws.amazon.com/lambda/pricing/>,
///   whose rate tables are rendered client-side; the rates are those copies of the page quote
///   (one dated 2026-09-20, another read from the AWS Price List on 2026-09-11).
///
/// No free tier is applied (it is per account, not per request).
pub const PRICES: Prices = Prices {
    region: "us-east-1",
    dynamodb_page: "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    dynamodb_quoted_on: "2026-10-04",
    lambda_page: "https://aws.amazon.com/lambda/pricing/",
    lambda_quoted_on: "2026-09-20",
    dynamodb_write_per_million_units: 0.625,
    dynamodb_read_per_million_units: 0.125,
    lambda_per_million_requests: 0.20,
    lambda_arm_per_gb_second: 0.000_013_333_4,
};

/// List prices, per unit as AWS publishes them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Prices {
    pub region: &'static str,
    /// The price pages, and the date of the copy the rate was taken from.
    pub dynamodb_page: &'static str,
    pub dynamodb_quoted_on: &'static str,
    pub lambda_page: &'static str,
    pub lambda_quoted_on: &'static str,
    pub dynamodb_write_per_million_units: f64,
    pub dynamodb_read_per_million_units: f64,
    pub lambda_per_million_requests: f64,
    pub lambda_arm_per_gb_second: f64,
}

/// What `template.yaml` deploys, as far as the cost needs it.
#[derive(Debug, Clone, Serialize)]
pub struct Deployed {
    /// `Globals.Function.MemorySize`.
    pub memory_mb: u64,
    /// `Globals.Function.Architectures`, e.g. `arm64`.
    pub architecture: String,
    /// The defaults of the `SessionRateLimits` and `TransferRateLimits` parameters.
    pub session_limits: String,
    pub transfer_limits: String,
    /// How many layers a transfer is counted in.
    pub transfer_layers: usize,
}

impl Deployed {
    /// Reads `template.yaml`; a function with its own `MemorySize` would make the one figure
    /// wrong, so that is refused.
    pub fn read(template_yaml: &str) -> Result<Self, BenchError> {
        let bad = |what: &str| BenchError::Setup(format!("template.yaml: {what}"));
        let doc: Value = serde_norway::from_str(template_yaml).map_err(|e| bad(&e.to_string()))?;
        let function = &doc["Globals"]["Function"];
        let memory_mb = function["MemorySize"]
            .as_u64()
            .ok_or_else(|| bad("no Globals.Function.MemorySize"))?;
        let architecture = function["Architectures"][0]
            .as_str()
            .ok_or_else(|| bad("no Globals.Function.Architectures"))?
            .to_string();
        if let Some(resources) = doc["Resources"].as_mapping() {
            for (name, resource) in resources {
                if !resource["Properties"]["MemorySize"].is_null() {
                    return Err(bad(&format!("{name:?} sets its own MemorySize")));
                }
            }
        }
        let limits = |parameter: &str| -> Result<(String, usize), BenchError> {
            let default = doc["Parameters"][parameter]["Default"]
                .as_str()
                .ok_or_else(|| bad(&format!("no default for {parameter}")))?;
            let parsed = RateLimits::parse(default).map_err(|e| bad(&e.to_string()))?;
            Ok((default.to_string(), parsed.iter().count()))
        };
        let (session_limits, _) = limits("SessionRateLimits")?;
        let (transfer_limits, transfer_layers) = limits("TransferRateLimits")?;
        Ok(Self {
            memory_mb,
            architecture,
            session_limits,
            transfer_limits,
            transfer_layers,
        })
    }
}

/// One kind of request (`kind`, named by the report), what it costs per million.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The part 3 scenario whose warm median is the duration.
    pub scenario: &'static str,
    pub kind: &'static str,
    /// Units per request: the rate-limit layers (the gate), the rest (idempotency and ledger).
    pub gate: Units,
    pub work: Units,
    /// Whether the units needed a computed rule (see [`super::capacity`]).
    pub computed: bool,
    pub dynamodb_per_million: f64,
    /// The warm median of part 3 and what Lambda bills of it.
    pub median_ms: f64,
    pub billed_ms: u64,
    pub lambda_per_million: f64,
    pub total_per_million: f64,
    /// The Powertools side's DynamoDB cost for the same idempotency work, where part 1 has one.
    pub powertools_dynamodb_per_million: Option<f64>,
}

/// The cost section's figures.
#[derive(Debug, Serialize)]
pub struct Cost {
    pub prices: Prices,
    pub deployed: Deployed,
    pub rows: Vec<Row>,
}

/// Every row, from parts 1 (concurrency 1: one request at a time, as one Lambda process serves
/// them), 2 and 3 of this run and what `template.yaml` deploys.
///
/// A transfer's gate is its template's layers, each billed as part 2's one-layer fixed-window
/// admission; a session's is part 2's `ip` + `global` session (the template's session layers).
pub fn assemble(
    idempotency: &Idempotency,
    limiter: &Limiter,
    part3: &Binaries,
    deployed: Deployed,
) -> Result<Cost, BenchError> {
    let missing = |what: &str| BenchError::Setup(format!("the cost per million needs {what}"));
    let level = |cached: bool| {
        idempotency
            .mode(cached)
            .and_then(|m| m.levels.iter().find(|l| l.concurrency == 1))
            .ok_or_else(|| missing("part 1 at concurrency 1 in both modes"))
    };
    let (uncached, cached) = (level(false)?, level(true)?);
    let layer = &limiter.sliding.fixed.capacity;
    let transfer_gate = layer.billed.scaled(deployed.transfer_layers as f64);
    let median = |scenario: &str| {
        part3
            .warm_median(scenario)
            .ok_or_else(|| missing(&format!("part 3's {scenario}")))
    };
    // (kind, scenario, gate, work, computed, the Powertools side's work)
    let mut inputs = Vec::new();
    for (kind, scenario, side) in [
        ("new_transfer", binaries::NEW_TRANSFER, (uncached, false)),
        ("duplicate_cached", binaries::REPLAY, (cached, true)),
        (
            "duplicate_uncached",
            binaries::REPLAY_UNCACHED,
            (uncached, true),
        ),
    ] {
        let (level, duplicate) = side;
        let pick = |s: &'_ super::idempotency::Side| match duplicate {
            true => s.duplicate.capacity.clone(),
            false => s.new.capacity.clone(),
        };
        let (ours, theirs) = (pick(&level.tollgate), pick(&level.powertools));
        let computed = ours.computed || layer.computed;
        let work = (ours.billed, Some(theirs.billed));
        inputs.push((kind, scenario, transfer_gate, work, computed));
    }
    for (kind, scenario, session, cached) in [
        ("session_admitted", binaries::SESSION, "admitted", true),
        (
            "session_refused_cached",
            binaries::SESSION_REFUSED,
            "ip_full",
            true,
        ),
        (
            "session_refused_uncached",
            binaries::SESSION_REFUSED_UNCACHED,
            "ip_full",
            false,
        ),
    ] {
        let s = limiter
            .session(session, cached)
            .ok_or_else(|| missing(&format!("part 2's {session} sessions")))?;
        let work = (Units::default(), None);
        inputs.push((kind, scenario, s.capacity.billed, work, s.capacity.computed));
    }
    let mut rows = Vec::new();
    for (kind, scenario, gate, (work, powertools), computed) in inputs {
        let median_ms = median(scenario)?;
        let dynamodb = dynamodb_per_million(gate.plus(work));
        let (billed_ms, lambda) = lambda_per_million(median_ms, deployed.memory_mb);
        rows.push(Row {
            scenario,
            kind,
            gate,
            work,
            computed,
            dynamodb_per_million: dynamodb,
            median_ms,
            billed_ms,
            lambda_per_million: lambda,
            total_per_million: dynamodb + lambda,
            powertools_dynamodb_per_million: powertools.map(dynamodb_per_million),
        });
    }
    Ok(Cost {
        prices: PRICES,
        deployed,
        rows,
    })
}

/// A million requests of `units` each, in USD.
pub fn dynamodb_per_million(units: Units) -> f64 {
    units.write * PRICES.dynamodb_write_per_million_units
        + units.read * PRICES.dynamodb_read_per_million_units
}

/// A million invocations of `median_ms` each at `memory_mb`: the billed duration (whole
/// milliseconds, rounded up) and the USD.
pub fn lambda_per_million(median_ms: f64, memory_mb: u64) -> (u64, f64) {
    let billed_ms = median_ms.max(0.0).ceil() as u64;
    let gb_seconds = memory_mb as f64 / 1024.0 * billed_ms as f64 / 1000.0;
    let usd =
        PRICES.lambda_per_million_requests + gb_seconds * PRICES.lambda_arm_per_gb_second * 1e6;
    (billed_ms, usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_per_million() {
        let units = Units {
            read: 2.0,
            write: 4.0,
        };
        assert!((dynamodb_per_million(units) - (4.0 * 0.625 + 2.0 * 0.125)).abs() < 1e-12);
        // 3.2 ms bills 4 ms; 128 MB is 0.125 GB: 0.0005 GB-s per request.
        let (billed, usd) = lambda_per_million(3.2, 128);
        assert_eq!(billed, 4);
        assert!((usd - (0.20 + 0.0005 * 0.000_013_333_4 * 1e6)).abs() < 1e-9);
    }

    #[test]
    fn the_template_gives_memory_architecture_and_limits() {
        let text = std::fs::read_to_string(crate::workspace_root().join("template.yaml")).unwrap();
        let d = Deployed::read(&text).unwrap();
        assert!(d.memory_mb >= 128);
        assert!(!d.architecture.is_empty());
        assert!(d.transfer_layers >= 1);
        let override_memory = "Globals: {Function: {MemorySize: 128, Architectures: [arm64]}}\nResources: {F: {Properties: {MemorySize: 256}}}\nParameters: {SessionRateLimits: {Default: ip=1/1h}, TransferRateLimits: {Default: ip=1/1h}}";
        assert!(Deployed::read(override_memory).is_err());
    }
}
