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
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use support::{ApiServer, KillOnDrop, kube_client};

/// The host's own account and its components' all start so.
const ACCOUNTS: &str = "system:serviceaccount:capw-system:capw-";

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

/// The API server's `capw_apiserver_rbac_checks_total` lines about the host's accounts.
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
        .filter(|l| l.starts_with("capw_apiserver_rbac_checks_total") && l.contains(ACCOUNTS))
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
    // A JSONPath of the generated Deployment.
    let deployment = |jsonpath: &str| {
        let path = format!("jsonpath={jsonpath}");
        let args = [
            "get",
            "deploy",
            "capw-controller-manager",
            "-n",
            "capw-system",
            "-o",
            &path,
        ];
        kubectl(&args, None)
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
        "clusterrole.rbac.authorization.k8s.io/capw-core serverside-applied",
        "serviceaccount/capw-plugin-runtime serverside-applied",
        "configmap/capw-plugin-inmemory serverside-applied",
        "deployment.apps/capw-controller-manager serverside-applied",
    ] {
        assert!(applied.contains(line), "{line} not in:\n{applied}");
    }
    let replicas = deployment(
        "{.spec.replicas} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].args}",
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
    // The Deployment's own arguments, with the Pod's paths and ports made local.
    let args = deployment("{range .spec.template.spec.containers[0].args[*]}{@}{\"\\n\"}{end}");
    let args: Vec<String> = args
        .lines()
        .map(|a| match a.split_once('=') {
            Some(("--plugins", _)) => format!("--plugins={}", plugins.display()),
            Some(("--cache-dir", _)) => {
                format!("--cache-dir={}", dir.path().join("cache").display())
            }
            Some(("--metrics", _)) => "--metrics=127.0.0.1:0".into(),
            Some(("--webhooks", _)) => "--webhooks=127.0.0.1:0".into(),
            _ => a.to_string(),
        })
        .collect();
    assert!(
        args.iter()
            .any(|a| a == "--webhook-service=capw-system/capw-webhook-service"),
        "{args:?}"
    );
    let log = dir.path().join("host.log");
    let mut host = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .env("HOME", &home)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", &port)
            .env("CAPW_SERVICE_ACCOUNT_DIR", &sa)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("capw run"),
    );
    let webhook_port = webhook_port(&mut host).to_string();
    // The cluster's service routing, which this API server stands in for: the Service's
    // address, at the port the replica listens on.
    kubectl(
        &[
            "patch",
            "service",
            "capw-webhook-service",
            "-n",
            "capw-system",
            "--type",
            "merge",
            "-p",
            &format!(
                r#"{{"spec":{{"clusterIP":"127.0.0.1","ports":[{{"port":443,"targetPort":{webhook_port}}}]}}}}"#
            ),
        ],
        None,
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

    // The admission webhooks, reached through the Service with the CA the replicas share.
    let bundle = kubectl(
        &[
            "get",
            "secret",
            "capw-webhook-service-cert",
            "-n",
            "capw-system",
            "-o",
            "jsonpath={.data.ca-bundle\\.crt}",
        ],
        None,
    );
    let registered = kubectl(
        &[
            "get",
            "validatingwebhookconfiguration",
            "capi-validating-webhook-configuration",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle} {.webhooks[0].clientConfig.service.name}",
        ],
        None,
    );
    assert_eq!(registered, format!("{bundle} capw-webhook-service"));
    let refused = support::kubectl(
        &server.kubeconfig,
        &home,
        &["apply", "-f", "-"],
        Some(
            "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: early, namespace: default}\nspec:\n  topology: {classRef: {name: later}, version: v1.30.0}\n",
        ),
    );
    assert!(
        !refused.0
            && refused
                .1
                .contains(r#"clusterclasses.cluster.x-k8s.io "later" not found"#),
        "{}",
        refused.1
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
    // Each component acted as its own account.
    for (account, resource) in [
        ("core", "machinesets"),
        ("driver", "inmemorymachines/status"),
        ("plugin-runtime", "wasmproviders/status"),
        ("controller-manager", "leases"),
    ] {
        assert!(
            seen.iter()
                .any(|l| l.contains(&format!("{ACCOUNTS}{account}\""))
                    && l.contains(&format!("resource=\"{resource}\""))),
            "capw-{account} never asked for {resource}: {seen:#?}"
        );
    }

    // Without machinesets, the MachineDeployment of a second cluster is stuck, and says why.
    let role = kubectl(&["get", "clusterrole", "capw-core", "-o", "json"], None);
    let mut role: serde_json::Value = serde_json::from_str(&role).expect("json");
    let granted = role.clone();
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
    // A JSONPath of the stuck MachineDeployment (failures are answered, not asserted).
    let md = |jsonpath: &str| {
        let path = format!("jsonpath={jsonpath}");
        let args = ["get", "md", "trimmed-md-0", "-o", &path];
        support::kubectl(&server.kubeconfig, &home, &args, None)
    };
    let want = format!("machinesets.cluster.x-k8s.io is forbidden: User \"{ACCOUNTS}core\" cannot");
    let message = support::eventually(
        "the refusal on the MachineDeployment",
        120,
        tail,
        || async {
            let out = md("{.status.conditions[*].message}").1;
            out.contains(&want).then_some(out)
        },
    )
    .await;
    assert!(
        message.contains("in API group \"cluster.x-k8s.io\""),
        "{message}"
    );

    let authorized = || md("{.status.conditions[?(@.type==\"Authorized\")].status}");
    assert_eq!(authorized().1.trim(), "False");

    // Granted again, the next reconcile takes the condition away.
    let mut granted = granted;
    granted["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    kubectl(&["replace", "-f", "-"], Some(&granted.to_string()));
    kubectl(&["annotate", "md", "trimmed-md-0", "wake=1"], None);
    support::eventually("the Authorized condition to go", 120, tail, || async {
        let (ok, out) = authorized();
        (ok && out.trim().is_empty()).then_some(())
    })
    .await;
}

/// A `capw run` serving the webhooks behind the Service `capw-system/hooks`; returns it and
/// its webhook port.
fn replica(server: &ApiServer, dir: &Path, name: &str) -> (KillOnDrop, u16) {
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args([
                "run",
                "--metrics",
                "127.0.0.1:0",
                "--webhooks",
                "127.0.0.1:0",
            ])
            .args(["--webhook-service", "capw-system/hooks", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .arg("--plugins")
            .arg(dir.join(name).join("plugins"))
            .arg("--cache-dir")
            .arg(dir.join(name).join("cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("capw run"),
    );
    let port = webhook_port(&mut child);
    (child, port)
}

/// The webhook port a `capw run` prints; the rest of its stdout is drained.
fn webhook_port(host: &mut KillOnDrop) -> u16 {
    let mut lines = std::io::BufReader::new(host.stdout.take().expect("stdout")).lines();
    let port = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("admission webhooks at https://127.0.0.1:")?
                .parse()
                .ok()
        })
        .expect("the webhook address");
    std::thread::spawn(move || for _ in lines {});
    port
}

/// Whether the replica on `port` presents a certificate for the Service's name that `bundle`
/// verifies, and answers a review there.
fn trusted(port: u16, bundle: &str, dir: &Path) -> bool {
    let ca = dir.join("bundle.pem");
    std::fs::write(&ca, bundle).expect("bundle");
    let out = Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(&ca)
        .arg("--resolve")
        .arg(format!("hooks.capw-system.svc:{port}:127.0.0.1"))
        .args(["-d", "{}"])
        .arg(format!(
            "https://hooks.capw-system.svc:{port}/validate-cluster-x-k8s-io-v1beta2-cluster"
        ))
        .output()
        .expect("curl");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("AdmissionReview")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_webhook_ca_and_a_rotation_keeps_the_old_one_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("api"));
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let kubectl = |args: &[&str]| {
        let (ok, out) = support::kubectl(&server.kubeconfig, &home, args, None);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    };
    kubectl(&["create", "namespace", "capw-system"]);
    let secret = |key: &str| {
        let b64 = kubectl(&[
            "get",
            "secret",
            "hooks-cert",
            "-n",
            "capw-system",
            "-o",
            &format!("jsonpath={{.data.{}}}", key.replace('.', "\\.")),
        ]);
        String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64.trim())
                .expect("base64"),
        )
        .expect("pem")
    };
    let (_a, port_a) = replica(&server, dir.path(), "a");
    let (_b, port_b) = replica(&server, dir.path(), "b");
    let first = secret("ca.crt");
    assert_eq!(secret("ca-bundle.crt"), first, "one CA, made once");
    for port in [port_a, port_b] {
        assert!(
            trusted(port, &first, dir.path()),
            "replica on {port} is not trusted by the shared CA"
        );
    }

    // Past its rotation time, the next replica to look makes a new CA; the bundle keeps the
    // old one, so a replica still serving with it stays trusted.
    kubectl(&[
        "annotate",
        "secret",
        "hooks-cert",
        "-n",
        "capw-system",
        "--overwrite",
        "capw.dev/rotate-after=2020-01-01T00:00:00Z",
    ]);
    let (_c, port_c) = replica(&server, dir.path(), "c");
    let second = secret("ca.crt");
    assert_ne!(second, first, "the CA was not rotated");
    let bundle = secret("ca-bundle.crt");
    assert_eq!(bundle, format!("{second}{first}"));
    let registered = kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "capi-validating-webhook-configuration",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}",
    ]);
    assert_eq!(
        registered.trim(),
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bundle)
    );
    assert!(trusted(port_c, &bundle, dir.path()));
    assert!(
        trusted(port_a, &bundle, dir.path()),
        "the old CA's replica lost trust"
    );
    assert!(
        !trusted(port_a, &second, dir.path()),
        "the check cannot tell CAs apart"
    );
}
