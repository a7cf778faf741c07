//! Secrets compared and shown safely: equality whose timing does not reveal where two tokens
//! differ, and the mask under which a key is shown (`sk-…c3f9`).

/// Length leaks (it is not secret in practice); contents do not.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `sk-ant-api03-…c3f9`-style masking: enough to recognise a key, never enough to use it.
pub fn mask_secret(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    if chars.len() < 12 {
        return "…".to_string();
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_contents() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token", b"secret-tokem"));
        assert!(!constant_time_eq(b"Secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"short", b"longer"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn masking_never_reveals_more_than_prefix_and_last_four() {
        assert_eq!(mask_secret("sk-ant-api03-abcdefghijc3f9"), "sk-…c3f9");
        assert_eq!(mask_secret("short"), "…");
        assert_eq!(mask_secret(""), "");
    }
}
