//! The functions as Lambda runs them: each function is a [`Pool`] of its binary's processes,
//! each polling its own [`runtime_api`] endpoint (so the emulator knows which process holds which
//! invocation) over one shared queue; [`Pool::invoke`] turns an `http::Request` into an event
//! with the one event builder, and [`front`] does the same for HTTP clients (Schemathesis). As
//! behind a function URL, a process that dies holding an invocation, or a function that reports
//! an error, answers 502; no answer within the timeout is [`Lost`] (the front answers 504).

pub mod front;
pub mod pool;
mod response;
pub mod runtime_api;

pub use front::Front;
pub use pool::{Pool, PoolSpec, SourceIp};

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A JSON answer of the emulator's own (a runtime API status, the front's 404 or 504, the 502
/// of a function that failed).
fn answer<B: From<Bytes>>(status: StatusCode, body: &'static str) -> Response<B> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(B::from(Bytes::from_static(body.as_bytes())))
        .expect("a valid response")
}

/// Listens on a free loopback port and serves every connection (HTTP/1.1) with `serve`, given
/// the peer's address; the task accepts until aborted. A connection's errors (a process that
/// dies closes its connections) are nothing to report.
async fn listen<F, Fut>(serve: F) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    F: Fn(SocketAddr, Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let accept = tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let serve = serve.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let reply = serve(peer, req);
                    async move { Ok::<_, Infallible>(reply.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, accept))
}

/// No HTTP answer from an invocation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Lost {
    /// The function did not answer within the invocation timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The function answered with something that is not a Lambda HTTP response.
    #[error("the function's answer is not a Lambda HTTP response: {0}")]
    BadResponse(String),
    /// The pool was stopped.
    #[error("the function `{0}` is stopped")]
    Stopped(String),
}

/// A pool that could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start `{binary}`: {source}")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("cannot open a listener for the runtime API: {0}")]
    Listen(std::io::Error),
    #[error("`{function}` did not start: {why}")]
    Init { function: String, why: String },
    #[error("`{function}` has no process {pid}")]
    NoSuchProcess { function: String, pid: u32 },
    #[error("cannot open the function log {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}
