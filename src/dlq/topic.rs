//! Dead-letter topic names: the `{topic}` template and Kafka's rules for topic names.

/// A dead-letter topic name template: `{topic}` stands for the source topic; a template
/// without it sends every topic's dead letters to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqTopic {
    template: String,
}

impl DlqTopic {
    /// Checks the template: not empty, not just `{topic}`.
    pub fn new(template: &str) -> Result<Self, DlqTopicError> {
        if template.trim().is_empty() {
            return Err(DlqTopicError::Empty);
        }
        if template == "{topic}" {
            return Err(DlqTopicError::SourceTopic);
        }
        Ok(Self {
            template: template.to_string(),
        })
    }

    /// The dead-letter topic for records of `topic`.
    pub fn for_topic(&self, topic: &str) -> String {
        self.template.replace("{topic}", topic)
    }

    /// Whether `name` is a dead-letter topic under this template: the template itself when it
    /// has no `{topic}`, else its text around `{topic}` with a source topic name between.
    pub fn is_dlq_topic(&self, name: &str) -> bool {
        match self.template.split_once("{topic}") {
            None => name == self.template,
            Some((before, after)) => {
                name.len() > before.len() + after.len()
                    && name.starts_with(before)
                    && name.ends_with(after)
            }
        }
    }
}

/// `{topic}-dlt`, kafka-dlq's default (Spring Kafka 3.3+'s suffix).
impl Default for DlqTopic {
    fn default() -> Self {
        Self {
            template: "{topic}-dlt".to_string(),
        }
    }
}

/// A dead-letter topic template that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DlqTopicError {
    /// The template is empty.
    #[error("must not be empty")]
    Empty,
    /// The template is `{topic}`: every dead letter would go back to its own topic.
    #[error("would send dead letters back to their own topic")]
    SourceTopic,
}

/// A name Kafka does not accept as a topic name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicNameError {
    /// Empty, or longer than 249 characters.
    #[error("a topic name has 1 to 249 characters")]
    Length,
    /// `.` or `..`.
    #[error("`.` and `..` are not topic names")]
    Dots,
    /// A character outside `a-z A-Z 0-9 . _ -`.
    #[error("character {0:?} is not allowed in a topic name (a-z A-Z 0-9 . _ -)")]
    Character(char),
}

/// Checks a Kafka topic name: 1 to 249 characters of `a-z A-Z 0-9 . _ -`, not `.` or `..`.
pub fn check_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() || name.len() > 249 {
        return Err(TopicNameError::Length);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Dots);
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(TopicNameError::Character(c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_replaces_topic() {
        let t = DlqTopic::new("{topic}-dlt").unwrap();
        assert_eq!(t.for_topic("orders"), "orders-dlt");
        assert_eq!(
            DlqTopic::new("all-dead").unwrap().for_topic("x"),
            "all-dead"
        );
        assert!(DlqTopic::new("{topic}").is_err());
        assert!(DlqTopic::new("").is_err());
    }

    #[test]
    fn tells_its_dead_letter_topics() {
        let t = DlqTopic::default();
        assert!(t.is_dlq_topic("orders-dlt"));
        assert!(!t.is_dlq_topic("-dlt"));
        assert!(!t.is_dlq_topic("orders"));
        let one = DlqTopic::new("all-dead").unwrap();
        assert!(one.is_dlq_topic("all-dead"));
        assert!(!one.is_dlq_topic("orders-dlt"));
        let prefixed = DlqTopic::new("dlq.{topic}").unwrap();
        assert!(prefixed.is_dlq_topic("dlq.orders") && !prefixed.is_dlq_topic("orders-dlt"));
    }

    #[test]
    fn topic_names_are_checked() {
        assert!(check_topic_name("orders.v1_x-2").is_ok());
        assert!(check_topic_name("bad/topic").is_err());
        assert!(check_topic_name(&"a".repeat(250)).is_err());
        assert!(check_topic_name("..").is_err());
    }
}
