//! `control-plane`: the capw control-plane provider. It serves upstream's KubeadmControlPlane
//! (short name `kcp`, with the scale subresource) and KubeadmControlPlaneTemplate
//! (`controlplane.cluster.x-k8s.io/v1beta2`, upstream's fields, columns, defaults and admission
//! checks from `capw_kubeadm::schema`). A KubeadmControlPlane asks the host for
//! control-plane Machines up to `spec.replicas` (one at a time until the first is initialized,
//! as KCP does), reports initialized/available and the replica counters, and renders the
//! workload kubeconfig from the cluster's endpoint, CA and admin client certificate. A change of `spec.version` or
//! of the machine template rolls the Machines one at a time (`rollout`), and Machines a
//! MachineHealthCheck marks are replaced one at a time, with upstream's retry rules
//! (`remediation`).

mod provider;
mod remediation;
mod rollout;

pub use provider::ControlPlane;
