//! H. CRDs and schemas.

use crate::harness::*;
use serde_json::json;

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

#[tokio::test]
async fn h102_h103_h114_structural_schemas_and_establishment() {
    let t = start().await;
    let mut bad = widget_crd();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["color"] =
        json!({"description":"untyped"});
    let r = t.send_json("POST", CRDS, "application/json", &bad).await;
    assert_eq!((r.status, r.reason().as_str()), (422, "Invalid"));
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("properties[color].type"),
        "{}",
        r.json()
    );
    // The kube-derive output (float maximum, enum with null, selectableFields) is accepted verbatim.
    install_widgets(&t).await;
}

#[tokio::test]
async fn h104_to_h109_pruning_defaulting_validation() {
    let t = start().await;
    install_widgets(&t).await;
    let mut w = widget("w1", "red");
    w["spec"]["bogus"] = json!(1);
    w["spec"]["raw"] = json!({"deep": {"any": [1, {"x": null}]}});
    let r = t.send_json("POST", W, "application/json", &w).await;
    assert_eq!(r.status, 201);
    assert!(
        r.headers
            .get("warning")
            .is_some_and(|h| h.to_str().unwrap().contains("spec.bogus"))
    );
    let got = t.get(&format!("{W}/w1")).await.json();
    assert!(got["spec"].get("bogus").is_none());
    assert_eq!(
        got["spec"]["raw"],
        json!({"deep": {"any": [1, {"x": null}]}})
    );
    assert_eq!(got["spec"]["replicas"], 1, "defaulted");
    let mut strict = widget("w2", "red");
    strict["spec"]["bogus"] = json!(1);
    let r = t
        .send_json(
            "POST",
            &format!("{W}?fieldValidation=Strict"),
            "application/json",
            &strict,
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["message"].as_str().unwrap().contains("spec.bogus"));

    let mut too_many = widget("w3", "red");
    too_many["spec"]["replicas"] = json!(11);
    let r = t
        .send_json("POST", W, "application/json", &too_many)
        .await
        .json();
    assert_eq!(r["code"], 422);
    assert_eq!(r["details"]["causes"][0]["field"], "spec.replicas");
    assert_eq!(
        r["message"],
        "Widget.example.com \"w3\" is invalid: spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"
    );
    too_many["spec"]["replicas"] = json!("x");
    assert_eq!(
        t.send_json("POST", W, "application/json", &too_many)
            .await
            .status,
        422
    );

    let mut nullable = widget("w4", "red");
    nullable["spec"]["size"] = json!(null);
    let r = t
        .send_json("POST", W, "application/json", &nullable)
        .await
        .json();
    assert!(r["spec"]["size"].is_null() && r["spec"].get("size").is_some());
    let mut dropped = widget("w5", "red");
    dropped["spec"]["color"] = json!(null);
    let r = t
        .send_json("POST", W, "application/json", &dropped)
        .await
        .json();
    assert_eq!(
        (
            r["code"].as_i64(),
            r["details"]["causes"][0]["field"].as_str()
        ),
        (Some(422), Some("spec.color"))
    );
    let mut bad_enum = widget("w6", "red");
    bad_enum["spec"]["size"] = json!("Huge");
    let r = t
        .send_json("POST", W, "application/json", &bad_enum)
        .await
        .json();
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("Unsupported value: \"Huge\"")
    );
}

#[tokio::test]
async fn h106_defaults_apply_to_objects_stored_before_the_default() {
    let t = start().await;
    let mut crd = widget_crd();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    spec["level"] = json!({"type": "string"});
    t.send_json("POST", CRDS, "application/json", &crd).await;
    install_widgets_wait(&t).await;
    t.send_json("POST", W, "application/json", &widget("old", "red"))
        .await;
    let mut cur = t.get(&format!("{CRDS}/widgets.example.com")).await.json();
    cur["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["level"]
        ["default"] = json!("high");
    let r = t
        .send_json(
            "PUT",
            &format!("{CRDS}/widgets.example.com"),
            "application/json",
            &cur,
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        t.get(&format!("{W}/old")).await.json()["spec"]["level"],
        "high"
    );
}

async fn install_widgets_wait(t: &TestServer) {
    eventually("established", || async {
        t.get("/apis/example.com/v1").await.status == 200
    })
    .await;
}

#[tokio::test]
async fn h111_list_map_keys_must_be_unique() {
    let t = start().await;
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"] = json!({
        "type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
        "items":{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"port":{"type":"integer"}}}});
    t.send_json("POST", CRDS, "application/json", &crd).await;
    install_widgets_wait(&t).await;
    let mut w = widget("w", "red");
    w["spec"]["ports"] = json!([{"name":"a","port":1},{"name":"a","port":2}]);
    let r = t.send_json("POST", W, "application/json", &w).await.json();
    assert_eq!(
        (
            r["code"].as_i64(),
            r["details"]["causes"][0]["reason"].as_str()
        ),
        (Some(422), Some("FieldValueDuplicate"))
    );
}

#[tokio::test]
async fn h112_h113_crd_update_and_delete() {
    let t = start().await;
    install_widgets(&t).await;
    t.send_json("POST", W, "application/json", &widget("w1", "red"))
        .await;
    let mut cur = t.get(&format!("{CRDS}/widgets.example.com")).await.json();
    let mut v2 = cur["spec"]["versions"][0].clone();
    v2["name"] = json!("v2");
    v2["storage"] = json!(false);
    cur["spec"]["versions"].as_array_mut().unwrap().push(v2);
    assert_eq!(
        t.send_json(
            "PUT",
            &format!("{CRDS}/widgets.example.com"),
            "application/json",
            &cur
        )
        .await
        .status,
        200
    );
    let via_v2 = t
        .get("/apis/example.com/v2/namespaces/default/widgets/w1")
        .await
        .json();
    assert_eq!(
        (
            via_v2["apiVersion"].as_str(),
            via_v2["spec"]["color"].as_str()
        ),
        (Some("example.com/v2"), Some("red"))
    );
    let apis = t.get("/apis").await.json();
    let g = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "example.com")
        .unwrap()
        .clone();
    assert_eq!(g["versions"].as_array().unwrap().len(), 2);

    let mut held = widget("held", "red");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    t.send_json("POST", W, "application/json", &held).await;
    t.raw(
        "DELETE",
        &format!("{CRDS}/widgets.example.com"),
        &[],
        vec![],
    )
    .await;
    eventually("free CRs deleted", || async {
        t.get(&format!("{W}/w1")).await.status == 404
    })
    .await;
    assert_eq!(
        t.get(&format!("{CRDS}/widgets.example.com")).await.status,
        200,
        "a held CR keeps the CRD"
    );
    let crd = t.get(&format!("{CRDS}/widgets.example.com")).await.json();
    assert!(
        crd["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Terminating")
    );
    t.send_json(
        "PATCH",
        &format!("{W}/held"),
        "application/merge-patch+json",
        &json!({"metadata":{"finalizers":null}}),
    )
    .await;
    eventually("CRD gone", || async {
        t.get(&format!("{CRDS}/widgets.example.com")).await.status == 404
    })
    .await;
    assert_eq!(t.get("/apis/example.com/v1").await.status, 404);
    assert!(
        !t.get("/apis").await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
}

#[tokio::test]
async fn h110_cel_rules_and_transition_rules() {
    let t = start().await;
    let mut crd = widget_crd();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["x-kubernetes-validations"] = json!([
        {"rule": "self.replicas >= 1", "message": "at least one replica"},
        {"rule": "!has(oldSelf.color) || self.color == oldSelf.color", "message": "color is immutable"}
    ]);
    assert_eq!(
        t.send_json("POST", CRDS, "application/json", &crd)
            .await
            .status,
        201
    );
    install_widgets_wait(&t).await;
    let mut zero = widget("z", "red");
    zero["spec"]["replicas"] = json!(0);
    let r = t
        .send_json("POST", W, "application/json", &zero)
        .await
        .json();
    assert_eq!(r["code"], 422, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("at least one replica"),
        "{r}"
    );
    assert_eq!(
        t.send_json("POST", W, "application/json", &widget("w", "red"))
            .await
            .status,
        201
    );
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w"),
            "application/merge-patch+json",
            &json!({"spec":{"color":"blue"}}),
        )
        .await
        .json();
    assert_eq!(r["code"], 422, "transition rule with oldSelf: {r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("color is immutable")
    );
    let r = t
        .send_json(
            "PATCH",
            &format!("{W}/w"),
            "application/merge-patch+json",
            &json!({"spec":{"replicas":2}}),
        )
        .await;
    assert_eq!(r.status, 200);
}
