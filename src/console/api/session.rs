//! Signing in with a token (a session cookie and its CSRF token), who is signed in, signing
//! out.

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::error;
use super::{cookie, session_cookie, Console, SESSION_COOKIE};
use crate::console::access::Role;
use crate::replay::audit::{Action, ReplayRun};

#[derive(Deserialize)]
pub(super) struct SignIn {
    token: String,
}

pub(super) async fn sign_in(
    State(c): State<Console>,
    headers: HeaderMap,
    Json(body): Json<SignIn>,
) -> Response {
    let Some(session) = c.access.sign_in(&body.token) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "this token is not a viewer's or an operator's",
        );
    };
    let cookie = session_cookie(&c, &session.id, &headers);
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({ "role": session.caller.role(), "name": session.caller.name, "csrf_token": session.csrf })),
    )
        .into_response()
}

pub(super) async fn session(State(c): State<Console>, headers: HeaderMap) -> Response {
    c.learn_sign_outs();
    if let Some((caller, csrf)) =
        cookie(&headers, SESSION_COOKIE).and_then(|id| c.access.session(&id))
    {
        return Json(json!({ "role": caller.role(), "name": caller.name, "csrf_token": csrf, "show_payloads": c.shows_payloads(&caller) })).into_response();
    }
    match c.caller(&headers, &Method::GET, Role::Viewer) {
        // Anonymous access: no session, no CSRF token needed for what the role allows.
        Ok(caller) => Json(json!({ "role": caller.role(), "name": caller.name, "csrf_token": null, "show_payloads": c.shows_payloads(&caller) })).into_response(),
        // Signed out: how to sign in.
        Err(_) => (
            StatusCode::UNAUTHORIZED,
            Json(json!({
                "error": crate::console::access::Refusal::Unauthenticated.to_string(),
                "sign_in_url": c.sso.as_ref().map(|_| "auth/sign-in"),
            })),
        )
            .into_response(),
    }
}

pub(super) async fn sign_out(State(c): State<Console>, headers: HeaderMap) -> Response {
    let ended = cookie(&headers, SESSION_COOKIE).and_then(|id| c.access.sign_out(&id));
    if let Some(out) = &ended {
        // Every replica refuses the cookie from now on: they read the audit topic.
        let mut run = ReplayRun::record(Action::SignOut, &format!("console:{}", out.name), "");
        run.request = Some(out.id.clone());
        run.ended = out.expires;
        if let Err(e) = c.record(&run).await {
            tracing::warn!(
                event = "console_sign_out_not_shared",
                error = %e, "this replica refuses the session; others until it ends"
            );
        }
    }
    // Signed in with single sign-on: the provider's sign-out too, when it has one.
    let logout_url = match (&c.sso, ended.and_then(|e| e.id_token)) {
        (Some(sso), Some(token)) => sso.sign_out_url(&token).await,
        _ => None,
    };
    let expired = format!(
        "{SESSION_COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
        c.cookie_path()
    );
    (
        [(header::SET_COOKIE, expired)],
        Json(json!({ "signed_out": true, "logout_url": logout_url })),
    )
        .into_response()
}
