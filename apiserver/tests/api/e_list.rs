//! E. List, selectors, pagination, RV semantics.

use crate::harness::*;
use serde_json::{Value, json};

async fn seed(t: &TestServer) {
    install_widgets(t).await;
    for (name, color, labels) in [
        ("a", "red", json!({"a":"b","env":"prod"})),
        ("b", "blue", json!({"a":"c"})),
        ("c", "red", json!({"env":"dev"})),
        ("d", "green", json!({})),
        ("e", "red", json!({"a":"b"})),
    ] {
        let mut w = widget(name, color);
        w["metadata"]["labels"] = labels;
        assert_eq!(
            t.send_json("POST", W, "application/json", &w).await.status,
            201
        );
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn q(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn e53_to_e58_lists_and_selectors() {
    let t = start().await;
    seed(&t).await;
    let list = t.get(W).await.json();
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(names(&list), vec!["a", "b", "c", "d", "e"]);
    assert_eq!(rv_of(&list), t.server.core().store.current_rv());
    for (sel, want) in [
        ("a=b", vec!["a", "e"]),
        ("a==b", vec!["a", "e"]),
        ("a!=b", vec!["b", "c", "d"]),
        ("a in (b,c)", vec!["a", "b", "e"]),
        ("a notin (b)", vec!["b", "c", "d"]),
        ("a", vec!["a", "b", "e"]),
        ("!a", vec!["c", "d"]),
        ("a=b,env=prod", vec!["a"]),
    ] {
        assert_eq!(
            names(&t.get(&format!("{W}?labelSelector={}", q(sel))).await.json()),
            want,
            "{sel}"
        );
    }
    let r = t.get(&format!("{W}?labelSelector={}", q("a in x"))).await;
    assert_eq!((r.status, r.reason().as_str()), (400, "BadRequest"));
    assert_eq!(
        names(
            &t.get(&format!("{W}?fieldSelector={}", q("metadata.name=b")))
                .await
                .json()
        ),
        vec!["b"]
    );
    assert_eq!(
        names(
            &t.get(&format!(
                "{W}?fieldSelector={}",
                q("metadata.namespace=default")
            ))
            .await
            .json()
        )
        .len(),
        5
    );
    assert_eq!(
        names(
            &t.get(&format!("{W}?fieldSelector={}", q("spec.color=red")))
                .await
                .json()
        ),
        vec!["a", "c", "e"]
    );
    let r = t
        .get(&format!("{W}?fieldSelector={}", q("spec.unknown=x")))
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("field label not supported")
    );

    t.send_json(
        "POST",
        "/api/v1/namespaces",
        "application/json",
        &json!({"metadata":{"name":"other"}}),
    )
    .await;
    t.send_json(
        "POST",
        "/apis/example.com/v1/namespaces/other/widgets",
        "application/json",
        &widget("z", "red"),
    )
    .await;
    assert_eq!(
        names(&t.get("/apis/example.com/v1/widgets").await.json()).len(),
        6
    );
}

#[tokio::test]
async fn e59_to_e63_pagination_and_resource_versions() {
    let t = start().await;
    seed(&t).await;
    let first = t.get(&format!("{W}?limit=2")).await.json();
    let mut seen = names(&first);
    let rv = rv_of(&first);
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A write between pages does not change the snapshot RV of later pages.
    t.send_json("POST", W, "application/json", &widget("zz", "red"))
        .await;
    loop {
        let page = t.get(&format!("{W}?limit=2&continue={token}")).await.json();
        assert_eq!(rv_of(&page), rv);
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => token = c.to_string(),
            _ => break,
        }
    }
    assert_eq!(&seen[..5], &["a", "b", "c", "d", "e"]);
    assert_eq!(
        t.get(&format!("{W}?limit=2&continue=garbage")).await.status,
        400
    );
    assert_eq!(
        t.get(&format!(
            "{W}?resourceVersion=0&resourceVersionMatch=NotOlderThan"
        ))
        .await
        .status,
        200
    );
    let cur = t.server.core().store.current_rv();
    let r = t.get(&format!("{W}?resourceVersion={}", cur + 1000)).await;
    assert_eq!((r.status, r.reason().as_str()), (504, "Timeout"));
    let r = t
        .get(&format!("{W}?resourceVersion=1&resourceVersionMatch=Exact"))
        .await;
    assert_eq!((r.status, r.reason().as_str()), (410, "Expired"));
    assert_eq!(
        t.get(&format!(
            "{W}?resourceVersion={cur}&resourceVersionMatch=Exact"
        ))
        .await
        .status,
        200
    );
    assert_eq!(
        t.get(&format!("{W}?resourceVersionMatch=Exact"))
            .await
            .status,
        422
    );
}

#[tokio::test]
async fn e64_e65_table_and_metadata() {
    let t = start().await;
    seed(&t).await;
    let table = t
        .raw(
            "GET",
            W,
            &[(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )],
            vec![],
        )
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Color", "Age"]);
    assert_eq!(table["rows"][0]["cells"][1], "red");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let age = table["rows"][0]["cells"][2].as_str().unwrap();
    assert!(age.ends_with('s'), "{age}");
    let meta = t
        .raw(
            "GET",
            W,
            &[(
                "accept",
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            )],
            vec![],
        )
        .await
        .json();
    assert_eq!(meta["kind"], "PartialObjectMetadataList");
    assert!(meta["items"][0].get("spec").is_none());
    // Without printer columns: Name and Age.
    let ns_table = t
        .raw(
            "GET",
            "/api/v1/namespaces/default/serviceaccounts",
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            vec![],
        )
        .await
        .json();
    let cols: Vec<&str> = ns_table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Age"]);
}

#[tokio::test]
async fn e66_core_events_by_involved_object() {
    let t = start().await;
    let ev = json!({"metadata":{"name":"e1"},"regarding":{"kind":"Widget","name":"w1","namespace":"default"},
        "reason":"R","note":"hello","type":"Normal","action":"A","eventTime":"2026-01-01T00:00:00.000000Z",
        "reportingController":"c","reportingInstance":"i"});
    let r = t
        .send_json(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            "application/json",
            &ev,
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    t.send_json("POST", "/api/v1/namespaces/default/events", "application/json",
        &json!({"metadata":{"name":"e2"},"involvedObject":{"kind":"ConfigMap","name":"w1"},"message":"other"})).await;
    let sel = q("involvedObject.name=w1,involvedObject.kind=Widget");
    let list = t
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector={sel}"
        ))
        .await
        .json();
    assert_eq!(names(&list), vec!["e1"]);
    assert_eq!(list["items"][0]["message"], "hello");
    let v1 = t
        .get(&format!(
            "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector={}",
            q("regarding.name=w1,regarding.kind=Widget")
        ))
        .await
        .json();
    assert_eq!(names(&v1), vec!["e1"]);
    assert_eq!(v1["items"][0]["note"], "hello");
}
