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

const POLICIES: &str = "/apis/fidelity.example.com/v1/namespaces/default/policies";

fn policy_crd() -> Value {
    serde_json::from_str(include_str!("../fixtures/policy-crd.json")).expect("fixture")
}

fn good_spec() -> Value {
    json!({"endpoint": "https://example.com/hook", "podCIDR": "10.244.0.0/16",
           "version": "1.31.2", "name": "web", "token": "aGVsbG8=",
           "id": "6f1a0a52-8c1e-4c8e-9a59-6f0c3d3e2b11", "window": "90m",
           "contact": "ops@example.com", "nodeIP": "10.0.0.7", "replicas": 2,
           "selector": {"matchLabels": {"app": "web"}}, "limits": {"cpu": "1"}})
}

async fn create_policy(t: &TestServer, name: &str, spec: Value) -> Raw {
    t.send_json(
        "POST",
        POLICIES,
        "application/json",
        &json!({"apiVersion": "fidelity.example.com/v1", "kind": "Policy",
                "metadata": {"name": name}, "spec": spec}),
    )
    .await
}

fn messages(r: &Raw) -> Vec<String> {
    r.json()["details"]["causes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    format!(
                        "{}: {}",
                        c["field"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn cel_libraries_and_string_formats_validate_as_kube() {
    let t = start().await;
    let r = t
        .send_json("POST", CRDS, "application/json", &policy_crd())
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = create_policy(&t, "good", good_spec()).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    let bad = |k: &str, v: Value| {
        let mut s = good_spec();
        s[k] = v;
        s
    };
    let cases = [
        (
            bad("endpoint", json!("http://example.com")),
            vec!["spec.endpoint: Forbidden: must be an https URL"],
        ),
        (
            bad("podCIDR", json!("10.0.0.0/28")),
            vec!["spec.podCIDR: Invalid value: \"string\": not a /24 or wider CIDR: 10.0.0.0/28"],
        ),
        (
            bad("version", json!("1.28.0")),
            vec!["spec.version: Invalid value: \"string\": must be a version after 1.29"],
        ),
        (
            bad("name", json!("Not_A_Label")),
            vec!["spec.name: Invalid value: \"string\": must be a DNS label"],
        ),
        (
            bad("raw", json!("not base64!")),
            vec![
                "spec.raw: Invalid value: \"not base64!\": spec.raw in body must be of type byte: \"not base64!\"",
            ],
        ),
        (
            bad("id", json!("1234")),
            vec![
                "spec.id: Invalid value: \"1234\": spec.id in body must be of type uuid: \"1234\"",
            ],
        ),
        (
            bad("window", json!("an hour")),
            vec![
                "spec.window: Invalid value: \"an hour\": spec.window in body must be of type duration: \"an hour\"",
            ],
        ),
        (
            bad("contact", json!("nobody")),
            vec![
                "spec.contact: Invalid value: \"nobody\": spec.contact in body must be of type email: \"nobody\"",
            ],
        ),
        (
            bad("nodeIP", json!("fd00::1")),
            vec![
                "spec.nodeIP: Invalid value: \"fd00::1\": spec.nodeIP in body must be of type ipv4: \"fd00::1\"",
            ],
        ),
        (
            bad("limits", json!({})),
            vec![
                "spec.limits: Invalid value: \"object\": spec.limits in body should have at least 1 properties",
            ],
        ),
        (
            bad("token", json!("Zm9yYmlkZGVu")),
            vec!["spec: Invalid value: \"object\": token may not be forbidden"],
        ),
        // A type error blocks the CEL rules, and kube says so.
        (
            bad("replicas", json!("two")),
            vec![
                "spec.replicas: Invalid value: \"two\": spec.replicas in body must be of type integer: \"string\"",
                "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ],
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let r = create_policy(&t, &format!("bad-{i}"), spec).await;
        assert_eq!(
            r.status,
            422,
            "case {i}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(messages(&r), want, "case {i}");
    }

    // A transition rule with its own fieldPath.
    let path = format!("{POLICIES}/good");
    let r = t
        .send_json("PATCH", &path, MERGE, &json!({"spec": {"replicas": 1}}))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        messages(&r),
        vec!["spec.replicas: Invalid value: \"integer\": replicas may not go down"]
    );
}

#[tokio::test]
async fn cel_optional_syntax_and_optional_old_self_work_as_kube() {
    let t = start().await;
    let r = t
        .send_json("POST", CRDS, "application/json", &policy_crd())
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let with = |k: &str, v: Value| {
        let mut s = good_spec();
        s[k] = v;
        s
    };

    // `.?` and `orValue`: an absent field reads as the default, a present one as itself.
    let r = create_policy(&t, "range", with("range", json!({"min": 5}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    for (i, (range, want)) in [
        (json!({"min": 200}), "min 200 exceeds max 100"),
        (json!({"min": 4, "max": 3}), "min 4 exceeds max 3"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = create_policy(&t, &format!("range-{i}"), with("range", range)).await;
        assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            messages(&r),
            vec![format!("spec.range: Invalid value: \"object\": {want}")]
        );
    }

    // optionalOldSelf: the transition rule also runs on create, with oldSelf = optional.none().
    let owner_error = "spec.owner: Invalid value: \"string\": owner is immutable, and a new owner starts with team-";
    let r = create_policy(&t, "bob", with("owner", json!("bob"))).await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(messages(&r), vec![owner_error]);
    let r = create_policy(&t, "owned", with("owner", json!("team-a"))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // On update oldSelf is optional.of(old): the owner cannot change, other fields can.
    let path = format!("{POLICIES}/owned");
    let r = t
        .send_json("PATCH", &path, MERGE, &json!({"spec": {"owner": "team-b"}}))
        .await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(messages(&r), vec![owner_error]);
    let r = t
        .send_json("PATCH", &path, MERGE, &json!({"spec": {"replicas": 3}}))
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // A field first set on update has no old value to correlate with: optional.none() again.
    let path = format!("{POLICIES}/range");
    for (owner, status) in [("carol", 422), ("team-c", 200)] {
        let r = t
            .send_json("PATCH", &path, MERGE, &json!({"spec": {"owner": owner}}))
            .await;
        assert_eq!(
            r.status,
            status,
            "{owner}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

#[tokio::test]
async fn crd_creation_rejects_bad_rules_patterns_and_list_types() {
    let t = start().await;
    let mut crd = policy_crd();
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    let props = crd
        .pointer_mut(&format!("{spec}/properties"))
        .and_then(Value::as_object_mut)
        .expect("properties");
    props.insert("code".into(), json!({"type": "string", "pattern": "[a-z"}));
    props.insert(
        "bag".into(),
        json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"}),
    );
    props.insert(
        "typo".into(),
        json!({"type": "object", "properties": {"a": {"type": "string"}},
               "x-kubernetes-validations": [{"rule": "self.b == 'x'"}]}),
    );
    props.insert(
        "unknownFn".into(),
        json!({"type": "string", "x-kubernetes-validations": [{"rule": "frobnicate(self)"}]}),
    );
    props.insert(
        "notBool".into(),
        json!({"type": "string", "x-kubernetes-validations": [{"rule": "self + 'x'"}]}),
    );
    props.insert(
        "optional".into(),
        json!({"type": "string", "x-kubernetes-validations": [
            {"rule": "self != 'x'", "optionalOldSelf": true}]}),
    );
    props.insert(
        "optTypo".into(),
        json!({"type": "object", "properties": {"a": {"type": "string"}},
               "x-kubernetes-validations": [{"rule": "self.?b.hasValue()"}]}),
    );
    let r = t.send_json("POST", CRDS, "application/json", &crd).await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    let got = messages(&r);
    let base = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties";
    let rule = |r: &str| {
        format!(
            "apiextensions.ValidationRule{{Rule:{r:?}, Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}"
        )
    };
    let want = [
        format!(
            "{base}[bag].x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\""
        ),
        format!(
            "{base}[code].pattern: Invalid value: \"[a-z\": must be a valid regular expression, but isn't: error: unclosed character class"
        ),
        format!(
            "{base}[notBool].x-kubernetes-validations[0].rule: Invalid value: {}: cel expression must evaluate to a bool",
            rule("self + 'x'")
        ),
        format!(
            "{base}[optTypo].x-kubernetes-validations[0].rule: Invalid value: {}: compilation failed: ERROR: <input>: undefined field 'b'",
            rule("self.?b.hasValue()")
        ),
        format!(
            "{base}[optional].x-kubernetes-validations[0].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"
        ),
        format!(
            "{base}[typo].x-kubernetes-validations[0].rule: Invalid value: {}: compilation failed: ERROR: <input>: undefined field 'b'",
            rule("self.b == 'x'")
        ),
        format!(
            "{base}[unknownFn].x-kubernetes-validations[0].rule: Invalid value: {}: compilation failed: ERROR: <input>: undeclared reference to 'frobnicate' (in container '')",
            rule("frobnicate(self)")
        ),
    ];
    for w in &want {
        assert!(got.contains(w), "missing {w}\nin {got:#?}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

#[tokio::test]
async fn validation_ratchets_unchanged_invalid_fields() {
    let t = start().await;
    let mut crd = policy_crd();
    let r = t.send_json("POST", CRDS, "application/json", &crd).await;
    assert_eq!(r.status, 201);
    let mut spec = good_spec();
    spec["endpoint"] = json!("https://old.example.com");
    spec["version"] = json!("1.30.0");
    let r = create_policy(&t, "p", spec).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // The CRD tightens: endpoints must be internal, versions get a maxLength of 3.
    let spec_schema = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    let cur = t
        .get(&format!("{CRDS}/policies.fidelity.example.com"))
        .await
        .json();
    crd["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
    *crd.pointer_mut(&format!(
        "{spec_schema}/properties/endpoint/x-kubernetes-validations/0/rule"
    ))
    .expect("rule") = json!("isURL(self) && url(self).getHostname().endsWith('.internal')");
    *crd.pointer_mut(&format!("{spec_schema}/properties/version"))
        .expect("version") = json!({"type": "string", "maxLength": 3});
    let r = t
        .send_json(
            "PUT",
            &format!("{CRDS}/policies.fidelity.example.com"),
            "application/json",
            &crd,
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // Labels, finalizers, status and other spec fields still update.
    let path = format!("{POLICIES}/p");
    let r = t
        .send_json(
            "PATCH",
            &path,
            MERGE,
            &json!({"metadata": {"labels": {"tier": "gold"}, "finalizers": ["test.capw.dev/hold"]},
                    "spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = t
        .send_json(
            "PATCH",
            &format!("{path}/status"),
            MERGE,
            &json!({"status": {"ready": true}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = t
        .send_json(
            "PATCH",
            &path,
            MERGE,
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // Changing an invalid field is checked against the new rules.
    let r = t
        .send_json(
            "PATCH",
            &path,
            MERGE,
            &json!({"spec": {"version": "1.31.0"}}),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        messages(&r),
        vec![
            "spec.version: Too long: may not be more than 3 bytes".to_string(),
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".to_string(),
        ]
    );
    let r = t
        .send_json(
            "PATCH",
            &path,
            MERGE,
            &json!({"spec": {"endpoint": "https://new.example.com"}}),
        )
        .await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        messages(&r),
        vec!["spec.endpoint: Forbidden: must be an https URL".to_string()]
    );
}

#[tokio::test]
async fn server_side_apply_honours_atomic_maps_and_reports_conflicts_as_kube() {
    let t = start().await;
    let r = t
        .send_json("POST", CRDS, "application/json", &policy_crd())
        .await;
    assert_eq!(r.status, 201);
    let apply = |manager: &'static str, body: Value| {
        let t = &t;
        async move {
            t.raw(
                "PATCH",
                &format!("{POLICIES}/a?fieldManager={manager}"),
                &[("content-type", "application/apply-patch+yaml")],
                serde_json::to_vec(&body).expect("json"),
            )
            .await
        }
    };
    let obj = |spec: Value| {
        json!({"apiVersion": "fidelity.example.com/v1", "kind": "Policy",
               "metadata": {"name": "a"}, "spec": spec})
    };
    let r = apply(
        "alice",
        obj(json!({"selector": {"matchLabels": {"app": "web", "tier": "fe"}}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let mf = &r.json()["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        mf["f:spec"]["f:selector"],
        json!({}),
        "an atomic map is one field: {mf}"
    );

    // Re-applying a smaller atomic map replaces it whole: no stale key survives.
    let r = apply(
        "alice",
        obj(json!({"selector": {"matchLabels": {"app": "web"}}})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );

    // Another applier touching one key of it conflicts on the whole map.
    let r = apply(
        "bob",
        obj(json!({"selector": {"matchLabels": {"app": "api"}}, "replicas": 1})),
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.selector"
    );

    // An Update manager is named with its API version; conflicts are grouped per manager.
    let r = t
        .send_json(
            "PATCH",
            &format!("{POLICIES}/a?fieldManager=carol"),
            MERGE,
            &json!({"spec": {"replicas": 5, "name": "x"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = apply(
        "bob",
        obj(json!({"selector": {"matchLabels": {"app": "api"}}, "replicas": 1, "name": "y"})),
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 3 conflicts: conflicts with \"alice\":\n- .spec.selector\nconflicts with \"carol\" using fidelity.example.com/v1:\n- .spec.name\n- .spec.replicas"
    );
}

#[tokio::test]
async fn discovery_is_aggregated_and_openapi_is_published() {
    let t = start().await;
    install_gadgets(&t).await;
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let r = t.raw("GET", "/apis", &[("accept", accept)], vec![]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let doc = r.json();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    let group = doc["items"]
        .as_array()
        .and_then(|i| {
            i.iter()
                .find(|g| g["metadata"]["name"] == "fidelity.example.com")
        })
        .cloned()
        .expect("the Gadget group");
    assert_eq!(
        group["versions"][0]["version"], "v1beta2",
        "preferred first"
    );
    let res = &group["versions"][0]["resources"][0];
    assert_eq!(res["resource"], "gadgets");
    assert_eq!(res["categories"], json!(["fidelity"]));
    assert_eq!(res["scope"], "Namespaced");
    assert_eq!(res["subresources"][1]["responseKind"]["kind"], "Scale");
    let core = t
        .raw("GET", "/api", &[("accept", accept)], vec![])
        .await
        .json();
    assert!(
        core["items"][0]["versions"][0]["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["resource"] == "configmaps"))
    );
    // A client that does not ask gets the legacy documents.
    assert_eq!(t.get("/apis").await.json()["kind"], "APIGroupList");

    let index = t.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/fidelity.example.com/v1beta2"]["serverRelativeURL"]
        .as_str()
        .expect("v1beta2 in the index")
        .to_string();
    let v3 = t.get(&url).await.json();
    let def = &v3["components"]["schemas"]["com.example.fidelity.v1beta2.Gadget"];
    assert_eq!(
        def["x-kubernetes-group-version-kind"],
        json!([{"group": "fidelity.example.com", "version": "v1beta2", "kind": "Gadget"}])
    );
    assert!(def["properties"]["spec"]["properties"]["minReadySeconds"].is_object());
    let v2 = t.get("/openapi/v2").await.json();
    assert!(v2["definitions"]["com.example.fidelity.v1beta1.Gadget"].is_object());
    assert!(v2["definitions"]["io.k8s.api.core.v1.ConfigMap"].is_object());
}

#[tokio::test]
async fn event_tables_have_kube_columns() {
    let t = start().await;
    let ev = json!({"metadata": {"name": "e1"}, "type": "Normal", "reason": "Scaled",
        "message": "scaled to 3", "involvedObject": {"kind": "Gadget", "name": "s"},
        "source": {"component": "capw"}, "count": 2,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"});
    let r = t
        .send_json(
            "POST",
            "/api/v1/namespaces/default/events",
            "application/json",
            &ev,
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let table = t
        .raw(
            "GET",
            "/api/v1/namespaces/default/events",
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            vec![],
        )
        .await
        .json();
    let cols: Vec<(String, i64)> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let want = [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ];
    assert_eq!(
        cols,
        want.iter()
            .map(|(n, p)| (n.to_string(), *p))
            .collect::<Vec<_>>()
    );
    let row = &table["rows"][0]["cells"];
    assert_eq!(row[3], "gadget/s");
    assert_eq!(row[5], "capw");
    assert_eq!(row[8], "2");
    assert_eq!(row[9], "e1");
}

#[tokio::test]
async fn strict_decoding_errors_carry_kubes_prefix() {
    let t = start().await;
    install_gadgets(&t).await;
    let mut g = gadget("strict", json!([]));
    g["spec"]["bogus"] = json!(1);
    let r = t
        .send_json(
            "POST",
            &format!("{G2}?fieldValidation=Strict"),
            "application/json",
            &g,
        )
        .await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["message"],
        "Gadget in version \"v1beta2\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.bogus\""
    );
}
