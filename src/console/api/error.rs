//! Why the API refuses or fails a request ([`ApiError`]), and the one answer each becomes:
//! its status and `{"error": …}`. Handlers return `Result<_, ApiError>` and use `?`; what a
//! lower layer says (a refusal of access, a busy read limit, a redrive that cannot change)
//! converts by `From`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::console::access::Refusal;
use crate::console::approvals::NotYours;
use crate::console::limits::Busy;
use crate::console::redrives::RedriveError;

/// Why the API did not do what a request asked; see the module docs.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    /// The request says something the API does not take (a field, a filter, a value): 400.
    #[error("{0}")]
    BadRequest(String),
    /// Who calls may not do this, or is not known: 401 or 403 ([`Refusal`] says which).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// What the request would change is another's (a view someone else saved): 403.
    #[error("{0}")]
    NotTheirs(String),
    /// What the request names is not there (a dead letter, a redrive, a request, a view): 404.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the state it found (decided already, a view of another's): 409.
    #[error("{0}")]
    Conflict(String),
    /// A decision on a request that is not the caller's to make: 403 (their own request) or
    /// 409 (decided already).
    #[error(transparent)]
    NotYours(#[from] NotYours),
    /// The read limits are spent for now: 429, with `Retry-After: 1`.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// A redrive cannot start or change: 404, 409 or 503 ([`RedriveError`] says which).
    #[error(transparent)]
    Redrive(#[from] RedriveError),
    /// What the console reads or writes through did not answer or refused it: Kafka (the
    /// dead-letter, audit or positions topic; nothing was done when it was a write) or the
    /// Schema Registry: 502.
    #[error("{0}")]
    Upstream(String),
    /// The console cannot do this now (not configured for it, or not caught up yet): 503.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// The answer's status.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Refused(Refusal::Unauthenticated) => StatusCode::UNAUTHORIZED,
            ApiError::Refused(_)
            | ApiError::NotTheirs(_)
            | ApiError::NotYours(NotYours::OwnRequest(_)) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::Redrive(RedriveError::Unknown) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Conflict(_)
            | ApiError::NotYours(NotYours::Decided(_))
            | ApiError::Redrive(
                RedriveError::Busy(_) | RedriveError::Finished(_) | RedriveError::DryRun,
            ) => StatusCode::CONFLICT,
            ApiError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ApiError::Unavailable(_) | ApiError::Redrive(RedriveError::Unrecorded(_)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut answer = error(self.status(), &self);
        if let ApiError::Busy(_) = self {
            answer
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        answer
    }
}

/// An error answer: `status` and `{"error": message}`. What [`ApiError`] answers, and what
/// the middleware makes of axum's own refusals.
pub(super) fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: ApiError) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = e.into_response();
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_error_answers_its_status_and_says_why_as_json() {
        let cases = [
            (ApiError::BadRequest("reason: say why".into()), 400),
            (ApiError::Refused(Refusal::Unauthenticated), 401),
            (ApiError::Refused(Refusal::Csrf), 403),
            (
                ApiError::Refused(Refusal::OutOfScope("3 outside".into())),
                403,
            ),
            (
                ApiError::NotTheirs("`console:bo` saved this view".into()),
                403,
            ),
            (ApiError::NotFound("no such view".into()), 404),
            (ApiError::Redrive(RedriveError::Unknown), 404),
            (ApiError::Conflict("decided already".into()), 409),
            (
                ApiError::NotYours(NotYours::OwnRequest("console:ann".into())),
                403,
            ),
            (ApiError::NotYours(NotYours::Decided("approved")), 409),
            (ApiError::Redrive(RedriveError::DryRun), 409),
            (
                ApiError::Upstream("cannot read the audit topic".into()),
                502,
            ),
            (ApiError::Unavailable("no redrive topic".into()), 503),
            (
                ApiError::Redrive(RedriveError::Unrecorded("down".into())),
                503,
            ),
        ];
        for (e, status) in cases {
            let said = e.to_string();
            let (got, retry, body) = answer(e).await;
            assert_eq!(got.as_u16(), status, "{said}");
            assert_eq!(retry, None, "{said}");
            assert_eq!(body, json!({ "error": said }));
        }
    }

    #[tokio::test]
    async fn a_busy_read_limit_says_when_to_try_again() {
        let (status, retry, body) = answer(ApiError::Busy(Busy::Console)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry.as_deref(), Some("1"));
        assert!(body["error"].as_str().is_some_and(|s| !s.is_empty()));
    }
}
