//! A Lambda HTTP response (API Gateway HTTP API v2 / function URL shape, as `lambda_http`
//! writes it) back into an `http::Response`.

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use serde::Deserialize;

use super::Lost;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LambdaResponse {
    status_code: u16,
    #[serde(default)]
    headers: BTreeMap<String, OneOrMany>,
    #[serde(default)]
    multi_value_headers: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    cookies: Vec<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    is_base64_encoded: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Parses the function's answer; a malformed one is [`Lost::BadResponse`].
pub(crate) fn parse(raw: &[u8]) -> Result<Response<Bytes>, Lost> {
    let bad = |why: String| Lost::BadResponse(why);
    let r: LambdaResponse = serde_json::from_slice(raw).map_err(|e| bad(e.to_string()))?;
    let body = match r.body {
        None => Bytes::new(),
        Some(text) if r.is_base64_encoded => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(|e| bad(format!("body: {e}")))?,
        Some(text) => Bytes::from(text),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(r.status_code).map_err(|e| bad(e.to_string()))?;
    let headers = resp.headers_mut();
    let mut add = |name: &str, value: &str| -> Result<(), Lost> {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?;
        headers.append(name, value);
        Ok(())
    };
    for (name, values) in &r.multi_value_headers {
        for value in values {
            add(name, value)?;
        }
    }
    for (name, value) in &r.headers {
        // A header in both maps is the same header: the multi-value one already has it all.
        if r.multi_value_headers.contains_key(name) {
            continue;
        }
        match value {
            OneOrMany::One(value) => add(name, value)?,
            OneOrMany::Many(values) => {
                for value in values {
                    add(name, value)?;
                }
            }
        }
    }
    for cookie in &r.cookies {
        add("set-cookie", cookie)?;
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
