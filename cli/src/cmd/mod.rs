//! One module per command group. Each parses its own arguments (clap derive), checks what clap
//! cannot (names, formats), calls the library's stores and returns a
//! [`Reply`](crate::output::Reply).
//!
//! Values clap cannot check are refused here with exit status 1 and one line, like any other
//! failed command; clap's own usage errors keep status 2.

pub mod accounts;
pub mod catalog;
pub mod clients;
pub mod idempotency;
pub mod kill_switch;
pub mod limits;
pub mod tables;

use std::net::IpAddr;
use std::path::Path;

use aws_sdk_dynamodb::Client;
use tollgate::client_addr::ClientAddr;
use tollgate::clock::SharedClock;
use tollgate::config::Env;

use crate::connect::Target;
use crate::error::CliError;

/// What every command may use.
pub(crate) struct Deps<'a> {
    pub ddb: Client,
    pub env: &'a Env,
    pub clock: SharedClock,
    pub cwd: &'a Path,
    pub target: &'a Target,
}

/// The function called `name`: one a kill switch and limits exist for.
pub(crate) fn function(
    name: &str,
) -> Result<&'static tollgate_functions::catalog::Function, CliError> {
    tollgate_functions::catalog::function(name).ok_or_else(|| {
        CliError::new(format!(
            "unknown function {name:?} (expected one of: {})",
            tollgate_functions::catalog::function_names()
        ))
    })
}

/// A client address as the functions count it: IPv4 as is, IPv6 by its /64. Accepts a plain
/// address or the counted form `2001:db8::/64`.
pub(crate) fn client_addr(raw: &str) -> Result<String, CliError> {
    let raw = raw.trim();
    let ip: Option<IpAddr> = match raw.strip_suffix("/64") {
        Some(net) => net.parse().ok().filter(IpAddr::is_ipv6),
        None => raw.parse().ok(),
    };
    ip.map(|ip| ClientAddr::from_ip(ip).to_string())
        .ok_or_else(|| {
            CliError::new(format!(
                "{raw:?} is not an IP address (e.g. 192.0.2.1, 2001:db8::1 or 2001:db8::/64)"
            ))
        })
}

/// A whole number of minor units from `1` (or `0` when `allow_zero`) to `i64::MAX`, the range the
/// transfer function accepts, so every amount stays exact in every JSON client.
pub(crate) fn amount(flag: &str, raw: &str, allow_zero: bool) -> Result<u64, CliError> {
    let min = u64::from(!allow_zero);
    raw.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= min && *n <= i64::MAX as u64)
        .ok_or_else(|| {
            let kind = if allow_zero {
                "non-negative"
            } else {
                "positive"
            };
            CliError::new(format!(
                "{flag} must be a {kind} whole number of minor units, at most {} (got {raw:?})",
                i64::MAX
            ))
        })
}

/// Seconds since the epoch as RFC 3339, for the human form.
pub(crate) fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_normalised_like_the_functions() {
        assert_eq!(client_addr("192.0.2.1").unwrap(), "192.0.2.1");
        assert_eq!(client_addr("2001:db8::1").unwrap(), "2001:db8::/64");
        assert_eq!(
            client_addr("2001:db8:0:0:ffff::9").unwrap(),
            "2001:db8::/64"
        );
        assert_eq!(client_addr("2001:db8::/64").unwrap(), "2001:db8::/64");
        assert_eq!(client_addr("::ffff:192.0.2.1").unwrap(), "192.0.2.1");
        for bad in ["", "example.com", "192.0.2.1/64", "2001:db8::/48", "1.2.3"] {
            assert!(client_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn amounts() {
        assert_eq!(amount("--balance", "0", true).unwrap(), 0);
        assert!(amount("--amount", "0", false).is_err());
        assert!(amount("--balance", "-1", true).is_err());
        assert!(amount("--balance", "1.5", true).is_err());
        assert!(amount("--balance", "9223372036854775808", true).is_err());
        assert_eq!(
            amount("--balance", "9223372036854775807", true).unwrap(),
            i64::MAX as u64
        );
    }

    #[test]
    fn functions_are_the_kill_switch_list() {
        assert_eq!(
            function("transfer").unwrap(),
            &tollgate_functions::catalog::TRANSFER
        );
        let err = function("transferr").unwrap_err();
        assert!(err.message().contains("ephemeral-key, transfer"), "{err}");
    }
}
