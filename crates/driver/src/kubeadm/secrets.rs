//! The cluster's Secrets, as upstream's KubeadmControlPlane makes them: the certificate
//! authorities `<cluster>-ca`, `-etcd` and `-proxy` and the service-account keys `-sa`, each
//! `tls.crt`/`tls.key`, typed `cluster.x-k8s.io/secret`, labelled with the cluster name and
//! controlled by the control plane; and the admin client certificate (`kubernetes-admin`,
//! O=`system:masters`) that the `<cluster>-kubeconfig` carries. Plugins never write Secrets:
//! the host makes these on first use and hands each call only what its role needs.
//!
//! `<cluster>-token` is capw's own: the bearer token node agents register with.

use crate::{DriverError, KindCtx, Role};
use capw_api::cluster::Cluster;
use capw_api::common::names::CLUSTER_NAME_LABEL;
use capw_apiserver::tls;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::time::Duration;

/// Upstream's `ClientCertificateRenewalDuration`: an admin certificate with less than half its
/// life left is replaced.
const RENEW_BEFORE: Duration = Duration::from_secs(tls::CLIENT_CERT_VALIDITY.as_secs() / 2);

type Data = BTreeMap<String, String>;

fn failed(what: &str) -> impl FnOnce(tls::TlsError) -> DriverError + '_ {
    move |e| DriverError::Invalid(format!("generating {what} failed: {e}"))
}

fn pair(cert: String, key: String) -> Data {
    BTreeMap::from([("tls.crt".to_string(), cert), ("tls.key".to_string(), key)])
}

/// Who owns them: the control plane, as controller, once one reconciles (as upstream's KCP);
/// before that (a bootstrap config of a cluster without a control-plane provider) the Cluster,
/// so they go with it.
fn owner(kctx: &KindCtx, obj: &DynamicObject, cluster: &Cluster) -> Option<OwnerReference> {
    if kctx.role == Role::ControlPlane {
        return Some(crate::writeback::controller_ref(kctx, obj));
    }
    cluster.controller_owner_ref(&()).map(|mut o| {
        o.controller = None;
        o
    })
}

/// Who makes the Secrets, as upstream: the control plane, or the bootstrap config of a
/// control-plane Machine in a Cluster without a control plane (CABPK's `LookupOrGenerate`).
/// Every other call only reads them (CABPK's `Lookup`): a worker's bootstrap config, reconciled
/// before the control plane, would otherwise make the CA with the Cluster as its owner, and
/// which owner the CA got would depend on which controller ran first.
fn makes_secrets(role: Role, cluster: &Cluster, worker: bool) -> bool {
    match role {
        Role::ControlPlane => true,
        Role::BootstrapConfig => {
            !worker
                && !cluster
                    .spec
                    .control_plane_ref
                    .as_ref()
                    .is_some_and(|r| r.is_set())
        }
        Role::InfraCluster | Role::InfraMachine => false,
    }
}

struct Maker<'a> {
    api: Api<Secret>,
    kctx: &'a KindCtx,
    ns: String,
    cluster: String,
    owner: Option<OwnerReference>,
    /// Whether this call makes missing Secrets, or only reads them (see [`makes_secrets`]).
    creates: bool,
}

impl Maker<'_> {
    /// The Secret's data, creating it with `make` when there is none and this call
    /// [`creates`](Maker::creates); otherwise empty until its maker has written it. A control
    /// plane adopts a Secret that no controller owns, as upstream's KCP does with certificates
    /// CABPK made.
    async fn ensure(
        &self,
        suffix: &str,
        make: impl FnOnce() -> Result<Data, DriverError>,
    ) -> Result<Data, DriverError> {
        let secret_name = format!("{}-{suffix}", self.cluster);
        let cached = self
            .kctx
            .driver
            .caches
            .secrets
            .get(&ObjectRef::new(&secret_name).within(&self.ns))
            .map(|s| (*s).clone());
        let existing = match cached {
            Some(s) => {
                self.check_cluster(&s)?;
                self.adopt(&s).await?;
                Some(s)
            }
            // The cache may not have it yet: the control plane wrote it before it made the
            // Machine this call is for.
            None if !self.creates => self.read(&secret_name).await?,
            None => {
                let mut s = Secret {
                    data: Some(
                        make()?
                            .into_iter()
                            .map(|(k, v)| (k, ByteString(v.into_bytes())))
                            .collect(),
                    ),
                    type_: Some("cluster.x-k8s.io/secret".into()),
                    ..Default::default()
                };
                s.metadata.name = Some(secret_name.clone());
                s.metadata.labels = Some(BTreeMap::from([(
                    CLUSTER_NAME_LABEL.to_string(),
                    self.cluster.clone(),
                )]));
                s.metadata.owner_references = self.owner.clone().map(|o| vec![o]);
                match self.api.create(&PostParams::default(), &s).await {
                    Ok(s) => Some(s),
                    Err(kube::Error::Api(e)) if e.code == 409 => self.read(&secret_name).await?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(existing.map(|s| data(&s)).unwrap_or_default())
    }

    /// The Secret as the API has it, checked to be this cluster's.
    async fn read(&self, name: &str) -> Result<Option<Secret>, DriverError> {
        let found = self.api.get_opt(name).await?;
        if let Some(s) = &found {
            self.check_cluster(s)?;
        }
        Ok(found)
    }

    /// A Secret labelled for another cluster is never taken as this cluster's: its name was
    /// chosen elsewhere (say, a Machine another control plane named `<this cluster>-token`, whose
    /// bootstrap data Secret took the name first).
    fn check_cluster(&self, s: &Secret) -> Result<(), DriverError> {
        match s.labels().get(CLUSTER_NAME_LABEL) {
            Some(other) if *other != self.cluster => Err(DriverError::Invalid(format!(
                "Secret {}/{} belongs to Cluster {other} (label {CLUSTER_NAME_LABEL}), not to Cluster {}: the host never takes another cluster's Secret as this cluster's; delete it, or rename the object that made it",
                self.ns,
                s.name_any(),
                self.cluster
            ))),
            _ => Ok(()),
        }
    }

    async fn adopt(&self, s: &Secret) -> Result<(), DriverError> {
        let Some(owner) = self.owner.as_ref().filter(|o| o.controller == Some(true)) else {
            return Ok(());
        };
        let refs = s.owner_references();
        if refs.iter().any(|r| r.controller == Some(true)) {
            return Ok(());
        }
        let mut refs = refs.to_vec();
        refs.push(owner.clone());
        let patch = serde_json::json!({"metadata": {"ownerReferences": refs}});
        self.api
            .patch(
                &s.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }
}

fn data(s: &Secret) -> Data {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// The client certificate and key of the current user of the `<cluster>-kubeconfig`, when it
/// has them inline.
fn admin_credential(kubeconfig: &Secret) -> Option<(String, String)> {
    let text = kubeconfig.data.as_ref()?.get("value")?;
    let c = capw_apiserver::kubeconfig::client_credential(std::str::from_utf8(&text.0).ok()?)?;
    Some((c.cert, c.key))
}

/// What the call gets, by the object's role: `ca.crt`, `ca.key` and `token` for control planes
/// and the bootstrap configs of control-plane Machines, `ca.crt` alone for a worker's
/// bootstrap config; a control-plane Machine's bootstrap config also the etcd, front-proxy
/// and service-account pairs; control planes also `admin.crt` and `admin.key`, kept from the
/// current kubeconfig while that certificate chains to the CA and has more than half its life
/// left, and made anew otherwise.
pub(crate) async fn cluster_secrets(
    kctx: &KindCtx,
    obj: &DynamicObject,
    cluster: &Cluster,
    worker: bool,
) -> Result<Vec<(String, String)>, DriverError> {
    let ns = cluster.namespace().unwrap_or_default();
    let maker = Maker {
        api: Api::namespaced(kctx.driver.client.clone(), &ns),
        kctx,
        ns: ns.clone(),
        cluster: cluster.name_any(),
        owner: owner(kctx, obj, cluster),
        creates: makes_secrets(kctx.role, cluster, worker),
    };
    let new_ca = |what: &str| {
        let (crt, key) = tls::generate_ca().map_err(failed(what))?;
        Ok(pair(crt, key))
    };
    let ca = maker.ensure("ca", || new_ca("the cluster CA")).await?;
    if worker {
        // A worker joins with a bootstrap token (`discovery.rs`): its bootstrap provider gets
        // the CA certificate and nothing that signs or administers, and it never makes the
        // Secrets (`makes_secrets`), so the others are not read.
        return Ok(ca
            .get("tls.crt")
            .map(|crt| vec![("ca.crt".to_string(), crt.clone())])
            .unwrap_or_default());
    }
    let etcd = maker.ensure("etcd", || new_ca("the etcd CA")).await?;
    let proxy = maker
        .ensure("proxy", || new_ca("the front-proxy CA"))
        .await?;
    let sa = maker
        .ensure("sa", || {
            // The public key goes in tls.crt, as upstream's service-account Secret has it.
            let (public, private) =
                tls::generate_key_pair().map_err(failed("the service-account keys"))?;
            Ok(pair(public, private))
        })
        .await?;
    let token = maker
        .ensure("token", || {
            Ok(BTreeMap::from([(
                "value".to_string(),
                format!(
                    "{}{}",
                    uuid::Uuid::new_v4().simple(),
                    uuid::Uuid::new_v4().simple()
                ),
            )]))
        })
        .await?;
    let mut out = vec![];
    if let (Some(crt), Some(key)) = (ca.get("tls.crt"), ca.get("tls.key")) {
        out.push(("ca.crt".to_string(), crt.clone()));
        out.push(("ca.key".to_string(), key.clone()));
        if kctx.role == Role::ControlPlane {
            let current = kctx
                .driver
                .caches
                .secrets
                .get(&ObjectRef::new(&format!("{}-kubeconfig", maker.cluster)).within(&ns))
                .and_then(|s| admin_credential(&s))
                .filter(|(c, _)| {
                    tls::remaining_validity(c, crt).is_some_and(|left| left > RENEW_BEFORE)
                });
            let (admin_crt, admin_key) = match current {
                Some(pair) => pair,
                None => tls::client_certificate(crt, key, "kubernetes-admin", &["system:masters"])
                    .map_err(failed("the admin client certificate"))?,
            };
            out.push(("admin.crt".to_string(), admin_crt));
            out.push(("admin.key".to_string(), admin_key));
        } else {
            // A control-plane Machine's bootstrap data writes the whole kubeadm PKI.
            for (secret, cert, key) in [
                (&etcd, "etcd.crt", "etcd.key"),
                (&proxy, "proxy.crt", "proxy.key"),
                (&sa, "sa.pub", "sa.key"),
            ] {
                if let (Some(c), Some(k)) = (secret.get("tls.crt"), secret.get("tls.key")) {
                    out.push((cert.to_string(), c.clone()));
                    out.push((key.to_string(), k.clone()));
                }
            }
        }
    }
    if let Some(t) = token.get("value") {
        out.push(("token".to_string(), t.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(control_plane_ref: bool) -> Cluster {
        let mut spec = serde_json::json!({});
        if control_plane_ref {
            spec = serde_json::json!({"controlPlaneRef": {
                "apiGroup": "controlplane.cluster.x-k8s.io",
                "kind": "KubeadmControlPlane",
                "name": "cp"
            }});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn only_the_control_plane_or_a_standalone_control_plane_machine_makes_the_secrets() {
        let with_cp = cluster(true);
        let standalone = cluster(false);
        assert!(makes_secrets(Role::ControlPlane, &with_cp, false));
        // A worker reconciled before the control plane waits for its CA, as CABPK's Lookup.
        assert!(!makes_secrets(Role::BootstrapConfig, &with_cp, true));
        assert!(!makes_secrets(Role::BootstrapConfig, &with_cp, false));
        assert!(makes_secrets(Role::BootstrapConfig, &standalone, false));
        assert!(!makes_secrets(Role::BootstrapConfig, &standalone, true));
        assert!(!makes_secrets(Role::InfraMachine, &standalone, false));
    }
}
