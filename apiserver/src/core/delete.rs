//! DELETE: finalizers, `deletionTimestamp`, preconditions and propagation policies.

use super::*;

impl Core {
    /// Deletes one object, or marks it for deletion when finalizers (or the propagation
    /// policy) require it. Returns the response body.
    pub async fn delete(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(Outcome, Value, Vec<String>), ApiError> {
        if rt.builtin == Some(Builtin::Namespace) && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        let key = Self::key(rt, ns, name);
        let mut warnings = vec![];
        if self.may_admit(rt, "", &[crate::admission::Operation::Delete])
            && let Some(cur) = self.store.get(&key)
        {
            let at = crate::admission::Attributes {
                operation: crate::admission::Operation::Delete,
                rt,
                subresource: "",
                namespace: ns,
                name,
                user: &opts.requester.user,
                groups: &opts.requester.groups,
                dry_run: opts.dry_run,
            };
            warnings = self
                .admit(&at, None, Some(&self.to_view(rt, &cur)))
                .await?
                .warnings;
        }
        let outcome = self
            .store
            .write(&key, opts.dry_run, |cur| {
                let Some(cur) = cur else {
                    return Err(ApiError::not_found(&rt.group, &rt.plural, name));
                };
                let uid = meta::str_field(cur, "uid");
                if let Some(want) = opts.precondition_uid.as_deref().filter(|u| !u.is_empty() && *u != uid) {
                    return Err(ApiError::conflict_msg(&rt.group, &rt.plural, name, &format!(
                        "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                    )));
                }
                let rv = meta::str_field(cur, "resourceVersion");
                if let Some(want) = opts.precondition_rv.as_deref().filter(|r| !r.is_empty() && *r != rv) {
                    return Err(ApiError::conflict_msg(&rt.group, &rt.plural, name, &format!(
                        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                    )));
                }
                if meta::is_deleting(cur) {
                    return Ok(Proposed::Put((**cur).clone()));
                }
                let mut fins = meta::finalizers(cur);
                let extra = match opts.propagation {
                    Some(Propagation::Foreground) => Some("foregroundDeletion"),
                    Some(Propagation::Orphan) => Some("orphan"),
                    _ => None,
                };
                if let Some(f) = extra
                    && !fins.iter().any(|x| x == f)
                {
                    fins.push(f.to_string());
                }
                let is_ns = rt.builtin == Some(Builtin::Namespace);
                if fins.is_empty() && !is_ns {
                    return Ok(Proposed::Delete(None));
                }
                let mut obj = (**cur).clone();
                let generation = cur.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
                let m = meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if generation > 0 {
                    m.insert("generation".into(), json!(generation + 1));
                }
                if !fins.is_empty() {
                    m.insert("finalizers".into(), json!(fins));
                }
                if is_ns {
                    obj["status"]["phase"] = json!("Terminating");
                    let spec_fins = obj.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
                    if fins.is_empty() && !spec_fins {
                        return Ok(Proposed::Delete(Some(obj)));
                    }
                }
                Ok(Proposed::Put(obj))
            })
            .await?;
        let body = match &outcome {
            Outcome::Deleted(o) if !rt.returns_deleted_object() => {
                delete_success(&rt.group, &rt.plural, name, meta::str_field(o, "uid"))
            }
            other => self.to_view(rt, other.object()),
        };
        Ok((outcome, body, warnings))
    }
}
