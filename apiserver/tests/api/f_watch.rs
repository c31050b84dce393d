//! F. Watch.

use crate::harness::*;
use serde_json::{Value, json};
use std::time::Duration;

const S5: Duration = Duration::from_secs(5);

async fn patch_color(t: &TestServer, name: &str, color: &str) -> Value {
    t.send_json(
        "PATCH",
        &format!("{W}/{name}"),
        "application/merge-patch+json",
        &json!({"spec":{"color":color}}),
    )
    .await
    .json()
}

#[tokio::test]
async fn f67_to_f71_framing_start_points_and_order() {
    let t = start().await;
    install_widgets(&t).await;
    let w1 = t
        .send_json("POST", W, "application/json", &widget("w1", "red"))
        .await
        .json();
    let rv0 = rv_of(&w1);
    let mut raw = t
        .stream(&format!("{W}?watch=true&resourceVersion={rv0}"), &[])
        .await;
    assert_eq!(raw.status, 200);
    assert_eq!(raw.headers["transfer-encoding"], "chunked");
    let m1 = patch_color(&t, "w1", "blue").await;
    let line = raw.next_raw(S5).await.expect("an event line");
    assert!(!line.contains(&b'\n'));
    let ev: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        (ev["type"].as_str(), rv_of(&ev["object"])),
        (Some("MODIFIED"), rv_of(&m1))
    );
    for k in ["apiVersion", "kind"] {
        assert!(ev["object"][k].is_string());
    }
    t.raw("DELETE", &format!("{W}/w1"), &[], vec![]).await;
    let del = raw.next(S5).await.unwrap();
    assert_eq!(del["type"], "DELETED");
    assert_eq!(del["object"]["spec"]["color"], "blue");
    assert!(rv_of(&del["object"]) > rv_of(&m1));

    for start in ["", "&resourceVersion=0"] {
        t.send_json("POST", W, "application/json", &widget("x", "red"))
            .await;
        let mut w = t.stream(&format!("{W}?watch=true{start}"), &[]).await;
        assert_eq!(w.next(S5).await.unwrap()["type"], "ADDED");
        patch_color(&t, "x", &format!("c{}", start.len())).await;
        assert_eq!(w.next(S5).await.unwrap()["type"], "MODIFIED");
        t.raw("DELETE", &format!("{W}/x"), &[], vec![]).await;
    }

    // From an RV: only later changes, in commit order, none twice.
    t.send_json("POST", W, "application/json", &widget("o", "c0"))
        .await;
    let from = t.server.core().store.current_rv();
    for i in 1..=20 {
        patch_color(&t, "o", &format!("c{i}")).await;
    }
    let mut w = t
        .stream(&format!("{W}?watch=true&resourceVersion={from}"), &[])
        .await;
    let mut last = from;
    for i in 1..=20 {
        let ev = w.next(S5).await.unwrap();
        assert_eq!(ev["object"]["spec"]["color"], format!("c{i}"));
        assert!(rv_of(&ev["object"]) > last);
        last = rv_of(&ev["object"]);
    }
}

#[tokio::test]
async fn f72_to_f74_bookmarks_and_timeouts() {
    let t = start_with(|c| {
        c.http.bookmark_interval = Duration::from_millis(300);
        c.http.watch_timeout = Some(Duration::from_secs(2));
    })
    .await;
    install_widgets(&t).await;
    let mut w = t
        .stream(
            &format!("{W}?watch=true&allowWatchBookmarks=true&timeoutSeconds=2&resourceVersion=0"),
            &[],
        )
        .await;
    let started = std::time::Instant::now();
    let events = w.until_end(Duration::from_secs(10)).await;
    let bm = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark");
    assert_eq!(
        (
            bm["object"]["kind"].as_str(),
            bm["object"]["apiVersion"].as_str()
        ),
        (Some("Widget"), Some("example.com/v1"))
    );
    assert!(bm["object"]["metadata"]["resourceVersion"].is_string());
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the stream ended cleanly at its timeout"
    );
    // No timeoutSeconds: the server setting ends it.
    let mut w = t.stream(&format!("{W}?watch=true"), &[]).await;
    assert!(w.until_end(Duration::from_secs(10)).await.is_empty());
}

#[tokio::test]
async fn f75_to_f77_initial_events_and_expiry() {
    let t = start_with(|c| c.store.retention = 5).await;
    install_widgets(&t).await;
    for n in ["a", "b", "c"] {
        t.send_json("POST", W, "application/json", &widget(n, "red"))
            .await;
    }
    let mut w = t.stream(&format!("{W}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0"), &[]).await;
    let mut max = 0;
    for _ in 0..3 {
        let ev = w.next(S5).await.unwrap();
        assert_eq!(ev["type"], "ADDED");
        max = max.max(rv_of(&ev["object"]));
    }
    let bm = w.next(S5).await.unwrap();
    assert_eq!(bm["type"], "BOOKMARK");
    assert_eq!(
        bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(rv_of(&bm["object"]) >= max);
    patch_color(&t, "a", "blue").await;
    assert_eq!(w.next(S5).await.unwrap()["type"], "MODIFIED");

    let r = t
        .get(&format!(
            "{W}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!((r.status, r.reason().as_str()), (422, "Invalid"));

    for i in 0..10 {
        patch_color(&t, "b", &format!("x{i}")).await;
    }
    let mut old = t
        .stream(&format!("{W}?watch=true&resourceVersion=2"), &[])
        .await;
    assert_eq!(
        old.status, 200,
        "too-old RV is an in-stream error, never an HTTP 410"
    );
    let events = old.until_end(S5).await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0]["type"].as_str(),
            events[0]["object"]["code"].as_i64()
        ),
        (Some("ERROR"), Some(410))
    );
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn f78_to_f81_selector_scoped_and_table_watches() {
    let t = start().await;
    install_widgets(&t).await;
    t.send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    let rv = t.server.core().store.current_rv();
    let mut by_label = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={rv}&labelSelector=app%3Dx"),
            &[],
        )
        .await;
    let mut by_name = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Dw2"),
            &[],
        )
        .await;
    let mut all_ns = t
        .stream(
            &format!("/apis/example.com/v1/widgets?watch=true&resourceVersion={rv}"),
            &[],
        )
        .await;
    let mut table = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={rv}"),
            &[(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )],
        )
        .await;
    let labelled = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            "application/merge-patch+json",
            &json!({"metadata":{"labels":{"app":"x"}}}),
        )
        .await
        .json();
    let ev = by_label.next(S5).await.unwrap();
    assert_eq!(ev["type"], "ADDED");
    let unlabelled = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            "application/merge-patch+json",
            &json!({"metadata":{"labels":{"app":"y"}}}),
        )
        .await
        .json();
    let ev = by_label.next(S5).await.unwrap();
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(
        ev["object"]["metadata"]["labels"]["app"], "x",
        "old content"
    );
    assert_eq!(rv_of(&ev["object"]), rv_of(&unlabelled), "new RV");
    assert!(rv_of(&labelled) < rv_of(&unlabelled));

    t.send_json("POST", W, "application/json", &widget("w2", "red"))
        .await;
    let ev = by_name.next(S5).await.unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "w2");
    t.send_json(
        "POST",
        "/api/v1/namespaces",
        "application/json",
        &json!({"metadata":{"name":"n2"}}),
    )
    .await;
    t.send_json(
        "POST",
        "/apis/example.com/v1/namespaces/n2/widgets",
        "application/json",
        &widget("w3", "red"),
    )
    .await;
    let mut seen = vec![];
    while let Some(ev) = all_ns.next(Duration::from_millis(500)).await {
        seen.push(
            ev["object"]["metadata"]["namespace"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert!(seen.contains(&"n2".to_string()) && seen.contains(&"default".to_string()));
    let ev = table.next(S5).await.unwrap();
    assert_eq!(ev["object"]["kind"], "Table");
    assert_eq!(ev["object"]["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn f82_200_watchers_see_1000_writes_in_order() {
    let t = start().await;
    let cm = "/api/v1/namespaces/default/configmaps";
    t.send_json(
        "POST",
        cm,
        "application/json",
        &json!({"metadata":{"name":"c"},"data":{"i":"0"}}),
    )
    .await;
    let rv = t.server.core().store.current_rv();
    let mut watchers = vec![];
    for _ in 0..200 {
        watchers.push(
            t.stream(&format!("{cm}?watch=true&resourceVersion={rv}"), &[])
                .await,
        );
    }
    let client = t.client.clone();
    let writer = tokio::spawn(async move {
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::default_namespaced(client);
        for i in 1..=1000 {
            let p = json!({"data":{"i": i.to_string()}});
            api.patch(
                "c",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&p),
            )
            .await
            .unwrap();
        }
    });
    let readers: Vec<_> = watchers
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut got = vec![];
                while got.len() < 1000 {
                    let Some(ev) = w.next(Duration::from_secs(60)).await else {
                        break;
                    };
                    got.push(
                        ev["object"]["data"]["i"]
                            .as_str()
                            .unwrap()
                            .parse::<u32>()
                            .unwrap(),
                    );
                }
                got
            })
        })
        .collect();
    writer.await.unwrap();
    let want: Vec<u32> = (1..=1000).collect();
    for r in readers {
        assert_eq!(r.await.unwrap(), want);
    }
}

#[tokio::test]
async fn f83_f84_disconnects_and_slow_watchers_are_released() {
    let t = start_with(|c| {
        c.store.watch_queue = 64;
        c.http.watch_stall_limit = Duration::from_millis(500);
    })
    .await;
    let cm = "/api/v1/namespaces/default/configmaps";
    let baseline = t.server.active_watches();
    {
        let _w = t.stream(&format!("{cm}?watch=true"), &[]).await;
        eventually("watch registered", || async {
            t.server.active_watches() == baseline + 1
        })
        .await;
    }
    eventually("watch released after disconnect", || async {
        t.server.active_watches() == baseline
    })
    .await;

    let _slow = t.stream(&format!("{cm}?watch=true"), &[]).await;
    let rv = t.server.core().store.current_rv();
    let big = "x".repeat(64 * 1024);
    for i in 0..600 {
        let r = t
            .send_json(
                "POST",
                cm,
                "application/json",
                &json!({"metadata":{"name":format!("c{i}")},"data":{"big":big}}),
            )
            .await;
        assert_eq!(r.status, 201, "writers are never stalled by a slow watcher");
    }
    let mut fast = t
        .stream(&format!("{cm}?watch=true&resourceVersion={rv}"), &[])
        .await;
    for _ in 0..600 {
        assert_eq!(fast.next(S5).await.unwrap()["type"], "ADDED");
    }
    eventually("slow watcher closed", || async {
        t.server.active_watches() == baseline + 1
    })
    .await;
}
