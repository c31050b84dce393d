//! B. CRUD and metadata.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn b13_to_b19_create_and_get() {
    let t = start().await;
    install_widgets(&t).await;
    let before = t.get("/api/v1/namespaces").await.json();
    // Python sends POST without a Content-Type.
    let r = t
        .raw(
            "POST",
            W,
            &[],
            serde_json::to_vec(&widget("w1", "red")).unwrap(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let w1 = r.json();
    let uid = w1["metadata"]["uid"].as_str().unwrap();
    assert_eq!(uid.len(), 36);
    let ts = w1["metadata"]["creationTimestamp"].as_str().unwrap();
    assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
    assert_eq!(w1["metadata"]["generation"], 1);
    assert!(rv_of(&w1) > rv_of(&before));

    let r = t
        .send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "AlreadyExists"));
    assert_eq!(r.json()["details"]["name"], "w1");

    let mut g = widget("", "red");
    g["metadata"] = json!({"generateName": "w-"});
    let r = t.send_json("POST", W, "application/json", &g).await;
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("w-") && name.len() == 7);
    assert!(
        name[2..]
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
    );

    let mut with_rv = widget("w9", "red");
    with_rv["metadata"]["resourceVersion"] = json!("5");
    let r = t.send_json("POST", W, "application/json", &with_rv).await;
    assert_eq!((r.status, r.reason().as_str()), (500, "InternalError"));

    let r = t
        .send_json(
            "POST",
            "/apis/example.com/v1/namespaces/nope/widgets",
            "application/json",
            &widget("x", "r"),
        )
        .await;
    assert_eq!(
        (r.status, r.json()["message"].as_str().unwrap()),
        (404, "namespaces \"nope\" not found")
    );

    let mut other = widget("x", "r");
    other["metadata"]["namespace"] = json!("other");
    assert_eq!(
        t.send_json("POST", W, "application/json", &other)
            .await
            .status,
        400
    );

    assert_eq!(t.get(&format!("{W}/w1")).await.json(), w1);
    let r = t.get(&format!("{W}/missing")).await;
    assert_eq!(
        (r.status, r.json()["message"].as_str().unwrap()),
        (404, "widgets.example.com \"missing\" not found")
    );
}

#[tokio::test]
async fn b20_to_b26_update() {
    let t = start().await;
    install_widgets(&t).await;
    let w1 = t
        .send_json("POST", W, "application/json", &widget("w1", "red"))
        .await
        .json();
    let mut changed = w1.clone();
    changed["spec"]["color"] = json!("blue");
    let r = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &changed)
        .await
        .json();
    assert!(rv_of(&r) > rv_of(&w1));
    assert_eq!(r["metadata"]["generation"], 2);

    let stale = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &changed)
        .await;
    assert_eq!((stale.status, stale.reason().as_str()), (409, "Conflict"));
    assert!(
        stale.json()["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );

    let mut unconditional = r.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    unconditional["spec"]["color"] = json!("green");
    let r = t
        .send_json(
            "PUT",
            &format!("{W}/w1"),
            "application/json",
            &unconditional,
        )
        .await
        .json();
    assert_eq!(r["spec"]["color"], "green");

    let same = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &r)
        .await
        .json();
    assert_eq!(
        rv_of(&same),
        rv_of(&r),
        "identical PUT must not bump the RV"
    );

    let mut labelled = same.clone();
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let l = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &labelled)
        .await
        .json();
    assert_eq!(l["metadata"]["generation"], same["metadata"]["generation"]);

    let mut renamed = l.clone();
    renamed["metadata"]["name"] = json!("w2");
    assert_eq!(
        t.send_json("PUT", &format!("{W}/w1"), "application/json", &renamed)
            .await
            .status,
        400
    );
    assert_eq!(
        t.send_json(
            "PUT",
            &format!("{W}/absent"),
            "application/json",
            &widget("absent", "r")
        )
        .await
        .status,
        404
    );

    let mut bad_uid = l.clone();
    bad_uid["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    assert_eq!(
        t.send_json("PUT", &format!("{W}/w1"), "application/json", &bad_uid)
            .await
            .status,
        409
    );
    let mut new_ts = l.clone();
    new_ts["metadata"]["creationTimestamp"] = json!("2000-01-01T00:00:00Z");
    new_ts["spec"]["color"] = json!("pink");
    let r = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &new_ts)
        .await
        .json();
    assert_eq!(
        r["metadata"]["creationTimestamp"],
        l["metadata"]["creationTimestamp"]
    );
}

#[tokio::test]
async fn b27_b28_cluster_scope_and_global_rv() {
    let t = start().await;
    let r = t
        .send_json(
            "POST",
            "/api/v1/namespaces",
            "application/json",
            &json!({"metadata":{"name":"n1","namespace":"x"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert!(r.json()["metadata"].get("namespace").is_none());
    let cm = t
        .send_json(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            &json!({"metadata":{"name":"c"}}),
        )
        .await
        .json();
    install_widgets(&t).await;
    let w = t
        .send_json("POST", W, "application/json", &widget("w", "r"))
        .await
        .json();
    assert!(rv_of(&w) > rv_of(&cm));
}
