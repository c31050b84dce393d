//! Events, as every controller publishes them.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

/// The reference an Event names `obj` by, with its resourceVersion, as client-go's
/// `GetReference` makes it (kube's `object_ref` leaves it out). kube's Recorder counts an Event
/// about the same reference with the same reason as a repeat of the first, keeping the first
/// one's note: without the version, a deployment scaled 3 → 5 and then 5 → 2 showed
/// `Scaled 3 -> 5 (x2)`, and a plugin hot-reloaded to a new version showed the old one
/// activated twice.
pub fn reference<K: Resource>(obj: &K, dt: &K::DynamicType) -> ObjectReference {
    ObjectReference {
        resource_version: obj.meta().resource_version.clone(),
        ..obj.object_ref(dt)
    }
}

/// Publishes an Event about `obj` (made by [`reference`]); failing to is logged, never fatal.
///
/// `related` is the second object the Event is about: the Machine a set created or deleted.
/// kube's Recorder (as client-go's events.k8s.io recorder) counts an Event with the same reason,
/// object and related object as a repeat of the first, whatever its note says; without it,
/// three Machines created by one set in one pass read as one Machine created three times.
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
