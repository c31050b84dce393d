//! What `capw kubeadm init|join` decides before it starts anything: the Node's name, where the
//! node reaches its API server, the serving certificate's extra name, and the command lines of
//! the processes it starts (the API server of a control-plane machine and the node agent, the
//! kubelet's part). `capw kubeadm` in the CLI runs them and waits; this module only decides, so
//! each decision has a test.

use crate::kubeadm::{self as config, NodeRegistration};
use std::path::Path;

/// The Node's name as kubeadm picks it: `nodeRegistration.name`, else the `--node-name` flag,
/// else the machine's hostname, lowercased.
pub fn node_name(node: &NodeRegistration, flag: Option<&str>, hostname: &str) -> String {
    node.name
        .clone()
        .or_else(|| flag.map(str::to_string))
        .unwrap_or_else(|| hostname.trim().to_lowercase())
}

/// The endpoint's host, when it is one, for the serving certificate's names.
pub fn endpoint_host(endpoint: &str) -> Option<String> {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    (!host.is_empty()).then(|| host.to_string())
}

/// Where the node agent and clients reach the cluster: the control-plane endpoint, or this
/// machine's own API server when the configuration names none.
pub fn server_url(endpoint: &str, port: u16) -> String {
    if endpoint.is_empty() {
        format!("https://127.0.0.1:{port}")
    } else {
        format!("https://{endpoint}")
    }
}

/// The API server of a control-plane machine: every interface on `port`, the cluster's CA from
/// `certificates_dir`, and the serving certificate's extra names.
pub fn apiserver_argv(
    data_dir: &Path,
    certificates_dir: &Path,
    port: u16,
    version: &str,
    sans: &[String],
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "apiserver".into(),
        "--listen".into(),
        format!("0.0.0.0:{port}"),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--ca-cert".into(),
        certificates_dir.join("ca.crt").display().to_string(),
        "--ca-key".into(),
        certificates_dir.join("ca.key").display().to_string(),
        "--kubernetes-version".into(),
        version.into(),
    ];
    for s in sans {
        argv.push("--san".into());
        argv.push(s.clone());
    }
    argv
}

/// The node agent's flags for this Node; `control_plane` is the local API server's port on a
/// control-plane machine.
pub fn agent_argv(
    name: &str,
    server: &str,
    kubelet_conf: &Path,
    version: &str,
    node: &NodeRegistration,
    control_plane: Option<u16>,
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "node-agent".into(),
        "--node-name".into(),
        name.into(),
        "--server".into(),
        server.into(),
        "--kubelet-kubeconfig".into(),
        kubelet_conf.display().to_string(),
        "--kubelet-version".into(),
        version.into(),
        format!(
            "--register-with-taints={}",
            config::taints_flag(&config::taints(node, control_plane.is_some()))
        ),
    ];
    if !node.labels.is_empty() {
        argv.push(format!(
            "--node-labels={}",
            config::labels_flag(&node.labels)
        ));
    }
    if let Some(id) = &node.provider_id {
        argv.push(format!("--provider-id={id}"));
    }
    if let Some(port) = control_plane {
        argv.push("--control-plane".into());
        argv.push("--local-api-server".into());
        argv.push(format!("https://127.0.0.1:{port}"));
    }
    argv
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn registration(name: Option<&str>) -> NodeRegistration {
        NodeRegistration {
            name: name.map(str::to_string),
            taints: None,
            labels: Default::default(),
            provider_id: None,
        }
    }

    #[test]
    fn the_node_name_is_the_configuration_s_then_the_flag_then_the_hostname() {
        assert_eq!(
            node_name(&registration(Some("cp-1")), Some("flag"), "Host"),
            "cp-1"
        );
        assert_eq!(node_name(&registration(None), Some("flag"), "Host"), "flag");
        assert_eq!(node_name(&registration(None), None, "My-Host\n"), "my-host");
    }

    #[test]
    fn endpoint_hosts_drop_the_port_and_ipv6_brackets() {
        assert_eq!(endpoint_host("10.0.0.1:6443").as_deref(), Some("10.0.0.1"));
        assert_eq!(
            endpoint_host("lb.example:443").as_deref(),
            Some("lb.example")
        );
        assert_eq!(endpoint_host("[fd00::1]:6443").as_deref(), Some("fd00::1"));
        assert_eq!(endpoint_host("lb.example").as_deref(), Some("lb.example"));
        assert_eq!(endpoint_host(""), None);
        assert_eq!(endpoint_host(":6443"), None);
    }

    #[test]
    fn without_an_endpoint_the_node_uses_its_own_api_server() {
        assert_eq!(server_url("", 6443), "https://127.0.0.1:6443");
        assert_eq!(server_url("lb:6443", 6443), "https://lb:6443");
    }

    #[test]
    fn the_api_server_serves_the_cluster_ca_on_every_interface() {
        let argv = apiserver_argv(
            Path::new("/var/lib/capw"),
            Path::new("/etc/kubernetes/pki"),
            6443,
            "v1.29.10",
            &["10.0.0.1".into()],
        );
        let joined = argv.join(" ");
        assert!(joined.starts_with("apiserver --listen 0.0.0.0:6443 --data-dir /var/lib/capw"));
        assert!(
            joined.contains(
                "--ca-cert /etc/kubernetes/pki/ca.crt --ca-key /etc/kubernetes/pki/ca.key"
            )
        );
        assert!(joined.contains("--kubernetes-version v1.29.10"));
        assert!(joined.ends_with("--san 10.0.0.1"));
    }

    #[test]
    fn a_control_plane_agent_is_tainted_and_points_at_its_local_api_server() {
        let mut node = registration(None);
        node.labels.insert("tier".into(), "a".into());
        node.provider_id = Some("docker:////cp-1".into());
        let conf = Path::new("/etc/kubernetes/kubelet.conf");
        let cp = agent_argv(
            "cp-1",
            "https://lb:6443",
            conf,
            "v1.29.10",
            &node,
            Some(6443),
        );
        assert_eq!(&cp[..3], ["node-agent", "--node-name", "cp-1"]);
        assert!(
            cp.contains(
                &"--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule"
                    .to_string()
            ),
            "{cp:?}"
        );
        assert!(cp.contains(&"--node-labels=tier=a".to_string()), "{cp:?}");
        assert!(
            cp.contains(&"--provider-id=docker:////cp-1".to_string()),
            "{cp:?}"
        );
        assert!(cp.ends_with(&[
            "--control-plane".into(),
            "--local-api-server".into(),
            "https://127.0.0.1:6443".into()
        ]));

        let worker = agent_argv(
            "w-1",
            "https://lb:6443",
            conf,
            "v1.29.10",
            &registration(None),
            None,
        );
        assert!(
            worker.contains(&"--register-with-taints=".to_string()),
            "{worker:?}"
        );
        assert!(
            !worker
                .iter()
                .any(|a| a.starts_with("--node-labels") || a == "--control-plane")
        );
    }
}
