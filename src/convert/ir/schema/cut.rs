//! A body's object schemas cut out of its text before the parse, so that serde_json, which would
//! validate each again as it stepped over it, meets a placeholder instead. Only a body shown to
//! be JSON is cut: the walk that finds the schemas steps over the text without validating it.

use std::ops::Range;

use serde_json::value::RawValue;

use super::{ObjectWithSchemas, Schema, SchemaPlaces, SchemaText, parse_capturing};
use crate::protocol::json_skip::{ShownObject, string_end, value_end};

/// The text that stands in for a cut schema: a whole JSON value wherever a schema can stand. The
/// parse checks that it reads each one whole, where it was put.
pub(super) const PLACEHOLDER: &str = "0";

/// A body's text with its object schemas at [`SchemaPlaces`] cut out, each replaced by
/// [`PLACEHOLDER`].
pub(super) struct Cut<'t> {
    pub(super) text: String,
    pub(super) placeholders: Placeholders<'t>,
}

/// The cut schemas, for the parse of a [`Cut`]'s text to take back.
pub(super) struct Placeholders<'t> {
    /// The body's text, which the spans index.
    original: &'t str,
    /// Where the cut text starts in memory: a value the parse borrows from it is placed by its
    /// address.
    cut_start: usize,
    /// (where a placeholder is in the cut text, the span of its schema in `original`), in order.
    pub(super) at: Vec<(usize, Range<usize>)>,
    /// How many of them the parse has met.
    met: usize,
}

impl<'t> Cut<'t> {
    /// `None` when there is nothing to cut, or the walk declines the body (see [`schema_spans`]).
    pub(super) fn of(body: ShownObject<'t>, places: SchemaPlaces) -> Option<Self> {
        let original = body.text();
        let mut at = match body.member(places.list) {
            // Where the list is, as the request's scan found it: the walk starts there.
            Some(Some(list)) => schema_spans(original, Some(list.start), places)?,
            Some(None) => return None,
            None => schema_spans(original, None, places)?,
        };
        if at.is_empty() {
            return None;
        }
        let cut_len: usize = at.iter().map(|(_, span)| span.len()).sum();
        let mut text = String::with_capacity(original.len().saturating_sub(cut_len) + at.len() * PLACEHOLDER.len());
        let mut from = 0;
        for (placeholder, span) in &mut at {
            text.push_str(original.get(from..span.start)?);
            *placeholder = text.len();
            text.push_str(PLACEHOLDER);
            from = span.end;
        }
        text.push_str(original.get(from..)?);
        let cut_start = text.as_ptr() as usize;
        Some(Cut { text, placeholders: Placeholders { original, cut_start, at, met: 0 } })
    }

    /// The parse of the cut text, its schemas put back as text; `None` when it fails, or does not
    /// meet every placeholder as a schema (the caller then parses the body itself).
    pub(super) fn parse(mut self, places: SchemaPlaces) -> Option<ObjectWithSchemas> {
        let parsed = parse_capturing(&self.text, places, Some(&mut self.placeholders))?;
        (self.placeholders.met == self.placeholders.at.len()).then_some(parsed)
    }
}

impl Placeholders<'_> {
    /// The schema for the value `raw` the parse read at a schema's place: the cut schema if
    /// `raw` is its placeholder, `raw` itself otherwise.
    pub(super) fn schema(&mut self, raw: &RawValue) -> Result<Option<Schema>, &'static str> {
        let offset = (raw.get().as_ptr() as usize).wrapping_sub(self.cut_start);
        match self.at.binary_search_by_key(&offset, |(at, _)| *at) {
            Ok(k) if raw.get() == PLACEHOLDER => {
                self.met += 1;
                let text = self.original.get(self.at[k].1.clone()).ok_or("a cut schema outside the body")?;
                Ok(Some(Schema::Text(SchemaText(text.into()))))
            }
            // The walk checks the punctuation around what it cuts, so this is for text that is
            // not JSON but was said to be.
            Ok(_) => Err("a cut schema's placeholder read as part of a longer value"),
            Err(_) => Ok(Schema::text_unless_null(raw)),
        }
    }
}

/// Where the object schemas at `places` are in `body`, in order (each span to be filled in with
/// its placeholder's place), walking from the body's start, or from `list_at` where the list's
/// value is known to start; `None` when the walk meets a key written with an escape, which it
/// leaves to the parse.
fn schema_spans(body: &str, list_at: Option<usize>, places: SchemaPlaces) -> Option<Vec<(usize, Range<usize>)>> {
    let SchemaPlaces { list, member, nested, wrapper } = places;
    let mut spans = Vec::new();
    let mut walk = Walk { text: body, at: list_at.unwrap_or(0) };
    let mut elements = |walk: &mut Walk<'_>| {
        walk.elements(|walk| {
            walk.members(|walk, key| {
                if key == member {
                    walk.schema(&mut spans)
                } else if wrapper == Some(key) {
                    walk.members(|walk, key| if key == member { walk.schema(&mut spans) } else { walk.skip() })
                } else if nested && key == list {
                    walk.elements(|walk| {
                        walk.members(|walk, key| if key == member { walk.schema(&mut spans) } else { walk.skip() })
                    })
                } else {
                    walk.skip()
                }
            })
        })
    };
    match list_at {
        Some(_) => elements(&mut walk)?,
        None => walk.members(|walk, key| if key == list { elements(walk) } else { walk.skip() })?,
    }
    Some(spans)
}

/// A walk through text shown to be JSON, at `at`.
struct Walk<'t> {
    text: &'t str,
    at: usize,
}

impl<'t> Walk<'t> {
    fn next_token(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
        bytes.get(self.at).copied()
    }

    fn skip(&mut self) -> Option<()> {
        self.next_token()?;
        self.at = value_end(self.text.as_bytes(), self.at)?;
        Some(())
    }

    /// The value here, its span kept when it is an object.
    fn schema(&mut self, spans: &mut Vec<(usize, Range<usize>)>) -> Option<()> {
        let is_object = self.next_token()? == b'{';
        let start = self.at;
        self.skip()?;
        if is_object {
            spans.push((0, start..self.at));
        }
        Some(())
    }

    /// Each member of the object here, by its key, to `each`, which steps over its value; a value
    /// that is not an object is stepped over here.
    fn members(&mut self, mut each: impl FnMut(&mut Self, &'t str) -> Option<()>) -> Option<()> {
        if self.next_token()? != b'{' {
            return self.skip();
        }
        self.at += 1;
        if self.next_token()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            if self.next_token()? != b'"' {
                return None;
            }
            let end = string_end(self.text.as_bytes(), self.at)?;
            let key = self.text.get(self.at + 1..end - 1)?;
            if key.contains('\\') {
                return None;
            }
            self.at = end;
            if self.next_token()? != b':' {
                return None;
            }
            self.at += 1;
            each(self, key)?;
            match self.next_token()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Each element of the array here to `each`, which steps over it; a value that is not an
    /// array is stepped over here.
    fn elements(&mut self, mut each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.next_token()? != b'[' {
            return self.skip();
        }
        self.at += 1;
        if self.next_token()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            each(self)?;
            match self.next_token()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}
