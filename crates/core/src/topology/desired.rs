//! The desired state (upstream's `desiredstate.Generate`): every object the topology should have
//! in this reconcile, from the blueprint, the Cluster's topology and what exists. Names of
//! objects that exist are reused, so in steady state desired equals current; versions follow the
//! upgrade sequencing ([`super::upgrade`]); the class's patches run over the templates before
//! the objects are made from them.
//!
//! Pure: everything it needs was read before, so it is tested without an API server.

use super::TopologyError;
use super::blueprint::Blueprint;
use super::current::Current;
use super::patches::{self, Holder, Item};
use super::upgrade::{self, ControlPlaneNow, ControlPlaneTracker, WorkerNow, WorkerTracker};
use crate::naming;
use capw_api::cluster::Cluster;
use capw_api::clusterclass::{
    ClassHealthCheck, ClusterVariable, MachineDeploymentClass, MachineDeploymentTopology,
};
use capw_api::common::TemplateMeta;
use capw_api::common::names::{
    API_VERSION, CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION, CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL, LAST_APPLIED_ANNOTATION, TOPOLOGY_DEPLOYMENT_NAME_LABEL,
    TOPOLOGY_OWNED_LABEL,
};
use kube::ResourceExt;
use serde_json::{Map, Value, json};

pub(super) struct DesiredDeployment {
    /// The MachineDeployment topology's name.
    pub topology: String,
    pub object: Value,
    pub bootstrap: Value,
    pub infrastructure: Value,
    pub health_check: Option<Value>,
}

pub(super) struct Desired {
    pub infrastructure: Value,
    pub control_plane: Value,
    pub control_plane_machine: Option<Value>,
    pub control_plane_health_check: Option<Value>,
    pub deployments: Vec<DesiredDeployment>,
    pub control_plane_tracker: ControlPlaneTracker,
    pub workers: WorkerTracker,
}

/// `cluster-name` and `owned`, on every generated object.
fn topology_labels(cluster: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(CLUSTER_NAME_LABEL.into(), json!(cluster));
    m.insert(TOPOLOGY_OWNED_LABEL.into(), json!(""));
    m
}

fn merged(base: Option<&Value>, over: &Map<String, Value>) -> Value {
    let mut out = base.and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in over {
        out.insert(k.clone(), v.clone());
    }
    Value::Object(out)
}

fn meta_map(m: &TemplateMeta) -> (Map<String, Value>, Map<String, Value>) {
    let f = |b: &std::collections::BTreeMap<String, String>| {
        b.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
    };
    (f(&m.labels), f(&m.annotations))
}

/// `group/version` and kind of a template, as `cloned-from-groupkind` writes them: `Kind.group`.
fn group_kind(template: &Value) -> String {
    let (group, kind) = super::current::group_kind(template);
    format!("{kind}.{group}")
}

fn cloned_from(template: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        CLONED_FROM_NAME_ANNOTATION.into(),
        template["metadata"]["name"].clone(),
    );
    m.insert(
        CLONED_FROM_GROUPKIND_ANNOTATION.into(),
        json!(group_kind(template)),
    );
    m
}

pub(super) fn cluster_owner(cluster: &Cluster) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Cluster",
        "name": cluster.name_any(),
        "uid": cluster.uid().unwrap_or_default(),
    })
}

/// An object from a template (`spec.template` → object), as upstream's `objectFromTemplate`.
fn object_from_template(
    template: &Value,
    name: &str,
    cluster: &Cluster,
    labels: &Map<String, Value>,
    annotations: &Map<String, Value>,
) -> Value {
    let kind = template["kind"].as_str().unwrap_or_default();
    let inner = &template["spec"]["template"];
    let mut l = topology_labels(&cluster.name_any());
    l.extend(labels.clone());
    let mut a = cloned_from(template);
    a.extend(annotations.clone());
    json!({
        "apiVersion": template["apiVersion"],
        "kind": kind.strip_suffix("Template").unwrap_or(kind),
        "metadata": {
            "name": name,
            "namespace": cluster.namespace(),
            "labels": merged(inner["metadata"].get("labels"), &l),
            "annotations": merged(inner["metadata"].get("annotations"), &a),
        },
        "spec": inner.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A template from a class template, owned by the Cluster (upstream's `templateToTemplate`).
fn template_from_template(
    template: &Value,
    name: &str,
    cluster: &Cluster,
    extra_labels: &Map<String, Value>,
) -> Value {
    let mut l = topology_labels(&cluster.name_any());
    l.extend(extra_labels.clone());
    let mut annotations = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.remove(LAST_APPLIED_ANNOTATION);
    annotations.extend(cloned_from(template));
    json!({
        "apiVersion": template["apiVersion"],
        "kind": template["kind"],
        "metadata": {
            "name": name,
            "namespace": cluster.namespace(),
            "labels": merged(template["metadata"].get("labels"), &l),
            "annotations": Value::Object(annotations),
            "ownerReferences": [cluster_owner(cluster)],
        },
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A `{apiGroup, kind, name}` reference to `obj`.
pub(super) fn reference(obj: &Value) -> Value {
    let (group, kind) = super::current::group_kind(obj);
    json!({"apiGroup": group, "kind": kind, "name": obj["metadata"]["name"]})
}

fn name_of(obj: Option<&Value>) -> Option<String> {
    obj.and_then(|o| o["metadata"]["name"].as_str())
        .map(String::from)
}

fn variables_map(values: &[ClusterVariable]) -> Map<String, Value> {
    values
        .iter()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect()
}

/// `builtin.cluster`.
fn cluster_builtin(cluster: &Cluster) -> Value {
    let topology = cluster.spec.topology.clone().unwrap_or_default();
    let class_ns = topology
        .class_ref
        .namespace
        .clone()
        .or_else(|| cluster.namespace())
        .unwrap_or_default();
    let network = cluster.spec.cluster_network.clone().unwrap_or_default();
    let mut b = json!({
        "name": cluster.name_any(),
        "namespace": cluster.namespace(),
        "uid": cluster.uid(),
        "metadata": {"labels": cluster.labels(), "annotations": cluster.annotations()},
        "topology": {
            "version": topology.version,
            "classRef": {"name": topology.class_ref.name, "namespace": class_ns},
            "class": topology.class_ref.name,
            "classNamespace": class_ns,
        },
    });
    let mut net = Map::new();
    if let Some(d) = network.service_domain {
        net.insert("serviceDomain".into(), json!(d));
    }
    if let Some(s) = network.services {
        net.insert("services".into(), json!(s.cidr_blocks));
    }
    if let Some(p) = network.pods {
        net.insert("pods".into(), json!(p.cidr_blocks));
    }
    if !net.is_empty() {
        b["network"] = Value::Object(net);
    }
    b
}

fn with_overrides(builtin: Value, overrides: &[ClusterVariable]) -> Value {
    let mut v = Value::Object(variables_map(overrides));
    v["builtin"] = builtin;
    v
}

/// The MHC the class and the topology ask for, if any: the topology's checks and remediation
/// replace the class's; the topology's `enabled: false` turns it off.
fn health_check(
    class: Option<&ClassHealthCheck>,
    topology: Option<&ClassHealthCheck>,
) -> Option<ClassHealthCheck> {
    if topology.and_then(|t| t.enabled) == Some(false) {
        return None;
    }
    let t = topology.filter(|t| t.checks.is_some() || t.remediation.is_some());
    let chosen = t.or(class)?;
    (chosen.checks.is_some() || chosen.remediation.is_some()).then(|| chosen.clone())
}

fn health_check_object(
    hc: &ClassHealthCheck,
    name: &str,
    cluster: &Cluster,
    selector: Map<String, Value>,
) -> Value {
    let mut spec = json!({
        "clusterName": cluster.name_any(),
        "selector": {"matchLabels": selector},
    });
    if let Some(c) = &hc.checks {
        spec["checks"] = json!(c);
    }
    if let Some(r) = &hc.remediation {
        let mut remediation = Map::new();
        if let Some(t) = &r.trigger_if {
            remediation.insert("triggerIf".into(), json!(t));
        }
        if let Some(t) = &r.template_ref {
            remediation.insert("templateRef".into(), json!(t));
        }
        if !remediation.is_empty() {
            spec["remediation"] = Value::Object(remediation);
        }
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "MachineHealthCheck",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace(),
            "labels": topology_labels(&cluster.name_any()),
            "ownerReferences": [cluster_owner(cluster)],
        },
        "spec": spec,
    })
}

fn upgrade_concurrency(cluster: &Cluster) -> usize {
    cluster
        .annotations()
        .get(upgrade::UPGRADE_CONCURRENCY)
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// Everything the topology should have now. `variables` are the Cluster's, defaulted.
pub(super) fn generate(
    cluster: &Cluster,
    variables: &[ClusterVariable],
    blueprint: &Blueprint,
    current: &Current,
) -> Result<Desired, TopologyError> {
    let topology = cluster
        .spec
        .topology
        .as_ref()
        .ok_or_else(|| TopologyError::Invalid("the Cluster has no spec.topology".into()))?;
    let cluster_name = cluster.name_any();
    let class = &blueprint.class.spec;
    let cp_topology = topology.control_plane.clone().unwrap_or_default();
    let md_topologies: &[MachineDeploymentTopology] = topology
        .workers
        .as_ref()
        .map_or(&[], |w| &w.machine_deployments);
    let invalid = |m: String| TopologyError::Invalid(m);

    // Names: what exists keeps its name.
    let infrastructure_name = match name_of(current.infrastructure.as_ref()) {
        Some(n) => n,
        None => naming::cluster_object(
            class
                .infrastructure
                .naming
                .as_ref()
                .and_then(|n| n.template.as_deref()),
            &cluster_name,
        )
        .map_err(|e| invalid(format!("spec.infrastructure.naming.template: {e}")))?,
    };
    let control_plane_name = match name_of(current.control_plane.as_ref()) {
        Some(n) => n,
        None => naming::cluster_object(
            class
                .control_plane
                .naming
                .as_ref()
                .and_then(|n| n.template.as_deref()),
            &cluster_name,
        )
        .map_err(|e| invalid(format!("spec.controlPlane.naming.template: {e}")))?,
    };
    let cp_machine_name = name_of(current.control_plane_machine.as_ref())
        .unwrap_or_else(|| naming::control_plane_machine_template(&cluster_name));

    // Versions (upstream v1.11's sequencing).
    let workers_now: Vec<WorkerNow> = md_topologies
        .iter()
        .map(|t| {
            let annotations = t.metadata.clone().unwrap_or_default().annotations;
            let c = current.deployments.get(&t.name);
            WorkerNow {
                name: t.name.clone(),
                version: c.and_then(|c| c.object.spec.template.spec.version.clone()),
                rolling: c.is_some_and(|c| c.rolling),
                defer: annotations.contains_key(upgrade::DEFER_UPGRADE),
                hold: annotations.contains_key(upgrade::HOLD_UPGRADE_SEQUENCE),
            }
        })
        .collect();
    let cp_now = current.control_plane.as_ref().map(|cp| ControlPlaneNow {
        spec_version: cp["spec"]["version"].as_str().unwrap_or_default().into(),
        status_version: cp["status"]["version"].as_str().map(String::from),
    });
    let workers_rolling = current.deployments.values().any(|d| d.rolling);
    let (cp_version, cp_tracker) =
        upgrade::control_plane_version(&topology.version, cp_now.as_ref(), workers_rolling);
    let (md_versions, workers) = upgrade::machine_deployment_versions(
        &topology.version,
        &cp_tracker,
        &workers_now,
        upgrade_concurrency(cluster),
    );

    // Patch items: the class's templates with each item's builtins and overrides.
    let global = {
        let mut v = Value::Object(variables_map(variables));
        v["builtin"] = json!({"cluster": cluster_builtin(cluster)});
        v
    };
    let (cp_labels, cp_annotations) = {
        let mut l = Map::new();
        let mut a = Map::new();
        for m in [&class.control_plane.metadata, &cp_topology.metadata]
            .into_iter()
            .flatten()
        {
            let (ml, ma) = meta_map(m);
            l.extend(ml);
            a.extend(ma);
        }
        (l, a)
    };
    let cp_overrides = cp_topology
        .variables
        .as_ref()
        .map_or(&[][..], |v| &v.overrides);
    let mut cp_builtin = json!({
        "name": control_plane_name,
        "version": cp_version,
        "metadata": {"labels": cp_labels, "annotations": cp_annotations},
    });
    if let Some(r) = cp_topology.replicas {
        cp_builtin["replicas"] = json!(r);
    }
    if blueprint.control_plane_machine.is_some() {
        cp_builtin["machineTemplate"] = json!({"infrastructureRef": {"name": cp_machine_name}});
    }
    let cp_vars = with_overrides(json!({"controlPlane": cp_builtin}), cp_overrides);
    let mut items = vec![
        Item {
            holder: Holder::InfrastructureCluster,
            object: blueprint.infrastructure.clone(),
            variables: with_overrides(json!({}), &[]),
        },
        Item {
            holder: Holder::ControlPlane,
            object: blueprint.control_plane.clone(),
            variables: cp_vars.clone(),
        },
    ];
    if let Some(t) = &blueprint.control_plane_machine {
        items.push(Item {
            holder: Holder::ControlPlaneMachineInfrastructure,
            object: t.clone(),
            variables: cp_vars,
        });
    }

    struct Plan<'a> {
        topology: &'a MachineDeploymentTopology,
        class: &'a MachineDeploymentClass,
        name: String,
        version: String,
        bootstrap_name: String,
        infrastructure_name: String,
        labels: Map<String, Value>,
        annotations: Map<String, Value>,
    }
    let mut plans = vec![];
    for (i, (t, version)) in md_topologies.iter().zip(md_versions).enumerate() {
        let md_class = class
            .workers
            .machine_deployments
            .iter()
            .find(|c| c.class == t.class)
            .ok_or_else(|| {
                invalid(format!(
                    "spec.topology.workers.machineDeployments[{i}].class: MachineDeployment class {:?} is not defined in ClusterClass {}",
                    t.class,
                    blueprint.class.name_any()
                ))
            })?;
        let c = current.deployments.get(&t.name);
        let name = match c {
            Some(c) => c.object.name_any(),
            None => naming::machine_deployment(
                md_class.naming.as_ref().and_then(|n| n.template.as_deref()),
                &cluster_name,
                &t.name,
            )
            .map_err(|e| {
                invalid(format!(
                    "spec.workers.machineDeployments[class={}].naming.template: {e}",
                    t.class
                ))
            })?,
        };
        let bootstrap_name = name_of(c.and_then(|c| c.bootstrap.as_ref()))
            .unwrap_or_else(|| naming::machine_deployment_template(&cluster_name, &t.name));
        let infrastructure_name = name_of(c.and_then(|c| c.infrastructure.as_ref()))
            .unwrap_or_else(|| naming::machine_deployment_template(&cluster_name, &t.name));
        let mut labels = Map::new();
        let mut annotations = Map::new();
        for m in [&md_class.metadata, &t.metadata].into_iter().flatten() {
            let (ml, ma) = meta_map(m);
            labels.extend(ml);
            annotations.extend(ma);
        }
        annotations.remove(upgrade::HOLD_UPGRADE_SEQUENCE);
        annotations.remove(upgrade::DEFER_UPGRADE);
        let mut builtin = json!({
            "class": t.class,
            "name": name,
            "topologyName": t.name,
            "version": version,
            "metadata": {"labels": labels, "annotations": annotations},
            "bootstrap": {"configRef": {"name": bootstrap_name}},
            "infrastructureRef": {"name": infrastructure_name},
        });
        if let Some(r) = t.replicas {
            builtin["replicas"] = json!(r);
        }
        let overrides = t.variables.as_ref().map_or(&[][..], |v| &v.overrides);
        let vars = with_overrides(json!({"machineDeployment": builtin}), overrides);
        let templates = blueprint.workers.get(&t.class).ok_or_else(|| {
            invalid(format!(
                "the templates of MachineDeployment class {:?} were not read",
                t.class
            ))
        })?;
        items.push(Item {
            holder: Holder::MachineDeploymentBootstrap(t.class.clone()),
            object: templates.bootstrap.clone(),
            variables: vars.clone(),
        });
        items.push(Item {
            holder: Holder::MachineDeploymentInfrastructure(t.class.clone()),
            object: templates.infrastructure.clone(),
            variables: vars,
        });
        plans.push(Plan {
            topology: t,
            class: md_class,
            name,
            version,
            bootstrap_name,
            infrastructure_name,
            labels,
            annotations,
        });
    }

    patches::apply(&class.patches, &global, &mut items)?;
    let mut items = items.into_iter();
    let mut next = || {
        items
            .next()
            .map(|i| i.object)
            .ok_or_else(|| invalid("a patched template went missing".into()))
    };

    let infrastructure = object_from_template(
        &next()?,
        &infrastructure_name,
        cluster,
        &Map::new(),
        &Map::new(),
    );
    let mut control_plane = object_from_template(
        &next()?,
        &control_plane_name,
        cluster,
        &cp_labels,
        &cp_annotations,
    );
    let control_plane_machine = match &blueprint.control_plane_machine {
        Some(_) => Some(template_from_template(
            &next()?,
            &cp_machine_name,
            cluster,
            &Map::new(),
        )),
        None => None,
    };
    // The control plane's own fields, over what the template gave.
    {
        let spec = &mut control_plane["spec"];
        if let Some(m) = &control_plane_machine {
            spec["machineTemplate"]["spec"]["infrastructureRef"] = reference(m);
            let mut l = Map::new();
            l.extend(cp_labels.clone());
            l.extend(topology_labels(&cluster_name));
            let existing = spec["machineTemplate"]["metadata"].clone();
            spec["machineTemplate"]["metadata"] = json!({
                "labels": merged(existing.get("labels"), &l),
                "annotations": merged(existing.get("annotations"), &cp_annotations),
            });
            let gates = if cp_topology.readiness_gates.is_empty() {
                &class.control_plane.readiness_gates
            } else {
                &cp_topology.readiness_gates
            };
            if !gates.is_empty() {
                spec["machineTemplate"]["spec"]["readinessGates"] = json!(gates);
            }
            if let Some(d) = cp_topology
                .deletion
                .as_ref()
                .or(class.control_plane.deletion.as_ref())
            {
                spec["machineTemplate"]["spec"]["deletion"] = json!(d);
            }
        }
        if let Some(r) = cp_topology.replicas {
            spec["replicas"] = json!(r);
        }
        spec["version"] = json!(cp_version);
    }
    let control_plane_health_check = match health_check(
        class.control_plane.health_check.as_ref(),
        cp_topology.health_check.as_ref(),
    ) {
        Some(hc) if blueprint.control_plane_machine.is_some() => {
            let mut selector = Map::new();
            selector.insert(TOPOLOGY_OWNED_LABEL.into(), json!(""));
            selector.insert(CONTROL_PLANE_LABEL.into(), json!(""));
            Some(health_check_object(
                &hc,
                &control_plane_name,
                cluster,
                selector,
            ))
        }
        _ => None,
    };

    let mut deployments = vec![];
    for p in plans {
        let mut extra = Map::new();
        extra.insert(
            TOPOLOGY_DEPLOYMENT_NAME_LABEL.into(),
            json!(p.topology.name),
        );
        let bootstrap = template_from_template(&next()?, &p.bootstrap_name, cluster, &extra);
        let infrastructure =
            template_from_template(&next()?, &p.infrastructure_name, cluster, &extra);
        let mut labels = p.labels.clone();
        labels.extend(topology_labels(&cluster_name));
        labels.extend(extra.clone());
        let mut selector = topology_labels(&cluster_name);
        selector.extend(extra.clone());
        let mut machine_spec = json!({
            "clusterName": cluster_name,
            "version": p.version,
            "bootstrap": {"configRef": reference(&bootstrap)},
            "infrastructureRef": reference(&infrastructure),
        });
        if let Some(f) = p
            .topology
            .failure_domain
            .as_ref()
            .or(p.class.failure_domain.as_ref())
        {
            machine_spec["failureDomain"] = json!(f);
        }
        if let Some(s) = p.topology.min_ready_seconds.or(p.class.min_ready_seconds) {
            machine_spec["minReadySeconds"] = json!(s);
        }
        let gates = if p.topology.readiness_gates.is_empty() {
            &p.class.readiness_gates
        } else {
            &p.topology.readiness_gates
        };
        if !gates.is_empty() {
            machine_spec["readinessGates"] = json!(gates);
        }
        let deletion = p.topology.deletion.as_ref().or(p.class.deletion.as_ref());
        if let Some(d) = deletion {
            let timeouts = json!(d.timeouts);
            if timeouts.as_object().is_some_and(|o| !o.is_empty()) {
                machine_spec["deletion"] = timeouts;
            }
        }
        let mut spec = json!({
            "clusterName": cluster_name,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels, "annotations": p.annotations},
                "spec": machine_spec,
            },
        });
        if let Some(r) = p.topology.replicas {
            spec["replicas"] = json!(r);
        }
        if let Some(order) = deletion.and_then(|d| d.order.as_ref()) {
            spec["deletion"] = json!({"order": order});
        }
        if let Some(s) = p
            .topology
            .rollout
            .as_ref()
            .or(p.class.rollout.as_ref())
            .and_then(|r| r.strategy.as_ref())
        {
            spec["rollout"] = json!({"strategy": s});
        }
        let hc = health_check(
            p.class.health_check.as_ref(),
            p.topology.health_check.as_ref(),
        );
        if let Some(m) = hc
            .as_ref()
            .and_then(|h| h.remediation.as_ref())
            .and_then(|r| r.max_in_flight.as_ref())
        {
            spec["remediation"] = json!({"maxInFlight": m});
        }
        let object = json!({
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {
                "name": p.name,
                "namespace": cluster.namespace(),
                "labels": labels,
                "annotations": p.annotations,
            },
            "spec": spec,
        });
        let health_check = hc.map(|hc| {
            let mut selector = Map::new();
            selector.insert(TOPOLOGY_OWNED_LABEL.into(), json!(""));
            selector.insert(
                TOPOLOGY_DEPLOYMENT_NAME_LABEL.into(),
                json!(p.topology.name),
            );
            health_check_object(&hc, &p.name, cluster, selector)
        });
        deployments.push(DesiredDeployment {
            topology: p.topology.name.clone(),
            object,
            bootstrap,
            infrastructure,
            health_check,
        });
    }

    Ok(Desired {
        infrastructure,
        control_plane,
        control_plane_machine,
        control_plane_health_check,
        deployments,
        control_plane_tracker: cp_tracker,
        workers,
    })
}

/// Whether every field of `desired` is in `current` with the same value: what the API server
/// adds (defaults) does not count as a difference, so a template is rotated only when the
/// topology really changed it.
pub(super) fn contained(desired: &Value, current: &Value) -> bool {
    // An empty map adds nothing, and the server leaves it out: a MachineDeployment's template
    // with `annotations: {}` was applied again at every reconcile.
    let nothing = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
    match (desired, current) {
        (Value::Object(d), Value::Object(c)) => d
            .iter()
            .all(|(k, v)| c.get(k).is_some_and(|cv| contained(v, cv)) || nothing(v)),
        (Value::Array(d), Value::Array(c)) => {
            d.len() == c.len() && d.iter().zip(c).all(|(d, c)| contained(d, c))
        }
        _ => desired == current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contained_ignores_what_the_server_added_and_sees_every_change() {
        let current = json!({"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}, "f": "defaulted"});
        assert!(contained(
            &json!({"a": 1, "b": {"c": [1, {"d": 2}]}}),
            &current
        ));
        assert!(!contained(&json!({"a": 2}), &current));
        assert!(!contained(&json!({"b": {"c": [1]}}), &current));
        assert!(!contained(&json!({"g": 1}), &current));
        // An empty map the server left out is there; an empty list is not.
        assert!(contained(&json!({"b": {"m": {}}}), &current));
        assert!(!contained(&json!({"b": {"m": []}}), &current));
        assert!(!contained(&json!({"b": {"m": {"k": "v"}}}), &current));
    }

    #[test]
    fn a_topology_health_check_replaces_the_class_one_and_can_turn_it_off() {
        let class: ClassHealthCheck =
            serde_json::from_value(json!({"checks": {"nodeStartupTimeoutSeconds": 600}})).unwrap();
        let mine: ClassHealthCheck =
            serde_json::from_value(json!({"checks": {"nodeStartupTimeoutSeconds": 60}})).unwrap();
        let off: ClassHealthCheck = serde_json::from_value(json!({"enabled": false})).unwrap();
        assert_eq!(health_check(Some(&class), None), Some(class.clone()));
        assert_eq!(health_check(Some(&class), Some(&mine)), Some(mine));
        assert_eq!(health_check(Some(&class), Some(&off)), None);
        assert_eq!(health_check(None, None), None);
    }

    #[test]
    fn cloned_objects_name_their_template_and_drop_the_kubectl_annotation() {
        let mut cluster = Cluster::new("c1", Default::default());
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("u1".into());
        let template = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DockerClusterTemplate",
            "metadata": {"name": "quick-start-cluster", "annotations": {LAST_APPLIED_ANNOTATION: "{}"}},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"loadBalancer": {}}}},
        });
        let o = object_from_template(&template, "c1-x", &cluster, &Map::new(), &Map::new());
        assert_eq!(o["kind"], "DockerCluster");
        assert_eq!(o["spec"], json!({"loadBalancer": {}}));
        assert_eq!(o["metadata"]["labels"]["a"], "b");
        assert_eq!(o["metadata"]["labels"][TOPOLOGY_OWNED_LABEL], "");
        assert_eq!(
            o["metadata"]["annotations"][CLONED_FROM_GROUPKIND_ANNOTATION],
            "DockerClusterTemplate.infrastructure.cluster.x-k8s.io"
        );
        let t = template_from_template(&template, "c1-y", &cluster, &Map::new());
        assert_eq!(t["kind"], "DockerClusterTemplate");
        assert!(
            t["metadata"]["annotations"]
                .get(LAST_APPLIED_ANNOTATION)
                .is_none()
        );
        assert_eq!(t["metadata"]["ownerReferences"][0]["uid"], "u1");
    }
}
