//! Incremental Server-Sent-Events scanner (WHATWG "event stream interpretation").
//!
//! The gateway relays upstream bytes to the client unchanged; this scanner only *observes*
//! them. It is fed each network chunk exactly as it arrived (any byte boundary: mid-line,
//! between `\r` and `\n`, inside a UTF-8 sequence) and reports every event the chunk completes.
//!
//! Performance: an event that lies entirely inside one chunk is dispatched borrowing from the
//! chunk (no copy). Only the incomplete tail of a chunk is carried over, and every byte is
//! examined a bounded number of times (once to find line ends, once more when its event is
//! dispatched), so a huge event arriving in tiny chunks costs linear time.
//!
//! [`write_event`] is the other direction: the one place events the gateway writes itself
//! (converted streams, stream error events) are framed.

use std::borrow::Cow;

use serde::Serialize;

/// One dispatched event. Borrowed from the chunk or from the scanner; copy out what you keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, `None` when absent or empty (the WHATWG default type "message").
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `'\n'`.
    pub data: &'a str,
}

/// Append one event, `event: <name>` (when named) and one `data:` line of compact JSON, to `out`.
/// Compact JSON has no raw newline, so one data line always carries the whole value.
pub fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &impl Serialize) {
    write_event_with(out, name, |out| {
        // Serialising plain structs and `Value`s cannot fail; an empty object keeps the stream
        // well-formed if it ever did.
        let at = out.len();
        if serde_json::to_writer(&mut *out, data).is_err() {
            out.truncate(at);
            out.extend_from_slice(b"{}");
        }
    });
}

/// [`write_event`] with data the caller writes itself (`protocol::json_write`): compact JSON,
/// with no raw newline.
pub fn write_event_with(out: &mut Vec<u8>, name: Option<&str>, data: impl FnOnce(&mut Vec<u8>)) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    data(out);
    out.extend_from_slice(b"\n\n");
}

/// Incremental SSE scanner; one per stream. Its flags and limit come first (`repr(C)`): an
/// event passed over whole (`skip_front`) reads only those, and with many streams open each
/// cache line an event touches is a miss (`proxy::relay::Relay`).
#[derive(Debug)]
#[repr(C)]
pub struct SseScanner {
    /// The next byte starts a new line.
    line_start: bool,
    /// The previous byte was a `\r` ending a line; a following `\n` belongs to it.
    after_cr: bool,
    /// The current event has a line other than a comment (so it must be carried / may dispatch).
    significant: bool,
    bom_done: bool,
    /// An event grew past `limit`: the stream is malformed and nothing more is scanned.
    overflowed: bool,
    /// How many bytes of a leading UTF-8 BOM have been matched (while `!bom_done`).
    bom_matched: usize,
    /// The largest event the scanner will hold (`limits.max_sse_event_bytes`).
    limit: usize,
    /// Raw bytes of the current event that began in an earlier chunk. Only ever holds bytes
    /// from the event's first field line onwards (leading comments/blank lines are dropped).
    carry: Vec<u8>,
    /// Scratch for joining several `data:` lines of one event.
    joined: String,
    /// Where the current event's lines are in the chunk being scanned (start, end without the
    /// line break), while the event began in that chunk: dispatch then reads its fields without
    /// searching for the line breaks a second time.
    lines: Vec<(usize, usize)>,
    /// Bytes examined, to prove linear work in tests.
    #[cfg(test)]
    work: u64,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
/// Line positions remembered per event; an event with more lines is split again at dispatch.
const MAX_LINES: usize = 32;
/// Carry/scratch capacity kept after a large event; above this the buffer is released.
const KEEP_CAPACITY: usize = 64 * 1024;

impl Default for SseScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl SseScanner {
    pub fn new() -> Self {
        Self {
            carry: Vec::new(),
            joined: String::new(),
            lines: Vec::new(),
            line_start: true,
            after_cr: false,
            significant: false,
            bom_matched: 0,
            bom_done: false,
            limit: usize::MAX,
            overflowed: false,
            #[cfg(test)]
            work: 0,
        }
    }

    /// A scanner that refuses events larger than `limit` bytes: such an event (an upstream that
    /// never ends a line, say) would otherwise be held in memory whole.
    pub fn with_limit(limit: usize) -> Self {
        Self { limit, ..Self::new() }
    }

    /// Whether an event grew past the limit (the scanner then ignores the rest of the stream).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Feed the next chunk exactly as it arrived from the network. Calls `on_event` for every
    /// event completed by this chunk, in order.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        if self.overflowed {
            return;
        }
        let mut rest = chunk;
        if !self.bom_done {
            while let Some((&b, tail)) = rest.split_first() {
                if BOM.get(self.bom_matched) == Some(&b) {
                    self.bom_matched += 1;
                    rest = tail;
                    if self.bom_matched == BOM.len() {
                        self.bom_done = true;
                        break;
                    }
                } else {
                    // Not a BOM: the bytes matched so far were ordinary stream content.
                    self.bom_done = true;
                    let matched = BOM.get(..self.bom_matched).unwrap_or_default();
                    self.scan(matched, &mut on_event);
                    break;
                }
            }
        }
        if !rest.is_empty() {
            self.scan(rest, &mut on_event);
        }
    }

    /// Bytes of an incomplete event still held (0 when the stream is at an event boundary,
    /// or when only comments / blank lines followed the last event).
    pub fn pending_bytes(&self) -> usize {
        let bom = if self.bom_done { 0 } else { self.bom_matched };
        self.carry.len() + bom
    }

    #[cfg(test)]
    pub(crate) fn work(&self) -> u64 {
        self.work
    }

    fn scan(&mut self, chunk: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        let between_events = self.carry.is_empty() && self.line_start && !self.after_cr && !self.significant;
        let chunk = if between_events { self.scan_plain(chunk, on_event) } else { chunk };
        // Where the current event starts in `chunk`; `None` while it starts in `carry`.
        // Invariant: `carry` is non-empty only while `significant`.
        let mut start: Option<usize> = if self.carry.is_empty() { Some(0) } else { None };
        self.lines.clear();
        // Where the line being scanned began in `chunk`.
        let mut line_from = 0;
        let n = chunk.len();
        let mut i = 0;
        while i < n {
            let b = chunk[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    i += 1;
                    if !self.significant {
                        start = Some(i);
                        self.lines.clear();
                    }
                    continue;
                }
            }
            if self.line_start {
                if b == b'\n' || b == b'\r' {
                    // A blank line: dispatch the event, if it has any field line.
                    i += 1;
                    self.after_cr = b == b'\r';
                    if self.significant {
                        self.significant = false;
                        match start {
                            Some(s) => {
                                let bytes = chunk.get(s..i).unwrap_or_default();
                                if bytes.len() > self.limit {
                                    self.overflowed = true;
                                    self.carry = Vec::new();
                                    return;
                                }
                                #[cfg(test)]
                                {
                                    self.work += bytes.len() as u64;
                                }
                                if self.lines.len() > MAX_LINES {
                                    dispatch(bytes, &mut self.joined, on_event);
                                } else {
                                    let lines = self.lines.iter().filter_map(|&(a, b)| chunk.get(a..b));
                                    emit(lines, &mut self.joined, on_event);
                                }
                            }
                            None => {
                                self.carry.extend_from_slice(chunk.get(..i).unwrap_or_default());
                                if self.carry.len() > self.limit {
                                    self.overflowed = true;
                                    self.carry = Vec::new();
                                    return;
                                }
                                #[cfg(test)]
                                {
                                    self.work += self.carry.len() as u64;
                                }
                                dispatch(&self.carry, &mut self.joined, on_event);
                                self.carry.clear();
                                if self.carry.capacity() > KEEP_CAPACITY {
                                    self.carry = Vec::new();
                                }
                            }
                        }
                        if self.joined.capacity() > KEEP_CAPACITY {
                            self.joined = String::new();
                        }
                    }
                    start = Some(i);
                    self.lines.clear();
                    continue;
                }
                self.line_start = false;
                line_from = i;
                if b != b':' {
                    self.significant = true;
                }
                i += 1;
                #[cfg(test)]
                {
                    self.work += 1;
                }
                continue;
            }
            // Inside a line: jump to its end.
            let hay = chunk.get(i..).unwrap_or_default();
            match find_eol(hay) {
                Some(p) => {
                    #[cfg(test)]
                    {
                        self.work += p as u64 + 1;
                    }
                    let e = i + p;
                    self.after_cr = chunk[e] == b'\r';
                    self.line_start = true;
                    i = e + 1;
                    if !self.significant {
                        // A finished comment line: nothing to keep.
                        start = Some(i);
                        self.lines.clear();
                    } else if start.is_some() && chunk.get(line_from) != Some(&b':') {
                        // Past the cap the event is split again at dispatch, so an event of a
                        // million short lines costs no more memory than its bytes.
                        if self.lines.len() <= MAX_LINES {
                            self.lines.push((line_from, e));
                        }
                    }
                }
                None => {
                    #[cfg(test)]
                    {
                        self.work += hay.len() as u64;
                    }
                    i = n;
                }
            }
        }
        if self.significant {
            match start {
                Some(s) => {
                    // `carry` is empty here: it was empty at the start or emptied by a dispatch.
                    self.carry.clear();
                    self.carry.extend_from_slice(chunk.get(s..).unwrap_or_default());
                }
                None => self.carry.extend_from_slice(chunk),
            }
            if self.carry.len() > self.limit {
                self.overflowed = true;
                self.carry = Vec::new();
            }
        } else {
            self.carry.clear();
        }
    }
}

impl SseScanner {
    /// The events at the front of `chunk` that each begin with `head` (an `event:` line and the
    /// start of its data line), have the usual shape (a single data line, every line ended by
    /// `\n` alone) and whose data after the head `known` accepts, counted and passed over without
    /// being read, while the scanner is between events; returns how many and the rest of the
    /// chunk, for [`feed`](Self::feed). For a caller that knows what such an event means from
    /// those bytes alone: the scanner is left as if it had read them (between events).
    pub fn skip_front<'c>(
        &self,
        mut chunk: &'c [u8],
        head: &[u8],
        mut known: impl FnMut(&[u8]) -> bool,
    ) -> (usize, &'c [u8]) {
        let mut skipped = 0;
        if !self.bom_done || self.overflowed || !self.line_start || self.significant {
            return (0, chunk);
        }
        while let Some((len, data)) = event_with_head(chunk, head) {
            if len > self.limit || !known(data) {
                break;
            }
            skipped += 1;
            chunk = chunk.get(len..).unwrap_or_default();
        }
        (skipped, chunk)
    }
}

/// The event at the front of `chunk` if it begins with `head` and its data line is the one
/// after the event line, then the blank line: its length and the data after the head.
fn event_with_head<'c>(chunk: &'c [u8], head: &[u8]) -> Option<(usize, &'c [u8])> {
    let rest = chunk.strip_prefix(head)?;
    let end = plain_line_end(rest)?;
    (rest.get(end + 1) == Some(&b'\n')).then(|| (head.len() + end + 2, rest.get(..end).unwrap_or_default()))
}

impl SseScanner {
    /// Dispatch the events at the front of `chunk` that have the shape every API streams, while
    /// the scanner is between events: found with two line searches each, instead of the general
    /// walk's state per line (most of the scanner's cost per event). Returns the rest of the
    /// chunk, from the first event of any other shape or cut by the chunk's end, for that walk.
    fn scan_plain<'c>(&mut self, mut chunk: &'c [u8], on_event: &mut impl FnMut(SseEvent<'_>)) -> &'c [u8] {
        while let Some(plain) = PlainEvent::at_front(chunk, self.limit) {
            #[cfg(test)]
            {
                self.work += plain.len as u64;
            }
            deliver(plain.name, utf8_lossy(plain.data), on_event);
            chunk = chunk.get(plain.len..).unwrap_or_default();
        }
        chunk
    }
}

/// An event of the usual shape: an optional `event:` line, then one `data:` line, then the blank
/// line, every line ended by the same break, `\n` or `\r\n` (the Gemini API's). Any other event
/// (a comment, another field, a second data line, a lone `\r`, breaks of both kinds) is left to
/// the general walk, which reads all of them.
struct PlainEvent<'a> {
    name: Option<&'a [u8]>,
    data: &'a [u8],
    /// Its bytes, through the blank line.
    len: usize,
}

impl<'a> PlainEvent<'a> {
    fn at_front(chunk: &'a [u8], limit: usize) -> Option<Self> {
        let first_end = find_eol(chunk)?;
        let brk: &[u8] = match chunk.get(first_end..) {
            Some([b'\n', ..]) => b"\n",
            Some([b'\r', b'\n', ..]) => b"\r\n",
            _ => return None,
        };
        let first = chunk.get(..first_end)?;
        let (name, data_line, data_end) = match first.strip_prefix(b"event:") {
            Some(name) => {
                let rest = chunk.get(first_end + brk.len()..)?;
                let end = line_end(rest, brk)?;
                (Some(field_value(name)), rest.get(..end)?, first_end + brk.len() + end)
            }
            None => (None, first, first_end),
        };
        let data = data_line.strip_prefix(b"data:")?;
        // The data line's break, then the blank line.
        let blank = data_end + brk.len();
        if chunk.get(blank..blank + brk.len()) != Some(brk) {
            return None;
        }
        // An event over the limit is refused by the general walk.
        let len = blank + brk.len();
        (len <= limit).then_some(PlainEvent { name, data: field_value(data), len })
    }
}

/// Where the line at the front of `bytes` ends, if it ends with `brk` (`\n` or `\r\n`).
fn line_end(bytes: &[u8], brk: &[u8]) -> Option<usize> {
    find_eol(bytes).filter(|&end| bytes.get(end..end + brk.len()) == Some(brk))
}

/// Where the line at the front of `bytes` ends, if it ends with a `\n` that has no `\r` before it.
fn plain_line_end(bytes: &[u8]) -> Option<usize> {
    line_end(bytes, b"\n")
}

/// A field's value: what follows its colon, less one leading space.
fn field_value(after_colon: &[u8]) -> &[u8] {
    after_colon.strip_prefix(b" ").unwrap_or(after_colon)
}

/// Hand an event to the caller: its name (`None` when absent or empty) as text, and its data.
fn deliver(name: Option<&[u8]>, data: Cow<'_, str>, on_event: &mut impl FnMut(SseEvent<'_>)) {
    let name = name.filter(|name| !name.is_empty()).map(event_name);
    on_event(SseEvent { event: name.as_deref(), data: &data });
}

/// Parse one complete event (its lines through the terminating blank line) and dispatch it.
fn dispatch(bytes: &[u8], joined: &mut String, on_event: &mut impl FnMut(SseEvent<'_>)) {
    let mut pos = 0;
    let lines = std::iter::from_fn(|| {
        let rest = bytes.get(pos..).filter(|r| !r.is_empty())?;
        let (line, next) = match find_eol(rest) {
            Some(p) => {
                let mut next = pos + p + 1;
                if rest.get(p) == Some(&b'\r') && bytes.get(next) == Some(&b'\n') {
                    next += 1;
                }
                (rest.get(..p).unwrap_or_default(), next)
            }
            None => (rest, bytes.len()),
        };
        pos = next;
        Some(line)
    });
    emit(lines, joined, on_event);
}

/// Dispatch the event made of these lines (without their line breaks; blank and comment lines
/// are passed over).
fn emit<'a>(lines: impl Iterator<Item = &'a [u8]>, joined: &mut String, on_event: &mut impl FnMut(SseEvent<'_>)) {
    let mut event: Option<&[u8]> = None;
    let mut first_data: Option<&[u8]> = None;
    let mut multi = false;
    for line in lines {
        if line.is_empty() || line.first() == Some(&b':') {
            continue;
        }
        let (name, value) = match line.iter().position(|&c| c == b':') {
            Some(c) => (line.get(..c).unwrap_or_default(), field_value(line.get(c + 1..).unwrap_or_default())),
            None => (line, &b""[..]),
        };
        match name {
            b"event" => event = Some(value),
            b"data" => match first_data {
                None => first_data = Some(value),
                Some(first) => {
                    if !multi {
                        multi = true;
                        joined.clear();
                        joined.push_str(&String::from_utf8_lossy(first));
                    }
                    joined.push('\n');
                    joined.push_str(&String::from_utf8_lossy(value));
                }
            },
            _ => {}
        }
    }
    let Some(first) = first_data else {
        return;
    };
    let data: Cow<'_, str> = if multi { Cow::Borrowed(joined.as_str()) } else { utf8_lossy(first) };
    deliver(event, data, on_event);
}

/// An event's name as text. The names the protocols use are matched as bytes, which costs less
/// than checking them as UTF-8 (a named event is most of an Anthropic or Responses stream); any
/// other name is checked as data is.
fn event_name(bytes: &[u8]) -> Cow<'_, str> {
    match KNOWN_EVENT_NAMES.iter().find(|name| name.as_bytes() == bytes) {
        Some(name) => Cow::Borrowed(name),
        None => utf8_lossy(bytes),
    }
}

/// The event names of the Anthropic Messages and OpenAI Responses streams, the most frequent
/// first (Chat and Gemini streams name no events).
const KNOWN_EVENT_NAMES: [&str; 20] = [
    "content_block_delta",
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.reasoning_summary_text.delta",
    "content_block_start",
    "content_block_stop",
    "message_start",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "response.created",
    "response.in_progress",
    "response.completed",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.done",
    "response.function_call_arguments.done",
];

/// `String::from_utf8_lossy`, with a SIMD check first ([`lenient::utf8`]): valid text (nearly
/// every event) is borrowed without the byte-at-a-time walk of the lossy conversion (visible per
/// event in a streams profile).
///
/// [`lenient::utf8`]: super::lenient::utf8
fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match super::lenient::utf8(bytes) {
        Some(text) => Cow::Borrowed(text),
        None => String::from_utf8_lossy(bytes),
    }
}

/// Position of the first `\n` or `\r` (SIMD: a data line is most of an event's bytes).
fn find_eol(hay: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', hay)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub(crate) mod tests {
    use super::*;

    /// An owned copy of an event, for comparing sequences.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Ev {
        event: Option<String>,
        data: String,
    }

    fn ev(event: Option<&str>, data: &str) -> Ev {
        Ev { event: event.map(str::to_owned), data: data.to_owned() }
    }

    fn feed_all(s: &mut SseScanner, chunks: &[&[u8]]) -> Vec<Ev> {
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |e| out.push(Ev { event: e.event.map(str::to_owned), data: e.data.to_owned() }));
        }
        out
    }

    fn parse_whole(input: &[u8]) -> (Vec<Ev>, usize) {
        let mut s = SseScanner::new();
        let evs = feed_all(&mut s, &[input]);
        (evs, s.pending_bytes())
    }

    fn parse_chunks(input: &[u8], sizes: &mut dyn FnMut() -> usize) -> (Vec<Ev>, usize) {
        let mut s = SseScanner::new();
        let mut out = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let k = sizes().clamp(1, rest.len());
            let (a, b) = rest.split_at(k);
            out.extend(feed_all(&mut s, &[a]));
            rest = b;
        }
        (out, s.pending_bytes())
    }

    /// Deterministic xorshift, so random splitting needs no extra dev-dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
    }

    pub(crate) const ANTHROPIC: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n",
        "\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n",
        "\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, \\u00e9t\u{e9} \u{1F600}\"}}\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"world!\\n\"}}\n",
        "\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n",
        "\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"San Fra\"}}\n",
        "\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ncisco, CA\\\"}\"}}\n",
        "\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n",
        "\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n",
        "\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n",
        "\n",
    );

    pub(crate) const OPENAI: &str = concat!(
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Bonjour\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" \u{e0} tous \u{1F44B}\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_DdmO9pD3xa9XTPNJ32zg2hcA\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        ": OPENROUTER PROCESSING\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[],\"usage\":{\"prompt_tokens\":82,\"completion_tokens\":17,\"total_tokens\":99,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n",
        "\n",
        "data: [DONE]\n",
        "\n",
    );

    pub(crate) const RESPONSES: &str = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"error\":null,\"incomplete_details\":null,\"instructions\":\"You are a helpful assistant.\",\"max_output_tokens\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[],\"parallel_tool_calls\":true,\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":true,\"temperature\":1.0,\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":null,\"user\":null,\"metadata\":{}}}\n",
        "\n",
        "event: response.in_progress\n",
        "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"error\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[],\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],\"usage\":null,\"metadata\":{}}}\n",
        "\n",
        "event: response.output_item.added\n",
        "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n",
        "\n",
        "event: response.content_part.added\n",
        "data: {\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n",
        "\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n",
        "\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"delta\":\" th\u{e9}re \u{1F30D}\"}\n",
        "\n",
        "event: response.output_text.done\n",
        "data: {\"type\":\"response.output_text.done\",\"sequence_number\":6,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"text\":\"Hi th\u{e9}re \u{1F30D}\"}\n",
        "\n",
        "event: response.content_part.done\n",
        "data: {\"type\":\"response.content_part.done\",\"sequence_number\":7,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"Hi th\u{e9}re \u{1F30D}\",\"annotations\":[]}}\n",
        "\n",
        "event: response.output_item.done\n",
        "data: {\"type\":\"response.output_item.done\",\"sequence_number\":8,\"output_index\":0,\"item\":{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi th\u{e9}re \u{1F30D}\",\"annotations\":[]}]}}\n",
        "\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"sequence_number\":9,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"completed\",\"error\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi th\u{e9}re \u{1F30D}\",\"annotations\":[]}]}],\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],\"usage\":{\"input_tokens\":37,\"output_tokens\":11,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":48},\"metadata\":{}}}\n",
        "\n",
    );

    fn transcripts() -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("anthropic", ANTHROPIC.to_owned()),
            ("openai", OPENAI.to_owned()),
            ("responses", RESPONSES.to_owned()),
        ];
        // The same streams with CRLF and CR line endings, a BOM, and keep-alive comments.
        for (name, t) in v.clone() {
            v.push((name, t.replace('\n', "\r\n")));
            v.push((name, t.replace('\n', "\r")));
            v.push((name, format!("\u{feff}: keep-alive\n\n{}", t.replace("\n\n", "\n: ping\n\n"))));
        }
        v
    }

    #[test]
    fn an_event_over_the_limit_stops_the_scanner_and_frees_its_memory() {
        // One line that never ends, in many chunks: held up to the limit, then refused.
        let mut scanner = SseScanner::with_limit(1024);
        let mut events = 0;
        scanner.feed(b"data: ", |_| events += 1);
        for _ in 0..100 {
            scanner.feed(&[b'x'; 100], |_| events += 1);
            assert!(scanner.pending_bytes() <= 1024);
        }
        assert!(scanner.overflowed());
        assert_eq!(scanner.pending_bytes(), 0);
        scanner.feed(b"\n\ndata: {}\n\n", |_| events += 1);
        assert_eq!(events, 0, "nothing is dispatched after the overflow");

        // An over-limit event inside one chunk, and one that completes in a later chunk.
        let big = format!("data: {}\n\n", "y".repeat(2000));
        let mut scanner = SseScanner::with_limit(1024);
        scanner.feed(big.as_bytes(), |_| events += 1);
        assert!(scanner.overflowed());
        let mut scanner = SseScanner::with_limit(1024);
        scanner.feed(&big.as_bytes()[..900], |_| events += 1);
        assert!(!scanner.overflowed());
        scanner.feed(&big.as_bytes()[900..], |_| events += 1);
        assert!(scanner.overflowed());
        assert_eq!(events, 0);

        // Events under the limit pass, however they are split.
        let mut scanner = SseScanner::with_limit(1024);
        let small = format!("data: {}\n\n", "z".repeat(1000));
        for piece in small.as_bytes().chunks(7) {
            scanner.feed(piece, |_| events += 1);
        }
        assert_eq!(events, 1);
        assert!(!scanner.overflowed());
    }

    #[test]
    fn table() {
        type Case = (&'static str, &'static [u8], &'static [(Option<&'static str>, &'static str)], bool);
        let cases: &[Case] = &[
            ("lf", b"data: a\n\n", &[(None, "a")], false),
            ("crlf", b"data: a\r\n\r\n", &[(None, "a")], false),
            ("cr", b"data: a\r\r", &[(None, "a")], false),
            ("mixed endings", b"data: a\r\ndata: b\rdata: c\n\r\n", &[(None, "a\nb\nc")], false),
            ("lf then crlf blank", b"data: a\n\r\n", &[(None, "a")], false),
            ("event name", b"event: ping\ndata: {}\n\n", &[(Some("ping"), "{}")], false),
            ("last event name wins", b"event: a\nevent: b\ndata: x\n\n", &[(Some("b"), "x")], false),
            ("empty event name is default", b"event:\ndata: x\n\n", &[(None, "x")], false),
            ("no space", b"event:ping\ndata:{\"a\":1}\n\n", &[(Some("ping"), "{\"a\":1}")], false),
            ("only one space removed", b"data:  two\n\n", &[(None, " two")], false),
            ("multi-line data", b"data: a\ndata:\ndata: c\n\n", &[(None, "a\n\nc")], false),
            ("field without colon", b"data\n\n", &[(None, "")], false),
            ("empty data", b"data:\n\n", &[(None, "")], false),
            ("colon in value", b"data: a: b\n\n", &[(None, "a: b")], false),
            ("comments ignored", b": hi\ndata: a\n: mid\ndata: b\n\n", &[(None, "a\nb")], false),
            ("comment alone never dispatches", b": keep-alive\n\n:\n\n", &[], false),
            ("no data no dispatch", b"event: ping\n\n", &[], false),
            ("unknown fields ignored", b"id: 7\nretry: 100\nfoo: bar\ndata: x\n\n", &[(None, "x")], false),
            ("field name is case sensitive", b"Data: x\n\n", &[], false),
            (
                "event name reset after dispatch",
                b"event: a\ndata: 1\n\ndata: 2\n\n",
                &[(Some("a"), "1"), (None, "2")],
                false,
            ),
            ("extra blank lines", b"\n\n\r\ndata: 1\n\n\n\ndata: 2\n\n", &[(None, "1"), (None, "2")], false),
            ("bom", b"\xEF\xBB\xBFdata: a\n\n", &[(None, "a")], false),
            ("only first bom stripped", b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n", &[], false),
            ("missing blank line", b"data: a\n\ndata: b\n", &[(None, "a")], true),
            ("cut mid line", b"data: a\n\ndata: {\"x\":", &[(None, "a")], true),
            ("cut after event name", b"event: x\n", &[], true),
            ("trailing comment is clean", b"data: a\n\n: ping\n", &[(None, "a")], false),
            ("trailing partial comment is clean", b"data: a\n\n: pi", &[(None, "a")], false),
            ("invalid utf8 is lossy", b"data: a\xFFb\n\n", &[(None, "a\u{FFFD}b")], false),
        ];
        for (name, input, want, pending) in cases {
            let want: Vec<Ev> = want.iter().map(|(e, d)| ev(*e, d)).collect();
            let (got, p) = parse_whole(input);
            assert_eq!(got, want, "{name}");
            assert_eq!(p > 0, *pending, "{name}: pending {p}");
            // Every split into two chunks and byte-by-byte feeding agree.
            for k in 0..=input.len() {
                let (a, b) = input.split_at(k);
                let mut s = SseScanner::new();
                assert_eq!(feed_all(&mut s, &[a, b]), want, "{name} split at {k}");
                assert_eq!(s.pending_bytes() > 0, *pending, "{name} split at {k}");
            }
            let (got, p) = parse_chunks(input, &mut || 1);
            assert_eq!(got, want, "{name} bytewise");
            assert_eq!(p > 0, *pending, "{name} bytewise");
        }
    }

    #[test]
    fn pending_bytes_counts_held_event() {
        let mut s = SseScanner::new();
        s.feed(b"data: 1\n\nevent: x\ndata: 2", |_| {});
        assert_eq!(s.pending_bytes(), "event: x\ndata: 2".len());
        s.feed(b"3\n", |_| {});
        assert_eq!(s.pending_bytes(), "event: x\ndata: 23\n".len());
        let mut got = Vec::new();
        s.feed(b"\n", |e| got.push(e.data.to_owned()));
        assert_eq!(got, ["23"]);
        assert_eq!(s.pending_bytes(), 0);
        // A partial BOM at the very start is held too.
        let mut s = SseScanner::new();
        s.feed(b"\xEF\xBB", |_| {});
        assert_eq!(s.pending_bytes(), 2);
        s.feed(b"\xBF", |_| {});
        assert_eq!(s.pending_bytes(), 0);
    }

    #[test]
    fn an_event_of_many_lines_reads_the_same_and_keeps_few_positions() {
        let mut bytes = b"event: big\n".to_vec();
        for i in 0..(MAX_LINES * 4) {
            bytes.extend_from_slice(format!("data: {i}\n: note\n").as_bytes());
        }
        bytes.extend_from_slice(b"\n");
        let mut whole = SseScanner::new();
        let got = feed_all(&mut whole, &[&bytes]);
        let want: Vec<String> = (0..MAX_LINES * 4).map(|i| i.to_string()).collect();
        assert_eq!(got, [ev(Some("big"), &want.join("\n"))]);
        assert!(whole.lines.len() <= MAX_LINES + 1, "{}", whole.lines.len());
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(feed_all(&mut SseScanner::new(), &bytewise), got);
    }

    #[test]
    fn bom_split_and_false_bom() {
        let input = b"\xEF\xBB\xBFdata: a\n\n";
        for k in 0..=input.len() {
            for j in k..=input.len() {
                let mut s = SseScanner::new();
                let got = feed_all(&mut s, &[&input[..k], &input[k..j], &input[j..]]);
                assert_eq!(got, vec![ev(None, "a")], "split {k} {j}");
            }
        }
        // A stream starting with a BOM prefix that is not a BOM keeps those bytes.
        let mut s = SseScanner::new();
        // A BOM after the start is part of the field name, so neither event has a data field.
        let got = feed_all(&mut s, &[b"\xEF", b"\xBBdata: a\n\n\xEF\xBB\xBFdata: b\n\ndata: c\n\n"]);
        assert_eq!(got, vec![ev(None, "c")]);
        let (got, _) = parse_whole(b"\xEFdata: a\n\ndata: b\n\n");
        assert_eq!(got, vec![ev(None, "b")]);
    }

    #[test]
    fn event_names_read_as_their_text_whether_known_or_not() {
        let mut names: Vec<Vec<u8>> = KNOWN_EVENT_NAMES.iter().map(|n| n.as_bytes().to_vec()).collect();
        for known in KNOWN_EVENT_NAMES {
            // Near misses: one byte short, one more, a different last byte, another case.
            names.push(known.as_bytes()[..known.len() - 1].to_vec());
            names.push([known.as_bytes(), b"x"].concat());
            names.push([&known.as_bytes()[..known.len() - 1], b"\xff"].concat());
            names.push(known.to_uppercase().into_bytes());
        }
        names.extend([b"message_st\xc3\xa1rt".to_vec(), b"\xe9vent".to_vec(), b"custom".to_vec()]);
        for name in names {
            let stream = [b"event: ", &name[..], b"\ndata: {}\n\n"].concat();
            let (got, _) = parse_whole(&stream);
            assert_eq!(got, [ev(Some(&String::from_utf8_lossy(&name)), "{}")], "{name:?}");
        }
    }

    #[test]
    fn crlf_split_between_cr_and_lf() {
        let mut s = SseScanner::new();
        let got = feed_all(&mut s, &[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r"]);
        assert_eq!(got, vec![ev(None, "a"), ev(None, "b")]);
        assert_eq!(s.pending_bytes(), 0);
        // "\r" then "\n" in the next chunk is one line ending, not a blank line.
        let mut s = SseScanner::new();
        let got = feed_all(&mut s, &[b"data: a\r", b"\ndata: b\r\n", b"\r\n"]);
        assert_eq!(got, vec![ev(None, "a\nb")]);
    }

    #[test]
    fn utf8_split_inside_sequence() {
        let input = "data: h\u{e9}llo \u{1F600}\n\n".as_bytes();
        for k in 0..=input.len() {
            let mut s = SseScanner::new();
            let got = feed_all(&mut s, &[&input[..k], &input[k..]]);
            assert_eq!(got, vec![ev(None, "h\u{e9}llo \u{1F600}")], "split {k}");
        }
    }

    #[test]
    fn whole_chunk_events_borrow_from_chunk() {
        let chunk = b"event: a\ndata: xyz\n\ndata: 1\n\n";
        let range = chunk.as_ptr_range();
        let mut s = SseScanner::new();
        let mut n = 0;
        s.feed(chunk, |e| {
            assert!(range.contains(&e.data.as_ptr()), "data copied");
            if let Some(name) = e.event {
                assert!(range.contains(&name.as_ptr()), "event name copied");
            }
            n += 1;
        });
        assert_eq!(n, 2);
        assert_eq!(s.pending_bytes(), 0);
    }

    #[test]
    fn transcripts_split_at_every_boundary() {
        for (name, t) in transcripts() {
            let input = t.as_bytes();
            let (whole, p) = parse_whole(input);
            assert_eq!(p, 0, "{name}");
            assert!(whole.len() >= 8, "{name}: {}", whole.len());
            for k in 0..=input.len() {
                let mut s = SseScanner::new();
                let got = feed_all(&mut s, &[&input[..k], &input[k..]]);
                assert_eq!(got, whole, "{name} split at {k}");
                assert_eq!(s.pending_bytes(), 0);
            }
        }
    }

    #[test]
    fn transcripts_random_chunks() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for (name, t) in transcripts() {
            let input = t.as_bytes();
            let (whole, _) = parse_whole(input);
            for round in 0..200 {
                let max = [2u64, 7, 40, 300, 2000][round % 5];
                let (got, p) = parse_chunks(input, &mut || (rng.next() % max) as usize + 1);
                assert_eq!(got, whole, "{name} round {round}");
                assert_eq!(p, 0);
            }
        }
    }

    #[test]
    fn transcripts_parse_as_expected() {
        let (evs, _) = parse_whole(ANTHROPIC.as_bytes());
        assert_eq!(evs.len(), 13);
        assert_eq!(evs[0].event.as_deref(), Some("message_start"));
        assert_eq!(evs[12], ev(Some("message_stop"), "{\"type\":\"message_stop\"}"));
        let (evs, _) = parse_whole(OPENAI.as_bytes());
        assert_eq!(evs.len(), 8);
        assert_eq!(evs[7], ev(None, "[DONE]"));
        let (evs, _) = parse_whole(RESPONSES.as_bytes());
        assert_eq!(evs.len(), 10);
        assert_eq!(evs[9].event.as_deref(), Some("response.completed"));
    }

    #[test]
    fn huge_event_in_small_chunks_is_linear() {
        let payload = "x".repeat(1 << 20);
        let input = format!(": hi\nevent: big\ndata: {payload}\ndata: {payload}\n\ndata: after\n\n");
        for chunk in [1usize, 16] {
            let mut s = SseScanner::new();
            let mut got = Vec::new();
            for c in input.as_bytes().chunks(chunk) {
                s.feed(c, |e| got.push((e.event.map(str::to_owned), e.data.len())));
            }
            assert_eq!(got, vec![(Some("big".to_owned()), 2 * payload.len() + 1), (None, 5)]);
            assert_eq!(s.pending_bytes(), 0);
            // Each byte is examined at most ~twice (line scan, then the dispatch parse).
            assert!(s.work() <= 2 * input.len() as u64 + 64, "work {} for {}", s.work(), input.len());
        }
    }

    /// Pieces of streams: events of the usual shape and every near miss of it (other line
    /// endings, comments, other fields, several data lines, no data, no colon, a cut line).
    const PIECES: [&[u8]; 24] = [
        b"event: content_block_delta\ndata: {\"a\":1}\n\n",
        b"data: a\r:\r\n",
        b"data: {\"c\":3}\r\n\r\n",
        b"event: a\r\ndata: b\r\n\n",
        b"event: a\r\ndata: b\n\r\n",
        b"data: {\"b\":2}\n\n",
        b"event:ping\ndata:x\n\n",
        b"event: \ndata: unnamed\n\n",
        b"event: a\r\ndata: b\r\n\r\n",
        b"event: a\ndata: b\r\n\n",
        b"event: a\ndata: b\n\r\n",
        b"data: a\rdata: b\n\n",
        b"data: one\ndata: two\n\n",
        b"event: only-a-name\n\n",
        b"data\n\n",
        b": keep-alive\n\n",
        b"event: a\n: between\ndata: b\n\n",
        b"id: 7\ndata: y\n\n",
        b"event: a\nData: x\n\n",
        b"data: caf\xC3\xA9 \xFF\n\n",
        b"event: cut\ndata: {\"x\":",
        b"\n",
        b"\r",
        b"data:  two spaces\n\n",
    ];

    fn ends_object(rest: &[u8]) -> bool {
        rest.last() == Some(&b'}')
    }

    /// Events with a head to pass over (see `skip_front`), and their near misses.
    const HEAD: &[u8] = b"event: delta\ndata: {\"t\":\"delta\"";
    const HEADED_PIECES: [&[u8]; 9] = [
        b"event: delta\ndata: {\"t\":\"delta\",\"i\":0}\n\n",
        b"event: delta\ndata: {\"t\":\"delta\",\"x\":\"\xFF\"}\n\n",
        b"event: delta\ndata: {\"t\":\"delta\"}\n\n",
        b"event: delta\ndata: {\"t\":\"delta\"} \n\n",
        b"event: delta\r\ndata: {\"t\":\"delta\"}\r\n\r\n",
        b"event: delta\ndata: {\"t\":\"delta\"}\r\n\n",
        b"event: delta\ndata: {\"t\":\"delta\"}\ndata: }\n\n",
        b"event: delta\ndata: {\"t\":\"delta\"",
        b"event: delta\ndata: {\"t\":\"delta\"}\n: comment\n\n",
    ];

    #[test]
    fn skip_front_passes_over_whole_headed_events_only_between_events() {
        let one = HEADED_PIECES[0];
        let two = [one, one].concat();
        let s = SseScanner::new();
        // Before the first byte a BOM may still be coming: nothing is passed over.
        assert_eq!(s.skip_front(&two, HEAD, ends_object), (0, &two[..]));
        let mut s = SseScanner::new();
        feed_all(&mut s, &[b"data: x\n\n"]);
        assert_eq!(s.skip_front(&two, HEAD, ends_object), (2, &b""[..]));
        let tail = [one, b"data: y\n\n"].concat();
        assert_eq!(s.skip_front(&tail, HEAD, ends_object), (1, &b"data: y\n\n"[..]));
        // The caller is shown each event's data after the head, and what it refuses is left.
        let mut shown = Vec::new();
        let refused = s.skip_front(&two, HEAD, |data| {
            shown.push(data.to_vec());
            shown.len() < 2
        });
        assert_eq!(refused, (1, one));
        assert_eq!(shown, [b",\"i\":0}".to_vec(), b",\"i\":0}".to_vec()]);
        // Inside an event, at a line's start but with the event begun, nothing is passed over;
        // nor inside a line (a comment's, which begins no event).
        let mut inside = SseScanner::new();
        feed_all(&mut inside, &[b"data: x\n\nevent: a\n"]);
        assert_eq!(inside.skip_front(&two, HEAD, ends_object).0, 0);
        let mut inside = SseScanner::new();
        feed_all(&mut inside, &[b"data: x\n\n:"]);
        assert_eq!(inside.skip_front(&two, HEAD, ends_object).0, 0);
        // Nor once the scanner refused an event over its limit (it reads nothing more).
        let mut refused = SseScanner::with_limit(one.len());
        feed_all(&mut refused, &[&[&b"data: "[..], &[b'x'; 200], b"\n\n"].concat()]);
        assert!(refused.overflowed());
        assert_eq!(refused.skip_front(&two, HEAD, ends_object).0, 0);
        // Over the limit, nothing is: the general walk refuses the event.
        let mut s = SseScanner::with_limit(one.len() - 1);
        feed_all(&mut s, &[b"data: x\n\n"]);
        assert_eq!(s.skip_front(&two, HEAD, ends_object).0, 0);
        let mut s = SseScanner::with_limit(one.len());
        feed_all(&mut s, &[b"data: x\n\n"]);
        assert_eq!(s.skip_front(&two, HEAD, ends_object).0, 2);
    }

    proptest::proptest! {
        /// Events read from whole chunks (where the usual shape takes the short way) are the
        /// events read a byte at a time (where it never can), with the same bytes left pending
        /// and the same refusal of an event over the limit.
        #[test]
        #[allow(clippy::indexing_slicing)]
        fn events_read_from_whole_chunks_are_those_read_byte_by_byte(
            picks in proptest::collection::vec(0..PIECES.len(), 0..16),
            cuts in proptest::collection::vec(1usize..80, 1..6),
            limit in proptest::prop_oneof![proptest::strategy::Just(usize::MAX), 10usize..60],
        ) {
            let input: Vec<u8> = picks.iter().flat_map(|&i| PIECES[i].iter().copied()).collect();
            let read = |sizes: &mut dyn FnMut() -> usize| {
                let mut scanner = SseScanner::with_limit(limit);
                let mut events = Vec::new();
                let mut rest = &input[..];
                while !rest.is_empty() {
                    let (piece, tail) = rest.split_at(sizes().clamp(1, rest.len()));
                    events.extend(feed_all(&mut scanner, &[piece]));
                    rest = tail;
                }
                (events, scanner.pending_bytes(), scanner.overflowed())
            };
            let bytewise = read(&mut || 1);
            proptest::prop_assert_eq!(&read(&mut || usize::MAX), &bytewise);
            let mut next = cuts.iter().cycle();
            proptest::prop_assert_eq!(&read(&mut || next.next().copied().unwrap_or(1)), &bytewise);
        }

        /// Reading what `skip_front` leaves gives the events the scanner reads from the whole
        /// chunk, less some of those that begin with the head and whose data ends with the byte
        /// asked for, counted instead; and the scanner ends in the same state.
        #[test]
        #[allow(clippy::indexing_slicing)]
        fn events_passed_over_are_whole_headed_events_and_the_rest_read_the_same(
            picks in proptest::collection::vec((proptest::bool::ANY, 0..PIECES.len().max(HEADED_PIECES.len())), 0..16),
            cuts in proptest::collection::vec(1usize..120, 1..6),
            limit in proptest::prop_oneof![proptest::strategy::Just(usize::MAX), 30usize..60],
        ) {
            let input: Vec<u8> = picks
                .iter()
                .flat_map(|&(headed, i)| if headed { HEADED_PIECES[i % HEADED_PIECES.len()] } else { PIECES[i % PIECES.len()] }.iter().copied())
                .collect();
            let (mut whole, mut skipping) = (SseScanner::with_limit(limit), SseScanner::with_limit(limit));
            let mut next = cuts.iter().cycle();
            let mut rest = &input[..];
            while !rest.is_empty() {
                let (piece, tail) = rest.split_at(next.next().copied().unwrap_or(1).clamp(1, rest.len()));
                rest = tail;
                let read = feed_all(&mut whole, &[piece]);
                let (passed, after) = skipping.skip_front(piece, HEAD, ends_object);
                let (over, left) = read.split_at(passed);
                for event in over {
                    proptest::prop_assert!(event.data.starts_with("{\"t\":\"delta\"") && event.data.ends_with('}'), "{:?}", event);
                }
                // Each passed over whole, framed in the usual shape: a name and one data line.
                let consumed = String::from_utf8_lossy(&piece[..piece.len() - after.len()]);
                let framed: String = over.iter().map(|e| format!("event: delta\ndata: {}\n\n", e.data)).collect();
                proptest::prop_assert_eq!(consumed, framed);
                proptest::prop_assert_eq!(&feed_all(&mut skipping, &[after])[..], left);
            }
            proptest::prop_assert_eq!(
                (whole.pending_bytes(), whole.overflowed()),
                (skipping.pending_bytes(), skipping.overflowed())
            );
        }
    }

    #[test]
    fn the_usual_shape_is_read_without_the_general_walk() {
        // The general walk counts each line start as work besides the bytes; the short way
        // counts an event's bytes once.
        let input = b"event: content_block_delta\ndata: {\"a\":1}\n\ndata: [DONE]\n\n";
        let mut s = SseScanner::new();
        let got = feed_all(&mut s, &[input]);
        assert_eq!(got, vec![ev(Some("content_block_delta"), "{\"a\":1}"), ev(None, "[DONE]")]);
        assert_eq!(s.work(), input.len() as u64);
        // The same with `\r\n` breaks throughout (the Gemini API's); mixed breaks are walked.
        let input = b"data: {\"a\":1}\r\n\r\nevent: e\r\ndata: 2\r\n\r\n";
        let mut s = SseScanner::new();
        assert_eq!(feed_all(&mut s, &[input]), vec![ev(None, "{\"a\":1}"), ev(Some("e"), "2")]);
        assert_eq!(s.work(), input.len() as u64);
        let input = b"data: 1\r\n\n";
        let mut s = SseScanner::new();
        assert_eq!(feed_all(&mut s, &[input]), vec![ev(None, "1")]);
        assert!(s.work() > input.len() as u64);
        // Behind an event of another shape, the rest of the chunk is walked.
        let mut s = SseScanner::new();
        let input = b": hi\ndata: 1\n\ndata: 2\n\n";
        assert_eq!(feed_all(&mut s, &[input]), vec![ev(None, "1"), ev(None, "2")]);
        assert!(s.work() > input.len() as u64);
    }

    #[test]
    fn find_eol_matches_naive() {
        let mut rng = Rng(12345);
        for _ in 0..2000 {
            let len = (rng.next() % 40) as usize;
            let v: Vec<u8> = (0..len)
                .map(|_| match rng.next() % 10 {
                    0 => b'\n',
                    1 => b'\r',
                    2 => 0x0b,
                    3 => 0x8d,
                    4 => 0x0c,
                    _ => (rng.next() % 256) as u8,
                })
                .collect();
            let naive = v.iter().position(|&b| b == b'\n' || b == b'\r');
            assert_eq!(find_eol(&v), naive, "{v:?}");
        }
    }
}
