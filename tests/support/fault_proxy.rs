//! A fault-injecting HTTP/1.1 proxy between the AWS SDK and DynamoDB Local.
//!
//! DynamoDB's hard cases are not errors DynamoDB returns but answers that never arrive: a write
//! that committed while its response was lost looks, to the caller, exactly like a write that
//! never happened. DynamoDB Local never loses anything, so this proxy does it on demand: tests arm
//! [`Fault`]s per operation (the part after the `.` in `x-amz-target`), once or until disarmed,
//! for any request or only for one whose body names a chosen item, and point the SDK at
//! [`FaultProxy::endpoint`]. DynamoDB Local also never conflicts, throttles or fails, so the
//! proxy answers with DynamoDB's own error bodies ([`DynamoError`]) on demand: the SDK parses
//! them exactly as it parses DynamoDB's.
//!
//! Connections: the client side keeps alive (the SDK's pool reuses a connection for many
//! requests), but every forwarded request gets a *fresh upstream connection* that is closed after
//! its response. A pooled upstream connection that went stale would force the proxy to guess
//! whether a request it wrote reached DynamoDB — and replay it or not — which is exactly the
//! ambiguity tests want to control. One local connect per request is cheap; the only uncertain
//! outcomes are the ones a fault injects.
//!
//! Bytes are forwarded verbatim (the `Host` header keeps the proxy's address, so the SigV4
//! signature stays intact); only the framing (`content-length` or `transfer-encoding: chunked`)
//! is parsed, to know where a message ends. `Expect: 100-continue` is not supported: the SDK does
//! not send it for DynamoDB's small JSON bodies.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

/// How long an idle client connection may wait for its next request. Longer than the tests run
/// between two requests; only there so no connection task outlives a hung test for ever.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest wait for the next bytes of a message already begun, and for an upstream connect.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// A message head larger than this is not DynamoDB traffic.
const MAX_HEAD: usize = 64 * 1024;

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
    /// Answer with one of DynamoDB's own errors, as DynamoDB sends it (JSON protocol: status,
    /// `x-amzn-requestid`, a body with `__type` and a message), without forwarding: nothing is
    /// committed. The client connection stays open.
    Error(DynamoError),
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
        match &self.body_contains {
            None => true,
            Some(needle) => find(body, needle.as_bytes(), 0).is_some(),
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
    /// Counts a request for `op` and takes the fault it fires, if one is armed: the first rule,
    /// in the order armed, that matches the body. A fault counts as fired when taken: what it
    /// does next cannot fail in a way that un-fires it.
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
        let authority = upstream
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("fault proxy: upstream must be plain http: {upstream}"))
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fault proxy: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fault proxy: local address");
        let state = Arc::new(State::default());
        let task = tokio::spawn(accept_loop(listener, authority, state.clone()));
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

    /// Arms a one-shot fault for the next request for `operation` whose body contains `text` (an
    /// item's key, an expression value): the fault hits a chosen item, not whatever request for
    /// the operation happens to come next.
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

    /// Removes every fault armed for `operation`, whether it fired or not.
    pub fn disarm(&self, operation: &str) {
        self.state.armed.lock().unwrap().remove(operation);
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

async fn accept_loop(listener: TcpListener, upstream: String, state: Arc<State>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (upstream, state) = (upstream.clone(), state.clone());
                    conns.spawn(async move {
                        if let Err(e) = serve(Peer::new(stream), &upstream, &state).await {
                            eprintln!("fault proxy: client connection ended: {e}");
                        }
                    });
                }
                Err(e) => eprintln!("fault proxy: accept: {e}"),
            },
            // Reap finished connections so the set does not grow with every connection.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Serves one client connection, request after request, until the client closes it, a fault
/// drops it, or either side asks for `connection: close`.
async fn serve(mut client: Peer, upstream: &str, state: &State) -> io::Result<()> {
    while let Some(req) = client.read_message(IDLE_TIMEOUT, false).await? {
        let fault = state.on_request(req.operation(), req.body());
        let answer = match &fault {
            Some(Fault::ServerError) => Some(dynamo_error(
                &DynamoError::InternalServerError,
                req.operation(),
                req.body(),
            )),
            Some(Fault::Error(e)) => Some(dynamo_error(e, req.operation(), req.body())),
            _ => None,
        };
        if let Some(answer) = answer {
            client.stream.write_all(&answer).await?;
            if req.close {
                return Ok(());
            }
            continue;
        }
        match fault {
            // Returning drops the stream: the client sees the connection close.
            Some(Fault::DropRequest) => return Ok(()),
            Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
            _ => {}
        }
        let resp = match forward(upstream, &req.raw).await {
            Ok(resp) => resp,
            Err(e) => {
                let body = format!("fault proxy: upstream {upstream}: {e}");
                client
                    .stream
                    .write_all(&response(502, "text/plain", &body))
                    .await?;
                return Ok(());
            }
        };
        if matches!(fault, Some(Fault::DropResponseAfterCommit)) {
            return Ok(());
        }
        client.stream.write_all(&resp.raw).await?;
        if req.close || resp.close {
            return Ok(());
        }
    }
    Ok(())
}

/// Sends one request on a fresh upstream connection and reads its whole response.
async fn forward(upstream: &str, raw: &[u8]) -> io::Result<Message> {
    let stream = timeout(IO_TIMEOUT, TcpStream::connect(upstream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    let mut peer = Peer::new(stream);
    peer.stream.write_all(raw).await?;
    peer.read_message(IO_TIMEOUT, true)
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before responding"))
}

/// One of DynamoDB's own error answers to a request for `operation` with `body`.
fn dynamo_error(error: &DynamoError, operation: &str, body: &[u8]) -> Vec<u8> {
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
                return response(500, "text/plain", &text);
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
    response(status, "application/x-amz-json-1.0", &fields.to_string())
}

/// A response of the proxy's own. A 502 closes the connection after it (the proxy gives up on
/// it); an injected DynamoDB error (400 or 500) keeps it alive, as DynamoDB's own errors do.
fn response(status: u16, content_type: &str, body: &str) -> Vec<u8> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let (reason, connection) = match status {
        400 => ("Bad Request", "keep-alive"),
        500 => ("Internal Server Error", "keep-alive"),
        _ => ("Bad Gateway", "close"),
    };
    let request_id = N.fetch_add(1, Ordering::Relaxed);
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\nx-amzn-requestid: FAULTPROXY{request_id:010}\r\ncontent-length: {}\r\nconnection: {connection}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One complete HTTP/1.1 message, as received.
struct Message {
    raw: Vec<u8>,
    /// Where the body starts in `raw`.
    body_start: usize,
    /// The `x-amz-target` header, if any.
    target: Option<String>,
    /// The sender will not send another message on this connection.
    close: bool,
}

impl Message {
    /// The body as sent (chunk framing included, if any: tests only look for text in it).
    fn body(&self) -> &[u8] {
        &self.raw[self.body_start..]
    }

    /// `DynamoDB_20120810.PutItem` → `PutItem`.
    fn operation(&self) -> &str {
        match &self.target {
            Some(t) => t.rsplit('.').next().unwrap_or(t),
            None => "unknown",
        }
    }
}

/// A connection and the bytes read from it but not yet consumed.
struct Peer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// Reads more bytes; `Ok(false)` on end of stream.
    async fn fill(&mut self, wait: Duration) -> io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = timeout(wait, self.stream.read(&mut chunk))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "read timed out"))??;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// The next complete message, or `None` if the peer closed cleanly between messages.
    /// `first_wait` bounds the wait for its first byte; later bytes get [`IO_TIMEOUT`]. A response
    /// framed by neither length nor chunking runs to the end of the stream.
    async fn read_message(
        &mut self,
        first_wait: Duration,
        is_response: bool,
    ) -> io::Result<Option<Message>> {
        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "closed mid-message");
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n", 0) {
                break i + 4;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
            }
            let wait = if self.buf.is_empty() {
                first_wait
            } else {
                IO_TIMEOUT
            };
            if !self.fill(wait).await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(eof())
                };
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let header = |name: &str| {
            head.lines().skip(1).find_map(|line| {
                let (k, v) = line.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        let has = |name: &str, token: &str| {
            header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        };
        let mut close = has("connection", "close") || head.starts_with("HTTP/1.0");
        let end = if has("transfer-encoding", "chunked") {
            loop {
                if let Some(end) = chunked_end(&self.buf, head_end) {
                    break end;
                }
                if !self.fill(IO_TIMEOUT).await? {
                    return Err(eof());
                }
            }
        } else if let Some(len) = header("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad content-length"))?;
            while self.buf.len() < head_end + len {
                if !self.fill(IO_TIMEOUT).await? {
                    return Err(eof());
                }
            }
            head_end + len
        } else if is_response {
            close = true;
            while self.fill(IO_TIMEOUT).await? {}
            self.buf.len()
        } else {
            head_end
        };
        let raw = self.buf.drain(..end).collect();
        Ok(Some(Message {
            raw,
            body_start: head_end,
            target: header("x-amz-target"),
            close,
        }))
    }
}

/// Where a chunked body starting at `start` ends (after its trailers), if it is complete.
fn chunked_end(buf: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let line_end = find(buf, b"\r\n", pos)?;
        let line = std::str::from_utf8(&buf[pos..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            // Trailer lines, then an empty line.
            loop {
                let line_end = find(buf, b"\r\n", pos)?;
                let empty = line_end == pos;
                pos = line_end + 2;
                if empty {
                    return Some(pos);
                }
            }
        }
        pos += size + 2;
        if buf.len() < pos {
            return None;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}
