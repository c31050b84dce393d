//! `capw manifests` into a management API with RBAC on, and the host run as the Pod it
//! describes would run it: from the in-cluster environment (`KUBERNETES_SERVICE_HOST`, a
//! mounted ServiceAccount token, CA and namespace) and with the plugins its ConfigMaps hold.
//! It takes the in-memory example to Running with no request refused, and the API server's
//! own record of RBAC decisions shows every call was inside the generated ClusterRole. With a
//! rule taken out, the refusal reaches the object it stopped, naming the permission.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::machine::Machine;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use support::{ApiServer, KillOnDrop, kube_client};

const SA: &str = "system:serviceaccount:capw-system:capw-controller-manager";

fn capw(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(args)
        .current_dir(support::repo_root())
        .output()
        .expect("capw");
    assert!(
        out.status.success(),
        "capw {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

/// The API server's `capw_apiserver_rbac_checks_total` lines about the host's ServiceAccount.
fn checks(server: &ApiServer, dir: &Path) -> Vec<String> {
    let token = std::fs::read_to_string(dir.join("api/token")).expect("token");
    let out = Command::new("curl")
        .args(["-sk", "-H"])
        .arg(format!("Authorization: Bearer {}", token.trim()))
        .arg(format!("{}/metrics", server.url))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("capw_apiserver_rbac_checks_total") && l.contains(SA))
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_manifests_run_the_in_memory_example_with_no_request_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start_with(&dir.path().join("api"), &["--authorization-mode", "RBAC"]);
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        let (ok, out) = support::kubectl(&server.kubeconfig, &home, args, stdin);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    };
    let bundled = support::repo_root().join("target/plugins/bundled");
    let plugin = |n: &str| bundled.join(format!("{n}.wasm")).display().to_string();
    let manifests = capw(&[
        "manifests",
        "--plugin",
        &plugin("inmemory"),
        "--plugin",
        &plugin("bootstrap"),
        "--plugin",
        &plugin("control-plane"),
    ]);
    // Server-side: a client-side apply's last-applied annotation of a component exceeds the
    // 256 KiB annotations limit, as it would on any cluster.
    let applied = kubectl(&["apply", "--server-side", "-f", "-"], Some(&manifests));
    for line in [
        "namespace/capw-system serverside-applied",
        "serviceaccount/capw-controller-manager serverside-applied",
        "clusterrole.rbac.authorization.k8s.io/capw-controller-manager serverside-applied",
        "configmap/capw-plugin-inmemory serverside-applied",
        "deployment.apps/capw-controller-manager serverside-applied",
    ] {
        assert!(applied.contains(line), "{line} not in:\n{applied}");
    }
    let replicas = kubectl(
        &[
            "get",
            "deploy",
            "capw-controller-manager",
            "-n",
            "capw-system",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].args}",
        ],
        None,
    );
    assert!(
        replicas.starts_with("2 /readyz ") && replicas.contains("--leader-elect=true"),
        "{replicas}"
    );

    // What the kubelet gives the Pod: the ServiceAccount's token, the CA and the namespace,
    // and the plugin directory projected from the ConfigMaps.
    let sa = dir.path().join("serviceaccount");
    std::fs::create_dir_all(&sa).expect("sa dir");
    let token = kubectl(
        &[
            "create",
            "token",
            "capw-controller-manager",
            "-n",
            "capw-system",
            "--duration",
            "1h",
        ],
        None,
    );
    std::fs::write(sa.join("token"), token.trim()).expect("token");
    std::fs::copy(dir.path().join("api/ca.crt"), sa.join("ca.crt")).expect("ca");
    std::fs::write(sa.join("namespace"), "capw-system").expect("namespace");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins");
    let admin = kube_client(&server.kubeconfig).await;
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), "capw-system");
    for cm in maps.list(&ListParams::default()).await.expect("maps").items {
        for (file, bytes) in cm.binary_data.unwrap_or_default() {
            std::fs::write(plugins.join(file), bytes.0).expect("wasm");
        }
        for (file, text) in cm.data.unwrap_or_default() {
            std::fs::write(plugins.join(file), text).expect("yaml");
        }
    }
    let port = server.url.rsplit(':').next().expect("port").to_string();
    let log = dir.path().join("host.log");
    let _host = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["run", "--metrics", "127.0.0.1:0", "--cache-dir"])
            .arg(dir.path().join("cache"))
            .arg("--plugins")
            .arg(&plugins)
            .env_remove("KUBECONFIG")
            .env("HOME", &home)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", &port)
            .env("CAPW_SERVICE_ACCOUNT_DIR", &sa)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("capw run"),
    );
    let tail = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    let example =
        std::fs::read_to_string(support::repo_root().join("examples/inmemory-cluster.yaml"))
            .expect("example");
    support::eventually("the example applies", 60, tail, || async {
        support::kubectl(
            &server.kubeconfig,
            &home,
            &["apply", "-f", "-"],
            Some(&example),
        )
        .0
        .then_some(())
    })
    .await;
    let machines: Api<Machine> = Api::namespaced(admin.clone(), "default");
    support::eventually("6 Machines Running", 180, tail, || async {
        let list = machines.list(&ListParams::default()).await.ok()?;
        let running = list
            .items
            .iter()
            .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 6).then_some(())
    })
    .await;
    let lease = kubectl(
        &[
            "get",
            "lease",
            "capw-controller-leader-election",
            "-n",
            "capw-system",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    assert!(
        !lease.is_empty(),
        "the host leads through its namespace's Lease"
    );

    let seen = checks(&server, dir.path());
    let denied: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("decision=\"denied\""))
        .collect();
    assert!(
        denied.is_empty(),
        "refused with the generated ClusterRole: {denied:#?}"
    );
    let used: BTreeSet<String> = seen
        .iter()
        .filter_map(|l| {
            Some(
                l.split("resource=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    for r in [
        "machines",
        "machines/status",
        "secrets",
        "customresourcedefinitions",
        "leases",
    ] {
        assert!(used.contains(r), "the host never asked for {r}: {used:?}");
    }

    // Without machinesets, the MachineDeployment of a second cluster is stuck, and says why.
    let role = kubectl(
        &[
            "get",
            "clusterrole",
            "capw-controller-manager",
            "-o",
            "json",
        ],
        None,
    );
    let mut role: serde_json::Value = serde_json::from_str(&role).expect("json");
    for rule in role["rules"].as_array_mut().expect("rules") {
        if let Some(resources) = rule["resources"].as_array_mut() {
            resources.retain(|r| !r.as_str().unwrap_or_default().starts_with("machinesets"));
        }
    }
    kubectl(&["replace", "-f", "-"], Some(&role.to_string()));
    kubectl(
        &["apply", "-f", "-"],
        Some(&example.replace("demo", "trimmed")),
    );
    let want = format!("machinesets.cluster.x-k8s.io is forbidden: User \"{SA}\" cannot");
    let message = support::eventually(
        "the refusal on the MachineDeployment",
        120,
        tail,
        || async {
            let out = support::kubectl(
                &server.kubeconfig,
                &home,
                &[
                    "get",
                    "md",
                    "trimmed-md-0",
                    "-o",
                    "jsonpath={.status.conditions[*].message}",
                ],
                None,
            )
            .1;
            out.contains(&want).then_some(out)
        },
    )
    .await;
    assert!(
        message.contains("in API group \"cluster.x-k8s.io\""),
        "{message}"
    );
}
