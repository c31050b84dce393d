//! Test harness: a real server on 127.0.0.1:0 in a temp dir, a `kube::Client` built from the
//! kubeconfig it wrote, and a raw HTTPS client (no retries, optional token) for byte-level checks.

use bytes::Bytes;
use capw_apiserver::{Config, Server};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub struct TestServer {
    pub server: Server,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
}

pub struct Raw {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn reason(&self) -> String {
        self.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

pub async fn start() -> TestServer {
    start_with(|_| {}).await
}

pub async fn start_with(tune: impl FnOnce(&mut Config)) -> TestServer {
    init_tracing();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = Config::ephemeral(dir.path());
    config.controllers.resync = Duration::from_secs(1);
    tune(&mut config);
    let server = Server::start(config).await.expect("server starts");
    let client = client_for(server.kubeconfig_path()).await;
    TestServer {
        server,
        client,
        dir,
    }
}

pub async fn client_for(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(cfg).expect("client")
}

impl TestServer {
    /// Restarts the server on the same data directory.
    pub async fn restart(self) -> TestServer {
        self.restart_with(|_| {}).await
    }

    pub async fn restart_with(self, tune: impl FnOnce(&mut Config)) -> TestServer {
        let TestServer { server, dir, .. } = self;
        server.shutdown().await;
        let mut config = Config::ephemeral(dir.path());
        config.controllers.resync = Duration::from_secs(1);
        tune(&mut config);
        let server = Server::start(config).await.expect("server restarts");
        let client = client_for(server.kubeconfig_path()).await;
        TestServer {
            server,
            client,
            dir,
        }
    }

    async fn connect(&self) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.server.ca_pem().as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA added");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("tls versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(self.server.addr())
            .await
            .expect("connect");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
            .await
            .expect("TLS handshake");
        let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("http handshake");
        tokio::spawn(conn);
        send
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        token: Option<&str>,
    ) -> http::Request<Full<Bytes>> {
        let mut b = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.server.addr().to_string());
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Full::new(Bytes::from(body))).expect("request")
    }

    /// One request with the server's token.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Raw {
        let token = self.server.token().to_string();
        self.raw_as(method, path, headers, body, Some(&token)).await
    }

    pub async fn raw_as(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
        token: Option<&str>,
    ) -> Raw {
        let mut send = self.connect().await;
        let resp = send
            .send_request(self.request(method, path, headers, body.into(), token))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        Raw {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Raw {
        self.raw("GET", path, &[], vec![]).await
    }

    pub async fn send_json(&self, method: &str, path: &str, ct: &str, body: &Value) -> Raw {
        self.raw(
            method,
            path,
            &[("content-type", ct)],
            serde_json::to_vec(body).expect("json"),
        )
        .await
    }

    /// Starts a streaming request (watch) and returns a line reader.
    pub async fn stream(&self, path: &str, headers: &[(&str, &str)]) -> Lines {
        let mut send = self.connect().await;
        let token = self.server.token().to_string();
        let resp = send
            .send_request(self.request("GET", path, headers, vec![], Some(&token)))
            .await
            .expect("response");
        Lines {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.into_body(),
            buf: vec![],
            _send: send,
        }
    }
}

/// Reads a streaming response line by line.
pub struct Lines {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    buf: Vec<u8>,
    _send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Lines {
    /// The next line as JSON, `None` at the end of the stream or after `wait` without one.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        self.next_raw(wait).await.map(|l| {
            serde_json::from_slice(&l)
                .unwrap_or_else(|e| panic!("bad line {e}: {}", String::from_utf8_lossy(&l)))
        })
    }

    pub async fn next_raw(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(line[..line.len() - 1].to_vec());
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??;
            if let Ok(data) = frame.ok()?.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// Collects lines until the stream ends (or `wait` passes).
    pub async fn until_end(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = vec![];
        while let Some(v) = self
            .next(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await
        {
            out.push(v);
        }
        out
    }
}

/// The Widget CRD of the conformance checklist (kube-derive output, apiserver-spec Appendix B).
pub fn widget_crd() -> Value {
    serde_json::from_str(include_str!("../fixtures/widget-crd.json")).expect("fixture")
}

pub const W: &str = "/apis/example.com/v1/namespaces/default/widgets";

pub fn widget(name: &str, color: &str) -> Value {
    serde_json::json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":name},
        "spec":{"color":color,"extra":{},"raw":{},"tags":[]}})
}

/// Installs the Widget CRD and waits until it is Established.
pub async fn install_widgets(t: &TestServer) {
    let r = t
        .send_json(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &widget_crd(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    eventually("CRD established", || async {
        let r = t
            .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
            .await;
        r.json()["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
    })
    .await;
}

/// Polls `check` until it holds, failing the test after 10 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no RV in {v}"))
}
