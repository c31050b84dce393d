//! `bootstrap`: the capw bootstrap provider. It serves upstream's KubeadmConfig and
//! KubeadmConfigTemplate (`bootstrap.cluster.x-k8s.io/v1beta2`, with upstream's fields, columns
//! and admission checks from `capw_kubeadm::schema`). A KubeadmConfig becomes cloud-config
//! (`write_files` and `runcmd`, the subset infrastructure providers execute): the user's
//! `files`, `preKubeadmCommands`, then control-plane machines start the workload API with
//! `capw apiserver`, every machine starts `capw node-agent`, `postKubeadmCommands`, and the
//! data ends by touching the bootstrap sentinel file.

mod provider;

pub use provider::Bootstrap;
