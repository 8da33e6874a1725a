//! Fingerprints: error messages that differ only in ids, numbers or values group together; and
//! a stable hash of a text, for names derived from it.

/// The 64-bit FNV-1a hash of `text`: the same in every process, platform and version, so a
/// name derived from it (a replay's position group, a redrive topic) is found again.
pub fn stable_hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

/// Normalises an error message so that messages differing only in ids, numbers or values
/// group together: every word containing a digit becomes `#`, white space is folded, and the
/// result is cut to 120 characters.
pub fn fingerprint(kind: &str, message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(160) + kind.len() + 2);
    out.push_str(kind);
    out.push_str(": ");
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    let mut last_space = false;
    for c in message.chars() {
        if c.is_alphanumeric() || c == '_' || c == '-' || c == '.' {
            word.push(c);
            last_space = false;
        } else {
            flush(&mut word, &mut out);
            if c.is_whitespace() {
                if !last_space {
                    out.push(' ');
                }
                last_space = true;
            } else {
                out.push(c);
                last_space = false;
            }
        }
    }
    flush(&mut word, &mut out);
    let trimmed = out.trim_end();
    trimmed.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stable_hash_is_fnv_1a() {
        assert_eq!(stable_hash(""), 0xcbf29ce484222325);
        assert_eq!(stable_hash("a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn fingerprints_group_messages_that_differ_in_values() {
        let cases = [
            (
                "target answered HTTP 503",
                "permanent: target answered HTTP #",
            ),
            (
                "parcel P-1234 not found in  shard 7",
                "permanent: parcel # not found in shard #",
            ),
            (
                "malformed JSON: expected value at line 1 column 2",
                "permanent: malformed JSON: expected value at line # column #",
            ),
            ("id 9f8e7d6c-aaaa-bbbb missing", "permanent: id # missing"),
            ("no digits here", "permanent: no digits here"),
        ];
        for (message, expected) in cases {
            assert_eq!(fingerprint("permanent", message), expected, "{message}");
        }
    }
}
