//! A. Transport, discovery, misc.

use crate::harness::*;

#[tokio::test]
async fn a01_a02_version_and_health() {
    let t = start().await;
    let v = t.get("/version").await.json();
    for f in [
        "major",
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    ] {
        assert!(v[f].is_string(), "version.{f} missing: {v}");
    }
    for p in ["/healthz", "/readyz", "/livez"] {
        let r = t.get(p).await;
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"ok".as_slice()),
            "{p}"
        );
    }
}

#[tokio::test]
async fn a03_to_a05_discovery_documents() {
    let t = start().await;
    let api = t.get("/api").await.json();
    assert_eq!(api["versions"], serde_json::json!(["v1"]));
    assert!(
        !api["serverAddressByClientCIDRs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let apis = t.get("/apis").await.json();
    for g in [
        "apiextensions.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
    ] {
        let group = apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == g)
            .unwrap_or_else(|| panic!("{g} missing"));
        assert!(group["preferredVersion"]["groupVersion"].is_string());
    }
    for gv in [
        "/api/v1",
        "/apis/coordination.k8s.io/v1",
        "/apis/events.k8s.io/v1",
        "/apis/apiextensions.k8s.io/v1",
    ] {
        let doc = t.get(gv).await.json();
        for r in doc["resources"].as_array().unwrap() {
            for f in ["name", "singularName", "namespaced", "kind", "verbs"] {
                assert!(!r[f].is_null(), "{gv}: {f} missing in {r}");
            }
        }
    }
    let core = t.get("/api/v1").await.json();
    assert!(
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "namespaces/status")
    );
}

#[tokio::test]
async fn a06_crd_group_appears_when_established() {
    let t = start().await;
    assert_eq!(t.get("/apis/example.com/v1").await.status, 404);
    install_widgets(&t).await;
    let doc = t.get("/apis/example.com/v1").await.json();
    let names: Vec<&str> = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, vec!["widgets", "widgets/status"]);
    assert_eq!(doc["resources"][0]["shortNames"], serde_json::json!(["wd"]));
    assert!(
        t.get("/apis").await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
    assert_eq!(t.get("/apis/example.com").await.json()["kind"], "APIGroup");
}

#[tokio::test]
async fn a07_a08_openapi_for_kubectl_120() {
    let t = start().await;
    for path in ["/openapi/v2", "/openapi/v2?timeout=32s"] {
        let r = t
            .raw(
                "GET",
                path,
                &[(
                    "accept",
                    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                )],
                vec![],
            )
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["content-type"], "application/octet-stream");
        assert!(r.body.is_empty());
    }
    assert_eq!(t.get("/openapi/v2").await.json()["swagger"], "2.0");
}

#[tokio::test]
async fn a09_to_a12_queries_paths_and_accept() {
    let t = start().await;
    install_widgets(&t).await;
    assert_eq!(
        t.get(&format!("{W}?&limit=1&pretty=true&bogus=1"))
            .await
            .status,
        200
    );
    let r = t.get("/nonexistent").await;
    assert_eq!((r.status, r.reason().as_str()), (404, "NotFound"));
    let r = t.raw("GET", W, &[], vec![]).await;
    assert_eq!(r.headers["content-type"], "application/json");
    let r = t
        .raw(
            "GET",
            W,
            &[("accept", "application/vnd.kubernetes.protobuf")],
            vec![],
        )
        .await;
    assert_eq!((r.status, r.reason().as_str()), (406, "NotAcceptable"));
    let agg =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let r = t.raw("GET", "/apis", &[("accept", agg)], vec![]).await;
    assert_eq!(
        r.json()["kind"],
        "APIGroupDiscoveryList",
        "aggregated discovery is served when asked for"
    );
    let r = t
        .raw("GET", "/apis", &[("accept", "application/json")], vec![])
        .await;
    assert_eq!(r.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn metrics_are_openmetrics_text() {
    let t = start().await;
    t.get("/api").await;
    t.get("/api/v1/namespaces/default/configmaps").await;
    t.get("/api/v1/namespaces/default/configmaps").await;
    t.get("/api/v1/namespaces/default/configmaps/absent").await;
    let r = t.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = String::from_utf8_lossy(&r.body);
    let gets: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("capw_apiserver_requests_total{method=\"GET\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(gets >= 1, "{text}");
    let by_kind = |verb: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "capw_apiserver_resource_requests_total{{verb=\"{verb}\",resource=\"/configmaps\"}} "
                ))
            })
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert_eq!(by_kind("list"), Some(2), "{text}");
    assert_eq!(by_kind("get"), Some(1), "{text}");
    assert!(
        text.contains("# TYPE capw_apiserver_watches gauge"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}
