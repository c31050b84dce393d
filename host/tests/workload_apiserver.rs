//! `capw apiserver` as a workload cluster's control plane runs it from bootstrap data: with the
//! cluster's CA and token from files. Clients that trust that CA and carry that token get in;
//! a wrong token gets 401. So do clients with a certificate signed by that CA, as upstream's
//! `<cluster>-kubeconfig` carries one; another CA's certificate ends the handshake.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

/// `capw apiserver` as a control-plane machine starts it: a new CA and the token
/// `workload-token-123`, written as the bootstrap data writes them under `dir/pki`. Returns the
/// server, the CA (certificate and key PEM) and that directory.
fn workload_api(dir: &std::path::Path) -> (support::ApiServer, String, String, std::path::PathBuf) {
    let (crt, key) = capw_apiserver::tls::generate_ca().expect("ca");
    let files = dir.join("pki");
    std::fs::create_dir_all(&files).expect("pki");
    std::fs::write(files.join("ca.crt"), &crt).expect("crt");
    std::fs::write(files.join("ca.key"), &key).expect("key");
    std::fs::write(files.join("token"), "workload-token-123\n").expect("token");
    let arg = |n: &str| files.join(n).to_str().expect("path").to_string();
    let api = support::ApiServer::start_with(
        &dir.join("data"),
        &[
            "--ca-cert",
            &arg("ca.crt"),
            "--ca-key",
            &arg("ca.key"),
            "--token-file",
            &arg("token"),
        ],
    );
    (api, crt, key, files)
}

#[tokio::test]
async fn serves_with_the_ca_and_token_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, crt, _, files) = workload_api(dir.path());
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
        .arg(files.join("ca.crt"))
        .arg("--token-file")
        .arg(files.join("token"))
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

/// A kubeconfig with a client certificate and no token, as upstream's `<cluster>-kubeconfig`.
fn cert_kubeconfig(server: &str, ca: &str, cert: &str, key: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "w", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": "w-admin", "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": "w-admin@w", "context": {"cluster": "w", "user": "w-admin"}}],
        "current-context": "w-admin@w",
    })
    .to_string()
}

#[test]
fn kubectl_gets_in_with_a_client_certificate_signed_by_the_cluster_ca_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, crt, key, _) = workload_api(dir.path());
    let get_ns = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("kubeconfig");
        support::kubectl(
            &path,
            dir.path(),
            &["get", "namespace", "kube-system", "-o", "name"],
            None,
        )
    };

    let (cert, cert_key) = capw_apiserver::tls::client_certificate(
        &crt,
        &key,
        "kubernetes-admin",
        &["system:masters"],
    )
    .expect("client certificate");
    let (ok, out) = get_ns("admin", cert_kubeconfig(&api.url, &crt, &cert, &cert_key));
    assert!(
        ok,
        "a certificate signed by the cluster CA was refused: {out}"
    );
    assert_eq!(out.trim(), "namespace/kube-system");

    let (other_crt, other_key) = capw_apiserver::tls::generate_ca().expect("other ca");
    let (forged, forged_key) = capw_apiserver::tls::client_certificate(
        &other_crt,
        &other_key,
        "kubernetes-admin",
        &["system:masters"],
    )
    .expect("other client certificate");
    // Same subject, other key (every capw CA is named alike): the handshake fails on the
    // signature.
    let (ok, out) = get_ns(
        "forged",
        cert_kubeconfig(&api.url, &crt, &forged, &forged_key),
    );
    assert!(!ok, "another CA's certificate got in: {out}");
    assert!(
        !out.contains("namespace/kube-system") && out.contains("remote error: tls:"),
        "{out}"
    );

    // Without a certificate or a token: 401, naming both ways in.
    let ca_data = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&crt)
    };
    let bare = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "w", "cluster": {"server": api.url, "certificate-authority-data": ca_data}}],
        "users": [{"name": "nobody", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "w", "user": "nobody"}}],
        "current-context": "c",
    });
    let kc = kube::config::Kubeconfig::from_yaml(&bare.to_string()).expect("kubeconfig");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let refused = runtime.block_on(async {
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        let api: Api<Namespace> = Api::all(kube::Client::try_from(cfg).expect("client"));
        api.list(&ListParams::default()).await
    });
    match refused {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 401);
            assert!(s.message.contains("client certificate"), "{}", s.message);
        }
        other => panic!("a client without credentials got in: {other:?}"),
    }

    // The host decides from the dates and the signature whether to keep a certificate.
    let left = capw_apiserver::tls::remaining_validity(&cert, &crt).expect("valid");
    assert!(
        left > capw_apiserver::tls::CLIENT_CERT_VALIDITY - std::time::Duration::from_secs(3600),
        "{left:?}"
    );
    assert_eq!(capw_apiserver::tls::remaining_validity(&forged, &crt), None);
    assert_eq!(
        capw_apiserver::tls::remaining_validity("not a certificate", &crt),
        None
    );
}

/// A worker's join, with the real `capw node-agent` and kubectl against `capw apiserver`: the
/// agent reads `kube-public/cluster-info` with no credentials, accepts its CA only when the
/// pinned SPKI hash matches, sends a kubelet CertificateSigningRequest with its bootstrap token,
/// and registers its Node with the certificate the cluster signed. The token and the node
/// certificate reach what kubeadm's roles give them, and no more.
#[test]
fn a_worker_joins_with_a_bootstrap_token_and_then_uses_its_own_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, crt, _key, _) = workload_api(dir.path());
    let admin = |args: &[&str], stdin: Option<&str>| {
        support::kubectl(&api.kubeconfig, dir.path(), args, stdin)
    };
    // What the host and the control plane's agent put there.
    let token = capw_apiserver::bootstrap_token::generate();
    let (id, secret) = capw_apiserver::bootstrap_token::parse(&token).expect("token");
    let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(900)).to_string();
    let secret_obj = capw_apiserver::bootstrap_token::secret_object(id, secret, &later);
    let info = capw_node::agent::cluster_info_config_map(&api.url, &crt);
    for obj in [secret_obj, info] {
        let (ok, out) = admin(&["create", "-f", "-"], Some(&obj.to_string()));
        assert!(ok, "{out}");
    }
    let token_file = dir.path().join("bootstrap-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("token file");
    let pin = capw_apiserver::tls::spki_sha256(&crt).expect("pin");
    let kubelet_conf = dir.path().join("kubelet.conf");
    let agent = |pin: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["node-agent", "--once", "--node-name", "w1"])
            .args(["--provider-id", "test:///w1", "--server", &api.url])
            .arg("--bootstrap-token-file")
            .arg(&token_file)
            .args(["--discovery-token-ca-cert-hash", pin])
            .arg("--kubelet-kubeconfig")
            .arg(&kubelet_conf)
            .env("RUST_LOG", "warn")
            .output()
            .expect("capw node-agent runs")
    };

    // Another CA's pin: the token is never sent.
    let (other, _) = capw_apiserver::tls::generate_ca().expect("other ca");
    let out = agent(&capw_apiserver::tls::spki_sha256(&other).expect("pin"));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("refusing to send the token"),
        "{text}"
    );
    assert!(!kubelet_conf.exists());

    let out = agent(&pin);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, csrs) = admin(&["get", "csr"], None);
    assert!(
        ok && csrs.lines().any(
            |l| l.contains("kubernetes.io/kube-apiserver-client-kubelet")
                && l.contains(&format!("system:bootstrap:{id}"))
                && l.contains("Approved,Issued")
        ),
        "{csrs}"
    );
    // The node's own kubeconfig: its Node, and nothing else.
    let node = |args: &[&str]| support::kubectl(&kubelet_conf, dir.path(), args, None);
    let (ok, out) = node(&["get", "node", "w1", "-o", "jsonpath={.spec.providerID}"]);
    assert!(ok && out == "test:///w1", "{out}");
    let (ok, out) = node(&["get", "secrets", "-n", "kube-system"]);
    assert!(
        !ok && out.contains("Forbidden") && out.contains("system:node:w1"),
        "{out}"
    );
    // The token itself: discovery and Nodes to read; no writes, no Secrets.
    let with_token = |args: &[&str]| {
        let mut all = vec!["--token", token.as_str()];
        all.extend_from_slice(args);
        let kc = dir.path().join("no-user");
        let cluster_only = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: c\n",
            api.url,
            {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode(&crt)
            }
        );
        std::fs::write(&kc, cluster_only).expect("kubeconfig");
        support::kubectl(&kc, dir.path(), &all, None)
    };
    let (ok, out) = with_token(&["get", "nodes", "-o", "name"]);
    assert!(ok && out.trim() == "node/w1", "{out}");
    let (ok, out) = with_token(&["get", "secrets", "-n", "kube-system"]);
    assert!(
        !ok && out.contains(&format!("system:bootstrap:{id}")),
        "{out}"
    );
    let (ok, out) = with_token(&["delete", "node", "w1"]);
    assert!(!ok && out.contains("Forbidden"), "{out}");
    // Restarted, the agent reuses its certificate: no second request.
    let out = agent(&pin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, csrs) = admin(&["get", "csr", "-o", "name"], None);
    assert_eq!(csrs.lines().count(), 1, "{csrs}");
}

/// Kills the services `capw kubeadm` started (it prints `started, pid N`) when dropped.
struct Started(Vec<u32>);

impl Started {
    fn record(&mut self, stdout: &str) {
        self.0.extend(stdout.lines().filter_map(|l| {
            l.split_once("started, pid ")?
                .1
                .split_whitespace()
                .next()?
                .parse::<u32>()
                .ok()
        }));
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
    }
}

/// `capw kubeadm init` then `capw kubeadm join`, as the node image runs them from CABPK's
/// configuration files: the API served with the CA from certificatesDir at the version asked
/// for, admin.conf for kubectl, kubeadm-config and cluster-info uploaded, the Node registered
/// with its labels, taints and provider ID; a worker joins with the token and the pin alone.
#[test]
fn kubeadm_init_and_join_build_a_cluster_from_kubeadm_configuration_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |p: &str| dir.path().join(p).to_str().expect("path").to_string();
    let (crt, key) = capw_apiserver::tls::generate_ca().expect("ca");
    std::fs::create_dir_all(at("pki")).expect("pki");
    std::fs::write(at("pki/ca.crt"), &crt).expect("crt");
    std::fs::write(at("pki/ca.key"), &key).expect("key");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("addr")
        .port();
    let init = format!(
        "---\napiServer:\n  certSANs:\n  - localhost\napiVersion: kubeadm.k8s.io/v1beta3\ncertificatesDir: {}\nclusterName: k1\ncontrolPlaneEndpoint: 127.0.0.1:{port}\nkind: ClusterConfiguration\nkubernetesVersion: v1.30.4\nnetworking:\n  dnsDomain: cluster.local\n\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nlocalAPIEndpoint:\n  bindPort: {port}\nnodeRegistration:\n  kubeletExtraArgs:\n    node-labels: tier=control\n    provider-id: test:///cp1\n  name: cp1\n  taints: null\n",
        at("pki")
    );
    std::fs::write(at("kubeadm.yaml"), &init).expect("init config");
    let kubeadm = |args: &[&str], dirs: &str, version: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capw"));
        cmd.arg("kubeadm")
            .args(args)
            .args(["--kubernetes-dir", &at(&format!("{dirs}/etc"))])
            .args(["--data-dir", &at(&format!("{dirs}/data"))])
            .args(["--log-dir", &at(&format!("{dirs}/log"))])
            .args(["--timeout-seconds", "60"])
            .env("RUST_LOG", "warn")
            .env_remove("CAPW_KUBERNETES_VERSION");
        if let Some(v) = version {
            cmd.env("CAPW_KUBERNETES_VERSION", v);
        }
        let out = cmd.output().expect("capw kubeadm runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let mut started = Started(vec![]);
    let (ok, out, err) = kubeadm(&["init", "--config", &at("kubeadm.yaml")], "cp", None);
    started.record(&out);
    assert!(ok && out.contains("initialized successfully"), "{out}{err}");
    let admin_conf = dir.path().join("cp/etc/admin.conf");
    let admin = |args: &[&str]| {
        let (ok, out) = support::kubectl(&admin_conf, dir.path(), args, None);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    };
    let version: serde_json::Value =
        serde_json::from_str(&admin(&["version", "-o", "json"])).expect("version json");
    assert_eq!(
        version["serverVersion"]["gitVersion"], "v1.30.4",
        "{version}"
    );
    let cp: serde_json::Value =
        serde_json::from_str(&admin(&["get", "node", "cp1", "-o", "json"])).expect("node");
    assert_eq!(cp["spec"]["providerID"], "test:///cp1", "{cp}");
    assert_eq!(cp["metadata"]["labels"]["tier"], "control", "{cp}");
    assert_eq!(
        cp["spec"]["taints"][0]["key"], "node-role.kubernetes.io/control-plane",
        "{cp}"
    );
    assert_eq!(
        cp["status"]["nodeInfo"]["kubeletVersion"], "v1.30.4",
        "{cp}"
    );
    let cc = admin(&[
        "get",
        "cm",
        "-n",
        "kube-system",
        "kubeadm-config",
        "-o",
        "jsonpath={.data.ClusterConfiguration}",
    ]);
    assert!(cc.lines().any(|l| l == "clusterName: k1"), "{cc}");
    assert!(!cc.contains("InitConfiguration"), "{cc}");
    let pods = admin(&["get", "pods", "-n", "kube-system"]);
    assert!(
        pods.lines()
            .any(|l| l.starts_with("kube-apiserver-cp1") && l.contains("Running")),
        "{pods}"
    );
    // admin.conf names the control-plane endpoint, which the serving certificate covers.
    let server = admin(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    assert_eq!(server, format!("https://127.0.0.1:{port}"));

    // A worker: the token the host would create, the pin, and the version its image presents.
    let token = capw_apiserver::bootstrap_token::generate();
    let (id, secret) = capw_apiserver::bootstrap_token::parse(&token).expect("token");
    let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(900)).to_string();
    let secret_obj = capw_apiserver::bootstrap_token::secret_object(id, secret, &later);
    let (ok, out) = support::kubectl(
        &admin_conf,
        dir.path(),
        &["create", "-f", "-"],
        Some(&secret_obj.to_string()),
    );
    assert!(ok, "{out}");
    let pin = capw_apiserver::tls::spki_sha256(&crt).expect("pin");
    let join = format!(
        "---\napiVersion: kubeadm.k8s.io/v1beta3\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 127.0.0.1:{port}\n    caCertHashes:\n    - {pin}\n    token: {token}\nkind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n    provider-id: test:///w1\n  name: w1\n  taints:\n  - effect: NoSchedule\n    key: node.cluster.x-k8s.io/uninitialized\n"
    );
    std::fs::write(at("join.yaml"), &join).expect("join config");
    // Without the version its image presents, a join says what is missing.
    let (ok, out, err) = kubeadm(&["join", "--config", &at("join.yaml")], "w", None);
    assert!(!ok && err.contains("CAPW_KUBERNETES_VERSION"), "{out}{err}");
    let (ok, out, err) = kubeadm(
        &["join", "--config", &at("join.yaml"), "--v", "5"],
        "w",
        Some("v1.29.10"),
    );
    started.record(&out);
    assert!(
        ok && out.contains("This node has joined the cluster"),
        "{out}{err}"
    );
    assert!(dir.path().join("w/etc/kubelet.conf").exists());
    assert!(!dir.path().join("w/etc/admin.conf").exists());
    // The node agent registers once it holds its certificate. The Node is born with its
    // status, as a kubelet registers it: the first time it is listed it has its version.
    let mut w1 = serde_json::Value::Null;
    for _ in 0..120 {
        let (ok, out) = support::kubectl(
            &admin_conf,
            dir.path(),
            &["get", "node", "w1", "-o", "json"],
            None,
        );
        w1 = serde_json::from_str(&out).unwrap_or_default();
        if ok {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert_eq!(
        w1["status"]["nodeInfo"]["kubeletVersion"], "v1.29.10",
        "{w1}"
    );
    assert_eq!(w1["spec"]["providerID"], "test:///w1", "{w1}");
    assert_eq!(
        w1["spec"]["taints"][0]["key"], "node.cluster.x-k8s.io/uninitialized",
        "{w1}"
    );
    let csrs = admin(&["get", "csr"]);
    assert!(
        csrs.lines()
            .any(|l| l.contains(&format!("system:bootstrap:{id}")) && l.contains("Approved,Issued")),
        "{csrs}"
    );
}
