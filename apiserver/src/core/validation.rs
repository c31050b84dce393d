//! The checks every request body goes through: identity (kind, name, namespace), the
//! namespace it lands in, schema or typed validation, and ObjectMeta rules.

use super::*;

impl Core {
    pub(super) fn check_namespace(&self, rt: &ResourceType, ns: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let Some(nsobj) = self.store.get_raw(&ObjKey::new("/namespaces", "", ns)) else {
            return Err(ApiError::not_found("", "namespaces", ns));
        };
        if nsobj.lifecycle().is_some_and(|l| l.is_deleting()) {
            return Err(ApiError::forbidden(format!(
                "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                rt.plural
            ))
            .with_causes(vec![Cause::new("NamespaceTerminating", "metadata.namespace", format!("namespace {ns} is terminating"))]));
        }
        Ok(())
    }

    /// Type, name and namespace checks every body goes through.
    pub(super) fn check_identity(
        rt: &ResourceType,
        body: &mut Value,
        ns: &str,
        name: Option<&str>,
    ) -> Result<(), ApiError> {
        let Some(obj) = body.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        };
        let want_av = rt.api_version();
        for (field, want) in [("apiVersion", want_av.as_str()), ("kind", rt.kind.as_str())] {
            match obj.get(field).and_then(Value::as_str) {
                None | Some("") => {}
                Some(got) if got == want => {}
                Some(got) => {
                    // Multi-version CRDs accept any served version of the same group and kind.
                    let same_group = field == "apiVersion"
                        && rt.is_custom()
                        && got.rsplit_once('/').is_some_and(|(g, _)| g == rt.group);
                    if !same_group {
                        return Err(ApiError::bad_request(format!(
                            "the {field} in the request body ({got}) does not match the {field} of this endpoint ({want})"
                        )));
                    }
                }
            }
            obj.insert(field.into(), json!(want));
        }
        let m = meta_mut(body);
        if let Some(url_name) = name {
            match m.get("name").and_then(Value::as_str) {
                None | Some("") => {
                    m.insert("name".into(), json!(url_name));
                }
                Some(n) if n == url_name => {}
                Some(n) => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({url_name})"
                    )));
                }
            }
        }
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                None | Some("") => {
                    m.insert("namespace".into(), json!(ns));
                }
                Some(n) if n == ns => {}
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    /// Schema (custom resources) or typed (built-ins) validation plus ObjectMeta rules.
    pub(super) fn validate(
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let name = meta::str_field(obj, "name").to_string();
        let mut causes = vec![];
        if let Some(s) = &rt.schema {
            let pruned = schema::prune(obj, s);
            if !pruned.0.is_empty() {
                match opts.field_validation {
                    FieldValidation::Strict => {
                        let list = pruned
                            .0
                            .iter()
                            .map(|f| format!("unknown field \"{f}\""))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(ApiError::bad_request(format!(
                            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {list}",
                            kind = rt.kind,
                            version = rt.version,
                        )));
                    }
                    FieldValidation::Warn => {
                        warnings.extend(pruned.0.iter().map(|f| format!("unknown field \"{f}\"")))
                    }
                    FieldValidation::Ignore => {}
                }
            }
            schema::default(obj, s);
            let body = &*obj;
            let mut schema_errs = schema::validate(body, s, "");
            // The old object in the form the new one is compared with; only needed to
            // ratchet errors and for transition rules.
            let old = old
                .filter(|_| !schema_errs.is_empty() || rt.cel.is_some())
                .map(|o| schema::with_defaults(o, s));
            if let Some(o) = &old {
                schema_errs.retain(|c| !schema::ratcheted(c, body, o));
            }
            let blocked = schema_errs.iter().any(schema::blocks_cel);
            causes.extend(schema_errs);
            if let Some(compiled) = &rt.cel {
                if blocked {
                    causes.push(schema::cel_not_checked());
                } else {
                    causes.extend(schema::validate_cel(body, s, compiled, old.as_deref()));
                }
            }
        }
        if let Some(b) = rt.builtin {
            causes.extend(builtin::on_write(b, obj, old));
        }
        causes.extend(meta::validate(obj, rt.builtin == Some(Builtin::Namespace)));
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
        }
        if let Some(b) = rt.builtin {
            // Both Event views are validated in their storage (core/v1) form.
            let b = if b == Builtin::EventV1 {
                Builtin::Event
            } else {
                b
            };
            builtin::typed_check(b, obj)?;
        }
        Ok(())
    }
}
