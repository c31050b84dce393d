//! What the host's caches leave out of every object: `managedFields` and kubectl's
//! `last-applied-configuration` annotation. No controller reads either, and together they are
//! often most of an object's bytes: a kubectl-applied object carries its manifest once more in
//! the annotation, and a field set per manager and subresource.

use capw_api::common::names::LAST_APPLIED_ANNOTATION;
use kube::Resource;

/// Whether `obj` still carries something [`for_cache`] drops.
pub fn needed<K: Resource>(obj: &K) -> bool {
    let meta = obj.meta();
    meta.managed_fields.is_some()
        || meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(LAST_APPLIED_ANNOTATION))
}

/// Drops what no controller reads from `obj`, before it enters a reflector store.
pub fn for_cache<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::ObjectMeta;

    #[test]
    fn managed_fields_and_last_applied_go_and_other_annotations_stay() {
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                annotations: Some(
                    [
                        (LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string()),
                        ("keep".to_string(), "me".to_string()),
                    ]
                    .into(),
                ),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(needed(&cm));
        for_cache(&mut cm);
        assert!(!needed(&cm));
        assert!(cm.metadata.managed_fields.is_none());
        let a = cm.metadata.annotations.unwrap_or_default();
        assert_eq!(a.len(), 1);
        assert_eq!(a.get("keep").map(String::as_str), Some("me"));
    }
}
