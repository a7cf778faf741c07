//! A validating scan of a JSON object that finds chosen top-level members without parsing the
//! rest. The pass-through path needs a request body's `model`, `stream` and session fields, and
//! must refuse a body that is not JSON, but has no use for the thousands of strings in between:
//! serde_json, skipping them one by one, spent ~8 instructions per byte of a Claude Code turn.
//!
//! Strings are found 64 bytes at a time: quotes, backslashes and control characters become bit
//! masks (SSE2 on x86-64, a plain loop elsewhere), escapes are resolved on the masks, and quotes
//! then alternate between opening and closing a string. Everything between two strings
//! (punctuation, numbers, literals, whitespace) is walked byte by byte through a JSON grammar.
//! A request body is mostly strings, so the walk touches little of it.
//!
//! The scan answers only what it is sure of. `None` means "not shown valid here": the caller then
//! asks serde_json, which gives the exact error, or reads what the scan declines to decide
//! itself (a top-level key written with an escape, a wanted member given twice, deep nesting).
//! `Some` promises that serde_json accepts the text as JSON.

use std::ops::Range;

/// Whether a JSON string must escape this byte to hold it: a quote, a backslash, a control
/// character. Text without one is its own JSON string body.
pub fn escaped_in_json_string(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// How many bytes from the start of `bytes` need no escape in a JSON string (see
/// [`escaped_in_json_string`]): the length of a plain run of string text, 16 bytes at a time.
pub fn plain_run(bytes: &[u8]) -> usize {
    plain_end(bytes, 0)
}

/// Where the first byte at or after `from` that needs an escape sits in `bytes` (`bytes.len()`
/// when none does). Lanes of 16 bytes are read from `from` on; the last few bytes are read as the
/// end of the slice's last 16, with the lane's earlier bytes (already judged, or before `from`)
/// masked off, so that a short string or a string's end costs one lane rather than a byte loop.
pub fn plain_end(bytes: &[u8], from: usize) -> usize {
    let mut at = from;
    #[cfg(target_arch = "x86_64")]
    {
        while let Some(lane) = lane_at(bytes, at) {
            let escaped = escaped_lane(lane);
            if escaped != 0 {
                return at + escaped.trailing_zeros() as usize;
            }
            at += 16;
        }
        let tail = bytes.len().saturating_sub(at);
        if tail > 0
            && let Some(lane) = bytes.len().checked_sub(16).and_then(|start| lane_at(bytes, start))
        {
            let escaped = escaped_lane(lane) >> (16 - tail);
            return if escaped == 0 { bytes.len() } else { at + escaped.trailing_zeros() as usize };
        }
    }
    let rest = bytes.get(at..).unwrap_or_default();
    at + rest.iter().position(|&b| escaped_in_json_string(b)).unwrap_or(rest.len())
}

#[cfg(target_arch = "x86_64")]
fn lane_at(bytes: &[u8], at: usize) -> Option<&[u8; 16]> {
    bytes.get(at..at.checked_add(16)?).and_then(|lane| <&[u8; 16]>::try_from(lane).ok())
}

/// The bytes of a 16-byte lane that [`escaped_in_json_string`] holds (bit `i` = byte `i`).
#[cfg(target_arch = "x86_64")]
fn escaped_lane(lane: &[u8; 16]) -> u32 {
    use safe_arch::{cmp_eq_mask_i8_m128i, load_unaligned_m128i, max_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let v = load_unaligned_m128i(lane);
    let last_control = set_splat_i8_m128i(0x1f);
    let quote = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'"' as i8));
    let backslash = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'\\' as i8));
    let control = cmp_eq_mask_i8_m128i(max_u8_m128i(v, last_control), last_control);
    (move_mask_i8_m128i(quote) | move_mask_i8_m128i(backslash) | move_mask_i8_m128i(control)) as u32 & 0xffff
}

/// Nesting deeper than this is left to serde_json, whose own limit is 128.
const MAX_DEPTH: usize = 64;

/// Where the values of the `wanted` top-level members sit in `text` (each span covers the value
/// exactly, quotes and brackets included), when `text` is a JSON object; `None` when it is not,
/// or when the scan cannot tell (see the module's notes).
pub fn top_level_members<const N: usize>(text: &str, wanted: [&str; N]) -> Option<[Option<Range<usize>>; N]> {
    let bytes = text.as_bytes();
    let mut grammar = Grammar { state: TOP, depth: 0, returns: [DONE; MAX_DEPTH] };
    let mut members =
        Members { bytes, wanted, found: std::array::from_fn(|_| None), key_start: 0, value_start: 0, member: None };
    let mut escape_carry = false;
    let mut in_string = false;
    let mut gap_start = 0;
    let mut base = 0;
    while base < bytes.len() {
        let padded;
        let block: &[u8; 64] = match bytes.get(base..base + 64) {
            Some(full) => full.try_into().ok()?,
            None => {
                // Spaces hold no quote, backslash or control character.
                let mut tail = [b' '; 64];
                tail[..bytes.len() - base].copy_from_slice(&bytes[base..]);
                padded = tail;
                &padded
            }
        };
        let found = masks(block);
        let mut quotes = found.quote;
        if found.backslash != 0 || escape_carry {
            quotes &= !escaped(bytes, base, found.backslash, &mut escape_carry)?;
        }
        if found.control != 0 {
            let inside = prefix_xor(quotes) ^ if in_string { !0 } else { 0 };
            if found.control & inside != 0 {
                return None;
            }
        }
        while quotes != 0 {
            let at = base + quotes.trailing_zeros() as usize;
            quotes &= quotes - 1;
            if in_string {
                gap_start = at + 1;
            } else {
                grammar.between_strings(&mut members, gap_start, at)?;
                grammar.step(&mut members, STRING, at, at)?;
            }
            in_string = !in_string;
        }
        base += 64;
    }
    if in_string {
        return None;
    }
    grammar.between_strings(&mut members, gap_start, bytes.len())?;
    (grammar.state == DONE).then_some(members.found)
}

/// Which bytes of a block are quotes, backslashes and control characters (bit `i` = byte `i`).
#[derive(Debug, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    control: u64,
}

#[cfg(target_arch = "x86_64")]
fn masks(block: &[u8; 64]) -> Masks {
    use safe_arch::{cmp_eq_mask_i8_m128i, load_unaligned_m128i, max_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let quote = set_splat_i8_m128i(b'"' as i8);
    let backslash = set_splat_i8_m128i(b'\\' as i8);
    let last_control = set_splat_i8_m128i(0x1f);
    let mut out = Masks { quote: 0, backslash: 0, control: 0 };
    for (i, lane) in block.chunks_exact(16).enumerate() {
        let Ok(lane) = <&[u8; 16]>::try_from(lane) else { continue };
        let v = load_unaligned_m128i(lane);
        let bits = |m| u64::from(move_mask_i8_m128i(m) as u16) << (16 * i);
        out.quote |= bits(cmp_eq_mask_i8_m128i(v, quote));
        out.backslash |= bits(cmp_eq_mask_i8_m128i(v, backslash));
        // A byte is at most 0x1f exactly when max(byte, 0x1f) is 0x1f.
        out.control |= bits(cmp_eq_mask_i8_m128i(max_u8_m128i(v, last_control), last_control));
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn masks(block: &[u8; 64]) -> Masks {
    masks_bytewise(block)
}

/// [`masks`] a byte at a time: the other architectures' version, and the SIMD one's reference.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn masks_bytewise(block: &[u8; 64]) -> Masks {
    let mut out = Masks { quote: 0, backslash: 0, control: 0 };
    for (i, &b) in block.iter().enumerate() {
        out.quote |= u64::from(b == b'"') << i;
        out.backslash |= u64::from(b == b'\\') << i;
        out.control |= u64::from(b < 0x20) << i;
    }
    out
}

/// The bytes of the block at `base` that a backslash escapes, each escape checked as JSON allows
/// it (`None` otherwise). `carry` says the block's first byte is escaped, and is set when its
/// last byte escapes the next block's first.
pub(crate) fn escaped(bytes: &[u8], base: usize, backslashes: u64, carry: &mut bool) -> Option<u64> {
    let mut escaped = 0;
    let mut pending = backslashes;
    if std::mem::take(carry) {
        escaped = 1;
        pending &= !1;
    }
    while pending != 0 {
        let i = pending.trailing_zeros();
        valid_escape(bytes, base + i as usize)?;
        if i == 63 {
            *carry = true;
            break;
        }
        escaped |= 2 << i;
        // The escaped byte may itself be a backslash; it escapes nothing.
        pending &= !(3 << i);
    }
    Some(escaped)
}

/// Whether the backslash at `at` starts an escape JSON allows: `\"`, `\\`, `\/`, `\b`, `\f`,
/// `\n`, `\r`, `\t` or `\u` and four hex digits.
fn valid_escape(bytes: &[u8], at: usize) -> Option<()> {
    match *bytes.get(at + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
        b'u' => bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit).then_some(()),
        _ => None,
    }
}

/// Bit `i` set when an odd number of bits `0..=i` are set: the bytes inside strings, counting
/// each opening quote and not its closing one.
pub(crate) fn prefix_xor(mut bits: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        bits ^= bits << shift;
    }
    bits
}

// The grammar is a table: what each byte between strings, and each whole string, does in each
// state. The top-level object has states of its own, so that only its members pay for being
// tracked.

/// A byte's part in the grammar, between strings.
const WS: u8 = 0;
const OPEN_OBJECT: u8 = 1;
const CLOSE_OBJECT: u8 = 2;
const OPEN_ARRAY: u8 = 3;
const CLOSE_ARRAY: u8 = 4;
const COLON: u8 = 5;
const COMMA: u8 = 6;
/// The first byte of a number or literal.
const SCALAR: u8 = 7;
const INVALID: u8 = 8;
/// A whole string (the class of its opening quote).
const STRING: u8 = 9;

const fn byte_classes() -> [u8; 256] {
    let mut classes = [INVALID; 256];
    let groups: [(&[u8], u8); 8] = [
        (b" \t\n\r", WS),
        (b"{", OPEN_OBJECT),
        (b"}", CLOSE_OBJECT),
        (b"[", OPEN_ARRAY),
        (b"]", CLOSE_ARRAY),
        (b":", COLON),
        (b",", COMMA),
        (b"-0123456789tfn", SCALAR),
    ];
    let mut g = 0;
    while g < groups.len() {
        let (bytes, class) = groups[g];
        let mut i = 0;
        while i < bytes.len() {
            classes[bytes[i] as usize] = class;
            i += 1;
        }
        g += 1;
    }
    classes
}
static BYTE_CLASS: [u8; 256] = byte_classes();

// What the grammar expects. The `..._TOP` states are the top-level object's.
const TOP: u8 = 0; // the top-level value, which must be an object
const FIRST_KEY_TOP: u8 = 1;
const KEY_TOP: u8 = 2;
const AFTER_KEY_TOP: u8 = 3;
const MEMBER_VALUE_TOP: u8 = 4;
const AFTER_MEMBER_TOP: u8 = 5;
const FIRST_KEY: u8 = 6; // after `{`
const KEY: u8 = 7; // after `,` in an object
const AFTER_KEY: u8 = 8;
const MEMBER_VALUE: u8 = 9; // after `:`
const AFTER_MEMBER: u8 = 10;
const FIRST_ELEMENT: u8 = 11; // after `[`
const ELEMENT: u8 = 12; // after `,` in an array
const AFTER_ELEMENT: u8 = 13;
const DONE: u8 = 14; // the top-level object is complete

// A transition is the next state (low nibble) and what else happens (high nibble).
const PUSH: u8 = 0x10; // a container opens; the next state is its first
const POP: u8 = 0x20; // the container closes; the next state is the one it returns to
const READ_SCALAR: u8 = 0x40; // a number or literal starts here
const TRACK: u8 = 0x80; // a top-level key or member value starts or ends here
const FAIL: u8 = 0xff;

const fn transitions() -> [u8; 256] {
    let mut t = [[FAIL; 16]; 16];
    let mut state = 0;
    while state <= DONE as usize {
        t[state][WS as usize] = state as u8;
        state += 1;
    }
    let (oo, co, oa, ca, colon, comma, scalar, string) = (
        OPEN_OBJECT as usize,
        CLOSE_OBJECT as usize,
        OPEN_ARRAY as usize,
        CLOSE_ARRAY as usize,
        COLON as usize,
        COMMA as usize,
        SCALAR as usize,
        STRING as usize,
    );
    t[TOP as usize][oo] = PUSH | FIRST_KEY_TOP;
    // The top-level object.
    t[FIRST_KEY_TOP as usize][string] = TRACK | AFTER_KEY_TOP;
    t[FIRST_KEY_TOP as usize][co] = POP;
    t[KEY_TOP as usize][string] = TRACK | AFTER_KEY_TOP;
    t[AFTER_KEY_TOP as usize][colon] = TRACK | MEMBER_VALUE_TOP;
    t[MEMBER_VALUE_TOP as usize][oo] = TRACK | PUSH | FIRST_KEY;
    t[MEMBER_VALUE_TOP as usize][oa] = TRACK | PUSH | FIRST_ELEMENT;
    t[MEMBER_VALUE_TOP as usize][string] = TRACK | AFTER_MEMBER_TOP;
    t[MEMBER_VALUE_TOP as usize][scalar] = TRACK | READ_SCALAR | AFTER_MEMBER_TOP;
    t[AFTER_MEMBER_TOP as usize][comma] = TRACK | KEY_TOP;
    t[AFTER_MEMBER_TOP as usize][co] = TRACK | POP;
    // Everything inside it.
    t[FIRST_KEY as usize][string] = AFTER_KEY;
    t[FIRST_KEY as usize][co] = POP;
    t[KEY as usize][string] = AFTER_KEY;
    t[AFTER_KEY as usize][colon] = MEMBER_VALUE;
    t[AFTER_MEMBER as usize][comma] = KEY;
    t[AFTER_MEMBER as usize][co] = POP;
    t[FIRST_ELEMENT as usize][ca] = POP;
    t[AFTER_ELEMENT as usize][comma] = ELEMENT;
    t[AFTER_ELEMENT as usize][ca] = POP;
    let values = [(MEMBER_VALUE, AFTER_MEMBER), (FIRST_ELEMENT, AFTER_ELEMENT), (ELEMENT, AFTER_ELEMENT)];
    let mut i = 0;
    while i < values.len() {
        let (value, after) = (values[i].0 as usize, values[i].1);
        t[value][oo] = PUSH | FIRST_KEY;
        t[value][oa] = PUSH | FIRST_ELEMENT;
        t[value][string] = after;
        t[value][scalar] = READ_SCALAR | after;
        i += 1;
    }
    let mut flat = [FAIL; 256];
    let mut k = 0;
    while k < 256 {
        flat[k] = t[k >> 4][k & 15];
        k += 1;
    }
    flat
}
/// Indexed by `state << 4 | class`.
static TRANSITIONS: [u8; 256] = transitions();

/// The state a container opened in `state` returns to when it closes.
const fn return_states() -> [u8; 16] {
    let mut r = [FAIL; 16];
    r[TOP as usize] = DONE;
    r[MEMBER_VALUE_TOP as usize] = AFTER_MEMBER_TOP;
    r[MEMBER_VALUE as usize] = AFTER_MEMBER;
    r[FIRST_ELEMENT as usize] = AFTER_ELEMENT;
    r[ELEMENT as usize] = AFTER_ELEMENT;
    r
}
static RETURN_STATE: [u8; 16] = return_states();

/// Where the grammar is.
struct Grammar {
    state: u8,
    depth: usize,
    /// The state each open container returns to when it closes.
    returns: [u8; MAX_DEPTH],
}

impl Grammar {
    /// The bytes `from..to`, which lie between two strings (or before the first, or after the
    /// last): punctuation, whitespace, numbers and literals.
    #[inline(always)]
    fn between_strings<const N: usize>(&mut self, members: &mut Members<'_, N>, from: usize, to: usize) -> Option<()> {
        let mut i = from;
        while i < to {
            i = self.step(members, BYTE_CLASS[members.bytes[i] as usize], i, to)?;
        }
        Some(())
    }

    /// The byte (or whole string) of `class` at `at`, in a gap that ends at `gap_end`; returns
    /// where the walk goes on.
    #[inline(always)]
    fn step<const N: usize>(
        &mut self,
        members: &mut Members<'_, N>,
        class: u8,
        at: usize,
        gap_end: usize,
    ) -> Option<usize> {
        let mut t = TRANSITIONS[usize::from(self.state << 4 | class)];
        // Most steps (whitespace, `:` and `,`, a string inside a container) only change state.
        if t < 0x10 {
            self.state = t;
            return Some(at + 1);
        }
        if t & TRACK != 0 && t != FAIL {
            members.track(self.state, at)?;
            t &= !TRACK;
            if t < 0x10 {
                self.state = t;
                return Some(at + 1);
            }
        }
        if t & 0xf0 == PUSH && self.depth < MAX_DEPTH {
            self.returns[self.depth] = RETURN_STATE[usize::from(self.state)];
            self.depth += 1;
            self.state = t & 0x0f;
            return Some(at + 1);
        }
        if t == POP && self.depth > 0 {
            self.depth -= 1;
            self.state = self.returns[self.depth];
            return Some(at + 1);
        }
        if t & 0xf0 == READ_SCALAR {
            self.state = t & 0x0f;
            return scalar_end(&members.bytes[..gap_end], at);
        }
        None
    }
}

/// The top-level object's members, and where the wanted ones' values are.
struct Members<'a, const N: usize> {
    bytes: &'a [u8],
    wanted: [&'a str; N],
    found: [Option<Range<usize>>; N],
    key_start: usize,
    value_start: usize,
    /// The wanted member whose value is being read.
    member: Option<usize>,
}

impl<const N: usize> Members<'_, N> {
    /// A top-level key or member value starting, or a member ending, at `at`, seen in `state`.
    /// Out of line: the per-byte loop stays small, and only the top level's few members call it.
    #[inline(never)]
    fn track(&mut self, state: u8, at: usize) -> Option<()> {
        match state {
            FIRST_KEY_TOP | KEY_TOP => self.key_start = at,
            AFTER_KEY_TOP => self.note_key(self.key_start + 1..trim_end(self.bytes, at) - 1)?,
            MEMBER_VALUE_TOP => self.value_start = at,
            // AFTER_MEMBER_TOP: the comma or brace after a member.
            _ => {
                if let Some(k) = self.member.take() {
                    self.found[k] = Some(self.value_start..trim_end(self.bytes, at));
                }
            }
        }
        Some(())
    }

    /// A key of the top-level object.
    fn note_key(&mut self, key: Range<usize>) -> Option<()> {
        let key = &self.bytes[key];
        // serde_json compares the decoded key; an escaped one is left to it.
        if key.contains(&b'\\') {
            return None;
        }
        if let Some(k) = self.wanted.iter().position(|w| w.as_bytes() == key) {
            // A wanted member given twice: serde_json's derived readers refuse it.
            if self.found[k].is_some() {
                return None;
            }
            self.member = Some(k);
        }
        Some(())
    }
}

/// The end of `bytes[..end]` without its trailing whitespace. (`trim_ascii_end` also trims a
/// form feed, which the grammar has already refused between tokens.)
fn trim_end(bytes: &[u8], end: usize) -> usize {
    bytes[..end].trim_ascii_end().len()
}

/// The end of the number or literal starting at `at`; `None` when none starts there. Out of
/// line, as bodies hold few numbers and literals and the per-byte loop stays small.
#[inline(never)]
fn scalar_end(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = &bytes[at..];
    for literal in [&b"true"[..], b"false", b"null"] {
        if rest.starts_with(literal) {
            return Some(at + literal.len());
        }
    }
    number_end(bytes, at)
}

/// The end of the JSON number starting at `at`: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn number_end(bytes: &[u8], mut i: usize) -> Option<usize> {
    let digits = |from: usize| {
        let end = from + bytes.get(from..)?.iter().take_while(|b| b.is_ascii_digit()).count();
        (end > from).then_some(end)
    };
    if bytes.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match bytes.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(i)?,
        _ => return None,
    };
    if bytes.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    Some(i)
}

#[cfg(test)]
mod tests;
