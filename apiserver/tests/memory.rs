//! The API server's resident cost per object, a size check and not a timing: 10,000 small
//! ConfigMaps (256 B payload) created through HTTPS must add under 80 MiB to the resident set,
//! twice the 40 MiB target that `cargo bench -p capw-apiserver --bench apiserver` measures.
//! Keeping each object as a decoded tree cost 114–198 MiB per 10,000 (about 20 KB each) and
//! fails it. A process of its own, so no other test's memory is counted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_apiserver::{Config, Server};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};

const OBJECTS: usize = 10_000;
const BOUND_MIB: f64 = 80.0;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "data": {"p": "x".repeat(256)}}),
    )
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, prefix: &str, n: usize) {
    futures::stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm(&format!("{prefix}{i}")))
                    .await
                    .unwrap();
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects_stay_within_twice_the_memory_target() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Config::ephemeral(dir.path().join("api")))
        .await
        .unwrap();
    let kc = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(kube::Client::try_from(cfg).unwrap());
    // Connections, buffers and caches that do not grow with the object count come first.
    create(&api, "warm", 200).await;
    let before = rss_kib();
    create(&api, "o", OBJECTS).await;
    let after = rss_kib();
    let listed = api.list(&ListParams::default()).await.unwrap().items.len();
    assert_eq!(listed, OBJECTS + 200, "every created object is stored");
    let mib = after.saturating_sub(before) as f64 / 1024.0;
    println!("{OBJECTS} ConfigMaps: +{mib:.1} MiB resident ({before} → {after} KiB)");
    assert!(
        mib < BOUND_MIB,
        "{OBJECTS} ConfigMaps added {mib:.1} MiB to the API server's resident set; the bound is {BOUND_MIB} MiB (twice the 40 MiB target): see docs/benchmarks.md for the heap profile"
    );
    server.shutdown().await;
}
