//! A URL as it may be shown: in logs, failure messages and so in dead letters, Spring's
//! exception header and Slack alerts, and `config check`. Credentials in it are replaced by
//! `***`: the user info (`http://user:password@host/`) and every query parameter's value
//! (`?code=…`, as Azure Functions and many webhooks take their key); the rest is kept, so an
//! operator still sees which target failed.

/// `url` with its user info (everything between `://` and the last `@` of the authority) and
/// the value of each query parameter replaced by `***`, its fragment left out. Works on any
/// text, a URL that does not parse included, so that a setting's error never shows the
/// password either. Text without `://`, user info or query comes back unchanged.
pub fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut out = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_string(),
    };
    if let Some(fragment) = out.find('#') {
        out.truncate(fragment);
    }
    if let Some(query) = out.find('?') {
        let params: Vec<String> = out[query + 1..]
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) => format!("{name}=***"),
                None if param.is_empty() => String::new(),
                None => "***".to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..query], params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_replaced_and_the_rest_kept() {
        assert_eq!(
            redacted("http://user:s3cret@127.0.0.1:8080/events?x=1"),
            "http://***@127.0.0.1:8080/events?x=***"
        );
        assert_eq!(
            redacted("https://fn.example.net/api/events?code=s3cret&clientId=default#x"),
            "https://fn.example.net/api/events?code=***&clientId=***"
        );
        assert_eq!(redacted("http://host/?token"), "http://host/?***");
        assert_eq!(redacted("http://token@host/"), "http://***@host/");
        assert_eq!(redacted("http://a:b@c@host"), "http://***@host");
        assert_eq!(redacted("http://us%40er:p%3Aw@host/"), "http://***@host/");
    }

    #[test]
    fn a_url_without_credentials_is_unchanged() {
        for url in [
            "http://127.0.0.1:8080/events",
            "http://host/path@not-userinfo",
            "not a url",
            "",
        ] {
            assert_eq!(redacted(url), url);
        }
    }

    #[test]
    fn a_url_that_does_not_parse_is_redacted_too() {
        assert_eq!(redacted("http://u:s3cret@[::1"), "http://***@[::1");
    }
}
