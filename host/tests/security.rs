//! SECURITY.md's checklist against the real host: a real `capw apiserver` over HTTPS, the
//! host's controllers in this process, and the hostile components of `plugins/testing/hostile`
//! beside the bundled providers. Each test asserts the refusal (a condition naming the rule),
//! that nothing ran and nothing leaked (secrets compared by fingerprint, never printed), and
//! that the host kept serving its other clusters.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::machine::Machine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use sha2::Digest;
use std::path::Path;
use std::sync::atomic::Ordering;
use support::host::Env;

/// The bundled providers plus the hostile control plane and bootstrap provider.
async fn with_hostile_providers() -> Env {
    let e = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("inmemory", "inmemory.wasm"),
            ("hostile-control-plane", "hostile-control-plane.wasm"),
            ("hostile-bootstrap", "hostile-bootstrap.wasm"),
        ],
        &[("inmemory", "capabilities: [sim-cloud]\n")],
    )
    .await;
    e.serving("five plugins to serve", 5).await;
    e
}

impl Env {
    fn hostile_cps(&self) -> Api<DynamicObject> {
        self.dynamic(
            "controlplane.cluster.x-k8s.io",
            "HostileControlPlane",
            "hostilecontrolplanes",
        )
    }

    /// The `PluginCallSucceeded=False` condition of an object, once the host wrote it.
    async fn refusal(&self, api: &Api<DynamicObject>, name: &str, rule: &str) -> Value {
        self.eventually(&format!("{name} refused for {rule}"), 60, || async {
            let o = api.get_opt(name).await.ok()??;
            o.data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "PluginCallSucceeded"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| m.contains(rule))
                })
                .cloned()
        })
        .await
    }

    async fn secret_names(&self) -> Vec<String> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "default");
        secrets
            .list(&ListParams::default())
            .await
            .expect("secrets")
            .items
            .iter()
            .map(|s| s.name_any())
            .collect()
    }

    /// The sha256 of every Secret value in the namespace: a leak is looked for by
    /// fingerprint, so no test output ever holds a secret.
    async fn secret_fingerprints(&self) -> Vec<String> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "default");
        let mut out = vec![];
        for s in secrets
            .list(&ListParams::default())
            .await
            .expect("secrets")
            .items
        {
            for v in s.data.unwrap_or_default().values() {
                out.push(hex(&v.0));
            }
        }
        out.push(hex(self.admin_token().as_bytes()));
        out
    }

    fn admin_token(&self) -> String {
        std::fs::read_to_string(self.kubeconfig.parent().expect("dir").join("token"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    }
}

/// The reason and message of a WasmProvider's `Validated=False`, once it has one.
async fn not_validated(
    wps: &Api<capw_api::wasmprovider::WasmProvider>,
    name: &str,
) -> Option<(String, String)> {
    let wp = wps.get_opt(name).await.ok()??;
    let c = wp
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Validated")?;
    (c.status == "False").then_some((c.reason, c.message))
}

fn hex(b: &[u8]) -> String {
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A Cluster on the in-memory infrastructure whose control plane is the hostile one.
fn hostile_cluster(name: &str, cp_spec: Value) -> String {
    let cp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "HostileControlPlane",
        "metadata": {"name": name, "namespace": "default"}, "spec": cp_spec});
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryCluster, name: {name}}}\n  controlPlaneRef: {{apiGroup: controlplane.cluster.x-k8s.io, kind: HostileControlPlane, name: {name}}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryCluster\nmetadata: {{name: {name}, namespace: default}}\nspec: {{}}\n---\n{cp}\n"
    )
}

fn kubeconfig(server: &str, user: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "w", "user": "u"}}],
        "clusters": [{"name": "w", "cluster": {"server": server, "certificate-authority-data": "Y2E="}}],
        "users": [{"name": "u", "user": user}],
    })
    .to_string()
}

/// A listener that counts the connections it gets: where a hostile kubeconfig would send the
/// host, with whatever credentials it read.
fn trap_listener() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = format!("https://{}", l.local_addr().expect("addr"));
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            if c.is_ok() {
                h.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (addr, hits)
}

fn exec_user(marker: &Path) -> Value {
    json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
        "args": ["-c", format!("touch {}", marker.display())], "interactiveMode": "Never"}})
}

/// SECURITY.md "kubeconfig", written by a plugin: exec, auth-provider, a token file and a
/// foreign server are each refused with a condition naming the field; no Secret is written,
/// no command runs, no connection is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_kubeconfig_may_not_run_commands_read_files_or_point_elsewhere() {
    let e = with_hostile_providers().await;
    let marker = e.dir.path().join("exec-ran");
    let (trap, hits) = trap_listener();
    let token_file = e.dir.path().join("api/token");
    let cases = [
        (
            "kc-exec",
            kubeconfig("https://127.0.0.1:1", exec_user(&marker)),
            "server",
        ),
        (
            "kc-token-file",
            kubeconfig(&trap, json!({"tokenFile": token_file})),
            ".server",
        ),
        (
            "kc-auth-provider",
            kubeconfig(
                "https://127.0.0.1:1",
                json!({"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
            ),
            "server",
        ),
    ];
    for (name, kc, _) in &cases {
        e.kubectl(
            &["apply", "-f", "-"],
            Some(&hostile_cluster(name, json!({"kubeconfig": kc}))),
        );
    }
    let cps = e.hostile_cps();
    for (name, _, rule) in &cases {
        let c = e.refusal(&cps, name, rule).await;
        assert_eq!(c["reason"], "PluginInvalidResult", "{c}");
        assert!(
            c["message"]
                .as_str()
                .unwrap_or_default()
                .contains("kubeconfig refused"),
            "{c}"
        );
    }
    // With the right server, each credential feature is refused by its own field.
    let endpoint = |name: &str| {
        let clusters: Api<capw_api::cluster::Cluster> =
            Api::namespaced(e.client.clone(), "default");
        let name = name.to_string();
        async move {
            let c = clusters.get_opt(&name).await.ok()??;
            let ep = c.spec.control_plane_endpoint?;
            (ep.port != 0).then(|| format!("https://{}:{}", ep.host, ep.port))
        }
    };
    let server = e
        .eventually("kc-exec's endpoint", 60, || endpoint("kc-exec"))
        .await;
    for (name, user, rule) in [
        ("kc-exec", exec_user(&marker), ".exec"),
        (
            "kc-token-file",
            json!({"tokenFile": token_file}),
            ".tokenFile",
        ),
        (
            "kc-auth-provider",
            json!({"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
            ".auth-provider",
        ),
    ] {
        let server = e.eventually("the endpoint", 60, || endpoint(name)).await;
        cps.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"kubeconfig": kubeconfig(&server, user)}})),
        )
        .await
        .expect("patch");
        e.refusal(&cps, name, rule).await;
    }
    let secrets = e.secret_names().await;
    for (name, _, _) in &cases {
        assert!(
            !secrets.contains(&format!("{name}-kubeconfig")),
            "{name}-kubeconfig was written"
        );
    }
    assert!(!marker.exists(), "the exec credential ran on the host");
    assert_eq!(
        hits.load(Ordering::Relaxed),
        0,
        "the host connected to {trap}"
    );
    assert!(server.starts_with("https://127.0.0.1:"), "{server}");
}

/// SECURITY.md "kubeconfig", written by anyone: a `<cluster>-kubeconfig` Secret is trusted no
/// more than a plugin's result. The Machine says why; the command never runs and no
/// credential leaves for the server the Secret names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_written_by_anyone_is_checked_the_same_way() {
    let e = with_hostile_providers().await;
    demo_running(&e).await;
    let machines: Api<Machine> = Api::namespaced(e.client.clone(), "default");
    // The control plane would rewrite its kubeconfig; pausing it leaves the Secret to us.
    e.kubectl(
        &[
            "annotate",
            "kubeadmcontrolplane",
            "demo-control-plane",
            "cluster.x-k8s.io/paused=true",
        ],
        None,
    );
    let secrets: Api<Secret> = Api::namespaced(e.client.clone(), "default");
    let good = secrets.get("demo-kubeconfig").await.expect("kubeconfig");
    let text = String::from_utf8(good.data.expect("data")["value"].0.clone()).expect("utf8");
    let parsed: serde_yaml::Value = serde_yaml::from_str(&text).expect("yaml");
    let server = parsed["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server")
        .to_string();
    let marker = e.dir.path().join("secret-exec-ran");
    let (trap, hits) = trap_listener();
    for (user, srv, rule) in [
        (exec_user(&marker), server.as_str(), ".exec"),
        (
            json!({"tokenFile": e.dir.path().join("api/token")}),
            trap.as_str(),
            ".server",
        ),
    ] {
        secrets
            .patch(
                "demo-kubeconfig",
                &PatchParams::default(),
                &Patch::Merge(&json!({"stringData": {"value": kubeconfig(srv, user)}})),
            )
            .await
            .expect("overwrite");
        let m = e
            .eventually(
                &format!("a Machine to show the refusal of {rule}"),
                60,
                || async {
                    let l = machines.list(&ListParams::default()).await.ok()?;
                    l.items.into_iter().find_map(|m| {
                        m.status?.conditions.into_iter().find(|c| {
                            c.type_ == "NodeHealthy"
                                && c.reason == "KubeconfigRefused"
                                && c.message.contains(rule)
                        })
                    })
                },
            )
            .await;
        assert!(m.message.contains("demo-kubeconfig"), "{}", m.message);
    }
    assert!(!marker.exists(), "the exec credential ran on the host");
    assert_eq!(
        hits.load(Ordering::Relaxed),
        0,
        "the host connected to {trap}"
    );
}

/// SECURITY.md "status patches", "bootstrap data" and "bounds": contract fields cannot be set
/// through a status patch (no redirect of dataSecretName to another cluster's Secret, no
/// panic over a mistyped `initialization`), a control plane gets at most replicas + 1
/// Machines, and empty log lines count against the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_bounded_and_contract_fields_are_the_hosts() {
    let e = with_hostile_providers().await;
    let before = e.secret_fingerprints().await;
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&hostile_cluster(
            "bounds",
            json!({"replicas": 1, "createMachines": 10000}),
        )),
    );
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&hostile_cluster(
            "pwned",
            json!({"statusPatch": {"initialization": "pwned"}}),
        )),
    );
    let cps = e.hostile_cps();
    e.refusal(&cps, "bounds", "over spec.replicas (1) + 1")
        .await;
    e.refusal(&cps, "pwned", "status.initialization").await;
    // A Machine whose bootstrap config is hostile: it claims another cluster's token Secret.
    let redirect =
        json!({"dataSecretName": "bounds-token", "initialization": {"dataSecretCreated": true}});
    let machine = format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {{name: evil-0, namespace: default}}\nspec:\n  clusterName: pwned\n  bootstrap:\n    configRef: {{apiGroup: bootstrap.cluster.x-k8s.io, kind: HostileConfig, name: evil-0}}\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryMachine, name: evil-0}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachine\nmetadata: {{name: evil-0, namespace: default}}\nspec: {{}}\n---\n{}\n",
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "HostileConfig",
            "metadata": {"name": "evil-0", "namespace": "default"},
            "spec": {"statusPatch": redirect, "logLines": 100000}})
    );
    e.kubectl(&["apply", "-f", "-"], Some(&machine));
    let configs = e.dynamic(
        "bootstrap.cluster.x-k8s.io",
        "HostileConfig",
        "hostileconfigs",
    );
    e.refusal(&configs, "evil-0", "a Cluster API contract field")
        .await;
    let cfg = configs.get("evil-0").await.expect("config");
    assert!(
        cfg.data.pointer("/status/dataSecretName").is_none(),
        "{:?}",
        cfg.data
    );
    let machines: Api<Machine> = Api::namespaced(e.client.clone(), "default");
    let m = machines.get("evil-0").await.expect("machine");
    assert!(
        m.spec.bootstrap.data_secret_name.is_none(),
        "{:?}",
        m.spec.bootstrap
    );
    let cp_machines = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=bounds"))
        .await
        .expect("list");
    assert_eq!(
        cp_machines.items.len(),
        0,
        "Machines were made for a refused result"
    );
    // 100,000 empty lines per call: the host logged no more than the cap allows.
    let slot = e.host.registry.get("hostile-bootstrap").expect("slot");
    let counters = &slot.current().counters;
    let (calls, lines, dropped) = (
        counters.calls.load(Ordering::Relaxed),
        counters.log_lines.load(Ordering::Relaxed),
        counters.log_dropped_bytes.load(Ordering::Relaxed),
    );
    let per_call =
        capw_runtime::Limits::default().log_bytes / capw_runtime::capabilities::log::LOG_LINE_COST;
    assert!(
        calls >= 1 && lines <= calls * per_call as u64,
        "{lines} lines in {calls} calls"
    );
    assert!(dropped > 0, "nothing was dropped");
    // The host is whole: another cluster still converges beside the hostile ones, and no
    // secret reached a place it did not belong.
    demo_running(&e).await;
    let patched = serde_json::to_string(&cfg.data).expect("json");
    for fp in before {
        assert!(
            !patched.contains(&fp),
            "a secret's fingerprint appeared in a status"
        );
    }
}

/// SECURITY.md "kinds and CRDs": a plugin cannot serve core kinds, take another plugin's kinds
/// or ship CRDs for kinds it does not declare; core CRDs are untouched and nothing serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_serve_only_their_own_provider_kinds_and_install_only_their_crds() {
    let e = support::host::start(
        &[("docker", "docker.wasm")],
        &[("docker", "capabilities: [container-runtime]\n")],
    )
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(e.client.clone());
    let uid_of = |name: &'static str| {
        let crds = crds.clone();
        async move {
            crds.get(name)
                .await
                .ok()
                .and_then(|c| c.metadata.resource_version)
        }
    };
    let wps: Api<capw_api::wasmprovider::WasmProvider> = Api::all(e.client.clone());
    let validated = |name: &'static str| not_validated(&wps, name);
    e.eventually("docker Active", 60, || async {
        let wp = wps.get_opt("docker").await.ok()??;
        wp.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Active" && c.status == "True")
            .then_some(())
    })
    .await;
    // Dropped in once docker serves its kinds: the thief comes second.
    for name in [
        "hostile-core-kind",
        "hostile-kind-thief",
        "hostile-crd-swap",
    ] {
        std::fs::copy(
            support::plugin(&format!("{name}.wasm")),
            e.dir.path().join(format!("plugins/{name}.wasm")),
        )
        .expect("drop in");
    }
    let (machines_rv, clusters_rv) = (
        uid_of("machines.cluster.x-k8s.io").await,
        uid_of("clusters.cluster.x-k8s.io").await,
    );
    for (name, reason, words) in [
        (
            "hostile-core-kind",
            "ReservedGroup",
            "Machine.cluster.x-k8s.io",
        ),
        ("hostile-kind-thief", "KindTaken", "spec.takeOverKinds"),
        (
            "hostile-crd-swap",
            "CrdMismatch",
            "which the plugin does not declare",
        ),
    ] {
        let (r, m) = e
            .eventually(&format!("{name} refused"), 60, || validated(name))
            .await;
        assert_eq!(r, reason, "{name}: {m}");
        assert!(m.contains(words), "{name}: {m}");
    }
    for name in [
        "hostile-core-kind",
        "hostile-kind-thief",
        "hostile-crd-swap",
    ] {
        assert!(e.host.registry.get(name).is_none(), "refused {name} serves");
    }
    assert!(
        !e.host
            .driver
            .driven()
            .iter()
            .any(|k| k == "Machine.cluster.x-k8s.io" || k.starts_with("Hostile")),
        "{:?}",
        e.host.driver.driven()
    );
    assert_eq!(uid_of("machines.cluster.x-k8s.io").await, machines_rv);
    assert_eq!(uid_of("clusters.cluster.x-k8s.io").await, clusters_rv);
    assert!(
        crds.get_opt("hostilemachines.infrastructure.cluster.x-k8s.io")
            .await
            .expect("get")
            .is_none(),
        "a refused plugin's CRD was installed"
    );
    // The admin, not the plugin, moves a kind: with takeOverKinds the second plugin serves it.
    let kind = "DockerMachine.infrastructure.cluster.x-k8s.io";
    assert_eq!(e.host.registry.owner(kind), None);
    std::fs::write(
        e.dir.path().join("plugins/hostile-kind-thief.yaml"),
        format!("takeOverKinds: [{kind}]\n"),
    )
    .expect("manifest");
    e.eventually("the kind moved by the admin", 60, || async {
        (e.host.registry.owner(kind).as_deref() == Some("hostile-kind-thief")).then_some(())
    })
    .await;
    assert!(e.host.registry.get("hostile-kind-thief").is_some());
}

/// SECURITY.md "local files": the management API's data directory (every Secret, the CA key,
/// the admin token) and the host's cache are private, and a module path cannot leave the
/// plugin directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_are_private_and_module_paths_stay_in_the_plugin_dir() {
    use std::os::unix::fs::PermissionsExt;
    let e = support::host::start(&[("bootstrap", "bootstrap.wasm")], &[]).await;
    let data = e.dir.path().join("api");
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for f in std::fs::read_dir(&data).expect("data dir") {
        let p = f.expect("entry").path();
        if p.is_file() {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
    // A module outside the plugin directory, by `..` and by an absolute path.
    let outside = e.dir.path().join("outside.wasm");
    std::fs::copy(support::plugin("echo-v1.wasm"), &outside).expect("copy");
    let sha = hex(&std::fs::read(&outside).expect("read"));
    for (name, module) in [
        ("escape-dots", "../outside.wasm".to_string()),
        ("escape-abs", outside.display().to_string()),
    ] {
        e.kubectl(
            &["apply", "-f", "-"],
            Some(
                &json!({"apiVersion": "runtime.capw.dev/v1alpha1", "kind": "WasmProvider",
                "metadata": {"name": name}, "spec": {"module": module, "sha256": sha}})
                .to_string(),
            ),
        );
        let wps: Api<capw_api::wasmprovider::WasmProvider> = Api::all(e.client.clone());
        let reason = e
            .eventually(&format!("{name} refused"), 30, || async {
                let wp = wps.get_opt(name).await.ok()??;
                wp.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Validated" && c.status == "False")
                    .map(|c| c.reason)
            })
            .await;
        assert_eq!(reason, "ModuleOutsidePluginDir", "{name}");
    }
    assert!(e.host.registry.get("escape-dots").is_none());
    assert!(e.host.registry.get("escape-abs").is_none());
    let cache_key = e.dir.path().join("cache/artifact-key");
    e.eventually("the artifact key", 30, || async {
        cache_key.exists().then_some(())
    })
    .await;
    assert_eq!(mode(&cache_key), 0o600);
    assert_eq!(mode(&e.dir.path().join("cache")), 0o700);
}

/// The example in-memory cluster `demo` (KubeadmControlPlane, MachineDeployment), applied and
/// running: the victim, and the proof that the honest providers keep working.
async fn demo_running(e: &Env) {
    let example =
        std::fs::read_to_string(support::repo_root().join("examples/inmemory-cluster.yaml"))
            .expect("example");
    // The driver may serve five kinds before every provider's CRDs are established: apply
    // until kubectl knows them all.
    e.eventually("the example to apply", 60, || async {
        support::kubectl(
            &e.kubeconfig,
            &e.home,
            &["apply", "-f", "-"],
            Some(&example),
        )
        .0
        .then_some(())
    })
    .await;
    let machines: Api<Machine> = Api::namespaced(e.client.clone(), "default");
    e.eventually("demo's six Machines Running", 120, || async {
        let l = machines.list(&ListParams::default()).await.ok()?;
        let running = l
            .items
            .iter()
            .filter(|m| m.spec.cluster_name == "demo")
            .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 6).then_some(())
    })
    .await;
}

/// Every Secret whose name starts with `prefix`: name → (resourceVersion, fingerprint of its
/// data, its controller's UID).
async fn secrets_of(e: &Env, prefix: &str) -> Vec<(String, String, String, String)> {
    let secrets: Api<Secret> = Api::namespaced(e.client.clone(), "default");
    let mut out: Vec<_> = secrets
        .list(&ListParams::default())
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter(|s| s.name_any().starts_with(prefix))
        .map(|s| {
            let data = serde_json::to_vec(&s.data).expect("json");
            let controller = s
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone())
                .unwrap_or_default();
            (
                s.name_any(),
                s.resource_version().unwrap_or_default(),
                hex(&data),
                controller,
            )
        })
        .collect();
    out.sort();
    out
}

/// SECURITY.md "bootstrap data Secrets": a control plane names its Machines, and the host names
/// their bootstrap configs and data Secrets after them. A Machine named like another cluster's
/// Secret (`demo-token`) is refused before anything is made; a Machine named after a Secret
/// that exists (`app-credentials`) gets a config whose data Secret is never adopted: the config
/// says `DataSecretAvailable=False, DataSecretNotOwned`, and nothing of the Secret reaches a
/// plugin. The victims' Secrets are unchanged and the honest providers keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_cannot_get_another_clusters_secrets_handed_to_a_plugin() {
    let e = with_hostile_providers().await;
    demo_running(&e).await;
    let secrets: Api<Secret> = Api::namespaced(e.client.clone(), "default");
    let mut app = Secret::default();
    app.metadata.name = Some("app-credentials".into());
    app.string_data = Some([("password".to_string(), "hunter2".to_string())].into());
    secrets
        .create(&Default::default(), &app)
        .await
        .expect("app-credentials");
    let victims_before = secrets_of(&e, "demo").await;
    let app_before = secrets_of(&e, "app-credentials").await;
    assert!(
        victims_before.iter().any(|s| s.0 == "demo-token")
            && victims_before.iter().any(|s| s.0 == "demo-kubeconfig"),
        "{victims_before:?}"
    );
    let template = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachineTemplate\nmetadata: {name: thief, namespace: default}\nspec: {template: {spec: {}}}\n---\n";
    let spec = |names: &[&str]| {
        json!({"replicas": 3, "initialized": false, "version": "v1.33.0", "machineNames": names,
            "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "InMemoryMachineTemplate", "name": "thief"}}},
            "kubeadmConfigSpec": {}})
    };
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "{template}{}",
            hostile_cluster("thief", spec(&["demo-token", "demo-kubeconfig"]))
        )),
    );
    let cps = e.hostile_cps();
    let c = e
        .refusal(&cps, "thief", "the suffix of a cluster Secret")
        .await;
    assert_eq!(c["reason"], "PluginInvalidResult", "{c}");
    let machines: Api<Machine> = Api::namespaced(e.client.clone(), "default");
    for name in ["demo-token", "demo-kubeconfig"] {
        assert!(
            machines.get_opt(name).await.expect("get").is_none(),
            "Machine {name} was made"
        );
    }
    // A name no cluster Secret has, but a Secret of someone else's does.
    cps.patch(
        "thief",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": spec(&["app-credentials"])})),
    )
    .await
    .expect("patch");
    let configs = e.dynamic(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
    );
    let cond = e
        .eventually(
            "app-credentials' config to refuse the Secret",
            120,
            || async {
                let o = configs.get_opt("app-credentials").await.ok()??;
                o.data
                    .pointer("/status/conditions")?
                    .as_array()?
                    .iter()
                    .find(|c| {
                        c["type"] == "DataSecretAvailable" && c["reason"] == "DataSecretNotOwned"
                    })
                    .cloned()
            },
        )
        .await;
    let msg = cond["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("Secret default/app-credentials") && msg.contains("never adopts"),
        "{cond}"
    );
    let cfg = configs.get("app-credentials").await.expect("config");
    assert!(
        cfg.data.pointer("/status/dataSecretName").is_none(),
        "{:?}",
        cfg.data["status"]
    );
    let m = machines.get("app-credentials").await.expect("machine");
    assert!(
        m.spec.bootstrap.data_secret_name.is_none(),
        "{:?}",
        m.spec.bootstrap
    );
    let infra = e.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    let im = infra.get("app-credentials").await.expect("infra machine");
    assert_ne!(
        im.data.pointer("/status/initialization/provisioned"),
        Some(&json!(true)),
        "a machine booted without its own bootstrap data"
    );
    assert_eq!(secrets_of(&e, "app-credentials").await, app_before);
    assert_eq!(secrets_of(&e, "demo").await, victims_before);
    // The honest providers kept working beside the attempts.
    let running = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=demo"))
        .await
        .expect("list")
        .items
        .iter()
        .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    assert_eq!(running, 6);
}

/// SECURITY.md "CRD names": a kind of the plugin's own name (`KubeadmConfigShadow`) whose CRD
/// takes the bootstrap provider's plural is refused at validation while that provider is
/// active (`CrdNameTaken`), and at install by the API server's field ownership once it is not
/// (`CrdOwned`, naming the bootstrap provider's field manager). The CRD keeps serving
/// `KubeadmConfig`, unchanged, and nothing drives the impostor's kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_name_belongs_to_one_plugin() {
    let e = support::host::start(&[("bootstrap", "bootstrap.wasm")], &[]).await;
    let wps: Api<capw_api::wasmprovider::WasmProvider> = Api::all(e.client.clone());
    let validated = |name: &'static str, reason: &'static str| {
        let wps = wps.clone();
        async move {
            let (r, message) = not_validated(&wps, name).await?;
            (r == reason).then_some(message)
        }
    };
    e.eventually("bootstrap serving", 60, || async {
        e.host.registry.get("bootstrap").map(|_| ())
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(e.client.clone());
    let name = "kubeadmconfigs.bootstrap.cluster.x-k8s.io";
    let before = crds.get(name).await.expect("crd");
    assert_eq!(before.spec.names.kind, "KubeadmConfig");
    std::fs::copy(
        support::plugin("hostile-crd-shadow.wasm"),
        e.dir.path().join("plugins/hostile-crd-shadow.wasm"),
    )
    .expect("drop in");
    let msg = e
        .eventually("the shadow refused by name", 60, || {
            validated("hostile-crd-shadow", "CrdNameTaken")
        })
        .await;
    assert!(
        msg.contains(name) && msg.contains("plugin bootstrap") && msg.contains("spec.names.plural"),
        "{msg}"
    );
    // With the bootstrap provider gone, its CRD stays, and its fields stay its manager's.
    std::fs::remove_file(e.dir.path().join("plugins/bootstrap.wasm")).expect("remove");
    wps.delete("bootstrap", &Default::default())
        .await
        .expect("delete");
    e.eventually("bootstrap unloaded", 60, || async {
        e.host.registry.get("bootstrap").is_none().then_some(())
    })
    .await;
    e.kubectl(
        &[
            "annotate",
            "wasmprovider",
            "hostile-crd-shadow",
            "capw.dev/retry=1",
        ],
        None,
    );
    let msg = e
        .eventually("the shadow refused by field ownership", 60, || {
            validated("hostile-crd-shadow", "CrdOwned")
        })
        .await;
    assert!(
        msg.contains(name) && msg.contains("capw-plugin-bootstrap"),
        "{msg}"
    );
    let after = crds.get(name).await.expect("crd");
    assert_eq!(after.spec.names.kind, "KubeadmConfig");
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert!(e.host.registry.get("hostile-crd-shadow").is_none());
    // The honest provider comes back and serves its CRD as before, under its own manager.
    std::fs::copy(
        support::plugin("bootstrap.wasm"),
        e.dir.path().join("plugins/bootstrap.wasm"),
    )
    .expect("drop in again");
    e.eventually("bootstrap serving again", 60, || async {
        e.host.registry.get("bootstrap").map(|_| ())
    })
    .await;
    let again = crds.get(name).await.expect("crd");
    assert_eq!(again.spec.names.kind, "KubeadmConfig");
    assert!(
        again
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some("capw-plugin-bootstrap")),
        "{:?}",
        again.metadata.managed_fields
    );
    assert!(
        !e.host
            .driver
            .driven()
            .iter()
            .any(|k| k.starts_with("KubeadmConfigShadow")),
        "{:?}",
        e.host.driver.driven()
    );
}

/// SECURITY.md "adoption": a Machine takes over the objects it references only from the
/// MachineSet or control plane that made it, by group, kind and UID, never by a kind's name.
/// A third-party control plane (`ThirdPartyControlPlane`, a group of its own) gets its
/// Machines adopted and Running; a kind called `KubeadmControlPlane` in another group cannot
/// have its Machine take a bootstrap config the real KubeadmControlPlane made, nor ask the host
/// for a Machine named after another's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_are_adopted_by_owner_and_role_never_by_kind_name() {
    let e = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("inmemory", "inmemory.wasm"),
            (
                "third-party-control-plane",
                "third-party-control-plane.wasm",
            ),
            ("hostile-kcp-impostor", "hostile-kcp-impostor.wasm"),
        ],
        &[("inmemory", "capabilities: [sim-cloud]\n")],
    )
    .await;
    e.serving("five plugins to serve", 5).await;
    demo_running(&e).await;
    let cluster = |name: &str, group: &str, kind: &str, cp_spec: Value| {
        format!(
            "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryCluster, name: {name}}}\n  controlPlaneRef: {{apiGroup: {group}, kind: {kind}, name: {name}}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryCluster\nmetadata: {{name: {name}, namespace: default}}\nspec: {{}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachineTemplate\nmetadata: {{name: {name}, namespace: default}}\nspec: {{template: {{spec: {{}}}}}}\n---\n{}\n",
            json!({"apiVersion": format!("{group}/v1beta2"), "kind": kind,
                "metadata": {"name": name, "namespace": "default"}, "spec": cp_spec})
        )
    };
    let template = |name: &str| {
        json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "InMemoryMachineTemplate", "name": name}}})
    };
    // The honest third-party control plane.
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&cluster(
            "tp",
            "controlplane.thirdparty.example",
            "ThirdPartyControlPlane",
            json!({"replicas": 1, "version": "v1.33.0", "machineTemplate": template("tp"), "kubeadmConfigSpec": {}}),
        )),
    );
    let machines: Api<Machine> = Api::namespaced(e.client.clone(), "default");
    let tp = e
        .eventually(
            "the third-party control plane's Machine Running",
            120,
            || async {
                let l = machines
                    .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=tp"))
                    .await
                    .ok()?;
                l.items
                    .into_iter()
                    .find(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            },
        )
        .await;
    let tp_uid = tp.uid().expect("uid");
    let controllers = |o: &DynamicObject| -> Vec<String> {
        o.owner_references()
            .iter()
            .filter(|r| r.controller == Some(true))
            .map(|r| format!("{}/{}/{}", r.kind, r.name, r.uid))
            .collect()
    };
    let configs = e.dynamic(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
    );
    let infra = e.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    let want = vec![format!("Machine/{}/{tp_uid}", tp.name_any())];
    for api in [&configs, &infra] {
        let o = api.get(&tp.name_any()).await.expect("clone");
        assert_eq!(controllers(&o), want, "{:?}", o.metadata.owner_references);
    }
    // The impostor: `KubeadmControlPlane`, but in controlplane.hostile.example.
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&cluster(
            "imp",
            "controlplane.hostile.example",
            "KubeadmControlPlane",
            json!({"replicas": 3, "initialized": false, "machineTemplate": template("imp"),
                "kubeadmConfigSpec": {}, "machineNames": [tp.name_any()]}),
        )),
    );
    let imps = e.dynamic(
        "controlplane.hostile.example",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let c = e
        .refusal(&imps, "imp", "does not belong to this control plane")
        .await;
    assert_eq!(c["reason"], "PluginInvalidResult", "{c}");
    // A config the real KubeadmControlPlane cloned, before its Machine exists.
    let kcps = e.dynamic(
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let kcp = kcps.get("demo-control-plane").await.expect("kcp");
    let imp = imps.get("imp").await.expect("imp");
    let owner = |o: &DynamicObject, api_version: &str, kind: &str| {
        json!([{"apiVersion": api_version, "kind": kind, "name": o.name_any(),
            "uid": o.uid(), "controller": true, "blockOwnerDeletion": true}])
    };
    e.kubectl(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
                "metadata": {"name": "demo-pending", "namespace": "default",
                    "labels": {"cluster.x-k8s.io/cluster-name": "demo", "cluster.x-k8s.io/control-plane": ""},
                    "ownerReferences": owner(&kcp, "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")},
                "spec": {}})
            .to_string(),
        ),
    );
    // A Machine the impostor "made", referencing it.
    e.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachine\nmetadata: {{name: grabber, namespace: default}}\nspec: {{}}\n",
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "grabber", "namespace": "default",
                    "labels": {"cluster.x-k8s.io/control-plane": ""},
                    "ownerReferences": owner(&imp, "controlplane.hostile.example/v1beta2", "KubeadmControlPlane")},
                "spec": {"clusterName": "imp", "version": "v1.33.0",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "demo-pending"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryMachine", "name": "grabber"}}})
        )),
    );
    let why = e
        .eventually(
            "grabber to say its config is not its creator's",
            60,
            || async {
                let m = machines.get_opt("grabber").await.ok()??;
                m.status?
                    .conditions
                    .into_iter()
                    .find(|c| {
                        c.type_ == "BootstrapConfigReady" && c.message.contains("is controlled by")
                    })
                    .map(|c| c.message)
            },
        )
        .await;
    assert!(
        why.contains("KubeadmControlPlane demo-control-plane") && why.contains("did not create"),
        "{why}"
    );
    let pending = configs.get("demo-pending").await.expect("config");
    assert_eq!(
        controllers(&pending),
        vec![format!(
            "KubeadmControlPlane/demo-control-plane/{}",
            kcp.uid().expect("uid")
        )]
    );
    // The third-party Machine's clones are still its own.
    for api in [&configs, &infra] {
        let o = api.get(&tp.name_any()).await.expect("clone");
        assert_eq!(controllers(&o), want);
    }
    assert!(
        machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=imp"))
            .await
            .expect("list")
            .items
            .iter()
            .all(|m| m.name_any() == "grabber"),
        "the impostor got a Machine made"
    );
}
