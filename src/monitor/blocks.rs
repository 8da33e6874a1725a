//! An alert as a Slack message in Block Kit: a header, fields, the top errors with a sample id
//! each, the commands to inspect and replay, a context line with the time window, and buttons
//! to the runbook and (when configured) the operator's own page for the topic; with a
//! plain-text summary as the notification text. Pure: no I/O.

use slack_morphism::prelude::*;

use super::alert::{Alert, Increase};
use super::mrkdwn::code;

/// Where an alert's buttons lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    /// The runbook page; each alert links to its section (`#…` anchor).
    pub runbook: String,
    /// A page of the operator's own for a DLQ topic, `{topic}` standing for it (a Redpanda
    /// Console or Grafana link); none: no such button.
    pub topic_page: Option<String>,
    /// The kafka-dlq console's address (`kafka-dlq console`, with its path prefix): every
    /// alert gets a button to its inbox, an increase one button per top error to the console
    /// filtered to that cause. None: no such buttons.
    pub console: Option<String>,
}

impl Default for Links {
    fn default() -> Self {
        Self {
            runbook: DEFAULT_RUNBOOK.to_string(),
            topic_page: None,
            console: None,
        }
    }
}

impl Links {
    /// The console's page filtered by `query` (name, value pairs), when a console is set.
    pub fn console_page(&self, query: &[(&str, &str)]) -> Option<String> {
        let base = self.console.as_deref()?.trim_end_matches('/');
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in query {
            q.append_pair(name, value);
        }
        let q = q.finish();
        Some(match q.is_empty() {
            true => format!("{base}/"),
            false => format!("{base}/?{q}"),
        })
    }
}

/// Top errors of an increase alert that get a console button (Slack allows 25 a block).
const MAX_CAUSE_BUTTONS: usize = 5;

/// The runbook in kafka-dlq's repository.
pub const DEFAULT_RUNBOOK: &str =
    "https://github.com/kafka-dlq/kafka-dlq/blob/main/alerting/RUNBOOK.md";

/// A Slack message: the notification text and the blocks Slack lays out.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackMessage {
    /// Plain text: what notifications and clients without Block Kit show.
    pub text: String,
    /// The Block Kit layout.
    pub blocks: Vec<SlackBlock>,
}

impl SlackMessage {
    /// A notice of `headline` (trusted text: `mrkdwn` as written) and `facts` (name, value
    /// from outside: each value shown as code, so that Slack parses none of it), with a
    /// button (label, URL) when given.
    pub fn notice(headline: &str, facts: &[(&str, &str)], link: Option<(&str, &str)>) -> Self {
        let fields: Vec<SlackBlockText> = facts
            .iter()
            .map(|(name, value)| md!("*{}*\n{}", name, cut(&code(value), 1900)))
            .collect();
        let mut blocks: Vec<SlackBlock> = vec![SlackSectionBlock::new()
            .with_text(md!(cut(headline, 3000)))
            .into()];
        for chunk in fields.chunks(10) {
            blocks.push(SlackSectionBlock::new().with_fields(chunk.to_vec()).into());
        }
        if let Some(b) = link.and_then(|(label, url)| button("open", label, url)) {
            blocks.push(SlackActionsBlock::new(vec![b]).into());
        }
        SlackMessage {
            text: plain(headline),
            blocks,
        }
    }

    /// As slack-morphism's message content.
    pub fn content(&self) -> SlackMessageContent {
        SlackMessageContent::new()
            .with_text(self.text.clone())
            .with_blocks(self.blocks.clone())
    }
}

/// The runbook section for `alert` (the anchor of its heading in `alerting/RUNBOOK.md`).
fn runbook_anchor(alert: &Alert) -> &'static str {
    match alert {
        Alert::Increase(_)
        | Alert::Decrease { .. }
        | Alert::Expired { .. }
        | Alert::Resolved { .. } => "#kafkadlqdeadlettersgrowing",
        Alert::BreakerOpened | Alert::BreakerClosed => "#slack-messages-of-the-monitor",
    }
}

impl Alert {
    /// The alert as a Block Kit message; `brokers` goes into the commands it shows.
    pub fn message(&self, brokers: &str, links: &Links) -> SlackMessage {
        let mut blocks: Vec<SlackBlock> = Vec::new();
        let text = match self {
            Alert::Increase(i) => {
                blocks.extend(increase_blocks(i, brokers));
                summary(i)
            }
            other => {
                let text = other.text(brokers);
                blocks.push(SlackSectionBlock::new().with_text(md!(text.clone())).into());
                plain(&text)
            }
        };
        let mut buttons = vec![button(
            "runbook",
            "Runbook",
            &format!("{}{}", links.runbook, runbook_anchor(self)),
        )];
        if let Some(inbox) = links.console_page(&[]) {
            buttons.push(button("console", "Open the console", &inbox));
        }
        if let Alert::Increase(i) = self {
            let topic: Vec<(&str, &str)> = match i.dlq_topics.as_slice() {
                [one] => vec![("dlq_topic", one.as_str())],
                _ => Vec::new(),
            };
            for (n, error) in i.top_errors.iter().enumerate().take(MAX_CAUSE_BUTTONS) {
                let mut query = topic.clone();
                query.push(("fingerprint", &error.fingerprint));
                if let Some(page) = links.console_page(&query) {
                    buttons.push(button(
                        &format!("console-cause-{n}"),
                        &cut(&format!("Console: {}", error.fingerprint), 75),
                        &page,
                    ));
                }
            }
        }
        if let (Some(template), Alert::Increase(i)) = (&links.topic_page, self) {
            for topic in &i.dlq_topics {
                buttons.push(button(
                    &format!("open-{topic}"),
                    &format!("Open {topic}"),
                    &template.replace("{topic}", topic),
                ));
            }
        }
        let buttons: Vec<SlackActionBlockElement> = buttons.into_iter().flatten().collect();
        if !buttons.is_empty() {
            blocks.push(SlackActionsBlock::new(buttons).into());
        }
        SlackMessage { text, blocks }
    }

    /// The first message of a resolved incident, updated: what it was and that it is over.
    pub fn resolved_original(previous: u64) -> SlackMessage {
        let text =
            format!("Resolved: the dead letters of this incident are gone (was {previous}).");
        SlackMessage {
            blocks: vec![
                SlackHeaderBlock::new(pt!(format!(":white_check_mark: {text}"))).into(),
                SlackContextBlock::new(vec![md!(
                    "The thread below has the incident's alerts. kafka-dlq monitor"
                )])
                .into(),
            ],
            text,
        }
    }
}

/// `3 new dead letters on orders-dlt (12 outstanding)`.
fn summary(i: &Increase) -> String {
    let mut text = format!(
        "{} new dead letter{} on {}",
        i.new,
        if i.new == 1 { "" } else { "s" },
        i.dlq_topics.join(", ")
    );
    if let Some(total) = i.total {
        text.push_str(&format!(" ({total} outstanding)"));
    }
    text
}

/// mrkdwn without its markup, for the notification text.
fn plain(mrkdwn: &str) -> String {
    let first = mrkdwn.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(first.len());
    let mut rest = first;
    // Drop emoji codes (`:rotating_light:`) and the `*`, `_` and `` ` `` marks.
    while let Some(c) = rest.chars().next() {
        if c == ':' {
            if let Some(end) = rest[1..].find(':') {
                let code = &rest[1..1 + end];
                if !code.is_empty() && code.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    rest = &rest[end + 2..];
                    continue;
                }
            }
        }
        if !matches!(c, '*' | '_' | '`') {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out.trim().to_string()
}

fn counts(counts: &std::collections::BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{} {n}", code(k)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn increase_blocks(i: &Increase, brokers: &str) -> Vec<SlackBlock> {
    let mut blocks: Vec<SlackBlock> =
        vec![
            SlackHeaderBlock::new(pt!(cut(&format!(":rotating_light: {}", summary(i)), 150)))
                .into(),
        ];
    let mut fields: Vec<SlackBlockText> = vec![
        md!("*Source topics*\n{}", counts(&i.by_source_topic)),
        md!("*Error kinds*\n{}", counts(&i.by_kind)),
        md!("*Groups*\n{}", counts(&i.by_group)),
    ];
    if !i.after_retry_topics.is_empty() {
        fields.push(md!(
            "*After retry topics*\n{}",
            counts(&i.after_retry_topics)
        ));
    }
    if let Some(total) = i.total {
        fields.push(md!("*Outstanding*\n{}", total));
    }
    blocks.push(SlackSectionBlock::new().with_fields(fields).into());
    if let Some(parked) = super::alert::parked_line(&i.parked) {
        blocks.push(
            SlackSectionBlock::new()
                .with_text(md!(":parking: *Parked:* {}", parked))
                .into(),
        );
    }
    let mut errors = String::from("*Top errors*");
    for g in &i.top_errors {
        let new = if i.new_fingerprints.contains(&g.fingerprint) {
            " :new: _first seen_"
        } else {
            ""
        };
        errors.push_str(&format!("\n• {}× {}{new}", g.count, code(&g.fingerprint)));
        if let Some(id) = &g.sample_id {
            errors.push_str(&format!(" — e.g. {}", code(id)));
        }
    }
    blocks.push(
        SlackSectionBlock::new()
            .with_text(md!(cut(&errors, 3000)))
            .into(),
    );
    if !i.sample_payloads.is_empty() {
        let payloads: Vec<String> = i.sample_payloads.iter().map(|p| code(p)).collect();
        blocks.push(
            SlackSectionBlock::new()
                .with_text(md!(cut(
                    &format!("*Payloads*\n{}", payloads.join("\n")),
                    3000
                )))
                .into(),
        );
    }
    let mut commands = String::new();
    for topic in &i.dlq_topics {
        commands.push_str(&format!(
            "*Inspect:* {}\n*Replay (after the fix):* {}, then without `--dry-run`\n",
            code(&format!(
                "kafka-dlq dlq list --brokers {brokers} --dlq-topic {topic}"
            )),
            code(&format!(
                "kafka-dlq dlq replay --brokers {brokers} --dlq-topic {topic} --dry-run"
            )),
        ));
    }
    blocks.push(
        SlackSectionBlock::new()
            .with_text(md!(cut(commands.trim_end(), 3000)))
            .into(),
    );
    let window = match (i.window_start, i.window_end) {
        (Some(start), Some(end)) => format!(
            "Window {} – {} UTC",
            start.format("%Y-%m-%d %H:%M:%S"),
            end.format("%H:%M:%S")
        ),
        _ => "Window: since the last alert".to_string(),
    };
    blocks.push(SlackContextBlock::new(vec![md!("{} · kafka-dlq monitor", window)]).into());
    blocks
}

/// A link button; `None` when `url` is not a URL (left out rather than refused by Slack).
fn button(id: &str, label: &str, url: &str) -> Option<SlackActionBlockElement> {
    let url = url::Url::parse(url).ok()?;
    Some(
        SlackBlockButtonElement::new(pt!(label.to_string()))
            .with_action_id(id.to_string().into())
            .with_url(url)
            .into(),
    )
}

/// `text` cut to `max` characters (Slack's limits per text object), ending in `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::alert::ErrorGroup;

    fn increase() -> Increase {
        Increase {
            new: 3,
            total: Some(12),
            by_source_topic: [("orders".to_string(), 3)].into(),
            by_kind: [("permanent".to_string(), 3)].into(),
            by_group: [("billing".to_string(), 3)].into(),
            after_retry_topics: Default::default(),
            top_errors: vec![ErrorGroup {
                fingerprint: "permanent: bad row #".into(),
                count: 3,
                example: "bad row 7".into(),
                sample_id: Some("orders-0-7".into()),
            }],
            new_fingerprints: vec!["permanent: bad row #".into()],
            sample_ids: vec!["orders-0-7".into()],
            dlq_topics: vec!["orders-dlt".into()],
            sample_payloads: vec![],
            parked: Default::default(),
            window_start: None,
            window_end: None,
        }
    }

    #[test]
    fn an_increase_has_a_header_fields_errors_and_buttons() {
        let links = Links {
            runbook: "https://runbooks.example.com/kafka-dlq".into(),
            topic_page: Some("http://console.example.com/topics/{topic}".into()),
            console: None,
        };
        let message = Alert::Increase(increase()).message("b:9092", &links);
        assert_eq!(
            message.text,
            "3 new dead letters on orders-dlt (12 outstanding)"
        );
        let json = serde_json::to_value(&message.blocks).unwrap();
        assert_eq!(json[0]["type"], "header");
        assert_eq!(
            json[0]["text"]["text"],
            ":rotating_light: 3 new dead letters on orders-dlt (12 outstanding)"
        );
        assert_eq!(json[1]["fields"][0]["text"], "*Source topics*\n`orders` 3");
        assert_eq!(json[1]["fields"][2]["text"], "*Groups*\n`billing` 3");
        let errors = json[2]["text"]["text"].as_str().unwrap();
        assert!(
            errors.contains("3× `permanent: bad row #` :new: _first seen_ — e.g. `orders-0-7`"),
            "{errors}"
        );
        let last = &json[json.as_array().unwrap().len() - 1];
        assert_eq!(last["type"], "actions");
        assert_eq!(
            last["elements"][0]["url"],
            "https://runbooks.example.com/kafka-dlq#kafkadlqdeadlettersgrowing"
        );
        assert_eq!(
            last["elements"][1]["url"],
            "http://console.example.com/topics/orders-dlt"
        );
        assert_eq!(last["elements"][1]["text"]["text"], "Open orders-dlt");
    }

    /// Every text object of the message, with its type.
    fn texts(value: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::Object(map) => {
                if let (Some(kind), Some(serde_json::Value::String(text))) =
                    (map.get("type"), map.get("text"))
                {
                    out.push((kind.as_str().unwrap_or_default().to_string(), text.clone()));
                }
                map.values().for_each(|v| texts(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| texts(v, out)),
            _ => {}
        }
    }

    #[test]
    fn producer_controlled_text_forms_no_mention_link_or_broken_code_span() {
        // The review's string: a backtick ends the code span, then a channel mention and a
        // link under kafka-dlq's name.
        const HOSTILE: &str = "x` <!channel> <https://evil.example|Re-run the fix here> `";
        let mut i = increase();
        i.by_source_topic = [(HOSTILE.to_string(), 1)].into();
        i.by_kind = [(format!("permanent {HOSTILE}"), 1)].into();
        i.by_group = [(HOSTILE.to_string(), 1)].into();
        i.after_retry_topics = [(HOSTILE.to_string(), 1)].into();
        i.top_errors[0].fingerprint = format!("malformed JSON: invalid type: string \"{HOSTILE}\"");
        i.top_errors[0].sample_id = Some(HOSTILE.to_string());
        i.new_fingerprints = vec![i.top_errors[0].fingerprint.clone()];
        i.sample_ids = vec![HOSTILE.to_string()];
        i.sample_payloads = vec![format!("{{\"qty\":\"{HOSTILE}\"}}")];
        let links = Links::default();
        let json =
            serde_json::to_value(Alert::Increase(i).message("b:9092", &links).blocks).unwrap();
        let mut all = Vec::new();
        texts(&json, &mut all);
        let mrkdwn: Vec<&String> = all
            .iter()
            .filter(|(kind, _)| kind == "mrkdwn")
            .map(|(_, t)| t)
            .collect();
        assert!(mrkdwn.len() >= 5, "{all:?}");
        for text in &mrkdwn {
            assert!(
                !text.contains('<') && !text.contains('>'),
                "Slack would parse a mention or link: {text}"
            );
            assert_eq!(
                text.matches('`').count() % 2,
                0,
                "a code span left open: {text}"
            );
        }
        let shown: String = all.iter().map(|(_, t)| t.as_str()).collect();
        assert!(
            shown.contains(
                "`xˋ &lt;!channel&gt; &lt;https://evil.example|Re-run the fix here&gt; ˋ`"
            ),
            "the text is shown, escaped, inside one code span: {shown}"
        );
    }

    #[test]
    fn with_a_console_each_alert_links_to_it_and_each_top_error_to_its_cause() {
        let links = Links {
            console: Some("https://ops.example.com/dlq/".into()),
            ..Links::default()
        };
        let mut i = increase();
        i.top_errors[0].fingerprint = "malformed JSON: expected `,` or `}` at line # & more".into();
        let json =
            serde_json::to_value(Alert::Increase(i).message("b:9092", &links).blocks).unwrap();
        let last = &json[json.as_array().unwrap().len() - 1];
        assert_eq!(last["elements"][1]["url"], "https://ops.example.com/dlq/");
        assert_eq!(
            last["elements"][2]["url"],
            "https://ops.example.com/dlq/?dlq_topic=orders-dlt&fingerprint=malformed+JSON%3A+expected+%60%2C%60+or+%60%7D%60+at+line+%23+%26+more"
        );
        assert!(last["elements"][2]["text"]["text"]
            .as_str()
            .unwrap()
            .starts_with("Console: malformed JSON"));
        let resolved = Alert::Resolved { previous: 4 }.message("b:9092", &links);
        let json = serde_json::to_value(&resolved.blocks).unwrap();
        assert_eq!(
            json[1]["elements"][1]["url"],
            "https://ops.example.com/dlq/"
        );
    }

    #[test]
    fn other_alerts_are_a_section_with_a_plain_summary() {
        let message = Alert::Resolved { previous: 4 }.message("b:9092", &Links::default());
        assert_eq!(
            message.text,
            "Resolved: no outstanding dead letters (was 4)."
        );
        assert_eq!(message.blocks.len(), 2, "the text and the runbook button");
    }

    #[test]
    fn a_bad_link_template_leaves_its_button_out() {
        let links = Links {
            runbook: "not a url".into(),
            topic_page: None,
            console: None,
        };
        let message = Alert::BreakerOpened.message("b:9092", &links);
        assert_eq!(
            message.blocks.len(),
            1,
            "no actions block without a valid URL"
        );
    }
}
