//! A refused admission, as controller-runtime words it: `apierrors.NewInvalid` for field
//! errors (422, every field a cause), `NewBadRequest` or `NewInternalError` otherwise.

use crate::topology::variables::FieldError;
use capw_apiserver::status::{ApiError, Cause};
use kube::core::admission::AdmissionResponse;

#[derive(Debug)]
pub(crate) struct Refusal(ApiError);

/// kube's cause type for a field error, from the words its message starts with.
fn cause_type(message: &str) -> &'static str {
    const TYPES: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Invalid value", "FieldValueInvalid"),
        ("Forbidden", "FieldValueForbidden"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Not found", "FieldValueNotFound"),
        ("Too long", "FieldValueTooLong"),
        ("Internal error", "InternalError"),
    ];
    TYPES
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, t)| t)
}

impl Refusal {
    /// `<Kind>.cluster.x-k8s.io "<name>" is invalid: ...` with every error as a cause.
    pub fn invalid(kind: &str, name: &str, errors: Vec<FieldError>) -> Self {
        let causes = errors
            .into_iter()
            .map(|e| Cause::new(cause_type(&e.message), e.field, e.message))
            .collect();
        Refusal(ApiError::invalid("cluster.x-k8s.io", kind, name, causes))
    }

    pub fn bad_request(message: String) -> Self {
        Refusal(ApiError::bad_request(message))
    }

    pub fn internal(message: String) -> Self {
        Refusal(ApiError::internal(message))
    }

    /// `apierrors.NewForbidden` for a ClusterClass resource, as upstream words it.
    pub fn forbidden(kind: &str, name: &str, why: String) -> Self {
        let message = format!("{kind}.cluster.x-k8s.io \"{name}\" is forbidden: {why}");
        Refusal(ApiError::forbidden(message).with_subject("cluster.x-k8s.io", kind, name))
    }

    pub fn decode(e: serde_json::Error) -> Self {
        Refusal(ApiError::bad_request(format!(
            "the object does not decode: {e}"
        )))
    }

    pub fn into_response(self, response: AdmissionResponse) -> AdmissionResponse {
        let mut response = response.deny(&self.0.message);
        if let Ok(status) = serde_json::from_value(self.0.to_status()) {
            response.result = status;
        }
        response
    }
}
