//! Where the API server's memory goes: a dhat heap profile of 10,000 small ConfigMaps created
//! through HTTPS and kube-rs, as in the `apiserver` benchmark's memory figure.
//!
//! The profiler starts once the server is up, so what it still holds at the end is what the
//! 10,000 objects cost: each live byte is charged to the innermost capw or library frame that
//! allocated it (allocator, serde and collection frames are skipped) and summed per function.
//!
//! Run: `cargo bench -p capw-apiserver --bench heap` (`CAPW_BENCH_OBJECTS` changes the count;
//! the profile is kept as `target/tmp/dhat-heap.json`, which dhat's viewer opens).

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

use capw_apiserver::{Config, Server};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::collections::HashMap;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "data": {"p": "x".repeat(256)}}),
    )
    .expect("cm")
}

/// Frames that say how, not who: the allocator, collections, serde, the runtime's plumbing.
const PLUMBING: &[&str] = &[
    "[root]",
    "alloc::",
    "<alloc::",
    "core::",
    "<core::",
    "std::",
    "<std::",
    "dhat::",
    "<dhat::",
    "hashbrown::",
    "<hashbrown::",
    "serde::",
    "<serde::",
    "serde_json::",
    "<serde_json::",
    "<&mut serde_json::",
    "bytes::",
    "<bytes::",
];

/// The function a frame names: `0x…: path::to::fn (file:line:col)` → `path::to::fn`.
fn function(frame: &str) -> &str {
    let f = frame.split_once(": ").map_or(frame, |(_, f)| f);
    let f = f.rsplit_once(" (").map_or(f, |(f, _)| f);
    f.trim_end_matches("::{{closure}}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // A profile another benchmark wrote (the clusters benchmark's `--features dhat-heap`).
    if let Ok(path) = std::env::var("CAPW_HEAP_PROFILE") {
        let n = std::env::var("CAPW_BENCH_CLUSTERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        summarize(
            std::path::Path::new(&path),
            "the profiled run",
            n,
            "cluster",
            0,
        );
        return;
    }
    let n: usize = std::env::var("CAPW_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(Config::ephemeral(tmp.path().join("api")))
        .await
        .expect("server");
    let kc = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let api: Api<ConfigMap> = Api::default_namespaced(kube::Client::try_from(cfg).expect("client"));
    api.create(&PostParams::default(), &cm("warmup"))
        .await
        .expect("create");

    let out = tmp.path().join("dhat-heap.json");
    let profiler = dhat::Profiler::builder()
        .file_name(&out)
        .trim_backtraces(Some(24))
        .build();
    futures::stream::iter(0..n)
        .for_each_concurrent(8, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm(&format!("c{i}")))
                    .await
                    .expect("create");
            }
        })
        .await;
    // Let responses and connections settle so only what is kept remains.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let stats = dhat::HeapStats::get();
    drop(profiler);

    summarize(
        &out,
        &format!("creating {n} ConfigMaps"),
        n,
        "object",
        stats.curr_bytes as u64,
    );
    server.shutdown().await;

    // What one simulated workload cluster's API server costs while idle (the in-memory
    // provider runs one per cluster): `CAPW_BENCH_WORKLOADS` of them, started as sim_cloud does.
    let workloads: usize = std::env::var("CAPW_BENCH_WORKLOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let (ca, key) = capw_apiserver::tls::generate_ca().expect("ca");
    let out = tmp.path().join("dhat-workloads.json");
    let profiler = dhat::Profiler::builder()
        .file_name(&out)
        .trim_backtraces(Some(24))
        .build();
    let mut servers = Vec::with_capacity(workloads);
    for _ in 0..workloads {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        servers.push(
            capw_apiserver::InMemoryServer::start(listener, &ca, &key, "t".into(), &[])
                .await
                .expect("workload server"),
        );
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let stats = dhat::HeapStats::get();
    drop(profiler);
    summarize(
        &out,
        &format!("starting {workloads} idle workload API servers"),
        workloads,
        "server",
        stats.curr_bytes as u64,
    );
    drop(servers);
}

/// Prints the live bytes at the end of the profile in `path`, by allocating function.
fn summarize(path: &std::path::Path, what: &str, n: usize, unit: &str, process: u64) {
    let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(path.file_name().expect("file name"));
    if kept != path {
        let _ = std::fs::copy(path, &kept);
    }
    let profile: Value =
        serde_json::from_slice(&std::fs::read(path).expect("profile")).expect("json");
    let frames: Vec<&str> = profile["ftbl"]
        .as_array()
        .expect("ftbl")
        .iter()
        .map(|f| f.as_str().unwrap_or(""))
        .collect();
    let mut by_fn: HashMap<String, (u64, u64)> = HashMap::new();
    for pp in profile["pps"].as_array().expect("pps") {
        let (bytes, blocks) = (
            pp["eb"].as_u64().unwrap_or(0),
            pp["ebk"].as_u64().unwrap_or(0),
        );
        if bytes == 0 {
            continue;
        }
        let owner = pp["fs"]
            .as_array()
            .expect("fs")
            .iter()
            .filter_map(|i| frames.get(i.as_u64()? as usize))
            .map(|f| function(f))
            .find(|f| !PLUMBING.iter().any(|p| f.starts_with(p)))
            .unwrap_or("(allocator plumbing only)");
        let e = by_fn.entry(owner.to_string()).or_default();
        e.0 += bytes;
        e.1 += blocks;
    }
    let mut rows: Vec<_> = by_fn.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.0));
    let total: u64 = rows.iter().map(|r| r.1.0).sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "\nlive heap allocated while {what}: {:.1} MiB ({:.0} B per {unit}); whole process now {:.1} MiB",
        mib(total),
        total as f64 / n as f64,
        mib(process)
    );
    println!(
        "{:>9}  {:>8}  allocated by ({})",
        "MiB",
        "blocks",
        kept.display()
    );
    for (f, (bytes, blocks)) in rows.iter().take(20) {
        println!("{:>9.2}  {blocks:>8}  {f}", mib(*bytes));
    }
}
