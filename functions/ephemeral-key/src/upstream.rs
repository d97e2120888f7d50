//! The OpenAI Realtime client-secrets call, and what its failures mean for us.
//!
//! Nothing the upstream says reaches our client: not its status text, body, headers or host.
//! Failures are classified (lesson 003):
//!
//! | upstream | meaning | our answer |
//! |---|---|---|
//! | network error, timeout, 5xx, 429 | temporary | 503 + cooldown (ours, or its `Retry-After` if longer) |
//! | 401, 403 | the key was refused: maybe rotated | read the key again, retry once if it changed; then 503 + the longer key cooldown |
//! | any other status, malformed body | unexpected | 503 + cooldown |

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

/// Longest upstream `Retry-After` honoured, so a hostile or broken value cannot park us for days.
const MAX_UPSTREAM_RETRY_AFTER: u64 = 600;
/// Largest upstream body read.
const MAX_BODY: usize = 64 * 1024;

/// A minted client secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSecret {
    pub value: String,
    pub expires_at: u64,
}

/// Why the upstream call gave no secret. Display is for logs only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream unreachable ({0})")]
    Network(&'static str),
    #[error("upstream timed out")]
    Timeout,
    /// 5xx or 429; `retry_after` is the upstream's own hint, if any.
    #[error("upstream failed with status {status}")]
    Failing {
        status: u16,
        retry_after: Option<u64>,
    },
    /// 401 or 403: the API key was refused.
    #[error("upstream refused the API key (status {status})")]
    Refused { status: u16 },
    /// Another status, or a body we cannot use.
    #[error("unexpected upstream answer: {0}")]
    Unexpected(String),
}

impl UpstreamError {
    /// The upstream's `Retry-After`, for the cooldown.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            UpstreamError::Failing { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What the upstream is asked for: everything comes from configuration, except the voice, which
/// the client picked from the allowlist.
#[derive(Debug, Clone)]
pub struct SecretRequest<'a> {
    pub model: &'a str,
    pub voice: &'a str,
    pub expires_after_secs: u64,
}

#[derive(Deserialize)]
struct Minted {
    value: String,
    expires_at: u64,
}

/// An HTTPS client for `{base_url}/v1/realtime/client_secrets`.
#[derive(Clone)]
pub struct Upstream {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: String,
    timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Builds the client once (TLS roots from the system). Plain `http` is accepted for local
    /// stand-ins.
    pub fn new(base_url: &str, timeout: Duration) -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
            url: format!("{base_url}/v1/realtime/client_secrets"),
            timeout,
        })
    }

    /// Asks for a client secret with `api_key`.
    pub async fn mint(
        &self,
        api_key: &SecretString,
        req: &SecretRequest<'_>,
    ) -> Result<ClientSecret, UpstreamError> {
        let body = json!({
            "expires_after": {"anchor": "created_at", "seconds": req.expires_after_secs},
            "session": {
                "type": "realtime",
                "model": req.model,
                "audio": {"output": {"voice": req.voice}}
            }
        });
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", api_key.expose_secret()))
            .map_err(|_| UpstreamError::Refused { status: 401 })?;
        auth.set_sensitive(true);
        let request = Request::builder()
            .method(Method::POST)
            .uri(&self.url)
            .header(AUTHORIZATION, auth)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|_| UpstreamError::Unexpected("request could not be built".into()))?;

        let call = async {
            let response = self.client.request(request).await.map_err(|e| {
                UpstreamError::Network(if e.is_connect() { "connect" } else { "io" })
            })?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| s.min(MAX_UPSTREAM_RETRY_AFTER));
            let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|_| UpstreamError::Network("body"))?
                .to_bytes();
            Ok::<_, UpstreamError>((status, retry_after, body))
        };
        let (status, retry_after, body) = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| UpstreamError::Timeout)??;

        match status {
            StatusCode::OK => {
                let minted: Minted = serde_json::from_slice(&body)
                    .map_err(|_| UpstreamError::Unexpected("malformed body".into()))?;
                if minted.value.is_empty() {
                    return Err(UpstreamError::Unexpected("empty client secret".into()));
                }
                Ok(ClientSecret {
                    value: minted.value,
                    expires_at: minted.expires_at,
                })
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(UpstreamError::Refused {
                status: status.as_u16(),
            }),
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                Err(UpstreamError::Failing {
                    status: s.as_u16(),
                    retry_after,
                })
            }
            s => Err(UpstreamError::Unexpected(format!("status {}", s.as_u16()))),
        }
    }
}
