//! Line edits of a `.env` file (Gemini CLI's `~/.gemini/.env`): `KEY=VALUE` lines, optionally
//! `export KEY=VALUE`, comments and blank lines. A key is read from, and changed on, the last line
//! that defines it (dotenv readers let the last definition win); every other line stays as it is.
//! Values are written unquoted when they are plain, double-quoted otherwise.

/// The whole line that defines `key` (without its line break), if any.
pub fn get_line(text: &str, key: &str) -> Option<String> {
    text.lines().rev().find(|l| defines(l, key)).map(|l| l.trim_end_matches('\r').to_string())
}

/// The value `key` is set to, unquoted.
pub fn get_value(text: &str, key: &str) -> Option<String> {
    let line = get_line(text, key)?;
    let (_, value) = line.split_once('=')?;
    Some(unquote(value.trim()))
}

/// Replace the line defining `key` with `line`, or append it; `None` removes the line.
pub fn set_line(text: &str, key: &str, line: Option<&str>) -> String {
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let found = lines.iter().rposition(|l| defines(l.trim_end_matches(['\n', '\r']), key));
    match (found, line) {
        (Some(i), Some(new)) => {
            let ending = &lines[i][lines[i].trim_end_matches(['\n', '\r']).len()..];
            let replaced = format!("{new}{ending}");
            let mut out: String = lines[..i].concat();
            out.push_str(&replaced);
            out.push_str(&lines[i + 1..].concat());
            out
        }
        (Some(i), None) => {
            lines.remove(i);
            lines.concat()
        }
        (None, Some(new)) => {
            let mut out = text.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(new);
            out.push('\n');
            out
        }
        (None, None) => text.to_string(),
    }
}

/// `KEY=value`, quoted when the value needs it.
pub fn line(key: &str, value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '@' | '+' | '%'));
    if plain {
        format!("{key}={value}")
    } else {
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        format!("{key}=\"{escaped}\"")
    }
}

fn defines(line: &str, key: &str) -> bool {
    let l = line.trim_start();
    let l = l.strip_prefix("export ").map(str::trim_start).unwrap_or(l);
    l.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
}

fn unquote(v: &str) -> String {
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        return v[1..v.len() - 1].replace("\\n", "\n").replace("\\\"", "\"").replace("\\\\", "\\");
    }
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        return v[1..v.len() - 1].to_string();
    }
    // An unquoted value ends at an inline comment.
    v.split(" #").next().unwrap_or(v).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENV: &str = "# Gemini\nGEMINI_API_KEY=old-key\nexport GOOGLE_CLOUD_PROJECT=\"my project\" \n\nDEBUG=1 # noisy\r\nGEMINI_API_KEY=newer-key\n";

    #[test]
    fn reads_the_last_definition() {
        assert_eq!(get_value(ENV, "GEMINI_API_KEY").as_deref(), Some("newer-key"));
        assert_eq!(get_value(ENV, "GOOGLE_CLOUD_PROJECT").as_deref(), Some("my project"));
        assert_eq!(get_value(ENV, "DEBUG").as_deref(), Some("1"));
        assert_eq!(get_value(ENV, "GEMINI").as_deref(), None);
        assert_eq!(get_line(ENV, "DEBUG").as_deref(), Some("DEBUG=1 # noisy"));
    }

    #[test]
    fn replaces_appends_and_removes_one_line() {
        let out = set_line(ENV, "GEMINI_API_KEY", Some("GEMINI_API_KEY=k"));
        assert_eq!(out, ENV.replace("GEMINI_API_KEY=newer-key", "GEMINI_API_KEY=k"));
        let out = set_line(ENV, "DEBUG", Some("DEBUG=0"));
        assert_eq!(out, ENV.replace("DEBUG=1 # noisy\r\n", "DEBUG=0\r\n"));
        let added = set_line(ENV, "GOOGLE_GEMINI_BASE_URL", Some("GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:3999"));
        assert_eq!(added, format!("{ENV}GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:3999\n"));
        assert_eq!(set_line(&added, "GOOGLE_GEMINI_BASE_URL", None), ENV);
        assert_eq!(set_line("A=1", "B", Some("B=2")), "A=1\nB=2\n");
        assert_eq!(set_line("", "B", Some("B=2")), "B=2\n");
        assert_eq!(set_line(ENV, "NOPE", None), ENV);
    }

    #[test]
    fn quotes_values_that_need_it() {
        assert_eq!(line("K", "sk-abc_12.3"), "K=sk-abc_12.3");
        assert_eq!(line("K", "http://127.0.0.1:3999/x"), "K=http://127.0.0.1:3999/x");
        assert_eq!(line("K", "a b\"c"), "K=\"a b\\\"c\"");
        let text = set_line("", "K", Some(&line("K", "a b\"c")));
        assert_eq!(get_value(&text, "K").as_deref(), Some("a b\"c"));
    }
}
