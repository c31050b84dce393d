//! The HTTP front end: authentication, body limits, routing and verb dispatch. Paths are
//! dynamic (CRDs come and go), so one fallback handler parses them the way kube-apiserver does.

pub mod discovery;
mod list;
mod openapi;
pub mod request;
mod token;
mod watch;

use crate::auth::rbac::{self, Attributes};
use crate::core::{
    Core, DeleteOptions, FieldValidation, Op, PatchBody, Propagation, ScaleOp, WriteOptions,
};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::Outcome;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use request::{Query, ResourcePath, Route, Want};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use tokio::sync::Semaphore;

/// kube-apiserver's `MaxRequestBodyBytes`.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// HTTP-level settings.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Watch duration when the client sets no `timeoutSeconds`; `None` = random 30–60 min.
    pub watch_timeout: Option<Duration>,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Mutating requests in flight before the server answers 429.
    pub max_inflight_writes: usize,
    /// A watch client that accepts no data for this long is disconnected.
    pub watch_stall_limit: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            watch_timeout: None,
            bookmark_interval: Duration::from_secs(60),
            max_inflight_writes: 1024,
            watch_stall_limit: Duration::from_secs(30),
        }
    }
}

/// Shared state of the HTTP layer.
pub struct App {
    pub core: Arc<Core>,
    pub token: String,
    pub address: String,
    pub settings: HttpSettings,
    pub active_watches: AtomicUsize,
    /// Requests served, by method (GET, POST, PUT, PATCH, DELETE, other), for `/metrics`.
    pub requests: [std::sync::atomic::AtomicU64; 6],
    /// Resource requests by verb and `group/resource[/subresource]`, for `/metrics`: what a
    /// controller asks twice or writes without need shows up here.
    by_resource: std::sync::Mutex<std::collections::HashMap<RequestKind, u64>>,
    /// Set when the server stops, so open watches end and release the store.
    pub closing: tokio::sync::watch::Sender<bool>,
    writes: Semaphore,
    /// What `/version` reports.
    kubernetes_version: std::sync::RwLock<discovery::KubernetesVersion>,
    /// Static users, ServiceAccount tokens and the authorization mode.
    pub auth: crate::auth::Auth,
    /// What RBAC decided, per user and what they asked for, for `/metrics`: which permissions
    /// a client really uses, and which it lacked.
    rbac_checks: std::sync::Mutex<std::collections::BTreeMap<RbacCheck, u64>>,
}

/// One kind of RBAC decision, as `capw_apiserver_rbac_checks_total` labels it.
#[derive(
    Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, prometheus_client::encoding::EncodeLabelSet,
)]
struct RequestKind {
    verb: String,
    resource: String,
}

#[derive(
    Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, prometheus_client::encoding::EncodeLabelSet,
)]
struct RbacCheck {
    user: String,
    verb: String,
    group: String,
    resource: String,
    decision: &'static str,
}

impl App {
    pub fn new(
        core: Arc<Core>,
        token: String,
        address: String,
        settings: HttpSettings,
        auth: crate::auth::Auth,
    ) -> Self {
        let writes = Semaphore::new(settings.max_inflight_writes);
        let (closing, _) = tokio::sync::watch::channel(false);
        App {
            core,
            token,
            address,
            settings,
            active_watches: AtomicUsize::new(0),
            requests: Default::default(),
            by_resource: Default::default(),
            closing,
            writes,
            kubernetes_version: Default::default(),
            auth,
            rbac_checks: Default::default(),
        }
    }
}

/// The content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const METHODS: [axum::http::Method; 5] = [
    axum::http::Method::GET,
    axum::http::Method::POST,
    axum::http::Method::PUT,
    axum::http::Method::PATCH,
    axum::http::Method::DELETE,
];

impl App {
    /// Presents `v` at `/version` from now on.
    pub fn set_kubernetes_version(&self, v: discovery::KubernetesVersion) {
        if let Ok(mut cur) = self.kubernetes_version.write() {
            *cur = v;
        }
    }

    fn kubernetes_version(&self) -> discovery::KubernetesVersion {
        self.kubernetes_version
            .read()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Requests served so far, all methods.
    pub fn request_count(&self) -> u64 {
        self.requests
            .iter()
            .map(|r| r.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// OpenMetrics text (prometheus-client): requests by method and open watches.
    pub fn metrics(&self) -> String {
        use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
        #[derive(
            Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
        )]
        struct Method {
            method: &'static str,
        }
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let requests = Family::<Method, Counter>::default();
        let names = ["GET", "POST", "PUT", "PATCH", "DELETE", "OTHER"];
        for (method, n) in names.into_iter().zip(&self.requests) {
            requests
                .get_or_create(&Method { method })
                .inc_by(n.load(relaxed));
        }
        let watches = Gauge::<i64>::default();
        watches.set(i64::try_from(self.active_watches.load(relaxed)).unwrap_or(i64::MAX));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register(
            "capw_apiserver_requests",
            "Requests served, by method",
            requests,
        );
        registry.register("capw_apiserver_watches", "Open watches", watches);
        let by_resource = Family::<RequestKind, Counter>::default();
        if let Ok(seen) = self.by_resource.lock() {
            for (kind, n) in seen.iter() {
                by_resource.get_or_create(kind).inc_by(*n);
            }
        }
        registry.register(
            "capw_apiserver_resource_requests",
            "Resource requests served, by verb and group/resource[/subresource]",
            by_resource,
        );
        let checks = Family::<RbacCheck, Counter>::default();
        if let Ok(seen) = self.rbac_checks.lock() {
            for (check, n) in seen.iter() {
                checks.get_or_create(check).inc_by(*n);
            }
        }
        registry.register(
            "capw_apiserver_rbac_checks",
            "RBAC decisions on users outside system:masters, by user, verb, group, resource (or path) and decision",
            checks,
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

pub fn router(app: Arc<App>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

fn json_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

pub(crate) fn respond(code: u16, body: &Value, want: Want) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if want == Want::Yaml
        && let Ok(text) = serde_yaml::to_string(body)
    {
        return (status, [(header::CONTENT_TYPE, "application/yaml")], text).into_response();
    }
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json_bytes(body),
    )
        .into_response()
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    let mut r = respond(e.code, &e.to_status(), Want::Json);
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// Marks a request that came over a connection whose client certificate chains to the CA,
/// with the certificate's subject: kube takes the user from the CN and the groups from O.
#[derive(Debug, Clone, Default)]
pub struct ClientCertificate {
    /// The subject's common name.
    pub common_name: String,
    /// The subject's organizations.
    pub organizations: Vec<String>,
}

/// What an identity may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The server's bearer token, a static user's or a ServiceAccount's token, or any
    /// certificate signed by the CA that is not a node's. Without RBAC such a client may do
    /// everything; with it, `system:masters` may, and the others what the rules allow.
    Admin,
    /// A valid bootstrap token (see [`crate::bootstrap_token`]).
    Bootstrap,
    /// A kubelet client certificate (`system:node:<name>`, O=`system:nodes`).
    Node,
    /// No credentials.
    Anonymous,
}

/// Who a request comes from, as kube names users and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    role: Role,
    user: String,
    groups: Vec<String>,
}

const AUTHENTICATED: &str = "system:authenticated";

fn identify(parts: &http::request::Parts, app: &App) -> Option<Identity> {
    if let Some(cert) = parts.extensions.get::<ClientCertificate>() {
        let node = cert.common_name.starts_with("system:node:")
            && cert.organizations.iter().any(|o| o == "system:nodes");
        let mut groups = cert.organizations.clone();
        groups.push(AUTHENTICATED.into());
        return Some(Identity {
            role: if node { Role::Node } else { Role::Admin },
            user: cert.common_name.clone(),
            groups,
        });
    }
    let Some(given) = bearer(&parts.headers) else {
        return Some(Identity {
            role: Role::Anonymous,
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        });
    };
    if crate::bootstrap_token::constant_time_eq(given.as_bytes(), app.token.as_bytes()) {
        return Some(Identity {
            role: Role::Admin,
            user: "capw-admin".into(),
            groups: vec!["system:masters".into(), AUTHENTICATED.into()],
        });
    }
    if let Some(u) = app.auth.users.get(given) {
        return Some(Identity {
            role: Role::Admin,
            user: u.name.clone(),
            groups: u.groups.clone(),
        });
    }
    if given.matches('.').count() == 2
        && let Some((user, groups)) = app.auth.signer.verify(given, &app.core.store)
    {
        return Some(Identity {
            role: Role::Admin,
            user,
            groups,
        });
    }
    if crate::bootstrap_token::authenticates(&app.core.store, given, jiff::Timestamp::now()) {
        let id = given.split('.').next().unwrap_or_default();
        return Some(Identity {
            role: Role::Bootstrap,
            user: format!("system:bootstrap:{id}"),
            groups: vec![
                "system:bootstrappers".into(),
                crate::bootstrap_token::NODE_GROUP.into(),
                AUTHENTICATED.into(),
            ],
        });
    }
    // A bearer token that is neither is refused, not downgraded to anonymous, as kube does.
    None
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// kubeadm's `cluster-info`: the one object anyone may read, so a joining node can fetch the
/// CA it then checks against its pinned hash.
const CLUSTER_INFO: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";

/// What a non-administrator may do. Anonymous clients get `cluster-info`, version and health,
/// as kubeadm's RBAC for `system:unauthenticated` allows. A bootstrap token gets what kubeadm's
/// bootstrapper roles give (discovery, reading Nodes, requesting a client certificate) and a
/// node what the node authorizer gives the node agent: its Node and certificate requests.
fn allowed(identity: &Identity, method: &Method, path: &str) -> bool {
    let read = *method == Method::GET;
    let public = read
        && (path == CLUSTER_INFO
            || path == "/version"
            || path == "/healthz"
            || path == "/readyz"
            || path == "/livez");
    let discovery = read
        && (path == "/api"
            || path == "/apis"
            || path == "/api/v1"
            || path.starts_with("/apis/certificates.k8s.io")
                && !path.contains("/certificatesigningrequests")
            || path.starts_with("/openapi/"));
    let csr = path == CSRS
        || path
            .strip_prefix(CSRS)
            .is_some_and(|rest| rest.starts_with('/') && (read || rest.matches('/').count() == 1));
    let nodes = path == "/api/v1/nodes" || path.starts_with("/api/v1/nodes/");
    // A kubelet reads Pods and posts mirror Pods of its static Pods with their status.
    let pods = path == "/api/v1/pods"
        || path
            .strip_prefix("/api/v1/namespaces/")
            .is_some_and(|rest| {
                let mut parts = rest.split('/');
                parts.next().is_some_and(|ns| !ns.is_empty()) && parts.next() == Some("pods")
            });
    match identity.role {
        Role::Admin => true,
        Role::Anonymous => public,
        // kubeadm's `kubeadm:get-nodes` role lets bootstrappers read Nodes.
        Role::Bootstrap => {
            public || discovery || (nodes && read) || (csr && (read || *method == Method::POST))
        }
        Role::Node => {
            public || discovery || nodes || pods || (csr && (read || *method == Method::POST))
        }
    }
}

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

impl App {
    /// With RBAC on, whether the rules let a user (the fixed roles were checked before) do
    /// `a`; a refusal is kube's 403, naming the user, the verb and the resource.
    fn authorize(&self, identity: &Identity, mut a: Attributes) -> Result<(), ApiError> {
        if identity.role != Role::Admin || self.auth.mode == crate::auth::Mode::AlwaysAllow {
            return Ok(());
        }
        a.user = identity.user.clone();
        a.groups = identity.groups.clone();
        let allowed = rbac::allows(&self.core.store, &a);
        if !a.groups.iter().any(|g| g == rbac::MASTERS)
            && let Ok(mut seen) = self.rbac_checks.lock()
        {
            let resource = match (&a.path, a.subresource.as_str()) {
                (Some(path), _) => path.clone(),
                (None, "") => a.resource.clone(),
                (None, sub) => format!("{}/{sub}", a.resource),
            };
            *seen
                .entry(RbacCheck {
                    user: a.user.clone(),
                    verb: a.verb.clone(),
                    group: a.group.clone(),
                    resource,
                    decision: if allowed { "allowed" } else { "denied" },
                })
                .or_default() += 1;
        }
        if allowed {
            return Ok(());
        }
        tracing::info!(user = %a.user, message = %a.forbidden_message(), "RBAC refused a request");
        Err(match &a.path {
            Some(_) => ApiError::forbidden(format!("forbidden: {}", a.forbidden_message())),
            None => {
                let what = crate::status::qualified(&a.group, &a.resource);
                let named = if a.name.is_empty() {
                    what
                } else {
                    format!("{what} \"{}\"", a.name)
                };
                ApiError::forbidden(format!("{named} is forbidden: {}", a.forbidden_message()))
                    .with_subject(&a.group, &a.resource, &a.name)
            }
        })
    }
}

impl App {
    /// kube's impersonation: `Impersonate-User` (and `Impersonate-Group`) make the request
    /// the named user's, once the requester may `impersonate` that ServiceAccount (in its
    /// namespace), user and each group. A ServiceAccount user gets its groups as its token
    /// would give them.
    fn impersonate(&self, identity: Identity, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let Some(user) = headers
            .get("impersonate-user")
            .and_then(|h| h.to_str().ok())
            .filter(|u| !u.is_empty())
        else {
            return Ok(identity);
        };
        let groups: Vec<String> = headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|h| h.to_str().ok())
            .map(String::from)
            .collect();
        if identity.role != Role::Admin {
            return Err(ApiError::forbidden(format!(
                "users \"{user}\" is forbidden: User \"{}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
                identity.user
            )));
        }
        let account = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'));
        let target = match account {
            Some((ns, name)) => Attributes {
                verb: "impersonate".into(),
                resource: "serviceaccounts".into(),
                namespace: ns.into(),
                name: name.into(),
                ..Default::default()
            },
            None => Attributes {
                verb: "impersonate".into(),
                resource: "users".into(),
                name: user.into(),
                ..Default::default()
            },
        };
        self.authorize(&identity, target)?;
        for g in &groups {
            self.authorize(
                &identity,
                Attributes {
                    verb: "impersonate".into(),
                    resource: "groups".into(),
                    name: g.clone(),
                    ..Default::default()
                },
            )?;
        }
        let mut all = groups;
        if let Some((ns, _)) = account {
            all.push("system:serviceaccounts".into());
            all.push(format!("system:serviceaccounts:{ns}"));
        }
        all.push(AUTHENTICATED.into());
        Ok(Identity {
            role: Role::Admin,
            user: user.to_string(),
            groups: all,
        })
    }
}

/// kube's verb for a request on a resource.
fn verb(method: &Method, collection: bool, watch: bool) -> String {
    match *method {
        Method::GET | Method::HEAD if collection && watch => "watch",
        Method::GET | Method::HEAD if collection => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        ref m => return m.as_str().to_lowercase(),
    }
    .to_string()
}

async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let span = tracing::debug_span!("request", method = %req.method(), path = %req.uri().path());
    tracing::Instrument::instrument(serve_request(app, req), span).await
}

async fn serve_request(app: Arc<App>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Some(identity) = identify(&parts, &app) else {
        return error_response(&ApiError::unauthorized());
    };
    let identity = match app.impersonate(identity, &parts.headers) {
        Ok(i) => i,
        Err(e) => return error_response(&e),
    };
    if !allowed(&identity, &parts.method, parts.uri.path()) {
        return error_response(&match identity.role {
            Role::Anonymous => ApiError::unauthorized(),
            Role::Bootstrap => ApiError::forbidden(format!(
                "User \"{}\" cannot {} {}: a bootstrap token may read cluster-info, discovery and Nodes and request a node client certificate only; use the cluster's kubeconfig for anything else",
                identity.user,
                parts.method,
                parts.uri.path()
            )),
            Role::Node | Role::Admin => ApiError::forbidden(format!(
                "User \"{}\" cannot {} {}: a node's certificate may manage Nodes and Pods and request certificates only",
                identity.user,
                parts.method,
                parts.uri.path()
            )),
        });
    }
    if parts.uri.path() == "/metrics"
        && let Err(e) = app.authorize(
            &identity,
            Attributes {
                verb: "get".into(),
                path: Some("/metrics".into()),
                ..Default::default()
            },
        )
    {
        return error_response(&e);
    }
    let method_index = METHODS
        .iter()
        .position(|m| parts.method == *m)
        .unwrap_or(METHODS.len());
    app.requests[method_index].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::trace!(method = %parts.method, uri = %parts.uri, "request");
    if parts.uri.path() == "/metrics" {
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, OPENMETRICS)],
            app.metrics(),
        )
            .into_response();
    }
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .map(String::from);
    let route = request::route(parts.uri.path());
    let plain = |v: Value| respond(200, &v, Want::Json);
    match route {
        Route::Version => plain(discovery::version(&app.kubernetes_version())),
        Route::Health => {
            (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response()
        }
        Route::OpenApiV2 => {
            if accept.as_deref().is_some_and(|a| a.contains("protobuf")) {
                // An empty protobuf document: kubectl 1.20 then skips client-side validation.
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    Bytes::new(),
                )
                    .into_response()
            } else {
                plain(openapi::v2(&app.core.registry))
            }
        }
        Route::OpenApiV3Index => plain(openapi::v3_index(&app.core.registry)),
        Route::OpenApiV3(g, v) if openapi::served(&app.core.registry, &g, &v) => {
            plain(openapi::v3(&app.core.registry, &g, &v))
        }
        Route::OpenApiV3(..) => error_response(&ApiError::route_not_found()),
        Route::CoreVersions | Route::Groups if discovery::wants_aggregated(accept.as_deref()) => {
            let doc = discovery::aggregated(&app.core.registry, route == Route::CoreVersions);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, discovery::AGGREGATED)],
                json_bytes(&doc),
            )
                .into_response()
        }
        Route::CoreVersions => plain(discovery::core_versions(&app.address)),
        Route::Groups => plain(discovery::groups(&app.core.registry)),
        Route::Group(g) => discovery::group(&app.core.registry, &g)
            .map(plain)
            .unwrap_or_else(|| error_response(&ApiError::route_not_found())),
        Route::GroupVersion(g, v) => discovery::resources(&app.core.registry, &g, &v)
            .map(plain)
            .unwrap_or_else(|| error_response(&ApiError::route_not_found())),
        Route::Resource(rp) => {
            let query = Query::parse(parts.uri.query());
            let kind = RequestKind {
                verb: verb(&parts.method, rp.name.is_empty(), query.flag("watch")),
                resource: match rp.subresource.as_str() {
                    "" => format!("{}/{}", rp.group, rp.resource),
                    sub => format!("{}/{}/{sub}", rp.group, rp.resource),
                },
            };
            if let Ok(mut seen) = app.by_resource.lock() {
                *seen.entry(kind).or_default() += 1;
            }
            match resource(
                &app,
                &identity,
                &parts.method,
                &parts.headers,
                accept.as_deref(),
                body,
                rp,
                &query,
            )
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    if e.code >= 500 {
                        tracing::error!(error = %e, path = %parts.uri.path(), "request failed");
                    }
                    error_response(&e)
                }
            }
        }
        Route::NotFound => error_response(&ApiError::route_not_found()),
    }
}

async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::too_large(format!("limit is {MAX_BODY}"));
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| too_large())
}

fn decode_object(ct: &str, bytes: &[u8]) -> Result<Value, ApiError> {
    let v: Value = match ct {
        "application/json" => serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(bytes)
            .map_err(|e| {
                ApiError::bad_request(format!("the request body is not valid YAML: {e}"))
            })?,
        "application/vnd.kubernetes.protobuf" => {
            crate::protobuf::decode(bytes).map_err(|e| match e {
                crate::protobuf::ProtobufError::UnsupportedKind(_) => {
                    let mut err =
                        ApiError::unsupported_media(&["application/json", "application/yaml"]);
                    err.message = e.to_string();
                    err
                }
                other => ApiError::bad_request(other.to_string()),
            })?
        }
        _ => {
            return Err(ApiError::unsupported_media(&[
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
            ]));
        }
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a single JSON object",
        ));
    }
    Ok(v)
}

fn write_options(q: &Query) -> Result<WriteOptions, ApiError> {
    let field_validation = match q.get("fieldValidation") {
        None => FieldValidation::Warn,
        Some(v) if v.eq_ignore_ascii_case("Strict") => FieldValidation::Strict,
        Some(v) if v.eq_ignore_ascii_case("Warn") => FieldValidation::Warn,
        Some(v) if v.eq_ignore_ascii_case("Ignore") => FieldValidation::Ignore,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: invalid value {v:?}: must be one of Ignore, Warn or Strict"
            )));
        }
    };
    Ok(WriteOptions {
        dry_run: q.get("dryRun") == Some("All"),
        field_manager: q.get("fieldManager").unwrap_or_default().to_string(),
        field_validation,
        force: q.flag("force"),
        requester: Default::default(),
    })
}

/// The Update-operation manager: `fieldManager`, else the User-Agent's program name.
fn update_manager(opts: &mut WriteOptions, headers: &HeaderMap) {
    if opts.field_manager.is_empty() {
        let ua = headers
            .get(header::USER_AGENT)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("unknown");
        opts.field_manager = ua.split('/').next().unwrap_or("unknown").to_string();
    }
}

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('"', "'"));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn requester(identity: &Identity) -> crate::core::Requester {
    crate::core::Requester {
        user: identity.user.clone(),
        groups: identity.groups.clone(),
    }
}

fn written(code: u16, w: &crate::core::Written, want: Want) -> Response {
    let partial;
    let body = if want == Want::PartialMetadata {
        partial = crate::table::partial_metadata(&w.view);
        &partial
    } else {
        &w.view
    };
    with_warnings(
        respond(
            code,
            body,
            if want == Want::Table {
                Want::Json
            } else {
                want
            },
        ),
        &w.warnings,
    )
}

fn delete_options(q: &Query, bytes: &[u8]) -> Result<DeleteOptions, ApiError> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        })?
    };
    let s = |k: &str| body.get(k).and_then(Value::as_str).map(String::from);
    let policy = s("propagationPolicy").or_else(|| q.get("propagationPolicy").map(String::from));
    let orphan = body
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| q.get("orphanDependents").map(|v| v == "true"));
    let propagation = match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Background"), _) => Some(Propagation::Background),
        (Some("Orphan"), _) | (None, Some(true)) => Some(Propagation::Orphan),
        (None, _) => None,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    };
    let dry_run = body
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|x| x == "All"))
        || q.get("dryRun") == Some("All");
    Ok(DeleteOptions {
        dry_run,
        propagation,
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from),
        requester: Default::default(),
    })
}

fn parse_patch(rt: &ResourceType, ct: &str, bytes: &[u8]) -> Result<PatchBody, ApiError> {
    let json = |b: &[u8]| -> Result<Value, ApiError> {
        serde_json::from_slice(b)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))
    };
    match ct {
        "application/merge-patch+json" => Ok(PatchBody::Merge(json(bytes)?)),
        "application/json-patch+json" => crate::patch::json::parse(bytes)
            .map(PatchBody::Json)
            .map_err(|e| match e {
                crate::patch::PatchError::TooManyOperations(_) => {
                    ApiError::too_large(e.to_string())
                }
                other => ApiError::bad_request(other.to_string()),
            }),
        "application/strategic-merge-patch+json" if !rt.is_custom() => {
            Ok(PatchBody::Strategic(json(bytes)?))
        }
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            let v = match serde_json::from_slice::<Value>(bytes) {
                Ok(v) => v,
                Err(_) => serde_yaml::from_slice(bytes).map_err(|e| {
                    ApiError::bad_request(format!("the apply patch is neither JSON nor YAML: {e}"))
                })?,
            };
            if !v.is_object() {
                return Err(ApiError::bad_request(
                    "an apply patch must be a single object",
                ));
            }
            Ok(PatchBody::Apply(v))
        }
        _ => Err(ApiError::unsupported_media(&rt.media_types_for_patch())),
    }
}

/// `SelfSubjectAccessReview`: what the requester may do, answered by the same checks its
/// requests get (`kubectl auth can-i`).
async fn self_subject_access_review(
    app: &App,
    identity: &Identity,
    rt: &ResourceType,
    method: &Method,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed(method.as_str(), &rt.plural));
    }
    let bytes = read_body(headers, body).await?;
    let ct = body_type(headers);
    let mut review = decode_object(&ct, &bytes)?;
    crate::builtin::typed_check(crate::registry::Builtin::SelfSubjectAccessReview, &review)?;
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let spec = review.get("spec").cloned().unwrap_or_default();
    let a = match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(r), _) => Attributes {
            verb: text(r, "verb"),
            group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            namespace: text(r, "namespace"),
            name: text(r, "name"),
            ..Default::default()
        },
        (None, Some(n)) => Attributes {
            verb: text(n, "verb"),
            path: Some(text(n, "path")),
            ..Default::default()
        },
        (None, None) => {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                "",
                vec![crate::status::Cause::new(
                    "FieldValueRequired",
                    "spec.resourceAttributes",
                    "exactly one of resourceAttributes or nonResourceAttributes must be specified",
                )],
            ));
        }
    };
    review["status"] = match app.authorize(identity, a) {
        Ok(()) if app.auth.mode == crate::auth::Mode::AlwaysAllow => serde_json::json!({
            "allowed": true,
            "reason": "capw-apiserver runs without --authorization-mode RBAC: every authenticated user may do everything"
        }),
        Ok(()) => serde_json::json!({"allowed": true, "reason": "RBAC: allowed"}),
        Err(_) => serde_json::json!({"allowed": false}),
    };
    Ok(respond(201, &review, Want::Json))
}

fn body_type(headers: &HeaderMap) -> String {
    request::content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok()),
    )
}

/// `…/scale`: GET, PUT and PATCH of the `autoscaling/v1` Scale view.
#[allow(clippy::too_many_arguments)]
async fn scale(
    core: &Core,
    rt: &Arc<ResourceType>,
    method: &Method,
    headers: &HeaderMap,
    body: Body,
    rp: &ResourcePath,
    q: &Query,
    want: Want,
) -> Result<Response, ApiError> {
    let (ns, name) = (rp.namespace.as_str(), rp.name.as_str());
    if name.is_empty() || (rt.namespaced && ns.is_empty()) {
        return Err(ApiError::route_not_found());
    }
    let op = match *method {
        Method::GET => return Ok(respond(200, &core.get_scale(rt, ns, name)?, want)),
        Method::PUT => {
            let bytes = read_body(headers, body).await?;
            ScaleOp::Replace(decode_object(&body_type(headers), &bytes)?)
        }
        Method::PATCH => {
            let bytes = read_body(headers, body).await?;
            ScaleOp::Patch(parse_patch(rt, &body_type(headers), &bytes)?)
        }
        ref m => {
            return Err(ApiError::method_not_allowed(
                m.as_str(),
                &format!("{}/scale", rt.plural),
            ));
        }
    };
    let mut opts = write_options(q)?;
    update_manager(&mut opts, headers);
    let scale = core.write_scale(rt, ns, name, op, &opts).await?;
    Ok(respond(200, &scale, want))
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    app: &Arc<App>,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    accept: Option<&str>,
    body: Body,
    mut rp: ResourcePath,
    q: &Query,
) -> Result<Response, ApiError> {
    let want = request::negotiate(accept)?;
    let rt = app
        .core
        .registry
        .get(&rp.group, &rp.version, &rp.resource)
        .ok_or_else(ApiError::route_not_found)?;
    let csr = rt.builtin == Some(crate::registry::Builtin::CertificateSigningRequest);
    if csr && rp.subresource == "approval" {
        // `kubectl certificate approve|deny` writes the conditions through /approval; they
        // are stored in status like the signer's certificate.
        rp.subresource = "status".into();
    }
    let token_request =
        rt.builtin == Some(crate::registry::Builtin::ServiceAccount) && rp.subresource == "token";
    if (!rt.namespaced && !rp.namespace.is_empty())
        || !(matches!(rp.subresource.as_str(), "" | "status" | "scale") || token_request)
    {
        return Err(ApiError::route_not_found());
    }
    if (rp.subresource == "status" && !rt.status_subresource)
        || (rp.subresource == "scale" && rt.scale.is_none())
    {
        return Err(ApiError::route_not_found());
    }
    let ns = rp.namespace.as_str();
    let name = rp.name.as_str();
    let collection = name.is_empty();
    let is_write = !matches!(*method, Method::GET | Method::HEAD);
    let _permit = if is_write {
        Some(
            app.writes
                .try_acquire()
                .map_err(|_| ApiError::too_many_requests())?,
        )
    } else {
        None
    };
    let core = &app.core;
    // Anyone may ask what they may do (kube's system:basic-user).
    if rt.builtin == Some(crate::registry::Builtin::SelfSubjectAccessReview) {
        return self_subject_access_review(app, identity, &rt, method, headers, body).await;
    }
    if rt.builtin == Some(crate::registry::Builtin::SelfSubjectReview) {
        if *method != Method::POST {
            return Err(ApiError::method_not_allowed(method.as_str(), &rt.plural));
        }
        let bytes = read_body(headers, body).await?;
        let mut review = decode_object(&body_type(headers), &bytes)?;
        review["status"] = serde_json::json!({"userInfo": {
            "username": identity.user, "groups": identity.groups}});
        return Ok(respond(201, &review, Want::Json));
    }
    app.authorize(
        identity,
        Attributes {
            verb: verb(method, collection, q.flag("watch")),
            group: rp.group.clone(),
            resource: rp.resource.clone(),
            subresource: rp.subresource.clone(),
            namespace: rp.namespace.clone(),
            name: rp.name.clone(),
            ..Default::default()
        },
    )?;
    if token_request {
        return token::request(app, &rt, method, headers, body, &rp).await;
    }
    if rp.subresource == "scale" {
        return scale(core, &rt, method, headers, body, &rp, q, want).await;
    }
    match (method.clone(), collection) {
        (Method::GET, true) if q.flag("watch") => {
            watch::serve(app.clone(), rt, ns.to_string(), q, want)
        }
        (Method::GET, true) => list::list(core, &rt, ns, q, want).await,
        (Method::GET, false) => {
            if rt.namespaced && ns.is_empty() {
                return Err(ApiError::route_not_found());
            }
            let obj = core.get(&rt, ns, name)?;
            Ok(list::render_one(&rt, obj, want))
        }
        (Method::POST, true) => {
            if rt.namespaced && ns.is_empty() {
                return Err(ApiError::method_not_allowed("create", &rt.plural));
            }
            let mut opts = write_options(q)?;
            opts.requester = requester(identity);
            update_manager(&mut opts, headers);
            let bytes = read_body(headers, body).await?;
            let ct = body_type(headers);
            let mut obj = decode_object(&ct, &bytes)?;
            if csr {
                // As kube's CSR strategy: the requester is who sent it, whatever the body says.
                obj["spec"]["username"] = Value::String(identity.user.clone());
                obj["spec"]["groups"] = serde_json::json!(identity.groups);
            }
            let w = core.write(&rt, ns, "", "", Op::Create(obj), &opts).await?;
            Ok(written(201, &w, want))
        }
        (Method::PUT, false) => {
            let mut opts = write_options(q)?;
            opts.requester = requester(identity);
            update_manager(&mut opts, headers);
            let bytes = read_body(headers, body).await?;
            let ct = body_type(headers);
            let obj = decode_object(&ct, &bytes)?;
            let w = core
                .write(&rt, ns, name, &rp.subresource, Op::Replace(obj), &opts)
                .await?;
            Ok(written(200, &w, want))
        }
        (Method::PATCH, false) => {
            let mut opts = write_options(q)?;
            opts.requester = requester(identity);
            let bytes = read_body(headers, body).await?;
            let ct = body_type(headers);
            let patch = parse_patch(&rt, &ct, &bytes)?;
            if !matches!(patch, PatchBody::Apply(_)) {
                update_manager(&mut opts, headers);
            }
            let w = core
                .write(&rt, ns, name, &rp.subresource, Op::Patch(patch), &opts)
                .await?;
            let code = if matches!(w.outcome, Outcome::Created(_)) {
                201
            } else {
                200
            };
            Ok(written(code, &w, want))
        }
        (Method::DELETE, false) => {
            let bytes = read_body(headers, body).await?;
            let opts = delete_options(q, &bytes)?;
            let mut opts = opts;
            opts.requester = requester(identity);
            let (_, body, warnings) = core.delete(&rt, ns, name, &opts).await?;
            let format = if want == Want::Yaml {
                Want::Yaml
            } else {
                Want::Json
            };
            Ok(with_warnings(respond(200, &body, format), &warnings))
        }
        (Method::DELETE, true) => {
            let bytes = read_body(headers, body).await?;
            let mut opts = delete_options(q, &bytes)?;
            opts.requester = requester(identity);
            list::delete_collection(core, &rt, ns, q, &opts).await
        }
        (m, _) => {
            let verb = match m {
                Method::POST => "create",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => m.as_str(),
            };
            Err(ApiError::method_not_allowed(verb, &rt.plural))
        }
    }
}
