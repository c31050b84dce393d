//! Reads through the contract. A missing field is "not set", never an error. The contract's
//! fields are read at the paths of the contract the CRD label resolved to, never the other's: a
//! v1beta2 object's stray `status.ready` means nothing, as in Cluster API.

use super::Contract;
use super::conditions::Condition;
use super::fields::{self, Versioned};
use serde_json::Value;

/// A provider object with the contract it implements.
#[derive(Debug, Clone)]
pub struct ProviderObject {
    /// The object.
    pub value: Value,
    /// The contract its CRD label resolved to.
    pub contract: Contract,
}

impl std::ops::Deref for ProviderObject {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl ProviderObject {
    /// The path of a versioned field in this object's contract.
    pub fn path(&self, f: Versioned) -> &'static str {
        match self.contract {
            Contract::V1Beta2 => f.v1beta2,
            Contract::V1Beta1 => f.v1beta1,
        }
    }

    fn flag(&self, f: Versioned) -> bool {
        self.value
            .pointer(self.path(f))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// InfraCluster / InfraMachine: `status.initialization.provisioned` (v1beta1:
    /// `status.ready`).
    pub fn provisioned(&self) -> bool {
        self.flag(fields::PROVISIONED)
    }

    /// BootstrapConfig: `status.initialization.dataSecretCreated` (v1beta1: `status.ready`).
    pub fn data_secret_created(&self) -> bool {
        self.flag(fields::DATA_SECRET_CREATED)
    }

    /// ControlPlane: `status.initialization.controlPlaneInitialized` (v1beta1:
    /// `status.initialized`).
    pub fn control_plane_initialized(&self) -> bool {
        self.flag(fields::CONTROL_PLANE_INITIALIZED)
    }

    /// `status.failureDomains`: a list in v1beta2, a map in v1beta1.
    pub fn failure_domains(&self) -> Vec<crate::common::FailureDomain> {
        use crate::common::FailureDomain;
        match (self.contract, self.value.pointer(fields::FAILURE_DOMAINS)) {
            (Contract::V1Beta2, Some(Value::Array(a))) => a
                .iter()
                .filter_map(|v| serde_json::from_value::<FailureDomain>(v.clone()).ok())
                .collect(),
            (Contract::V1Beta1, Some(Value::Object(m))) => m
                .iter()
                .map(|(name, v)| FailureDomain {
                    name: name.clone(),
                    control_plane: v.get("controlPlane").and_then(Value::as_bool),
                    attributes: Default::default(),
                })
                .collect(),
            _ => vec![],
        }
    }

    /// Condition `type_` of the object, from its contract's conditions field, when its status
    /// is one the contract allows.
    pub fn condition(&self, type_: &str) -> Option<Condition> {
        self.value
            .pointer(self.path(fields::CONDITIONS))
            .and_then(Value::as_array)?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
            .and_then(|c| serde_json::from_value::<Condition>(c.clone()).ok())
            .filter(|c| matches!(c.status.as_str(), "True" | "False" | "Unknown"))
    }

    /// Whether the object is being deleted.
    pub fn deleting(&self) -> bool {
        self.value.pointer(fields::DELETION_TIMESTAMP).is_some()
    }

    /// BootstrapConfig: `status.dataSecretName`.
    pub fn data_secret_name(&self) -> Option<String> {
        string(&self.value, fields::DATA_SECRET_NAME)
    }

    /// InfraMachine: `spec.providerID`.
    pub fn provider_id(&self) -> Option<String> {
        string(&self.value, fields::PROVIDER_ID)
    }

    /// InfraMachine: `status.addresses`.
    pub fn addresses(&self) -> Vec<crate::common::MachineAddress> {
        self.value
            .pointer(fields::ADDRESSES)
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default()
    }

    /// InfraMachine: the failure domain it landed in, `status.failureDomain`.
    pub fn status_failure_domain(&self) -> Option<String> {
        string(&self.value, fields::STATUS_FAILURE_DOMAIN)
    }

    /// InfraMachine: `spec.failureDomain`.
    pub fn spec_failure_domain(&self) -> Option<String> {
        string(&self.value, fields::SPEC_FAILURE_DOMAIN)
    }

    /// InfraCluster and ControlPlane: `spec.controlPlaneEndpoint`, when it has a host and port.
    pub fn endpoint(&self) -> Option<crate::common::ApiEndpoint> {
        endpoint(&self.value)
    }

    /// ControlPlane: the replica counters (desired, replicas, up to date, ready, available).
    pub fn replicas(&self) -> [Option<i32>; 5] {
        [
            fields::DESIRED_REPLICAS,
            fields::REPLICAS,
            fields::UP_TO_DATE_REPLICAS,
            fields::READY_REPLICAS,
            fields::AVAILABLE_REPLICAS,
        ]
        .map(|p| int(&self.value, p))
    }

    /// v1beta1 `status.failureReason/failureMessage`, copied without lifecycle effect; the
    /// v1beta2 contract has no such fields.
    pub fn failure(&self) -> (Option<String>, Option<String>) {
        match self.contract {
            Contract::V1Beta1 => (
                string(&self.value, fields::FAILURE_REASON),
                string(&self.value, fields::FAILURE_MESSAGE),
            ),
            Contract::V1Beta2 => (None, None),
        }
    }
}

/// The non-empty string at `pointer`.
pub fn string(obj: &Value, pointer: &str) -> Option<String> {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The 32-bit integer at `pointer`.
pub fn int(obj: &Value, pointer: &str) -> Option<i32> {
    obj.pointer(pointer)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
}

/// `spec.controlPlaneEndpoint`, when it has a host and a port.
pub fn endpoint(obj: &Value) -> Option<crate::common::ApiEndpoint> {
    let host = string(obj, fields::CONTROL_PLANE_ENDPOINT_HOST)?;
    let port = int(obj, fields::CONTROL_PLANE_ENDPOINT_PORT).filter(|p| *p != 0)?;
    Some(crate::common::ApiEndpoint { host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_fields_are_read_at_the_resolved_contracts_paths() {
        let obj = |v: serde_json::Value, contract| ProviderObject { value: v, contract };
        let v2 = serde_json::json!({"status": {"initialization": {"provisioned": true}}});
        let v1 = serde_json::json!({"status": {"ready": true}});
        let none = serde_json::json!({"status": {}});
        assert!(obj(v2.clone(), Contract::V1Beta2).provisioned());
        assert!(obj(v1.clone(), Contract::V1Beta1).provisioned());
        assert!(!obj(none, Contract::V1Beta2).provisioned());
        // The other contract's field means nothing.
        assert!(!obj(v1, Contract::V1Beta2).provisioned());
        assert!(!obj(v2, Contract::V1Beta1).provisioned());
        let map = serde_json::json!({"status": {"failureDomains": {"a": {"controlPlane": true}}}});
        assert_eq!(
            obj(map.clone(), Contract::V1Beta1).failure_domains()[0].name,
            "a"
        );
        assert!(obj(map, Contract::V1Beta2).failure_domains().is_empty());
        let failed = serde_json::json!({"status": {"failureReason": "X", "failureMessage": "m"}});
        assert_eq!(
            obj(failed.clone(), Contract::V1Beta1)
                .failure()
                .0
                .as_deref(),
            Some("X")
        );
        assert_eq!(obj(failed, Contract::V1Beta2).failure(), (None, None));
    }

    #[test]
    fn conditions_are_read_at_the_contracts_path() {
        let obj = |v: serde_json::Value, contract| ProviderObject { value: v, contract };
        let c = serde_json::json!([{"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}]);
        let v2 = serde_json::json!({"status": {"conditions": c}});
        let v1 = serde_json::json!({"status": {"v1beta2": {"conditions": c}}});
        assert!(
            obj(v2.clone(), Contract::V1Beta2)
                .condition("Ready")
                .is_some()
        );
        assert!(
            obj(v1.clone(), Contract::V1Beta1)
                .condition("Ready")
                .is_some()
        );
        assert!(obj(v1, Contract::V1Beta2).condition("Ready").is_none());
        assert!(obj(v2, Contract::V1Beta1).condition("Ready").is_none());
    }

    #[test]
    fn provider_conditions_are_read_from_both_contract_locations() {
        let v2 =
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let v1 = serde_json::json!({"status": {"v1beta2": {"conditions": [{"type": "Ready", "status": "False", "reason": "X"}]}}});
        assert_eq!(
            ProviderObject {
                value: v2.clone(),
                contract: Contract::V1Beta2
            }
            .condition("Ready")
            .unwrap()
            .status,
            "True"
        );
        assert_eq!(
            ProviderObject {
                value: v1.clone(),
                contract: Contract::V1Beta1
            }
            .condition("Ready")
            .unwrap()
            .reason,
            "X"
        );
        assert!(
            ProviderObject {
                value: v1.clone(),
                contract: Contract::V1Beta1
            }
            .condition("Other")
            .is_none()
        );
    }
}
