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
        // Version and health are public, as kube's system:public-info-viewer role has it.
        if path == "/version" || path == "/healthz" {
            assert_eq!(r.status, 200, "{path} without a token");
        } else {
            assert_eq!(
                (r.status, r.reason().as_str()),
                (401, "Unauthorized"),
                "{path} without a token"
            );
        }
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

/// A new bootstrap token, its Secret stored with 15 minutes to live: (token, id).
async fn bootstrap_token(t: &TestServer) -> (String, String) {
    use capw_apiserver::bootstrap_token as bt;
    let token = bt::generate();
    let (id, secret) = bt::parse(&token).expect("generated token parses");
    let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(900)).to_string();
    let created = t
        .send_json(
            "POST",
            "/api/v1/namespaces/kube-system/secrets",
            "application/json",
            &bt::secret_object(id, secret, &later),
        )
        .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let id = id.to_string();
    (token, id)
}

/// A bootstrap token authenticates while its `kube-system/bootstrap-token-<id>` Secret holds
/// it, allows authentication and has not expired; it reaches discovery and Nodes only; anyone
/// may read kubeadm's cluster-info; an expired token's Secret is deleted by the token cleaner.
#[tokio::test]
async fn bootstrap_tokens_authenticate_until_they_expire_and_reach_only_nodes() {
    use capw_apiserver::bootstrap_token as bt;
    let t = start_with(|c| c.controllers.resync = std::time::Duration::from_millis(200)).await;
    let (token, id) = bootstrap_token(&t).await;
    let id = id.as_str();
    let as_token = |path: &'static str, token: String| {
        let t = &t;
        async move { t.raw_as("GET", path, &[], vec![], Some(&token)).await }
    };
    assert_eq!(as_token("/api/v1/nodes", token.clone()).await.status, 200);
    assert_eq!(as_token("/api", token.clone()).await.status, 200);
    let other = as_token("/api/v1/namespaces/kube-system/secrets", token.clone()).await;
    assert_eq!(other.status, 403, "a bootstrap token reads Secrets");
    assert!(
        other.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("system:bootstrap:{id}"))),
        "{}",
        other.json()
    );
    let wrong = format!("{id}.{}", "0".repeat(16));
    assert_eq!(as_token("/api/v1/nodes", wrong).await.status, 401);
    let unknown = bt::generate();
    assert_eq!(as_token("/api/v1/nodes", unknown).await.status, 401);

    // cluster-info is public; other ConfigMaps are not.
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": "x"}});
    let r = t
        .send_json(
            "POST",
            "/api/v1/namespaces/kube-public/configmaps",
            "application/json",
            &cm,
        )
        .await;
    assert_eq!(r.status, 201);
    let anon = t
        .raw_as(
            "GET",
            "/api/v1/namespaces/kube-public/configmaps/cluster-info",
            &[],
            vec![],
            None,
        )
        .await;
    assert_eq!(anon.status, 200);
    assert_eq!(anon.json()["data"]["kubeconfig"], "x");
    let anon = t
        .raw_as(
            "GET",
            "/api/v1/namespaces/kube-public/configmaps",
            &[],
            vec![],
            None,
        )
        .await;
    assert_eq!(anon.status, 401);

    // Usage not allowing authentication: refused.
    let path = format!(
        "/api/v1/namespaces/kube-system/secrets/{}",
        bt::secret_name(id)
    );
    let no_auth = serde_json::json!({"stringData": {"usage-bootstrap-authentication": "false"}});
    let r = t
        .send_json("PATCH", &path, "application/merge-patch+json", &no_auth)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(as_token("/api/v1/nodes", token.clone()).await.status, 401);
    let with_auth = serde_json::json!({"stringData": {"usage-bootstrap-authentication": "true"}});
    t.send_json("PATCH", &path, "application/merge-patch+json", &with_auth)
        .await;
    assert_eq!(as_token("/api/v1/nodes", token.clone()).await.status, 200);

    // Expired: refused at once, then deleted by the token cleaner.
    let past = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1)).to_string();
    let expire = serde_json::json!({"stringData": {"expiration": past}});
    let r = t
        .send_json("PATCH", &path, "application/merge-patch+json", &expire)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(as_token("/api/v1/nodes", token.clone()).await.status, 401);
    eventually("the expired bootstrap token is deleted", || {
        let t = &t;
        let path = path.clone();
        async move { t.get(&path).await.status == 404 }
    })
    .await;
}

/// kube-controller-manager's CSR approver and signer: a kubelet client request from a bootstrap
/// token is approved and signed by the CA, with the requester recorded from the credentials; a
/// request naming another subject waits until approved through `/approval`, and is then
/// signed for client use only.
#[tokio::test]
async fn kubelet_client_certificates_are_approved_and_signed_by_the_ca() {
    use base64::Engine as _;
    let t = start().await;
    let (token, id) = bootstrap_token(&t).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let csr = |name: &str, cn: &str, org: &str| {
        let (pem, _key) = capw_apiserver::tls::client_csr(cn, &[org]).expect("a CSR");
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": b64(&pem), "username": "someone-else",
                "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                "usages": ["digital signature", "client auth"]}})
    };
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let post = |body: serde_json::Value| {
        let t = &t;
        let token = token.clone();
        async move {
            t.raw_as(
                "POST",
                path,
                &[("content-type", "application/json")],
                serde_json::to_vec(&body).expect("json"),
                Some(&token),
            )
            .await
        }
    };
    let r = post(csr("node-a", "system:node:a", "system:nodes")).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["spec"]["username"],
        format!("system:bootstrap:{id}")
    );
    let r = post(csr("not-a-node", "someone", "system:masters")).await;
    assert_eq!(r.status, 201);
    let signed = |name: &'static str| {
        let t = &t;
        async move {
            let csr = t.get(&format!("{path}/{name}")).await.json();
            csr["status"]["certificate"].as_str().map(|c| {
                String::from_utf8(
                    base64::engine::general_purpose::STANDARD
                        .decode(c)
                        .expect("base64"),
                )
                .expect("pem")
            })
        }
    };
    eventually("node-a is signed", || async {
        signed("node-a").await.is_some()
    })
    .await;
    let cert = signed("node-a").await.expect("signed");
    let ca = t.server.ca_pem().to_string();
    assert!(
        capw_apiserver::tls::remaining_validity(&cert, &ca)
            .is_some_and(|left| left > std::time::Duration::from_secs(364 * 24 * 3600)),
        "{cert}"
    );
    let node_a = t.get(&format!("{path}/node-a")).await.json();
    assert_eq!(node_a["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(node_a["status"]["conditions"][0]["reason"], "AutoApproved");
    // Not a kubelet's: pending until someone approves it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(signed("not-a-node").await.is_none());
    let table = t
        .raw(
            "GET",
            path,
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            vec![],
        )
        .await
        .json();
    let rows: Vec<String> = table["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cells"].to_string())
        .collect();
    assert!(
        rows.iter()
            .any(|r| r.contains("\"not-a-node\"") && r.contains("\"Pending\"")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.contains("\"node-a\"") && r.contains("\"Approved,Issued\"")),
        "{rows:?}"
    );
    let mut approve = t.get(&format!("{path}/not-a-node")).await.json();
    approve["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "KubectlApprove", "message": "approved by a test"}]);
    let r = t
        .send_json(
            "PUT",
            &format!("{path}/not-a-node/approval"),
            "application/json",
            &approve,
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    eventually("the approved request is signed", || async {
        signed("not-a-node").await.is_some()
    })
    .await;
}
