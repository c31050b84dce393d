//! Side-by-side measurements of the embedded API server, in one run on one disk:
//!
//! (a) durable single-object create throughput (p50/p99 latency) through HTTPS + kube-rs,
//!     against the raw redb commit rate for records of the same size;
//! (b) watch delivery latency to 100 watchers;
//! (c) the time to LIST 10,000 objects;
//! (d) resident memory per 10,000 objects.
//!
//! Run: `cargo bench -p capw-apiserver --bench apiserver` (add `-- --quick` for a short run).
//! It prints figures and ratios; it asserts nothing about speed.

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_apiserver::{Config, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use redb::{Database, TableDefinition};
use std::time::{Duration, Instant};

const RAW: TableDefinition<u64, &[u8]> = TableDefinition::new("raw");

fn cm(name: &str, payload: usize) -> ConfigMap {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "data": {"p": "x".repeat(payload)}}),
    )
    .expect("cm")
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn raw_redb_commits(dir: &std::path::Path, n: usize, record: usize) -> f64 {
    let db = Database::create(dir.join("raw.redb")).expect("raw db");
    let value = vec![b'x'; record];
    let start = Instant::now();
    for i in 0..n as u64 {
        let txn = db.begin_write().expect("txn");
        {
            let mut t = txn.open_table(RAW).expect("table");
            t.insert(i, value.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn client(server: &Server) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let creates = if quick { 300 } else { 2000 };
    let list_n = if quick { 2000 } else { 10_000 };
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(Config::ephemeral(tmp.path().join("api")))
        .await
        .expect("server");
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server).await);

    // (a) sequential durable creates vs raw redb commits of the same record size.
    let sample = serde_json::to_vec(
        &api.create(&PostParams::default(), &cm("warmup", 256))
            .await
            .expect("create"),
    )
    .expect("json");
    let mut lat = Vec::with_capacity(creates);
    let start = Instant::now();
    for i in 0..creates {
        let t = Instant::now();
        api.create(&PostParams::default(), &cm(&format!("a{i}"), 256))
            .await
            .expect("create");
        lat.push(t.elapsed());
    }
    let ours = creates as f64 / start.elapsed().as_secs_f64();
    lat.sort();
    // The same with 16 concurrent clients: group commit shares each fsync between writers.
    let concurrent = std::sync::Arc::new(std::sync::Mutex::new(Vec::with_capacity(creates)));
    let start = Instant::now();
    futures::stream::iter(0..creates)
        .for_each_concurrent(16, |i| {
            let (api, concurrent) = (api.clone(), concurrent.clone());
            async move {
                let t = Instant::now();
                api.create(&PostParams::default(), &cm(&format!("p{i}"), 256))
                    .await
                    .expect("create");
                concurrent.lock().expect("lock").push(t.elapsed());
            }
        })
        .await;
    let ours16 = creates as f64 / start.elapsed().as_secs_f64();
    let mut lat16 = std::mem::take(&mut *concurrent.lock().expect("lock"));
    lat16.sort();
    // The store alone (no HTTP, TLS or JSON decoding): one durable commit per write.
    let record: serde_json::Value = serde_json::from_slice(&sample).expect("sample");
    let start = Instant::now();
    for i in 0..creates {
        let key = capw_apiserver::store::ObjKey::new("/configmaps", "default", &format!("s{i}"));
        let obj = record.clone();
        server
            .core()
            .store
            .write::<capw_apiserver::status::ApiError>(&key, false, move |_| {
                Ok(capw_apiserver::store::Proposed::Put(obj))
            })
            .await
            .expect("store write");
    }
    let store_only = creates as f64 / start.elapsed().as_secs_f64();
    let raw = raw_redb_commits(tmp.path(), creates, sample.len());
    println!(
        "(a) raw redb: one {} B record per durable commit: {raw:.0}/s",
        sample.len()
    );
    println!(
        "    store write alone:  {store_only:.0}/s; ratio to raw {:.2}",
        store_only / raw
    );
    println!(
        "    create, 1 client:   {ours:.0}/s (p50 {:?}, p99 {:?}); ratio to raw {:.2}",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        ours / raw
    );
    println!(
        "    create, 16 clients: {ours16:.0}/s (p50 {:?}, p99 {:?}); ratio to raw {:.2}",
        pct(&lat16, 0.5),
        pct(&lat16, 0.99),
        ours16 / raw
    );

    // (b) watch delivery latency to 100 watchers, measured from each write's 2xx.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let writes = if quick { 50 } else { 200 };
    let mut watchers = vec![];
    for _ in 0..100 {
        let api = api.clone();
        let stream = api
            .watch(&WatchParams::default().timeout(120), &rv)
            .await
            .expect("watch");
        watchers.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut seen = Vec::with_capacity(writes);
            while seen.len() < writes {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Added(c))) => {
                        seen.push((c.metadata.name.unwrap_or_default(), Instant::now()))
                    }
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut acked = std::collections::HashMap::new();
    for i in 0..writes {
        let name = format!("b{i}");
        api.create(&PostParams::default(), &cm(&name, 256))
            .await
            .expect("create");
        acked.insert(name, Instant::now());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut delivery = vec![];
    for w in watchers {
        for (name, at) in w.await.expect("watcher") {
            delivery.push(at.saturating_duration_since(acked[&name]));
        }
    }
    delivery.sort();
    println!(
        "(b) watch delivery to 100 watchers ({} events): p50 {:?}, p99 {:?}",
        delivery.len(),
        pct(&delivery, 0.5),
        pct(&delivery, 0.99)
    );

    // (c) and (d): fill to list_n objects, then LIST them all; resident memory per 10,000.
    let before = rss_kib();
    let have = server.core().store.object_count();
    let base = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .len();
    futures::stream::iter(base..list_n)
        .for_each_concurrent(8, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm(&format!("c{i}"), 256))
                    .await
                    .expect("create");
            }
        })
        .await;
    let added = server.core().store.object_count() - have;
    let after = rss_kib();
    let mut list_times = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        let n = api
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len();
        list_times.push(t.elapsed());
        assert!(n >= list_n);
    }
    list_times.sort();
    println!(
        "(c) LIST of {list_n} ConfigMaps (256 B payload) through kube-rs: median {:?}",
        list_times[2]
    );
    let per_10k = (after.saturating_sub(before)) as f64 * 10_000.0 / added.max(1) as f64 / 1024.0;
    println!(
        "(d) resident memory: +{:.1} MiB per 10,000 objects (RSS {} → {} KiB over {added} objects, incl. the watch-event window)",
        per_10k, before, after
    );
    server.shutdown().await;
}
