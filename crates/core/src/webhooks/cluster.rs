//! Upstream's Cluster webhook (`internal/webhooks/cluster.go`) for managed topologies:
//! defaulting and checking the variables against the class, the class's worker classes, the
//! version rules of an upgrade and the compatibility of a class change.

use super::refusal::Refusal;
use super::{Allowed, Webhooks};
use crate::topology::upgrade::UPGRADE_CONCURRENCY;
use crate::topology::variables::{self, FieldError};
use capw_api::cluster::Cluster;
use capw_api::clusterclass::{ClusterClass, TemplateReference};
use capw_api::common::names::{CLUSTER_NAME_LABEL, DEPLOYMENT_NAME_LABEL, TOPOLOGY_OWNED_LABEL};
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::time::Duration;

/// Skips the version rules of an update, as upstream's annotation does.
const UNSAFE_VERSION: &str = "unsafe.topology.cluster.x-k8s.io/disable-update-version-check";
/// Allows adding a topology to an existing Cluster.
const UNSAFE_CLASS_NAME: &str = "unsafe.topology.cluster.x-k8s.io/disable-update-class-name-check";

fn err(field: &str, message: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        message,
    }
}

/// Why the class could not be used.
enum Lookup {
    NotFound(String),
    NotReconciled,
    Failed(String),
}

fn class_key(cluster: &Cluster) -> (String, String) {
    let ns = cluster.namespace().unwrap_or_default();
    let t = cluster.spec.topology.as_ref();
    (
        t.and_then(|t| t.class_ref.namespace.clone()).unwrap_or(ns),
        t.map(|t| t.class_ref.name.clone()).unwrap_or_default(),
    )
}

/// Upstream's `pollClusterClassForCluster`: a class applied in the same `kubectl apply` as the
/// Cluster gets two seconds to exist and be reconciled.
async fn class_of(w: &Webhooks, cluster: &Cluster) -> Result<ClusterClass, Lookup> {
    let (ns, name) = class_key(cluster);
    let mut last = Lookup::NotReconciled;
    for _ in 0..10 {
        last = match w.classes(&ns).get_opt(&name).await {
            Ok(Some(c)) if crate::clusterclass::reconciled(&c) => return Ok(c),
            Ok(Some(_)) => Lookup::NotReconciled,
            Ok(None) => Lookup::NotFound(format!(
                "clusterclasses.cluster.x-k8s.io \"{name}\" not found"
            )),
            Err(e) => Lookup::Failed(e.to_string()),
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

impl Lookup {
    fn message(&self) -> String {
        match self {
            Lookup::NotFound(m) | Lookup::Failed(m) => m.clone(),
            Lookup::NotReconciled => "ClusterClass is not successfully reconciled".into(),
        }
    }
}

/// Upstream's `Default`: a `v` before the version, and the variables defaulted and checked
/// against the class (here rather than in validation, so both see the same class).
pub(super) async fn default(
    w: &Webhooks,
    cluster: &mut Cluster,
    _old: Option<&Cluster>,
) -> Result<(), Refusal> {
    let name = cluster.name_any();
    let Some(topology) = cluster.spec.topology.as_mut() else {
        return Ok(());
    };
    if !topology.version.starts_with('v') {
        topology.version = format!("v{}", topology.version);
    }
    if topology.class_ref.name.is_empty() {
        return Err(Refusal::invalid(
            "Cluster",
            &name,
            vec![err(
                "spec.topology.classRef.name",
                "Required value: cannot be empty".into(),
            )],
        ));
    }
    let class = match class_of(w, cluster).await {
        Ok(c) => c,
        Err(Lookup::NotFound(_) | Lookup::NotReconciled) => return Ok(()),
        Err(Lookup::Failed(e)) => {
            return Err(Refusal::internal(format!(
                "Cluster {name} can't be defaulted. ClusterClass {} can not be retrieved: {e}",
                class_key(cluster).1
            )));
        }
    };
    let definitions = class.status.clone().unwrap_or_default().variables;
    let Some(topology) = cluster.spec.topology.as_mut() else {
        return Ok(());
    };
    variables::default(&mut topology.variables, &definitions);
    let mut errors =
        variables::validate(&topology.variables, &definitions, "spec.topology.variables");
    let overrides = |path: String, values: &[capw_api::clusterclass::ClusterVariable]| {
        // Overrides need not repeat required variables: the Cluster's own values stand.
        variables::validate(values, &definitions, &path)
            .into_iter()
            .filter(|e| !e.message.starts_with("Required value"))
            .collect::<Vec<_>>()
    };
    if let Some(v) = topology
        .control_plane
        .as_ref()
        .and_then(|c| c.variables.as_ref())
    {
        errors.extend(overrides(
            "spec.topology.controlPlane.variables.overrides".into(),
            &v.overrides,
        ));
    }
    for md in topology.workers.iter().flat_map(|w| &w.machine_deployments) {
        if let Some(v) = &md.variables {
            errors.extend(overrides(
                format!(
                    "spec.topology.workers.machineDeployments[{}].variables.overrides",
                    md.name
                ),
                &v.overrides,
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Refusal::invalid("Cluster", &name, errors))
    }
}

fn valid_version(v: &str) -> bool {
    semver::Version::parse(v.strip_prefix('v').unwrap_or(v)).is_ok()
}

/// A version as Go's semver prints it: no `v`.
fn parse(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.strip_prefix('v').unwrap_or(v)).ok()
}

/// Upstream's `validate` and `validateTopology`.
pub(super) async fn validate(
    w: &Webhooks,
    cluster: &Cluster,
    old: Option<&Cluster>,
) -> Result<Allowed, Refusal> {
    let name = cluster.name_any();
    let mut errors = vec![];
    let mut warnings = vec![];
    if let Some(old) = old {
        for (field, was, is) in [
            (
                "spec.infrastructureRef",
                old.spec.infrastructure_ref.is_some(),
                cluster.spec.infrastructure_ref.is_some(),
            ),
            (
                "spec.controlPlaneRef",
                old.spec.control_plane_ref.is_some(),
                cluster.spec.control_plane_ref.is_some(),
            ),
        ] {
            if was && !is {
                errors.push(err(field, "Forbidden: cannot be removed".into()));
            }
        }
        if old.spec.topology.is_some() && cluster.spec.topology.is_none() {
            errors.push(err(
                "spec.topology",
                "Forbidden: cannot be removed from an existing Cluster".into(),
            ));
        }
    }
    if cluster.spec.topology.is_some() {
        validate_topology(w, cluster, old, &mut errors, &mut warnings).await;
    }
    if errors.is_empty() {
        Ok(Allowed {
            patch: None,
            warnings,
        })
    } else {
        Err(Refusal::invalid("Cluster", &name, errors))
    }
}

async fn validate_topology(
    w: &Webhooks,
    cluster: &Cluster,
    old: Option<&Cluster>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) {
    let Some(topology) = &cluster.spec.topology else {
        return;
    };
    if topology.class_ref.name.is_empty() {
        errors.push(err(
            "spec.topology.class",
            "Required value: classRef.name cannot be empty".into(),
        ));
        return;
    }
    if !valid_version(&topology.version) {
        errors.push(err(
            "spec.topology.version",
            format!(
                "Invalid value: \"{}\": version must be a valid semantic version",
                topology.version
            ),
        ));
    }
    if let Some(c) = cluster.annotations().get(UPGRADE_CONCURRENCY) {
        let field = format!("metadata.annotations.{UPGRADE_CONCURRENCY}");
        match c.parse::<i64>() {
            Err(e) => errors.push(err(
                &field,
                format!("Invalid value: \"{c}\": could not parse the value of the annotation: {e}"),
            )),
            Ok(n) if n < 1 => errors.push(err(
                &field,
                format!("Invalid value: \"{c}\": value cannot be less than 1"),
            )),
            Ok(_) => {}
        }
    }
    let (ns, class_name) = class_key(cluster);
    let key = format!("{ns}/{class_name}");
    let class = class_of(w, cluster).await;
    match &class {
        Ok(class) => errors.extend(deployments_defined(cluster, class)),
        // Upstream only warns here on create, so that a GitOps tool may apply a Cluster before
        // its class. capw refuses it (issue 30: a bad topology is refused at apply), with the
        // message upstream gives on update; a class in the same apply still gets the two-second
        // poll above, and one that exists but is not yet reconciled is only a warning.
        Err(Lookup::NotFound(e)) => {
            errors.push(err("spec.topology.class", format!("Internal error: {e}")));
            return;
        }
        Err(Lookup::NotReconciled) => warnings.push(format!(
            "Cluster refers to ClusterClass {key}, but this ClusterClass hasn't been successfully reconciled. Cluster topology has not been fully validated. Please take a look at the ClusterClass status"
        )),
        Err(Lookup::Failed(e)) => {
            errors.push(err("spec.topology.class", format!("Internal error: {e}")));
            return;
        }
    }
    let Some(old) = old else { return };
    let Some(old_topology) = old
        .spec
        .topology
        .as_ref()
        .filter(|t| !t.class_ref.name.is_empty())
    else {
        if !cluster.annotations().contains_key(UNSAFE_CLASS_NAME) {
            errors.push(err(
                "spec.topology.class",
                "Forbidden: classRef cannot be set on an existing Cluster".into(),
            ));
        }
        return;
    };
    if cluster.annotations().contains_key(UNSAFE_VERSION) {
        warnings.push(format!(
            "Skipping version validation for Cluster because annotation \"{UNSAFE_VERSION}\" is set."
        ));
    } else if let (Some(new_v), Some(old_v)) =
        (parse(&topology.version), parse(&old_topology.version))
        && let Some(e) = version_change(w, old, &topology.version, &new_v, &old_v).await
    {
        errors.push(e);
    }
    if class_key(old) != class_key(cluster) {
        let new_class = match class {
            Ok(c) => c,
            Err(e) => {
                errors.push(err(
                    "spec.topology.class",
                    format!(
                        "Forbidden: cannot rebase to ClusterClass \"{key}\": {}",
                        e.message()
                    ),
                ));
                return;
            }
        };
        let (old_ns, old_name) = class_key(old);
        match class_of(w, old).await {
            Ok(old_class) => errors.extend(compatible(&old_class, &new_class)),
            Err(e) => errors.push(err(
                "spec.topology.class",
                format!(
                    "Forbidden: valid ClusterClass with name \"{old_ns}/{old_name}\" could not be retrieved, change from class \"{old_ns}/{old_name}\" to class \"{key}\" cannot be validated. Error: {}",
                    e.message()
                ),
            )),
        }
    }
}

/// Upstream's `MachineDeploymentTopologiesAreValidAndDefinedInClusterClass`.
fn deployments_defined(cluster: &Cluster, class: &ClusterClass) -> Vec<FieldError> {
    let mut errors = vec![];
    let mut names = std::collections::HashSet::new();
    let deployments = cluster
        .spec
        .topology
        .iter()
        .flat_map(|t| t.workers.iter())
        .flat_map(|w| &w.machine_deployments);
    for (i, md) in deployments.enumerate() {
        let at = format!("spec.topology.workers.machineDeployments[{i}]");
        if !class
            .spec
            .workers
            .machine_deployments
            .iter()
            .any(|c| c.class == md.class)
        {
            errors.push(err(
                &format!("{at}.class"),
                format!(
                    "Invalid value: \"{}\": MachineDeploymentClass with name \"{}\" does not exist in ClusterClass \"{}\"",
                    md.class,
                    md.class,
                    class.name_any()
                ),
            ));
        }
        if md.name.is_empty() {
            errors.push(err(
                &format!("{at}.name"),
                "Required value: name must not be empty".into(),
            ));
        } else if !names.insert(md.name.as_str()) {
            errors.push(err(
                &format!("{at}.name"),
                format!(
                    "Invalid value: \"{}\": name must be unique. MachineDeployment with name \"{}\" is defined more than once",
                    md.name, md.name
                ),
            ));
        }
    }
    errors
}

/// Upstream's `ClusterClassTemplateAreCompatible`: group and kind stay.
fn template_compatible(
    current: &TemplateReference,
    desired: &TemplateReference,
    prefix: &str,
) -> Vec<FieldError> {
    let mut errors = vec![];
    if current.group() != desired.group() {
        errors.push(err(
            &format!("{prefix}.ref.apiVersion"),
            format!(
                "Forbidden: apiVersion.group cannot be changed from \"{}\" to \"{}\" to prevent incompatible changes in the Clusters",
                current.group(),
                desired.group()
            ),
        ));
    }
    if current.kind != desired.kind {
        errors.push(err(
            &format!("{prefix}.ref.kind"),
            format!(
                "Forbidden: apiVersion.kind cannot be changed from \"{}\" to \"{}\" to prevent incompatible changes in the Clusters",
                current.kind, desired.kind
            ),
        ));
    }
    errors
}

/// Upstream's `ClusterClassesAreCompatible`.
pub(super) fn compatible(current: &ClusterClass, desired: &ClusterClass) -> Vec<FieldError> {
    let (c, d) = (&current.spec, &desired.spec);
    let mut errors = template_compatible(
        &c.infrastructure.template_ref,
        &d.infrastructure.template_ref,
        "spec.infrastructure",
    );
    errors.extend(template_compatible(
        &c.control_plane.template_ref,
        &d.control_plane.template_ref,
        "spec.controlPlane",
    ));
    if let (Some(cm), Some(dm)) = (
        &c.control_plane.machine_infrastructure,
        &d.control_plane.machine_infrastructure,
    ) {
        errors.extend(template_compatible(
            &cm.template_ref,
            &dm.template_ref,
            "spec.controlPlane.machineInfrastructure",
        ));
    }
    for class in &d.workers.machine_deployments {
        for (i, old) in c.workers.machine_deployments.iter().enumerate() {
            if class.class == old.class {
                errors.extend(template_compatible(
                    &old.infrastructure.template_ref,
                    &class.infrastructure.template_ref,
                    &format!("spec.workers.machineDeployments[{i}]"),
                ));
            }
        }
    }
    errors
}

/// Upstream's `validateTopologyVersion`.
async fn version_change(
    w: &Webhooks,
    old: &Cluster,
    raw: &str,
    new_v: &semver::Version,
    old_v: &semver::Version,
) -> Option<FieldError> {
    if new_v == old_v {
        return None;
    }
    let plain = |v: &semver::Version| semver::Version::new(v.major, v.minor, v.patch);
    let invalid = |why: String| {
        err(
            "spec.topology.version",
            format!("Invalid value: \"{raw}\": {why}"),
        )
    };
    if plain(new_v) < plain(old_v) {
        return Some(invalid(format!(
            "version cannot be decreased from \"{old_v}\" to \"{new_v}\""
        )));
    }
    if plain(new_v) >= semver::Version::new(old_v.major, old_v.minor + 2, 0) {
        return Some(invalid(format!(
            "version cannot be increased from \"{old_v}\" to \"{new_v}\""
        )));
    }
    let mut why = vec![];
    if let Some(e) = control_plane_settled(w, old, old_v).await {
        why.push(e);
    }
    if let Some(e) = deployments_settled(w, old, old_v).await {
        why.push(e);
    }
    match why.len() {
        0 => None,
        1 => Some(invalid(format!("version cannot be changed: {}", why[0]))),
        _ => Some(invalid(format!(
            "version cannot be changed: [{}]",
            why.join(", ")
        ))),
    }
}

async fn control_plane_settled(
    w: &Webhooks,
    old: &Cluster,
    old_v: &semver::Version,
) -> Option<String> {
    let ns = old.namespace().unwrap_or_default();
    let failed = |e: String| {
        Some(format!(
            "failed to check if control plane is upgrading: {e}"
        ))
    };
    let Some(reference) = &old.spec.control_plane_ref else {
        return failed(
            "failed to get control plane object: the Cluster has no controlPlaneRef yet".into(),
        );
    };
    let cp = match w.resolver.get(&ns, reference).await {
        Ok(Some((cp, _))) => serde_json::to_value(&*cp).unwrap_or_default(),
        Ok(None) => {
            return failed(format!(
                "failed to get control plane object: {} {} not found",
                reference.kind, reference.name
            ));
        }
        Err(e) => return failed(format!("failed to get control plane object: {e}")),
    };
    let spec = cp
        .pointer("/spec/version")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let Some(spec_v) = parse(spec) else {
        return failed(format!("failed to parse control plane version {spec}"));
    };
    if &spec_v != old_v {
        return Some(format!(
            "Cluster.spec.topology.version {old_v} was not propagated to control plane yet (control plane version {spec_v})"
        ));
    }
    let now = crate::topology::upgrade::ControlPlaneNow {
        spec_version: spec.to_string(),
        status_version: cp
            .pointer("/status/version")
            .and_then(|v| v.as_str())
            .map(str::to_string),
    };
    if now.provisioning() {
        return Some("control plane is currently provisioning".into());
    }
    if now.upgrading() {
        return Some("control plane is still completing a previous upgrade".into());
    }
    None
}

async fn deployments_settled(
    w: &Webhooks,
    old: &Cluster,
    old_v: &semver::Version,
) -> Option<String> {
    let ns = old.namespace().unwrap_or_default();
    let selector = format!(
        "{CLUSTER_NAME_LABEL}={},{TOPOLOGY_OWNED_LABEL}",
        old.name_any()
    );
    let mds = Api::<MachineDeployment>::namespaced(w.client.clone(), &ns);
    let list = match mds.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l,
        Err(e) => {
            return Some(format!(
                "failed to check if MachineDeployments are upgrading: failed to get MachineDeployments: {e}"
            ));
        }
    };
    let machines = Api::<Machine>::namespaced(w.client.clone(), &ns);
    let mut upgrading = vec![];
    for md in &list.items {
        let version = md.spec.template.spec.version.clone().unwrap_or_default();
        if parse(&version).as_ref() != Some(old_v) {
            upgrading.push(md.name_any());
            continue;
        }
        let selector = format!("{DEPLOYMENT_NAME_LABEL}={}", md.name_any());
        let rolling = match machines
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(ms) => ms
                .items
                .iter()
                .any(|m| m.spec.version.as_deref() != Some(version.as_str())),
            Err(e) => {
                return Some(format!(
                    "failed to check if MachineDeployment {} is upgrading: {e}",
                    md.name_any()
                ));
            }
        };
        if rolling {
            upgrading.push(md.name_any());
        }
    }
    (!upgrading.is_empty()).then(|| {
        format!(
            "there are still MachineDeployments completing a previous upgrade: [{}]",
            upgrading.join(", ")
        )
    })
}
