//! M. Fidelity defects real clients found (issue 11), one regression test per defect, named
//! after it. The Gadget CRD has two versions: v1beta1 (served) and v1beta2 (served, storage),
//! with fields only v1beta2 declares, the shape of Cluster API's Machine.

use crate::harness::*;
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
pub const G2: &str = "/apis/fidelity.example.com/v1beta2/namespaces/default/gadgets";
const CM: &str = "/api/v1/namespaces/default/configmaps";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

pub fn gadget_crd() -> Value {
    serde_json::from_str(include_str!("../fixtures/gadget-crd.json")).expect("fixture")
}

pub async fn install_gadgets(t: &TestServer) -> Value {
    let r = t
        .send_json("POST", CRDS, "application/json", &gadget_crd())
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn gadget(name: &str, owners: Value) -> Value {
    json!({"apiVersion": "fidelity.example.com/v1beta2", "kind": "Gadget",
        "metadata": {"name": name, "ownerReferences": owners, "finalizers": ["test.capw.dev/hold"]},
        "spec": {"replicas": 1, "minReadySeconds": 7,
                 "infrastructureRef": {"apiGroup": "infra.example.com", "kind": "Box", "name": name}}})
}

async fn config_map(t: &TestServer, name: &str) -> Value {
    let r = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata": {"name": name}, "data": {"a": "b"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn owner_ref(kind: &str, api_version: &str, obj: &Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
           "uid": obj["metadata"]["uid"]})
}

/// The v1beta2-only fields are intact and the generation is what it was at creation.
fn assert_intact(g: &Value) {
    assert_eq!(g["spec"]["minReadySeconds"], 7, "{g}");
    assert_eq!(
        g["spec"]["infrastructureRef"]["apiGroup"], "infra.example.com",
        "{g}"
    );
    assert_eq!(g["metadata"]["generation"], 1, "{g}");
}

/// Removes the test's own finalizer; fails if the object cannot be updated any more.
async fn release(t: &TestServer, name: &str) {
    let r = t
        .send_json(
            "PATCH",
            &format!("{G2}/{name}"),
            MERGE,
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert!(
        r.status == 200 || r.status == 404,
        "finalizer removal: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
}

#[tokio::test]
async fn gc_writes_multi_version_objects_through_the_storage_version() {
    let t = start().await;
    install_gadgets(&t).await;
    let live = config_map(&t, "live-owner").await;
    let doomed = config_map(&t, "doomed-owner").await;

    // Dangling owner: the GC strips the reference to the deleted owner, keeping the live one.
    let owners = json!([
        owner_ref("ConfigMap", "v1", &live),
        owner_ref("ConfigMap", "v1", &doomed)
    ]);
    let r = t
        .send_json("POST", G2, "application/json", &gadget("dangling", owners))
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = t
        .raw("DELETE", &format!("{CM}/doomed-owner"), &[], vec![])
        .await;
    assert_eq!(r.status, 200);
    eventually("the dangling owner reference is stripped", || async {
        let g = t.get(&format!("{G2}/dangling")).await.json();
        g["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| o.len() == 1)
    })
    .await;
    assert_intact(&t.get(&format!("{G2}/dangling")).await.json());

    // Orphan: the owner goes, the dependent stays, with no empty ownerReferences left behind.
    let owner = config_map(&t, "orphaning-owner").await;
    let r = t
        .send_json(
            "POST",
            G2,
            "application/json",
            &gadget("orphaned", json!([owner_ref("ConfigMap", "v1", &owner)])),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = t
        .send_json(
            "DELETE",
            &format!("{CM}/orphaning-owner"),
            "application/json",
            &json!({"propagationPolicy": "Orphan"}),
        )
        .await;
    assert_eq!(r.status, 200);
    eventually("the orphaning owner is gone", || async {
        t.get(&format!("{CM}/orphaning-owner")).await.status == 404
    })
    .await;
    let g = t.get(&format!("{G2}/orphaned")).await.json();
    assert!(
        g["metadata"].get("ownerReferences").is_none(),
        "orphaning must remove an emptied ownerReferences: {g}"
    );
    assert_intact(&g);

    // Foreground: the GC removes `foregroundDeletion` from the Gadget owner once its
    // dependent is gone; the test's own finalizer keeps the owner to be inspected.
    let r = t
        .send_json(
            "POST",
            G2,
            "application/json",
            &gadget("fg-owner", json!([])),
        )
        .await;
    let fg = r.json();
    let dep = json!({"metadata": {"name": "fg-dependent",
        "ownerReferences": [{"apiVersion": "fidelity.example.com/v1beta2", "kind": "Gadget",
            "name": "fg-owner", "uid": fg["metadata"]["uid"], "blockOwnerDeletion": true}]}});
    assert_eq!(
        t.send_json("POST", CM, "application/json", &dep)
            .await
            .status,
        201
    );
    let r = t
        .send_json(
            "DELETE",
            &format!("{G2}/fg-owner"),
            "application/json",
            &json!({"propagationPolicy": "Foreground"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    eventually("foregroundDeletion is removed", || async {
        let g = t.get(&format!("{G2}/fg-owner")).await.json();
        !g["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "foregroundDeletion"))
    })
    .await;
    let g = t.get(&format!("{G2}/fg-owner")).await.json();
    assert_eq!(g["spec"]["minReadySeconds"], 7, "{g}");
    assert_eq!(
        g["spec"]["infrastructureRef"]["apiGroup"],
        "infra.example.com"
    );
    // Deletion bumps the generation once; the GC's write must not bump it again.
    assert_eq!(g["metadata"]["generation"], 2, "{g}");

    // Every object can still be updated, so every one can be deleted.
    for name in ["dangling", "orphaned", "fg-owner"] {
        release(&t, name).await;
    }
    eventually("the Foreground owner is deleted", || async {
        t.get(&format!("{G2}/fg-owner")).await.status == 404
    })
    .await;
}

#[tokio::test]
async fn json_patch_sees_the_resource_version() {
    let t = start().await;
    let cm = config_map(&t, "rv").await;
    let rv = cm["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let path = format!("{CM}/rv");

    // kopf's and kubectl's form: test the current RV, then change something.
    let ops = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                     {"op": "add", "path": "/data/c", "value": "d"}]);
    let r = t.send_json("PATCH", &path, JSON_PATCH, &ops).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // The RV is now stale: a `replace` of it is a precondition, and fails as a Conflict.
    let ops = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                     {"op": "add", "path": "/data/e", "value": "f"}]);
    let r = t.send_json("PATCH", &path, JSON_PATCH, &ops).await;
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.reason(), "Conflict");

    // A stale `test` fails the patch.
    let ops = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]);
    let r = t.send_json("PATCH", &path, JSON_PATCH, &ops).await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));

    // `copy` from the RV works as on kube.
    let ops = json!([{"op": "copy", "from": "/metadata/resourceVersion", "path": "/data/rv"}]);
    let r = t.send_json("PATCH", &path, JSON_PATCH, &ops).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["data"]["rv"].is_string());
}

#[tokio::test]
async fn scale_subresource_is_served() {
    let t = start().await;
    install_gadgets(&t).await;
    let r = t
        .send_json("POST", G2, "application/json", &gadget("s", json!([])))
        .await;
    assert_eq!(r.status, 201);
    let st = json!({"status": {"replicas": 1, "selector": "app=s"}});
    let r = t
        .send_json("PATCH", &format!("{G2}/s/status"), MERGE, &st)
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    let scale = t.get(&format!("{G2}/s/scale")).await;
    assert_eq!(
        scale.status,
        200,
        "{}",
        String::from_utf8_lossy(&scale.body)
    );
    let s = scale.json();
    assert_eq!(s["apiVersion"], "autoscaling/v1");
    assert_eq!(s["kind"], "Scale");
    assert_eq!(s["spec"]["replicas"], 1);
    assert_eq!(s["status"], json!({"replicas": 1, "selector": "app=s"}));

    let mut put = s.clone();
    put["spec"]["replicas"] = json!(3);
    let r = t
        .send_json("PUT", &format!("{G2}/s/scale"), "application/json", &put)
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["spec"]["replicas"], 3);
    // The same PUT again carries a stale resourceVersion.
    let r = t
        .send_json("PUT", &format!("{G2}/s/scale"), "application/json", &put)
        .await;
    assert_eq!(r.status, 409);

    let r = t
        .send_json(
            "PATCH",
            &format!("{G2}/s/scale"),
            MERGE,
            &json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(r.json()["spec"]["replicas"], 5);
    let ops = json!([{"op": "replace", "path": "/spec/replicas", "value": 2}]);
    let r = t
        .send_json("PATCH", &format!("{G2}/s/scale"), JSON_PATCH, &ops)
        .await;
    assert_eq!(r.json()["spec"]["replicas"], 2);
    let g = t.get(&format!("{G2}/s")).await.json();
    assert_eq!(g["spec"]["replicas"], 2);
    assert_eq!(
        g["metadata"]["generation"], 4,
        "each scale is a spec change"
    );

    let r = t
        .send_json(
            "PATCH",
            &format!("{G2}/s/scale"),
            MERGE,
            &json!({"spec": {"replicas": -1}}),
        )
        .await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));

    // Only the version that declares it serves it, and discovery says so.
    let old = "/apis/fidelity.example.com/v1beta1/namespaces/default/gadgets/s/scale";
    assert_eq!(t.get(old).await.status, 404);
    let d = t.get("/apis/fidelity.example.com/v1beta2").await.json();
    let sub = d["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "gadgets/scale"))
        .cloned()
        .expect("gadgets/scale in discovery");
    assert_eq!(sub["kind"], "Scale");
    assert_eq!(sub["group"], "autoscaling");
    release(&t, "s").await;
}

#[tokio::test]
async fn config_map_and_secret_data_over_one_mebibyte_is_too_long() {
    let t = start().await;
    let big = "x".repeat(1024 * 1024);
    let r = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata": {"name": "big"}, "data": {"k": big}}),
        )
        .await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["message"],
        "ConfigMap \"big\" is invalid: []: Too long: must have at most 1048576 bytes"
    );
    let r = t
        .send_json(
            "POST",
            "/api/v1/namespaces/default/secrets",
            "application/json",
            &json!({"metadata": {"name": "big"}, "stringData": {"k": big}}),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Secret \"big\" is invalid: data: Too long: must have at most 1048576 bytes"
    );
    // Just under the limit (key and value together) is fine.
    let fits = "x".repeat(1024 * 1024 - 1);
    let r = t
        .send_json(
            "POST",
            CM,
            "application/json",
            &json!({"metadata": {"name": "fits"}, "data": {"k": fits}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn delete_responses_have_kube_shapes() {
    let t = start().await;
    let crd = install_gadgets(&t).await;
    // A created CRD carries its status, its defaulted names and conversion at once.
    assert_eq!(crd["status"]["storedVersions"], json!(["v1beta2"]), "{crd}");
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Gadget");
    assert_eq!(crd["spec"]["names"]["listKind"], "GadgetList");
    assert_eq!(crd["spec"]["names"]["singular"], "gadget");
    assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));

    let mut g = gadget("d", json!([]));
    g["metadata"]
        .as_object_mut()
        .map(|m| m.remove("finalizers"));
    let created = t.send_json("POST", G2, "application/json", &g).await.json();
    let r = t.raw("DELETE", &format!("{G2}/d"), &[], vec![]).await;
    assert_eq!(r.status, 200);
    let s = r.json();
    assert_eq!(s["kind"], "Status", "{s}");
    assert_eq!(s["status"], "Success");
    assert_eq!(
        s["details"],
        json!({"name": "d", "group": "fidelity.example.com", "kind": "gadgets",
               "uid": created["metadata"]["uid"]})
    );

    // A ServiceAccount answers the object it deleted.
    let sa = "/api/v1/namespaces/default/serviceaccounts";
    let r = t
        .send_json(
            "POST",
            sa,
            "application/json",
            &json!({"metadata": {"name": "robot"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = t.raw("DELETE", &format!("{sa}/robot"), &[], vec![]).await;
    assert_eq!(r.json()["kind"], "ServiceAccount");
    // A ConfigMap answers a Status.
    config_map(&t, "gone").await;
    let r = t.raw("DELETE", &format!("{CM}/gone"), &[], vec![]).await;
    assert_eq!(r.json()["kind"], "Status");
}
