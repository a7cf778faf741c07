//! Searching many short texts for the same few bytes (a key in every streamed event, a marker in
//! every answer): memchr's SIMD searcher, built once per search site. Setting one up —
//! `memmem::find` does it on every call, `str::contains` sets up a two-way searcher — costs more
//! than searching a short event, and a stream pays it per event and per key.

/// The searcher for `$needle` (a constant), built the first time this site runs and kept:
/// `finder!("\"usage\"").find(bytes)`.
macro_rules! finder {
    ($needle:expr) => {{
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($needle));
        &*FINDER
    }};
}
pub(crate) use finder;

#[cfg(test)]
mod tests {
    fn holds_usage(text: &str) -> bool {
        finder!("\"usage\"").find(text.as_bytes()).is_some()
    }

    #[test]
    fn a_site_finds_its_needle_in_every_text_it_is_given() {
        assert!(holds_usage(r#"{"usage":{}}"#));
        assert!(!holds_usage(r#"{"usag":{}}"#));
        assert!(holds_usage(&format!("{}\"usage\"", "x".repeat(1000))));
        // Another site, another needle: each keeps its own.
        assert!(finder!(b"ab").find(b"xxab").is_some());
        assert!(!holds_usage("ab"));
    }
}
