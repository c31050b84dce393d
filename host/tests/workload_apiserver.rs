//! `capw apiserver` as a workload cluster's control plane runs it from bootstrap data: with the
//! cluster's CA and token from files. Clients that trust that CA and carry that token get in;
//! a wrong token gets 401.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn serves_with_the_ca_and_token_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt, key) = capw_apiserver::tls::generate_ca().expect("ca");
    let files = dir.path().join("pki");
    std::fs::create_dir_all(&files).expect("pki");
    std::fs::write(files.join("ca.crt"), &crt).expect("crt");
    std::fs::write(files.join("ca.key"), &key).expect("key");
    std::fs::write(files.join("token"), "workload-token-123\n").expect("token");
    let (c, k, t) = (
        files.join("ca.crt"),
        files.join("ca.key"),
        files.join("token"),
    );
    let api = support::ApiServer::start_with(
        &dir.path().join("data"),
        &[
            "--ca-cert",
            c.to_str().expect("path"),
            "--ca-key",
            k.to_str().expect("path"),
            "--token-file",
            t.to_str().expect("path"),
        ],
    );
    let render = |token: &str| capw_apiserver::kubeconfig::render(&api.url, &crt, token);
    let client = |text: String| async move {
        let kc = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        kube::Client::try_from(cfg).expect("client")
    };
    let good: Api<Namespace> = Api::all(client(render("workload-token-123")).await);
    let names: Vec<String> = good
        .list(&ListParams::default())
        .await
        .expect("the cluster's CA and token are accepted")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");
    let bad: Api<Namespace> = Api::all(client(render("not-the-token")).await);
    match bad.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401),
        other => panic!("a wrong token was not refused: {other:?}"),
    }
    // The kubeconfig it writes names the same CA and token.
    let written = std::fs::read_to_string(&api.kubeconfig).expect("kubeconfig");
    assert!(written.contains("workload-token-123"));

    // A machine's node agent registers its Node with the provider ID from the file the
    // infrastructure provider wrote.
    std::fs::write(files.join("provider-id"), "docker:////c1-m0\n").expect("provider id");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capw"))
        .args([
            "node-agent",
            "--once",
            "--node-name",
            "c1-m0",
            "--server",
            &api.url,
        ])
        .arg("--ca-cert")
        .arg(&c)
        .arg("--token-file")
        .arg(&t)
        .arg("--provider-id-file")
        .arg(files.join("provider-id"))
        .args(["--address", "172.18.0.3"])
        .output()
        .expect("capw node-agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> =
        Api::all(client(render("workload-token-123")).await);
    let node = nodes.get("c1-m0").await.expect("the Node");
    let spec = node.spec.expect("spec");
    assert_eq!(spec.provider_id.as_deref(), Some("docker:////c1-m0"));
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "node.cluster.x-k8s.io/uninitialized")
    );
    let status = node.status.expect("status");
    assert!(
        status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert!(
        status
            .addresses
            .unwrap_or_default()
            .iter()
            .any(|a| a.address == "172.18.0.3")
    );
}

#[test]
fn a_missing_ca_key_is_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(["apiserver", "--ca-cert", "/nonexistent/ca.crt"])
        .output()
        .expect("capw runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ca-key"), "{err}");
}
