//! Which MachineSet is a MachineDeployment's current one (`capi-lifecycle.md` §3.3): a
//! semantic comparison of the four rollout fields (version, bootstrap, infrastructureRef,
//! failureDomain), never the hash label; and `rollout.after`, which makes Machines created
//! before it out of date although the template is the same.

use capw_api::common::names::REVISION_ANNOTATION;
use capw_api::machine::MachineSpec;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use kube::ResourceExt;

/// Why a template is not up to date with the deployment's, one reason per line; empty when
/// it is. Labels, annotations, readiness gates, minReadySeconds and the deletion timeouts
/// change in place and never count.
pub fn not_up_to_date(have: &MachineSpec, want: &MachineSpec) -> Vec<String> {
    let mut out = vec![];
    if have.version != want.version {
        out.push(format!(
            "Version {}, {} required",
            have.version.as_deref().unwrap_or("<none>"),
            want.version.as_deref().unwrap_or("<none>")
        ));
    }
    if have.bootstrap.config_ref != want.bootstrap.config_ref
        || have.bootstrap.data_secret_name != want.bootstrap.data_secret_name
    {
        let kind = want
            .bootstrap
            .config_ref
            .as_ref()
            .map(|r| r.kind.trim_end_matches("Template").to_string())
            .unwrap_or_else(|| "Bootstrap".into());
        out.push(format!("{kind} is not up-to-date"));
    }
    if have.infrastructure_ref != want.infrastructure_ref {
        out.push(format!(
            "{} is not up-to-date",
            want.infrastructure_ref.kind.trim_end_matches("Template")
        ));
    }
    if have.failure_domain != want.failure_domain {
        out.push(format!(
            "Failure domain {}, {} required",
            have.failure_domain.as_deref().unwrap_or("<none>"),
            want.failure_domain.as_deref().unwrap_or("<none>")
        ));
    }
    out
}

/// `rollout.after` as Unix seconds, once it has passed.
pub fn rollout_after_passed(md: &MachineDeployment, now: i64) -> Option<i64> {
    md.spec
        .rollout
        .as_ref()
        .and_then(|r| r.after.as_deref())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
        .filter(|t| *t <= now)
}

/// When the set was created (Unix seconds; 0 when unknown).
pub fn created(ms: &MachineSet) -> i64 {
    ms.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0)
}

/// Why the set's Machines are out of date with the deployment (the `UpToDate` condition's
/// lines); empty when they are not.
pub fn set_not_up_to_date(ms: &MachineSet, md: &MachineDeployment, now: i64) -> Vec<String> {
    let mut out = not_up_to_date(&ms.spec.template.spec, &md.spec.template.spec);
    if rollout_after_passed(md, now).is_some_and(|after| created(ms) <= after) {
        out.push("MachineDeployment spec.rollout.after expired".into());
    }
    out
}

pub fn revision(obj: &impl ResourceExt) -> i64 {
    obj.annotations()
        .get(REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Upstream's `FindNewMachineSet`: among the sets whose template matches, sorted by replicas
/// (most first, then oldest, then name), the first one; once `rollout.after` has passed, the
/// first one created at or after it.
pub fn find_new<'a>(
    md: &MachineDeployment,
    sets: &'a [&'a MachineSet],
    now: i64,
) -> Option<&'a MachineSet> {
    let mut sorted: Vec<&MachineSet> = sets.to_vec();
    sorted.sort_by(|a, b| {
        b.spec
            .replicas
            .unwrap_or(0)
            .cmp(&a.spec.replicas.unwrap_or(0))
            .then(created(a).cmp(&created(b)))
            .then(a.name_any().cmp(&b.name_any()))
    });
    let after = rollout_after_passed(md, now);
    sorted.into_iter().find(|ms| {
        not_up_to_date(&ms.spec.template.spec, &md.spec.template.spec).is_empty()
            && after.is_none_or(|a| created(ms) >= a)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(infra: &str, version: &str) -> MachineSpec {
        serde_json::from_value(json!({
            "clusterName": "c", "version": version,
            "bootstrap": {"configRef": {"apiGroup": "b", "kind": "KubeadmConfigTemplate", "name": "t"}},
            "infrastructureRef": {"apiGroup": "i", "kind": "DockerMachineTemplate", "name": infra},
        }))
        .unwrap()
    }

    #[test]
    fn only_the_four_rollout_fields_count() {
        let a = spec("a", "v1.30.0");
        let mut same = a.clone();
        same.min_ready_seconds = Some(10);
        same.readiness_gates = vec![Default::default()];
        assert!(not_up_to_date(&same, &a).is_empty());
        assert_eq!(
            not_up_to_date(&spec("b", "v1.30.0"), &a),
            ["DockerMachine is not up-to-date"]
        );
        assert_eq!(
            not_up_to_date(&spec("a", "v1.31.0"), &a),
            ["Version v1.31.0, v1.30.0 required"]
        );
        let mut fd = a.clone();
        fd.failure_domain = Some("fd1".into());
        assert_eq!(not_up_to_date(&fd, &a).len(), 1);
    }

    #[test]
    fn the_new_set_is_the_matching_one_and_rollout_after_forces_a_new_one() {
        let md: MachineDeployment = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "md"},
            "spec": {"clusterName": "c", "template": {"spec": spec("a", "v1.30.0")}},
        }))
        .unwrap();
        let ms = |name: &str, infra: &str, replicas: i32, created: &str| -> MachineSet {
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"clusterName": "c", "replicas": replicas, "template": {"spec": spec(infra, "v1.30.0")}},
            }))
            .unwrap()
        };
        let old = ms("old", "b", 3, "2026-01-01T00:00:00Z");
        let small = ms("small", "a", 1, "2026-01-01T00:00:00Z");
        let big = ms("big", "a", 2, "2026-01-02T00:00:00Z");
        let sets = [&old, &small, &big];
        let now = 1_900_000_000;
        assert_eq!(
            find_new(&md, &sets, now).map(|m| m.name_any()).as_deref(),
            Some("big")
        );
        let mut after = md.clone();
        after.spec.rollout =
            Some(serde_json::from_value(json!({"after": "2026-01-01T12:00:00Z"})).unwrap());
        assert!(find_new(&after, &[&small], now).is_none());
        assert_eq!(
            find_new(&after, &sets, now)
                .map(|m| m.name_any())
                .as_deref(),
            Some("big")
        );
        assert_eq!(
            set_not_up_to_date(&small, &after, now),
            ["MachineDeployment spec.rollout.after expired"]
        );
        // A future rollout.after changes nothing yet.
        after.spec.rollout =
            Some(serde_json::from_value(json!({"after": "2040-01-01T00:00:00Z"})).unwrap());
        assert!(set_not_up_to_date(&small, &after, now).is_empty());
    }
}
