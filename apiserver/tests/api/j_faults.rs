//! J. Faults and robustness, and authentication.

use crate::harness::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn j119_to_j122_bad_requests() {
    let t = start().await;
    install_widgets(&t).await;
    let r = t
        .raw(
            "POST",
            W,
            &[("content-type", "application/json")],
            "{not json",
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (400, "BadRequest"));
    let r = t
        .send_json(
            "POST",
            W,
            "application/json",
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = t
        .raw(
            "POST",
            W,
            &[("content-type", "application/yaml")],
            "a: [unclosed",
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        t.get("/apis/example.com/v1/namespaces/default/gadgets")
            .await
            .status,
        404
    );
    let big = vec![b' '; 3 * 1024 * 1024 + 1];
    let r = t
        .raw("POST", W, &[("content-type", "application/json")], big)
        .await;
    assert_eq!(
        (r.status, r.reason().as_str()),
        (413, "RequestEntityTooLarge")
    );
    let r = t
        .send_json(
            "POST",
            &format!("{W}/w1"),
            "application/json",
            &widget("w1", "r"),
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (405, "MethodNotAllowed"));
    let r = t
        .send_json("PUT", W, "application/json", &widget("w1", "r"))
        .await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn j123_concurrent_replaces_with_one_rv_exactly_one_wins() {
    let t = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    let base: ConfigMap =
        serde_json::from_value(json!({"metadata":{"name":"race"},"data":{"v":"0"}})).unwrap();
    let created = api.create(&PostParams::default(), &base).await.unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let api = api.clone();
            let mut cm = created.clone();
            cm.data
                .as_mut()
                .unwrap()
                .insert("v".into(), (i + 1).to_string());
            tokio::spawn(async move { api.replace("race", &PostParams::default(), &cm).await })
        })
        .collect();
    let mut ok = 0;
    let mut conflicts = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(kube::Error::Api(s)) if s.is_conflict() => conflicts += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!((ok, conflicts), (1, 49));
}

#[tokio::test]
async fn j124_concurrent_merge_patches_all_apply() {
    let t = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata":{"name":"m"}})).unwrap(),
    )
    .await
    .unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                let p = json!({"data": {format!("k{i}"): "v"}});
                api.patch("m", &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut rvs = std::collections::BTreeSet::new();
    for t in tasks {
        rvs.insert(t.await.unwrap().metadata.resource_version.unwrap());
    }
    assert_eq!(rvs.len(), 50);
    assert_eq!(api.get("m").await.unwrap().data.unwrap().len(), 50);
}

#[tokio::test]
async fn j125_overload_answers_429_with_retry_after() {
    let t = std::sync::Arc::new(start_with(|c| c.http.max_inflight_writes = 1).await);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move {
                t.send_json(
                    "POST",
                    CM,
                    "application/json",
                    &json!({"metadata":{"name":format!("c{i}")}}),
                )
                .await
            })
        })
        .collect();
    let mut saw_429 = false;
    for task in tasks {
        let r = task.await.unwrap();
        if r.status == 429 {
            saw_429 = true;
            assert_eq!(r.reason(), "TooManyRequests");
            assert!(r.headers.get("retry-after").is_some());
        } else {
            assert_eq!(r.status, 201);
        }
    }
    assert!(
        saw_429,
        "one write in flight at a time: concurrent writers must see 429"
    );
    // kube-rs retries 429 transparently.
    let api: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata":{"name":"via-kube"}})).unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn auth_requires_the_token() {
    let t = start().await;
    for path in ["/api", "/api/v1/namespaces", "/version", "/healthz"] {
        let r = t.raw_as("GET", path, &[], vec![], None).await;
        assert_eq!(
            (r.status, r.reason().as_str()),
            (401, "Unauthorized"),
            "{path} without a token"
        );
        let r = t
            .raw_as("GET", path, &[], vec![], Some("wrong-token"))
            .await;
        assert_eq!(r.status, 401, "{path} with a wrong token");
    }
    assert_eq!(t.get("/api/v1/namespaces").await.status, 200);
    assert!(t.server.addr().ip().is_loopback());
    let mode = std::fs::metadata(t.server.kubeconfig_path()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}
