//! Serving the core's admission webhooks (`capw_core::webhooks`) over HTTPS and registering
//! them with the management API, as a provider's manager and cert-manager do together
//! upstream: a CA made at start, a serving certificate for the address, and the
//! Mutating/ValidatingWebhookConfigurations carrying that CA. Re-registering at every start
//! replaces the previous run's CA and port.

use capw_core::webhooks::{self, Webhooks};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("making the webhook certificate: {0}")]
    Certificate(#[from] capw_apiserver::tls::TlsError),
    #[error("cannot serve the admission webhooks on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("registering the {name} webhook configuration: {source}")]
    Register { name: String, source: kube::Error },
}

/// Serves the webhooks on `addr` and registers them; returns the address served.
pub async fn start(
    client: Client,
    addr: SocketAddr,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<SocketAddr, WebhookError> {
    let (ca, ca_key) = capw_apiserver::tls::generate_ca()?;
    let sans = vec![addr.ip().to_string(), "localhost".to_string()];
    let tls = capw_apiserver::tls::from_ca(&ca, &ca_key, &sans)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let hooks = Arc::new(Webhooks::new(client.clone()));
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config);
    tasks.push(tokio::spawn(serve(listener, acceptor, hooks)));
    register(&client, &format!("https://{bound}"), &ca).await?;
    tracing::info!(%bound, "admission webhooks served and registered");
    Ok(bound)
}

async fn register(client: &Client, base: &str, ca: &str) -> Result<(), WebhookError> {
    for config in webhooks::configurations(base, ca) {
        let kind = config["kind"].as_str().unwrap_or_default().to_string();
        let name = config["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        api.patch(
            &name,
            &PatchParams::apply("capw").force(),
            &Patch::Apply(&config),
        )
        .await
        .map_err(|source| WebhookError::Register { name, source })?;
    }
    Ok(())
}

async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    hooks: Arc<Webhooks>,
) {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let hooks = hooks.clone();
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let hooks = hooks.clone();
                    async move {
                        use http_body_util::BodyExt;
                        let path = req.uri().path().to_string();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let answer = hooks.review(&path, &body).await;
                        let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(bytes::Bytes::from(bytes)))
                    }
                });
            let io = hyper_util::rt::TokioIo::new(tls);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "webhook connection ended with an error");
            }
        });
    }
}
