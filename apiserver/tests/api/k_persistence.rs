//! K. Persistence and restart (the kill -9 crash loop runs against the `capw` binary in
//! `host/tests/crash.rs`).

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn k126_k127_restart_keeps_objects_rvs_and_the_watch_window() {
    let t = start().await;
    install_widgets(&t).await;
    for i in 0..5 {
        t.send_json(
            "POST",
            W,
            "application/json",
            &widget(&format!("w{i}"), "red"),
        )
        .await;
    }
    let before = t.get(W).await.json();
    let resume_from = t.server.core().store.current_rv();
    t.send_json(
        "PATCH",
        &format!("{W}/w1"),
        "application/merge-patch+json",
        &json!({"spec":{"color":"blue"}}),
    )
    .await;
    t.raw("DELETE", &format!("{W}/w2"), &[], vec![]).await;
    let max_before = t.server.core().store.current_rv();
    let t = t.restart().await;
    let w0 = t.get(&format!("{W}/w0")).await.json();
    assert_eq!(w0, before["items"][0]);
    let next = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata":{"name":"after"}}),
        )
        .await
        .json();
    assert!(rv_of(&next) > max_before);
    let mut w = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={resume_from}"),
            &[],
        )
        .await;
    let a = w.next(Duration::from_secs(5)).await.unwrap();
    let b = w.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (a["type"].as_str(), a["object"]["spec"]["color"].as_str()),
        (Some("MODIFIED"), Some("blue"))
    );
    assert_eq!(
        (b["type"].as_str(), b["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("w2"))
    );
    let t = t.restart_with(|c| c.store.retention = 2).await;
    let mut old = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={resume_from}"),
            &[],
        )
        .await;
    let ev = old.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
}

#[tokio::test]
async fn k129_storage_failure_is_a_500_and_reads_keep_working() {
    let t = start().await;
    t.send_json(
        "POST",
        CM,
        "application/json",
        &json!({"metadata":{"name":"c"}}),
    )
    .await;
    t.server.core().store.close().await;
    let r = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata":{"name":"d"}}),
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (500, "InternalError"));
    assert_eq!(t.get(&format!("{CM}/c")).await.status, 200);
    assert_eq!(
        t.get(&format!("{CM}/d")).await.status,
        404,
        "the failed write left nothing behind"
    );
}

#[tokio::test]
async fn k130_controller_work_resumes_after_restart() {
    let t = start_with(|c| c.controllers.enabled = false).await;
    let ghost = json!({"metadata":{"name":"ghost","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"never","uid":"0d2f3c4e-0000-4000-8000-000000000000"}]}});
    t.send_json("POST", CM, "application/json", &ghost).await;
    t.send_json(
        "POST",
        "/api/v1/namespaces",
        "application/json",
        &json!({"metadata":{"name":"gone"}}),
    )
    .await;
    t.raw("DELETE", "/api/v1/namespaces/gone", &[], vec![])
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        t.get(&format!("{CM}/ghost")).await.status,
        200,
        "nothing collects while controllers are off"
    );
    let t = t.restart().await;
    eventually("GC resumed", || async {
        t.get(&format!("{CM}/ghost")).await.status == 404
    })
    .await;
    eventually("namespace deletion resumed", || async {
        t.get("/api/v1/namespaces/gone").await.status == 404
    })
    .await;
}
