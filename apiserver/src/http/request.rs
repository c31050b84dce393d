//! Request decoding: the path grammar of kube's RequestInfoFactory, query parameters with
//! `form_urlencoded` semantics, and Accept / Content-Type negotiation.

use crate::status::ApiError;
use std::collections::HashMap;

/// What a resource path names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub name: String,
    pub subresource: String,
}

/// Every path the server answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    Version,
    Health,
    OpenApiV2,
    OpenApiV3Index,
    /// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
    OpenApiV3(String, String),
    CoreVersions,
    Groups,
    Group(String),
    GroupVersion(String, String),
    Resource(ResourcePath),
    NotFound,
}

/// Namespace subresources addressed as `/api/v1/namespaces/{name}/{sub}`.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

pub fn route(path: &str) -> Route {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Index,
        ["openapi", "v3", "api", "v1"] => Route::OpenApiV3(String::new(), "v1".into()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiV3(g.to_string(), v.to_string()),
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["api", "v1"] => Route::GroupVersion(String::new(), "v1".into()),
        ["apis", g, v] => Route::GroupVersion(g.to_string(), v.to_string()),
        ["api", "v1", rest @ ..] => resource("", "v1", rest),
        ["apis", g, v, rest @ ..] => resource(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource(group: &str, version: &str, mut rest: &[&str]) -> Route {
    let mut rp = ResourcePath {
        group: group.into(),
        version: version.into(),
        ..Default::default()
    };
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        rp.namespace = rest[1].to_string();
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        } else {
            // `/namespaces/{name}[/status]` addresses the Namespace itself.
            rp.resource = "namespaces".into();
            rp.name = rp.namespace.clone();
            rp.namespace.clear();
            rp.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
            return Route::Resource(rp);
        }
    }
    match rest {
        [res] => rp.resource = res.to_string(),
        [res, name] => {
            rp.resource = res.to_string();
            rp.name = name.to_string();
        }
        [res, name, sub] => {
            rp.resource = res.to_string();
            rp.name = name.to_string();
            rp.subresource = sub.to_string();
        }
        _ => return Route::NotFound,
    }
    Route::Resource(rp)
}

/// Query parameters: first value wins, empty pairs skipped, unknown keys kept but unused.
#[derive(Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(q: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for (k, v) in form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
            if !k.is_empty() {
                map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
            }
        }
        Query(map)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub fn flag(&self, k: &str) -> bool {
        self.get(k)
            .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }

    pub fn number(&self, k: &str) -> Result<Option<u64>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "{k}: invalid value {v:?}: must be a non-negative integer"
                ))
            }),
        }
    }
}

/// The response forms a client can ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    Json,
    Yaml,
    Table,
    PartialMetadata,
}

/// Picks the first acceptable entry of the Accept header.
pub fn negotiate(accept: Option<&str>) -> Result<Want, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Want::Json);
    };
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let json_like = matches!(media.as_str(), "application/json" | "*/*" | "application/*");
        match params.get("as").map(String::as_str) {
            Some("Table") if json_like && params.get("g").is_some_and(|g| g == "meta.k8s.io") => {
                return Ok(Want::Table);
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if json_like => {
                return Ok(Want::PartialMetadata);
            }
            // Aggregated discovery and other `as=` forms fall through to a plainer entry.
            Some(_) => continue,
            None => {}
        }
        if json_like {
            return Ok(Want::Json);
        }
        if media == "application/yaml" {
            return Ok(Want::Yaml);
        }
    }
    Err(ApiError::not_acceptable(accept))
}

/// The media type of a request body, without parameters.
pub fn content_type(header: Option<&str>) -> String {
    header
        .and_then(|h| h.split(';').next())
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "application/json".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(g: &str, ns: &str, res: &str, name: &str, sub: &str) -> Route {
        Route::Resource(ResourcePath {
            group: g.into(),
            version: "v1".into(),
            namespace: ns.into(),
            resource: res.into(),
            name: name.into(),
            subresource: sub.into(),
        })
    }

    #[test]
    fn paths_parse_like_request_info_factory() {
        assert_eq!(
            route("/api/v1/namespaces/default/configmaps/c"),
            rp("", "default", "configmaps", "c", "")
        );
        assert_eq!(
            route("/api/v1/namespaces/x"),
            rp("", "", "namespaces", "x", "")
        );
        assert_eq!(
            route("/api/v1/namespaces/x/status"),
            rp("", "", "namespaces", "x", "status")
        );
        assert_eq!(
            route("/api/v1/namespaces"),
            rp("", "", "namespaces", "", "")
        );
        assert_eq!(
            route("/apis/example.com/v1/namespaces/d/widgets/w/status"),
            rp("example.com", "d", "widgets", "w", "status")
        );
        assert_eq!(
            route("/apis/example.com/v1/widgets"),
            rp("example.com", "", "widgets", "", "")
        );
        assert_eq!(
            route("/apis/example.com/v1"),
            Route::GroupVersion("example.com".into(), "v1".into())
        );
        assert_eq!(route("/nonexistent"), Route::NotFound);
    }

    #[test]
    fn queries_skip_empty_pairs_and_take_the_first_value() {
        let q = Query::parse(Some("&watch=TRUE&limit=2&limit=3&labelSelector=a%3Db"));
        assert!(q.flag("watch"));
        assert_eq!(q.number("limit").unwrap(), Some(2));
        assert_eq!(q.get("labelSelector"), Some("a=b"));
        assert!(Query::parse(Some("limit=x")).number("limit").is_err());
    }

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(kubectl)).unwrap(), Want::Table);
        assert_eq!(negotiate(None).unwrap(), Want::Json);
        assert_eq!(
            negotiate(Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")).unwrap(),
            Want::Json
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ))
            .unwrap(),
            Want::PartialMetadata
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"))
                .unwrap_err()
                .code,
            406
        );
    }
}
