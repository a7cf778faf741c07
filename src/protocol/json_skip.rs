//! Walking JSON that has already been shown valid. A request body is validated once, by the
//! request's peek (`json_scan`, or serde_json where the scan declines); a reader that then only
//! needs to step over parts of it (a converter stepping over tool schemas it relays as they are)
//! need not validate them a second time at serde_json's pace.

use std::ops::Range;

use crate::protocol::json_scan::{escaped, plain_run, prefix_xor, top_level_members};

/// Text shown to be one JSON object, by `json_scan`'s scan here or by the request's peek; and,
/// when the scan found it out, where one top-level member's value is.
#[derive(Clone, Debug)]
pub struct ShownObject<'a> {
    text: &'a str,
    /// A member's name, and its value's span (`None`: the object has no such member).
    member: Option<(&'static str, Option<Range<usize>>)>,
}

impl<'a> ShownObject<'a> {
    /// `text`, when `json_scan` shows it to be a JSON object, with where its member `name` is.
    pub fn scan(text: &'a str, name: &'static str) -> Option<Self> {
        let [found] = top_level_members(text, [name])?;
        Some(ShownObject { text, member: Some((name, found)) })
    }

    /// `text`, which the request's peek accepted: `proxy::request::peek` refuses any body that
    /// is not one JSON object, validating all of it. `member`: a member's name and span, when
    /// the peek's scan found them out.
    pub fn accepted_by_peek(text: &'a str, member: Option<(&'static str, Option<Range<usize>>)>) -> Self {
        ShownObject { text, member }
    }

    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Where the member `name`'s value is (`Some(None)`: there is none), when that was found out.
    pub fn member(&self, name: &str) -> Option<Option<Range<usize>>> {
        self.member.as_ref().filter(|(known, _)| *known == name).map(|(_, span)| span.clone())
    }
}

/// Where the JSON value starting at `at` ends (the index after it), in text shown to be JSON:
/// strings are stepped over in runs found 16 bytes at a time, nothing is validated. On text that
/// is not JSON the answer means nothing, but it comes without a panic; `None` when the text ends
/// first.
pub fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => container_end(bytes, at),
        _ => {
            let rest = bytes.get(at..)?;
            let len = rest.iter().position(|&b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len.unwrap_or(rest.len()))
        }
    }
}

/// The index after the string whose opening quote is at `at`.
pub fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += plain_run(bytes.get(i..)?);
        match *bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            // A control character, which JSON text would not hold.
            _ => i += 1,
        }
    }
}

/// The index after the object or array that opens at `at`, found 64 bytes at a time: quotes,
/// backslashes and brackets become bit masks, escaped quotes are dropped, the bytes inside
/// strings follow from the quotes that are left, and only the brackets outside them are walked
/// one by one. A tool's schema is dense with short strings and brackets; stepping over it a
/// byte at a time took ~3 instructions a byte.
fn container_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escape_carry = false;
    let mut base = at;
    while base < bytes.len() {
        let padded;
        let block: &[u8; 64] = match bytes.get(base..base + 64).and_then(|full| full.try_into().ok()) {
            Some(full) => full,
            None => {
                // Spaces are neither quotes, backslashes nor brackets. (`top_level_members`
                // pads its last block the same way; one helper for both cost ~5 k instructions
                // on Claude Code's turn, measured, so each keeps its own few lines.)
                let mut tail = [b' '; 64];
                tail[..bytes.len() - base].copy_from_slice(&bytes[base..]);
                padded = tail;
                &padded
            }
        };
        let found = bracket_masks(block);
        let mut quotes = found.quote;
        if found.backslash != 0 || escape_carry {
            quotes &= !escaped(bytes, base, found.backslash, &mut escape_carry)?;
        }
        let inside = prefix_xor(quotes) ^ if in_string { !0 } else { 0 };
        let opens = found.open & !inside;
        let mut brackets = (found.open | found.close) & !inside;
        while brackets != 0 {
            let bit = brackets & brackets.wrapping_neg();
            if opens & bit != 0 {
                depth += 1;
            } else {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(base + bit.trailing_zeros() as usize + 1);
                }
            }
            brackets &= brackets - 1;
        }
        in_string ^= quotes.count_ones() % 2 == 1;
        base += 64;
    }
    None
}

/// Which bytes of a block are quotes, backslashes, opening brackets (`{`, `[`) and closing ones
/// (bit `i` = byte `i`).
#[derive(Debug, PartialEq, Eq)]
struct BracketMasks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

#[cfg(target_arch = "x86_64")]
fn bracket_masks(block: &[u8; 64]) -> BracketMasks {
    use safe_arch::{bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let quote = set_splat_i8_m128i(b'"' as i8);
    let backslash = set_splat_i8_m128i(b'\\' as i8);
    // `[` and `]` are `{` and `}` without the 0x20 bit.
    let case = set_splat_i8_m128i(0x20);
    let open = set_splat_i8_m128i(b'{' as i8);
    let close = set_splat_i8_m128i(b'}' as i8);
    let mut out = BracketMasks { quote: 0, backslash: 0, open: 0, close: 0 };
    for (i, lane) in block.chunks_exact(16).enumerate() {
        let Ok(lane) = <&[u8; 16]>::try_from(lane) else { continue };
        let v = load_unaligned_m128i(lane);
        let folded = bitor_m128i(v, case);
        let bits = |m| u64::from(move_mask_i8_m128i(m) as u16) << (16 * i);
        out.quote |= bits(cmp_eq_mask_i8_m128i(v, quote));
        out.backslash |= bits(cmp_eq_mask_i8_m128i(v, backslash));
        out.open |= bits(cmp_eq_mask_i8_m128i(folded, open));
        out.close |= bits(cmp_eq_mask_i8_m128i(folded, close));
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn bracket_masks(block: &[u8; 64]) -> BracketMasks {
    bracket_masks_bytewise(block)
}

/// [`bracket_masks`] a byte at a time: the other architectures' version, and the SIMD one's
/// reference.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn bracket_masks_bytewise(block: &[u8; 64]) -> BracketMasks {
    let mut out = BracketMasks { quote: 0, backslash: 0, open: 0, close: 0 };
    for (i, &b) in block.iter().enumerate() {
        out.quote |= u64::from(b == b'"') << i;
        out.backslash |= u64::from(b == b'\\') << i;
        out.open |= u64::from(b == b'{' || b == b'[') << i;
        out.close |= u64::from(b == b'}' || b == b']') << i;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a\"\\\\/{}\\[\\],: \n\t\u{0}\u{1f}é]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a\"{}\\\\]{0,6}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// Pretty-printed too, so that whitespace sits between every token.
    fn written(value: &Value, pretty: bool) -> String {
        if pretty { serde_json::to_string_pretty(value).unwrap() } else { value.to_string() }
    }

    proptest! {
        #[test]
        fn a_value_ends_where_its_text_ends(value in any_value(), pretty in any::<bool>(), after in prop::sample::select(vec!["", ",1", "]", "}", " ,"])) {
            let text = written(&value, pretty);
            let framed = format!("{text}{after}");
            prop_assert_eq!(value_end(framed.as_bytes(), 0), Some(text.len()), "{}", framed);
        }

        #[test]
        fn every_member_of_an_object_is_stepped_over_whole(members in prop::collection::vec(any_value(), 1..6)) {
            let text = Value::Array(members.clone()).to_string();
            let bytes = text.as_bytes();
            let mut at = 1;
            for member in &members {
                let end = value_end(bytes, at).unwrap();
                prop_assert_eq!(serde_json::from_str::<Value>(&text[at..end]).unwrap(), member.clone());
                at = end + 1;
            }
            prop_assert_eq!(at, text.len());
        }

        /// Text that is not JSON gets some answer, within the text, or none.
        #[test]
        fn any_bytes_get_an_answer_within_them(bytes in prop::collection::vec(prop::sample::select(b"{}[]\"\\ ,:a1".to_vec()), 0..40), at in 0usize..40) {
            if let Some(end) = value_end(&bytes, at) {
                prop_assert!(end >= at && end <= bytes.len());
            }
        }
    }

    proptest! {
        #[test]
        fn the_simd_masks_are_the_bytewise_masks(block in prop::array::uniform32(any::<u8>()), more in prop::array::uniform32(prop::sample::select(b"{}[]\"\\ a;}{".to_vec()))) {
            let mut all = [0u8; 64];
            all[..32].copy_from_slice(&block);
            all[32..].copy_from_slice(&more);
            prop_assert_eq!(bracket_masks(&all), bracket_masks_bytewise(&all));
        }
    }

    #[test]
    fn a_value_cut_short_has_no_end() {
        for text in [r#"{"a":"b"#, r#"["a\"#, r#"{"a":[1,2]"#, r#""abc"#, ""] {
            assert_eq!(value_end(text.as_bytes(), 0), None, "{text}");
        }
    }

    #[test]
    fn only_an_object_is_shown_by_the_scan_and_with_where_its_member_is() {
        let shown = ShownObject::scan(r#"{"a":[1,{"b":null}], "tools" : [2]}"#, "tools").unwrap();
        assert_eq!(shown.member("tools"), Some(Some(31..34)));
        assert_eq!(shown.member("a"), None, "not looked for");
        assert_eq!(ShownObject::scan(r#"{"a":1}"#, "tools").unwrap().member("tools"), Some(None));
        for text in [r#"[1]"#, r#"{"a":}"#, r#"{"a":1"#, "1", r#"{"a":"\x"}"#] {
            assert!(ShownObject::scan(text, "tools").is_none(), "{text}");
        }
    }
}
