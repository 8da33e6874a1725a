//! Who may do what, where: a grant gives a role over some DLTs and consumer groups to a
//! subject — a group or user of the single sign-on, a token by its name, or everyone who signs
//! in. Deciding only.
//!
//! A grant is one line (`--grant`, repeated; `KAFKA_DLQ_CONSOLE_GRANTS`, one per line or
//! comma-separated; `grants = [...]` in the config file's `[console]` section):
//!
//! ```text
//! SUBJECT ROLE [dlts=PATTERN]... [groups=PATTERN]... [payloads] [four-eyes]
//! ```
//!
//! - `SUBJECT`: `group:NAME` (a value of the groups claim), `user:NAME` (the name claim),
//!   `token:NAME` (a token of the token lists, by its name), or `*` (everyone who signs in with
//!   single sign-on); a space or comma in `NAME` is written `%20` or `%2C`;
//! - `ROLE`: `viewer` or `operator`;
//! - `dlts=` and `groups=` ([`Pattern`]s, `*` for any run of characters), each as often as
//!   needed: the grant covers a dead letter on one of the DLTs from one of the groups; none of
//!   either means any;
//! - `payloads`: a viewer of this grant sees payloads, keys and header values (an operator
//!   always does);
//! - `four-eyes`: every redrive and discard an operator makes under this grant alone waits
//!   for another operator's approval ([`super::approvals`]).

use crate::dlq_reader::{Area, Pattern, Scope};

use serde::Serialize;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read the inbox, dead letters (payloads only with `show_payloads`) and the history.
    Viewer,
    /// Also redrive, discard, restore and edit.
    Operator,
}

impl Role {
    /// `viewer` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }
}

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Everyone who signs in with single sign-on.
    Everyone,
    /// The single sign-on users whose groups claim holds this value.
    Group(String),
    /// The single sign-on user of this name.
    User(String),
    /// The token of this name.
    Token(String),
}

/// A role over an area, as a caller holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// The role.
    pub role: Role,
    /// Where it holds.
    pub area: Area,
    /// A viewer sees payloads there too.
    pub payloads: bool,
    /// An operator's redrives and discards there wait for another operator's approval.
    pub four_eyes: bool,
}

impl Permission {
    /// `role` over everything.
    pub fn everywhere(role: Role, payloads: bool) -> Permission {
        Permission {
            role,
            area: Area::everything(),
            payloads,
            four_eyes: false,
        }
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Who holds it.
    pub subject: Subject,
    /// What it gives.
    pub permission: Permission,
}

/// A grant that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grant `{grant}`: {why}")]
pub struct BadGrant {
    grant: String,
    why: String,
}

impl Grant {
    /// Parses one grant (see the module docs).
    pub fn parse(line: &str) -> Result<Grant, BadGrant> {
        let bad = |why: String| BadGrant {
            grant: line.to_string(),
            why,
        };
        let mut words = line.split_whitespace();
        let (Some(subject), Some(role)) = (words.next(), words.next()) else {
            return Err(bad(
                "expected `SUBJECT ROLE [dlts=PATTERN]... [groups=PATTERN]... [payloads] [four-eyes]`".into(),
            ));
        };
        let subject = match subject.split_once(':') {
            _ if subject == "*" => Subject::Everyone,
            Some((kind, name)) => {
                let name = decode(name).map_err(bad)?;
                match kind {
                    "group" => Subject::Group(name),
                    "user" => Subject::User(name),
                    "token" => Subject::Token(name),
                    other => {
                        return Err(bad(format!(
                            "subject `{other}:…`: expected group:, user:, token: or *"
                        )))
                    }
                }
            }
            None => {
                return Err(bad(format!(
                    "subject `{subject}`: expected group:NAME, user:NAME, token:NAME or *"
                )))
            }
        };
        let role = match role {
            "viewer" => Role::Viewer,
            "operator" => Role::Operator,
            other => return Err(bad(format!("role `{other}`: expected viewer or operator"))),
        };
        let mut permission = Permission {
            role,
            area: Area::everything(),
            payloads: false,
            four_eyes: false,
        };
        for word in words {
            match word.split_once('=') {
                Some(("dlts", p)) => permission
                    .area
                    .dlq_topics
                    .push(Pattern::new(p).map_err(|e| bad(e.to_string()))?),
                Some(("groups", p)) => permission
                    .area
                    .groups
                    .push(Pattern::new(p).map_err(|e| bad(e.to_string()))?),
                None if word == "payloads" => permission.payloads = true,
                None if word == "four-eyes" => permission.four_eyes = true,
                _ => {
                    return Err(bad(format!(
                        "`{word}`: expected dlts=PATTERN, groups=PATTERN, payloads or four-eyes"
                    )))
                }
            }
        }
        Ok(Grant {
            subject,
            permission,
        })
    }

    /// Parses a list of grants: one per line or comma-separated, blank ones skipped.
    pub fn parse_list<'a>(
        lines: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<Grant>, BadGrant> {
        lines
            .into_iter()
            .flat_map(|l| l.split([',', '\n']))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(Grant::parse)
            .collect()
    }
}

/// `%20` and the like in a subject's name.
fn decode(name: &str) -> Result<String, String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = name
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("name `{name}`: `%` must be followed by two hex digits"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let name = String::from_utf8(out).map_err(|_| format!("name `{name}` is not UTF-8"))?;
    if name.is_empty() {
        return Err("the subject's name is empty".into());
    }
    Ok(name)
}

/// What a caller may do: the permissions of every grant that names them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permissions(pub Vec<Permission>);

impl Permissions {
    /// The highest role held anywhere (`None`: none).
    pub fn role(&self) -> Option<Role> {
        self.0.iter().map(|p| p.role).max()
    }

    /// Where the caller holds `needs` or more: `None` everywhere, else the scope (which may
    /// hold nothing).
    pub fn scope(&self, needs: Role) -> Option<Scope> {
        let held = self.0.iter().filter(|p| p.role >= needs);
        if held.clone().any(|p| p.area.is_everything()) {
            return None;
        }
        Some(Scope {
            areas: held.map(|p| p.area.clone()).collect(),
        })
    }

    /// Where the caller acts as operator without anyone's approval (its operator grants not
    /// marked `four-eyes`): `None` everywhere.
    pub fn direct_scope(&self) -> Option<Scope> {
        let held = self
            .0
            .iter()
            .filter(|p| p.role == Role::Operator && !p.four_eyes);
        if held.clone().any(|p| p.area.is_everything()) {
            return None;
        }
        Some(Scope {
            areas: held.map(|p| p.area.clone()).collect(),
        })
    }

    /// Whether some operator grant of the caller's is marked `four-eyes`.
    pub fn has_four_eyes(&self) -> bool {
        self.0
            .iter()
            .any(|p| p.role == Role::Operator && p.four_eyes)
    }

    /// Where a viewer sees payloads (every operator's area included): `None` everywhere.
    pub fn payload_scope(&self) -> Option<Scope> {
        let held = self
            .0
            .iter()
            .filter(|p| p.payloads || p.role == Role::Operator);
        if held.clone().any(|p| p.area.is_everything()) {
            return None;
        }
        Some(Scope {
            areas: held.map(|p| p.area.clone()).collect(),
        })
    }

    /// Whether the caller holds `needs` for a dead letter on `dlq_topic` from `group`.
    pub fn may(&self, needs: Role, dlq_topic: &str, group: Option<&str>) -> bool {
        self.0
            .iter()
            .any(|p| p.role >= needs && p.area.covers(dlq_topic, group))
    }

    /// Whether the caller sees the payload of a dead letter on `dlq_topic` from `group`.
    pub fn payloads(&self, dlq_topic: &str, group: Option<&str>) -> bool {
        self.0
            .iter()
            .any(|p| (p.payloads || p.role == Role::Operator) && p.area.covers(dlq_topic, group))
    }
}

/// The permissions `grants` give to a subject that is any of `names`.
pub fn permissions(grants: &[Grant], names: &[Subject]) -> Permissions {
    Permissions(
        grants
            .iter()
            .filter(|g| names.contains(&g.subject))
            .map(|g| g.permission.clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_names_its_subject_role_and_area() {
        let g = Grant::parse("group:Billing%20Team operator groups=billing-* dlts=*-dlt payloads")
            .unwrap();
        assert_eq!(g.subject, Subject::Group("Billing Team".into()));
        assert_eq!(g.permission.role, Role::Operator);
        assert_eq!(g.permission.area.groups[0].as_str(), "billing-*");
        assert_eq!(g.permission.area.dlq_topics[0].as_str(), "*-dlt");
        assert!(g.permission.payloads);
        let careful = Grant::parse("group:payments operator four-eyes").unwrap();
        assert!(careful.permission.four_eyes);
        let held = Permissions(vec![
            careful.permission,
            Grant::parse("* operator dlts=sandbox-*")
                .unwrap()
                .permission,
        ]);
        assert!(held.has_four_eyes());
        let direct = held.direct_scope().unwrap();
        assert!(direct.covers("sandbox-dlt", None) && !direct.covers("orders-dlt", None));
        let all = Grant::parse("* viewer").unwrap();
        assert_eq!(all.subject, Subject::Everyone);
        assert!(all.permission.area.is_everything() && !all.permission.payloads);
        assert_eq!(
            Grant::parse("token:ci viewer").unwrap().subject,
            Subject::Token("ci".into())
        );
    }

    #[test]
    fn a_bad_grant_says_which_part() {
        let cases = [
            ("group:x", "expected `SUBJECT ROLE"),
            ("team:x viewer", "subject `team:…`"),
            ("billing viewer", "subject `billing`"),
            ("* admin", "role `admin`"),
            ("* viewer topics=x", "`topics=x`"),
            ("* viewer groups=", "pattern ``"),
            ("group:%zz viewer", "two hex digits"),
            ("user: viewer", "empty"),
        ];
        for (line, says) in cases {
            let e = Grant::parse(line).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(line), "{line}: {e}");
        }
    }

    #[test]
    fn a_caller_holds_what_every_grant_naming_them_gives() {
        let grants = Grant::parse_list([
            "* viewer dlts=shared-dlt\ngroup:billing operator groups=billing-*",
            "user:carol viewer payloads",
        ])
        .unwrap();
        let dave = permissions(
            &grants,
            &[
                Subject::Everyone,
                Subject::User("dave".into()),
                Subject::Group("billing".into()),
            ],
        );
        assert_eq!(dave.role(), Some(Role::Operator));
        assert!(dave.may(Role::Operator, "orders-dlt", Some("billing-api")));
        assert!(!dave.may(Role::Operator, "orders-dlt", Some("shipping")));
        assert!(dave.may(Role::Viewer, "shared-dlt", Some("shipping")));
        assert!(!dave.may(Role::Viewer, "orders-dlt", None));
        assert!(dave.payloads("orders-dlt", Some("billing-api")));
        assert!(
            !dave.payloads("shared-dlt", Some("shipping")),
            "a viewer's grant without payloads"
        );
        let operator = dave.scope(Role::Operator).unwrap();
        assert_eq!(operator.areas.len(), 1);
        assert_eq!(dave.scope(Role::Viewer).unwrap().areas.len(), 2);
        let carol = permissions(&grants, &[Subject::Everyone, Subject::User("carol".into())]);
        assert_eq!(carol.scope(Role::Viewer), None, "carol sees everything");
        assert_eq!(carol.payload_scope(), None);
        assert_eq!(carol.scope(Role::Operator), Some(Scope::default()));
        let nobody = permissions(&grants, &[Subject::Token("ci".into())]);
        assert_eq!(nobody.role(), None);
    }
}
