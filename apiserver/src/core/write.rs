//! Create, update, patch and server-side apply: one path from request body to stored object.

use super::*;

/// Why an admitted write is worked out again: the object changed while webhooks looked at it.
const CHANGED_DURING_ADMISSION: &str = "the object changed during admission";

impl Core {
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
            obj["status"] = crate::controllers::crd::desired_status(&obj);
        }
        if !applied {
            let av = rt.api_version();
            ssa::record_update(None, &mut obj, &Self::who(opts, &av, "", &now), rt);
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
        let mut new = Self::from_view(rt, new);
        let mut obj = if sub == "status" {
            let mut o = cur.clone();
            match new.as_object_mut().and_then(|m| m.remove("status")) {
                Some(s) => o["status"] = s,
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
            // Defaults are applied on read, so the stored form may lack them; compare with the
            // defaulted form, or merely reading and writing back would look like a spec change.
            let changed = !same_content(&obj, cur, skip_status)
                && rt.schema.as_ref().is_none_or(|s| {
                    !same_content(&obj, &schema::with_defaults(cur, s), skip_status)
                });
            if changed {
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
            ssa::record_update(Some(cur), &mut obj, &Self::who(opts, &av, sub, &now), rt);
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
        view: Value,
        body: PatchBody,
        opts: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        Ok(match body {
            PatchBody::Merge(p) => {
                let mut out = view;
                patch::merge::merge(&mut out, &p);
                (out, false)
            }
            PatchBody::Json(ops) => (patch::json::apply(&view, &ops).map_err(patch_error)?, false),
            PatchBody::Strategic(p) => (
                patch::strategic::apply(&view, &p).map_err(patch_error)?,
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
                let out = ssa::apply(&view, &a, &who, rt).map_err(|conflicts| {
                    let causes: Vec<Cause> = conflicts
                        .iter()
                        .map(|c| {
                            Cause::new(
                                "FieldManagerConflict",
                                ssa::display_path(&c.path),
                                format!("conflict with {}", c.manager_display()),
                            )
                        })
                        .collect();
                    let mut e = ApiError::conflict_msg(
                        &rt.group,
                        &rt.plural,
                        meta::str_field(&view, "name"),
                        "",
                    );
                    e.message = ssa::conflict_message(&conflicts);
                    e.with_causes(causes)
                })?;
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

    /// What one operation makes of the stored object `cur`.
    #[allow(clippy::too_many_arguments)]
    fn propose(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        op: Op,
        cur: Option<&Arc<Value>>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Proposed, ApiError> {
        match (op, cur) {
            (Op::Create(_), Some(_)) => Err(ApiError::already_exists(&rt.group, &rt.plural, name)),
            (Op::Create(body), None) => Ok(Proposed::Put(
                self.new_object(rt, ns, body, opts, false, warnings)?,
            )),
            (Op::Patch(PatchBody::Apply(a)), None) => {
                if sub == "status" {
                    return Err(ApiError::not_found(&rt.group, &rt.plural, name));
                }
                let mut seed = json!({"metadata": {"name": name}});
                Self::check_identity(rt, &mut seed, ns, Some(name))?;
                let (mut obj, _) = self.apply_patch(rt, sub, seed, PatchBody::Apply(a), opts)?;
                Self::check_identity(rt, &mut obj, ns, Some(name))?;
                meta_mut(&mut obj).remove("resourceVersion");
                Ok(Proposed::Put(
                    self.new_object(rt, ns, obj, opts, true, warnings)?,
                ))
            }
            (_, None) => Err(ApiError::not_found(&rt.group, &rt.plural, name)),
            (Op::Replace(body), Some(cur)) => {
                self.updated(rt, ns, name, sub, cur, body, opts, false, warnings)
            }
            (Op::Patch(p), Some(cur)) => {
                // The patch sees the current resourceVersion, as on kube: a JSON Patch may
                // `test` or `replace` it, and a stale one answers 409. A patch that leaves it
                // alone applies to the latest object and never conflicts.
                let view = self.to_view(rt, cur);
                let (patched, applied) = self.apply_patch(rt, sub, view, p, opts)?;
                self.updated(rt, ns, name, sub, cur, patched, opts, applied, warnings)
            }
            (Op::Mutate(f), Some(cur)) => {
                // The view keeps its resourceVersion: a mutation that leaves it alone never
                // conflicts, and one that checks it (Scale) can.
                let new = f(self.to_view(rt, cur))?;
                self.updated(rt, ns, name, sub, cur, new, opts, false, warnings)
            }
        }
    }

    /// A client's write through the admission webhooks, as kube-apiserver's
    /// `GuaranteedUpdate` does it: the operation is worked out against the stored object
    /// without storing it, the result goes to the webhooks, and what they admit (mutated) is
    /// stored only if the object has not changed meanwhile; otherwise the whole round is
    /// repeated against the new object.
    #[allow(clippy::too_many_arguments)]
    async fn write_admitted(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        sub: &str,
        op: Op,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Outcome, ApiError> {
        const ROUNDS: usize = 5;
        let key = Self::key(rt, ns, name);
        for _ in 0..ROUNDS {
            let mut proposed_warnings = vec![];
            let mut old: Option<Arc<Value>> = None;
            let mut round = op.client_copy();
            let dry = self
                .store
                .write(&key, true, |cur| {
                    old = cur.cloned();
                    let op = round
                        .take()
                        .ok_or_else(|| ApiError::internal("write closure ran twice"))?;
                    self.propose(rt, ns, name, sub, op, cur, opts, &mut proposed_warnings)
                })
                .await?;
            if matches!(dry, Outcome::Deleted(_)) && old.is_none() {
                return Ok(dry);
            }
            let old_view = old.as_ref().map(|o| self.to_view(rt, o));
            let at = crate::admission::Attributes {
                operation: if old.is_some() {
                    crate::admission::Operation::Update
                } else {
                    crate::admission::Operation::Create
                },
                rt,
                subresource: sub,
                namespace: ns,
                name,
                user: &opts.requester.user,
                groups: &opts.requester.groups,
                dry_run: opts.dry_run,
            };
            let admitted = self
                .admit(&at, Some(self.to_view(rt, dry.object())), old_view.as_ref())
                .await?;
            let mut object = admitted.object.unwrap_or_default();
            let expected = old
                .as_ref()
                .map(|o| meta::str_field(o, "resourceVersion").to_string());
            let mut stored_warnings = vec![];
            let result = self
                .store
                .write(&key, opts.dry_run, |cur| match (cur, &expected) {
                    (None, None) => {
                        let m = meta_mut(&mut object);
                        m.remove("resourceVersion");
                        let obj = std::mem::take(&mut object);
                        Ok(Proposed::Put(self.new_object(
                            rt,
                            ns,
                            obj,
                            opts,
                            true,
                            &mut stored_warnings,
                        )?))
                    }
                    (Some(cur), Some(rv)) if meta::str_field(cur, "resourceVersion") == rv => {
                        let obj = std::mem::take(&mut object);
                        self.updated(
                            rt,
                            ns,
                            name,
                            sub,
                            cur,
                            obj,
                            opts,
                            true,
                            &mut stored_warnings,
                        )
                    }
                    _ => Err(ApiError::conflict_msg(
                        &rt.group,
                        &rt.plural,
                        name,
                        CHANGED_DURING_ADMISSION,
                    )),
                })
                .await;
            match result {
                Err(e) if e.message.ends_with(CHANGED_DURING_ADMISSION) => continue,
                Err(e) => return Err(e),
                Ok(outcome) => {
                    warnings.extend(proposed_warnings);
                    warnings.extend(admitted.warnings);
                    return Ok(outcome);
                }
            }
        }
        Err(ApiError::conflict(&rt.group, &rt.plural, name))
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
        // Internal mutations (garbage collector, namespace and CRD controllers) are not sent to
        // webhooks.
        let from_client = !matches!(op, Some(Op::Mutate(_)) | None);
        let admitted = from_client
            && self.may_admit(
                rt,
                sub,
                &[
                    crate::admission::Operation::Create,
                    crate::admission::Operation::Update,
                ],
            );
        let outcome = if admitted {
            let op = op
                .take()
                .ok_or_else(|| ApiError::internal("no operation"))?;
            self.write_admitted(rt, ns, &name, sub, op, opts, &mut warnings)
                .await?
        } else {
            self.store
                .write(&key, opts.dry_run, |cur| {
                    let op = op
                        .take()
                        .ok_or_else(|| ApiError::internal("write closure ran twice"))?;
                    self.propose(rt, ns, &name, sub, op, cur, opts, &mut warnings)
                })
                .await?
        };
        let view = self.shared_view(rt, outcome.object());
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
}
