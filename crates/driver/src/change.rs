//! The typed change a checked plugin result makes to its provider object: the contract's spec
//! fields and the status fields the host owns (DESIGN.md §5). `writeback` maps a result to one
//! [`Change`]; [`Change::apply`] lays it into the reconcile's scope over the status the plugin's
//! patch and conditions built, so a plugin's status patch never sets a contract field.
//!
//! A status field is set, removed, or left as the object has it ([`Field`]). The change is
//! applied as one RFC 7386 merge patch, in which a removal is `null`.

use super::DriverError;
use super::scope::Scope;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;

/// A status field the host sets, removes, or leaves as it is.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) enum Field<T> {
    #[default]
    Keep,
    Set(T),
    Remove,
}

impl<T> Field<T> {
    fn is_keep(&self) -> bool {
        matches!(self, Field::Keep)
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Set(v) => v.serialize(s),
            // `Keep` is skipped by the containing struct; `null` removes in a merge patch.
            Field::Keep | Field::Remove => s.serialize_none(),
        }
    }
}

/// `status.initialization`: the contract's one-way flags.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Initialization {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) provisioned: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) data_secret_created: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) control_plane_initialized: Option<bool>,
}

impl Initialization {
    fn is_empty(&self) -> bool {
        self.provisioned.is_none()
            && self.data_secret_created.is_none()
            && self.control_plane_initialized.is_none()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FailureDomain {
    pub(super) name: String,
    pub(super) control_plane: bool,
    pub(super) attributes: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub(super) struct Address {
    #[serde(rename = "type")]
    pub(super) type_: String,
    pub(super) address: String,
}

/// One entry of a control plane's `status.versions`.
#[derive(Debug, Serialize)]
pub(super) struct VersionReplicas {
    pub(super) version: String,
    pub(super) replicas: usize,
}

/// The status fields the host owns, by role.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusChange {
    #[serde(skip_serializing_if = "Initialization::is_empty")]
    pub(super) initialization: Initialization,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) data_secret_name: Field<String>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) failure_domains: Field<Vec<FailureDomain>>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) addresses: Field<Vec<Address>>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) failure_domain: Field<String>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) interruptible: Field<bool>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) selector: Field<String>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) version: Field<String>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) versions: Field<Vec<VersionReplicas>>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) observed_generation: Field<i64>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) replicas: Field<usize>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) ready_replicas: Field<u32>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) available_replicas: Field<u32>,
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(super) up_to_date_replicas: Field<u32>,
}

/// `spec.controlPlaneEndpoint`.
#[derive(Debug, Serialize)]
pub(super) struct Endpoint {
    pub(super) host: String,
    pub(super) port: u16,
}

/// The contract's spec fields, which the host sets for the plugin.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SpecChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) control_plane_endpoint: Option<Endpoint>,
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub(super) provider_id: Option<String>,
}

/// What one checked result changes.
#[derive(Debug, Default)]
pub(super) struct Change {
    pub(super) spec: SpecChange,
    pub(super) status: StatusChange,
}

impl Change {
    /// Lays the change into `scope`: the spec fields into its spec patch, the status fields over
    /// `status` (what the plugin's patch and conditions made of the old status).
    pub(super) fn apply(&self, scope: &mut Scope, status: &mut Value) -> Result<(), DriverError> {
        let invalid = |e: serde_json::Error| DriverError::Invalid(format!("status change: {e}"));
        scope.merge_spec(&serde_json::to_value(&self.spec).map_err(invalid)?);
        json_patch::merge(
            status,
            &serde_json::to_value(&self.status).map_err(invalid)?,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_change_is_an_empty_patch() {
        let c = Change::default();
        assert_eq!(serde_json::to_value(&c.status).ok(), Some(json!({})));
        assert_eq!(serde_json::to_value(&c.spec).ok(), Some(json!({})));
    }

    /// Set fields are written, removed ones are `null` (gone after the merge), kept ones are
    /// left as the status had them, and the initialization flags merge into what is there.
    #[test]
    fn set_remove_and_keep_merge_as_the_contract_needs() {
        let status = StatusChange {
            initialization: Initialization {
                data_secret_created: Some(true),
                ..Default::default()
            },
            data_secret_name: Field::Set("m-1".into()),
            version: Field::Remove,
            observed_generation: Field::Set(3),
            ..Default::default()
        };
        let mut before = json!({
            "initialization": {"provisioned": true},
            "version": "v1.29.0",
            "selector": "kept",
            "pluginField": 1,
        });
        json_patch::merge(
            &mut before,
            &serde_json::to_value(&status).unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(
            before,
            json!({
                "initialization": {"provisioned": true, "dataSecretCreated": true},
                "dataSecretName": "m-1",
                "observedGeneration": 3,
                "selector": "kept",
                "pluginField": 1,
            })
        );
    }

    #[test]
    fn a_plugin_typed_initialization_becomes_the_contracts_object() {
        let status = StatusChange {
            initialization: Initialization {
                provisioned: Some(false),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut before = json!({"initialization": "ready"});
        json_patch::merge(
            &mut before,
            &serde_json::to_value(&status).unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(before, json!({"initialization": {"provisioned": false}}));
    }
}
