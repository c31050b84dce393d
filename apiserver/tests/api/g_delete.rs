//! G. Delete, finalizers, garbage collection, namespaces.

use crate::harness::*;
use serde_json::{Value, json};
use std::time::Duration;

const CM: &str = "/api/v1/namespaces/default/configmaps";
const JSONP: &str = "application/json-patch+json";

fn owned_by(name: &str, owner: &Value, block: bool) -> Value {
    json!({"metadata":{"name":name,"ownerReferences":[{"apiVersion":"example.com/v1","kind":"Widget",
        "name":owner["metadata"]["name"],"uid":owner["metadata"]["uid"],"blockOwnerDeletion":block}]}})
}

#[tokio::test]
async fn g85_to_g92_delete_and_finalizers() {
    let t = start().await;
    install_widgets(&t).await;
    t.send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    let rv = t.server.core().store.current_rv();
    let mut watch = t
        .stream(&format!("{W}?watch=true&resourceVersion={rv}"), &[])
        .await;
    let r = t.raw("DELETE", &format!("{W}/w1"), &[], vec![]).await;
    // kube's custom resource store does not return the deleted object: a Status with details.
    assert_eq!((r.status, r.json()["kind"].as_str()), (200, Some("Status")));
    assert_eq!(r.json()["details"]["kind"], "widgets");
    assert_eq!(
        watch.next(Duration::from_secs(5)).await.unwrap()["type"],
        "DELETED"
    );
    assert_eq!(t.get(&format!("{W}/w1")).await.status, 404);

    let cm = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata":{"name":"c"}}),
        )
        .await
        .json();
    let r = t
        .raw(
            "DELETE",
            &format!("{CM}/c"),
            &[("content-type", "application/json")],
            "{}",
        )
        .await
        .json();
    assert_eq!(
        (r["kind"].as_str(), r["status"].as_str()),
        (Some("Status"), Some("Success"))
    );
    assert_eq!(
        (r["details"]["kind"].as_str(), r["details"]["uid"].as_str()),
        (Some("configmaps"), cm["metadata"]["uid"].as_str())
    );

    let mut f = widget("wf", "red");
    f["metadata"]["finalizers"] = json!(["example.com/hold"]);
    t.send_json("POST", W, "application/json", &f).await;
    let d = t
        .raw("DELETE", &format!("{W}/wf"), &[], vec![])
        .await
        .json();
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        (
            d["metadata"]["deletionGracePeriodSeconds"].as_i64(),
            d["metadata"]["generation"].as_i64()
        ),
        (Some(0), Some(2))
    );
    let again = t
        .raw("DELETE", &format!("{W}/wf"), &[], vec![])
        .await
        .json();
    assert_eq!(rv_of(&again), rv_of(&d));
    let add = json!([{"op":"add","path":"/metadata/finalizers/-","value":"example.com/new"}]);
    let r = t.send_json("PATCH", &format!("{W}/wf"), JSONP, &add).await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("no new finalizers")
    );
    let remove = json!([{"op":"test","path":"/metadata/finalizers/0","value":"example.com/hold"},{"op":"remove","path":"/metadata/finalizers/0"}]);
    assert_eq!(
        t.send_json("PATCH", &format!("{W}/wf"), JSONP, &remove)
            .await
            .status,
        200
    );
    assert_eq!(
        t.get(&format!("{W}/wf")).await.status,
        404,
        "removing the last finalizer deletes the object"
    );

    let c = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata":{"name":"p"}}),
        )
        .await
        .json();
    let r = t
        .send_json(
            "DELETE",
            &format!("{CM}/p"),
            "application/json",
            &json!({"preconditions":{"resourceVersion":"1"}}),
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "Conflict"));
    let r = t
        .send_json(
            "DELETE",
            &format!("{CM}/p"),
            "application/json",
            &json!({"preconditions":{"uid":"nope"}}),
        )
        .await;
    assert_eq!(r.status, 409);
    let r = t
        .send_json(
            "DELETE",
            &format!("{CM}/p"),
            "application/json",
            &json!({"dryRun":["All"]}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        t.get(&format!("{CM}/p")).await.json()["metadata"]["uid"],
        c["metadata"]["uid"]
    );
    let r = t
        .raw(
            "DELETE",
            &format!("{CM}/p?propagationPolicy=Foreground"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(r.status, 200);
    eventually("foreground delete finishes", || async {
        t.get(&format!("{CM}/p")).await.status == 404
    })
    .await;
}

#[tokio::test]
async fn g93_delete_collection() {
    let t = start().await;
    for (n, l) in [("a", "x"), ("b", "y"), ("c", "x")] {
        t.send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata":{"name":n,"labels":{"k":l}}}),
        )
        .await;
    }
    let r = t
        .raw("DELETE", &format!("{CM}?labelSelector=k%3Dx"), &[], vec![])
        .await;
    assert_eq!(r.status, 200);
    let left: Vec<_> = t.get(CM).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    assert_eq!(left, vec![json!("b")]);
}

#[tokio::test]
async fn g94_to_g97_garbage_collection() {
    let t = start().await;
    install_widgets(&t).await;
    let o1 = t
        .send_json("POST", W, "application/json", &widget("o1", "red"))
        .await
        .json();
    let o2 = t
        .send_json("POST", W, "application/json", &widget("o2", "red"))
        .await
        .json();
    t.send_json(
        "POST",
        CM,
        "application/json",
        &owned_by("only-o1", &o1, false),
    )
    .await;
    let mut both = owned_by("both", &o1, false);
    both["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(owned_by("x", &o2, false)["metadata"]["ownerReferences"][0].clone());
    t.send_json("POST", CM, "application/json", &both).await;
    t.raw("DELETE", &format!("{W}/o1"), &[], vec![]).await;
    eventually("background GC", || async {
        t.get(&format!("{CM}/only-o1")).await.status == 404
    })
    .await;
    eventually("dangling ref removed", || async {
        t.get(&format!("{CM}/both")).await.json()["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|r| r.len() == 1)
    })
    .await;

    // Foreground: the owner waits for blocking dependents.
    let f = t
        .send_json("POST", W, "application/json", &widget("f", "red"))
        .await
        .json();
    let mut dep = owned_by("fdep", &f, true);
    dep["metadata"]["finalizers"] = json!(["example.com/slow"]);
    t.send_json("POST", CM, "application/json", &dep).await;
    let d = t
        .raw(
            "DELETE",
            &format!("{W}/f"),
            &[("content-type", "application/json")],
            r#"{"propagationPolicy":"Foreground"}"#,
        )
        .await
        .json();
    assert!(
        d["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("foregroundDeletion"))
    );
    eventually("dependent marked for deletion", || async {
        t.get(&format!("{CM}/fdep")).await.json()["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        t.get(&format!("{W}/f")).await.status,
        200,
        "owner waits for its blocking dependent"
    );
    t.send_json(
        "PATCH",
        &format!("{CM}/fdep"),
        "application/merge-patch+json",
        &json!({"metadata":{"finalizers":null}}),
    )
    .await;
    eventually("owner gone after dependent", || async {
        t.get(&format!("{W}/f")).await.status == 404
    })
    .await;

    // Orphan: dependents survive without the reference.
    let o = t
        .send_json("POST", W, "application/json", &widget("orph", "red"))
        .await
        .json();
    t.send_json("POST", CM, "application/json", &owned_by("odep", &o, false))
        .await;
    t.raw(
        "DELETE",
        &format!("{W}/orph"),
        &[("content-type", "application/json")],
        r#"{"propagationPolicy":"Orphan"}"#,
    )
    .await;
    eventually("orphan owner gone", || async {
        t.get(&format!("{W}/orph")).await.status == 404
    })
    .await;
    let kept = t.get(&format!("{CM}/odep")).await.json();
    assert!(
        kept["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|r| r.is_empty()),
        "{kept}"
    );

    let ghost = json!({"metadata":{"name":"ghost","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"never","uid":"0d2f3c4e-0000-4000-8000-000000000000"}]}});
    t.send_json("POST", CM, "application/json", &ghost).await;
    eventually(
        "dependent of a uid that never existed collected",
        || async { t.get(&format!("{CM}/ghost")).await.status == 404 },
    )
    .await;
}

#[tokio::test]
async fn g98_to_g101_namespaces() {
    let t = start().await;
    let ns = t
        .send_json(
            "POST",
            "/api/v1/namespaces",
            "application/json",
            &json!({"metadata":{"name":"n1"}}),
        )
        .await
        .json();
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    let cm = "/api/v1/namespaces/n1/configmaps";
    t.send_json(
        "POST",
        cm,
        "application/json",
        &json!({"metadata":{"name":"free"}}),
    )
    .await;
    t.send_json(
        "POST",
        cm,
        "application/json",
        &json!({"metadata":{"name":"held","finalizers":["example.com/hold"]}}),
    )
    .await;
    let d = t
        .raw("DELETE", "/api/v1/namespaces/n1", &[], vec![])
        .await
        .json();
    assert_eq!(d["status"]["phase"], "Terminating");
    eventually("free content deleted", || async {
        t.get(&format!("{cm}/free")).await.status == 404
    })
    .await;
    let r = t
        .send_json(
            "POST",
            cm,
            "application/json",
            &json!({"metadata":{"name":"late"}}),
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (403, "Forbidden"));
    assert_eq!(
        r.json()["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        t.get("/api/v1/namespaces/n1").await.status,
        200,
        "a finalizer-held object keeps the namespace"
    );
    t.send_json(
        "PATCH",
        &format!("{cm}/held"),
        "application/merge-patch+json",
        &json!({"metadata":{"finalizers":null}}),
    )
    .await;
    eventually("namespace gone", || async {
        t.get("/api/v1/namespaces/n1").await.status == 404
    })
    .await;
    for protected in ["default", "kube-system", "kube-public"] {
        let r = t
            .raw(
                "DELETE",
                &format!("/api/v1/namespaces/{protected}"),
                &[],
                vec![],
            )
            .await;
        assert_eq!(
            (r.status, r.reason().as_str()),
            (403, "Forbidden"),
            "{protected}"
        );
    }
}
