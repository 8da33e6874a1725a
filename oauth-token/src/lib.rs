//! A SASL/OAUTHBEARER token handed to a librdkafka client directly.
//!
//! librdkafka asks for a token with an event on the client's main queue, and rust-rdkafka
//! answers it (`ClientContext::generate_oauth_token`) only while something polls that queue:
//! consumers and producers do, the admin client never does, so an admin client with a token of
//! the application's own (Amazon MSK's IAM) cannot authenticate. [`set_token`] calls
//! librdkafka's `rd_kafka_oauthbearer_set_token` on any client, for the token to use until it
//! expires or is replaced.
//!
//! This crate holds, with `rdkafka-header-bytes`, kafka-dlq's `unsafe` code, so that the
//! library can `#![forbid(unsafe_code)]`.

use std::ffi::{c_char, CStr, CString};

use rdkafka::bindings as rdsys;
use rdkafka::client::{Client, ClientContext};

/// Makes `token` the client's OAUTHBEARER token until `expires_ms` (milliseconds since the
/// epoch), for the principal `principal`. librdkafka refuses it (the error says why) when the
/// client is not set up for OAUTHBEARER, the token has expired, or a text holds a NUL byte.
pub fn set_token<C: ClientContext>(
    client: &Client<C>,
    token: &str,
    expires_ms: i64,
    principal: &str,
) -> Result<(), String> {
    let token = CString::new(token).map_err(|_| "the token holds a NUL byte".to_string())?;
    let principal =
        CString::new(principal).map_err(|_| "the principal holds a NUL byte".to_string())?;
    let mut error = [0 as c_char; 512];
    // SAFETY: the client is alive for the borrow; librdkafka copies the token and principal,
    // reads no extensions (null, 0) and writes at most `error.len()` bytes of error text.
    let code = unsafe {
        rdsys::rd_kafka_oauthbearer_set_token(
            client.native_ptr(),
            token.as_ptr(),
            expires_ms,
            principal.as_ptr(),
            std::ptr::null_mut(),
            0,
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if code == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        // SAFETY: librdkafka wrote a NUL-terminated message into `error`.
        let text = unsafe { CStr::from_ptr(error.as_ptr()) };
        Err(text.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::ClientConfig;

    #[test]
    fn a_client_set_up_for_oauthbearer_takes_a_token_and_another_refuses_it() {
        let far = 4_102_444_800_000; // 2100-01-01
        let oauth: BaseConsumer = ClientConfig::new()
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "OAUTHBEARER")
            .create()
            .unwrap();
        set_token(oauth.client(), "a.token.value", far, "svc").unwrap();
        let expired = set_token(oauth.client(), "a.token.value", 1_000, "svc").unwrap_err();
        assert!(!expired.is_empty());
        let plain: BaseConsumer = ClientConfig::new().create().unwrap();
        assert!(set_token(plain.client(), "a.token.value", far, "svc").is_err());
    }
}
