//! Signing in with a token (a session cookie and its CSRF token), who is signed in, signing
//! out.

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{cookie, error, Console, SESSION_COOKIE};
use crate::console::access::Role;

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
    // Behind a proxy that terminates TLS, the browser sends the cookie over HTTPS only.
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{}",
        session.id,
        c.cookie_path(),
        crate::console::access::SESSION_LIFETIME.as_secs(),
        if https { "; Secure" } else { "" }
    );
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({ "role": session.caller.role, "name": session.caller.name, "csrf_token": session.csrf })),
    )
        .into_response()
}

pub(super) async fn session(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Some((caller, csrf)) =
        cookie(&headers, SESSION_COOKIE).and_then(|id| c.access.session(&id))
    {
        return Json(json!({ "role": caller.role, "name": caller.name, "csrf_token": csrf, "show_payloads": c.payloads(&caller) })).into_response();
    }
    match c.caller(&headers, &Method::GET, Role::Viewer) {
        // Anonymous access: no session, no CSRF token needed for what the role allows.
        Ok(caller) => Json(json!({ "role": caller.role, "name": caller.name, "csrf_token": null, "show_payloads": c.payloads(&caller) })).into_response(),
        Err(response) => response,
    }
}

pub(super) async fn sign_out(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        c.access.sign_out(&id);
    }
    let expired = format!(
        "{SESSION_COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
        c.cookie_path()
    );
    (
        [(header::SET_COOKIE, expired)],
        Json(json!({ "signed_out": true })),
    )
        .into_response()
}
