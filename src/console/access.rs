//! Who may do what in the console: bearer tokens of two roles, people signed in with single
//! sign-on, the [grants](super::grants) that scope both, the page's sessions, and the CSRF
//! token every action a session sends must carry. Deciding only; the HTTP layer asks.
//!
//! A token list (`KAFKA_DLQ_CONSOLE_VIEWER_TOKEN`, `KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN`) is one
//! or more tokens separated by commas or new lines, each `NAME:TOKEN` (the name goes into the
//! audit as who acted) or a bare `TOKEN` (named after its role). A token that no grant names
//! (`token:NAME`) holds its list's role over everything; one that a grant names holds what its
//! grants give, and nothing else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use super::grants::Role;
use super::grants::{permissions, Grant, Permission, Permissions, Subject};
use super::sealed_session::{Holder, Sealed, SessionKey};

/// A caller known: what it may do and the name the audit records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Its name (`console:<name>` in the audit).
    pub name: String,
    /// Its grants' permissions (never empty).
    pub permissions: Permissions,
}

impl Caller {
    /// The highest role it holds anywhere: what the routes it may call at all are decided on.
    pub fn role(&self) -> Role {
        self.permissions.role().unwrap_or(Role::Viewer)
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No credentials, or none that are valid: 401.
    #[error("sign in: send `Authorization: Bearer <token>` or sign in on the page")]
    Unauthenticated,
    /// Valid credentials without the role: 403.
    #[error("the {0} role may not do this; an operator token may")]
    Forbidden(&'static str),
    /// Dead letters outside the caller's grants: 403, saying what.
    #[error("{0}")]
    OutOfScope(String),
    /// An action sent with the session cookie but without its CSRF token: 403.
    #[error("missing or wrong X-CSRF-Token header: actions sent with the session cookie must carry the token the sign-in answered")]
    Csrf,
}

/// A malformed token list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadTokens(String);

/// Parses a token list (see the module docs) of `role`.
pub fn parse_tokens(list: &str, role: Role) -> Result<Vec<(String, String, Role)>, BadTokens> {
    let mut tokens = Vec::new();
    for item in list
        .split([',', '\n'])
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let (name, token) = match item.split_once(':') {
            Some((name, token)) => (name.trim().to_string(), token.trim().to_string()),
            None => (role.as_str().to_string(), item.to_string()),
        };
        if token.len() < 16 {
            return Err(BadTokens(format!(
                "a {} token of `{name}` has {} characters; at least 16 are needed (`openssl rand -hex 32` makes one)",
                role.as_str(),
                token.len()
            )));
        }
        if name.is_empty() || name.chars().any(|c| c.is_control()) {
            return Err(BadTokens(format!(
                "a {} token has an empty or unprintable name",
                role.as_str()
            )));
        }
        tokens.push((name, token, role));
    }
    Ok(tokens)
}

/// How long a session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The largest ID token a session cookie carries (a cookie holds about 4 KB): a larger one is
/// left out, and the provider's sign-out then goes without its hint.
const MAX_ID_TOKEN: usize = 2048;

/// The tokens, the anonymous role if any, the grants, the key sessions are sealed with, and
/// the sessions signed out before they ended.
pub struct Access {
    tokens: Vec<(String, String, Role)>,
    anonymous: Option<Role>,
    grants: Vec<Grant>,
    key: SessionKey,
    /// Session ids signed out, with when each would have ended (forgotten then).
    revoked: Mutex<HashMap<String, DateTime<Utc>>>,
}

/// Someone the identity provider vouched for, whom no grant names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{user}` signed in, but no grant names them or any of their groups ({groups}): ask for a grant (docs/console.md, \"Grants\")")]
pub struct NoGrant {
    /// Their name.
    pub user: String,
    /// Their groups, comma-separated.
    pub groups: String,
}

/// A new session: its cookie and CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The session cookie's value (the session, sealed).
    pub id: String,
    /// The token actions must carry in `X-CSRF-Token`.
    pub csrf: String,
    /// Who signed in.
    pub caller: Caller,
}

/// A session that ended by signing out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedOut {
    /// Its id.
    pub id: String,
    /// Whose it was.
    pub name: String,
    /// When it would have ended.
    pub expires: DateTime<Utc>,
    /// The identity provider's ID token, for its sign-out.
    pub id_token: Option<String>,
}

impl Access {
    /// Access by `tokens` ([`parse_tokens`]); `anonymous` is the role of a caller without
    /// credentials (`None`: refused). Sessions are sealed with a key of this process alone
    /// until [`Access::with_session_key`] gives one.
    pub fn new(tokens: Vec<(String, String, Role)>, anonymous: Option<Role>) -> Access {
        Access {
            tokens,
            anonymous,
            grants: Vec::new(),
            key: SessionKey::random(),
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// The same access with `grants` ([`super::grants`]).
    pub fn with_grants(mut self, grants: Vec<Grant>) -> Access {
        self.grants = grants;
        self
    }

    /// The same access sealing sessions with `key`: every replica with the same key opens
    /// them, and they survive restarts.
    pub fn with_session_key(mut self, key: SessionKey) -> Access {
        self.key = key;
        self
    }

    /// No token and no anonymous role: nobody could get in with a token.
    pub fn is_closed(&self) -> bool {
        self.tokens.is_empty() && self.anonymous.is_none()
    }

    /// The grants.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The caller a bearer token names.
    pub fn by_token(&self, token: &str) -> Option<Caller> {
        // Every token is compared, each in constant time: how long it takes says nothing of
        // which one or how much of it matched.
        let mut found = None;
        for (name, secret, role) in &self.tokens {
            if equal(secret.as_bytes(), token.as_bytes()) && found.is_none() {
                found = Some((name, *role));
            }
        }
        let (name, role) = found?;
        Some(self.token_caller(name, role))
    }

    fn token_caller(&self, name: &str, role: Role) -> Caller {
        let mut held = permissions(&self.grants, &[Subject::Token(name.to_string())]);
        if held.0.is_empty() {
            held = Permissions(vec![Permission::everywhere(role, false)]);
        }
        Caller {
            name: name.to_string(),
            permissions: held,
        }
    }

    /// What the grants give `user` of `groups` (none: empty).
    fn person(&self, user: &str, groups: &[String]) -> Permissions {
        let mut names = vec![Subject::Everyone, Subject::User(user.to_string())];
        names.extend(groups.iter().map(|g| Subject::Group(g.clone())));
        permissions(&self.grants, &names)
    }

    /// Signs in with `token`: a session for its caller.
    pub fn sign_in(&self, token: &str) -> Option<NewSession> {
        let caller = self.by_token(token)?;
        let holder = Holder::Token(caller.name.clone());
        Some(self.open(caller, holder, None))
    }

    /// Signs in `user` of `groups`, whom the identity provider vouched for with `id_token`: a
    /// session holding what the grants give them.
    pub fn sign_in_identity(
        &self,
        user: &str,
        groups: &[String],
        id_token: String,
    ) -> Result<NewSession, NoGrant> {
        let held = self.person(user, groups);
        if held.0.is_empty() {
            return Err(NoGrant {
                user: user.to_string(),
                groups: match groups.is_empty() {
                    true => "none".into(),
                    false => groups.join(", "),
                },
            });
        }
        // Only the groups some grant names count, and only they go into the cookie.
        let named: Vec<String> = groups
            .iter()
            .filter(|g| {
                self.grants
                    .iter()
                    .any(|grant| grant.subject == Subject::Group((*g).clone()))
            })
            .cloned()
            .collect();
        let caller = Caller {
            name: user.to_string(),
            permissions: held,
        };
        let holder = Holder::Person {
            name: user.to_string(),
            groups: named,
        };
        let hint = Some(id_token).filter(|t| t.len() <= MAX_ID_TOKEN);
        Ok(self.open(caller, holder, hint))
    }

    fn open(&self, caller: Caller, holder: Holder, id_token: Option<String>) -> NewSession {
        let sealed = Sealed {
            id: random_token(),
            holder,
            csrf: random_token(),
            expires: Utc::now() + chrono::Duration::from_std(SESSION_LIFETIME).expect("12 hours"),
            id_token,
        };
        NewSession {
            id: sealed.seal(&self.key),
            csrf: sealed.csrf,
            caller,
        }
    }

    /// Ends the session of cookie `cookie` here (a replica learns of it from
    /// [`Access::revoke`]): what it was, if it was one.
    pub fn sign_out(&self, cookie: &str) -> Option<SignedOut> {
        let sealed = Sealed::open(cookie, &self.key, Utc::now())?;
        self.revoke(&sealed.id, sealed.expires);
        let name = match &sealed.holder {
            Holder::Token(name) => name.clone(),
            Holder::Person { name, .. } => name.clone(),
        };
        Some(SignedOut {
            id: sealed.id,
            name,
            expires: sealed.expires,
            id_token: sealed.id_token,
        })
    }

    /// Session `id`, which would have ended at `expires`, is signed out: refused from now on.
    pub fn revoke(&self, id: &str, expires: DateTime<Utc>) {
        let mut revoked = self.revoked.lock().expect("revoked");
        let now = Utc::now();
        revoked.retain(|_, until| *until > now);
        if expires > now {
            revoked.insert(id.to_string(), expires);
        }
    }

    /// The session cookie `cookie`'s caller (as the grants in force say) and CSRF token,
    /// while it lasts: not ended, not signed out, its token still listed and its person still
    /// granted something.
    pub fn session(&self, cookie: &str) -> Option<(Caller, String)> {
        let sealed = Sealed::open(cookie, &self.key, Utc::now())?;
        if self
            .revoked
            .lock()
            .expect("revoked")
            .contains_key(&sealed.id)
        {
            return None;
        }
        let caller = match &sealed.holder {
            Holder::Token(name) => {
                let (_, _, role) = self.tokens.iter().find(|(n, _, _)| n == name)?;
                self.token_caller(name, *role)
            }
            Holder::Person { name, groups } => {
                let held = self.person(name, groups);
                if held.0.is_empty() {
                    return None;
                }
                Caller {
                    name: name.clone(),
                    permissions: held,
                }
            }
        };
        Some((caller, sealed.csrf))
    }

    /// Who is calling and whether they may: `bearer` is the `Authorization: Bearer` token,
    /// `cookie` the session cookie, `csrf` the `X-CSRF-Token` header; `action` says the
    /// request changes something (then the session's CSRF token is required), `needs` the
    /// role it takes.
    pub fn check(
        &self,
        bearer: Option<&str>,
        cookie: Option<&str>,
        csrf: Option<&str>,
        action: bool,
        needs: Role,
    ) -> Result<Caller, Refusal> {
        let caller = if let Some(token) = bearer {
            // A bearer token is never sent by a browser on its own: no CSRF token needed.
            self.by_token(token).ok_or(Refusal::Unauthenticated)?
        } else if let Some((caller, expected)) = cookie.and_then(|id| self.session(id)) {
            if action && !csrf.is_some_and(|c| equal(c.as_bytes(), expected.as_bytes())) {
                return Err(Refusal::Csrf);
            }
            caller
        } else if let Some(role) = self.anonymous {
            Caller {
                name: "anonymous".into(),
                permissions: Permissions(vec![Permission::everywhere(role, false)]),
            }
        } else {
            return Err(Refusal::Unauthenticated);
        };
        if caller.role() < needs {
            return Err(Refusal::Forbidden(caller.role().as_str()));
        }
        Ok(caller)
    }
}

/// Constant-time equality of two byte strings (their lengths may differ: that alone is told).
fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes as hex, from the operating system's generator.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    openssl::rand::rand_bytes(&mut bytes).expect("the operating system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "viewer-token-0123456789";
    const O: &str = "operator-token-0123456789";

    fn access(anonymous: Option<Role>) -> Access {
        let mut tokens = parse_tokens(V, Role::Viewer).unwrap();
        tokens.extend(parse_tokens(&format!("alice:{O}, bob:{O}-bob"), Role::Operator).unwrap());
        Access::new(tokens, anonymous)
    }

    #[test]
    fn token_lists_name_each_token() {
        let tokens = parse_tokens(&format!("alice:{O}\n{O}x"), Role::Operator).unwrap();
        assert_eq!(tokens[0].0, "alice");
        assert_eq!(tokens[1].0, "operator");
        let short = parse_tokens("bob:short", Role::Viewer).unwrap_err();
        assert!(
            short.to_string().contains("`bob` has 5 characters"),
            "{short}"
        );
        assert!(parse_tokens(" , ", Role::Viewer).unwrap().is_empty());
    }

    #[test]
    fn a_viewer_may_read_and_not_act() {
        let a = access(None);
        let viewer = a.check(Some(V), None, None, false, Role::Viewer).unwrap();
        assert_eq!(viewer.role(), Role::Viewer);
        assert_eq!(
            a.check(Some(V), None, None, true, Role::Operator),
            Err(Refusal::Forbidden("viewer"))
        );
        let alice = a.check(Some(O), None, None, true, Role::Operator).unwrap();
        assert_eq!(alice.name, "alice");
    }

    #[test]
    fn no_credentials_is_refused_unless_anonymous_is_allowed() {
        assert_eq!(
            access(None).check(None, None, None, false, Role::Viewer),
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            access(None).check(Some("wrong"), None, None, false, Role::Viewer),
            Err(Refusal::Unauthenticated)
        );
        let anonymous = access(Some(Role::Viewer));
        assert!(anonymous
            .check(None, None, None, false, Role::Viewer)
            .is_ok());
        assert_eq!(
            anonymous.check(None, None, None, true, Role::Operator),
            Err(Refusal::Forbidden("viewer"))
        );
        assert!(Access::new(Vec::new(), None).is_closed());
    }

    #[test]
    fn grants_scope_the_tokens_they_name_and_let_people_in() {
        let grants = Grant::parse_list([
            "token:bob operator groups=billing-*",
            "group:ops viewer payloads",
            "user:erin@example.com operator dlts=orders-dlt",
        ])
        .unwrap();
        let a = access(None).with_grants(grants);
        // A token no grant names: its list's role over everything.
        let alice = a.by_token(O).unwrap();
        assert_eq!(alice.permissions.scope(Role::Operator), None);
        // A token a grant names: that grant only.
        let bob = a.by_token(&format!("{O}-bob")).unwrap();
        assert!(bob
            .permissions
            .may(Role::Operator, "any-dlt", Some("billing-api")));
        assert!(!bob
            .permissions
            .may(Role::Viewer, "any-dlt", Some("shipping")));
        // People: what every grant naming them, or a group of theirs, gives.
        let dan = a
            .sign_in_identity("dan@example.com", &["ops".into()], "t".into())
            .unwrap();
        assert_eq!(dan.caller.role(), Role::Viewer);
        assert!(dan.caller.permissions.payloads("x-dlt", None));
        let erin = a
            .sign_in_identity("erin@example.com", &[], "t".into())
            .unwrap();
        assert!(erin
            .caller
            .permissions
            .may(Role::Operator, "orders-dlt", Some("g")));
        assert!(!erin
            .caller
            .permissions
            .may(Role::Viewer, "other-dlt", Some("g")));
        let nobody = a
            .sign_in_identity("mallory@example.com", &["interns".into()], "t".into())
            .unwrap_err();
        assert!(nobody.to_string().contains("interns"), "{nobody}");
        // Signing out gives back the ID token the provider's sign-out wants.
        assert_eq!(a.sign_out(&erin.id).unwrap().id_token.as_deref(), Some("t"));
        assert_eq!(
            a.sign_out(&a.sign_in(V).unwrap().id).unwrap().id_token,
            None
        );
        assert!(a.session(&erin.id).is_none(), "signed out");
    }

    #[test]
    fn session_actions_need_the_csrf_token() {
        let a = access(None);
        let s = a.sign_in(O).unwrap();
        assert_eq!(s.caller.name, "alice");
        assert!(a
            .check(None, Some(&s.id), None, false, Role::Viewer)
            .is_ok());
        assert_eq!(
            a.check(None, Some(&s.id), None, true, Role::Operator),
            Err(Refusal::Csrf)
        );
        assert_eq!(
            a.check(None, Some(&s.id), Some("forged"), true, Role::Operator),
            Err(Refusal::Csrf)
        );
        assert!(a
            .check(None, Some(&s.id), Some(&s.csrf), true, Role::Operator)
            .is_ok());
        a.sign_out(&s.id);
        assert_eq!(
            a.check(None, Some(&s.id), Some(&s.csrf), true, Role::Operator),
            Err(Refusal::Unauthenticated)
        );
        assert!(a.sign_in("nope").is_none());
        assert_ne!(a.sign_in(V).unwrap().id, a.sign_in(V).unwrap().id);
    }
}
