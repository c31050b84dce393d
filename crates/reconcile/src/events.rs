//! Events, as every controller publishes them.

use kube::runtime::events::{Event, EventType, Recorder};

/// Publishes an Event; failing to is logged, never fatal.
pub async fn publish(
    recorder: &Recorder,
    obj: &k8s_openapi::api::core::v1::ObjectReference,
    warning: bool,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, obj).await {
        tracing::debug!(error = %e, reason, "publishing an Event failed");
    }
}
