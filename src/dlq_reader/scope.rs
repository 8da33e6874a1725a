//! Which services' dead letters someone may touch: the console's grants, as a part of a
//! [`Filter`](super::Filter) (`within`) so that a list, an export or a redrive can never reach
//! past them, whatever else the filter says.
//!
//! A [`Scope`] is a list of [`Area`]s; an area names DLTs and/or consumer groups by
//! [`Pattern`] (`*` for any run of characters: `billing-*`). A dead letter is in an area when
//! its DLT matches one of the area's DLT patterns (or the area names none) and the group that
//! dead-lettered it (`source.group`) matches one of its group patterns (or the area names
//! none); it is in a scope when it is in any of its areas. A record that is not an envelope
//! has no group: only areas that name no group hold it.

use serde::{Deserialize, Serialize};

/// A name, or names with `*` standing for any run of characters (none included).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(String);

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern `{0}`: expected a name, or names with `*` (e.g. `billing-*`), without spaces or control characters")]
pub struct BadPattern(String);

impl Pattern {
    /// `text` as a pattern: not empty, no whitespace or control characters.
    pub fn new(text: &str) -> Result<Pattern, BadPattern> {
        if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BadPattern(text.to_string()));
        }
        Ok(Pattern(text.to_string()))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name`, all of it, matches.
    pub fn matches(&self, name: &str) -> bool {
        let mut parts = self.0.split('*');
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = name.strip_prefix(first) else {
            return false;
        };
        let parts: Vec<&str> = parts.collect();
        let Some((last, middle)) = parts.split_last() else {
            // No `*`: the whole name.
            return rest.is_empty();
        };
        for part in middle {
            match rest.find(part) {
                // The leftmost place is never worse for what follows.
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

/// DLTs and consumer groups; a list left empty means any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Area {
    /// The DLTs (any when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dlq_topics: Vec<Pattern>,
    /// The consumer groups that dead-lettered (any when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Pattern>,
}

impl Area {
    /// Every DLT and group.
    pub fn everything() -> Area {
        Area::default()
    }

    /// Whether the area names neither DLTs nor groups.
    pub fn is_everything(&self) -> bool {
        self.dlq_topics.is_empty() && self.groups.is_empty()
    }

    /// Whether a dead letter on `dlq_topic` from `group` (`None`: not an envelope) is in it.
    pub fn covers(&self, dlq_topic: &str, group: Option<&str>) -> bool {
        (self.dlq_topics.is_empty() || self.dlq_topics.iter().any(|p| p.matches(dlq_topic)))
            && (self.groups.is_empty()
                || group.is_some_and(|g| self.groups.iter().any(|p| p.matches(g))))
    }

    /// Whether every dead letter on `dlq_topic`, whatever its group, is in it.
    pub fn covers_topic(&self, dlq_topic: &str) -> bool {
        self.groups.is_empty() && self.covers(dlq_topic, None)
    }

    /// Whether some dead letter on `dlq_topic` may be in it.
    pub fn reaches_topic(&self, dlq_topic: &str) -> bool {
        self.dlq_topics.is_empty() || self.dlq_topics.iter().any(|p| p.matches(dlq_topic))
    }

    /// Whether everything in `other` is in this area as written: each list here empty, or
    /// holding every pattern of the other's (which then is not empty).
    pub fn contains(&self, other: &Area) -> bool {
        let within = |mine: &[Pattern], theirs: &[Pattern]| {
            mine.is_empty() || (!theirs.is_empty() && theirs.iter().all(|p| mine.contains(p)))
        };
        within(&self.dlq_topics, &other.dlq_topics) && within(&self.groups, &other.groups)
    }
}

/// Areas; a dead letter in any of them is in the scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scope {
    /// The areas.
    pub areas: Vec<Area>,
}

impl Scope {
    /// Whether a dead letter on `dlq_topic` from `group` is in the scope.
    pub fn covers(&self, dlq_topic: &str, group: Option<&str>) -> bool {
        self.areas.iter().any(|a| a.covers(dlq_topic, group))
    }

    /// Whether every dead letter on `dlq_topic` is in the scope.
    pub fn covers_topic(&self, dlq_topic: &str) -> bool {
        self.areas.iter().any(|a| a.covers_topic(dlq_topic))
    }

    /// Whether some dead letter on `dlq_topic` may be in the scope.
    pub fn reaches_topic(&self, dlq_topic: &str) -> bool {
        self.areas.iter().any(|a| a.reaches_topic(dlq_topic))
    }

    /// Whether everything in `other` is in this scope as written ([`Area::contains`]).
    pub fn contains(&self, other: &Scope) -> bool {
        other
            .areas
            .iter()
            .all(|theirs| self.areas.iter().any(|mine| mine.contains(theirs)))
    }

    /// `name=value` pairs for [`Filter::key`](super::Filter::key).
    pub(crate) fn key(&self) -> String {
        serde_json::to_string(self).expect("a scope is JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Pattern {
        Pattern::new(text).unwrap()
    }

    #[test]
    fn patterns_match_whole_names_with_stars_for_any_run() {
        let cases = [
            ("billing-*", "billing-", true),
            ("billing-*", "billing-payments", true),
            ("billing-*", "xbilling-payments", false),
            ("*-dlt", "orders-dlt", true),
            ("*-dlt", "orders-dlt-x", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ab", "ab", false),
            ("ab*ab", "abab", true),
            ("*", "", true),
            ("orders", "orders", true),
            ("orders", "orders2", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(p(pattern).matches(name), expected, "{pattern} ~ {name}");
        }
        assert!(Pattern::new("").is_err());
        assert!(Pattern::new("billing team").is_err());
    }

    #[test]
    fn an_area_needs_both_its_topic_and_its_group() {
        let billing = Area {
            dlq_topics: vec![p("*-dlt")],
            groups: vec![p("billing-*")],
        };
        assert!(billing.covers("orders-dlt", Some("billing-api")));
        assert!(!billing.covers("orders-dlt", Some("shipping")));
        assert!(!billing.covers("orders-dlt", None), "no group: not covered");
        assert!(!billing.covers("orders", Some("billing-api")));
        assert!(!billing.covers_topic("orders-dlt"), "other groups share it");
        assert!(billing.reaches_topic("orders-dlt"));
        let topic = Area {
            dlq_topics: vec![p("orders-dlt")],
            groups: vec![],
        };
        assert!(topic.covers_topic("orders-dlt") && topic.covers("orders-dlt", None));
        assert!(Area::everything().covers("anything", None));
    }

    #[test]
    fn a_scope_contains_what_its_areas_name() {
        let billing = Area {
            dlq_topics: vec![],
            groups: vec![p("billing-*")],
        };
        let mine = Scope {
            areas: vec![billing.clone()],
        };
        assert!(mine.contains(&mine.clone()));
        let narrower = Scope {
            areas: vec![Area {
                dlq_topics: vec![p("orders-dlt")],
                groups: vec![p("billing-*")],
            }],
        };
        assert!(mine.contains(&narrower));
        assert!(!narrower.contains(&mine));
        let everything = Scope {
            areas: vec![Area::everything()],
        };
        assert!(everything.contains(&mine));
        assert!(!mine.contains(&everything));
        assert_eq!(
            serde_json::to_string(&mine).unwrap(),
            r#"[{"groups":["billing-*"]}]"#
        );
    }
}
