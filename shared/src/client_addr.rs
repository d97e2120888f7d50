//! Who is calling, as far as the network can tell: the address the `ip` layer counts.
//!
//! Only two sources are trusted. `peer` takes the source IP from the Lambda request context
//! (set by API Gateway or the function URL, not by the sender). `cloudfront` takes CloudFront's
//! `CloudFront-Viewer-Address`, but only on requests that prove they came through our
//! distribution with the origin-verify secret; anyone could send that header straight to the
//! function URL. `X-Forwarded-For` is never read: its first entry is whatever the sender wrote.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use secrecy::{ExposeSecret, SecretString};

use crate::internal::secrets_equal;

/// Header CloudFront adds with the viewer's `IP:port`.
pub const VIEWER_ADDRESS_HEADER: &str = "cloudfront-viewer-address";
/// Header our CloudFront distribution adds with the origin-verify secret.
pub const ORIGIN_VERIFY_HEADER: &str = "x-origin-verify";

/// Where the client address comes from (`CLIENT_IP_SOURCE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientIpSource {
    /// The request context's source IP (API Gateway, function URL, `cargo lambda watch`).
    Peer,
    /// `CloudFront-Viewer-Address`, on requests carrying the origin-verify secret.
    Cloudfront,
}

impl FromStr for ClientIpSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "peer" => Ok(Self::Peer),
            "cloudfront" => Ok(Self::Cloudfront),
            _ => Err("expected peer or cloudfront".to_string()),
        }
    }
}

/// The address a client is counted by. IPv4 as is; IPv6 by its /64, since one host is routinely
/// given a whole /64 and could otherwise pose as 2^64 clients; an IPv4-mapped IPv6 address
/// (`::ffff:192.0.2.1`) is the IPv4 address it maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddr(IpAddr);

impl ClientAddr {
    /// The address `ip` is counted by: itself for IPv4, its /64 for IPv6, the IPv4 address it maps
    /// for an IPv4-mapped IPv6 one. Every source of addresses goes through here, so a client cannot
    /// pick the form it is counted under.
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Self(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
        }
    }

    /// The counted address: the IPv4 address, or the IPv6 /64 network address.
    pub fn ip(&self) -> IpAddr {
        self.0
    }
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// Why no client address could be established.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClientAddrError {
    /// `cloudfront` mode and the origin-verify header is missing or wrong: the request did not
    /// come through our distribution.
    #[error("request did not come through the trusted proxy")]
    UntrustedOrigin,
    /// `cloudfront` mode and `CloudFront-Viewer-Address` is absent or not `IP:port`.
    #[error("CloudFront-Viewer-Address is missing or malformed")]
    MalformedViewerAddress,
    /// `peer` mode and the request context has no usable source IP: a deployment problem.
    #[error("request context carries no source IP")]
    NoPeerAddress,
}

/// Establishes the client address of `req`.
pub fn resolve(
    req: &Request,
    source: ClientIpSource,
    origin_secret: Option<&SecretString>,
) -> Result<ClientAddr, ClientAddrError> {
    match source {
        ClientIpSource::Peer => peer_ip(req)
            .map(ClientAddr::from_ip)
            .ok_or(ClientAddrError::NoPeerAddress),
        ClientIpSource::Cloudfront => {
            let presented = req
                .headers()
                .get(ORIGIN_VERIFY_HEADER)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            let trusted = match origin_secret {
                Some(secret) => {
                    let expected = secret.expose_secret().as_bytes();
                    !expected.is_empty() && secrets_equal(presented, expected)
                }
                None => false,
            };
            if !trusted {
                return Err(ClientAddrError::UntrustedOrigin);
            }
            req.headers()
                .get(VIEWER_ADDRESS_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_viewer_address)
                .map(ClientAddr::from_ip)
                .ok_or(ClientAddrError::MalformedViewerAddress)
        }
    }
}

/// `IP:port`, the IPv6 form unbracketed (`2001:db8::1:443`); a bracketed form is accepted too.
pub fn parse_viewer_address(value: &str) -> Option<IpAddr> {
    let (ip, port) = value.trim().rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let ip = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    ip.parse().ok()
}

fn peer_ip(req: &Request) -> Option<IpAddr> {
    let source_ip = match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx.http.source_ip.as_deref(),
        RequestContext::ApiGatewayV1(ctx) => ctx.identity.source_ip.as_deref(),
        #[allow(unreachable_patterns)]
        _ => None,
    }?;
    source_ip.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> String {
        ClientAddr::from_ip(s.parse().unwrap()).to_string()
    }

    #[test]
    fn ipv6_is_counted_per_64() {
        assert_eq!(addr("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            addr("2001:db8:1:2:bbbb:cccc:dddd:eeee"),
            "2001:db8:1:2::/64"
        );
        assert_ne!(addr("2001:db8:1:3::1"), addr("2001:db8:1:2::1"));
    }

    #[test]
    fn ipv4_mapped_ipv6_is_its_ipv4() {
        assert_eq!(addr("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(addr("192.0.2.1"), "192.0.2.1");
    }

    #[test]
    fn viewer_address_forms() {
        assert_eq!(
            parse_viewer_address("192.0.2.1:443"),
            Some("192.0.2.1".parse().unwrap())
        );
        assert_eq!(
            parse_viewer_address("2001:db8::1:46532"),
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            parse_viewer_address("[2001:db8::1]:443"),
            Some("2001:db8::1".parse().unwrap())
        );
        for bad in [
            "",
            "192.0.2.1",
            "192.0.2.1:",
            "192.0.2.1:99999",
            "example.com:443",
            "1.2.3.4:x",
        ] {
            assert_eq!(parse_viewer_address(bad), None, "{bad}");
        }
    }
}
