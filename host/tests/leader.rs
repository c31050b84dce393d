//! Leader election between real processes: two `capw run` hosts against one `capw apiserver`.
//! Only the host holding the Lease reconciles (each host's own `/metrics` says so); when it is
//! killed with SIGKILL in the middle of provisioning, the other takes over within the lease's
//! bound and finishes every cluster, with no Machine made twice and no VM without a Machine.
//! A leader whose API server restarts within the renew deadline keeps leading and carries on.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{ApiServer, KillOnDrop, http_get, kube_client};

const CLUSTERS: usize = 20;
/// Three control-plane Machines and three workers, as the example has them.
const MACHINES: usize = 6;
const LEASE: &str = "capw-controller-leader-election";

/// One `capw run` process, its stdout lines and its log.
struct Host {
    child: KillOnDrop,
    metrics: u16,
    out: Arc<Mutex<Vec<String>>>,
    log: PathBuf,
}

/// `capw run` against `server` with the in-memory example's providers, and `extra` flags.
fn host(server: &ApiServer, dir: &Path, name: &str, extra: &[&str]) -> Host {
    let home = dir.join(name);
    let plugins = home.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    for p in ["inmemory", "bootstrap", "control-plane"] {
        std::fs::copy(
            support::plugin(&format!("{p}.wasm")),
            plugins.join(format!("{p}.wasm")),
        )
        .expect("copy plugin");
    }
    std::fs::write(plugins.join("inmemory.yaml"), "capabilities: [sim-cloud]\n").expect("yaml");
    let log = home.join("host.log");
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["run", "--metrics", "127.0.0.1:0", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .arg("--plugins")
            .arg(&plugins)
            .arg("--cache-dir")
            .arg(home.join("cache"))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("capw run starts"),
    );
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut metrics = 0;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if let Some(addr) = line.strip_prefix("metrics at http://") {
            metrics = addr
                .trim_end_matches("/metrics")
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("metrics port");
            break;
        }
    }
    assert!(metrics > 0, "capw run printed no metrics address");
    let out = Arc::new(Mutex::new(vec![]));
    let sink = out.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Host {
        child,
        metrics,
        out,
        log,
    }
}

impl Host {
    /// The sum of every sample of `name` on this host's `/metrics` (0 when it has none).
    fn metric(&self, name: &str) -> f64 {
        http_get(self.metrics, "/metrics")
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn reconciles(&self) -> f64 {
        self.metric("capw_reconcile_total")
    }

    /// The identity it printed once it led.
    fn leading_as(&self) -> Option<String> {
        self.out.lock().unwrap().iter().find_map(|l| {
            Some(
                l.strip_prefix("leading: Lease ")?
                    .rsplit(" as ")
                    .next()?
                    .to_string(),
            )
        })
    }

    /// Whether the host runs (past leading, its controllers started).
    fn started(&self) -> Option<()> {
        self.out
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("watching "))
            .then_some(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// Sends `signal` (`INT`, Ctrl-C, or `TERM`, Kubernetes stopping a Pod) and waits for a clean
/// exit, within a bound so that a host that ignored it fails the test instead of hanging it.
async fn stop(mut h: Host, signal: &str) {
    let pid = h.child.id().to_string();
    assert!(
        Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = exit(&mut h, 30, &format!("the host ignored SIG{signal}")).await;
    assert!(status.success(), "SIG{signal} is a clean exit: {status}");
}

/// How the host exited, waiting at most `secs`: past that, the test fails with `what`.
async fn exit(h: &mut Host, secs: u64, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = h.child.try_wait().expect("try_wait") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what} for {secs} s: {}",
            h.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The in-memory example: one Cluster `demo`, its control plane and a MachineDeployment.
fn example() -> String {
    std::fs::read_to_string(support::repo_root().join("examples/inmemory-cluster.yaml"))
        .expect("example")
}

/// The example `CLUSTERS` times over, named `c0`..: each its own Cluster, control plane and
/// MachineDeployment.
fn clusters() -> String {
    let example = example();
    (0..CLUSTERS)
        .map(|i| example.replace("demo", &format!("c{i}")))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// `kubectl apply` of `manifests`, again until kubectl knows every kind: the providers' CRDs
/// come as the leader `h` loads them. Returns kubectl's home under `dir`.
async fn apply(server: &ApiServer, dir: &Path, h: &Host, manifests: &str) -> PathBuf {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    wait(
        "kubectl apply",
        60,
        || h.log_tail(),
        || async {
            let (ok, _) = support::kubectl(
                &server.kubeconfig,
                &home,
                &["apply", "-f", "-"],
                Some(manifests),
            );
            ok.then_some(())
        },
    )
    .await;
    home
}

async fn wait<T, F, Fut>(what: &str, secs: u64, state: impl Fn() -> String, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    support::eventually(what, secs, state, f).await
}

/// Machines per cluster, and how many of them are Running with a Node.
async fn machines(client: &Client) -> BTreeMap<String, Vec<Machine>> {
    let api: Api<Machine> = Api::namespaced(client.clone(), "default");
    let mut out: BTreeMap<String, Vec<Machine>> = BTreeMap::new();
    for m in api
        .list(&ListParams::default())
        .await
        .expect("machines")
        .items
    {
        out.entry(m.spec.cluster_name.clone()).or_default().push(m);
    }
    out
}

fn running(m: &Machine) -> bool {
    m.status
        .as_ref()
        .is_some_and(|s| s.phase.as_deref() == Some("Running") && s.node_ref.is_some())
}

/// The providerIDs of the workload cluster's Nodes, through its kubeconfig Secret.
async fn node_provider_ids(client: &Client, cluster: &str) -> Option<BTreeSet<String>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s = secrets
        .get_opt(&format!("{cluster}-kubeconfig"))
        .await
        .ok()??;
    let value = s.data?.get("value")?.0.clone();
    let kc = kube::config::Kubeconfig::from_yaml(&String::from_utf8(value).ok()?).ok()?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .ok()?;
    let nodes: Api<Node> = Api::all(Client::try_from(cfg).ok()?);
    let list = nodes.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter_map(|n| n.spec?.provider_id)
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_lease_holder_reconciles_and_a_standby_finishes_what_a_killed_leader_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("api"));
    let client = kube_client(&server.kubeconfig).await;
    let leader = host(&server, dir.path(), "a", &[]);
    wait(
        "host a to take the free Lease",
        30,
        || leader.log_tail(),
        || async { leader.leading_as() },
    )
    .await;
    let standby = host(&server, dir.path(), "b", &[]);
    assert_eq!(standby.metric("capw_leader"), 0.0, "b found the Lease free");
    apply(&server, dir.path(), &leader, &clusters()).await;

    // Mid-provisioning: some Machines run, most do not yet.
    let total = CLUSTERS * MACHINES;
    wait(
        "some Machines Running (not all)",
        240,
        || leader.log_tail(),
        || async {
            let n: usize = machines(&client)
                .await
                .values()
                .map(|ms| ms.iter().filter(|m| running(m)).count())
                .sum();
            (n >= total / 3).then_some(())
        },
    )
    .await;
    let before: usize = machines(&client)
        .await
        .values()
        .map(|ms| ms.iter().filter(|m| running(m)).count())
        .sum();
    assert!(before < total, "everything ran before the kill ({before})");
    assert!(leader.reconciles() > 0.0, "the leader reconciled nothing");
    assert_eq!(leader.metric("capw_leader"), 1.0);
    assert_eq!(
        standby.reconciles(),
        0.0,
        "the standby reconciled while another host held the Lease"
    );
    assert_eq!(standby.metric("capw_leader"), 0.0);

    let mut leader = leader;
    leader.child.kill().expect("SIGKILL");
    leader.child.wait().expect("reaped");
    let killed = Instant::now();
    // The bound is the protocol's, not a speed: the Lease lapses 15 s after the last renewal
    // and the standby tries every 2 s (×1.2 jitter).
    let identity = wait(
        "the standby to lead within 20 s of the kill",
        20,
        || standby.log_tail(),
        || async { standby.leading_as() },
    )
    .await;
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(20), "took over after {took:?}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease = leases.get(LEASE).await.expect("the Lease");
    let spec = lease.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(identity.as_str()));
    assert!(spec.lease_transitions.unwrap_or_default() >= 1, "{spec:?}");
    assert_eq!(standby.metric("capw_leader"), 1.0);
    eprintln!("took over {took:?} after the SIGKILL, with {before}/{total} Machines Running");

    // Every cluster converges on the new leader.
    let clusters_api: Api<Cluster> = Api::namespaced(client.clone(), "default");
    wait(
        "every cluster Provisioned with all its Machines Running",
        360,
        || standby.log_tail(),
        || async {
            let provisioned = clusters_api
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|c| {
                    c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Provisioned")
                })
                .count();
            let ms = machines(&client).await;
            let running: usize = ms
                .values()
                .map(|v| v.iter().filter(|m| running(m)).count())
                .sum();
            (provisioned == CLUSTERS && running == total).then_some(())
        },
    )
    .await;
    assert!(standby.reconciles() > 0.0);
    let all = machines(&client).await;
    assert_eq!(all.len(), CLUSTERS);
    for (cluster, ms) in &all {
        let names: BTreeSet<String> = ms.iter().map(|m| m.name_any()).collect();
        assert_eq!(
            ms.len(),
            MACHINES,
            "{cluster}: Machines {names:?}: one was made twice"
        );
        let ids: BTreeSet<String> = ms
            .iter()
            .map(|m| m.spec.provider_id.clone().expect("providerID"))
            .collect();
        // A VM registers its Node: a Node with no Machine would be an orphaned VM, and a
        // Machine with no Node one whose VM did not come back.
        let nodes = wait(
            &format!("{cluster}'s Nodes to be exactly its Machines' VMs"),
            60,
            || standby.log_tail(),
            || async {
                let nodes = node_provider_ids(&client, cluster).await?;
                (nodes == ids).then_some(nodes)
            },
        )
        .await;
        assert_eq!(nodes.len(), MACHINES);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_exits_and_one_that_stops_hands_the_lease_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = ApiServer::start(&dir.path().join("api"));
    let fast = [
        // A long lease: a handover within 20 s can only be the release. The renew deadline
        // stays upstream's, so a busy machine's slow renewal is not a lost lease.
        "--leader-elect-lease-duration",
        "60s",
        "--leader-elect-renew-deadline",
        "10s",
        "--leader-elect-retry-period",
        "1s",
        "--leader-election-id",
        "fast",
    ];
    let a = host(&server, dir.path(), "a", &fast);
    wait(
        "a to lead",
        30,
        || a.log_tail(),
        || async { a.leading_as() },
    )
    .await;
    wait(
        "a's host to start",
        30,
        || a.log_tail(),
        || async { a.started() },
    )
    .await;
    let b = host(&server, dir.path(), "b", &fast);
    let c = host(&server, dir.path(), "c", &fast);
    // SIGTERM (a Pod stopped by a rolling update) releases the Lease, as Ctrl-C does: a standby
    // leads at its next try, not after the lease duration.
    stop(a, "TERM").await;
    let standbys = [b, c];
    let next = wait(
        "b or c to lead",
        10,
        || {
            standbys
                .iter()
                .map(Host::log_tail)
                .collect::<Vec<_>>()
                .join("\n")
        },
        || async { standbys.iter().position(|h| h.leading_as().is_some()) },
    )
    .await;
    let [b, c] = standbys;
    let (next, other) = if next == 0 { (b, c) } else { (c, b) };
    // Ctrl-C as soon as it leads, while it still starts its host (loads its plugins): a Ctrl-C
    // must not fall between listening for it as a standby and as a running leader.
    let started = next.started().is_some();
    stop(next, "INT").await;
    eprintln!("the next leader was interrupted with its host started: {started}");
    let b = other;
    wait(
        "the last standby to lead",
        10,
        || b.log_tail(),
        || async { b.leading_as() },
    )
    .await;
    wait(
        "its host to start",
        30,
        || b.log_tail(),
        || async { b.started() },
    )
    .await;

    // Without its API server the leader cannot renew: it exits with the reason.
    server.kill9();
    let mut b = b;
    let status = exit(&mut b, 60, "the leader kept running without renewing").await;
    assert!(!status.success(), "losing the Lease is a failure exit");
    let log = std::fs::read_to_string(&b.log).expect("log");
    assert!(
        log.contains("leader election lost") && log.contains("lost the Lease kube-system/fast"),
        "{}",
        b.log_tail()
    );
}

/// A management cluster's API server restarts (an upgrade, a crash) for less than the renew
/// deadline: the leader keeps the Lease, waits for it without spinning, and its watches pick
/// up where they were, so a scale made after the restart is carried out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_rides_out_an_api_server_restart_shorter_than_its_renew_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("api");
    let mut server = ApiServer::start(&data);
    let client = kube_client(&server.kubeconfig).await;
    let a = host(&server, dir.path(), "a", &[]);
    wait(
        "a to lead and start",
        60,
        || a.log_tail(),
        || async { a.leading_as().and(a.started()) },
    )
    .await;
    let home = apply(&server, dir.path(), &a, &example()).await;
    let all_running = |n: usize| {
        let client = client.clone();
        async move {
            let ms = machines(&client).await;
            let ms = ms.get("demo")?;
            (ms.len() == n && ms.iter().all(running)).then_some(())
        }
    };
    wait(
        "the example's Machines Running",
        240,
        || a.log_tail(),
        || all_running(MACHINES),
    )
    .await;

    server.kill9();
    let pid = a.child.id().to_string();
    let before = support::process::cpu_seconds(&pid);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let spent = support::process::cpu_seconds(&pid) - before;
    server.restart(&data);
    eprintln!("the host spent {spent:.2} s of CPU in the 4 s without its API server");
    // A resource bound, not a speed: a watch that retried without backoff spent a whole core
    // here (about 4 s); waiting on backoff costs a small fraction of that.
    assert!(
        spent < 1.5,
        "the host spent {spent:.2} s of CPU in 4 s without its API server: {}",
        a.log_tail()
    );

    let (ok, out) = support::kubectl(
        &server.kubeconfig,
        &home,
        &["scale", "machinedeployment", "demo-md-0", "--replicas=4"],
        None,
    );
    assert!(ok, "kubectl scale: {out}");
    wait(
        "the scaled-up worker Running after the restart",
        180,
        || a.log_tail(),
        || all_running(MACHINES + 1),
    )
    .await;
    assert_eq!(
        a.metric("capw_leader"),
        1.0,
        "a lost the Lease over a restart"
    );
    let mut a = a;
    assert!(a.child.try_wait().expect("try_wait").is_none(), "a exited");
}
