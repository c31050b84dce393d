//! Control-plane Machines: the host creates each Machine a control plane asks for, with an
//! infrastructure machine cloned from `spec.machineTemplate.spec.infrastructureRef` and the
//! bootstrap config its role declares (kind, and the spec field its spec is copied from). The
//! Machine, owned by the control plane, is written first, so that its clones are born owned by
//! it. The kind a template stamps out is the one its plugin declares, never derived from the
//! template's name. On deletion it deletes them before the control plane goes.

use super::context::Around;
use super::{DriverError, KindCtx};
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::{
    API_VERSION, CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION, CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL, CONTROL_PLANE_NAME_LABEL, MACHINE_FINALIZER,
};
use capw_api::contract::fields;
use capw_api::machine::Machine;
use capw_reconcile::external::{Resolved, Resolver};
use capw_runtime::plugin::{KindRef, KindRole, MachineRequest};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value, json};

/// Why an object of `name` that exists must not be taken for this control plane's: neither the
/// control plane (a clone an older host made before its Machine) nor the control plane's own
/// Machine of that name (`owners`, by UID) owns it. A Machine made to reference it would hand
/// someone else's object over.
fn foreign(existing: &DynamicObject, name: &str, owners: &[&str]) -> Option<String> {
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| owners.contains(&o.uid.as_str()));
    (!ours).then(|| {
        format!(
            "machines-to-create: {} {name} exists and does not belong to this control plane; the host makes no Machine that would take over another's object: ask for another name",
            existing.types.as_ref().map_or("object", |t| t.kind.as_str())
        )
    })
}

/// Creates `obj`, unless one of its name exists that `owners` do not own.
async fn create_owned(
    resolver: &Resolver,
    ns: &str,
    kind: &Resolved,
    obj: Value,
    owners: &[&str],
) -> Result<(), DriverError> {
    let mut obj: DynamicObject =
        serde_json::from_value(obj).map_err(|e| DriverError::Invalid(e.to_string()))?;
    resolver.mark(kind, &mut obj);
    let name = obj.name_any();
    let api = resolver.api(ns, kind);
    match api.create(&PostParams::default(), &obj).await {
        Ok(created) => {
            // The Machine controller reads it before its cache may have it.
            resolver.created(kind, created);
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&name).await? {
            Some(existing) => foreign(&existing, &name, owners)
                .map_or(Ok(()), |why| Err(DriverError::Invalid(why))),
            None => Ok(()),
        },
        Err(e) => Err(e.into()),
    }
}

/// What a control plane's Machines are cloned from and into.
struct Clones {
    template_ref: ContractVersionedObjectReference,
    template: std::sync::Arc<DynamicObject>,
    infra_kind: String,
    infra: Resolved,
    boot: Resolved,
    boot_ref: KindRef,
    spec_field: String,
}

async fn clones(kctx: &KindCtx, cp: &DynamicObject) -> Result<Clones, DriverError> {
    let ns = cp.namespace().unwrap_or_default();
    let cp_name = cp.name_any();
    let template_ref: ContractVersionedObjectReference = cp
        .data
        .pointer(fields::MACHINE_TEMPLATE_INFRASTRUCTURE_REF)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .ok_or_else(|| {
            DriverError::Invalid(format!(
                "{} {cp_name}: spec.machineTemplate.spec.infrastructureRef must be {{apiGroup, kind, name}}",
                kctx.ar.kind
            ))
        })?;
    let resolver = &kctx.driver.resolver;
    let Some((template, _)) = resolver.get(&ns, &template_ref).await? else {
        return Err(DriverError::Invalid(format!(
            "{} {cp_name}: spec.machineTemplate.spec.infrastructureRef names {} {}, which does not exist",
            kctx.ar.kind, template_ref.kind, template_ref.name
        )));
    };
    let registry = &kctx.driver.registry;
    let infra_kind = match registry.declared_role(&template_ref.api_group, &template_ref.kind) {
        Some(KindRole::InfrastructureMachineTemplate(kind)) => kind,
        _ => {
            return Err(DriverError::Invalid(format!(
                "{} {cp_name}: spec.machineTemplate.spec.infrastructureRef names {}.{}, which no plugin declares as an infrastructure-machine-template; name a machine template kind",
                kctx.ar.kind, template_ref.kind, template_ref.api_group
            )));
        }
    };
    let Some(KindRole::ControlPlane(machines_role)) =
        registry.declared_role(&kctx.ar.group, &kctx.ar.kind)
    else {
        return Err(DriverError::Invalid(format!(
            "{}: plugin {} no longer declares it as a control-plane kind",
            kctx.ar.kind, kctx.plugin
        )));
    };
    let boot_ref = machines_role.bootstrap_config;
    let infra = resolver
        .resolve(&template_ref.api_group, &infra_kind)
        .await?;
    let boot = resolver.resolve(&boot_ref.group, &boot_ref.kind).await?;
    Ok(Clones {
        template_ref,
        template,
        infra_kind,
        infra,
        boot,
        boot_ref,
        spec_field: format!("/spec/{}", machines_role.spec_field),
    })
}

/// Why the Machines a control plane asks for must not be made, if they must not: an object
/// they would be cloned into exists and is someone else's. Checked before anything of the
/// result is written, so such a result is refused whole.
pub(super) async fn check_names(
    kctx: &KindCtx,
    cp: &DynamicObject,
    requests: &[MachineRequest],
) -> Result<(), String> {
    if requests.is_empty() || cp.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    // A spec the clones cannot be made from is reported when they are made.
    let Ok(c) = clones(kctx, cp).await else {
        return Ok(());
    };
    let ns = cp.namespace().unwrap_or_default();
    let cp_uid = cp.metadata.uid.clone().unwrap_or_default();
    let resolver = &kctx.driver.resolver;
    let machines: Api<Machine> = Api::namespaced(kctx.driver.client.clone(), &ns);
    for req in requests {
        let machine_uid = match machines.get_opt(&req.name).await {
            // This control plane's own Machine: a request repeated before the cache saw it,
            // or a create whose clones failed; they may be its Machine's.
            Ok(Some(m)) if m.owner_references().iter().any(|o| o.uid == cp_uid) => m.uid(),
            Ok(Some(_)) => {
                return Err(format!(
                    "machines-to-create: Machine {} exists and does not belong to this control plane; ask for another name",
                    req.name
                ));
            }
            Ok(None) | Err(_) => None,
        };
        let owners: Vec<&str> = std::iter::once(cp_uid.as_str())
            .chain(machine_uid.as_deref())
            .collect();
        for kind in [&c.infra, &c.boot] {
            if let Ok(Some(existing)) = resolver.api(&ns, kind).get_opt(&req.name).await
                && let Some(why) = foreign(&existing, &req.name, &owners)
            {
                return Err(why);
            }
        }
    }
    Ok(())
}

pub(super) async fn create(
    kctx: &KindCtx,
    cp: &DynamicObject,
    around: &Around,
    requests: &[MachineRequest],
) -> Result<(), DriverError> {
    if requests.is_empty() || cp.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let Some(cluster) = &around.cluster else {
        return Ok(());
    };
    let ns = cp.namespace().unwrap_or_default();
    let cp_name = cp.name_any();
    let Clones {
        template_ref,
        template,
        infra_kind,
        infra,
        boot,
        boot_ref,
        spec_field,
    } = clones(kctx, cp).await?;
    let resolver = &kctx.driver.resolver;
    let owner = json!([{
        "apiVersion": kctx.ar.api_version, "kind": kctx.ar.kind, "name": cp_name,
        "uid": cp.metadata.uid, "controller": true, "blockOwnerDeletion": true,
    }]);
    let cluster_name = cluster.name_any();
    let cp_uid = cp.metadata.uid.clone().unwrap_or_default();
    // `spec.machineTemplate.metadata` goes onto the Machine, the infrastructure machine and the
    // bootstrap config, as upstream's KCP does; the labels the host relies on win over it.
    let template_meta = |field: &str| -> Map<String, Value> {
        cp.data
            .pointer(&format!("/spec/machineTemplate/metadata/{field}"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| v.is_string())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut labels = template_meta("labels");
    labels.extend([
        (CLUSTER_NAME_LABEL.to_string(), json!(cluster_name)),
        (CONTROL_PLANE_LABEL.to_string(), json!("")),
        (CONTROL_PLANE_NAME_LABEL.to_string(), json!(cp_name)),
    ]);
    let labels = Value::Object(labels);
    let annotations = template_meta("annotations");
    let mut cloned_from = annotations.clone();
    cloned_from.extend([
        (
            CLONED_FROM_NAME_ANNOTATION.to_string(),
            json!(template_ref.name),
        ),
        (
            CLONED_FROM_GROUPKIND_ANNOTATION.to_string(),
            json!(format!("{}.{}", template_ref.kind, template_ref.api_group)),
        ),
    ]);
    let cloned_from = Value::Object(cloned_from);
    let annotations = Value::Object(annotations);
    let machines: Api<Machine> = Api::namespaced(kctx.driver.client.clone(), &ns);
    for req in requests {
        // The template it was cloned from, on the Machine too: the control-plane component sees
        // the Machines, not their infrastructure objects, and compares this with its spec to
        // find the Machines a template change has outdated. Born with the Machine controller's
        // finalizer, as a MachineSet's Machines are, so that it is not a second write.
        let machine = json!({
            "apiVersion": API_VERSION, "kind": "Machine",
            "metadata": {"name": req.name, "namespace": ns, "labels": labels, "ownerReferences": owner,
                "annotations": cloned_from, "finalizers": [MACHINE_FINALIZER]},
            "spec": {
                "clusterName": cluster_name,
                "version": req.version,
                "failureDomain": req.failure_domain,
                "bootstrap": {"configRef": {"apiGroup": boot_ref.group, "kind": boot_ref.kind, "name": req.name}},
                "infrastructureRef": {"apiGroup": template_ref.api_group, "kind": infra_kind, "name": req.name},
            },
        });
        let machine: Machine =
            serde_json::from_value(machine).map_err(|e| DriverError::Invalid(e.to_string()))?;
        let (machine, new) = match machines.create(&PostParams::default(), &machine).await {
            Ok(created) => (created, true),
            Err(kube::Error::Api(e)) if e.code == 409 => match machines.get_opt(&req.name).await? {
                Some(m) if m.owner_references().iter().any(|o| o.uid == cp_uid) => (m, false),
                Some(_) => {
                    return Err(DriverError::Invalid(format!(
                        "machines-to-create: Machine {} exists and does not belong to this control plane; ask for another name",
                        req.name
                    )));
                }
                // Deleted since: the control plane asks again.
                None => continue,
            },
            Err(e) => return Err(e.into()),
        };
        // The clones are born owned by their Machine, as the Machine controller would make
        // them, instead of by the control plane and adopted by a second write each.
        let machine_uid = machine.uid().unwrap_or_default();
        let owners = [cp_uid.as_str(), machine_uid.as_str()];
        let machine_owner = json!([{
            "apiVersion": API_VERSION, "kind": "Machine", "name": req.name,
            "uid": machine_uid, "controller": true, "blockOwnerDeletion": true,
        }]);
        let clone = |kind: &Resolved, annotations: &Value, spec: Option<&Value>| {
            json!({
                "apiVersion": kind.ar.api_version, "kind": kind.ar.kind,
                "metadata": {"name": req.name, "namespace": ns, "labels": labels,
                    "ownerReferences": machine_owner, "annotations": annotations},
                "spec": spec.cloned().unwrap_or(json!({})),
            })
        };
        let clones = async {
            let infra_spec = template.data.pointer(fields::TEMPLATE_SPEC);
            let infra_clone = clone(&infra, &cloned_from, infra_spec);
            create_owned(resolver, &ns, &infra, infra_clone, &owners).await?;
            let boot_clone = clone(&boot, &annotations, cp.data.pointer(&spec_field));
            create_owned(resolver, &ns, &boot, boot_clone, &owners).await
        };
        if let Err(e) = clones.await {
            // A Machine without its clones would never come up, and the control plane, seeing
            // it, would not ask again: it goes, and its deletion takes any clone made with it.
            if new {
                let _ = machines
                    .delete(&req.name, &DeleteParams::background())
                    .await;
            }
            return Err(e);
        }
        if new {
            kctx.driver
                .expectations
                .created(&expectation_key(cp), std::slice::from_ref(&req.name));
            kctx.event(
                cp,
                Some(machine.object_ref(&())),
                false,
                "SuccessfulCreate",
                format!("Created control-plane Machine {}", req.name),
            )
            .await
        }
    }
    Ok(())
}

pub(super) async fn delete(
    kctx: &KindCtx,
    cp: &DynamicObject,
    around: &Around,
    names: &[String],
) -> Result<(), DriverError> {
    let ns = cp.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(kctx.driver.client.clone(), &ns);
    for m in around
        .owned_machines
        .iter()
        .filter(|m| names.contains(&m.name_any()) && m.meta().deletion_timestamp.is_none())
    {
        let remediated = remediation_candidate(m);
        if remediated && !mark_deleting(&machines, m).await? {
            // Changed or gone since the cache read it: the control plane asks again.
            continue;
        }
        match machines
            .delete(&m.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {
                kctx.driver
                    .expectations
                    .deleted(&expectation_key(cp), &[m.name_any()]);
                let why = if remediated {
                    " to remediate it (a MachineHealthCheck marked it unhealthy)"
                } else {
                    ""
                };
                kctx.event(
                    cp,
                    Some(m.object_ref(&())),
                    false,
                    "SuccessfulDelete",
                    format!("Deleted control-plane Machine {}{why}", m.name_any()),
                )
                .await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whose expectations a control plane's are: by uid, so a new control plane of the same name
/// starts with none.
fn expectation_key(cp: &DynamicObject) -> String {
    cp.metadata.uid.clone().unwrap_or_default()
}

/// Whether the Machine cache shows every Machine this control plane created (and every one it
/// deleted as deleting); until then its component would count the wrong Machines and ask for
/// one again. An expectation the cache never meets is given up after five minutes.
pub(super) fn seen_what_was_written(kctx: &KindCtx, cp: &DynamicObject) -> bool {
    let ns = cp.namespace().unwrap_or_default();
    let cache = &kctx.driver.caches.machines;
    let get = |n: &str| cache.get(&kube::runtime::reflector::ObjectRef::new(n).within(&ns));
    let (created, deleted) = kctx.driver.expectations.unmet(
        &expectation_key(cp),
        |n| get(n).is_some(),
        |n| get(n).is_none_or(|m| m.metadata.deletion_timestamp.is_some()),
    );
    created.is_empty() && deleted.is_empty()
}

/// A Machine whose remediation was asked for and never started, and that is healthy again.
fn recovered(m: &Machine) -> bool {
    use capw_api::contract::conditions::types;
    let list = m.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
    let is = |t: &str, s: &str| list.iter().any(|c| c.type_ == t && c.status == s);
    m.meta().deletion_timestamp.is_none()
        && is(types::HEALTH_CHECK_SUCCEEDED, "True")
        && is(types::OWNER_REMEDIATED, "False")
}

/// Upstream KCP's clean-up of pending remediations: a Machine healthy again loses the
/// `OwnerRemediated=False` its MachineHealthCheck set, so it no longer reads as waiting for a
/// remediation that will not come (the control plane could not act on it, for example while it
/// rolled out).
pub(super) async fn clear_recovered(
    kctx: &KindCtx,
    cp: &DynamicObject,
    around: &Around,
) -> Result<(), DriverError> {
    use capw_api::contract::conditions::types;
    let ns = cp.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(kctx.driver.client.clone(), &ns);
    for m in around.owned_machines.iter().filter(|m| recovered(m)) {
        let mut list = m.status.clone().unwrap_or_default().conditions;
        list.retain(|c| c.type_ != types::OWNER_REMEDIATED);
        // Changed or gone since the cache read it: the next reconcile looks again.
        write_conditions(&machines, m, list).await?;
    }
    Ok(())
}

/// Writes a Machine's conditions over the resourceVersion it was read at; false when it changed
/// or went since.
async fn write_conditions(
    machines: &Api<Machine>,
    m: &Machine,
    list: Vec<capw_api::common::Condition>,
) -> Result<bool, DriverError> {
    match capw_reconcile::skeleton::write_conditions_at(
        machines,
        &m.name_any(),
        m.resource_version(),
        &list,
    )
    .await
    {
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(false),
        r => r.map(|_| true).map_err(DriverError::from),
    }
}

/// A Machine a MachineHealthCheck marked for its owner to remediate.
fn remediation_candidate(m: &Machine) -> bool {
    use capw_api::contract::conditions::types;
    let list = m.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
    let is_false = |t: &str| list.iter().any(|c| c.type_ == t && c.status == "False");
    is_false(types::HEALTH_CHECK_SUCCEEDED) && is_false(types::OWNER_REMEDIATED)
}

/// Upstream's order for a remediation: `OwnerRemediated` says `MachineDeleting` before the
/// Machine is deleted, so the step is re-entrant and the Machine says why it goes. False when
/// the Machine changed or went since it was read.
async fn mark_deleting(machines: &Api<Machine>, m: &Machine) -> Result<bool, DriverError> {
    use capw_api::contract::conditions::{self, reasons, types};
    let mut list = m.status.clone().unwrap_or_default().conditions;
    conditions::set(
        &mut list,
        types::OWNER_REMEDIATED,
        "False",
        reasons::MACHINE_DELETING,
        "Machine is deleting",
        m.metadata.generation,
    );
    write_conditions(machines, m, list).await
}

/// Deletes every Machine the control plane owns (deletion of the control plane itself).
pub(super) async fn delete_owned(
    kctx: &KindCtx,
    cp: &DynamicObject,
    around: &Around,
) -> Result<(), DriverError> {
    let names: Vec<String> = around.owned_machines.iter().map(|m| m.name_any()).collect();
    delete(kctx, cp, around, &names).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(conditions: Value, deleting: bool) -> Machine {
        let mut m: Machine = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"clusterName": "c", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "n"}},
            "status": {"conditions": conditions},
        }))
        .unwrap();
        if deleting {
            m.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
        }
        m
    }

    fn cond(t: &str, s: &str) -> Value {
        json!({"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn only_a_healthy_machine_waiting_for_a_remediation_is_recovered() {
        let waiting = cond("OwnerRemediated", "False");
        assert!(recovered(&machine(
            json!([cond("HealthCheckSucceeded", "True"), waiting.clone()]),
            false
        )));
        assert!(!recovered(&machine(
            json!([cond("HealthCheckSucceeded", "False"), waiting.clone()]),
            false
        )));
        assert!(!recovered(&machine(
            json!([cond("HealthCheckSucceeded", "True")]),
            false
        )));
        assert!(!recovered(&machine(
            json!([cond("HealthCheckSucceeded", "True"), waiting]),
            true
        )));
    }
}
