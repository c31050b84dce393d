//! The credentials the host signs with, from the grant's source: the host's environment, or a
//! Secret with `AWSClusterStaticIdentity`'s keys. They stay in the host; the component gets
//! only what AWS answered.

use super::AwsError;
use super::endpoint::Environment;
use k8s_openapi::api::core::v1::Secret;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a plugin's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CredentialSource {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` of the host.
    #[default]
    Environment,
    /// A Secret with `AccessKeyID`, `SecretAccessKey` and optionally `SessionToken`.
    Secret { namespace: String, name: String },
}

impl std::fmt::Display for CredentialSource {
    /// As messages name it, for the person who fixes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Environment => write!(f, "the host's environment"),
            CredentialSource::Secret { namespace, name } => write!(
                f,
                "Secret {namespace}/{name} (the WasmProvider's spec.aws.credentials.secretRef)"
            ),
        }
    }
}

/// A key pair and optional session token. Its `Debug` shows the access key id only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// How long a Secret's credentials are used before the Secret is read again: a rotated key
/// takes effect within this, and a busy provider does not read the Secret on every call.
const SECRET_TTL: Duration = Duration::from_secs(10);

/// Reads credentials from their source, caching Secrets for [`SECRET_TTL`].
#[derive(Default)]
pub struct CredentialStore {
    secrets: Mutex<HashMap<(String, String), (Instant, Credentials)>>,
}

impl CredentialStore {
    pub async fn get(
        &self,
        source: &CredentialSource,
        env: &Environment,
        client: Option<&kube::Client>,
    ) -> Result<Credentials, AwsError> {
        match source {
            CredentialSource::Environment => {
                let (Some(id), Some(secret)) = (
                    env.get("AWS_ACCESS_KEY_ID"),
                    env.get("AWS_SECRET_ACCESS_KEY"),
                ) else {
                    return Err(AwsError::Credentials(format!(
                        "{source} has no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set them where the host runs, or name a Secret in the WasmProvider's spec.aws.credentials.secretRef"
                    )));
                };
                Ok(Credentials {
                    access_key_id: id.to_string(),
                    secret_access_key: secret.to_string(),
                    session_token: env.get("AWS_SESSION_TOKEN").map(str::to_string),
                })
            }
            CredentialSource::Secret { namespace, name } => {
                let key = (namespace.clone(), name.clone());
                if let Some((at, c)) = self
                    .secrets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&key)
                    && at.elapsed() < SECRET_TTL
                {
                    return Ok(c.clone());
                }
                let client = client.ok_or_else(|| {
                    AwsError::Credentials(format!(
                        "{source} cannot be read: this host has no management API client"
                    ))
                })?;
                let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
                let secret = api
                    .get_opt(name)
                    .await
                    .map_err(|e| AwsError::Credentials(format!("{source} cannot be read: {e}")))?
                    .ok_or_else(|| {
                        AwsError::Credentials(format!(
                            "{source} does not exist: create it with the keys AccessKeyID and SecretAccessKey"
                        ))
                    })?;
                let creds = from_secret(&secret).map_err(|missing| {
                    AwsError::Credentials(format!(
                        "{source} has no key {missing}: it needs AccessKeyID and SecretAccessKey (and SessionToken for temporary credentials)"
                    ))
                })?;
                self.secrets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (Instant::now(), creds.clone()));
                Ok(creds)
            }
        }
    }
}

/// The credentials in a Secret, or the first key it lacks.
fn from_secret(secret: &Secret) -> Result<Credentials, &'static str> {
    let value = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(k))
                    .map(|s| s.trim().to_string())
            })
            .filter(|v| !v.is_empty())
    };
    Ok(Credentials {
        access_key_id: value("AccessKeyID").ok_or("AccessKeyID")?,
        secret_access_key: value("SecretAccessKey").ok_or("SecretAccessKey")?,
        session_token: value("SessionToken"),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::ByteString;

    #[tokio::test]
    async fn the_environment_source_names_what_is_missing() {
        let store = CredentialStore::default();
        let e = store
            .get(
                &CredentialSource::Environment,
                &Environment::default(),
                None,
            )
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("the host's environment has no AWS_ACCESS_KEY_ID"),
            "{e}"
        );
        let env = Environment::from_pairs([
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "sekrit"),
        ]);
        let c = store
            .get(&CredentialSource::Environment, &env, None)
            .await
            .unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.session_token.as_deref()),
            ("AKID", None)
        );
        assert!(
            !format!("{c:?}").contains("sekrit"),
            "Debug hides the secret"
        );
    }

    #[test]
    fn a_secret_needs_both_keys() {
        let mut s = Secret {
            data: Some(
                [("AccessKeyID".to_string(), ByteString(b"AKID".to_vec()))]
                    .into_iter()
                    .collect(),
            ),
            ..Secret::default()
        };
        assert_eq!(from_secret(&s), Err("SecretAccessKey"));
        s.string_data = Some(
            [("SecretAccessKey".to_string(), "k".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(from_secret(&s).unwrap().secret_access_key, "k");
    }
}
