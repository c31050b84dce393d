//! I. Built-in kinds.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn i115_secret_string_data() {
    let t = start().await;
    let s = "/api/v1/namespaces/default/secrets";
    let r = t
        .send_json(
            "POST",
            s,
            "application/json",
            &json!({"metadata":{"name":"s"},"stringData":{"a":"hi"}}),
        )
        .await
        .json();
    assert_eq!(
        (r["data"]["a"].as_str(), r["type"].as_str()),
        (Some("aGk="), Some("Opaque"))
    );
    assert!(r.get("stringData").is_none());
    let r = t
        .send_json(
            "POST",
            s,
            "application/json",
            &json!({"metadata":{"name":"bad"},"data":{"a":"!!"}}),
        )
        .await;
    assert_eq!(r.status, 422);
    let r = t
        .send_json(
            "PATCH",
            &format!("{s}/s"),
            "application/merge-patch+json",
            &json!({"type":"kubernetes.io/tls"}),
        )
        .await;
    assert_eq!(r.status, 422, "type is immutable");
    t.send_json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        &json!({"metadata":{"name":"im"},"immutable":true,"data":{"a":"1"}}),
    )
    .await;
    let r = t
        .send_json(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/im",
            "application/merge-patch+json",
            &json!({"data":{"a":"2"}}),
        )
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn i116_event_views_and_ttl() {
    let t = start_with(|c| c.controllers.event_ttl = Duration::from_secs(1)).await;
    let ev = json!({"metadata":{"name":"e1"},"regarding":{"kind":"Widget","name":"w1","namespace":"default"},
        "reason":"R","note":"hello","type":"Normal","action":"A","eventTime":"2020-01-01T00:00:00.000000Z",
        "reportingController":"c","reportingInstance":"i"});
    let created = t
        .send_json(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            "application/json",
            &ev,
        )
        .await
        .json();
    assert_eq!(created["note"], "hello");
    let core = t.get("/api/v1/namespaces/default/events/e1").await.json();
    assert_eq!(
        (
            core["involvedObject"]["name"].as_str(),
            core["message"].as_str()
        ),
        (Some("w1"), Some("hello"))
    );
    let series = json!({"series":{"count":2,"lastObservedTime":"2020-01-01T00:00:01.000000Z"}});
    let r = t
        .send_json(
            "PATCH",
            "/apis/events.k8s.io/v1/namespaces/default/events/e1",
            "application/merge-patch+json",
            &series,
        )
        .await
        .json();
    assert_eq!(r["series"]["count"], 2);
    assert_eq!(
        t.get("/api/v1/namespaces/default/events/e1").await.json()["count"],
        2
    );
    // The event is years old, so the TTL sweeper removes it.
    eventually("expired event collected", || async {
        t.get("/api/v1/namespaces/default/events/e1").await.status == 404
    })
    .await;
}

#[tokio::test]
async fn i118_self_subject_access_review() {
    let t = start().await;
    let review = json!({"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
        "spec":{"resourceAttributes":{"verb":"create","resource":"configmaps","namespace":"default"}}});
    let r = t
        .send_json(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "application/json",
            &review,
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["status"]["allowed"], true);
    assert_eq!(
        t.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .await
            .status,
        405
    );
}

#[tokio::test]
async fn i117_leases() {
    let t = start().await;
    let l = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = t.send_json("POST", l, "application/json", &json!({"metadata":{"name":"l"},"spec":{"holderIdentity":"a","leaseDurationSeconds":10}})).await.json();
    let r = t
        .send_json(
            "PATCH",
            &format!("{l}/l"),
            "application/strategic-merge-patch+json",
            &json!({"spec":{"holderIdentity":"b"}}),
        )
        .await
        .json();
    assert_eq!(r["spec"]["holderIdentity"], "b");
    let r = t
        .send_json("PUT", &format!("{l}/l"), "application/json", &lease)
        .await;
    assert_eq!((r.status, r.reason().as_str()), (409, "Conflict"));
    let r = t
        .send_json(
            "POST",
            l,
            "application/json",
            &json!({"metadata":{"name":"bad"},"spec":{"leaseDurationSeconds":"long"}}),
        )
        .await;
    assert_eq!(r.status, 400, "typed decoding rejects a wrong type");
}
