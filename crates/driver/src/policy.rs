//! What the host accepts of a plugin's result before it writes anything (SECURITY.md): a result
//! that breaks a rule is refused whole, as `PluginInvalidResult` naming the rule, and nothing of
//! it is written.
//!
//! Status patches are checked where every result is, when the call returns
//! (`contract::fields::STATUS_FIELDS`); what needs the Cluster is checked here:
//!
//! - A kubeconfig must be one the host would build a client from (see
//!   [`capw_reconcile::kubeconfig`]) for this Cluster's endpoint.
//! - A control plane asks for at most `spec.replicas` + 1 (the surge) Machines in all, each
//!   named as a Machine may be, none twice, and none that would be cloned over someone else's
//!   object.

use super::context::Around;
use super::writeback::Result as Outcome;
use capw_reconcile::kubeconfig;
use kube::api::DynamicObject;
use serde_json::Value;

/// The suffixes of the Secrets the host keeps per cluster (`<cluster>-ca` and the rest). The
/// host names a control-plane Machine's bootstrap config, and that config's data Secret, after
/// the Machine: a Machine name with one of these suffixes would name another cluster's Secret.
const CLUSTER_SECRET_SUFFIXES: [&str; 6] =
    ["-ca", "-etcd", "-proxy", "-sa", "-token", "-kubeconfig"];

/// A Machine name a control plane may ask for: a DNS label (it is also a label value and a
/// hostname), not shaped like a cluster Secret's name.
fn machine_name(name: &str) -> Result<(), String> {
    let label = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !label {
        return Err(format!(
            "machines-to-create: {name:?} is not a Machine name of at most 63 lowercase letters, digits, '-' and '.', starting and ending alphanumeric; name Machines <control plane>-<random suffix> as upstream"
        ));
    }
    if let Some(suffix) = CLUSTER_SECRET_SUFFIXES.iter().find(|s| name.ends_with(**s)) {
        return Err(format!(
            "machines-to-create: {name:?} ends in {suffix:?}, the suffix of a cluster Secret; the Machine's bootstrap data Secret takes the Machine's name, so name Machines <control plane>-<random suffix> as upstream"
        ));
    }
    Ok(())
}

/// The most Machines a control plane may have at once, as upstream's rollout allows.
const SURGE: i64 = 1;

/// Why the result must not be written, if it must not.
///
/// A kubeconfig that passes is replaced by the one the host built from it, so what is stored as
/// `<cluster>-kubeconfig` is what was checked: no other context, user or field of the plugin's
/// text survives.
pub(super) async fn check(
    kctx: &super::KindCtx,
    obj: &DynamicObject,
    around: &Around,
    r: &mut Outcome,
) -> Result<(), String> {
    let Outcome::ControlPlane(cp) = r else {
        return Ok(());
    };
    if let Some(text) = &cp.kubeconfig {
        let endpoint = around
            .cluster
            .as_ref()
            .and_then(|c| c.spec.control_plane_endpoint.as_ref());
        cp.kubeconfig = Some(
            kubeconfig::stored(text, endpoint)
                .map_err(|e| format!("kubeconfig refused, nothing was written: {e}"))?,
        );
    }
    for m in &cp.machines_to_create {
        machine_name(&m.name)?;
    }
    let replicas = obj
        .data
        .pointer(capw_api::contract::fields::DESIRED_REPLICAS)
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0);
    let have = around.owned_machines.len() as i64;
    let asked = cp.machines_to_create.len() as i64;
    if have + asked > replicas + SURGE {
        return Err(format!(
            "machines-to-create asks for {asked} Machines with {have} existing, over spec.replicas ({replicas}) + {SURGE}: a control plane may have at most replicas + maxSurge Machines"
        ));
    }
    let mut names: Vec<&str> = cp
        .machines_to_create
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("machines-to-create names the same Machine twice".into());
    }
    super::machines::check_names(kctx, obj, &cp.machines_to_create).await
}
