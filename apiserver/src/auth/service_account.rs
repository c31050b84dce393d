//! ServiceAccount tokens, as kube's bound tokens: `TokenRequest` (`POST
//! .../serviceaccounts/NAME/token`) issues a JWT signed with the server's own key (ES256,
//! `DATA_DIR/sa.key`, made at first start), and a bearer token authenticates as
//! `system:serviceaccount:NS:NAME` while its signature, issuer, audience and expiry hold and
//! the ServiceAccount it names still exists with the same uid (deleting the ServiceAccount
//! revokes its tokens).

use crate::store::{ObjKey, Store};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// kube's default issuer and API audience.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

#[derive(Debug, thiserror::Error)]
/// Why the signer could not start or sign.
pub enum ServiceAccountError {
    /// The key could not be made, read or written.
    #[error("the ServiceAccount signing key {path}: {message}")]
    Key {
        /// The key file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A token could not be signed.
    #[error("signing a ServiceAccount token: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
}

#[derive(Debug, Serialize, Deserialize)]
struct Named {
    name: String,
    uid: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct KubeClaims {
    namespace: String,
    serviceaccount: Named,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    nbf: i64,
    #[serde(rename = "kubernetes.io")]
    kube: KubeClaims,
}

/// Issues and verifies the server's ServiceAccount tokens.
pub struct Signer {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").finish_non_exhaustive()
    }
}

impl Signer {
    /// The key in `dir/sa.key`, made there when missing; a fresh one in memory without `dir`.
    pub fn load_or_create(dir: Option<&Path>) -> Result<Signer, ServiceAccountError> {
        let path = dir.map(|d| d.join("sa.key"));
        let failed = |message: String| ServiceAccountError::Key {
            path: path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "(in memory)".into()),
            message,
        };
        let pem = match path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
            Some(pem) => pem,
            None => {
                let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .map_err(|e| failed(e.to_string()))?;
                let pem = key.serialize_pem();
                if let Some(p) = &path {
                    crate::kubeconfig::write_private(p, &pem).map_err(|e| failed(e.to_string()))?;
                }
                pem
            }
        };
        let key = rcgen::KeyPair::from_pem(&pem).map_err(|e| failed(e.to_string()))?;
        Ok(Signer {
            encoding: EncodingKey::from_ec_pem(pem.as_bytes())
                .map_err(|e| failed(e.to_string()))?,
            decoding: DecodingKey::from_ec_pem(key.public_key_pem().as_bytes())
                .map_err(|e| failed(e.to_string()))?,
        })
    }

    /// A token for the ServiceAccount `ns/name` (uid `uid`) valid for `seconds` from `now`,
    /// for `audiences` (the API server's own when empty); with its expiry.
    pub fn issue(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        audiences: Vec<String>,
        seconds: i64,
        now: jiff::Timestamp,
    ) -> Result<(String, jiff::Timestamp), ServiceAccountError> {
        let iat = now.as_second();
        let exp = iat + seconds;
        let claims = Claims {
            iss: ISSUER.into(),
            sub: format!("system:serviceaccount:{ns}:{name}"),
            aud: if audiences.is_empty() {
                vec![ISSUER.into()]
            } else {
                audiences
            },
            exp,
            iat,
            nbf: iat,
            kube: KubeClaims {
                namespace: ns.into(),
                serviceaccount: Named {
                    name: name.into(),
                    uid: uid.into(),
                },
            },
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.encoding)?;
        let expiry = jiff::Timestamp::from_second(exp).unwrap_or(now);
        Ok((token, expiry))
    }

    /// The user and groups of a valid token whose ServiceAccount still exists.
    pub fn verify(&self, token: &str, store: &Store) -> Option<(String, Vec<String>)> {
        let mut v = Validation::new(Algorithm::ES256);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[ISSUER]);
        v.validate_nbf = true;
        // Valid until the second it expires, as kube checks it (no leeway).
        v.leeway = 0;
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &v)
            .ok()?
            .claims;
        let k = &claims.kube;
        let sa = store.get(&ObjKey::new(
            "/serviceaccounts",
            &k.namespace,
            &k.serviceaccount.name,
        ))?;
        let uid = sa.pointer("/metadata/uid").and_then(|u| u.as_str());
        if uid != Some(k.serviceaccount.uid.as_str())
            || sa.pointer("/metadata/deletionTimestamp").is_some()
        {
            return None;
        }
        Some((
            claims.sub,
            vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", k.namespace),
                "system:authenticated".into(),
            ],
        ))
    }
}
