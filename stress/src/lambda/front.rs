//! An HTTP front for the pools: an API Gateway stand-in for clients that only speak HTTP.
//!
//! Each route is a path prefix and a function: a request whose path starts with the prefix is
//! invoked on that function with the prefix removed (so `/lambda-url/transfer/transfers` with
//! the prefix `/lambda-url/transfer` is `POST /transfers` to `transfer`), from the peer's
//! address. No route: 404; no answer in time: 504, as API Gateway answers.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::task::JoinHandle;

use super::pool::{Pool, SourceIp};
use super::{answer as plain, listen};

/// The running front; dropping it stops accepting connections.
pub struct Front {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

type Routes = Arc<Vec<(String, Arc<Pool>)>>;

impl Front {
    /// Serves `routes` (path prefix, function; the longest matching prefix wins, `""`
    /// matches every path) on a free loopback port.
    pub async fn start(routes: Vec<(String, Arc<Pool>)>) -> std::io::Result<Front> {
        let mut routes = routes;
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        let routes: Routes = Arc::new(routes);
        let (addr, accept) = listen(move |peer, req| {
            let routes = routes.clone();
            async move { serve(&routes, peer, req).await }
        })
        .await?;
        Ok(Front { addr, accept })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(routes: &Routes, peer: SocketAddr, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let Some((prefix, function)) = routes.iter().find(|(prefix, _)| {
        path.strip_prefix(prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.is_empty())
    }) else {
        return plain(StatusCode::NOT_FOUND, r#"{"message":"Not Found"}"#);
    };
    let rest = match &path[prefix.len()..] {
        "" => "/",
        rest => rest,
    };
    let uri = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_string(),
    };
    let (mut parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return plain(StatusCode::BAD_REQUEST, r#"{"message":"Bad Request"}"#);
    };
    parts.uri = match uri.parse::<Uri>() {
        Ok(uri) => uri,
        Err(_) => return plain(StatusCode::BAD_REQUEST, r#"{"message":"Bad Request"}"#),
    };
    parts.extensions.insert(SourceIp(peer.ip()));
    match function.invoke(Request::from_parts(parts, body)).await {
        Ok(resp) => resp.map(Full::new),
        Err(_) => plain(
            StatusCode::GATEWAY_TIMEOUT,
            r#"{"message":"Endpoint request timed out"}"#,
        ),
    }
}
