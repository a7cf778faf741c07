//! RESP2, the Redis wire protocol, as far as the cluster layer needs it: commands go out as arrays
//! of bulk strings, and replies come back as one of five types. Pure: `encode` builds bytes and
//! `parse` reads one reply from the front of a buffer (or says more bytes are needed), so the
//! connection code only moves bytes and every framing rule is tested here.

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Nil,
    Int(i64),
    /// `+OK` and the like.
    Simple(String),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
    /// `-ERR …`: a reply, not a broken connection.
    Error(String),
}

impl Value {
    /// The value as text: bulk and simple strings; integers in decimal.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::Simple(s) => Some(s.clone()),
            Value::Int(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The value as an integer: integers, and strings that hold one.
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            Value::Bulk(_) | Value::Simple(_) => self.text()?.trim().parse().ok(),
            _ => None,
        }
    }

    /// The value as a float (scripts return fractions as strings: Lua numbers become integers).
    pub fn float(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Bulk(_) | Value::Simple(_) => self.text()?.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Value] {
        match self {
            Value::Array(items) => items,
            _ => &[],
        }
    }

    /// Pairs of a flat `[field, value, field, value, …]` array (what `HGETALL` answers).
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.items().chunks_exact(2).filter_map(|p| Some((p[0].text()?, p[1].text()?))).collect()
    }
}

/// A command as RESP2 bytes: `*N\r\n` then `$len\r\narg\r\n` per argument.
pub fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let size: usize = args.iter().map(|a| a.as_ref().len() + 16).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        let arg = arg.as_ref();
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The server sent something that is not RESP2: the connection cannot be trusted any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Replies larger than this are refused (nothing the cluster layer asks for comes near it), so a
/// confused peer cannot make the gateway allocate without bound.
const MAX_BULK: usize = 64 * 1024 * 1024;
const MAX_ITEMS: usize = 1 << 20;
const MAX_DEPTH: usize = 8;

/// Reads one reply from the front of `buf`: `Ok(Some((value, bytes used)))`, or `Ok(None)` when
/// `buf` holds only part of it.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("replies nested too deep".into()));
    }
    let Some(line_end) = find_crlf(buf, at + 1) else { return Ok(None) };
    let Some(&kind) = buf.get(at) else { return Ok(None) };
    let line = &buf[at + 1..line_end];
    let next = line_end + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    match kind {
        b'+' => Ok(Some((Value::Simple(text()), next))),
        b'-' => Ok(Some((Value::Error(text()), next))),
        b':' => Ok(Some((Value::Int(number(line)?), next))),
        b'$' => {
            let len = number(line)?;
            if len < 0 {
                return Ok(Some((Value::Nil, next)));
            }
            let len = usize::try_from(len).map_err(|_| ProtocolError("bad bulk length".into()))?;
            if len > MAX_BULK {
                return Err(ProtocolError(format!("a bulk string of {len} bytes")));
            }
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            if &buf[next + len..next + len + 2] != b"\r\n" {
                return Err(ProtocolError("a bulk string without its CRLF".into()));
            }
            Ok(Some((Value::Bulk(buf[next..next + len].to_vec()), next + len + 2)))
        }
        b'*' => {
            let n = number(line)?;
            if n < 0 {
                return Ok(Some((Value::Nil, next)));
            }
            let n = usize::try_from(n).map_err(|_| ProtocolError("bad array length".into()))?;
            if n > MAX_ITEMS {
                return Err(ProtocolError(format!("an array of {n} items")));
            }
            let mut items = Vec::with_capacity(n.min(1024));
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((v, used)) => {
                        items.push(v);
                        pos = used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(items), pos)))
        }
        other => Err(ProtocolError(format!("unknown reply type byte 0x{other:02x}"))),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| p + from)
}

fn number(line: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ProtocolError(format!("not a number: {:?}", String::from_utf8_lossy(line))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(encode(&["SET", "k", ""]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec());
        let binary: [&[u8]; 1] = [b"a\r\nb"];
        assert_eq!(encode(&binary), b"*1\r\n$4\r\na\r\nb\r\n".to_vec());
    }

    #[test]
    fn every_reply_type() {
        let one = |s: &[u8]| parse(s).unwrap().unwrap();
        assert_eq!(one(b"+OK\r\n"), (Value::Simple("OK".into()), 5));
        assert_eq!(one(b"-ERR no\r\n").0, Value::Error("ERR no".into()));
        assert_eq!(one(b":-42\r\n").0, Value::Int(-42));
        assert_eq!(one(b"$-1\r\n").0, Value::Nil);
        assert_eq!(one(b"*-1\r\n").0, Value::Nil);
        assert_eq!(one(b"$5\r\na\r\nbc\r\n").0, Value::Bulk(b"a\r\nbc".to_vec()));
        let (v, used) = one(b"*3\r\n$1\r\nx\r\n:7\r\n*1\r\n$-1\r\n+next\r\n");
        assert_eq!(v, Value::Array(vec![Value::Bulk(b"x".to_vec()), Value::Int(7), Value::Array(vec![Value::Nil])]));
        assert_eq!(used, 24, "stops at the end of the first reply");
    }

    #[test]
    fn a_partial_reply_asks_for_more_at_every_cut() {
        let whole = b"*2\r\n$3\r\nabc\r\n*1\r\n:12\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse(whole).unwrap().is_some());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse(b"?\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b"$3\r\nabcde\r\n").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
        let deep = "*1\r\n".repeat(20) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn values_read_as_text_numbers_and_pairs() {
        assert_eq!(Value::Bulk(b"12".to_vec()).int(), Some(12));
        assert_eq!(Value::Bulk(b"0.25".to_vec()).float(), Some(0.25));
        assert_eq!(Value::Int(3).text().as_deref(), Some("3"));
        assert_eq!(Value::Nil.int(), None);
        let h = Value::Array(vec![Value::Bulk(b"a".to_vec()), Value::Bulk(b"1".to_vec()), Value::Bulk(b"b".to_vec())]);
        assert_eq!(h.pairs(), vec![("a".to_string(), "1".to_string())]);
    }
}
