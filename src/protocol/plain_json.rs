//! Matching JSON text whose exact shape is known in advance, byte by byte, instead of parsing
//! it. The busiest bodies on the request path (a Chat content chunk, a plain Messages answer) are
//! written by their APIs in one fixed shape; a match of that shape costs a fraction of a parse,
//! and whatever it does not account for is left to the parse.
//!
//! Every step accepts only text that is valid JSON and whose value, as a parse reads it, is what
//! the step returns, so a whole match implies a parse would read the same thing.

use std::borrow::Cow;

use super::json_scan::plain_run;

/// The text not matched yet; each step consumes what it matched, or nothing when it fails.
pub(crate) struct Cursor<'a>(pub &'a str);

/// The longest whole number [`Cursor::count`] reads: any 19 digits fit in a `u64`.
const MAX_COUNT_DIGITS: usize = 19;

/// JSON's whitespace: it may stand between any two tokens and around the whole value.
const SPACE: [char; 4] = [' ', '\t', '\n', '\r'];

impl<'a> Cursor<'a> {
    /// A cursor over a whole JSON text, the whitespace around its value left out.
    pub fn whole(text: &'a str) -> Self {
        Cursor(text.trim_matches(SPACE))
    }

    pub fn literal(&mut self, text: &str) -> Option<()> {
        self.0 = self.0.strip_prefix(text)?;
        Some(())
    }

    /// Whether all the text has been matched.
    pub fn is_done(&self) -> bool {
        self.0.is_empty()
    }

    /// A string with nothing escaped (no backslash, no control character): its text as written
    /// is its value.
    pub fn plain_string(&mut self) -> Option<&'a str> {
        self.quoted(|inner| Some(plain_run(inner)), b"\"")
    }

    /// A valid JSON string whose escapes are all single characters (`\n`, `\"`, ...); returns its
    /// text as written. A `\u` escape is refused: whether a lone surrogate is an error depends on
    /// how the parse reads the value, which this does not decide.
    pub fn string_without_unicode_escapes(&mut self) -> Option<&'a str> {
        self.quoted(string_end::<false>, b"\"")
    }

    /// A valid JSON string whose `\u` escapes, if any, name no surrogate (a lone one is an error
    /// or not depending on how the parse reads the value, so a surrogate, even paired, is left
    /// to the parse); returns its text as written ([`unescaped`] reads its value). Google's APIs
    /// write `<`, `>`, `&`, `=` and `'` as `\u` escapes, in any text.
    pub fn string_text(&mut self) -> Option<&'a str> {
        self.quoted(string_end::<true>, b"\"")
    }

    /// A key and its colon written together, `"key":`, the key with nothing escaped: compact
    /// JSON's every member in one step. Read as a string and then a literal, the keys cost a
    /// tenth more of a Chat answer's match (BENCHMARKS.md).
    #[inline(always)]
    fn compact_key(&mut self) -> Option<&'a str> {
        self.quoted(|inner| Some(plain_run(inner)), b"\":")
    }

    /// A string and the `closing` bytes right after it (its quote, and a key's colon): the
    /// string's text as written, which ends where `end` says (given the bytes after the opening
    /// quote). Consumes nothing when the text is otherwise. Bytes, not characters, are compared:
    /// every cut falls next to an ASCII quote, on a character's boundary.
    #[inline(always)]
    fn quoted<const N: usize>(
        &mut self,
        end: impl FnOnce(&[u8]) -> Option<usize>,
        closing: &[u8; N],
    ) -> Option<&'a str> {
        let bytes = self.0.as_bytes();
        if *bytes.first()? != b'"' {
            return None;
        }
        let close = 1 + end(bytes.get(1..)?)?;
        if bytes.get(close..close + N)? != closing {
            return None;
        }
        let text = self.0.get(1..close)?;
        self.0 = self.0.get(close + N..)?;
        Some(text)
    }

    /// The digits of a JSON number that is a whole number written plainly (no sign, fraction
    /// or exponent, and no leading zero, which JSON forbids).
    pub fn digits(&mut self) -> Option<&'a str> {
        let len = self.0.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 || (len > 1 && self.0.starts_with('0')) {
            return None;
        }
        let (digits, rest) = self.0.split_at(len);
        // A digit run ending in a fraction or an exponent is another kind of number.
        if rest.starts_with(['.', 'e', 'E']) {
            return None;
        }
        self.0 = rest;
        Some(digits)
    }

    /// [`Self::string_text`], read as its value: the escapes resolved.
    pub fn string_value(&mut self) -> Option<Cow<'a, str>> {
        // Most strings escape nothing: their text is their value, with no search for escapes.
        if let Some(plain) = self.plain_string() {
            return Some(Cow::Borrowed(plain));
        }
        self.string_text().map(unescaped)
    }

    /// [`Self::digits`], the value unread.
    pub fn whole_number(&mut self) -> Option<()> {
        self.digits().map(drop)
    }

    /// The whitespace here, all of it. An API that pretty-prints (Gemini's answers) or spaces
    /// its colons (Gemini's stream chunks) puts some between most tokens.
    #[inline(always)]
    fn space(&mut self) {
        if self.0.as_bytes().first().is_some_and(|&b| b <= b' ') {
            self.0 = self.0.trim_start_matches(SPACE);
        }
    }

    /// `step` (one that consumes nothing when it fails) here, or else past the whitespace here:
    /// compact text, the busiest, pays for no look at whitespace.
    #[inline(always)]
    fn spaced<T>(&mut self, step: impl Fn(&mut Self) -> Option<T>) -> Option<T> {
        step(self).or_else(|| {
            self.space();
            step(self)
        })
    }

    /// After a member or an element: `Some(true)` past the `close` bracket, `Some(false)` past a
    /// comma.
    #[inline(always)]
    fn closed_or_comma(&mut self, close: u8) -> Option<bool> {
        let closed = match self.0.as_bytes().first()? {
            b',' => false,
            &b if b == close => true,
            _ => return None,
        };
        self.0 = self.0.get(1..)?;
        Some(closed)
    }

    /// An object of members with plain keys (no escape), each value matched by `value`, given
    /// its key; whitespace between its tokens.
    pub fn members(&mut self, mut value: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.literal("{")?;
        self.space();
        if self.literal("}").is_some() {
            return Some(());
        }
        loop {
            let key = match self.compact_key() {
                Some(key) => key,
                None => {
                    let key = self.spaced(Self::plain_string)?;
                    self.spaced(|c| c.literal(":"))?;
                    key
                }
            };
            self.space();
            value(self, key)?;
            if self.spaced(|c| c.closed_or_comma(b'}'))? {
                return Some(());
            }
        }
    }

    /// A value the reading skips: a string ([`Self::string_text`]), a whole number, `null`, or
    /// (when `nested` allows) an object of plain keys holding those.
    pub fn skipped_value(&mut self, nested: bool) -> Option<()> {
        match self.0.as_bytes().first()? {
            b'"' => self.string_text().map(drop),
            b'n' => self.literal("null"),
            b'{' if nested => self.members(|c, _| c.skipped_value(false)),
            _ => self.whole_number(),
        }
    }

    /// `null` (`None`), or what `value` matches.
    pub fn null_or<T>(&mut self, value: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.literal("null").is_some() {
            return Some(None);
        }
        value(self).map(Some)
    }

    /// An object whose members named in `keys` are token counts ([`Self::count`]), each named at
    /// most once, and whose other members `other` matches, given their key: the counts in the
    /// order of `keys` (`None` for a key not named, or a count that is `null`).
    pub fn counts<const N: usize>(
        &mut self,
        keys: [&str; N],
        mut other: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<[Option<u64>; N]> {
        let mut counts = [None; N];
        let mut seen = Seen::default();
        self.members(|c, key| match keys.iter().position(|&k| k == key) {
            Some(i) => {
                seen.first(u8::try_from(i).ok()?)?;
                *counts.get_mut(i)? = c.count()?;
                Some(())
            }
            None => other(c, key),
        })?;
        Some(counts)
    }

    /// An array of values, each matched by `value`; whitespace between its tokens.
    pub fn elements(&mut self, mut value: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.literal("[")?;
        self.space();
        if self.literal("]").is_some() {
            return Some(());
        }
        loop {
            value(self)?;
            if self.spaced(|c| c.closed_or_comma(b']'))? {
                return Some(());
            }
            self.space();
        }
    }

    /// A value the reading skips, of any shape [`Self::skipped_value`] skips, `true`, `false`, a
    /// number of any form, or arrays and objects of those, at most `depth` of them inside one
    /// another (the depth bounds the recursion whatever the text).
    pub fn skipped_any(&mut self, depth: u8) -> Option<()> {
        match self.0.as_bytes().first()? {
            b'{' => {
                let inner = depth.checked_sub(1)?;
                self.members(|c, _| c.skipped_any(inner))
            }
            b'[' => {
                let inner = depth.checked_sub(1)?;
                self.elements(|c| c.skipped_any(inner))
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.skipped_value(false),
        }
    }

    /// A JSON number of any form (a sign, a fraction, an exponent), its value unread.
    pub fn number(&mut self) -> Option<()> {
        let bytes = self.0.as_bytes();
        let digits_from =
            |at: usize| bytes.get(at..).map_or(0, |rest| rest.iter().take_while(|b| b.is_ascii_digit()).count());
        let mut at = usize::from(bytes.first() == Some(&b'-'));
        let whole = digits_from(at);
        // JSON forbids a leading zero before more digits.
        if whole == 0 || (whole > 1 && bytes.get(at) == Some(&b'0')) {
            return None;
        }
        at += whole;
        if bytes.get(at) == Some(&b'.') {
            let fraction = digits_from(at + 1);
            if fraction == 0 {
                return None;
            }
            at += 1 + fraction;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            let exponent = digits_from(at);
            if exponent == 0 {
                return None;
            }
            at += exponent;
        }
        self.0 = self.0.get(at..)?;
        Some(())
    }

    /// A token count as [`super::lenient::Count`] reads one, for the two forms it meets in
    /// practice: a whole number of at most 19 digits (its value) or `null` (unknown).
    pub fn count(&mut self) -> Option<Option<u64>> {
        if self.literal("null").is_some() {
            return Some(None);
        }
        let before = self.0;
        let digits = self.digits().filter(|d| d.len() <= MAX_COUNT_DIGITS);
        // At most 19 digits: the sum cannot overflow.
        let value = digits.map(|d| d.bytes().fold(0u64, |n, b| n * 10 + u64::from(b - b'0')));
        if value.is_none() {
            self.0 = before;
        }
        value.map(Some)
    }
}

/// Where the text of a string ends (`inner` starts just past its opening quote): the offset of
/// its closing quote, when every escape before it is one JSON allows (a `\u` one only with
/// `UNICODE`, and naming no surrogate) and no control character stands unescaped.
#[inline(always)]
fn string_end<const UNICODE: bool>(inner: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        at += plain_run(inner.get(at..)?);
        match *inner.get(at)? {
            b'"' => return Some(at),
            b'\\' => match *inner.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                b'u' if UNICODE && not_a_surrogate(inner.get(at + 2..at + 6)?) => at += 6,
                _ => return None,
            },
            _ => return None,
        }
    }
}

/// Whether four bytes are the hex digits of a code point outside the surrogates (D800-DFFF).
fn not_a_surrogate(hex: &[u8]) -> bool {
    let mut code = 0u32;
    for &b in hex {
        let Some(digit) = char::from(b).to_digit(16) else { return false };
        code = code * 16 + digit;
    }
    !(0xD800..=0xDFFF).contains(&code)
}

/// The value of a string's text as [`Cursor::string_text`] (or
/// [`Cursor::string_without_unicode_escapes`]) matched it: its escapes resolved. The text between escapes is copied a run at a time
/// (found by a byte search), not a character at a time: a Claude Code user id, JSON text escaped
/// inside a string, cost ~20 instructions a character that way.
pub fn unescaped(written: &str) -> Cow<'_, str> {
    let backslash = |text: &str| memchr::memchr(b'\\', text.as_bytes());
    let Some(first) = backslash(written) else {
        return Cow::Borrowed(written);
    };
    let mut value = String::with_capacity(written.len());
    let (mut run, mut rest) = written.split_at(first);
    loop {
        value.push_str(run);
        // `rest` starts at a backslash. The escapes `string_text` lets through, and only those.
        let mut after = rest.get(1..).unwrap_or_default().chars();
        match after.next() {
            Some('u') => {
                // Four hex digits naming no surrogate: one character.
                let digits = after.as_str();
                let code = digits.get(..4).and_then(|hex| u32::from_str_radix(hex, 16).ok());
                match code.and_then(char::from_u32) {
                    Some(c) => {
                        value.push(c);
                        after = digits.get(4..).unwrap_or_default().chars();
                    }
                    None => value.push('u'),
                }
            }
            Some('n') => value.push('\n'),
            Some('t') => value.push('\t'),
            Some('r') => value.push('\r'),
            Some('b') => value.push('\u{8}'),
            Some('f') => value.push('\u{c}'),
            Some(other) => value.push(other),
            None => {}
        }
        let tail = after.as_str();
        match backslash(tail) {
            Some(at) => (run, rest) = tail.split_at(at),
            None => {
                value.push_str(tail);
                return Cow::Owned(value);
            }
        }
    }
}

/// Which of an object's members a matcher reads have been matched (up to 16, by slot): a member
/// named twice is left to the parse, which refuses it (or, reading through a `Value`, keeps the
/// last).
#[derive(Default)]
pub(crate) struct Seen(u16);

impl Seen {
    /// `Some` the first time `slot` is named, `None` after.
    pub fn first(&mut self, slot: u8) -> Option<()> {
        let bit = 1u16.checked_shl(u32::from(slot))?;
        (self.0 & bit == 0).then(|| self.0 |= bit)
    }
}

/// Inputs for the matchers' property tests: JSON text in an API's shape and near it.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
pub(crate) mod strategies {
    use proptest::prelude::*;

    /// JSON strings, mostly valid: plain text, escapes of every kind; now and then a `\u` escape,
    /// a bad escape, a raw control character, an unclosed string or not a string at all.
    pub fn string() -> impl Strategy<Value = String> {
        prop_oneof![
            12 => "[a-zA-Z0-9 ._-]{0,8}".prop_map(|s| format!("\"{s}\"")),
            8 => "[a-z \"\\\\/\n\t\u{8}\u{c}\r\u{1}é😀]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            4 => "[a-z \"\\\\/\né😀]{0,40}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            1 => Just(r#""\u00e9""#.to_owned()),
            1 => Just(r#""a \u003c b\u0026""#.to_owned()),
            1 => Just(r#""\ud800""#.to_owned()),
            1 => Just(r#""\ud83d\ude00""#.to_owned()),
            1 => Just(r#""\u12g4""#.to_owned()),
            1 => Just(r#""a\qb""#.to_owned()),
            1 => Just("\"a\tb\"".to_owned()),
            1 => Just("\"open".to_owned()),
            1 => Just("null".to_owned()),
            1 => Just("7".to_owned()),
        ]
    }

    /// Token counts: whole numbers mostly, now and then one too long for a `u64`, a leading
    /// zero, a sign, a fraction, a string or another type.
    pub fn count() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => (0u64..100_000).prop_map(|n| n.to_string()),
            1 => Just(u64::MAX.to_string()),
            1 => prop::sample::select(vec![
                "null", "1234567890123456789", "12345678901234567890", "018", "-3", "2.0", "1e2", "\"5\"",
                "true", "[]", "{}",
            ])
            .prop_map(str::to_owned),
        ]
    }

    /// How [`respace`] spaces a JSON text.
    #[derive(Clone, Copy, Debug)]
    pub enum Spacing {
        /// As generated: compact.
        Compact,
        /// A space after each colon, as Gemini's stream chunks have it.
        Colons,
        /// A space after each colon and comma, as Python's `json.dumps` writes.
        Python,
        /// A line and an indent for each member and element, as Gemini's answers are written.
        Pretty,
        /// Every kind of JSON whitespace, before and after punctuation.
        Odd,
    }

    /// Compact most of the time, else each other spacing.
    pub fn spacing() -> impl Strategy<Value = Spacing> {
        prop_oneof![
            4 => Just(Spacing::Compact),
            1 => Just(Spacing::Colons),
            1 => Just(Spacing::Python),
            1 => Just(Spacing::Pretty),
            1 => Just(Spacing::Odd),
        ]
    }

    /// `text` with whitespace between its tokens as `spacing` says; strings are left as they are
    /// (so the value, whatever the text, stays the same, or the text stays just as invalid).
    pub fn respace(text: &str, spacing: Spacing) -> String {
        let mut out = String::with_capacity(text.len() * 2);
        let (mut in_string, mut escaped, mut depth) = (false, false, 0usize);
        let line = |out: &mut String, depth: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        };
        for ch in text.chars() {
            if in_string {
                out.push(ch);
                match ch {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match (ch, spacing) {
                ('"', _) => {
                    in_string = true;
                    out.push(ch);
                }
                (':', Spacing::Colons | Spacing::Python | Spacing::Pretty) => out.push_str(": "),
                (',', Spacing::Python) => out.push_str(", "),
                ('{' | '[', Spacing::Pretty) => {
                    depth += 1;
                    out.push(ch);
                    line(&mut out, depth);
                }
                ('}' | ']', Spacing::Pretty) => {
                    depth = depth.saturating_sub(1);
                    line(&mut out, depth);
                    out.push(ch);
                }
                (',', Spacing::Pretty) => {
                    out.push(ch);
                    line(&mut out, depth);
                }
                (':', Spacing::Odd) => out.push_str(" \t:\r\n"),
                (',', Spacing::Odd) => out.push_str("\n ,\t"),
                ('{' | '[', Spacing::Odd) => {
                    out.push(ch);
                    out.push(' ');
                }
                ('}' | ']', Spacing::Odd) => {
                    out.push('\t');
                    out.push(ch);
                }
                _ => out.push(ch),
            }
        }
        out
    }

    /// The first option (as the API writes it) most of the time, else one of the others.
    pub fn one_of(options: &'static [&'static str]) -> impl Strategy<Value = String> {
        let usual = options[0];
        prop_oneof![
            3 * (options.len() - 1).max(1) as u32 => Just(usual.to_owned()),
            options.len() as u32 => prop::sample::select(options).prop_map(str::to_owned),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::protocol::lenient::Count;

    /// Whenever a step accepts a JSON value, the value's parse agrees with what it returned.
    fn parsed_count(text: &str) -> Option<u64> {
        serde_json::from_str::<Count>(text).unwrap().0
    }

    #[test]
    fn count_reads_what_the_parse_reads_or_refuses() {
        for text in ["0", "7", "1234567890123456789", "null"] {
            let mut c = Cursor(text);
            assert_eq!(c.count(), Some(parsed_count(text)), "{text}");
            assert!(c.is_done(), "{text}");
        }
        // A leading zero, a sign, a fraction, an exponent, more digits than fit: not matched,
        // and nothing consumed.
        for text in ["01", "-1", "1.5", "1e3", "2E2", "12345678901234567890", "\"3\"", "nul"] {
            let mut c = Cursor(text);
            assert_eq!(c.count(), None, "{text}");
            assert_eq!(c.0, text);
        }
    }

    #[test]
    fn strings_are_matched_only_when_their_text_is_their_value() {
        let mut c = Cursor(r#""a b""#);
        assert_eq!(c.plain_string(), Some("a b"));
        for text in [r#""a\"b""#, "\"a\tb\"", "\"open"] {
            assert_eq!(Cursor(text).plain_string(), None, "{text}");
        }
        let mut c = Cursor(r#""a\"b\n""#);
        assert_eq!(c.string_without_unicode_escapes(), Some(r#"a\"b\n"#));
        for text in [r#""\u00e9""#, r#""a\qb""#, "\"a\u{1}\"", r#""a\"#] {
            assert_eq!(Cursor(text).string_without_unicode_escapes(), None, "{text}");
        }
    }

    #[test]
    fn a_string_text_takes_unicode_escapes_but_surrogates() {
        for (text, value) in [
            (r#""\u003c""#, "<"),
            (r#""a\uFFFFb\n""#, "a\u{ffff}b\n"),
            (r#""\ud7ff\uE000""#, "\u{d7ff}\u{e000}"),
            (r#""\u0000\"""#, "\0\""),
            (r#""if a \u003c b \u0026\u0026 c \u003d\u003d 'x':""#, "if a < b && c == 'x':"),
        ] {
            let mut c = Cursor(text);
            assert_eq!(c.string_text().map(unescaped).as_deref(), Some(value), "{text}");
            assert!(c.is_done(), "{text}");
        }
        // A surrogate, half or paired (the parse may refuse a lone one), a bad escape: refused,
        // and nothing consumed.
        for text in
            [r#""\ud800""#, r#""\uDFFF""#, r#""\ud83d\ude00""#, r#""\u12g4""#, r#""\u+123""#, r#""\u12""#, "\"a\u{1}\""]
        {
            let mut c = Cursor(text);
            assert_eq!(c.string_text(), None, "{text}");
            assert_eq!(c.0, text);
        }
    }

    /// JSON values of every kind the skip may meet, nested up to four deep, and near misses.
    fn any_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            4 => strategies::string(),
            4 => strategies::count(),
            2 => strategies::one_of(&["-0", "0.5", "-1.25e+3", "1E9", "1.", ".5", "1e", "-", "--1", "1.5.2", "0x1", "1e+", "+1"]),
            2 => strategies::one_of(&["null", "true", "false", "tru", "nul", "[1,]", "{\"a\":1,}", "[ ]", "{\"a\" :1}"]),
        ];
        // Elements and members are joined as JSON joins them, spaced or not, or now and then
        // not quite.
        let space = || strategies::one_of(&["", " ", "\n    ", "\u{a0}", "\u{c}"]);
        let colon = || strategies::one_of(&[":", ": ", " :\n", ":\u{b}"]);
        let joint = || strategies::one_of(&[",", "", " ,", ",\n  ", " , ", "\t,\r\n", ",x"]);
        leaf.prop_recursive(4, 32, 4, move |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), joint(), space())
                    .prop_map(|(v, j, s)| format!("[{s}{}{s}]", v.join(&j))),
                (prop::collection::vec((strategies::string(), inner), 0..4), joint(), space(), colon()).prop_map(
                    |(m, j, s, colon)| {
                        let members: Vec<String> = m.into_iter().map(|(k, v)| format!("{k}{colon}{v}")).collect();
                        format!("{{{s}{}{s}}}", members.join(&j))
                    }
                ),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// What the skip consumes is one whole JSON value, whatever text follows it.
        #[test]
        fn a_skipped_value_is_one_valid_json_value(text in any_value(), depth in 0u8..5, tail in strategies::one_of(&["", ",", "}", "]", "x"])) {
            let text = format!("{text}{tail}");
            let mut c = Cursor(&text);
            if c.skipped_any(depth).is_some() {
                let consumed = &text[..text.len() - c.0.len()];
                proptest::prop_assert!(
                    serde_json::from_str::<serde::de::IgnoredAny>(consumed).is_ok(),
                    "{consumed:?} of {text:?} is not a JSON value"
                );
            }
        }
    }

    #[test]
    fn the_skip_takes_nested_values_down_to_its_depth() {
        let choices = r#"[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}]"#;
        for (text, depth) in [
            (choices, 4),
            ("[]", 1),
            (r#"[1,"a",null,true,false,{"b":[]}]"#, 3),
            ("{}", 1),
            ("7", 0),
            (r#"{"temperature":1.0,"top_p":-0.5e-3}"#, 1),
            ("[1 ]", 2),
            ("{\n  \"a\": [\n    1,\n    {}\n  ],\r\n\t\"b\" : \"x\"\n}", 3),
            (r#"["a \u003c b", "\u00E9\"\\"]"#, 1),
        ] {
            let mut c = Cursor(text);
            assert_eq!(c.skipped_any(depth), Some(()), "{text}");
            assert!(c.is_done(), "{text}");
        }
        // One level too deep, or a value the skip does not take: refused.
        for (text, depth) in
            [(choices, 3), ("[]", 0), ("[[1]]", 1), ("[01]", 2), ("[1.]", 2), ("[1,]", 2), ("{\"a\":1 ,}", 2)]
        {
            assert_eq!(Cursor(text).skipped_any(depth), None, "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// A string's value, when the step reads one, is the value the parse reads, and a plain
        /// one is borrowed from the text.
        #[test]
        fn a_string_value_is_the_parses(text in strategies::string()) {
            if let Some(value) = Cursor(&text).string_value() {
                let parsed = serde_json::from_str::<String>(&text).ok();
                proptest::prop_assert_eq!(Some(value.as_ref()), parsed.as_deref());
                proptest::prop_assert_eq!(matches!(value, Cow::Borrowed(_)), !text.contains('\\'));
            }
        }
    }
}
