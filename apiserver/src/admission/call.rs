//! One AdmissionReview round trip over HTTPS, trusting only the webhook's `caBundle`.
//!
//! Hand-written over hyper's connection API rather than a pooled client: every webhook brings
//! its own CA bundle, so each call needs its own TLS configuration, and admission calls are
//! rare next to the writes that need none.

use base64::Engine;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// A webhook's answer.
pub(super) struct Answer {
    pub allowed: bool,
    pub status: Value,
    /// The JSON patch, decoded.
    pub patch: Option<Vec<u8>>,
    pub warnings: Vec<String>,
}

/// Why a webhook could not be asked: kube's wording, so the message reads the same.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    #[error("failed to call webhook: {0}")]
    Call(String),
    #[error("received invalid webhook response: {0}")]
    Response(String),
}

fn target(client: &Value, timeout: Duration) -> Result<http::Uri, CallError> {
    let url = match (
        client.get("url").and_then(Value::as_str),
        client.get("service"),
    ) {
        (Some(url), _) => url.to_string(),
        (None, Some(svc)) => {
            let s = |k: &str| svc.get(k).and_then(Value::as_str).unwrap_or_default();
            let port = svc.get("port").and_then(Value::as_u64).unwrap_or(443);
            format!(
                "https://{}.{}.svc:{port}{}",
                s("name"),
                s("namespace"),
                s("path")
            )
        }
        _ => {
            return Err(CallError::Call(
                "the webhook has neither url nor service".into(),
            ));
        }
    };
    // kube tells the webhook its deadline in the query, and names the URL so in errors.
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}timeout={}s", timeout.as_secs())
        .parse()
        .map_err(|e| CallError::Call(format!("invalid url {url:?}: {e}")))
}

fn tls(client: &Value) -> Result<tokio_rustls::TlsConnector, CallError> {
    let bundle = client
        .get("caBundle")
        .and_then(Value::as_str)
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
        .transpose()
        .map_err(|e| CallError::Call(format!("caBundle is not base64: {e}")))?
        .unwrap_or_default();
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&bundle) {
        let cert = cert.map_err(|e| CallError::Call(format!("caBundle is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| CallError::Call(format!("caBundle holds an unusable certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Call(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Posts `review` to the webhook `client` describes and reads its answer. `dial`, when given,
/// is where the connection goes instead of the URL's host (a Service's address); the
/// certificate is still checked for the URL's host.
pub(super) async fn post(
    client: &Value,
    review: &Value,
    timeout: Duration,
    dial: Option<(String, u16)>,
) -> Result<Answer, CallError> {
    let uri = target(client, timeout)?;
    let shown = uri.to_string();
    let failed = |e: String| CallError::Call(format!("Post \"{shown}\": {e}"));
    let exchange = async {
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_string();
        if uri.scheme_str() != Some("https") {
            return Err(failed("the webhook URL must use https".into()));
        }
        let port = uri.port_u16().unwrap_or(443);
        let (dial_host, dial_port) = dial.clone().unwrap_or_else(|| (host.clone(), port));
        let tcp = tokio::net::TcpStream::connect((dial_host.as_str(), dial_port))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| failed(e.to_string()))?;
        let stream = tls(client)?
            .connect(name, tcp)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(conn);
        let body = serde_json::to_vec(review).map_err(|e| failed(e.to_string()))?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let req = http::Request::post(path)
            .header(http::header::HOST, format!("{host}:{port}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| failed(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(CallError::Call(format!(
                "the server responded with status {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        Ok(bytes)
    };
    let bytes = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| failed("context deadline exceeded".into()))??;
    answer(&bytes, review)
}

fn answer(bytes: &[u8], review: &Value) -> Result<Answer, CallError> {
    let bad = |m: String| CallError::Response(m);
    let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let r = v
        .get("response")
        .ok_or_else(|| bad("response was absent".into()))?;
    let uid = review.pointer("/request/uid");
    if r.get("uid") != uid {
        return Err(bad(format!(
            "expected response.uid={}, got {}",
            uid.unwrap_or(&Value::Null),
            r.get("uid").unwrap_or(&Value::Null)
        )));
    }
    // Go encodes []byte as base64; some clients (kube-rs) send an array of bytes, which Go
    // also decodes.
    let patch = match r.get("patch") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| bad(format!("patch is not base64: {e}")))?,
        ),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| bad("patch is not a byte array".into()))?,
        ),
        Some(other) => return Err(bad(format!("patch has type {other}"))),
    };
    Ok(Answer {
        allowed: r.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: r.get("status").cloned().unwrap_or_default(),
        patch,
        warnings: r
            .get("warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect(),
    })
}
