//! `POST .../serviceaccounts/NAME/token`: a `TokenRequest` answered with a token from the
//! server's ServiceAccount signer ([`crate::auth::service_account`]).

use super::{App, body_type, decode_object, read_body, respond};
use crate::auth::{DEFAULT_TOKEN_EXPIRATION, service_account::ISSUER};
use crate::http::request::{ResourcePath, Want};
use crate::registry::ResourceType;
use crate::status::{ApiError, Cause};
use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, Method};
use serde_json::{Value, json};

/// kube's ceiling on `expirationSeconds` (2^32).
const MAX_SECONDS: i64 = 1 << 32;

fn refuse(name: &str, value: i64, message: String) -> ApiError {
    ApiError::invalid(
        "authentication.k8s.io",
        "TokenRequest",
        name,
        vec![Cause::new(
            "FieldValueInvalid",
            "spec.expirationSeconds",
            format!("Invalid value: {value}: {message}"),
        )],
    )
}

fn duration_words(seconds: u64) -> String {
    if seconds.is_multiple_of(60) {
        format!("{} minutes", seconds / 60)
    } else {
        format!("{seconds} seconds")
    }
}

pub(super) async fn request(
    app: &App,
    rt: &ResourceType,
    method: &Method,
    headers: &HeaderMap,
    body: Body,
    rp: &ResourcePath,
) -> Result<Response, ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed(
            method.as_str(),
            "serviceaccounts/token",
        ));
    }
    let (ns, name) = (rp.namespace.as_str(), rp.name.as_str());
    if ns.is_empty() || name.is_empty() {
        return Err(ApiError::route_not_found());
    }
    let account = app.core.get(rt, ns, name)?;
    let bytes = read_body(headers, body).await?;
    let mut review = decode_object(&body_type(headers), &bytes)?;
    let seconds = review
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_TOKEN_EXPIRATION);
    let min = app.auth.min_token_expiration.as_secs();
    if seconds < i64::try_from(min).unwrap_or(i64::MAX) {
        return Err(refuse(
            name,
            seconds,
            format!(
                "may not specify a duration less than {}",
                duration_words(min)
            ),
        ));
    }
    if seconds > MAX_SECONDS {
        return Err(refuse(
            name,
            seconds,
            "may not specify a duration larger than 2^32 seconds".into(),
        ));
    }
    let audiences = crate::meta::strings(review.pointer("/spec/audiences"));
    let uid = account
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let now = jiff::Timestamp::now();
    let (token, expiry) = app
        .auth
        .signer
        .issue(ns, name, uid, audiences.clone(), seconds, now)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("TokenRequest");
    review["metadata"] =
        json!({"name": name, "namespace": ns, "creationTimestamp": now.to_string()});
    review["spec"]["expirationSeconds"] = json!(seconds);
    review["spec"]["audiences"] = if audiences.is_empty() {
        json!([ISSUER])
    } else {
        json!(audiences)
    };
    review["status"] = json!({
        "token": token,
        "expirationTimestamp": expiry.to_string(),
    });
    Ok(respond(201, &review, Want::Json))
}
