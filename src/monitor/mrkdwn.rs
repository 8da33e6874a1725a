//! Text from outside (record ids, error messages, payload samples, groups and topics of
//! foreign dead letters) put into Slack's `mrkdwn` so that Slack parses none of it: no
//! `<!channel>` mention, no `<url|label>` link, no end to the code span it sits in. Pure.

/// `text` as an inline code span whose content Slack shows as it is: `&`, `<` and `>` escaped
/// as Slack asks (`&amp;`, `&lt;`, `&gt;`), so no mention or link is formed, and each backtick
/// replaced by `ˋ` (U+02CB), so the span cannot be closed early.
pub(super) fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('`');
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('ˋ'),
            c => out.push(c),
        }
    }
    out.push('`');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_inside_one_code_span_with_no_mention_or_link() {
        let hostile = "x` <!channel> <https://evil.example|Re-run the fix here> `&";
        let shown = code(hostile);
        assert_eq!(
            shown,
            "`xˋ &lt;!channel&gt; &lt;https://evil.example|Re-run the fix here&gt; ˋ&amp;`"
        );
        assert_eq!(shown.matches('`').count(), 2);
        assert!(!shown.contains('<') && !shown.contains('>'));
    }
}
