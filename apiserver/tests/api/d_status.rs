//! D. Status subresource.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn d46_to_d51_status_subresource() {
    let t = start().await;
    install_widgets(&t).await;
    let mut body = widget("w1", "red");
    body["status"] = json!({"ok": true, "conditions": []});
    let w = t
        .send_json("POST", W, "application/json", &body)
        .await
        .json();
    assert!(w.get("status").is_none(), "create drops status");

    let mut put = w.clone();
    put["status"] = json!({"ok": true, "conditions": []});
    let r = t
        .send_json("PUT", &format!("{W}/w1"), "application/json", &put)
        .await
        .json();
    assert!(r.get("status").is_none());
    assert_eq!(r["metadata"]["generation"], 1);

    let p = json!({"status":{"ok":true,"conditions":[]},"metadata":{"labels":{"x":"y"}},"spec":{"color":"z"}});
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1/status"),
            "application/merge-patch+json",
            &p,
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = r.json();
    assert_eq!(r["status"]["ok"], true);
    assert_eq!(r["spec"]["color"], "red");
    assert!(r["metadata"].get("labels").is_none());
    assert_eq!(r["metadata"]["generation"], 1);
    assert!(rv_of(&r) > rv_of(&w));

    let r2 = t
        .send_json("PUT", &format!("{W}/w1/status"), "application/json", &w)
        .await;
    assert_eq!((r2.status, r2.reason().as_str()), (409, "Conflict"));

    let apply = json!({"apiVersion":"example.com/v1","kind":"Widget","status":{"ok":false,"conditions":[],"observed_generation":1}});
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1/status?fieldManager=ctl&force=true"),
            "application/apply-patch+yaml",
            &apply,
        )
        .await
        .json();
    assert_eq!(r["status"]["observed_generation"], 1);
    let apply2 = json!({"apiVersion":"example.com/v1","kind":"Widget","status":{"ok":false,"conditions":[]}});
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1/status?fieldManager=ctl&force=true"),
            "application/apply-patch+yaml",
            &apply2,
        )
        .await
        .json();
    assert!(
        r["status"].get("observed_generation").is_none(),
        "second apply omitting a field removes it: {r}"
    );

    let full = t.get(&format!("{W}/w1/status")).await.json();
    assert_eq!(full["spec"]["color"], "red");
}

#[tokio::test]
async fn d52_without_status_subresource() {
    let t = start().await;
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("subresources");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
        json!({"type":"object","x-kubernetes-preserve-unknown-fields":true});
    assert_eq!(
        t.send_json(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &crd
        )
        .await
        .status,
        201
    );
    let mut body = widget("w1", "red");
    body["status"] = json!({"ok": true});
    let w = t
        .send_json("POST", W, "application/json", &body)
        .await
        .json();
    assert_eq!(w["status"]["ok"], true);
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            "application/merge-patch+json",
            &json!({"status":{"ok":false}}),
        )
        .await
        .json();
    assert_eq!(r["metadata"]["generation"], 2);
    assert_eq!(t.get(&format!("{W}/w1/status")).await.status, 404);
}
