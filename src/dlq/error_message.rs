//! Error texts in dead letters and retry records: cut to a bound, so that our metadata never
//! pushes a record over the broker's size limit.

/// Error texts longer than this many bytes are cut (at a character boundary, ending in `…`),
/// in the envelope and in the `kafka_dlt-exception-message` header alike, so that our metadata
/// never pushes a dead letter over the broker's record size limit.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

/// Cuts `message` to at most [`MAX_ERROR_MESSAGE_BYTES`] bytes at a character boundary,
/// ending a cut text in `…`.
pub fn truncate_message(message: &str) -> String {
    if message.len() <= MAX_ERROR_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_ERROR_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_error_messages_are_cut_at_a_char_boundary() {
        let long = "é".repeat(2000);
        let cut = truncate_message(&long);
        assert!(cut.len() <= MAX_ERROR_MESSAGE_BYTES);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_message("short"), "short");
    }
}
