//! A session kept in its cookie, sealed: who it is for, its CSRF token and when it ends,
//! encrypted and authenticated with AES-256-GCM under the console's session key. Any replica
//! holding the key opens it, and it survives restarts; nothing of it can be read or changed
//! without the key. What the session may do is not sealed in it: the grants in force decide at
//! each request. Pure.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What the additional authenticated data says: a sealed session of this console, version 1.
const AAD: &[u8] = b"kafka-dlq console session v1";
/// The nonce's length (GCM's 96 bits).
const NONCE: usize = 12;
/// The tag's length.
const TAG: usize = 16;

/// The key sessions are sealed with.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

/// A session key that is too short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the session key has {0} characters; at least 32 are needed (`openssl rand -hex 32` makes one)"
)]
pub struct ShortKey(usize);

impl SessionKey {
    /// The key `secret` (at least 32 characters) stands for: its SHA-256.
    pub fn from_secret(secret: &str) -> Result<SessionKey, ShortKey> {
        let secret = secret.trim();
        if secret.chars().count() < 32 {
            return Err(ShortKey(secret.chars().count()));
        }
        Ok(SessionKey(openssl::sha::sha256(secret.as_bytes())))
    }

    /// A key of this process alone: its sessions end when it does.
    pub fn random() -> SessionKey {
        let mut key = [0u8; 32];
        openssl::rand::rand_bytes(&mut key).expect("the operating system's random generator");
        SessionKey(key)
    }
}

/// Who a session is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// A token of the lists, by its name.
    Token(String),
    /// Someone the identity provider vouched for, with the groups of theirs that some grant
    /// names.
    Person {
        /// Their name.
        name: String,
        /// Their groups that grants name.
        groups: Vec<String>,
    },
}

/// What a session cookie holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The session's id: what a sign-out revokes.
    pub id: String,
    /// Who it is for.
    pub holder: Holder,
    /// The token actions must carry in `X-CSRF-Token`.
    pub csrf: String,
    /// When it ends.
    pub expires: DateTime<Utc>,
    /// The identity provider's ID token (the hint its sign-out wants), when it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
}

impl Sealed {
    /// The cookie value: nonce, ciphertext and tag, base64url.
    pub fn seal(&self, key: &SessionKey) -> String {
        let plain = serde_json::to_vec(self).expect("a session serializes");
        let mut nonce = [0u8; NONCE];
        openssl::rand::rand_bytes(&mut nonce).expect("the operating system's random generator");
        let mut tag = [0u8; TAG];
        let cipher = openssl::symm::encrypt_aead(
            openssl::symm::Cipher::aes_256_gcm(),
            &key.0,
            Some(&nonce),
            AAD,
            &plain,
            &mut tag,
        )
        .expect("AES-256-GCM encrypts");
        let mut out = Vec::with_capacity(NONCE + cipher.len() + TAG);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&cipher);
        out.extend_from_slice(&tag);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    /// The session a cookie value holds, if `key` sealed it and it has not ended by `now`.
    pub fn open(cookie: &str, key: &SessionKey, now: DateTime<Utc>) -> Option<Sealed> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cookie)
            .ok()?;
        if bytes.len() < NONCE + TAG {
            return None;
        }
        let (nonce, rest) = bytes.split_at(NONCE);
        let (cipher, tag) = rest.split_at(rest.len() - TAG);
        let plain = openssl::symm::decrypt_aead(
            openssl::symm::Cipher::aes_256_gcm(),
            &key.0,
            Some(nonce),
            AAD,
            cipher,
            tag,
        )
        .ok()?;
        let sealed: Sealed = serde_json::from_slice(&plain).ok()?;
        (sealed.expires > now).then_some(sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Sealed {
        Sealed {
            id: "s1".into(),
            holder: Holder::Person {
                name: "alice@example.com".into(),
                groups: vec!["billing-ops".into()],
            },
            csrf: "c".repeat(64),
            expires: Utc::now() + chrono::Duration::hours(12),
            id_token: Some("h.p.s".into()),
        }
    }

    #[test]
    fn a_sealed_session_opens_with_its_key_only_and_until_it_ends() {
        let key = SessionKey::from_secret(&"k".repeat(32)).unwrap();
        let one = session();
        let cookie = one.seal(&key);
        assert_eq!(Sealed::open(&cookie, &key, Utc::now()), Some(one.clone()));
        assert!(!cookie.contains("alice"), "nothing of it is readable");
        let other = SessionKey::from_secret(&"o".repeat(32)).unwrap();
        assert_eq!(Sealed::open(&cookie, &other, Utc::now()), None);
        assert_eq!(
            Sealed::open(&cookie, &key, Utc::now() + chrono::Duration::hours(13)),
            None,
            "ended"
        );
        // One bit changed anywhere: refused.
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&cookie)
            .unwrap();
        bytes[20] ^= 1;
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(Sealed::open(&forged, &key, Utc::now()), None);
        assert_eq!(Sealed::open("", &key, Utc::now()), None);
        assert_ne!(one.seal(&key), cookie, "a fresh nonce each time");
        assert_eq!(SessionKey::from_secret("short").err(), Some(ShortKey(5)));
    }
}
