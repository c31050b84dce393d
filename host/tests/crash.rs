//! Crash safety: `capw apiserver` runs as a child process and is killed with SIGKILL in the
//! middle of a 3000-write burst, ten times over. Half of the kills come after the journal has
//! moved to its other file once or twice (every 1024 writes), with a checkpoint possibly still
//! running. After every restart each acknowledged write is present with the resourceVersion it
//! was acknowledged with, and no resourceVersion is ever handed out twice.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use support::{ApiServer, kube_client};

const ROUNDS: usize = 10;
const BURST: usize = 3000;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "data": {"payload": "x".repeat(256)}}),
    )
    .expect("config map")
}

async fn verify(server: &ApiServer, acked: &BTreeMap<String, u64>) -> u64 {
    let api: Api<ConfigMap> = Api::default_namespaced(kube_client(&server.kubeconfig).await);
    let list = api
        .list(&ListParams::default())
        .await
        .expect("list after restart");
    let stored: BTreeMap<String, u64> = list
        .items
        .iter()
        .map(|c| {
            let rv = c
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .expect("numeric RV");
            (c.metadata.name.clone().expect("name"), rv)
        })
        .collect();
    for (name, rv) in acked {
        assert_eq!(
            stored.get(name),
            Some(rv),
            "acknowledged write {name} (RV {rv}) lost or changed"
        );
    }
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("list RV");
    assert!(
        acked.values().all(|rv| *rv <= list_rv),
        "RV counter went backwards"
    );
    list_rv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_write_bursts_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    let mut every_rv: BTreeSet<u64> = BTreeSet::new();
    for round in 0..ROUNDS {
        let mut server = ApiServer::start(&data);
        verify(&server, &acked).await;
        let api: Api<ConfigMap> = Api::default_namespaced(kube_client(&server.kubeconfig).await);
        let done: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let burst = {
            let done = done.clone();
            tokio::spawn(async move {
                futures::stream::iter(0..BURST)
                    .for_each_concurrent(16, |i| {
                        let (api, done) = (api.clone(), done.clone());
                        async move {
                            let name = format!("r{round}-{i}");
                            if let Ok(cm) =
                                api.create(&PostParams::default(), &config_map(&name)).await
                            {
                                let rv = cm
                                    .metadata
                                    .resource_version
                                    .and_then(|r| r.parse().ok())
                                    .expect("RV");
                                done.lock().expect("lock").push((name, rv));
                            }
                        }
                    })
                    .await;
            })
        };
        // Kill somewhere inside the burst, at a different point each round.
        let kill_after = 50 + round * 283 % 2900;
        while done.lock().expect("lock").len() < kill_after {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        server.kill9();
        let _ = burst.await;
        let round_acks = std::mem::take(&mut *done.lock().expect("lock"));
        assert!(
            round_acks.len() < BURST,
            "round {round}: the kill came after the burst finished"
        );
        for (name, rv) in round_acks {
            assert!(
                every_rv.insert(rv),
                "resourceVersion {rv} was handed out twice"
            );
            acked.insert(name, rv);
        }
    }
    let server = ApiServer::start(&data);
    let final_rv = verify(&server, &acked).await;
    let api: Api<ConfigMap> = Api::default_namespaced(kube_client(&server.kubeconfig).await);
    let next = api
        .create(&PostParams::default(), &config_map("after"))
        .await
        .expect("write after recovery");
    let next_rv: u64 = next
        .metadata
        .resource_version
        .and_then(|r| r.parse().ok())
        .expect("RV");
    assert!(next_rv > final_rv && !every_rv.contains(&next_rv));
}
