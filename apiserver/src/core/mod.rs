//! The object operations of the server, independent of HTTP: create, update, patch, apply,
//! delete. The HTTP handlers and the built-in controllers (garbage collector, namespace and CRD
//! controllers) all go through here, so every write gets the same validation, server-owned
//! metadata, generation rules, no-op detection and finalizer semantics.
//!
//! `validation` holds the checks every body goes through, `write` the create/update/patch/apply
//! path, `scale` the `autoscaling/v1` Scale view of custom resources, `delete` deletion with
//! finalizers and propagation policies, and `view` serving stored bytes unchanged.

mod delete;
mod scale;
mod validation;
mod view;
mod write;

pub use scale::{ScaleOp, scale_of};
pub use view::Shape;

use crate::builtin;
use crate::meta::{self, meta_mut};
use crate::patch::{self, PatchError, apply as ssa};
use crate::registry::{Builtin, Registry, ResourceType};
use crate::schema;
use crate::status::{ApiError, Cause, delete_success};
use crate::store::{ObjKey, Outcome, Proposed, Store, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// `fieldValidation`: what happens to fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields and warn about each (kube's default).
    #[default]
    Warn,
    /// Refuse a body with unknown or duplicate fields.
    Strict,
}

/// Options common to every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Validate and answer, but store nothing (`dryRun=All`).
    pub dry_run: bool,
    /// The `fieldManager` recorded in managedFields.
    pub field_manager: String,
    /// What happens to fields the schema does not know.
    pub field_validation: FieldValidation,
    /// Server-side apply takes over conflicting fields (`force=true`).
    pub force: bool,
    /// Who asks, as admission webhooks are told.
    pub requester: Requester,
}

/// The authenticated user behind a request, for admission webhooks' `userInfo`.
#[derive(Debug, Clone, Default)]
pub struct Requester {
    /// The user name.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// The body of a PATCH, already parsed.
#[derive(Clone)]
pub enum PatchBody {
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/json-patch+json`: the operations.
    Json(Vec<Value>),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
    /// `application/apply-patch+yaml`: the applied configuration.
    Apply(Value),
}

/// A mutation computed from the current object inside the writer (internal controllers).
pub type MutateFn = Box<dyn FnOnce(Value) -> Result<Value, ApiError> + Send>;

/// What to do to one object.
pub enum Op {
    /// Create this object (POST).
    Create(Value),
    /// Replace the whole object (PUT).
    Replace(Value),
    /// Patch the current object (PATCH).
    Patch(PatchBody),
    /// Compute the new object from the current one (internal controllers).
    Mutate(MutateFn),
}

impl Op {
    /// A copy of a client's write, to run once for admission and again to store; internal
    /// mutations are not sent to webhooks and have none.
    fn client_copy(&self) -> Option<Op> {
        match self {
            Op::Create(v) => Some(Op::Create(v.clone())),
            Op::Replace(v) => Some(Op::Replace(v.clone())),
            Op::Patch(p) => Some(Op::Patch(p.clone())),
            Op::Mutate(_) => None,
        }
    }
}

/// `propagationPolicy` of a DELETE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Propagation {
    /// Delete the object now; the garbage collector deletes its dependents afterwards.
    Background,
    /// Keep the object, with the `foregroundDeletion` finalizer, until its blocking dependents are gone.
    Foreground,
    /// Delete the object and remove it from its dependents' ownerReferences.
    Orphan,
}

/// Options of a DELETE.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Check and answer, but delete nothing (`dryRun=All`).
    pub dry_run: bool,
    /// `propagationPolicy`; the kind's default when unset.
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`: delete only the object with this uid.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only this version of the object.
    pub precondition_rv: Option<String>,
    /// Who asks, as admission webhooks are told.
    pub requester: Requester,
}

/// The result of a write, with the object in the requested version's form.
pub struct Written {
    /// What the store did.
    pub outcome: Outcome,
    /// The object as the client asked to see it: the stored object itself when that already is
    /// the view.
    pub view: Arc<Value>,
    /// Warnings for the response's `Warning` headers (unknown fields, for example).
    pub warnings: Vec<String>,
}

/// Namespaces that exist from the first start and cannot be deleted (`kube-node-lease` can).
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
/// The finalizer that holds a deleted CRD until its custom resources are gone.
pub const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Server state shared by HTTP handlers and built-in controllers.
pub struct Core {
    /// The objects.
    pub store: Store,
    /// The kinds served: the built-ins and every established CRD's.
    pub registry: Registry,
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::Failed(m) => ApiError::unprocessable(m),
        PatchError::TooManyOperations(n) => ApiError::too_large(format!(
            "the JSON patch has {n} operations, more than the limit of 10000"
        )),
    }
}

/// The part of an object whose change bumps `generation`: not metadata, not the type (a
/// multi-version kind's objects differ only in `apiVersion` between views), and not status when
/// status has its own subresource.
/// Whether `a` and `b` have the same content apart from `metadata`, `apiVersion`, `kind` and,
/// with `also_status`, `status`: what decides a generation bump. Compared in place; copies of
/// both objects (managed fields and all) on every write were a good part of a write's cost.
fn same_content(a: &Value, b: &Value, also_status: bool) -> bool {
    let skipped =
        |k: &str| matches!(k, "metadata" | "apiVersion" | "kind") || (also_status && k == "status");
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let kept =
                |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skipped(k)).count();
            kept(a) == kept(b)
                && a.iter()
                    .filter(|(k, _)| !skipped(k))
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

impl Core {
    /// State over `store`, serving the built-in kinds; CRDs are added as they are established.
    pub fn new(store: Store) -> Self {
        Core {
            store,
            registry: Registry::with_builtins(),
        }
    }

    pub(super) fn key(rt: &ResourceType, ns: &str, name: &str) -> ObjKey {
        ObjKey::new(&rt.storage, if rt.namespaced { ns } else { "" }, name)
    }

    /// The stored object rendered for `rt`'s version: Event view conversion, `apiVersion`
    /// rewrite for multi-version CRDs, and schema defaults applied on read.
    pub fn to_view(&self, rt: &ResourceType, stored: &Value) -> Value {
        match rt.builtin {
            Some(Builtin::EventV1) => Self::stamp_view(rt, builtin::event_to_v1(stored)),
            _ => Self::stamp_view(rt, stored.clone()),
        }
    }

    /// [`Core::to_view`] of an object the caller owns (one it just decoded), without a copy.
    pub fn into_view(&self, rt: &ResourceType, stored: Value) -> Value {
        match rt.builtin {
            Some(Builtin::EventV1) => Self::stamp_view(rt, builtin::event_to_v1(&stored)),
            _ => Self::stamp_view(rt, stored),
        }
    }

    /// [`Core::to_view`] of a stored object, shared with the store instead of copied when the
    /// object already is that view: the version served is the one stored and its defaults are
    /// in, as they are for nearly every write.
    pub(super) fn shared_view(&self, rt: &ResourceType, stored: &Arc<Value>) -> Arc<Value> {
        let top = |k: &str| stored.get(k).and_then(Value::as_str);
        let is_view = rt.builtin != Some(Builtin::EventV1)
            && top("apiVersion") == Some(rt.api_version().as_str())
            && top("kind") == Some(rt.kind.as_str())
            && rt
                .schema
                .as_ref()
                .is_none_or(|s| schema::defaulted(stored, s));
        if is_view {
            stored.clone()
        } else {
            Arc::new(self.to_view(rt, stored))
        }
    }

    fn stamp_view(rt: &ResourceType, mut v: Value) -> Value {
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), json!(rt.api_version()));
            m.insert("kind".into(), json!(rt.kind));
        }
        if let Some(s) = &rt.schema {
            schema::default(&mut v, s);
        }
        v
    }

    pub(super) fn from_view(rt: &ResourceType, v: Value) -> Value {
        match rt.builtin {
            Some(Builtin::EventV1) => builtin::event_to_core(&v),
            _ => v,
        }
    }

    /// The stored object in the form of `rt`'s version, or 404.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.store
            .get(&Self::key(rt, ns, name))
            .map(|o| self.into_view(rt, Arc::unwrap_or_clone(o)))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// Creates the namespaces every cluster has.
    pub async fn ensure_initial_namespaces(&self) -> Result<(), ApiError> {
        let Some(rt) = self.registry.get("", "v1", "namespaces") else {
            return Ok(());
        };
        for ns in INITIAL_NAMESPACES {
            if self
                .store
                .get(&ObjKey::new("/namespaces", "", ns))
                .is_none()
            {
                let body = json!({"metadata": {"name": ns}});
                let opts = WriteOptions {
                    field_manager: "capw-apiserver".into(),
                    ..Default::default()
                };
                self.write(&rt, "", ns, "", Op::Create(body), &opts).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::same_content;
    use serde_json::json;

    #[test]
    fn content_ignores_metadata_and_optionally_status() {
        let a = json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 1}});
        let b = json!({"apiVersion": "v2", "metadata": {"name": "b"}, "spec": {"x": 1}, "status": {"s": 2}});
        assert!(same_content(&a, &b, true));
        assert!(!same_content(&a, &b, false));
        let c = json!({"metadata": {}, "spec": {"x": 2}});
        assert!(!same_content(&a, &c, true));
        let d = json!({"metadata": {}, "spec": {"x": 1}, "data": {}});
        assert!(!same_content(&a, &d, true));
        assert!(!same_content(&d, &a, true));
    }
}
