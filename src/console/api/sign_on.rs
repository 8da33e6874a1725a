//! Single sign-on's two browser routes: `auth/sign-in` sends the browser to the identity
//! provider, `auth/callback` takes it back, opens a session for whom the provider vouched for
//! and sends the browser to the page (or, when the sign-in did not finish, to the page with the
//! reason in `?sign_in_error=`).

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::error;
use super::{cookie, session_cookie, Console};
use crate::console::single_sign_on::PENDING_LIFETIME;

/// The cookie that binds a sign-in's `state` to the browser that started it.
const STATE_COOKIE: &str = "kafka_dlq_sign_in";

pub(super) async fn start(State(c): State<Console>) -> Response {
    let Some(sso) = &c.sso else {
        return error(
            StatusCode::NOT_FOUND,
            "single sign-on is not configured (--oidc-issuer)",
        );
    };
    match sso.start().await {
        Ok((url, state)) => {
            // Lax: the provider's redirect back is a top-level navigation from its site.
            let bind = format!(
                "{STATE_COOKIE}={state}; Path={}auth/; HttpOnly; SameSite=Lax; Max-Age={}{}",
                c.cookie_path(),
                PENDING_LIFETIME.as_secs(),
                c.secure_suffix(None),
            );
            (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, url), (header::SET_COOKIE, bind)],
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(event = "console_sign_in_failed", error = %e, "single sign-on: {e}");
            error(StatusCode::BAD_GATEWAY, e)
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Callback {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

pub(super) async fn callback(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let Some(sso) = &c.sso else {
        return error(
            StatusCode::NOT_FOUND,
            "single sign-on is not configured (--oidc-issuer)",
        );
    };
    let clear = format!(
        "{STATE_COOKIE}=; Path={}auth/; HttpOnly; SameSite=Lax; Max-Age=0",
        c.cookie_path()
    );
    let back = |why: String| {
        tracing::warn!(event = "console_sign_in_failed", error = %why, "single sign-on: {why}");
        let q = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("sign_in_error", &why)
            .finish();
        (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, format!("{}?{q}", c.cookie_path())),
                (header::SET_COOKIE, clear.clone()),
            ],
        )
            .into_response()
    };
    if let Some(e) = q.error {
        let detail = q
            .error_description
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        return back(format!(
            "the identity provider refused the sign-in: {e}{detail}"
        ));
    }
    let (Some(state), Some(code)) = (q.state, q.code) else {
        return back("the identity provider's answer has no code or state".into());
    };
    let bound = cookie(&headers, STATE_COOKIE);
    let identity = match sso.finish(&state, bound.as_deref(), &code).await {
        Ok(identity) => identity,
        Err(e) => return back(e.to_string()),
    };
    let groups = identity.groups.clone();
    match c
        .access
        .sign_in_identity(&identity.name, &identity.groups, identity.id_token)
    {
        Ok(session) => {
            tracing::info!(event = "console_signed_in", user = %identity.name, ?groups,
                role = session.caller.role().as_str(), "{} signed in", identity.name);
            let mut response =
                (StatusCode::SEE_OTHER, [(header::LOCATION, c.cookie_path())]).into_response();
            let h = response.headers_mut();
            h.append(
                header::SET_COOKIE,
                session_cookie(&c, &session.id, &headers)
                    .parse()
                    .expect("a cookie"),
            );
            h.append(header::SET_COOKIE, clear.parse().expect("a cookie"));
            response
        }
        Err(no_grant) => back(no_grant.to_string()),
    }
}
