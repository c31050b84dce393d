//! Upstream's ClusterClass webhook (`internal/webhooks/clusterclass.go`), the parts a class
//! can get wrong on its own or against the Clusters that use it: variable names, worker class
//! names, compatible template changes, and deletion while in use.

use super::refusal::Refusal;
use super::{Allowed, Webhooks};
use crate::topology::variables::FieldError;
use capw_api::cluster::Cluster;
use capw_api::clusterclass::ClusterClass;
use capw_apiserver::values;
use kube::ResourceExt;
use kube::api::ListParams;

fn err(field: String, message: String) -> FieldError {
    FieldError { field, message }
}

/// The Clusters in the class's namespace that use it (upstream lists them the same way: a
/// class is used by Clusters of its own namespace unless they name another).
async fn users(w: &Webhooks, class: &ClusterClass) -> Result<Vec<Cluster>, Refusal> {
    let ns = class.namespace().unwrap_or_default();
    let clusters = w
        .clusters(&ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| {
            Refusal::internal(format!(
                "could not retrieve Clusters using ClusterClass: {e}"
            ))
        })?;
    Ok(clusters
        .items
        .into_iter()
        .filter(|c| {
            c.spec.topology.as_ref().is_some_and(|t| {
                t.class_ref.name == class.name_any()
                    && t.class_ref.namespace.as_deref().is_none_or(|n| n == ns)
            })
        })
        .collect())
}

pub(super) async fn validate_delete(
    w: &Webhooks,
    class: &ClusterClass,
) -> Result<Allowed, Refusal> {
    let used = users(w, class).await?;
    if used.is_empty() {
        return Ok(Allowed::default());
    }
    // Upstream's `clog.ListToString(.., 3)`: three names, then how many more.
    let mut names: Vec<String> = used
        .iter()
        .take(3)
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    if used.len() > 3 {
        names.push(format!("... ({} more)", used.len() - 3));
    }
    Err(Refusal::forbidden(
        "ClusterClass",
        &class.name_any(),
        format!(
            "ClusterClass cannot be deleted because it is used by Cluster(s): {}",
            names.join(", ")
        ),
    ))
}

pub(super) async fn validate(
    w: &Webhooks,
    class: &ClusterClass,
    old: Option<&ClusterClass>,
) -> Result<Allowed, Refusal> {
    let mut errors = vec![];
    let mut seen = std::collections::HashSet::new();
    for (i, v) in class.spec.variables.iter().enumerate() {
        let at = format!("spec.variables[{i}].name");
        if !seen.insert(v.name.as_str()) {
            errors.push(err(at.clone(), format!("Invalid value: \"{}\": variable name must be unique. Variable with name \"{}\" is defined more than once", v.name, v.name)));
        }
        if v.name.starts_with("builtin") {
            errors.push(err(
                at.clone(),
                format!(
                    "Invalid value: \"{}\": \"builtin\" is a reserved variable name",
                    v.name
                ),
            ));
        }
        if v.name.contains('.') {
            errors.push(err(
                at,
                format!(
                    "Invalid value: \"{}\": variable name cannot contain \".\"",
                    v.name
                ),
            ));
        }
        // The schema must be one kube-apiserver would take for a CRD field, and its default
        // must pass it: the API server's own checks and messages.
        let schema = &v.schema.open_api_v3_schema;
        let path = format!("spec.variables[{i}].schema.openAPIV3Schema");
        let structural = values::structural(schema, &path);
        let sound = structural.is_empty();
        errors.extend(structural.into_iter().map(|c| err(c.field, c.message)));
        if sound && let Some(default) = schema.get("default") {
            let causes = values::validate(default, schema, &format!("{path}.default"));
            errors.extend(causes.into_iter().map(|c| err(c.field, c.message)));
        }
    }
    let mut classes = std::collections::HashSet::new();
    for (i, md) in class.spec.workers.machine_deployments.iter().enumerate() {
        if !classes.insert(md.class.as_str()) {
            errors.push(err(
                format!("spec.workers.machineDeployments[{i}].class"),
                format!("Invalid value: \"{}\": MachineDeployment class must be unique. MachineDeployment with class \"{}\" is defined more than once", md.class, md.class),
            ));
        }
    }
    let mut patches = std::collections::HashSet::new();
    for (i, p) in class.spec.patches.iter().enumerate() {
        let at = format!("spec.patches[{i}].name");
        if p.name == "inline" {
            errors.push(err(
                at.clone(),
                "Invalid value: \"inline\": \"inline\" is a reserved patch name".into(),
            ));
        }
        if !patches.insert(p.name.as_str()) {
            errors.push(err(at, format!("Invalid value: \"{}\": patch names must be unique. Patch with name \"{}\" is defined more than once", p.name, p.name)));
        }
    }
    if let Some(old) = old {
        errors.extend(super::cluster::compatible(old, class));
        // A worker class a Cluster still uses cannot go away.
        let removed: Vec<&str> = old
            .spec
            .workers
            .machine_deployments
            .iter()
            .map(|c| c.class.as_str())
            .filter(|c| {
                !class
                    .spec
                    .workers
                    .machine_deployments
                    .iter()
                    .any(|n| n.class == *c)
            })
            .collect();
        if !removed.is_empty() {
            for c in users(w, class).await? {
                let used = c
                    .spec
                    .topology
                    .iter()
                    .flat_map(|t| t.workers.iter())
                    .flat_map(|w| &w.machine_deployments);
                for md in used.filter(|md| removed.contains(&md.class.as_str())) {
                    errors.push(err(
                        "spec.workers.machineDeployments".into(),
                        format!(
                            "Forbidden: MachineDeploymentClass \"{}\" cannot be deleted because it is used by Cluster \"{}\"",
                            md.class,
                            c.name_any()
                        ),
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(Allowed::default())
    } else {
        Err(Refusal::invalid("ClusterClass", &class.name_any(), errors))
    }
}
