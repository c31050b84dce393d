//! The Docker provider against plain `docker run` and `docker exec`, side by side in one run.
//!
//! `scripts/build-plugins && cargo bench -p capw-cli --bench docker` (needs dockerd and the static
//! capw that `scripts/test` builds) starts `capw up` with the bundled providers, then for each of
//! CAPW_BENCH_ROUNDS rounds (default 3):
//! 1. capw: `kubectl apply` of the quickstart (1 control-plane Machine, 2 workers) until all three
//!    Machines are Running; the bootstrap data of each Machine is kept, then the cluster deleted;
//! 2. plain: the same containers from the same image with `docker run`, and the same bootstrap
//!    data run with `docker exec` (the files written, then each runcmd line), until the workload
//!    API lists three Ready Nodes.
//!
//! It prints both times per round, the capw/plain ratio, and capw's overhead per machine.

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_cloud_config::{CloudConfig, Command as RunCmd};
use serde_json::Value;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLUSTER: &str = "benchc";
const PLAIN: &str = "benchp";
const IMAGE: &str = capw_node::image::DEFAULT_TAG;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn docker(args: &[&str]) -> String {
    run(Command::new("docker").args(args))
}

fn docker_stdin(args: &[&str], stdin: &str) {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("docker");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    assert!(child.wait().expect("docker").success(), "docker {args:?}");
}

struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.args(args).env("KUBECONFIG", &self.kubeconfig);
        c
    }

    fn ok(&self, args: &[&str]) -> Option<String> {
        let out = self.cmd(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&run(&mut self.cmd(&all))).expect("json")
    }

    fn apply(&self, manifest: &str) {
        let mut child = self
            .cmd(&["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(manifest.as_bytes())
            .expect("write");
        assert!(child.wait().expect("kubectl").success(), "kubectl apply");
    }
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn decode_b64(s: &str) -> String {
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("base64");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(s.trim().as_bytes())
        .expect("write");
    String::from_utf8(child.wait_with_output().expect("base64").stdout).expect("utf-8")
}

/// What the capw round leaves for the plain round: the endpoint port and each machine's name
/// and cloud-config.
struct Captured {
    port: u16,
    /// Name, control plane or not, `spec.version`, bootstrap data.
    machines: Vec<(String, bool, String, String)>,
    /// The capw cluster's kubeconfig: the plain replay has the same CA, token and port.
    kubeconfig: String,
}

fn capw_round(k: &Kubectl) -> (Duration, Captured) {
    let manifest = std::fs::read_to_string(repo().join("examples/quickstart.yaml"))
        .expect("examples/quickstart.yaml")
        .replace("quickstart", CLUSTER);
    let selector = format!("cluster.x-k8s.io/cluster-name={CLUSTER}");
    let start = Instant::now();
    k.apply(&manifest);
    wait_for("the capw Machines to be Running", 300, || {
        let Some(out) = k.ok(&[
            "get",
            "machines",
            "-l",
            &selector,
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]) else {
            return false;
        };
        out.split_whitespace().filter(|p| *p == "Running").count() == 3
    });
    let took = start.elapsed();
    let cluster = k.json(&["get", "cluster", CLUSTER]);
    let port = cluster["spec"]["controlPlaneEndpoint"]["port"]
        .as_u64()
        .expect("endpoint port") as u16;
    let mut machines = vec![];
    for m in k.json(&["get", "machines", "-l", &selector])["items"]
        .as_array()
        .expect("items")
    {
        let name = m["metadata"]["name"].as_str().expect("name").to_string();
        let cp = m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"].is_string();
        let version = m["spec"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let secret = m["spec"]["bootstrap"]["dataSecretName"]
            .as_str()
            .expect("dataSecretName");
        let data = decode_b64(&run(&mut k.cmd(&[
            "get",
            "secret",
            secret,
            "-o",
            "jsonpath={.data.value}",
        ])));
        machines.push((name, cp, version, data));
    }
    machines.sort_by_key(|m| !m.1);
    let kubeconfig = decode_b64(&run(&mut k.cmd(&[
        "get",
        "secret",
        &format!("{CLUSTER}-kubeconfig"),
        "-o",
        "jsonpath={.data.value}",
    ])));
    run(&mut k.cmd(&["delete", "cluster", CLUSTER, "--timeout=120s"]));
    wait_for("the capw containers to be removed", 120, || {
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=capw.dev/cluster=default.{CLUSTER}"),
        ])
        .trim()
        .is_empty()
    });
    (
        took,
        Captured {
            port,
            machines,
            kubeconfig,
        },
    )
}

/// The same containers and bootstrap commands by hand.
fn plain_round(cap: &Captured, workload_kubeconfig: &Path) -> Duration {
    let net = format!("{PLAIN}-net");
    let lb = format!("{PLAIN}-lb");
    let start = Instant::now();
    docker(&["network", "create", &net]);
    docker(&[
        "run",
        "-d",
        "--name",
        &lb,
        "--network",
        &net,
        "-p",
        &format!("127.0.0.1:{}:6443", cap.port),
        IMAGE,
        "capw",
        "lb",
        "--listen",
        "0.0.0.0:6443",
        "--backends-file",
        "/etc/capw/lb-backends",
    ]);
    for (name, cp, version, data) in &cap.machines {
        let container = format!("{PLAIN}-{name}");
        // What the Docker provider sets: the hostname kubeadm names the Node after, and the
        // version the node image presents.
        docker(&[
            "run",
            "-d",
            "--name",
            &container,
            "--hostname",
            &container,
            "-e",
            &format!("CAPW_KUBERNETES_VERSION={version}"),
            "--network",
            &net,
            IMAGE,
        ]);
        if *cp {
            let ip = docker(&[
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                &container,
            ]);
            docker(&[
                "exec",
                &lb,
                "sh",
                "-c",
                &format!("echo {}:6443 > /etc/capw/lb-backends", ip.trim()),
            ]);
        }
        docker(&[
            "exec",
            &container,
            "sh",
            "-c",
            &format!(
                "mkdir -p /run/capw && echo docker:////{container} > /run/capw/provider-id && \
                 nohup capw lb --listen 127.0.0.1:{} --backend {lb}:6443 --backends-file /run/capw/none >/var/log/capw-endpoint.log 2>&1 &",
                cap.port
            ),
        ]);
        let cc = CloudConfig::parse(data).expect("cloud-config");
        if !*cp {
            // `kubeadm token create` on the control plane, as the host does for a worker.
            let join = cc
                .file("/run/kubeadm/kubeadm-join-config.yaml")
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let token = join
                .lines()
                .find_map(|l| l.trim().strip_prefix("token: "))
                .expect("a worker's join config names its token");
            let (id, secret) = capw_apiserver::bootstrap_token::parse(token).expect("token");
            let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(900)).to_string();
            let obj = capw_apiserver::bootstrap_token::secret_object(id, secret, &later);
            let k = Kubectl {
                kubeconfig: workload_kubeconfig.to_path_buf(),
            };
            let mut create = k.cmd(&["create", "-f", "-"]);
            create.stdin(Stdio::piped()).stdout(Stdio::null());
            let mut child = create.spawn().expect("kubectl");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(obj.to_string().as_bytes())
                .expect("write");
            assert!(
                child.wait().expect("kubectl").success(),
                "creating the token"
            );
        }
        for f in &cc.write_files {
            docker_stdin(
                &[
                    "exec",
                    "-i",
                    &container,
                    "sh",
                    "-c",
                    &format!("mkdir -p \"$(dirname {0})\" && cat > {0}", f.path),
                ],
                &f.content,
            );
        }
        for c in &cc.runcmd {
            let line = match c {
                RunCmd::Shell(s) => s.clone(),
                RunCmd::Argv(v) => v.join(" "),
            };
            docker(&["exec", &container, "sh", "-c", &line]);
        }
    }
    let k = Kubectl {
        kubeconfig: workload_kubeconfig.to_path_buf(),
    };
    wait_for("three Ready Nodes in the plain cluster", 300, || {
        k.ok(&["get", "nodes", "--no-headers"])
            .is_some_and(|o| o.matches(" Ready ").count() == 3)
    });
    let took = start.elapsed();
    let names: Vec<String> = cap
        .machines
        .iter()
        .map(|m| format!("{PLAIN}-{}", m.0))
        .chain([lb.clone()])
        .collect();
    let mut rm = vec!["rm", "-f"];
    rm.extend(names.iter().map(String::as_str));
    docker(&rm);
    docker(&["network", "rm", &net]);
    took
}

/// Seconds spent in the docker provider's reconciles so far (plugin call plus engine calls),
/// from the host's `/metrics`.
fn provider_seconds(metrics_port: u16) -> f64 {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text.lines()
        .filter(|l| {
            l.starts_with("capw_reconcile_duration_seconds_sum{controller=\"dockermachine\"}")
                || l.starts_with(
                    "capw_reconcile_duration_seconds_sum{controller=\"dockercluster\"}",
                )
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn main() {
    let rounds: usize = std::env::var("CAPW_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let capw = env!("CARGO_BIN_EXE_capw");
    run(Command::new(capw).args(["image", "build"]));
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let metrics = free_port();
    let mut up = Command::new(capw)
        .args(["up", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics", &format!("127.0.0.1:{metrics}")])
        .arg("--data-dir")
        .arg(&data)
        .arg("--plugins")
        .arg(repo().join("target/plugins/bundled"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("capw up");
    let k = Kubectl {
        kubeconfig: data.join("kubeconfig"),
    };
    for provider in ["docker", "bootstrap", "control-plane"] {
        wait_for(
            &format!("capw up with the {provider} provider"),
            180,
            || {
                k.ok(&[
                    "get",
                    "wasmprovider",
                    provider,
                    "-o",
                    "jsonpath={.status.activeVersion}",
                ])
                .is_some_and(|v| !v.is_empty())
            },
        );
    }
    println!(
        "round   capw (apply to 3 Running)   plain docker run/exec   ratio   docker provider time per machine"
    );
    let mut ratios = vec![];
    let mut overheads = vec![];
    let mut provider = vec![];
    for round in 1..=rounds {
        let before = provider_seconds(metrics);
        let (t_capw, cap) = capw_round(&k);
        // Includes the deletion's reconciles, which the plain round's `docker rm` matches.
        let per_machine = (provider_seconds(metrics) - before) / 3.0;
        provider.push(per_machine);
        let wl = dir.path().join("workload.kubeconfig");
        std::fs::write(&wl, &cap.kubeconfig).expect("write the workload kubeconfig");
        let t_plain = plain_round(&cap, &wl);
        let ratio = t_capw.as_secs_f64() / t_plain.as_secs_f64();
        ratios.push(ratio);
        overheads.push((t_capw.as_secs_f64() - t_plain.as_secs_f64()) / 3.0);
        println!(
            "{round:>5}   {:>24.2}s   {:>20.2}s   {ratio:>5.2}",
            t_capw.as_secs_f64(),
            t_plain.as_secs_f64()
        );
    }
    ratios.sort_by(f64::total_cmp);
    overheads.sort_by(f64::total_cmp);
    provider.sort_by(f64::total_cmp);
    println!(
        "median ratio capw/plain {:.2}; capw's extra wall time per machine {:.2}s; docker provider reconcile time per machine {:.3}s",
        ratios[ratios.len() / 2],
        overheads[overheads.len() / 2],
        provider[provider.len() / 2]
    );
    let _ = up.kill();
    let _ = up.wait();
}
