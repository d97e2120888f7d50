//! A Lambda HTTP response (API Gateway HTTP API v2 / function URL shape, as `lambda_http`
//! writes it) back into an `http::Response`, read with `lambda_http`'s own event types.

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use lambda_http::Body;

use super::Lost;

/// Parses the function's answer; a malformed one is [`Lost::BadResponse`].
pub(crate) fn parse(raw: &[u8]) -> Result<Response<Bytes>, Lost> {
    let bad = |why: String| Lost::BadResponse(why);
    // lambda_http writes every field, `cookies` included (empty or not), so the answer is read
    // once, straight into its own type.
    let r: ApiGatewayV2httpResponse =
        serde_json::from_slice(raw).map_err(|e| bad(e.to_string()))?;
    let body = match r.body {
        Some(Body::Text(text)) if r.is_base64_encoded => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(|e| bad(format!("body: {e}")))?,
        Some(body) => Bytes::copy_from_slice(body.as_ref()),
        None => Bytes::new(),
    };
    let mut resp = Response::new(body);
    let status = u16::try_from(r.status_code).unwrap_or(0);
    *resp.status_mut() = StatusCode::from_u16(status).map_err(|e| bad(e.to_string()))?;
    // A header in both maps is the same header: the multi-value one already has it all.
    let single = r
        .headers
        .iter()
        .filter(|(name, _)| !r.multi_value_headers.contains_key(*name));
    for (name, value) in r.multi_value_headers.iter().chain(single) {
        resp.headers_mut().append(name, value.clone());
    }
    for cookie in &r.cookies {
        let cookie = HeaderValue::from_str(cookie).map_err(|e| bad(e.to_string()))?;
        resp.headers_mut()
            .append(HeaderName::from_static("set-cookie"), cookie);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_headers_cookies_and_a_base64_body() {
        let raw = br#"{"statusCode":201,"headers":{"content-type":"application/json","x-one":"1"},
            "multiValueHeaders":{"x-two":["a","b"]},"cookies":["c=1"],
            "body":"eyJvayI6dHJ1ZX0=","isBase64Encoded":true}"#;
        let resp = parse(raw).unwrap();
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers()["x-one"], "1");
        let two: Vec<_> = resp.headers().get_all("x-two").iter().collect();
        assert_eq!(two, ["a", "b"]);
        assert_eq!(resp.headers()["set-cookie"], "c=1");
        assert_eq!(resp.body().as_ref(), br#"{"ok":true}"#);
    }

    #[test]
    fn a_body_that_is_not_a_response_is_lost() {
        assert!(matches!(
            parse(br#"{"hello":1}"#),
            Err(Lost::BadResponse(_))
        ));
    }
}
