//! A Gemini upstream's SSE stream rewritten as the JSON-array stream, for a Gemini client that
//! asked `streamGenerateContent` without `alt=sse` while its endpoint is a Gemini one: each
//! `data:` payload is already a whole `GenerateContentResponse`, so the chunks go into the
//! array exactly as the upstream wrote them (nothing is decoded, nothing lost). The gateway
//! asks the upstream for SSE because SSE is the stream form it can watch event by event.

use crate::convert::ir::ErrorBody;
use crate::protocol::sse::SseEvent;

/// `[` before the first chunk, `,\r\n` between chunks (as Google writes them), `]` at the end;
/// an error is the array's last element.
#[derive(Debug, Default)]
pub struct JsonArrayReframe {
    opened: bool,
    done: bool,
}

impl JsonArrayReframe {
    pub fn new() -> Self {
        Self::default()
    }

    fn separator(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.opened { b",\r\n" } else { b"[" });
        self.opened = true;
    }

    /// One upstream event: its data, unchanged, as the next element.
    pub fn event(&mut self, event: &SseEvent<'_>, out: &mut Vec<u8>) {
        let data = event.data.trim();
        if self.done || data.is_empty() {
            return;
        }
        self.separator(out);
        out.extend_from_slice(data.as_bytes());
    }

    /// The upstream ended cleanly: close the array.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if !self.opened {
            out.push(b'[');
        }
        out.push(b']');
        self.done = true;
    }

    /// End the array with an error element.
    pub fn fail(&mut self, error: &ErrorBody, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.separator(out);
        out.extend_from_slice(&super::super::encode_error(error));
        out.push(b']');
        self.done = true;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::sse::SseScanner;

    fn run(sse: &str, fail: Option<&str>) -> String {
        let mut r = JsonArrayReframe::new();
        let mut out = Vec::new();
        let mut scanner = SseScanner::new();
        // Split at every byte: the scanner reassembles the events.
        for b in sse.as_bytes() {
            scanner.feed(std::slice::from_ref(b), |e| r.event(&e, &mut out));
        }
        match fail {
            None => r.finish(&mut out),
            Some(m) => {
                r.fail(&ErrorBody { kind: ErrorKind::BadGateway, message: m.into(), code: None, param: None }, &mut out)
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_upstreams_chunks_become_the_array_elements_unchanged() {
        let a = r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}],"responseId":"r"}"#;
        let b = r#"{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3}}"#;
        let out = run(&format!("data: {a}\r\n\r\ndata: {b}\r\n\r\n"), None);
        assert_eq!(out, format!("[{a},\r\n{b}]"));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[1]["candidates"][0]["finishReason"], "STOP");
    }

    #[test]
    fn an_error_is_the_last_element_and_an_empty_stream_is_an_empty_array() {
        let a = r#"{"candidates":[{"content":{"parts":[{"text":"x"}]}}]}"#;
        let out = run(&format!("data: {a}\n\n"), Some("cut"));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[1]["error"]["status"], "UNAVAILABLE", "{out}");
        assert_eq!(v[1]["error"]["message"], "cut");
        assert_eq!(run("", None), "[]");
    }
}
