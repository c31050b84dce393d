//! The object operations of the server, independent of HTTP: create, update, patch, apply,
//! delete. The HTTP handlers and the built-in controllers (garbage collector, namespace and CRD
//! controllers) all go through here, so every write gets the same validation, server-owned
//! metadata, generation rules, no-op detection and finalizer semantics.

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
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// Options common to every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    pub force: bool,
}

/// The body of a PATCH, already parsed.
pub enum PatchBody {
    Merge(Value),
    Json(Vec<Value>),
    Strategic(Value),
    Apply(Value),
}

/// A mutation computed from the current object inside the writer (internal controllers).
pub type MutateFn = Box<dyn FnOnce(Value) -> Result<Value, ApiError> + Send>;

/// What to do to one object.
pub enum Op {
    Create(Value),
    Replace(Value),
    Patch(PatchBody),
    Mutate(MutateFn),
}

/// `propagationPolicy` of a DELETE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// The result of a write, with the object in the requested version's form.
pub struct Written {
    pub outcome: Outcome,
    pub view: Value,
    pub warnings: Vec<String>,
}

/// Namespaces that exist from the first start and cannot be deleted (`kube-node-lease` can).
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
pub const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Server state shared by HTTP handlers and built-in controllers.
pub struct Core {
    pub store: Store,
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

fn without_meta_and(v: &Value, also_status: bool) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if also_status {
            m.remove("status");
        }
    }
    v
}

impl Core {
    pub fn new(store: Store) -> Self {
        Core {
            store,
            registry: Registry::with_builtins(),
        }
    }

    fn key(rt: &ResourceType, ns: &str, name: &str) -> ObjKey {
        ObjKey::new(&rt.storage, if rt.namespaced { ns } else { "" }, name)
    }

    /// The stored object rendered for `rt`'s version: Event view conversion, `apiVersion`
    /// rewrite for multi-version CRDs, and schema defaults applied on read.
    pub fn to_view(&self, rt: &ResourceType, stored: &Value) -> Value {
        let mut v = match rt.builtin {
            Some(Builtin::EventV1) => builtin::event_to_v1(stored),
            _ => stored.clone(),
        };
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), json!(rt.api_version()));
            m.insert("kind".into(), json!(rt.kind));
        }
        if let Some(s) = &rt.schema {
            schema::default(&mut v, s);
        }
        v
    }

    fn from_view(rt: &ResourceType, v: Value) -> Value {
        match rt.builtin {
            Some(Builtin::EventV1) => builtin::event_to_core(&v),
            _ => v,
        }
    }

    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.store
            .get(&Self::key(rt, ns, name))
            .map(|o| self.to_view(rt, &o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let Some(nsobj) = self.store.get(&ObjKey::new("/namespaces", "", ns)) else {
            return Err(ApiError::not_found("", "namespaces", ns));
        };
        if meta::is_deleting(&nsobj) {
            return Err(ApiError::forbidden(format!(
                "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                rt.plural
            ))
            .with_causes(vec![Cause::new("NamespaceTerminating", "metadata.namespace", format!("namespace {ns} is terminating"))]));
        }
        Ok(())
    }

    /// Type, name and namespace checks every body goes through.
    fn check_identity(
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
    fn validate(
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
                            "strict decoding error: {list}"
                        )));
                    }
                    FieldValidation::Warn => {
                        warnings.extend(pruned.0.iter().map(|f| format!("unknown field \"{f}\"")))
                    }
                    FieldValidation::Ignore => {}
                }
            }
            schema::default(obj, s);
            let mut body = obj.clone();
            causes.extend(schema::validate(&mut body, s, ""));
            if rt.has_cel && causes.is_empty() {
                causes.extend(schema::validate_cel(&body, s, old));
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

    fn who<'a>(
        opts: &'a WriteOptions,
        rt_av: &'a str,
        sub: &'a str,
        now: &'a str,
    ) -> ssa::Applier<'a> {
        ssa::Applier {
            manager: &opts.field_manager,
            api_version: rt_av,
            subresource: sub,
            force: opts.force,
            now,
        }
    }

    /// A new object's server-owned metadata and checks; returns the object to store.
    fn new_object(
        &self,
        rt: &ResourceType,
        ns: &str,
        mut body: Value,
        opts: &WriteOptions,
        applied: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Value, ApiError> {
        self.check_namespace(rt, ns)?;
        if !meta::str_field(&body, "resourceVersion").is_empty() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if rt.status_subresource
            && (rt.is_custom() || rt.builtin == Some(Builtin::Crd))
            && let Some(m) = body.as_object_mut()
        {
            m.remove("status");
        }
        let mut obj = Self::from_view(rt, body);
        meta::keep_server_fields(&mut obj, None);
        if !applied {
            meta_mut(&mut obj).remove("managedFields");
        }
        Self::validate(rt, &mut obj, None, opts, warnings)?;
        let now = meta::now_rfc3339();
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now));
        if rt.tracks_generation() {
            m.insert("generation".into(), json!(1));
        }
        if rt.builtin == Some(Builtin::Crd) {
            let fins = m.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = fins.as_array_mut()
                && !list.iter().any(|f| f == CRD_FINALIZER)
            {
                list.push(json!(CRD_FINALIZER));
            }
        }
        if !applied {
            let av = rt.api_version();
            ssa::record_update(
                None,
                &mut obj,
                &Self::who(opts, &av, "", &now),
                &|p: &str| rt.list_type(p),
            );
        }
        Ok(obj)
    }

    /// Applies an update to `cur`; decides between storing and finishing a deletion.
    #[allow(clippy::too_many_arguments)]
    fn updated(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        sub: &str,
        cur: &Value,
        mut new: Value,
        opts: &WriteOptions,
        applied: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Proposed, ApiError> {
        Self::check_identity(rt, &mut new, ns, Some(name))?;
        let rv = meta::str_field(&new, "resourceVersion");
        if !rv.is_empty() && rv != meta::str_field(cur, "resourceVersion") {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let uid = meta::str_field(&new, "uid");
        if !uid.is_empty() && uid != meta::str_field(cur, "uid") {
            return Err(ApiError::conflict_msg(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::str_field(cur, "uid")
                ),
            ));
        }
        let new = Self::from_view(rt, new);
        let mut obj = if sub == "status" {
            let mut o = cur.clone();
            match new.get("status") {
                Some(s) => o["status"] = s.clone(),
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if applied && let Some(mf) = new.pointer("/metadata/managedFields") {
                meta_mut(&mut o).insert("managedFields".into(), mf.clone());
            }
            o
        } else {
            let mut o = new;
            if rt.status_subresource {
                match cur.get("status") {
                    Some(s) => o["status"] = s.clone(),
                    None => {
                        if let Some(m) = o.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            o
        };
        meta::keep_server_fields(&mut obj, Some(cur));
        if !applied {
            if let Some(mf) = cur.pointer("/metadata/managedFields") {
                meta_mut(&mut obj).insert("managedFields".into(), mf.clone());
            } else {
                meta_mut(&mut obj).remove("managedFields");
            }
        }
        Self::validate(rt, &mut obj, Some(cur), opts, warnings)?;
        if meta::is_deleting(cur) {
            let before = meta::finalizers(cur);
            let added: Vec<String> = meta::finalizers(&obj)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        if rt.tracks_generation() {
            let skip_status = rt.status_subresource;
            if without_meta_and(&obj, skip_status) != without_meta_and(cur, skip_status) {
                let g = cur
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                meta_mut(&mut obj).insert("generation".into(), json!(g + 1));
            }
        }
        if !applied {
            let now = meta::now_rfc3339();
            let av = rt.api_version();
            ssa::record_update(
                Some(cur),
                &mut obj,
                &Self::who(opts, &av, sub, &now),
                &|p: &str| rt.list_type(p),
            );
        }
        let ns_finalizers = obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let done = meta::is_deleting(&obj)
            && meta::finalizers(&obj).is_empty()
            && !(rt.builtin == Some(Builtin::Namespace) && ns_finalizers);
        Ok(if done {
            Proposed::Delete(Some(obj))
        } else {
            Proposed::Put(obj)
        })
    }

    fn apply_patch(
        &self,
        rt: &ResourceType,
        sub: &str,
        view: &Value,
        body: PatchBody,
        opts: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        Ok(match body {
            PatchBody::Merge(p) => {
                let mut out = view.clone();
                patch::merge::merge(&mut out, &p);
                (out, false)
            }
            PatchBody::Json(ops) => (patch::json::apply(view, &ops).map_err(patch_error)?, false),
            PatchBody::Strategic(p) => (
                patch::strategic::apply(view, &p).map_err(patch_error)?,
                false,
            ),
            PatchBody::Apply(mut a) => {
                if let Some(m) = a.as_object_mut() {
                    if sub == "status" {
                        m.retain(|k, _| {
                            k == "status" || k == "apiVersion" || k == "kind" || k == "metadata"
                        });
                    } else if rt.status_subresource {
                        m.remove("status");
                    }
                }
                let now = meta::now_rfc3339();
                let av = rt.api_version();
                let who = Self::who(opts, &av, sub, &now);
                let out = ssa::apply(view, &a, &who, &|p: &str| rt.list_type(p)).map_err(
                    |conflicts| {
                        let causes: Vec<Cause> = conflicts
                            .iter()
                            .map(|c| {
                                Cause::new(
                                    "FieldManagerConflict",
                                    ssa::display_path(&c.path),
                                    format!(
                                        "conflict with \"{}\" using {}",
                                        c.manager, c.api_version
                                    ),
                                )
                            })
                            .collect();
                        let lines: Vec<String> = causes
                            .iter()
                            .map(|c| format!("{}: {}", c.message, c.field))
                            .collect();
                        let n = lines.len();
                        let mut e = ApiError::conflict_msg(
                            &rt.group,
                            &rt.plural,
                            meta::str_field(view, "name"),
                            "",
                        );
                        e.message = format!(
                            "Apply failed with {n} conflict{}: {}",
                            if n == 1 { "" } else { "s" },
                            lines.join("\n")
                        );
                        e.with_causes(causes)
                    },
                )?;
                // The applied body's resourceVersion is a precondition, as on a real server.
                let mut out = out;
                if let Some(rv) = a
                    .pointer("/metadata/resourceVersion")
                    .filter(|v| !v.is_null())
                {
                    meta_mut(&mut out).insert("resourceVersion".into(), rv.clone());
                } else {
                    meta_mut(&mut out).remove("resourceVersion");
                }
                (out, true)
            }
        })
    }

    /// Creates, replaces or patches one object.
    pub async fn write(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        op: Op,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if sub == "status" && !rt.status_subresource {
            return Err(ApiError::route_not_found());
        }
        let mut op = Some(op);
        if let Some(Op::Patch(PatchBody::Apply(_))) = &op
            && opts.field_manager.is_empty()
        {
            return Err(ApiError::unprocessable(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        // generateName: pick a free name, retrying on the rare collision.
        let mut name = name.to_string();
        if let Some(Op::Create(body)) = &mut op {
            Self::check_identity(rt, body, ns, None)?;
            name = meta::str_field(body, "name").to_string();
            let gen_name = meta::str_field(body, "generateName").to_string();
            if name.is_empty() && !gen_name.is_empty() {
                for _ in 0..8 {
                    let candidate = format!("{gen_name}{}", meta::generate_suffix());
                    if self.store.get(&Self::key(rt, ns, &candidate)).is_none() {
                        name = candidate;
                        break;
                    }
                }
                meta_mut(body).insert("name".into(), json!(name));
            }
            if name.is_empty() {
                let causes = vec![Cause::new(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )];
                return Err(ApiError::invalid(&rt.group, &rt.kind, "", causes));
            }
        }
        let key = Self::key(rt, ns, &name);
        let mut warnings = vec![];
        let outcome = self
            .store
            .write(&key, opts.dry_run, |cur| {
                let op = op
                    .take()
                    .ok_or_else(|| ApiError::internal("write closure ran twice"))?;
                match (op, cur) {
                    (Op::Create(_), Some(_)) => {
                        Err(ApiError::already_exists(&rt.group, &rt.plural, &name))
                    }
                    (Op::Create(body), None) => Ok(Proposed::Put(self.new_object(
                        rt,
                        ns,
                        body,
                        opts,
                        false,
                        &mut warnings,
                    )?)),
                    (Op::Patch(PatchBody::Apply(a)), None) => {
                        if sub == "status" {
                            return Err(ApiError::not_found(&rt.group, &rt.plural, &name));
                        }
                        let mut seed = json!({"metadata": {"name": name}});
                        Self::check_identity(rt, &mut seed, ns, Some(&name))?;
                        let (mut obj, _) =
                            self.apply_patch(rt, sub, &seed, PatchBody::Apply(a), opts)?;
                        Self::check_identity(rt, &mut obj, ns, Some(&name))?;
                        meta_mut(&mut obj).remove("resourceVersion");
                        Ok(Proposed::Put(self.new_object(
                            rt,
                            ns,
                            obj,
                            opts,
                            true,
                            &mut warnings,
                        )?))
                    }
                    (_, None) => Err(ApiError::not_found(&rt.group, &rt.plural, &name)),
                    (Op::Replace(body), Some(cur)) => {
                        self.updated(rt, ns, &name, sub, cur, body, opts, false, &mut warnings)
                    }
                    (Op::Patch(p), Some(cur)) => {
                        let mut view = self.to_view(rt, cur);
                        meta_mut(&mut view).remove("resourceVersion");
                        // Without an RV in the patch itself, a patch never conflicts: it applies to the latest object.
                        let (patched, applied) = self.apply_patch(rt, sub, &view, p, opts)?;
                        self.updated(
                            rt,
                            ns,
                            &name,
                            sub,
                            cur,
                            patched,
                            opts,
                            applied,
                            &mut warnings,
                        )
                    }
                    (Op::Mutate(f), Some(cur)) => {
                        let mut view = self.to_view(rt, cur);
                        meta_mut(&mut view).remove("resourceVersion");
                        let new = f(view)?;
                        self.updated(rt, ns, &name, sub, cur, new, opts, false, &mut warnings)
                    }
                }
            })
            .await?;
        let view = self.to_view(rt, outcome.object());
        if rt.builtin == Some(Builtin::Crd)
            && matches!(outcome, Outcome::Created(_) | Outcome::Updated(_))
            && !opts.dry_run
        {
            crate::controllers::crd::install(self, outcome.object());
        }
        Ok(Written {
            outcome,
            view,
            warnings,
        })
    }

    /// Deletes one object, or marks it for deletion when finalizers (or the propagation
    /// policy) require it. Returns the response body.
    pub async fn delete(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(Outcome, Value), ApiError> {
        if rt.builtin == Some(Builtin::Namespace) && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        let key = Self::key(rt, ns, name);
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
        Ok((outcome, body))
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
