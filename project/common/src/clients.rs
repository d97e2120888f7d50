//! API clients and their bearer tokens.
//!
//! A token is 256 random bits shown once at creation; only its SHA-256 is stored, as the
//! partition key of the clients table, so a leaked table does not leak credentials and a lookup
//! is one `GetItem` by hash (no comparison of secrets in our code at all). A plain hash is
//! enough because the tokens are random, not passwords a dictionary could guess.
//!
//! Positive lookups are cached briefly per process; negative ones are not, so a token created a
//! second ago works at once and a flood of wrong tokens cannot fill the cache.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use tollgate::clock::{SharedClock, UnixMillis};
use tollgate::ApiError;

/// Prefix that makes a Tollgate token recognisable in a secret scanner.
pub const TOKEN_PREFIX: &str = "tg_";
const CACHE_CAPACITY: usize = 10_000;

/// The clients table could not be used.
#[derive(Debug, thiserror::Error)]
#[error("clients table {operation} failed")]
pub struct ClientStoreError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl From<ClientStoreError> for ApiError {
    fn from(e: ClientStoreError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "clients table failed");
        ApiError::Unavailable { retry_after: 1 }
    }
}

fn err(
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ClientStoreError {
    ClientStoreError {
        operation,
        source: Box::new(e),
    }
}

/// A newly created client: the token exists only in this value.
#[derive(Debug)]
pub struct NewClient {
    pub client_id: String,
    pub name: String,
    pub token: SecretString,
}

/// Hex SHA-256 of a token: the only form in which tokens are stored.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The clients table (partition key `pk` = token hash).
#[derive(Debug)]
pub struct ClientStore {
    ddb: Client,
    table: String,
    clock: SharedClock,
    cache_for: Duration,
    cache: Mutex<HashMap<String, (String, UnixMillis)>>,
}

impl ClientStore {
    pub fn new(
        ddb: Client,
        table: impl Into<String>,
        clock: SharedClock,
        cache_for: Duration,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            clock,
            cache_for,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Creates a client with a fresh token. Two items commit together: the token's hash (what
    /// authentication looks up) and `client#<id>` (what lets an operator check that an id
    /// exists, e.g. before opening an account for it).
    pub async fn create(&self, name: &str) -> Result<NewClient, ClientStoreError> {
        let client_id = tollgate::ids::new_id("cl");
        let token = format!("{TOKEN_PREFIX}{}", tollgate::ids::random_hex(32));
        let created_at = AttributeValue::N((self.clock.now_ms() / 1000).to_string());
        let hash = token_hash(&token);
        let put = |pk: String, token_ref: Option<&str>| {
            let mut put = Put::builder()
                .table_name(&self.table)
                .item("pk", AttributeValue::S(pk))
                .item("client_id", AttributeValue::S(client_id.clone()))
                .item("name", AttributeValue::S(name.to_string()))
                .item("created_at", created_at.clone())
                .condition_expression("attribute_not_exists(pk)");
            if let Some(h) = token_ref {
                // The id record points at the token's hash (never the token), so a client can
                // be revoked by its id.
                put = put.item("token_hash", AttributeValue::S(h.to_string()));
            }
            put.build().expect("table, item and condition are set")
        };
        self.ddb
            .transact_write_items()
            .transact_items(
                TransactWriteItem::builder()
                    .put(put(hash.clone(), None))
                    .build(),
            )
            .transact_items(
                TransactWriteItem::builder()
                    .put(put(id_key(&client_id), Some(&hash)))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| err("create", e))?;
        Ok(NewClient {
            client_id,
            name: name.to_string(),
            token: SecretString::from(token),
        })
    }

    /// Revokes a client: its token stops working at once in new processes and within the
    /// positive-cache time (`TOKEN_CACHE_SECONDS`) in warm ones. `Ok(false)` when no such client.
    pub async fn revoke(&self, client_id: &str) -> Result<bool, ClientStoreError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(id_key(client_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| err("revoke", e))?;
        let Some(item) = out.item() else {
            return Ok(false);
        };
        let mut delete = self.ddb.transact_write_items().transact_items(
            TransactWriteItem::builder()
                .delete(
                    Delete::builder()
                        .table_name(&self.table)
                        .key("pk", AttributeValue::S(id_key(client_id)))
                        .build()
                        .expect("table and key are set"),
                )
                .build(),
        );
        if let Some(hash) = item.get("token_hash").and_then(|v| v.as_s().ok()) {
            delete = delete.transact_items(
                TransactWriteItem::builder()
                    .delete(
                        Delete::builder()
                            .table_name(&self.table)
                            .key("pk", AttributeValue::S(hash.clone()))
                            .build()
                            .expect("table and key are set"),
                    )
                    .build(),
            );
        }
        delete.send().await.map_err(|e| err("revoke", e))?;
        Ok(true)
    }

    /// Whether a client with this id exists.
    pub async fn exists(&self, client_id: &str) -> Result<bool, ClientStoreError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(id_key(client_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| err("exists", e))?;
        Ok(out.item().is_some())
    }

    /// The client id this process verified `token` to belong to within the positive-cache
    /// time, without asking DynamoDB; `None` when it has not (which says nothing about the
    /// token). Lets a caller refuse a known client whose layer is full before counting it
    /// anywhere else.
    pub fn cached(&self, token: &SecretString) -> Option<String> {
        self.cached_hash(&token_hash(token.expose_secret()), self.clock.now_ms())
    }

    fn cached_hash(&self, hash: &str, now: UnixMillis) -> Option<String> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(hash)
            .filter(|(_, until)| *until > now)
            .map(|(id, _)| id.clone())
    }

    /// The client id a bearer token belongs to, or `None` for an unknown token.
    pub async fn authenticate(
        &self,
        token: &SecretString,
    ) -> Result<Option<String>, ClientStoreError> {
        let hash = token_hash(token.expose_secret());
        let now = self.clock.now_ms();
        if let Some(id) = self.cached_hash(&hash, now) {
            return Ok(Some(id));
        }
        // Boxed: a lookup is once per token and cache period; inline, its SDK future would make
        // every authentication's future kilobytes long.
        let lookup = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(hash.clone()))
            .send();
        let out = Box::pin(lookup).await.map_err(|e| err("lookup", e))?;
        let id = out
            .item()
            .and_then(|i| i.get("client_id"))
            .and_then(|v| v.as_s().ok())
            .cloned();
        if let Some(id) = &id {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_CAPACITY {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CACHE_CAPACITY {
                    cache.clear();
                }
            }
            cache.insert(hash, (id.clone(), now + self.cache_for.as_millis() as u64));
        }
        Ok(id)
    }
}

/// The key of a client's id record. Token hashes are 64 hex digits, so the two never collide.
fn id_key(client_id: &str) -> String {
    format!("client#{client_id}")
}

/// The bearer token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: Option<&http::HeaderValue>) -> Option<SecretString> {
    let value = header?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty())
        .then(|| SecretString::from(token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        let h = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert_eq!(
            bearer_token(Some(&h("Bearer abc")))
                .unwrap()
                .expose_secret(),
            "abc"
        );
        assert_eq!(
            bearer_token(Some(&h("bearer  abc ")))
                .unwrap()
                .expose_secret(),
            "abc"
        );
        assert!(bearer_token(Some(&h("Basic abc"))).is_none());
        assert!(bearer_token(Some(&h("Bearer"))).is_none());
        assert!(bearer_token(None).is_none());
    }

    #[test]
    fn only_the_hash_is_kept() {
        let h = token_hash("tg_secret");
        assert_eq!(h.len(), 64);
        assert!(!h.contains("secret"));
    }
}
