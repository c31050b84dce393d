//! C. Patch.

use crate::harness::*;
use serde_json::json;

const MERGE: &str = "application/merge-patch+json";
const JSONP: &str = "application/json-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

#[tokio::test]
async fn c29_to_c31_merge_patch() {
    let t = start().await;
    install_widgets(&t).await;
    let w = t
        .send_json("POST", W, "application/json", &widget("w1", "red"))
        .await
        .json();
    let p = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            MERGE,
            &json!({"spec":{"color":"x","size":"Small"}}),
        )
        .await
        .json();
    assert_eq!(
        (
            p["spec"]["color"].as_str(),
            p["metadata"]["generation"].as_i64()
        ),
        (Some("x"), Some(2))
    );
    let p = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            MERGE,
            &json!({"spec":{"size":null}}),
        )
        .await
        .json();
    assert!(p["spec"].get("size").is_none());
    let stale = json!({"metadata":{"resourceVersion": w["metadata"]["resourceVersion"]},"spec":{"color":"y"}});
    let r = t
        .send_json("PATCH", &format!("{W}/w1"), MERGE, &stale)
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "Conflict"));
    let current = json!({"metadata":{"resourceVersion": p["metadata"]["resourceVersion"]},"spec":{"color":"y"}});
    assert_eq!(
        t.send_json("PATCH", &format!("{W}/w1"), MERGE, &current)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn c32_to_c35_json_patch() {
    let t = start().await;
    install_widgets(&t).await;
    t.send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    let add = json!([{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["f"]}]);
    let r = t.send_json("PATCH", &format!("{W}/w1"), JSONP, &add).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["finalizers"], json!(["f"]));
    let r = t.send_json("PATCH", &format!("{W}/w1"), JSONP, &add).await;
    assert_eq!((r.status, r.reason().as_str()), (422, "Invalid"));
    let ops = json!([
        {"op":"add","path":"/metadata/finalizers/-","value":"g"},
        {"op":"remove","path":"/metadata/finalizers/0"},
        {"op":"replace","path":"/spec/color","value":"blue"},
        {"op":"copy","from":"/spec/color","path":"/spec/extra/copied"},
        {"op":"move","from":"/spec/extra/copied","path":"/spec/extra/moved"}
    ]);
    let r = t
        .send_json("PATCH", &format!("{W}/w1"), JSONP, &ops)
        .await
        .json();
    assert_eq!(r["metadata"]["finalizers"], json!(["g"]));
    assert_eq!(r["spec"]["extra"], json!({"moved":"blue"}));
    assert_eq!(
        t.send_json("PATCH", &format!("{W}/w1"), JSONP, &json!({"op":"add"}))
            .await
            .status,
        400
    );
    let many: Vec<_> = (0..10_001)
        .map(|_| json!({"op":"test","path":"/spec/color","value":"blue"}))
        .collect();
    assert_eq!(
        t.send_json("PATCH", &format!("{W}/w1"), JSONP, &json!(many))
            .await
            .status,
        413
    );
}

#[tokio::test]
async fn c36_c37_strategic_merge() {
    let t = start().await;
    install_widgets(&t).await;
    t.send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            SMP,
            &json!({"spec":{"color":"x"}}),
        )
        .await;
    assert_eq!(
        (r.status, r.reason().as_str()),
        (415, "UnsupportedMediaType")
    );
    let cm = "/api/v1/namespaces/default/configmaps";
    t.send_json("POST", cm, "application/json", &json!({"metadata":{"name":"c","finalizers":["x","y"],
        "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u1"}]},"data":{"a":"1","b":"2"}})).await;
    let r = t
        .send_json("PATCH", &format!("{cm}/c"), SMP, &json!({"data":{"a":"2"}}))
        .await
        .json();
    assert_eq!(r["data"], json!({"a":"2","b":"2"}));
    let r = t
        .send_json(
            "PATCH",
            &format!("{cm}/c"),
            SMP,
            &json!({"data":{"$patch":"replace","z":"9"}}),
        )
        .await
        .json();
    assert_eq!(r["data"], json!({"z":"9"}));
    let r = t
        .send_json(
            "PATCH",
            &format!("{cm}/c"),
            SMP,
            &json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["x"],
        "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o2","uid":"u2"}]}}),
        )
        .await
        .json();
    assert_eq!(r["metadata"]["finalizers"], json!(["y"]));
    assert_eq!(
        r["metadata"]["ownerReferences"].as_array().unwrap().len(),
        2
    );
}

#[tokio::test]
async fn c38_to_c43_server_side_apply() {
    let t = start().await;
    install_widgets(&t).await;
    let body = widget("a1", "red");
    let r = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m"), APPLY, &body)
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let again = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m"), APPLY, &body)
        .await;
    assert_eq!(
        rv_of(&again.json()),
        rv_of(&r.json()),
        "an identical apply is a no-op"
    );
    let yaml = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a2\nspec:\n  color: red\n  extra: {}\n  raw: {}\n  tags: []\n";
    let r2 = t
        .raw(
            "PATCH",
            &format!("{W}/a2?fieldManager=m"),
            &[("content-type", APPLY)],
            yaml,
        )
        .await;
    assert_eq!(r2.status, 201);
    assert_eq!(r2.json()["spec"], r.json()["spec"]);
    let r = t.send_json("PATCH", &format!("{W}/a1"), APPLY, &body).await;
    assert_eq!((r.status, r.reason().as_str()), (422, "Invalid"));

    // m2 owns size; m drops a field it applied before.
    let with_size = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a1"},"spec":{"size":"Large"}});
    assert_eq!(
        t.send_json(
            "PATCH",
            &format!("{W}/a1?fieldManager=m2"),
            APPLY,
            &with_size
        )
        .await
        .status,
        200
    );
    let mut less = widget("a1", "red");
    less["spec"].as_object_mut().unwrap().remove("tags");
    less["spec"]["extra"] = json!({"k":"v"});
    let r = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m"), APPLY, &less)
        .await;
    assert_eq!(
        r.status,
        422,
        "tags is required, so dropping it must fail validation: {}",
        String::from_utf8_lossy(&r.body)
    );
    let mut keep_tags = less.clone();
    keep_tags["spec"]["tags"] = json!(["t"]);
    keep_tags["spec"]["extra"] = json!({});
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/a1?fieldManager=m"),
            APPLY,
            &keep_tags,
        )
        .await
        .json();
    assert_eq!(
        r["spec"]["size"], "Large",
        "a field owned by another manager stays"
    );
    let mut no_extra_key = keep_tags.clone();
    no_extra_key["spec"]["extra"] = json!({"k2": "v"});
    t.send_json(
        "PATCH",
        &format!("{W}/a1?fieldManager=m"),
        APPLY,
        &no_extra_key,
    )
    .await;
    let mut dropped = keep_tags.clone();
    dropped["spec"]["extra"] = json!({});
    let r = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m"), APPLY, &dropped)
        .await
        .json();
    assert_eq!(
        r["spec"]["extra"],
        json!({}),
        "a field m applied before and no longer applies is removed"
    );

    let steal = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a1"},"spec":{"color":"blue"}});
    let r = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m2"), APPLY, &steal)
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "Conflict"));
    let status = r.json();
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(status["details"]["causes"][0]["field"], ".spec.color");
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/a1?fieldManager=m2&force=true"),
            APPLY,
            &steal,
        )
        .await
        .json();
    assert_eq!(r["spec"]["color"], "blue");
    let managers: Vec<_> = r["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap().to_string())
        .collect();
    assert!(managers.contains(&"m2".to_string()));

    let mut stale = steal.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let r = t
        .send_json("PATCH", &format!("{W}/a1?fieldManager=m2"), APPLY, &stale)
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn c44_c45_bad_content_type_and_noop() {
    let t = start().await;
    install_widgets(&t).await;
    let w = t
        .send_json("POST", W, "application/json", &widget("w1", "red"))
        .await
        .json();
    let r = t
        .raw(
            "PATCH",
            &format!("{W}/w1"),
            &[("content-type", "text/plain")],
            "x",
        )
        .await;
    assert_eq!(
        (r.status, r.reason().as_str()),
        (415, "UnsupportedMediaType")
    );
    let mut watch = t
        .stream(
            &format!("{W}?watch=true&resourceVersion={}", rv_of(&w)),
            &[],
        )
        .await;
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w1"),
            MERGE,
            &json!({"spec":{"color":"red"}}),
        )
        .await
        .json();
    assert_eq!(rv_of(&r), rv_of(&w));
    t.send_json(
        "PATCH",
        &format!("{W}/w1"),
        MERGE,
        &json!({"spec":{"color":"blue"}}),
    )
    .await;
    let ev = watch
        .next(std::time::Duration::from_secs(5))
        .await
        .expect("an event");
    assert_eq!(
        ev["object"]["spec"]["color"], "blue",
        "the no-op patch emitted no event"
    );
}
