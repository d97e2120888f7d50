//! A minimal HTTP/1.1 request parser for the bench's runtime-API emulator and its OpenAI
//! stand-in (both moving to `stress/`, on hyper). xtask's own probes use `ureq`.

use std::io::BufRead;

use crate::util::Result;

/// Header lines up to the blank line; names lower-cased.
pub fn read_headers(reader: &mut impl BufRead) -> Result<Vec<(String, String)>> {
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err("connection closed inside the header".into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(headers);
        }
        if headers.len() > 100 {
            return Err("too many header lines".into());
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
}

/// A header's value in a list from [`read_headers`] (`name` lower-case).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The `Content-Length`, if there is a valid one.
pub fn content_length(headers: &[(String, String)]) -> Option<usize> {
    header(headers, "content-length").and_then(|v| v.parse().ok())
}

/// The body as its headers frame it: chunked, else `Content-Length` bytes; `None` when
/// neither says. More than `max` bytes is an error, found before they are all read.
pub fn read_body(
    reader: &mut impl BufRead,
    headers: &[(String, String)],
    max: usize,
) -> Result<Option<Vec<u8>>> {
    if header(headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let body = read_chunked(reader, max)?;
        return Ok(Some(body));
    }
    let Some(len) = content_length(headers) else {
        return Ok(None);
    };
    if len > max {
        return Err(format!("a body of more than {max} bytes").into());
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    Ok(Some(body))
}

fn read_chunked(reader: &mut impl BufRead, max: usize) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        if size == 0 {
            // Trailers, up to the blank line.
            read_headers(reader)?;
            return Ok(body);
        }
        let start = body.len();
        if size > max - start {
            return Err(format!("a body of more than {max} bytes").into());
        }
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_body_refuses_more_than_its_limit_in_either_framing() {
        let framed = |head: &str, body: &[u8]| {
            let mut reader = body;
            let headers = read_headers(&mut head.as_bytes()).unwrap();
            (
                read_body(&mut reader, &headers, 4).map_err(|e| e.to_string()),
                headers,
            )
        };
        let (ok, _) = framed("Content-Length: 4\r\n\r\n", b"abcd");
        assert_eq!(ok.unwrap(), Some(b"abcd".to_vec()));
        let (long, _) = framed("Content-Length: 5\r\n\r\n", b"abcde");
        assert!(long.unwrap_err().contains("more than 4 bytes"));
        let (chunked, _) = framed(
            "Transfer-Encoding: chunked\r\n\r\n",
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        );
        assert!(chunked.unwrap_err().contains("more than 4 bytes"));
        let (none, headers) = framed("X-A: b\r\n\r\n", b"");
        assert_eq!((none.unwrap(), header(&headers, "x-a")), (None, Some("b")));
    }
}
