//! Events, as every controller publishes them.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Publishes an Event about `obj`; failing to is logged, never fatal.
///
/// `related` is the second object the Event is about: the Machine a set created or deleted.
/// kube's Recorder (as client-go's events.k8s.io recorder) counts an Event with the same reason,
/// object and related object as a repeat of the first, whatever its note says; without it,
/// three Machines created by one set read as one Machine created three times.
pub async fn publish(
    recorder: &Recorder,
    obj: &ObjectReference,
    related: Option<ObjectReference>,
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
        secondary: related,
    };
    if let Err(e) = recorder.publish(&ev, obj).await {
        tracing::debug!(error = %e, reason, "publishing an Event failed");
    }
}
