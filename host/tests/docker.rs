//! The Docker provider end to end, on the real Docker engine `.ci/run` starts: a `capw
//! apiserver`, the host as its own `capw run` process (so it can be SIGKILLed), the bundled
//! `.wasm` providers, the node image from `capw image build`, and kubectl against both the
//! management API and the workload cluster's own API inside the containers.
//!
//! Every test uses its own cluster name, because container names are global on the engine.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};
use support::{ApiServer, http_get};

/// Tests share the engine; the one that restarts dockerd takes it alone.
static ENGINE: RwLock<()> = RwLock::new(());

fn shared_engine() -> RwLockReadGuard<'static, ()> {
    ENGINE.read().unwrap_or_else(|p| p.into_inner())
}

fn docker_answers() -> bool {
    Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Stops dockerd (SIGTERM, as a service manager would) and starts it again with the same
/// command line, detached from the test so it outlives it.
fn restart_dockerd() {
    if Command::new("systemctl")
        .args(["is-active", "--quiet", "docker"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        let st = Command::new("systemctl")
            .args(["restart", "docker"])
            .status()
            .expect("systemctl");
        assert!(st.success(), "systemctl restart docker failed");
    } else {
        let pid = String::from_utf8_lossy(
            &Command::new("pidof")
                .arg("dockerd")
                .output()
                .expect("pidof")
                .stdout,
        )
        .split_whitespace()
        .next()
        .map(str::to_string)
        .expect("a dockerd process (scripts/setup starts one)");
        let cmdline =
            std::fs::read(format!("/proc/{pid}/cmdline")).expect("dockerd's command line");
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let st = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(
            st.success(),
            "could not stop dockerd (the test needs root, as .ci/run has)"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "dockerd did not stop");
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/tmp/capw-dockerd.log")
            .expect("log");
        let err = log.try_clone().expect("log");
        Command::new("setsid")
            .arg("-f")
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .status()
            .expect("dockerd starts again");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !docker_answers() {
        assert!(
            Instant::now() < deadline,
            "dockerd did not come back; see /tmp/capw-dockerd.log"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs (.ci/run installs docker.io)");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The quickstart with stand-alone workers (`host/tests/data/docker-standalone.yaml`), its
/// cluster renamed: the tests of stand-alone Docker Machines use it.
fn quickstart(cluster: &str) -> String {
    std::fs::read_to_string(support::repo_root().join("host/tests/data/docker-standalone.yaml"))
        .expect("host/tests/data/docker-standalone.yaml")
        .replace("quickstart", cluster)
}

/// `examples/quickstart.yaml` itself (workers from a MachineDeployment), its cluster renamed.
fn quickstart_example(cluster: &str) -> String {
    std::fs::read_to_string(support::repo_root().join("examples/quickstart.yaml"))
        .expect("examples/quickstart.yaml")
        .replace("quickstart", cluster)
}

struct Env {
    api: ApiServer,
    host: Option<Child>,
    plugins: PathBuf,
    metrics: u16,
    home: PathBuf,
    dir: tempfile::TempDir,
}

impl Env {
    fn start() -> Env {
        support::node_image();
        let dir = tempfile::tempdir().expect("tempdir");
        let api = ApiServer::start(&dir.path().join("api"));
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).expect("plugins dir");
        for p in ["bootstrap", "control-plane", "docker"] {
            std::fs::copy(
                support::plugin(&format!("{p}.wasm")),
                plugins.join(format!("{p}.wasm")),
            )
            .expect("copy plugin");
        }
        std::fs::copy(
            support::repo_root().join("examples/plugins/docker.yaml"),
            plugins.join("docker.yaml"),
        )
        .expect("copy manifest");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let mut env = Env {
            api,
            host: None,
            plugins,
            metrics: free_port(),
            home,
            dir,
        };
        env.start_host();
        env
    }

    fn start_host(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("host.log"))
            .expect("host log");
        let child = Command::new(env!("CARGO_BIN_EXE_capw"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.api.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .arg("--plugins")
            .arg(&self.plugins)
            .arg("--metrics")
            .arg(format!("127.0.0.1:{}", self.metrics))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capw run starts");
        self.host = Some(child);
        // Every provider the manifests use: the CRDs of each are installed once it is active.
        for provider in ["docker", "bootstrap", "control-plane"] {
            self.eventually(&format!("the {provider} plugin to be active"), 120, || {
                let (ok, out) = self.kubectl(&[
                    "get",
                    "wasmprovider",
                    provider,
                    "-o",
                    "jsonpath={.status.activeVersion}",
                ]);
                (ok && !out.trim().is_empty()).then_some(())
            });
        }
    }

    fn kill9_host(&mut self) {
        if let Some(mut c) = self.host.take() {
            c.kill().expect("SIGKILL");
            c.wait().expect("reaped");
        }
    }

    fn host_log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("host.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn kubectl_with(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> (bool, String) {
        support::kubectl(kubeconfig, &self.home, args, stdin)
    }

    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        self.kubectl_with(&self.api.kubeconfig, args, None)
    }

    fn must(&self, args: &[&str]) -> String {
        let (ok, out) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed: {out}");
        out
    }

    fn apply(&self, manifest: &str) {
        let (ok, out) =
            self.kubectl_with(&self.api.kubeconfig, &["apply", "-f", "-"], Some(manifest));
        assert!(ok, "kubectl apply failed: {out}");
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.must(&all)).expect("kubectl -o json")
    }

    fn eventually<T>(&self, what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {secs}s waiting for {what}; host log:\n{}",
                self.host_log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn machines(&self, cluster: &str) -> Vec<Value> {
        let list = self.json(&[
            "get",
            "machines",
            "-l",
            &format!("cluster.x-k8s.io/cluster-name={cluster}"),
        ]);
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits for `n` Machines of the cluster to be Running with a nodeRef.
    fn running(&self, cluster: &str, n: usize) -> Vec<Value> {
        self.eventually(
            &format!("{n} Machines of {cluster} Running with a nodeRef"),
            180,
            || {
                let ms = self.machines(cluster);
                let running = ms
                    .iter()
                    .filter(|m| {
                        m["status"]["phase"] == "Running"
                            && m["status"]["nodeRef"]["name"].is_string()
                    })
                    .count();
                (ms.len() == n && running == n).then_some(ms)
            },
        )
    }

    /// The cluster's workload kubeconfig, from `<cluster>-kubeconfig`.
    fn workload_kubeconfig(&self, cluster: &str) -> PathBuf {
        let b64 = self.must(&[
            "get",
            "secret",
            &format!("{cluster}-kubeconfig"),
            "-o",
            "jsonpath={.data.value}",
        ]);
        let text = base64_decode(b64.trim());
        let path = self.dir.path().join(format!("{cluster}.kubeconfig"));
        std::fs::write(&path, text).expect("write workload kubeconfig");
        path
    }

    /// Waits for the control-plane machine's container, and checks the cluster has not
    /// converged yet: the moment a fault test strikes.
    fn mid_provisioning(&self, cluster: &str) {
        self.eventually("the control-plane machine's container", 120, || {
            containers(cluster)
                .iter()
                .any(|c| c.0.contains("-control-plane-"))
                .then_some(())
        });
        let running = self
            .machines(cluster)
            .iter()
            .filter(|m| m["status"]["phase"] == "Running")
            .count();
        assert!(
            running < 3,
            "the fault must strike before the cluster converged"
        );
    }

    /// Deletes the Cluster and waits until its containers are gone from the engine.
    fn delete_cluster(&self, cluster: &str) {
        self.must(&["delete", "cluster", cluster, "--timeout=120s"]);
        self.eventually("the cluster's containers to be removed", 60, || {
            containers(cluster).is_empty().then_some(())
        });
    }

    fn metric(&self, name: &str) -> u64 {
        let text = http_get(self.metrics, "/metrics");
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.kill9_host();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(s.as_bytes())?;
            c.wait_with_output()
        });
    out.expect("base64 -d").stdout
}

/// The engine's name for the docker plugin's container or network `name`: the host
/// namespaces every name by plugin.
fn engine(name: &str) -> String {
    format!("docker.{name}")
}

/// Name (as the plugin knows it) → id of the containers labelled with the cluster, and their
/// provider-version label.
fn containers(cluster: &str) -> Vec<(String, String, String)> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=capw.dev/cluster=default.{cluster}"),
        "--format",
        "{{.Names}} {{.ID}} {{.Label \"capw.dev/provider-version\"}}",
    ])
    .lines()
    .map(|l| {
        let mut w = l.split(' ');
        let name = w.next().unwrap_or_default();
        let name = name.strip_prefix("docker.").unwrap_or(name).to_string();
        let id = w.next().unwrap_or_default().to_string();
        (name, id, w.next().unwrap_or_default().to_string())
    })
    .collect()
}

/// Removes what a test left on the engine for its cluster, before it starts and when it ends
/// (also when it fails), so a failed run cannot leak into the next.
struct Engine(&'static str);

impl Engine {
    fn clean(cluster: &'static str) -> Engine {
        let e = Engine(cluster);
        e.sweep();
        e
    }

    fn sweep(&self) {
        for (name, _, _) in containers(self.0) {
            let _ = Command::new("docker")
                .args(["rm", "-f", &engine(&name)])
                .output();
        }
        let _ = Command::new("docker")
            .args(["network", "rm", &engine(&format!("capw-{}", self.0))])
            .output();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.sweep();
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// A Machine's container and node name: CAPD's `machineContainerName`, which adds the
/// cluster's name only when the Machine's does not already start with it.
fn container_of(cluster: &str, machine: &str) -> String {
    if machine.starts_with(cluster) {
        machine.to_string()
    } else {
        format!("{cluster}-{machine}")
    }
}

#[test]
fn quickstart_runs_three_ready_nodes_on_docker_and_deletes_cleanly() {
    let _shared = shared_engine();
    let env = Env::start();
    let cluster = "quickstart";
    let _engine = Engine::clean(cluster);
    env.apply(&quickstart_example(cluster));
    let machines = env.running(cluster, 3);

    // The workload cluster's own API, through the load balancer on 127.0.0.1.
    let wl = env.workload_kubeconfig(cluster);
    let nodes = env.eventually("3 Ready workload Nodes", 60, || {
        let (ok, out) = env.kubectl_with(&wl, &["get", "nodes", "-o", "json"], None);
        let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        let items = v["items"].as_array()?.clone();
        let ready = items
            .iter()
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        (items.len() == 3 && ready == 3).then_some(items)
    });
    for m in &machines {
        let name = m["metadata"]["name"].as_str().expect("name");
        let want = format!("docker:////{}", container_of(cluster, name));
        assert_eq!(m["spec"]["providerID"], want.as_str(), "Machine {name}");
        let node = nodes
            .iter()
            .find(|n| n["metadata"]["name"] == m["status"]["nodeRef"]["name"])
            .expect("nodeRef names a Node");
        assert_eq!(node["spec"]["providerID"], want.as_str(), "Node of {name}");
        let addrs = m["status"]["addresses"].as_array().expect("addresses");
        assert!(
            addrs.iter().any(|a| a["type"] == "InternalIP"),
            "{name} has an InternalIP: {addrs:?}"
        );
        // The node image's kubeadm ran CABPK's user data: it named the Node after the host
        // (the container, as kind's), and left a control plane its admin.conf and PKI, a
        // worker its kubelet.conf and nothing that signs.
        let container = container_of(cluster, name);
        assert_eq!(
            node["metadata"]["name"],
            container.as_str(),
            "Node of {name}"
        );
        let exec = |args: &[&str]| {
            let out = Command::new("docker")
                .args(["exec", &engine(&container)])
                .args(args)
                .output()
                .expect("docker exec");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).to_string(),
            )
        };
        let (_, log) = exec(&["cat", "/var/log/capw-bootstrap.log"]);
        let control_plane = m["metadata"]["labels"]
            .get("cluster.x-k8s.io/control-plane")
            .is_some();
        if control_plane {
            assert!(
                log.contains("initialized successfully")
                    || log.contains("new control plane instance was created"),
                "{name}: {log}"
            );
            assert!(
                exec(&["test", "-s", "/etc/kubernetes/admin.conf"]).0,
                "{name}"
            );
            assert!(
                exec(&["test", "-s", "/etc/kubernetes/pki/sa.key"]).0,
                "{name}"
            );
        } else {
            assert!(
                log.contains("This node has joined the cluster"),
                "{name}: {log}"
            );
            assert!(
                exec(&["test", "-s", "/etc/kubernetes/kubelet.conf"]).0,
                "{name}"
            );
            assert!(
                !exec(&["test", "-e", "/etc/kubernetes/pki/ca.key"]).0,
                "{name}"
            );
            assert!(
                !exec(&["test", "-e", "/etc/kubernetes/admin.conf"]).0,
                "{name}"
            );
        }
    }
    let (ok, table) = env.kubectl_with(&wl, &["get", "nodes"], None);
    assert!(
        ok && table.matches(" Ready ").count() == 3,
        "kubectl get nodes on the workload cluster:\n{table}"
    );

    // One load balancer and three machines on the engine, on the cluster's network.
    let names: Vec<String> = containers(cluster).into_iter().map(|c| c.0).collect();
    assert_eq!(names.len(), 4, "containers: {names:?}");
    assert!(names.contains(&format!("{cluster}-lb")), "{names:?}");
    let table = env.must(&["get", "dockerclusters,dockermachines"]);
    let worker = machines
        .iter()
        .find(|m| {
            m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]
                == format!("{cluster}-md-0").as_str()
        })
        .expect("a worker of the MachineDeployment");
    let worker_name = worker["metadata"]["name"].as_str().expect("name");
    assert!(
        table.contains("127.0.0.1")
            && table.contains(&format!(
                "docker:////{}",
                container_of(cluster, worker_name)
            )),
        "{table}"
    );

    // The seed's upgrade flow: the control plane first, then the workers, each Machine a new
    // container; the workload cluster ends with only v1.29.10 Nodes and its API server Pod.
    let old: Vec<String> = machines
        .iter()
        .map(|m| m["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    assert!(
        machines.iter().all(|m| m["spec"]["version"] == "v1.28.13"),
        "{machines:?}"
    );
    let kcp = format!("{cluster}-control-plane");
    env.must(&[
        "patch",
        "kubeadmcontrolplane",
        &kcp,
        "--type=merge",
        "-p",
        r#"{"spec":{"version":"v1.29.10"}}"#,
    ]);
    // What `kubectl get kcp -w` shows, sampled: the roll is seen (a second Machine, then one
    // of the new version), and VERSION in status never runs ahead of the Machines.
    let mut seen_surge = false;
    let mut last = String::new();
    env.eventually("the control plane to roll to v1.29.10", 240, || {
        let cp = env.json(&["get", "kcp", &kcp]);
        let ms: Vec<Value> = env
            .machines(cluster)
            .into_iter()
            .filter(|m| m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"].is_string())
            .collect();
        seen_surge |= ms.len() == 2;
        let old_left = ms.iter().any(|m| m["spec"]["version"] == "v1.28.13");
        // What `kubectl get kcp -w` would print, each time it changes (shown on a failure).
        let line = format!(
            "kcp {} | {}",
            cp["status"],
            ms.iter()
                .map(|m| format!(
                    "{} {} {} node={}",
                    m["metadata"]["name"].as_str().unwrap_or_default(),
                    m["spec"]["version"],
                    m["status"]["phase"],
                    m["status"]["nodeRef"]["name"]
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if line != last {
            eprintln!("{line}");
            last = line;
        }
        assert!(
            !(old_left && cp["status"]["version"] == "v1.29.10"),
            "status.version ran ahead of the Machines: {cp}"
        );
        (ms.len() == 1
            && !old_left
            && ms[0]["status"]["phase"] == "Running"
            && cp["status"]["version"] == "v1.29.10"
            && cp["status"]["upToDateReplicas"] == 1)
            .then_some(())
    });
    assert!(
        seen_surge,
        "maxSurge 1: a second control-plane Machine first"
    );
    let table = env.must(&["get", "kcp", &kcp]);
    assert!(table.contains("v1.29.10"), "{table}");
    env.must(&[
        "patch",
        "machinedeployment",
        &format!("{cluster}-md-0"),
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"v1.29.10"}}}}"#,
    ]);
    env.eventually("the workers to roll to v1.29.10", 240, || {
        let ms = env.machines(cluster);
        let done = ms.iter().all(|m| {
            m["spec"]["version"] == "v1.29.10"
                && m["status"]["phase"] == "Running"
                && m["status"]["nodeRef"]["name"].is_string()
                && !old.contains(
                    &m["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
        });
        (ms.len() == 3 && done).then_some(())
    });
    env.eventually(
        "the workload cluster to list only v1.29.10 Nodes",
        120,
        || {
            let (ok, out) = env.kubectl_with(&wl, &["get", "nodes", "-o", "json"], None);
            let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
            let items = v["items"].as_array()?.clone();
            (items.len() == 3
                && items
                    .iter()
                    .all(|n| n["status"]["nodeInfo"]["kubeletVersion"] == "v1.29.10"))
            .then_some(())
        },
    );
    let cp_node = env
        .machines(cluster)
        .iter()
        .find(|m| m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"].is_string())
        .and_then(|m| m["status"]["nodeRef"]["name"].as_str().map(str::to_string))
        .expect("the control plane's Node");
    let pods = env.eventually(
        "the API server's mirror Pod to be Running and Ready",
        60,
        || {
            let (ok, out) = env.kubectl_with(&wl, &["get", "pods", "-n", "kube-system"], None);
            (ok && out.lines().any(|l| {
                l.starts_with(&format!("kube-apiserver-{cp_node} "))
                    && l.contains("1/1")
                    && l.contains("Running")
            }) && out.lines().count() == 2)
                .then_some(out)
        },
    );
    assert!(
        !pods.contains("etcd") && !pods.contains("scheduler"),
        "{pods}"
    );
    // The API server presents the version its machine was made for, and kube-system holds
    // the kubeadm configuration at that version, as kubeadm leaves it.
    let (ok, out) = env.kubectl_with(&wl, &["version", "-o", "json"], None);
    let v: Value = serde_json::from_str(&out).unwrap_or_default();
    assert!(
        ok && v["serverVersion"]["gitVersion"] == "v1.29.10",
        "{out}"
    );
    assert_eq!(v["serverVersion"]["minor"], "29", "{out}");
    let (ok, out) = env.kubectl_with(
        &wl,
        &[
            "get",
            "configmap",
            "kubeadm-config",
            "-n",
            "kube-system",
            "-o",
            "json",
        ],
        None,
    );
    let cm: Value = serde_json::from_str(&out).unwrap_or_default();
    let cc = cm["data"]["ClusterConfiguration"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ok && cc.contains("kind: ClusterConfiguration")
            && cc.contains("kubernetesVersion: v1.29.10")
            && cc.contains(&format!("clusterName: {cluster}")),
        "{out}"
    );
    // The new workers joined as kubeadm joins: a bootstrap token got each one a client
    // certificate through a kubelet CertificateSigningRequest, approved and signed.
    let (ok, csrs) = env.kubectl_with(&wl, &["get", "csr"], None);
    let issued = csrs
        .lines()
        .filter(|l| {
            l.contains("kubernetes.io/kube-apiserver-client-kubelet")
                && l.contains("system:bootstrap:")
                && l.contains("Approved,Issued")
        })
        .count();
    assert!(
        ok && issued >= 2,
        "kubectl get csr on the workload cluster:\n{csrs}"
    );
    env.eventually("the replaced containers to be gone", 60, || {
        let names: Vec<String> = containers(cluster).into_iter().map(|c| c.0).collect();
        (names.len() == 4
            && !names
                .iter()
                .any(|n| old.iter().any(|o| n.ends_with(o.as_str()))))
        .then_some(())
    });

    env.must(&["delete", "cluster", cluster, "--timeout=120s"]);
    env.eventually("every object of the cluster to be gone", 60, || {
        let (ok, out) = env.kubectl(&[
            "get",
            "machinedeployments,machinesets,machines,dockermachines,dockerclusters,kubeadmconfigs,kubeadmcontrolplanes",
            "-o",
            "name",
        ]);
        (ok && out.trim().is_empty()).then_some(())
    });
    assert!(
        containers(cluster).is_empty(),
        "containers left: {:?}",
        containers(cluster)
    );
    let networks = docker(&[
        "network",
        "ls",
        "--filter",
        "label=capw.dev/managed-by=capw",
        "--format",
        "{{.Name}}",
    ]);
    assert!(
        !networks
            .lines()
            .any(|n| n == engine(&format!("capw-{cluster}"))),
        "networks left: {networks}"
    );
    let secrets = env.must(&["get", "secrets", "-o", "name"]);
    assert!(!secrets.contains(cluster), "Secrets left: {secrets}");
}

#[test]
fn upstream_capd_manifests_apply() {
    let _shared = shared_engine();
    let _engine = Engine::clean("capd-upstream");
    let env = Env::start();
    let text =
        std::fs::read_to_string(support::repo_root().join("host/tests/data/capd-upstream.yaml"))
            .expect("fixture");
    env.apply(&text);
    // Kept as written (nothing pruned or refused) and served under the same names.
    let dc = env.json(&["get", "dockercluster", "capd-upstream"]);
    assert_eq!(dc["spec"]["loadBalancer"]["imageRepository"], "kindest");
    assert_eq!(dc["spec"]["failureDomains"][1]["name"], "fd2");
    let dmt = env.json(&[
        "get",
        "dockermachinetemplate",
        "capd-upstream-control-plane",
    ]);
    assert_eq!(
        dmt["spec"]["template"]["spec"]["customImage"],
        "kindest/node:v1.33.1"
    );
    assert_eq!(
        dmt["spec"]["template"]["spec"]["extraMounts"][0]["containerPath"],
        "/var/run/docker.sock"
    );
    let c = env.json(&["get", "cluster", "capd-upstream"]);
    assert_eq!(c["spec"]["controlPlaneRef"]["kind"], "KubeadmControlPlane");
    // The DockerCluster is provisioned like any other; the failure domains are copied.
    env.eventually("the upstream DockerCluster to be provisioned", 120, || {
        let dc = env.json(&["get", "dockercluster", "capd-upstream"]);
        (dc["status"]["initialization"]["provisioned"] == true).then_some(())
    });
    let dc = env.json(&["get", "dockercluster", "capd-upstream"]);
    assert_eq!(
        dc["spec"]["controlPlaneEndpoint"]["host"], "127.0.0.1",
        "{dc}"
    );
    env.delete_cluster("capd-upstream");
}

#[test]
fn hot_reload_of_the_docker_plugin_keeps_containers_and_v2_labels_new_ones() {
    let mut env = Env::start();
    let cluster = "reload";
    let _engine = Engine::clean(cluster);
    env.apply(&quickstart(cluster));
    env.running(cluster, 3);
    let before = containers(cluster);
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(
        before.iter().all(|c| c.2.is_empty()),
        "v1 puts no version label: {before:?}"
    );
    let errors_before =
        env.metric("capw_plugin_errors_total") + env.metric("capw_plugin_traps_total");
    let reconcile_errors_before = env.metric("capw_reconcile_errors_total");

    std::fs::copy(
        support::plugin("docker-v2.wasm"),
        env.plugins.join("docker.wasm"),
    )
    .expect("swap in v2");
    env.eventually("docker 0.2.0 to be active", 120, || {
        let v = env.must(&[
            "get",
            "wasmprovider",
            "docker",
            "-o",
            "jsonpath={.status.activeVersion}",
        ]);
        (v.trim() == "0.2.0").then_some(())
    });
    // A new worker after the swap is created by v2.
    let extra = quickstart(cluster)
        .split("---\n")
        .filter(|d| d.contains("name: reload-worker-0") && !d.contains("kind: Cluster\n"))
        .map(|d| d.replace("reload-worker-0", "reload-worker-2"))
        .collect::<Vec<_>>()
        .join("---\n");
    env.apply(&extra);
    env.running(cluster, 4);
    // Existing objects are reconciled again (the resync) by v2.
    env.eventually("every DockerMachine to be reconciled by 0.2.0", 90, || {
        let dms = env.json(&[
            "get",
            "dockermachines",
            "-l",
            &format!("cluster.x-k8s.io/cluster-name={cluster}"),
        ]);
        let items = dms["items"].as_array()?.clone();
        (items.len() == 4
            && items.iter().all(|d| {
                d["metadata"]["annotations"]["runtime.capw.dev/plugin-version"] == "docker/0.2.0"
            }))
        .then_some(())
    });

    let after = containers(cluster);
    for (name, id, _) in &before {
        assert!(
            after.iter().any(|(n, i, _)| n == name && i == id),
            "{name} was recreated: {after:?}"
        );
    }
    let new = after
        .iter()
        .find(|c| c.0 == format!("{cluster}-worker-2"))
        .expect("the new worker's container");
    assert_eq!(new.2, "0.2.0", "v2 labels what it creates: {after:?}");
    assert_eq!(
        env.metric("capw_plugin_errors_total") + env.metric("capw_plugin_traps_total"),
        errors_before,
        "no plugin call failed after the swap"
    );
    assert_eq!(
        env.metric("capw_reconcile_errors_total"),
        reconcile_errors_before,
        "no reconcile failed after the swap"
    );
    env.delete_cluster(cluster);
    env.kill9_host();
}

#[test]
fn a_container_removed_out_of_band_shows_on_the_machine_and_is_recreated() {
    let _shared = shared_engine();
    let env = Env::start();
    let cluster = "oob";
    let _engine = Engine::clean(cluster);
    env.apply(&quickstart(cluster));
    env.running(cluster, 3);
    let victim = format!("{cluster}-worker-1");
    let old_id = containers(cluster)
        .into_iter()
        .find(|c| c.0 == victim)
        .expect("victim")
        .1;
    // A watch sees every state the Machine passes through, however briefly.
    let mut watch = support::KillOnDrop(
        Command::new("/usr/bin/kubectl")
            .args([
                "get",
                "machine",
                &format!("{cluster}-worker-1"),
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .env("KUBECONFIG", &env.api.kubeconfig)
            .env("HOME", &env.home)
            .stdout(Stdio::piped())
            .spawn()
            .expect("kubectl watch"),
    );
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let stdout = watch.stdout.take().expect("watch stdout");
    let sink = seen.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().expect("lock").push_str(&line);
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    docker(&["rm", "-f", &engine(&victim)]);

    env.eventually("the worker's container to be created again", 60, || {
        containers(cluster)
            .into_iter()
            .find(|c| c.0 == victim && c.1 != old_id)
            .map(|_| ())
    });
    env.eventually(
        "the Machine to show ContainerRecreated in a condition",
        60,
        || {
            seen.lock()
                .expect("lock")
                .contains("ContainerRecreated")
                .then_some(())
        },
    );
    drop(watch);
    env.eventually(
        "the Machine's InfrastructureReady to be True again",
        60,
        || {
            let m = env
                .machines(cluster)
                .into_iter()
                .find(|m| m["metadata"]["name"] == format!("{cluster}-worker-1"))?;
            (condition(&m, "InfrastructureReady")?["status"] == "True").then_some(())
        },
    );
    env.running(cluster, 3);
    // The new container's node agent registered its Node again, and it is Ready.
    env.eventually("the recreated worker's node agent to register", 60, || {
        let out = Command::new("docker")
            .args([
                "exec",
                &engine(&victim),
                "cat",
                "/var/log/capw-node-agent.log",
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains("registered")
            .then_some(())
    });
    let wl = env.workload_kubeconfig(cluster);
    // kubeadm names the Node after the host, which is the container, as kind's nodes.
    let (ok, out) = env.kubectl_with(&wl, &["get", "node", &victim, "--no-headers"], None);
    assert!(
        ok && out.contains(" Ready "),
        "the recreated worker's Node: {out}"
    );
    env.delete_cluster(cluster);
}

#[test]
fn a_host_killed_mid_provisioning_leaves_no_duplicate_and_no_orphan() {
    let _shared = shared_engine();
    let mut env = Env::start();
    let cluster = "crashy";
    let _engine = Engine::clean(cluster);
    env.apply(&quickstart(cluster));
    env.mid_provisioning(cluster);
    env.kill9_host();
    env.start_host();
    let machines = env.running(cluster, 3);
    let got = containers(cluster);
    let mut names: Vec<&str> = got.iter().map(|c| c.0.as_str()).collect();
    names.sort();
    let mut want: Vec<String> = machines
        .iter()
        .map(|m| container_of(cluster, m["metadata"]["name"].as_str().unwrap_or_default()))
        .chain([format!("{cluster}-lb")])
        .collect();
    want.sort();
    assert_eq!(
        names, want,
        "exactly one container per Machine plus the load balancer"
    );
    env.delete_cluster(cluster);
}

#[test]
fn a_docker_engine_restarted_during_provisioning_and_the_cluster_converges() {
    let _alone = ENGINE.write().unwrap_or_else(|p| p.into_inner());
    let cluster = "restart";
    let _engine = Engine::clean(cluster);
    let env = Env::start();
    env.apply(&quickstart(cluster));
    env.mid_provisioning(cluster);
    restart_dockerd();
    let machines = env.running(cluster, 3);
    let wl = env.workload_kubeconfig(cluster);
    env.eventually(
        "3 Ready workload Nodes after the engine restart",
        120,
        || {
            let (ok, out) = env.kubectl_with(&wl, &["get", "nodes"], None);
            (ok && out.matches(" Ready ").count() == 3).then_some(())
        },
    );
    assert_eq!(machines.len(), 3);
    assert_eq!(containers(cluster).len(), 4, "{:?}", containers(cluster));
    env.delete_cluster(cluster);
}

/// SECURITY.md "container-runtime", images: the default grant `capw-node:*` is the repository
/// `capw-node` with any tag, matched on the parsed reference. `capw-node:5000/anything:tag`
/// (the repository `anything` on a registry `capw-node:5000`), tagged on the engine so that a
/// text match would run it, is refused on the DockerMachine that asks for it, naming the rule;
/// no container of it exists, and the cluster's other Machines run on the node image.
#[test]
fn an_image_that_only_starts_like_an_allowed_one_is_refused() {
    let _shared = shared_engine();
    let cluster = "imgref";
    let _engine = Engine::clean(cluster);
    let env = Env::start();
    let sneaky = "capw-node:5000/anything:tag";
    docker(&["tag", capw_node::image::DEFAULT_TAG, sneaky]);
    let manifest = quickstart(cluster).replace(
        &format!("kind: DockerMachine\nmetadata:\n  name: {cluster}-worker-1\n  namespace: default\nspec: {{}}"),
        &format!("kind: DockerMachine\nmetadata:\n  name: {cluster}-worker-1\n  namespace: default\nspec:\n  customImage: {sneaky}"),
    );
    assert!(
        manifest.contains(sneaky),
        "the fixture's worker-1 was not found"
    );
    env.apply(&manifest);
    let refusal = env.eventually("worker-1's DockerMachine to show the refusal", 180, || {
        let dm = env.json(&["get", "dockermachine", &format!("{cluster}-worker-1")]);
        let c = condition(&dm, "PluginCallSucceeded")?;
        let msg = c["message"].as_str()?.to_string();
        (c["status"] == "False" && msg.contains("is not in the grant's images")).then_some(msg)
    });
    assert!(refusal.contains(sneaky), "{refusal}");
    assert!(refusal.contains("containerRuntime.images"), "{refusal}");
    // The honest Machines of the same cluster run; worker-1 never got a container.
    env.eventually("the control plane and worker-0 Running", 180, || {
        let ms = env.machines(cluster);
        let running = ms
            .iter()
            .filter(|m| m["status"]["phase"] == "Running")
            .count();
        (running == 2).then_some(())
    });
    let all = docker(&["ps", "-a", "--format", "{{.Names}} {{.Image}}"]);
    assert!(
        !all.lines().any(|l| l.ends_with(sneaky)),
        "a container of {sneaky} exists:\n{all}"
    );
    assert!(
        !containers(cluster)
            .iter()
            .any(|c| c.0 == format!("{cluster}-worker-1")),
        "worker-1 has a container"
    );
    env.delete_cluster(cluster);
    let _ = Command::new("docker").args(["rmi", sneaky]).output();
}

/// `capw image build` again from the same binaries keeps the image; from other binaries it
/// imports a new one and removes the one it replaced, so rebuilds leave no untagged copies of
/// capw on the engine's disk.
#[test]
fn rebuilding_the_node_image_keeps_an_unchanged_one_and_removes_a_replaced_one() {
    let _shared = shared_engine();
    support::node_image();
    let tag = "capw-node:rebuild-check";
    let dir = tempfile::tempdir().unwrap();
    // Two static busyboxes that differ by a trailing byte, which the ELF loader ignores.
    let busybox = |name: &str| {
        // busybox dispatches on its own file name.
        let p = dir.path().join(name).join("busybox");
        std::fs::create_dir(dir.path().join(name)).unwrap();
        let mut bytes = std::fs::read("/bin/busybox").expect("/bin/busybox (busybox-static)");
        bytes.extend_from_slice(name.as_bytes());
        std::fs::write(&p, bytes).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let (a, b) = (busybox("a"), busybox("b"));
    let build = |busybox: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["image", "build", "--tag", tag, "--busybox"])
            .arg(busybox)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let id = || {
        docker(&["image", "inspect", "--format", "{{.Id}}", tag])
            .trim()
            .to_string()
    };
    let _ = Command::new("docker").args(["rmi", tag]).output();

    let first = build(&a);
    assert!(first.contains(&format!("built {tag}")), "{first}");
    let first_id = id();
    let again = build(&a);
    assert!(
        again.contains(&format!("{tag} is up to date ({first_id})")),
        "{again}"
    );
    assert_eq!(id(), first_id, "the unchanged image was replaced");

    let other = build(&b);
    assert!(other.contains(&format!("built {tag}")), "{other}");
    assert_ne!(id(), first_id, "a different busybox kept the old image");
    let old = Command::new("docker")
        .args(["image", "inspect", &first_id])
        .output()
        .unwrap();
    assert!(
        !old.status.success(),
        "the replaced image {first_id} is still on the engine"
    );
    docker(&["rmi", tag]);
}
