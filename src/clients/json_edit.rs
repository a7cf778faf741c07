//! Span-preserving edits of a JSON document: read, set or remove the value at a path of object
//! keys while every other byte of the text stays exactly as it was (key order, indentation,
//! number spellings, escapes, even `//` and `/* */` comments, which Gemini CLI's settings allow).
//!
//! Why not `serde_json::Value`: it would re-serialise the whole file, sorted by key (turning on
//! serde_json's `preserve_order` would keep the order, but cargo unifies features crate-wide and
//! every JSON the gateway emits would change shape). A client's settings file is the user's, full
//! of plugins, MCP servers and hooks; rewriting it wholesale is exactly what breaks them.
//!
//! The scanner validates the whole document (strict JSON plus comments and trailing commas, which
//! JSONC readers accept) and records, for every object, where each member's key and value are.
//! Edits splice text into those spans; a new member copies the indentation and the `": "` spelling
//! of its siblings.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for JsonError {}

/// A value's span, and for an object its members.
#[derive(Debug)]
struct Node {
    start: usize,
    end: usize,
    /// `Some` for objects.
    members: Option<Vec<Member>>,
}

#[derive(Debug)]
struct Member {
    key: String,
    key_start: usize,
    /// Just past the `:` and the whitespace after it: where the value starts.
    value: Node,
}

struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn err(&self, message: impl Into<String>) -> JsonError {
        let line = 1 + self.text[..self.pos.min(self.text.len())].iter().filter(|b| **b == b'\n').count();
        JsonError { line, message: message.into() }
    }

    /// Whitespace and comments.
    fn skip_ws(&mut self) -> Result<(), JsonError> {
        loop {
            match self.text.get(self.pos) {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') if self.text.get(self.pos + 1) == Some(&b'/') => {
                    while self.text.get(self.pos).is_some_and(|b| *b != b'\n') {
                        self.pos += 1;
                    }
                }
                Some(b'/') if self.text.get(self.pos + 1) == Some(&b'*') => {
                    let from = self.pos;
                    self.pos += 2;
                    loop {
                        match self.text.get(self.pos) {
                            None => {
                                self.pos = from;
                                return Err(self.err("unterminated /* comment"));
                            }
                            Some(b'*') if self.text.get(self.pos + 1) == Some(&b'/') => {
                                self.pos += 2;
                                break;
                            }
                            Some(_) => self.pos += 1,
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, JsonError> {
        if depth > 128 {
            return Err(self.err("nested too deeply"));
        }
        let start = self.pos;
        match self.text.get(self.pos) {
            Some(b'{') => self.object(depth),
            Some(b'[') => {
                self.pos += 1;
                self.skip_ws()?;
                if self.text.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(Node { start, end: self.pos, members: None });
                }
                loop {
                    self.value(depth + 1)?;
                    self.skip_ws()?;
                    match self.text.get(self.pos) {
                        Some(b',') => {
                            self.pos += 1;
                            self.skip_ws()?;
                            if self.text.get(self.pos) == Some(&b']') {
                                self.pos += 1;
                                break;
                            }
                        }
                        Some(b']') => {
                            self.pos += 1;
                            break;
                        }
                        _ => return Err(self.err("expected ',' or ']' in an array")),
                    }
                }
                Ok(Node { start, end: self.pos, members: None })
            }
            Some(b'"') => {
                self.string()?;
                Ok(Node { start, end: self.pos, members: None })
            }
            Some(b't') => self.literal(b"true", start),
            Some(b'f') => self.literal(b"false", start),
            Some(b'n') => self.literal(b"null", start),
            Some(b'-' | b'0'..=b'9') => {
                while self
                    .text
                    .get(self.pos)
                    .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    self.pos += 1;
                }
                let raw = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or("");
                if serde_json::from_str::<serde_json::Number>(raw).is_err() {
                    self.pos = start;
                    return Err(self.err(format!("'{raw}' is not a JSON number")));
                }
                Ok(Node { start, end: self.pos, members: None })
            }
            Some(_) => Err(self.err("expected a value")),
            None => Err(self.err("unexpected end of the file")),
        }
    }

    fn literal(&mut self, word: &[u8], start: usize) -> Result<Node, JsonError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(Node { start, end: self.pos, members: None })
        } else {
            Err(self.err("expected a value"))
        }
    }

    /// A string; returns it decoded (keys are compared decoded).
    fn string(&mut self) -> Result<String, JsonError> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.text.get(self.pos) {
                None => {
                    self.pos = start;
                    return Err(self.err("unterminated string"));
                }
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => self.pos += 2,
                Some(b) if *b < 0x20 => return Err(self.err("control character in a string")),
                Some(_) => self.pos += 1,
            }
        }
        let raw = std::str::from_utf8(&self.text[start..self.pos]).map_err(|_| self.err("invalid UTF-8"))?;
        serde_json::from_str::<String>(raw).map_err(|e| self.err(format!("bad string: {e}")))
    }

    fn object(&mut self, depth: usize) -> Result<Node, JsonError> {
        let start = self.pos;
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws()?;
        if self.text.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Node { start, end: self.pos, members: Some(members) });
        }
        loop {
            if self.text.get(self.pos) != Some(&b'"') {
                return Err(self.err("expected a quoted key"));
            }
            let key_start = self.pos;
            let key = self.string()?;
            self.skip_ws()?;
            if self.text.get(self.pos) != Some(&b':') {
                return Err(self.err("expected ':' after a key"));
            }
            self.pos += 1;
            self.skip_ws()?;
            let value = self.value(depth + 1)?;
            members.push(Member { key, key_start, value });
            self.skip_ws()?;
            match self.text.get(self.pos) {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws()?;
                    if self.text.get(self.pos) == Some(&b'}') {
                        self.pos += 1;
                        break;
                    }
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.err("expected ',' or '}' in an object")),
            }
        }
        Ok(Node { start, end: self.pos, members: Some(members) })
    }
}

fn parse(text: &str) -> Result<Node, JsonError> {
    let mut s = Scanner { text: text.as_bytes(), pos: 0 };
    s.skip_ws()?;
    let root = s.value(0)?;
    s.skip_ws()?;
    if s.pos != text.len() {
        return Err(s.err("unexpected text after the document"));
    }
    if root.members.is_none() {
        return Err(JsonError { line: 1, message: "the document is not a JSON object".into() });
    }
    Ok(root)
}

/// Check that `text` is a JSON object this module can edit.
pub fn validate(text: &str) -> Result<(), JsonError> {
    parse(text).map(|_| ())
}

/// The member `key` of an object node.
fn member<'n>(node: &'n Node, key: &str) -> Option<&'n Member> {
    // The last one wins, as in JavaScript's JSON.parse.
    node.members.as_ref()?.iter().rev().find(|m| m.key == key)
}

/// The raw text of the value at `path`, if every step exists.
pub fn get(text: &str, path: &[&str]) -> Result<Option<String>, JsonError> {
    let root = parse(text)?;
    let mut node = &root;
    for key in path {
        match member(node, key) {
            Some(m) => node = &m.value,
            None => return Ok(None),
        }
    }
    Ok(Some(text[node.start..node.end].to_string()))
}

/// Whether the object at `path` exists and has no members.
pub fn is_empty_object(text: &str, path: &[&str]) -> Result<bool, JsonError> {
    let root = parse(text)?;
    let mut node = &root;
    for key in path {
        match member(node, key) {
            Some(m) => node = &m.value,
            None => return Ok(false),
        }
    }
    Ok(node.members.as_ref().is_some_and(Vec::is_empty))
}

/// Set the value at `path` to `raw` (JSON text), creating missing objects on the way; `None`
/// removes the member (nothing happens when it is absent).
pub fn set(text: &str, path: &[&str], raw: Option<&str>) -> Result<String, JsonError> {
    let Some((last, parents)) = path.split_last() else {
        return Err(JsonError { line: 1, message: "empty path".into() });
    };
    let root = parse(text)?;
    let mut node = &root;
    let mut depth = 0;
    for key in parents {
        match member(node, key) {
            Some(m) if m.value.members.is_some() => {
                node = &m.value;
                depth += 1;
            }
            Some(_) => {
                return Err(JsonError {
                    line: line_of(text, node.start),
                    message: format!("'{}' is not an object", path[..=depth].join(".")),
                });
            }
            None => {
                let Some(raw) = raw else { return Ok(text.to_string()) };
                // Build the missing objects around the value, then insert that as one member.
                let style = Style::of(text, node);
                let missing = &path[depth + 1..];
                let mut value = raw.to_string();
                for (i, k) in missing.iter().enumerate().rev() {
                    // The object holding `missing[i]` has its members `i + 1` levels below the node's.
                    let level = style.level + 1 + i;
                    value = style.object_with(k, &value, level);
                }
                return Ok(insert_member(text, node, key, &value, &style));
            }
        }
    }
    match (member(node, last), raw) {
        (Some(m), Some(raw)) => {
            Ok(format!("{}{}{}", &text[..m.value.start], reindent(raw, &Style::of(text, node)), &text[m.value.end..]))
        }
        (Some(m), None) => Ok(remove_member(text, node, m)),
        (None, Some(raw)) => {
            let style = Style::of(text, node);
            let value = reindent(raw, &style);
            Ok(insert_member(text, node, last, &value, &style))
        }
        (None, None) => Ok(text.to_string()),
    }
}

fn line_of(text: &str, pos: usize) -> usize {
    1 + text.as_bytes()[..pos].iter().filter(|b| **b == b'\n').count()
}

/// How an object's members are laid out, copied for inserted members.
struct Style {
    /// One indentation step (`"  "`, `"    "`, `"\t"`), or empty for a one-line object.
    unit: String,
    /// Nesting level of the object's members (root members: 1).
    level: usize,
    /// Between a key and its value.
    colon: String,
    /// Whether members go on their own lines.
    multiline: bool,
}

impl Style {
    fn of(text: &str, node: &Node) -> Style {
        let members = node.members.as_deref().unwrap_or_default();
        let colon = members
            .first()
            .map(|m| {
                let after_key = m.key_start + quoted_len(&text[m.key_start..]);
                text[after_key..m.value.start].to_string()
            })
            .unwrap_or_else(|| ": ".to_string());
        let line_indent = |pos: usize| {
            let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
            let indent: String = text[line_start..].chars().take_while(|c| *c == ' ' || *c == '\t').collect();
            indent
        };
        let own = line_indent(node.start);
        let multiline = match members.first() {
            Some(m) => text[node.start..m.key_start].contains('\n'),
            None => node.start == 0 || text[..node.start].contains('\n') || !text.contains('\n'),
        };
        let unit = match members.first() {
            Some(m) if multiline => {
                let inner = line_indent(m.key_start);
                inner.strip_prefix(own.as_str()).filter(|u| !u.is_empty()).unwrap_or("  ").to_string()
            }
            _ => detect_unit(text),
        };
        let level = if unit.is_empty() { 1 } else { own.len() / unit.len().max(1) + 1 };
        Style { unit, level, colon: if colon.trim() == ":" { colon } else { ": ".into() }, multiline }
    }

    fn indent(&self, level: usize) -> String {
        self.unit.repeat(level)
    }

    /// `{ "key": value }` laid out at `level` (the level of its members).
    fn object_with(&self, key: &str, value: &str, level: usize) -> String {
        let key = serde_json::to_string(key).unwrap_or_default();
        if self.multiline {
            format!("{{\n{}{key}{}{value}\n{}}}", self.indent(level), self.colon, self.indent(level - 1))
        } else {
            format!("{{{key}{}{value}}}", self.colon)
        }
    }
}

/// The indentation step the file uses elsewhere, two spaces when it shows none.
fn detect_unit(text: &str) -> String {
    text.lines()
        .skip(1)
        .map(|l| l.chars().take_while(|c| *c == ' ' || *c == '\t').collect::<String>())
        .find(|i| !i.is_empty())
        .unwrap_or_else(|| "  ".to_string())
}

fn quoted_len(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// A multi-line value written at the depth of the members of `style`'s object.
fn reindent(raw: &str, style: &Style) -> String {
    if !raw.contains('\n') {
        return raw.to_string();
    }
    let pad = style.indent(style.level);
    raw.lines()
        .enumerate()
        .map(|(i, l)| if i == 0 { l.to_string() } else { format!("{pad}{l}") })
        .collect::<Vec<_>>()
        .join("\n")
}

fn insert_member(text: &str, node: &Node, key: &str, value: &str, style: &Style) -> String {
    let key = serde_json::to_string(key).unwrap_or_default();
    let members = node.members.as_deref().unwrap_or_default();
    match members.last() {
        Some(last) => {
            // After the last member's value: ",<the whitespace before the last key>"key": value".
            let sep_start = members.len().checked_sub(2).map(|i| members[i].value.end).unwrap_or(node.start + 1);
            let between = &text[sep_start..last.key_start];
            let ws = between.trim_start_matches([',', ' ', '\t']);
            let ws = if ws.contains("//") || ws.contains("/*") {
                // Comments between members belong where they are; copy only the line break and indentation.
                format!("\n{}", style.indent(style.level))
            } else if style.multiline {
                let line_break = between.rfind('\n').map(|i| &between[i..]).unwrap_or("\n");
                line_break.to_string()
            } else if members.len() == 1 {
                // No sibling to copy the gap from: spaced like the key and its value.
                if style.colon.ends_with(' ') { " ".to_string() } else { String::new() }
            } else {
                between.trim_start_matches(',').to_string()
            };
            // A trailing comma after the last member stays where it is.
            let after_last = &text[last.value.end..node.end - 1];
            let trailing_comma = after_last.trim_start().starts_with(',');
            let insert_at = last.value.end;
            if trailing_comma {
                let comma = insert_at + after_last.find(',').unwrap_or(0) + 1;
                format!("{}{ws}{key}{}{value},{}", &text[..comma], style.colon, &text[comma..])
            } else {
                format!("{},{ws}{key}{}{value}{}", &text[..insert_at], style.colon, &text[insert_at..])
            }
        }
        None => {
            let inner = &text[node.start + 1..node.end - 1];
            let close_at = node.end - 1;
            if style.multiline {
                let outer = style.indent(style.level - 1);
                let body = format!("\n{}{key}{}{value}\n{outer}", style.indent(style.level), style.colon);
                // Keep comments inside an empty object; drop only its blank whitespace.
                let keep = inner.trim();
                let keep =
                    if keep.is_empty() { String::new() } else { format!("\n{}{keep}", style.indent(style.level)) };
                format!("{}{keep}{body}{}", &text[..node.start + 1], &text[close_at..])
            } else {
                format!("{}{key}{}{value}{}", &text[..node.start + 1], style.colon, &text[close_at..])
            }
        }
    }
}

fn remove_member(text: &str, node: &Node, m: &Member) -> String {
    let members = node.members.as_deref().unwrap_or_default();
    let idx = members.iter().position(|x| std::ptr::eq(x, m)).unwrap_or(0);
    if let Some(next) = members.get(idx + 1) {
        // Up to the next member's key: the member, its comma and the whitespace before the next.
        let from = line_start_if_blank_before(text, m.key_start);
        let to = line_start_if_blank_before(text, next.key_start);
        format!("{}{}", &text[..from], &text[to..])
    } else if idx > 0 {
        // The last of several: from the end of the previous value, comma included.
        // A trailing comma after it stays, for the member that is now last.
        format!("{}{}", &text[..members[idx - 1].value.end], &text[m.value.end..])
    } else {
        // The only member: the object becomes `{}` (comments inside it go too).
        format!("{}{}", &text[..node.start + 1], &text[node.end - 1..])
    }
}

/// `pos`, moved back to the start of its line when only indentation precedes it there.
fn line_start_if_blank_before(text: &str, pos: usize) -> usize {
    let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    if text[line_start..pos].chars().all(|c| c == ' ' || c == '\t') { line_start } else { pos }
}

/// The key of the member that follows the one at `path` in its object.
pub fn next_key(text: &str, path: &[&str]) -> Result<Option<String>, JsonError> {
    let Some((last, parents)) = path.split_last() else { return Ok(None) };
    let root = parse(text)?;
    let mut node = &root;
    for key in parents {
        match member(node, key) {
            Some(m) => node = &m.value,
            None => return Ok(None),
        }
    }
    let members = node.members.as_deref().unwrap_or_default();
    let idx = members.iter().rposition(|m| m.key == *last);
    Ok(idx.and_then(|i| members.get(i + 1)).map(|m| m.key.clone()))
}

/// Add the member at `path` just before its sibling `before` (where it was before it was removed);
/// anywhere `set` would put it when the member exists already or `before` is gone.
pub fn insert_before(text: &str, path: &[&str], raw: &str, before: &str) -> Result<String, JsonError> {
    let Some((last, parents)) = path.split_last() else { return set(text, path, Some(raw)) };
    let root = parse(text)?;
    let mut node = &root;
    for key in parents {
        match member(node, key) {
            Some(m) if m.value.members.is_some() => node = &m.value,
            _ => return set(text, path, Some(raw)),
        }
    }
    if member(node, last).is_some() {
        return set(text, path, Some(raw));
    }
    let Some(next) = member(node, before) else { return set(text, path, Some(raw)) };
    let style = Style::of(text, node);
    let line_start = text[..next.key_start].rfind('\n').map_or(0, |i| i + 1);
    let lead = &text[line_start..next.key_start];
    let gap = if style.multiline && lead.chars().all(|c| c == ' ' || c == '\t') {
        format!("\n{lead}")
    } else {
        " ".to_string()
    };
    Ok(format!(
        "{}{}{}{},{gap}{}",
        &text[..next.key_start],
        string(last),
        style.colon,
        reindent(raw, &style),
        &text[next.key_start..]
    ))
}

/// A JSON string literal.
pub fn string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The decoded string at `path`, if it is one.
pub fn get_string(text: &str, path: &[&str]) -> Result<Option<String>, JsonError> {
    Ok(get(text, path)?.and_then(|raw| serde_json::from_str::<String>(&raw).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": ["Bash(npm run test:*)", "Read(~/.zshrc)"],
    "deny": []
  },
  "env": {
    "ANTHROPIC_API_KEY": "sk-ant-old-0000",
    "DISABLE_TELEMETRY": "1"
  },
  "enabledPlugins": {"formatter@acme": true},
  "hooks": {
    "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write \"$FILE\""}]}]
  },
  "model": "opus",
  "cleanupPeriodDays": 1e2
}
"#;

    #[test]
    fn get_reads_raw_values_and_absent_paths() {
        assert_eq!(get(SETTINGS, &["env", "DISABLE_TELEMETRY"]).unwrap().as_deref(), Some("\"1\""));
        assert_eq!(get(SETTINGS, &["cleanupPeriodDays"]).unwrap().as_deref(), Some("1e2"));
        assert_eq!(get(SETTINGS, &["env", "NOPE"]).unwrap(), None);
        assert_eq!(get(SETTINGS, &["nope", "deeper"]).unwrap(), None);
        assert_eq!(get_string(SETTINGS, &["model"]).unwrap().as_deref(), Some("opus"));
    }

    #[test]
    fn replacing_a_value_touches_only_its_bytes() {
        let out = set(SETTINGS, &["env", "DISABLE_TELEMETRY"], Some("\"0\"")).unwrap();
        assert_eq!(out, SETTINGS.replace("\"DISABLE_TELEMETRY\": \"1\"", "\"DISABLE_TELEMETRY\": \"0\""));
    }

    #[test]
    fn inserting_copies_the_siblings_layout() {
        let out = set(SETTINGS, &["env", "ANTHROPIC_BASE_URL"], Some("\"http://127.0.0.1:3999\"")).unwrap();
        assert_eq!(
            out,
            SETTINGS.replace(
                "\"DISABLE_TELEMETRY\": \"1\"\n",
                "\"DISABLE_TELEMETRY\": \"1\",\n    \"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:3999\"\n"
            )
        );
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
    }

    #[test]
    fn removing_the_first_middle_or_last_member_leaves_valid_json_and_the_rest_intact() {
        let first = set(SETTINGS, &["env", "ANTHROPIC_API_KEY"], None).unwrap();
        assert_eq!(first, SETTINGS.replace("    \"ANTHROPIC_API_KEY\": \"sk-ant-old-0000\",\n", ""));
        let last = set(SETTINGS, &["cleanupPeriodDays"], None).unwrap();
        assert_eq!(last, SETTINGS.replace(",\n  \"cleanupPeriodDays\": 1e2", ""));
        let middle = set(SETTINGS, &["enabledPlugins"], None).unwrap();
        assert_eq!(middle, SETTINGS.replace("  \"enabledPlugins\": {\"formatter@acme\": true},\n", ""));
        for t in [first, last, middle] {
            serde_json::from_str::<serde_json::Value>(&t).unwrap();
        }
    }

    #[test]
    fn insert_then_remove_round_trips_byte_for_byte() {
        for path in [&["env", "ANTHROPIC_BASE_URL"][..], &["newTop"], &["permissions", "ask"], &["a", "b", "c"]] {
            let added = set(SETTINGS, path, Some("\"x\"")).unwrap();
            serde_json::from_str::<serde_json::Value>(&added).unwrap();
            let mut back = set(&added, path, None).unwrap();
            // Objects created on the way are removed by the caller (prune), deepest first.
            for depth in (1..path.len()).rev() {
                if is_empty_object(&back, &path[..depth]).unwrap() {
                    back = set(&back, &path[..depth], None).unwrap();
                }
            }
            assert_eq!(back, SETTINGS, "path {path:?}");
        }
    }

    #[test]
    fn missing_parents_are_created_with_the_files_indentation() {
        let out =
            set("{\n    \"a\": 1\n}\n", &["security", "auth", "selectedType"], Some("\"gemini-api-key\"")).unwrap();
        assert_eq!(
            out,
            "{\n    \"a\": 1,\n    \"security\": {\n        \"auth\": {\n            \"selectedType\": \"gemini-api-key\"\n        }\n    }\n}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["security"]["auth"]["selectedType"], "gemini-api-key");
    }

    #[test]
    fn empty_and_one_line_objects() {
        assert_eq!(set("{}", &["a"], Some("1")).unwrap(), "{\n  \"a\": 1\n}");
        assert_eq!(set("{}\n", &["env", "X"], Some("\"y\"")).unwrap(), "{\n  \"env\": {\n    \"X\": \"y\"\n  }\n}\n");
        assert_eq!(set("{\"a\":1}", &["b"], Some("2")).unwrap(), "{\"a\":1,\"b\":2}");
        assert_eq!(set("{\"a\": 1, \"b\": 2}", &["a"], None).unwrap(), "{\"b\": 2}");
        assert_eq!(set("{\"a\": 1}", &["a"], None).unwrap(), "{}");
        assert_eq!(set("{\n  \"a\": 1\n}\n", &["a"], None).unwrap(), "{}\n");
    }

    #[test]
    fn comments_and_trailing_commas_survive() {
        let text = "{\n  // where the CLI looks\n  \"general\": {\"vimMode\": true,},\n  /* ui */\n  \"ui\": {\"theme\": \"Dracula\"}\n}\n";
        let out = set(text, &["security", "auth", "selectedType"], Some("\"gemini-api-key\"")).unwrap();
        assert!(
            out.starts_with("{\n  // where the CLI looks\n  \"general\": {\"vimMode\": true,},\n  /* ui */\n"),
            "{out}"
        );
        assert_eq!(get_string(&out, &["security", "auth", "selectedType"]).unwrap().as_deref(), Some("gemini-api-key"));
        let added = set(text, &["general", "x"], Some("1")).unwrap();
        assert_eq!(get(&added, &["general", "x"]).unwrap().as_deref(), Some("1"));
        assert_eq!(set(&added, &["general", "x"], None).unwrap(), text);
    }

    #[test]
    fn duplicate_keys_edit_the_last_as_json_parse_reads_it() {
        let text = "{\"a\": 1, \"a\": 2}";
        assert_eq!(get(text, &["a"]).unwrap().as_deref(), Some("2"));
        assert_eq!(set(text, &["a"], Some("3")).unwrap(), "{\"a\": 1, \"a\": 3}");
    }

    #[test]
    fn invalid_documents_are_refused_with_a_line() {
        for bad in ["", "[]", "{\"a\": }", "{\"a\": 1", "{\"a\": 1} x", "{a: 1}", "{\"a\": 01.}", "{\"a\": \"\u{1}\"}"]
        {
            let e = validate(bad).unwrap_err();
            assert!(e.line >= 1, "{bad}");
        }
        assert_eq!(validate("{\n\"a\": tru\n}").unwrap_err().line, 2);
        assert!(set("{\"env\": 3}", &["env", "X"], Some("1")).unwrap_err().message.contains("'env' is not an object"));
    }

    #[test]
    fn a_removed_member_goes_back_where_it_was() {
        let path = ["env", "ANTHROPIC_API_KEY"];
        let next = next_key(SETTINGS, &path).unwrap().unwrap();
        assert_eq!(next, "DISABLE_TELEMETRY");
        let raw = get(SETTINGS, &path).unwrap().unwrap();
        let removed = set(SETTINGS, &path, None).unwrap();
        assert_eq!(insert_before(&removed, &path, &raw, &next).unwrap(), SETTINGS);
        let one_line = "{\"a\": 1, \"b\": 2}";
        assert_eq!(insert_before("{\"b\": 2}", &["a"], "1", "b").unwrap(), one_line);
        // The sibling is gone: at the end, as `set` would.
        assert_eq!(insert_before("{\"c\": 3}", &["a"], "1", "b").unwrap(), "{\"c\": 3, \"a\": 1}");
        assert_eq!(next_key(one_line, &["b"]).unwrap(), None);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;
        use serde_json::{Map, Value, json};

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i32>().prop_map(Value::from),
                "[a-z \"\\\\é]{0,6}".prop_map(Value::from),
            ]
        }

        fn object() -> impl Strategy<Value = Map<String, Value>> {
            let value = leaf().prop_recursive(3, 16, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                    prop::collection::btree_map("[a-e]{1,2}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            });
            prop::collection::btree_map("[a-e]{1,2}", value, 0..5).prop_map(|m| m.into_iter().collect())
        }

        proptest! {
            /// On any object, in either layout: setting a key gives exactly the document with that
            /// key set, and removing a key that was not there before (then the objects made for
            /// it) gives back the original text byte for byte.
            #[test]
            fn set_then_remove_round_trips(doc in object(), path in prop::collection::vec("[a-f]{1,2}", 1..4), pretty in any::<bool>()) {
                let original = if pretty { serde_json::to_string_pretty(&doc).unwrap() } else { serde_json::to_string(&doc).unwrap() };
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                let parsed: Value = Value::Object(doc.clone());
                // Where the path runs into a non-object the editor refuses, as it should.
                let blocked = (1..path.len()).any(|d| {
                    let mut v = &parsed;
                    for k in &path[..d] {
                        match v.get(k) { Some(x) => v = x, None => return false }
                    }
                    !v.is_object()
                });
                let result = set(&original, &path, Some("\"ccmesh\""));
                if blocked {
                    prop_assert!(result.is_err());
                    return Ok(());
                }
                let added = result.unwrap();
                let mut expected = parsed.clone();
                let mut slot = &mut expected;
                for k in &path[..path.len() - 1] {
                    if slot.get(*k).is_none() {
                        slot[*k] = json!({});
                    }
                    slot = &mut slot[*k];
                }
                let existed = slot.get(path[path.len() - 1]).is_some();
                slot[path[path.len() - 1]] = json!("ccmesh");
                prop_assert_eq!(serde_json::from_str::<Value>(&added).unwrap(), expected);
                let read_back = get_string(&added, &path).unwrap();
                prop_assert_eq!(read_back.as_deref(), Some("ccmesh"));
                if !existed {
                    let mut back = set(&added, &path, None).unwrap();
                    for depth in (1..path.len()).rev() {
                        let made = {
                            let mut v = &parsed;
                            path[..depth].iter().any(|k| match v.get(*k) { Some(x) => { v = x; false } None => true })
                        };
                        if made && is_empty_object(&back, &path[..depth]).unwrap() {
                            back = set(&back, &path[..depth], None).unwrap();
                        }
                    }
                    prop_assert_eq!(back, original);
                }
            }
        }
    }

    #[test]
    fn keys_are_compared_decoded() {
        let text = "{\"\\u0065nv\": {\"X\": 1}}";
        assert_eq!(get(text, &["env", "X"]).unwrap().as_deref(), Some("1"));
    }
}
