//! A stand-in for OpenAI's `POST /v1/realtime/client_secrets` at the HTTP level: the function's
//! real HTTP client and error handling run against it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with a fresh `ek_…` secret expiring `expires_at`.
    Secret { expires_at: u64 },
    /// A status with a body and headers that must never reach our clients.
    Status(u16),
    /// A status with a `Retry-After` header.
    StatusRetryAfter(u16, u64),
    /// 200 with a body that is not a client secret.
    Malformed,
    /// Answers after a delay (for timeouts).
    Slow(Duration),
}

/// Text the stand-in puts in error bodies and headers; a response containing it leaked.
pub const LEAK_MARKER: &str = "internal-openai-host.example";

struct Script {
    queue: Arc<Mutex<VecDeque<Answer>>>,
    default: Arc<Mutex<Answer>>,
    counter: Arc<Mutex<u64>>,
}

impl Respond for Script {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        let answer = self
            .queue
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.default.lock().unwrap().clone());
        let n = {
            let mut c = self.counter.lock().unwrap();
            *c += 1;
            *c
        };
        let leak = || json!({"error": {"message": format!("Incorrect API key provided at {LEAK_MARKER}"), "type": "invalid_request_error"}});
        match answer {
            Answer::Secret { expires_at } => ResponseTemplate::new(200).set_body_json(json!({
                "value": format!("ek_test_{n:04}"),
                "expires_at": expires_at,
                "session": {"type": "realtime", "model": "from-upstream-must-not-pass"}
            })),
            Answer::Status(status) => ResponseTemplate::new(status)
                .insert_header("x-upstream-host", LEAK_MARKER)
                .set_body_json(leak()),
            Answer::StatusRetryAfter(status, secs) => ResponseTemplate::new(status)
                .insert_header("retry-after", secs.to_string().as_str())
                .set_body_json(leak()),
            Answer::Malformed => ResponseTemplate::new(200)
                .set_body_string(format!("<html>{LEAK_MARKER} gateway</html>")),
            Answer::Slow(delay) => ResponseTemplate::new(200)
                .set_delay(delay)
                .set_body_json(json!({"value": "ek_slow", "expires_at": 4_000_000_000u64})),
        }
    }
}

/// A running stand-in.
pub struct OpenAiStandIn {
    pub server: MockServer,
    queue: Arc<Mutex<VecDeque<Answer>>>,
    default: Arc<Mutex<Answer>>,
}

impl OpenAiStandIn {
    /// Answers `default` unless a scripted answer is queued.
    pub async fn start(default: Answer) -> Self {
        let server = MockServer::start().await;
        let queue = Arc::new(Mutex::new(VecDeque::new()));
        let default = Arc::new(Mutex::new(default));
        Mock::given(method("POST"))
            .and(path("/v1/realtime/client_secrets"))
            .respond_with(Script {
                queue: queue.clone(),
                default: default.clone(),
                counter: Arc::new(Mutex::new(0)),
            })
            .mount(&server)
            .await;
        Self {
            server,
            queue,
            default,
        }
    }

    /// Queues answers for the next calls.
    pub fn then(&self, answers: impl IntoIterator<Item = Answer>) {
        self.queue.lock().unwrap().extend(answers);
    }

    pub fn set_default(&self, answer: Answer) {
        *self.default.lock().unwrap() = answer;
    }

    /// Requests received so far.
    pub async fn requests(&self) -> Vec<Request> {
        self.server.received_requests().await.unwrap_or_default()
    }

    pub async fn calls(&self) -> usize {
        self.requests().await.len()
    }
}
