//! The Kubernetes `Status` error catalogue (apiserver-spec §3.13).
//!
//! Every failure the server reports is an [`ApiError`]; the HTTP layer turns it into a
//! `kind: Status` body with the matching code and reason, because kube-rs, kubectl and the
//! Python client all branch on `reason` rather than on the message text.

use serde_json::{Value, json};

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// kube's cause type, such as `FieldValueInvalid`.
    pub reason: String,
    /// The message, as kube words it.
    pub message: String,
    /// The field path, such as `spec.replicas`.
    pub field: String,
}

impl Cause {
    /// A cause of `reason` at `field`.
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.to_string(),
            message: message.into(),
            field: field.into(),
        }
    }
}

/// Who an error is about: rendered into `details`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subject {
    /// The API group; empty for the core group.
    pub group: String,
    /// The resource (plural) for most errors, the Kind for `Invalid`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's uid, when known.
    pub uid: Option<String>,
}

/// A failure that is answered with a `Status` body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// kube's `reason`, such as `NotFound`.
    pub reason: &'static str,
    /// The message, as kube words it.
    pub message: String,
    /// The object the error is about.
    pub subject: Option<Box<Subject>>,
    /// Field-level causes, rendered into `details.causes`.
    pub causes: Vec<Cause>,
    /// Seconds the client should wait before retrying (`Retry-After`).
    pub retry_after: Option<u32>,
}

/// `widgets.example.com` or `configmaps` — how kube-apiserver names a resource in messages.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            subject: None,
            causes: vec![],
            retry_after: None,
        }
    }

    fn about(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.subject = Some(Box::new(Subject {
            group: group.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
            uid: None,
        }));
        self
    }

    /// The same error about the object `group`/`kind`/`name` (`details` of the Status).
    pub fn with_subject(self, group: &str, kind: &str, name: &str) -> Self {
        self.about(group, kind, name)
    }

    /// The same error with field-level causes.
    pub fn with_causes(mut self, causes: Vec<Cause>) -> Self {
        self.causes = causes;
        self
    }

    /// 404 for a path that names nothing the server serves.
    pub fn route_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 404 for an object that does not exist.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 409 for a create whose name is taken.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 409 for a write against a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict_msg(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 with kube's message for `why`.
    pub fn conflict_msg(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .about(group, plural, name)
    }

    /// A webhook's refusal: its code and message, and its reason when kube knows it.
    pub fn from_webhook(code: u16, reason: &str, message: String) -> Self {
        const KNOWN: &[&str] = &[
            "Invalid",
            "Forbidden",
            "BadRequest",
            "NotFound",
            "AlreadyExists",
            "Conflict",
            "InternalError",
            "Unauthorized",
            "MethodNotAllowed",
            "TooManyRequests",
        ];
        let reason = KNOWN
            .iter()
            .find(|k| **k == reason)
            .copied()
            .unwrap_or(match code {
                400 => "BadRequest",
                404 => "NotFound",
                409 => "Conflict",
                422 => "Invalid",
                500 => "InternalError",
                _ => "Forbidden",
            });
        Self::new(code, reason, message)
    }

    /// 400 for a request that cannot be understood.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 naming the object (by Kind) and every offending field.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let what = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let detail = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let detail = if detail.len() == 1 {
            detail[0].clone()
        } else {
            format!("[{}]", detail.join(", "))
        };
        Self::new(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {detail}"),
        )
        .about(group, kind, name)
        .with_causes(causes)
    }

    /// 422 with a message produced elsewhere (JSON-patch engine, list options).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 403 with `message`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 401 for a missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        Self::new(
            401,
            "Unauthorized",
            "Unauthorized: send the bearer token from the kubeconfig that `capw apiserver` wrote, or a client certificate signed by its CA",
        )
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(verb: &str, resource: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind \"{resource}\""),
        )
    }

    /// 406 for an `Accept` header the server cannot answer.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
            ),
        )
    }

    /// 413 for a body over the limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {}", message.into()),
        )
    }

    /// 415 listing the content types accepted.
    pub fn unsupported_media(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 410 for a resourceVersion older than the watch window.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// 429 when too many writes are in flight.
    pub fn too_many_requests() -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server is overloaded; retry shortly",
        );
        e.retry_after = Some(1);
        e
    }

    /// 504 for a resourceVersion newer than the store has.
    pub fn rv_too_large() -> Self {
        let mut e =
            Self::new(504, "Timeout", "Too large resource version").with_causes(vec![Cause::new(
                "ResourceVersionTooLarge",
                "",
                "Too large resource version",
            )]);
        e.retry_after = Some(1);
        e
    }

    /// 500; only storage failures answer it.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    /// The `Status` object clients parse.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(s) = &self.subject {
            details.insert("name".into(), json!(s.name));
            if !s.group.is_empty() {
                details.insert("group".into(), json!(s.group));
            }
            details.insert("kind".into(), json!(s.kind));
            if let Some(uid) = &s.uid {
                details.insert("uid".into(), json!(uid));
            }
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(r) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// The `Status` returned for successful deletes of kinds that do not return the object.
pub fn delete_success(group: &str, plural: &str, name: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "kind": plural, "uid": uid});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_message_names_kind_object_and_field() {
        let e = ApiError::invalid(
            "example.com",
            "Widget",
            "w1",
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                "Invalid value: 11: must be <= 10",
            )],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Widget.example.com \"w1\" is invalid: spec.replicas: Invalid value: 11: must be <= 10"
        );
        let s = e.to_status();
        assert_eq!(s["details"]["causes"][0]["field"], "spec.replicas");
        assert_eq!(s["details"]["kind"], "Widget");
    }

    #[test]
    fn not_found_uses_qualified_resource() {
        let e = ApiError::not_found("", "configmaps", "c");
        assert_eq!(e.message, "configmaps \"c\" not found");
        assert!(e.to_status()["details"].get("group").is_none());
    }
}
