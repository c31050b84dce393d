//! AWS clusters on the EC2 emulator from apply to Running, next to the same shape on the
//! in-memory provider, in one run.
//!
//! `cargo bench --target x86_64-unknown-linux-musl -p capw-cli --bench aws` applies
//! CAPW_BENCH_CLUSTERS (default 20) copies of `examples/aws-cluster.yaml` (a control-plane Machine
//! and a MachineDeployment of two workers each) to a host running the AWS provider against moto
//! (`.tools/moto`, from `scripts/test`), with `capw sim ec2` booting the instances, and waits until
//! every Machine is Running with its Node. Then the same number of clusters of the same shape on
//! the in-memory provider (`examples/inmemory-cluster.yaml` with one control-plane Machine and
//! two workers). Each run has its own `capw apiserver` child process and host. It prints the time
//! from apply to all Running, the AWS calls per cluster (`capw_aws_calls_total`, by action) and
//! the management API requests per cluster.

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use capw_manager::{self as manager, ConnectTo, HostConfig};
use capw_runtime::capabilities::aws::Environment;
use common::{apiserver, repo, requests};
use kube::api::{Api, ApiResource, DynamicObject};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// moto on a free loopback port, with CAPA's AMIs; its URL.
fn moto() -> (KillOnDrop, String) {
    let server = repo().join(".tools/moto/bin/moto_server");
    assert!(
        server.exists(),
        "{} not found: run scripts/test once to install the EC2 emulator",
        server.display()
    );
    let port = free_port();
    let child = Command::new(server)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("MOTO_AMIS_PATH", repo().join("tests/aws/amis.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moto_server starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (KillOnDrop(child), format!("http://127.0.0.1:{port}"))
}

#[derive(Clone, Copy, PartialEq)]
enum Provider {
    Aws,
    InMemory,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Aws => "aws (moto + capw sim ec2)",
            Provider::InMemory => "inmemory",
        }
    }

    /// `n` clusters of one control-plane Machine and two workers.
    fn manifests(self, n: usize) -> String {
        let read = |f: &str| std::fs::read_to_string(repo().join(f)).expect("example");
        (0..n)
            .map(|i| match self {
                Provider::Aws => {
                    read("examples/aws-cluster.yaml").replace("aws-demo", &format!("aws-{i}"))
                }
                Provider::InMemory => read("examples/inmemory-cluster.yaml")
                    .replacen("replicas: 3", "replicas: 1", 1)
                    .replacen("replicas: 3", "replicas: 2", 1)
                    .replace("demo", &format!("mem-{i}")),
            })
            .collect::<Vec<_>>()
            .join("\n---\n")
    }
}

struct Outcome {
    provider: Provider,
    took: Duration,
    aws_calls: BTreeMap<String, u64>,
    requests: u64,
}

/// `capw_aws_calls_total` by action.
fn aws_calls(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("capw_aws_calls_total{"))
    {
        let action = l
            .split("action=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_string();
        let n: u64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(action).or_default() += n;
    }
    out
}

async fn run(provider: Provider, clusters: usize) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, kubeconfig) = apiserver(&dir.path().join("api"));
    let _api = KillOnDrop(api);
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config"),
    )
    .expect("client");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    let infra = match provider {
        Provider::Aws => "aws",
        Provider::InMemory => "inmemory",
    };
    for p in ["bootstrap", "control-plane", infra] {
        let from = repo().join(format!("target/plugins/{p}.wasm"));
        std::fs::copy(&from, plugins.join(format!("{p}.wasm")))
            .unwrap_or_else(|e| panic!("{}: {e}: run scripts/build-plugins", from.display()));
    }
    std::fs::copy(
        repo().join(format!("examples/plugins/{infra}.yaml")),
        plugins.join(format!("{infra}.yaml")),
    )
    .expect("drop-in manifest");

    let routes = dir.path().join("connect-to");
    let (_moto, _sim, aws) = if provider == Provider::Aws {
        let (moto, url) = moto();
        let sim = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_capw"))
                .args(["sim", "ec2", "--endpoint", &url, "--interval-ms", "500"])
                .arg("--connect-to")
                .arg(&routes)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "bench")
                .env("AWS_SECRET_ACCESS_KEY", "bench")
                .stdout(Stdio::null())
                .spawn()
                .expect("capw sim ec2 starts"),
        );
        let env = Environment::from_pairs([
            ("AWS_ENDPOINT_URL", url.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "bench"),
            ("AWS_SECRET_ACCESS_KEY", "bench"),
        ]);
        (Some(moto), Some(sim), env)
    } else {
        (None, None, Environment::default())
    };
    let mut config = HostConfig::new(plugins, dir.path().join("cache"));
    config.aws = aws;
    config.connect_to = ConnectTo::file(routes);
    config.dropin_interval = Duration::from_millis(200);
    let host = manager::start(client.clone(), config)
        .await
        .expect("host starts");

    let providers: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("runtime.capw.dev", "v1alpha1", "WasmProvider"),
            "wasmproviders",
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let l = providers.list(&Default::default()).await.expect("list");
        let active = l
            .items
            .iter()
            .filter(|p| p.data["status"]["activeVersion"].is_string())
            .count();
        if active == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the plugins did not load");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The kinds are served once their CRDs are established.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let manifest = dir.path().join("clusters.yaml");
    std::fs::write(&manifest, provider.manifests(clusters)).expect("manifest");
    let before = requests(&client).await;
    let start = Instant::now();
    let applied = Command::new("/usr/bin/kubectl")
        .args(["apply", "-f"])
        .arg(&manifest)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .stdout(Stdio::null())
        .status()
        .expect("kubectl runs");
    assert!(applied.success(), "kubectl apply failed");
    let machines: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
            "machines",
        ),
    );
    let want = clusters * 3;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let l = machines.list(&Default::default()).await.expect("list");
        let running = l
            .items
            .iter()
            .filter(|m| {
                m.data["status"]["phase"] == "Running"
                    && m.data["status"]["nodeRef"]["name"].is_string()
            })
            .count();
        if running >= want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{running}/{want} Machines Running after 900 s: {}",
            host.status_line()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = start.elapsed();
    Outcome {
        provider,
        took,
        aws_calls: aws_calls(&host.metrics.render()),
        requests: requests(&client).await - before,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    capw_manager::memory::no_transparent_huge_pages();
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let clusters: usize = std::env::var("CAPW_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut outcomes = vec![];
    for provider in [Provider::Aws, Provider::InMemory] {
        println!("{clusters} clusters on {} ...", provider.name());
        outcomes.push(run(provider, clusters).await);
    }
    println!(
        "\n{clusters} clusters (1 control-plane Machine + a MachineDeployment of 2), apply to every Machine Running with its Node"
    );
    println!(
        "{:<28} {:>10} {:>18} {:>22}",
        "provider", "seconds", "AWS calls/cluster", "API requests/cluster"
    );
    for o in &outcomes {
        let calls: u64 = o.aws_calls.values().sum();
        println!(
            "{:<28} {:>10.1} {:>18.1} {:>22.1}",
            o.provider.name(),
            o.took.as_secs_f64(),
            calls as f64 / clusters as f64,
            o.requests as f64 / clusters as f64
        );
    }
    if let [aws, mem] = outcomes.as_slice() {
        println!(
            "aws / inmemory wall time: x{:.2}",
            aws.took.as_secs_f64() / mem.took.as_secs_f64()
        );
        let mut by: Vec<(&String, &u64)> = aws.aws_calls.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        println!("AWS calls per cluster by action:");
        for (action, n) in by {
            println!("  {action:<32} {:>8.1}", *n as f64 / clusters as f64);
        }
    }
}
