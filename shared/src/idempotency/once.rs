//! The two-phase mode as one call, for an effect that is not an HTTP request: an SQS record, a
//! scheduled job, a step of a workflow. [`IdempotencyStore::once`] claims the key, runs the
//! effect, stores its output or frees the key, and says which happened.

use std::future::Future;
use std::time::Duration;

use super::{Claim, Existing, IdempotencyError, IdempotencyStore, Scope, StoredResponse};

/// What [`IdempotencyStore::once`] came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Once<E> {
    /// The effect ran now and gave this output. `stored` is false when its record could not
    /// be completed: the effect happened, but a duplicate after the lease ends would run it
    /// again (logged).
    Ran {
        /// The effect's output.
        output: Vec<u8>,
        /// Whether the output is stored under the key.
        stored: bool,
    },
    /// An earlier run with this key and the same fingerprint finished: its stored output.
    /// Nothing ran now.
    Replayed(Vec<u8>),
    /// Another run holds the key, until about `retry_after` seconds from now.
    InProgress {
        /// Seconds until the other run's lease ends.
        retry_after: u64,
    },
    /// The key was used before with another fingerprint. Nothing ran.
    KeyReused,
    /// The effect failed; the key is free again for a retry (or frees itself when the lease
    /// ends, if releasing it failed too).
    Failed(E),
}

impl IdempotencyStore {
    /// Runs `effect` at most once per `scope` and `fingerprint`: claimed for `lease` (longer
    /// than the effect can take: a claim whose lease ended may be taken again), its output
    /// stored on success, the key released on failure. An `Err` is the table failing before
    /// the effect ran (nothing ran).
    ///
    /// ```no_run
    /// # async fn example(store: tollgate::idempotency::IdempotencyStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::idempotency::{fingerprint, IdempotencyKey, Once, Scope};
    ///
    /// let body = serde_json::json!({"order": 42});
    /// let scope = Scope::new("orders-queue", "ship", &IdempotencyKey::new("msg-0001")?);
    /// let shipped = store
    ///     .once(&scope, &fingerprint(&body), Duration::from_secs(30), || async {
    ///         Ok::<_, std::io::Error>(b"shipped".to_vec())
    ///     })
    ///     .await?;
    /// match shipped {
    ///     Once::Ran { .. } | Once::Replayed(_) => {} // done, now or before
    ///     Once::InProgress { .. } | Once::KeyReused | Once::Failed(_) => {} // report it, retry later
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn once<F, Fut, E>(
        &self,
        scope: &Scope,
        fingerprint: &str,
        lease: Duration,
        effect: F,
    ) -> Result<Once<E>, IdempotencyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
    {
        let lease = match self.claim(scope, fingerprint, lease).await? {
            Claim::Acquired(lease) => lease,
            Claim::Existing(Existing::Replay(stored)) => return Ok(Once::Replayed(stored.body)),
            Claim::Existing(Existing::InProgress { retry_after }) => {
                return Ok(Once::InProgress { retry_after })
            }
            Claim::Existing(Existing::KeyReused) => return Ok(Once::KeyReused),
        };
        match effect().await {
            Ok(output) => {
                let stored = StoredResponse {
                    status: 200,
                    headers: Vec::new(),
                    body: output.clone(),
                };
                let stored = match self.complete(&lease, &stored, None).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(error = %e, "the effect ran, but its record could not be completed");
                        false
                    }
                };
                Ok(Once::Ran { output, stored })
            }
            Err(e) => {
                if let Err(release) = self.release(&lease).await {
                    tracing::warn!(error = %release, "could not release the key; it frees itself when the lease ends");
                }
                Ok(Once::Failed(e))
            }
        }
    }
}
