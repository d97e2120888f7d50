//! A fault-injecting HTTP/1.1 proxy between the AWS SDK and DynamoDB Local.
//!
//! DynamoDB's hard cases are answers that never arrive (a write that committed while its
//! response was lost looks exactly like one that never happened) and errors DynamoDB Local never
//! gives (conflicts, throttling, failures). Tests arm [`Fault`]s per operation (the part after
//! the `.` in `x-amz-target`), once or until disarmed, for any request or only one whose body
//! names a chosen item; errors are DynamoDB's own bodies ([`DynamoError`]), parsed by the SDK as
//! DynamoDB's. A fault that loses an answer fails the request's service, which hyper turns into
//! closing the client connection without a byte: exactly what a lost response looks like.
//!
//! Every forwarded request gets a fresh upstream connection: a stale pooled one would force the
//! proxy to guess whether a request reached DynamoDB, the very ambiguity tests want to control.
//! The `Host` header keeps the proxy's address, so the SigV4 signature stays intact.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

/// How long an idle client connection may wait for its next request: only so that no
/// connection task outlives a hung test for ever.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest wait for a request's body, and for an upstream exchange (connect, request,
/// whole response).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What the proxy answers with: a whole body, so it is framed by `content-length`.
type Answer = Response<Full<Bytes>>;

/// A fault, fired by a request for the operation it was armed for.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Forward the request, let DynamoDB commit it, read the full response, then close the
    /// client connection without sending any of it: the "lost response after commit".
    DropResponseAfterCommit,
    /// Close the client connection without forwarding: nothing is committed.
    DropRequest,
    /// Answer 500 with a DynamoDB-style `InternalServerError` body without forwarding. The client
    /// connection stays open. (The same as `Error(DynamoError::InternalServerError)`.)
    ServerError,
    /// Forward after a delay.
    Delay(Duration),
    /// Pause the request until the [`Release`] it came with is opened, then forward it: a write
    /// delayed exactly as long as a test needs. Made by [`FaultProxy::hold_always_when`].
    Pause(Paused),
    /// Answer with one of DynamoDB's own errors, as DynamoDB sends it, without forwarding:
    /// nothing is committed. The client connection stays open.
    Error(DynamoError),
    /// Close the client connection at once (a lost answer), and forward the request from a
    /// task of its own once the [`Landing`] is opened: a write that lands after its caller gave
    /// up (a paused or delayed one is dropped with its connection). Made by
    /// [`FaultProxy::land_later_when`].
    LandLater(Landing),
}

/// A write that lands when a test says so ([`Fault::LandLater`]), and what DynamoDB answered it.
#[derive(Debug, Clone)]
pub struct Landing(Arc<LandingState>);

#[derive(Debug)]
struct LandingState {
    open: tokio::sync::watch::Sender<bool>,
    /// Requests caught, and DynamoDB's status for each one landed (502: it could not be
    /// forwarded).
    caught: AtomicUsize,
    landed: tokio::sync::watch::Sender<Vec<u16>>,
}

impl Landing {
    fn new() -> Self {
        Self(Arc::new(LandingState {
            open: tokio::sync::watch::channel(false).0,
            caught: AtomicUsize::new(0),
            landed: tokio::sync::watch::channel(Vec::new()).0,
        }))
    }

    /// Lets every request caught (and any caught later) go on to DynamoDB.
    pub fn open(&self) {
        self.0.open.send_replace(true);
    }

    /// Requests caught so far.
    pub fn caught(&self) -> usize {
        self.0.caught.load(Ordering::SeqCst)
    }

    /// Waits until every request caught so far has had DynamoDB's answer, and returns the
    /// statuses, in landing order (200: the write was applied).
    pub async fn landed(&self) -> Vec<u16> {
        let caught = self.caught();
        let mut rx = self.0.landed.subscribe();
        let landed = rx.wait_for(|l| l.len() >= caught).await;
        landed.map(|l| l.clone()).unwrap_or_default()
    }

    async fn land(&self, upstream: Arc<str>, req: Request<Bytes>) {
        let mut open = self.0.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
        let status = match timeout(IO_TIMEOUT, forward(&upstream, req)).await {
            Ok(Ok(answer)) => answer.status().as_u16(),
            _ => 502,
        };
        self.0.landed.send_modify(|l| l.push(status));
    }
}

/// The waiting side of a [`Fault::Pause`].
#[derive(Debug, Clone)]
pub struct Paused(tokio::sync::watch::Receiver<bool>);

/// Opens a [`Fault::Pause`]: every request it paused (and any it catches later) goes on.
#[derive(Debug)]
pub struct Release(tokio::sync::watch::Sender<bool>);

impl Release {
    pub fn open(&self) {
        self.0.send_replace(true);
    }
}

/// DynamoDB's own error answers, which DynamoDB Local never gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DynamoError {
    /// `TransactionCanceledException` whose reason for the transaction item that contains
    /// `item` (an account id, an idempotency record's key) is `TransactionConflict`, and `None`
    /// for every other item. Fired by a request with no such item it answers a plain 500: a test
    /// that names an item the transaction does not have is wrong.
    TransactionConflict { item: String },
    /// `TransactionCanceledException` whose reason for the item that contains `item` is
    /// `ThrottlingError` (that item's partition is over its throughput), `None` for the others.
    ItemThrottled { item: String },
    /// `TransactionInProgressException`: a transaction with the same token is being applied.
    TransactionInProgress,
    /// `IdempotentParameterMismatchException`: the token was used with other parameters.
    IdempotentParameterMismatch,
    /// `ProvisionedThroughputExceededException` (400).
    ProvisionedThroughputExceeded,
    /// `ThrottlingException` (400).
    Throttling,
    /// `InternalServerError` (500).
    InternalServerError,
}

/// An armed fault and the requests it fires for.
#[derive(Debug, Clone)]
struct Rule {
    fault: Fault,
    /// Fires only for a request whose body contains this text.
    body_contains: Option<String>,
    /// Requests left to fire for; `None`: every request until disarmed.
    remaining: Option<usize>,
}

impl Rule {
    fn matches(&self, body: &[u8]) -> bool {
        match self.body_contains.as_deref().map(str::as_bytes) {
            None | Some(b"") => true,
            Some(needle) => body.windows(needle.len()).any(|w| w == needle),
        }
    }
}

/// A running proxy; dropping it stops the accept loop and every connection it serves.
pub struct FaultProxy {
    addr: std::net::SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    armed: Mutex<HashMap<String, Vec<Rule>>>,
    seen: Mutex<HashMap<String, usize>>,
    /// Operations whose request bodies are kept, and the bodies.
    recorded: Mutex<HashMap<String, Vec<Vec<u8>>>>,
    fired: AtomicUsize,
}

impl State {
    /// Counts a request for `op` and takes the fault it fires: the first rule, in the order
    /// armed, that matches the body (counted as fired when taken).
    fn on_request(&self, op: &str, body: &[u8]) -> Option<Fault> {
        *self.seen.lock().unwrap().entry(op.to_string()).or_default() += 1;
        if let Some(bodies) = self.recorded.lock().unwrap().get_mut(op) {
            bodies.push(body.to_vec());
        }
        let mut armed = self.armed.lock().unwrap();
        let rules = armed.get_mut(op)?;
        let i = rules.iter().position(|r| r.matches(body))?;
        let fault = rules[i].fault.clone();
        if let Some(left) = &mut rules[i].remaining {
            *left -= 1;
            if *left == 0 {
                rules.remove(i);
            }
        }
        self.fired.fetch_add(1, Ordering::SeqCst);
        Some(fault)
    }
}

impl FaultProxy {
    /// Listens on 127.0.0.1:0 and forwards to `upstream` (e.g. `http://127.0.0.1:8000`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let uri: Uri = upstream
            .parse()
            .unwrap_or_else(|e| panic!("fault proxy: upstream {upstream:?} is not a URL: {e}"));
        let authority = match (uri.scheme_str(), uri.authority()) {
            (Some("http"), Some(authority)) => authority.to_string(),
            _ => panic!("fault proxy: upstream must be plain http://host:port: {upstream}"),
        };
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fault proxy: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fault proxy: local address");
        let state = Arc::new(State::default());
        let task = tokio::spawn(accept_loop(listener, authority.into(), state.clone()));
        FaultProxy { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`: the endpoint to give the SDK client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Arms a one-shot fault for the next request for `operation` (e.g. `PutItem`). Faults armed
    /// for the same operation fire in the order they were armed, one per request.
    pub fn arm(&self, operation: &str, fault: Fault) {
        self.push(operation, fault, None, Some(1));
    }

    /// Arms a one-shot fault for the next request for `operation` whose body contains `text`
    /// (an item's key): it hits a chosen item, not whatever request comes next.
    pub fn arm_when(&self, operation: &str, text: &str, fault: Fault) {
        self.push(operation, fault, Some(text.to_string()), Some(1));
    }

    /// Arms `fault` for every request for `operation` until [`Self::disarm`].
    pub fn arm_always(&self, operation: &str, fault: Fault) {
        self.push(operation, fault, None, None);
    }

    /// Arms `fault` for every request for `operation` whose body contains `text`, until
    /// [`Self::disarm`].
    pub fn arm_always_when(&self, operation: &str, text: &str, fault: Fault) {
        self.push(operation, fault, Some(text.to_string()), None);
    }

    /// Pauses every request for `operation` whose body contains `text` (until disarmed) until
    /// the returned [`Release`] is opened.
    pub fn hold_always_when(&self, operation: &str, text: &str) -> Release {
        let (tx, rx) = tokio::sync::watch::channel(false);
        self.arm_always_when(operation, text, Fault::Pause(Paused(rx)));
        Release(tx)
    }

    /// Catches the next request for `operation` whose body contains `text` for
    /// [`Fault::LandLater`].
    pub fn land_later_when(&self, operation: &str, text: &str) -> Landing {
        let landing = Landing::new();
        self.arm_when(operation, text, Fault::LandLater(landing.clone()));
        landing
    }

    /// Removes every fault armed for `operation`, whether it fired or not.
    pub fn disarm(&self, operation: &str) {
        self.state.armed.lock().unwrap().remove(operation);
    }

    /// Removes the faults armed for `operation` with exactly this `text`, leaving the others.
    pub fn disarm_when(&self, operation: &str, text: &str) {
        if let Some(rules) = self.state.armed.lock().unwrap().get_mut(operation) {
            rules.retain(|r| r.body_contains.as_deref() != Some(text));
        }
    }

    fn push(&self, op: &str, fault: Fault, body_contains: Option<String>, times: Option<usize>) {
        self.state
            .armed
            .lock()
            .unwrap()
            .entry(op.to_string())
            .or_default()
            .push(Rule {
                fault,
                body_contains,
                remaining: times,
            });
    }

    /// Keeps the body of every later request for `operation`, for [`Self::bodies`].
    pub fn record(&self, operation: &str) {
        self.state
            .recorded
            .lock()
            .unwrap()
            .entry(operation.to_string())
            .or_default();
    }

    /// The bodies of the requests for `operation` since [`Self::record`], in arrival order.
    pub fn bodies(&self, operation: &str) -> Vec<Vec<u8>> {
        self.state
            .recorded
            .lock()
            .unwrap()
            .get(operation)
            .cloned()
            .unwrap_or_default()
    }

    /// Requests for `operation` that reached the proxy, faulted ones included.
    pub fn seen(&self, operation: &str) -> usize {
        self.state
            .seen
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Faults fired so far.
    pub fn fired(&self) -> usize {
        self.state.fired.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    /// Aborting the accept loop drops its `JoinSet`, which aborts every connection task too.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a client connection ended other than by the client closing it.
#[derive(Debug, thiserror::Error)]
enum Ended {
    /// A fault closed it on purpose: not worth a log line.
    #[error("a fault dropped the connection")]
    Dropped,
    #[error("reading the request body: {0}")]
    Body(#[source] hyper::Error),
    #[error("the request body did not arrive within {IO_TIMEOUT:?}")]
    BodyTimedOut,
}

/// Why a request could not be forwarded: answered with a 502.
#[derive(Debug, thiserror::Error)]
enum Upstream {
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("no response within {IO_TIMEOUT:?}")]
    TimedOut,
}

async fn accept_loop(listener: TcpListener, upstream: Arc<str>, state: Arc<State>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve(stream, upstream.clone(), state.clone()));
                }
                Err(e) => eprintln!("fault proxy: accept: {e}"),
            },
            // Reap finished connections so the set does not grow with every connection.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Serves one client connection, request after request (kept alive, as the SDK's pool reuses
/// it), until the client closes it, a fault drops it, or either side asks for `close`.
async fn serve(stream: TcpStream, upstream: Arc<str>, state: Arc<State>) {
    let service = service_fn(move |req| handle(req, upstream.clone(), state.clone()));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        let on_purpose = std::error::Error::source(&e)
            .is_some_and(|cause| matches!(cause.downcast_ref(), Some(Ended::Dropped)));
        if !on_purpose {
            eprintln!("fault proxy: client connection ended: {e}");
        }
    }
}

/// One request: counted, recorded, then faulted or forwarded. An `Err` makes hyper close the
/// client connection without an answer.
async fn handle(
    req: Request<Incoming>,
    upstream: Arc<str>,
    state: Arc<State>,
) -> Result<Answer, Ended> {
    let (head, body) = req.into_parts();
    let body = timeout(IO_TIMEOUT, body.collect())
        .await
        .map_err(|_| Ended::BodyTimedOut)?
        .map_err(Ended::Body)?
        .to_bytes();
    let op = operation(&head.headers);
    let fault = state.on_request(op, &body);
    match &fault {
        Some(Fault::ServerError) => {
            return Ok(dynamo_error(&DynamoError::InternalServerError, op, &body))
        }
        Some(Fault::Error(e)) => return Ok(dynamo_error(e, op, &body)),
        Some(Fault::DropRequest) => return Err(Ended::Dropped),
        Some(Fault::Delay(d)) => tokio::time::sleep(*d).await,
        Some(Fault::Pause(Paused(rx))) => {
            // A dropped `Release` lets the request go, as an opened one does.
            let _ = rx.clone().wait_for(|open| *open).await;
        }
        Some(Fault::LandLater(landing)) => {
            landing.0.caught.fetch_add(1, Ordering::SeqCst);
            // Its own task: it lands after this connection (and this future) is gone.
            let landing = landing.clone();
            let req = Request::from_parts(head, body);
            tokio::spawn(async move { landing.land(upstream, req).await });
            return Err(Ended::Dropped);
        }
        Some(Fault::DropResponseAfterCommit) | None => {}
    }
    let forwarded = timeout(
        IO_TIMEOUT,
        forward(&upstream, Request::from_parts(head, body)),
    )
    .await
    .unwrap_or(Err(Upstream::TimedOut));
    match forwarded {
        Ok(_) if matches!(fault, Some(Fault::DropResponseAfterCommit)) => Err(Ended::Dropped),
        Ok(answer) => Ok(answer),
        Err(e) => {
            let text = format!("fault proxy: upstream {upstream}: {e}");
            Ok(own_response(StatusCode::BAD_GATEWAY, "text/plain", text))
        }
    }
}

/// `x-amz-target: DynamoDB_20120810.PutItem` → `PutItem`.
fn operation(headers: &HeaderMap) -> &str {
    match headers.get("x-amz-target").and_then(|t| t.to_str().ok()) {
        Some(target) => target.rsplit('.').next().unwrap_or(target),
        None => "unknown",
    }
}

/// Sends one request on a fresh upstream connection, reads its whole response (re-framed by
/// `content-length`) and closes the connection.
async fn forward(upstream: &str, req: Request<Bytes>) -> Result<Answer, Upstream> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(Upstream::Connect)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let exchange = async move {
        let resp = sender.send_request(req.map(Full::new)).await?;
        let (mut head, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        head.headers.remove(TRANSFER_ENCODING);
        Ok::<_, hyper::Error>(Response::from_parts(head, Full::new(body)))
    };
    let (connection, answer) = tokio::join!(conn, exchange);
    let answer = answer?;
    connection?;
    Ok(answer)
}

/// One of DynamoDB's own error answers to a request for `operation` with `body`.
fn dynamo_error(error: &DynamoError, operation: &str, body: &[u8]) -> Answer {
    use serde_json::{json, Value};
    const DDB: &str = "com.amazonaws.dynamodb.v20120810#";
    let (status, kind, mut fields) = match error {
        DynamoError::TransactionConflict { item } | DynamoError::ItemThrottled { item } => {
            let reason = match error {
                DynamoError::TransactionConflict { .. } => {
                    ("TransactionConflict", "Transaction is ongoing for the item")
                }
                _ => (
                    "ThrottlingError",
                    "Throughput exceeds the current capacity for the item",
                ),
            };
            let items = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v["TransactItems"].as_array().cloned())
                .unwrap_or_default();
            let Some(hit) = items
                .iter()
                .position(|i| i.to_string().contains(item.as_str()))
            else {
                let text = format!("fault proxy: no transaction item contains {item:?}");
                return own_response(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", text);
            };
            let code = |i: usize| match i == hit {
                true => reason.0,
                false => "None",
            };
            let reasons: Vec<Value> = (0..items.len())
                .map(|i| match i == hit {
                    true => json!({"Code": code(i), "Message": reason.1}),
                    false => json!({"Code": code(i)}),
                })
                .collect();
            let codes: Vec<&str> = (0..items.len()).map(code).collect();
            let message = format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                codes.join(", ")
            );
            (
                400,
                format!("{DDB}TransactionCanceledException"),
                json!({"Message": message, "CancellationReasons": reasons}),
            )
        }
        DynamoError::TransactionInProgress => (
            400,
            format!("{DDB}TransactionInProgressException"),
            json!({"message": "Transaction is in progress"}),
        ),
        DynamoError::IdempotentParameterMismatch => (
            400,
            format!("{DDB}IdempotentParameterMismatchException"),
            json!({"message": "Request parameters do not match the original request for this token"}),
        ),
        DynamoError::ProvisionedThroughputExceeded => (
            400,
            format!("{DDB}ProvisionedThroughputExceededException"),
            json!({"message": "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}),
        ),
        DynamoError::Throttling => (
            400,
            "com.amazon.coral.availability#ThrottlingException".to_string(),
            json!({"message": "Throughput exceeds the current capacity of your table or index."}),
        ),
        DynamoError::InternalServerError => (
            500,
            format!("{DDB}InternalServerError"),
            json!({"message": format!("fault proxy: injected server error for {operation}")}),
        ),
    };
    fields["__type"] = Value::from(kind);
    let status = StatusCode::from_u16(status).expect("a valid status");
    own_response(status, "application/x-amz-json-1.0", fields.to_string())
}

/// A response of the proxy's own. A 502 closes the connection after it (the proxy gives up on
/// it); an injected DynamoDB error (400 or 500) keeps it alive, as DynamoDB's own errors do.
fn own_response(status: StatusCode, content_type: &'static str, body: String) -> Answer {
    static N: AtomicUsize = AtomicUsize::new(0);
    let request_id = format!("FAULTPROXY{:010}", N.fetch_add(1, Ordering::Relaxed));
    let mut answer = Response::builder()
        .status(status)
        .header(CONTENT_TYPE, content_type)
        .header("x-amzn-requestid", request_id);
    if status == StatusCode::BAD_GATEWAY {
        answer = answer.header(CONNECTION, "close");
    }
    answer
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}
