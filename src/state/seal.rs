//! Sealing kafka-dlq's state records: with a shared [`StateKey`], every record written to the
//! audit and positions topics carries an HMAC-SHA256 of its key and value in the header
//! [`HEADER_SEAL`], and every reader (the monitor, the console, the tools) ignores a record
//! whose seal is missing or wrong. Whoever can produce to those topics but does not hold the
//! key cannot forge a discard, a redrive or a replay position; a record written before the
//! key was configured is ignored too (`kafka-dlq dlq seal` seals those once).
//!
//! A seal binds a record's value to its key, so a position cannot be moved to another group
//! or partition; it does not stop a record once sealed from being written again (an old
//! position replayed), which the topics' ACLs stop (`docs/operating.md`).

use std::sync::Arc;

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// The header holding a state record's seal: 64 lowercase hex digits.
pub const HEADER_SEAL: &str = "kafka_dlq-seal";

/// A key shorter than this many bytes is refused: a guessable key seals nothing.
pub const MIN_KEY_BYTES: usize = 16;

/// The key shared by every tool that writes or reads kafka-dlq's state (`audit_key`). Its
/// bytes never print.
#[derive(Clone)]
pub struct StateKey(Arc<[u8]>);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(<redacted>)")
    }
}

/// A key that cannot seal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit_key: {MIN_KEY_BYTES} bytes at least (this one has {0}); make one with `openssl rand -hex 32`")]
pub struct StateKeyTooShort(pub usize);

impl StateKey {
    /// The key of `text`, trimmed of surrounding white space (a key read from a file ends with
    /// a newline); at least [`MIN_KEY_BYTES`] bytes.
    pub fn new(text: &str) -> Result<StateKey, StateKeyTooShort> {
        let bytes = text.trim().as_bytes();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(StateKeyTooShort(bytes.len()));
        }
        Ok(StateKey(bytes.into()))
    }

    /// The seal of a record with `key` and `value`: HMAC-SHA256 over the key's length (4 bytes,
    /// big-endian), the key and the value, as lowercase hex.
    pub fn seal(&self, key: &[u8], value: &[u8]) -> String {
        let mac = self.mac(key, value);
        mac.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `seal` is the seal of `key` and `value` (compared in constant time).
    pub fn verifies(&self, key: &[u8], value: &[u8], seal: &[u8]) -> bool {
        let expected = self.seal(key, value);
        seal.len() == expected.len() && openssl::memcmp::eq(seal, expected.as_bytes())
    }

    fn mac(&self, key: &[u8], value: &[u8]) -> Vec<u8> {
        // OpenSSL's HMAC cannot fail on a non-empty key and SHA-256.
        let pkey = PKey::hmac(&self.0).expect("an HMAC key");
        let mut signer = Signer::new(MessageDigest::sha256(), &pkey).expect("HMAC-SHA256");
        let length = u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes();
        signer.update(&length).expect("HMAC update");
        signer.update(key).expect("HMAC update");
        signer.update(value).expect("HMAC update");
        signer.sign_to_vec().expect("HMAC final")
    }
}

/// Whether a state record may be believed: with no key configured every record is; with one,
/// only a record whose `seal` (the [`HEADER_SEAL`] header's value) verifies.
pub fn trusted(
    key: Option<&StateKey>,
    record_key: &[u8],
    value: &[u8],
    seal: Option<&[u8]>,
) -> bool {
    match key {
        None => true,
        Some(k) => seal.is_some_and(|s| k.verifies(record_key, value, s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_verifies_only_its_own_key_and_value() {
        let key = StateKey::new("0123456789abcdef0123\n").unwrap();
        let seal = key.seal(b"orders-dlt", br#"{"action":"discard"}"#);
        assert_eq!(seal.len(), 64);
        assert!(key.verifies(b"orders-dlt", br#"{"action":"discard"}"#, seal.as_bytes()));
        assert!(!key.verifies(b"orders-dlt", br#"{"action":"restore"}"#, seal.as_bytes()));
        assert!(!key.verifies(b"payments-dlt", br#"{"action":"discard"}"#, seal.as_bytes()));
        // The key's length is sealed: bytes cannot move between key and value.
        assert_ne!(key.seal(b"ab", b"c"), key.seal(b"a", b"bc"));
        let other = StateKey::new("another key of 16+ bytes").unwrap();
        assert!(!other.verifies(b"orders-dlt", br#"{"action":"discard"}"#, seal.as_bytes()));
    }

    #[test]
    fn without_a_key_every_record_is_trusted_and_with_one_only_sealed_ones() {
        let key = StateKey::new("0123456789abcdef").unwrap();
        let seal = key.seal(b"k", b"v");
        assert!(trusted(None, b"k", b"v", None));
        assert!(trusted(Some(&key), b"k", b"v", Some(seal.as_bytes())));
        assert!(!trusted(Some(&key), b"k", b"v", None));
        assert!(!trusted(Some(&key), b"k", b"v", Some(b"00")));
        assert!(!trusted(Some(&key), b"k", b"v2", Some(seal.as_bytes())));
    }

    #[test]
    fn a_short_key_is_refused_and_no_key_prints() {
        assert_eq!(
            StateKey::new("  short \n").unwrap_err(),
            StateKeyTooShort(5)
        );
        let key = StateKey::new("a secret of sixteen bytes").unwrap();
        assert_eq!(format!("{key:?}"), "StateKey(<redacted>)");
    }
}
