//! A client key's secret: `ccm-` and 43 base62 characters (the 256 bits of 32 random bytes from
//! the operating system), shown once and stored only as its SHA-256. A secret declared in the
//! config file (`[[keys]] secret = "${ENV}"`) may have any shape of at least
//! [`MIN_DECLARED_LEN`] characters; it is hashed when the file is read.

use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};

/// What every minted secret starts with (a redactor, a log reader, a secret scanner can tell a
/// ccmesh client key from an upstream key at a glance).
pub const PREFIX: &str = "ccm-";
/// Random bytes behind a minted secret.
const RANDOM_BYTES: usize = 32;
/// Base62 digits of 32 bytes: ⌈256 / log2(62)⌉.
const DIGITS: usize = 43;
/// The shortest secret a config file may declare: shorter ones can be guessed.
pub const MIN_DECLARED_LEN: usize = 32;
/// The longest credential compared at all (a client may send megabytes in a header).
pub const MAX_LEN: usize = 512;
/// Characters of the secret kept to recognise it (`ccm-` and 8 more).
const SHOWN: usize = 12;

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The SHA-256 of a secret: all the gateway keeps of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash(pub [u8; 32]);

impl std::fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The hash is not the secret, but it is not for logs either.
        f.write_str("SecretHash(…)")
    }
}

impl SecretHash {
    pub fn of(secret: &str) -> SecretHash {
        let d = digest::digest(&digest::SHA256, secret.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        SecretHash(out)
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(hex: &str) -> Option<SecretHash> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok()?;
        }
        Some(SecretHash(out))
    }
}

/// A new secret, or `None` if the operating system's random source failed (no key is better
/// than a guessable one).
pub fn generate() -> Option<String> {
    let mut bytes = [0u8; RANDOM_BYTES];
    SystemRandom::new().fill(&mut bytes).ok()?;
    Some(format!("{PREFIX}{}", base62(&bytes)))
}

/// `bytes` as one big-endian number in base 62, zero-padded to [`DIGITS`] characters.
fn base62(bytes: &[u8; RANDOM_BYTES]) -> String {
    let mut number = bytes.to_vec();
    let mut digits = Vec::with_capacity(DIGITS);
    while digits.len() < DIGITS {
        // One long division of the number by 62; the remainder is the next digit.
        let mut remainder = 0u32;
        for byte in number.iter_mut() {
            let acc = (remainder << 8) | u32::from(*byte);
            *byte = (acc / 62) as u8;
            remainder = acc % 62;
        }
        digits.push(ALPHABET[remainder as usize]);
    }
    digits.reverse();
    String::from_utf8_lossy(&digits).into_owned()
}

/// What lists show of a secret: its first characters and an ellipsis (`ccm-4fQ2x9Ab…`).
pub fn prefix(secret: &str) -> String {
    let shown: String = secret.chars().take(SHOWN).collect();
    if secret.chars().count() < 4 + DIGITS {
        // A declared secret shorter than a minted one: show only its first characters.
        let head: String = secret.chars().take(4).collect();
        return format!("{head}…");
    }
    format!("{shown}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_prefixed_base62_of_32_random_bytes() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("ccm-"));
        assert_eq!(a.len(), 4 + DIGITS);
        assert!(a[4..].bytes().all(|c| c.is_ascii_alphanumeric()), "{a}");
        // 62^43 > 2^256 > 62^42: 43 digits hold every 32-byte number and no fewer would.
        assert!(43.0 * 62f64.log2() >= 256.0 && 42.0 * 62f64.log2() < 256.0);
    }

    #[test]
    fn base62_is_the_number_in_base_62() {
        let mut one = [0u8; 32];
        one[31] = 61;
        assert_eq!(base62(&one), format!("{}z", "0".repeat(42)));
        one[31] = 62;
        assert_eq!(base62(&one), format!("{}10", "0".repeat(41)));
        assert_eq!(base62(&[0xff; 32]).len(), DIGITS);
    }

    #[test]
    fn the_hash_round_trips_through_hex_and_hides_in_debug() {
        let h = SecretHash::of("ccm-test");
        assert_eq!(SecretHash::from_hex(&h.to_hex()), Some(h));
        // printf %s ccm-test | sha256sum
        assert_eq!(h.to_hex(), "cddf6cafb96fea07bdab4584db25bcc3cfb731bea6038908a1ecd9ac9447d026");
        assert_eq!(SecretHash::from_hex("zz"), None);
        assert_eq!(format!("{h:?}"), "SecretHash(…)");
    }

    #[test]
    fn prefixes_show_little() {
        let s = "ccm-4fQ2x9AbCdEfGhIjKlMnOpQrStUvWxYz0123456789a";
        assert_eq!(prefix(s), "ccm-4fQ2x9Ab…");
        assert_eq!(prefix("a-declared-secret-of-32-characters"), "a-de…");
    }
}
