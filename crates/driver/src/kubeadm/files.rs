//! A `KubeadmConfig`'s `spec.files[].contentFrom.secret`: CABPK reads those Secrets in the
//! management cluster, which a bootstrap component never reaches, so the host hands their
//! content over with the call.

use crate::{DriverError, KindCtx};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};

/// CABPK's `resolveFiles`: the content of each `spec.files[i].contentFrom.secret` of a
/// bootstrap config, read from the config's namespace and handed over as `files/<i>`, until
/// the data is made. A Secret or key that cannot be used is handed over as `files/<i>.error`,
/// a message naming the field, for the component to report on the config; it is looked at
/// again, so a Secret created later is picked up.
pub(crate) async fn sources(
    kctx: &KindCtx,
    obj: &DynamicObject,
) -> Result<Vec<(String, String)>, DriverError> {
    let made = obj
        .data
        .pointer("/status/initialization/dataSecretCreated")
        .and_then(serde_json::Value::as_bool)
        == Some(true);
    let Some(files) = obj
        .data
        .pointer("/spec/files")
        .and_then(serde_json::Value::as_array)
        .filter(|_| !made)
    else {
        return Ok(vec![]);
    };
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(kctx.driver.client.clone(), &ns);
    let mut out = vec![];
    for (i, f) in files.iter().enumerate() {
        let Some(source) = f.pointer("/contentFrom/secret") else {
            continue;
        };
        let field = |k: &str| {
            source
                .get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (name, key) = (field("name"), field("key"));
        let at = format!("spec.files[{i}].contentFrom.secret");
        let value = api.get_opt(&name).await?.map(|s| {
            s.data
                .and_then(|mut d| d.remove(&key))
                .map(|v| String::from_utf8(v.0))
        });
        out.push(match value {
            Some(Some(Ok(text))) => (format!("files/{i}"), text),
            None => (
                format!("files/{i}.error"),
                format!("{at}: Secret {ns}/{name} not found; create it, or set spec.files[{i}].content"),
            ),
            Some(None) => (
                format!("files/{i}.error"),
                format!("{at}: Secret {ns}/{name} has no key {key:?}; add it, or name another key"),
            ),
            Some(Some(Err(_))) => (
                format!("files/{i}.error"),
                format!("{at}: key {key:?} of Secret {ns}/{name} is not UTF-8 text; store it base64-encoded and set spec.files[{i}].encoding: base64"),
            ),
        });
    }
    Ok(out)
}
