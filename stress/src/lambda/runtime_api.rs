//! The Lambda runtime API (`2018-06-01`) one function process polls, on hyper.
//!
//! Lambda starts a custom runtime with `AWS_LAMBDA_RUNTIME_API=host:port`; the runtime (here
//! the `lambda_runtime` crate under `lambda_http`) initialises, then loops on
//! `GET /runtime/invocation/next`, which blocks until there is an event, and answers each with
//! `POST /runtime/invocation/{id}/response` (or `/error`); a failed initialisation is
//! `POST /runtime/init/error`.
//!
//! Each process gets its own listener ([`Endpoint`]) over the function's shared [`Queue`], so
//! a poll takes the next invocation whichever process asks, and the invocations a process
//! holds are known: when it dies ([`Endpoint::die`]) they are answered
//! [`Reply::Crashed`] at once, and a poll still waiting for it lets go of the queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::{answer, listen};

const PREFIX: &str = "/2018-06-01/runtime";

/// One event waiting for, or held by, a process.
pub struct Invocation {
    pub id: String,
    pub event: Bytes,
    /// How long the function may take (the `Lambda-Runtime-Deadline-Ms` it is told).
    pub timeout: Duration,
    pub reply: oneshot::Sender<Reply>,
}

/// How an invocation ended.
#[derive(Debug)]
pub enum Reply {
    /// `POST …/invocation/{id}/response`: the function's answer.
    Response(Bytes),
    /// `POST …/invocation/{id}/error`: the function reported an error.
    Error(Bytes),
    /// The process holding it died.
    Crashed(String),
}

/// A function's invocations not yet taken by a process (many senders, many pollers).
pub struct Queue {
    tx: mpsc::UnboundedSender<Invocation>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
}

impl Queue {
    pub fn new() -> Arc<Queue> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Queue {
            tx,
            rx: tokio::sync::Mutex::new(rx),
        })
    }

    /// Queues `invocation` for the next poll, of any process.
    pub fn push(&self, invocation: Invocation) {
        // The receiver lives as long as the queue: this cannot fail while `self` exists.
        let _ = self.tx.send(invocation);
    }

    async fn pop(&self) -> Option<Invocation> {
        self.rx.lock().await.recv().await
    }
}

/// What the endpoint knows about its process.
struct State {
    dead: bool,
    in_flight: HashMap<String, Invocation>,
    /// Told once: the first poll (Ok) or an init error or death (Err).
    ready: Option<oneshot::Sender<Result<(), String>>>,
}

/// One process's runtime API; dropping it stops accepting connections.
pub struct Endpoint {
    /// `127.0.0.1:<port>`, the process's `AWS_LAMBDA_RUNTIME_API`.
    pub address: String,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

struct Shared {
    queue: Arc<Queue>,
    state: Mutex<State>,
    dead: watch::Sender<bool>,
    /// The `Lambda-Runtime-Invoked-Function-Arn` the process is told.
    arn: String,
}

impl Endpoint {
    /// Listens on a free loopback port; `ready` is told when the process first polls (Ok) or
    /// reports an init error (Err).
    pub async fn start(
        function: &str,
        queue: Arc<Queue>,
        ready: oneshot::Sender<Result<(), String>>,
    ) -> std::io::Result<Endpoint> {
        let shared = Arc::new(Shared {
            queue,
            state: Mutex::new(State {
                dead: false,
                in_flight: HashMap::new(),
                ready: Some(ready),
            }),
            dead: watch::Sender::new(false),
            arn: format!("arn:aws:lambda:us-east-1:123456789012:function:{function}"),
        });
        let (addr, accept) = {
            let shared = shared.clone();
            listen(move |_, req| {
                let shared = shared.clone();
                async move { shared.serve(req).await }
            })
            .await?
        };
        Ok(Endpoint {
            address: addr.to_string(),
            shared,
            accept,
        })
    }

    /// The process is gone: its invocations are answered [`Reply::Crashed`] with `why`, and
    /// its waiting polls let go of the queue.
    pub fn die(&self, why: &str) {
        let (held, ready) = {
            let mut state = self.shared.state.lock().expect("runtime API state");
            state.dead = true;
            (
                state.in_flight.drain().map(|(_, i)| i).collect::<Vec<_>>(),
                state.ready.take(),
            )
        };
        for invocation in held {
            let _ = invocation.reply.send(Reply::Crashed(why.to_string()));
        }
        if let Some(ready) = ready {
            let _ = ready.send(Err(why.to_string()));
        }
        self.shared.dead.send_replace(true);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.die("the runtime API stopped");
        self.accept.abort();
    }
}

type Body = Full<Bytes>;

impl Shared {
    async fn serve(&self, req: Request<Incoming>) -> Response<Body> {
        let route = req
            .uri()
            .path()
            .strip_prefix(PREFIX)
            .unwrap_or("")
            .to_string();
        let method = req.method().clone();
        let body = match req.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return answer(StatusCode::BAD_REQUEST, r#"{"errorType":"BadBody"}"#),
        };
        match (method, route.as_str()) {
            (Method::GET, "/invocation/next") => self.next().await,
            (Method::POST, "/init/error") => {
                let ready = self.state.lock().expect("runtime API state").ready.take();
                if let Some(ready) = ready {
                    let _ = ready.send(Err(String::from_utf8_lossy(&body).into_owned()));
                }
                answer(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
            }
            (Method::POST, route) if route.starts_with("/invocation/") => {
                let rest = &route["/invocation/".len()..];
                let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
                let reply = match kind {
                    "response" => Reply::Response(body),
                    "error" => Reply::Error(body),
                    _ => return answer(StatusCode::NOT_FOUND, r#"{"errorType":"NotFound"}"#),
                };
                let held = self
                    .state
                    .lock()
                    .expect("runtime API state")
                    .in_flight
                    .remove(id);
                match held {
                    Some(invocation) => {
                        // The caller may have given up (a timeout, a hang-up): nothing to tell.
                        let _ = invocation.reply.send(reply);
                        answer(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
                    }
                    None => answer(
                        StatusCode::BAD_REQUEST,
                        r#"{"errorType":"InvalidRequestID"}"#,
                    ),
                }
            }
            _ => answer(StatusCode::NOT_FOUND, r#"{"errorType":"NotFound"}"#),
        }
    }

    /// `GET …/invocation/next`: blocks, as Lambda does, until there is an event.
    async fn next(&self) -> Response<Body> {
        let ready = self.state.lock().expect("runtime API state").ready.take();
        if let Some(ready) = ready {
            let _ = ready.send(Ok(()));
        }
        let mut dead = self.dead.subscribe();
        let invocation = tokio::select! {
            invocation = self.queue.pop() => invocation,
            _ = dead.wait_for(|dead| *dead) => None,
        };
        let Some(invocation) = invocation else {
            return answer(StatusCode::GONE, r#"{"errorType":"Stopped"}"#);
        };
        let deadline = u128::from(crate::now_ms()) + invocation.timeout.as_millis();
        let (id, event) = (invocation.id.clone(), invocation.event.clone());
        {
            let mut state = self.state.lock().expect("runtime API state");
            if state.dead {
                // Taken just as the process died: another process gets it.
                drop(state);
                self.queue.push(invocation);
                return answer(StatusCode::GONE, r#"{"errorType":"Stopped"}"#);
            }
            state.in_flight.insert(id.clone(), invocation);
        }
        Response::builder()
            .header("content-type", "application/json")
            .header("lambda-runtime-aws-request-id", &id)
            .header("lambda-runtime-deadline-ms", deadline.to_string())
            .header("lambda-runtime-invoked-function-arn", &self.arn)
            .header(
                "lambda-runtime-trace-id",
                "Root=1-00000000-000000000000000000000000;Sampled=0",
            )
            .body(Full::new(event))
            .expect("ids and ARNs of ASCII names")
    }
}
