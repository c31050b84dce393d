//! The contract's field paths (JSON pointers), by role and contract version, as
//! `capi-contract.md` lists them. A v1beta2 path and its v1beta1 counterpart sit side by side;
//! [`super::ProviderObject`] picks the one of the contract the CRD label resolved to.

/// A field at different paths in the two contracts.
#[derive(Debug, Clone, Copy)]
pub struct Versioned {
    pub v1beta2: &'static str,
    pub v1beta1: &'static str,
}

/// InfraCluster and InfraMachine: provisioned.
pub const PROVISIONED: Versioned = Versioned {
    v1beta2: "/status/initialization/provisioned",
    v1beta1: "/status/ready",
};
/// BootstrapConfig: the data Secret is created.
pub const DATA_SECRET_CREATED: Versioned = Versioned {
    v1beta2: "/status/initialization/dataSecretCreated",
    v1beta1: "/status/ready",
};
/// ControlPlane: initialized.
pub const CONTROL_PLANE_INITIALIZED: Versioned = Versioned {
    v1beta2: "/status/initialization/controlPlaneInitialized",
    v1beta1: "/status/initialized",
};
/// A provider object's own conditions: v1beta1 objects carry v1beta2 conditions aside.
pub const CONDITIONS: Versioned = Versioned {
    v1beta2: "/status/conditions",
    v1beta1: "/status/v1beta2/conditions",
};

/// InfraCluster: failure domains (a list in v1beta2, a map keyed by name in v1beta1).
pub const FAILURE_DOMAINS: &str = "/status/failureDomains";
/// InfraCluster and ControlPlane: the endpoint core copies to the Cluster.
pub const CONTROL_PLANE_ENDPOINT: &str = "/spec/controlPlaneEndpoint";
pub const CONTROL_PLANE_ENDPOINT_HOST: &str = "/spec/controlPlaneEndpoint/host";
pub const CONTROL_PLANE_ENDPOINT_PORT: &str = "/spec/controlPlaneEndpoint/port";

/// InfraMachine.
pub const PROVIDER_ID: &str = "/spec/providerID";
pub const ADDRESSES: &str = "/status/addresses";
/// Where the machine landed (status), and where it was asked to go (spec).
pub const STATUS_FAILURE_DOMAIN: &str = "/status/failureDomain";
pub const SPEC_FAILURE_DOMAIN: &str = "/spec/failureDomain";

/// BootstrapConfig.
pub const DATA_SECRET_NAME: &str = "/status/dataSecretName";

/// ControlPlane replica counters.
pub const DESIRED_REPLICAS: &str = "/spec/replicas";
pub const REPLICAS: &str = "/status/replicas";
pub const UP_TO_DATE_REPLICAS: &str = "/status/upToDateReplicas";
pub const READY_REPLICAS: &str = "/status/readyReplicas";
pub const AVAILABLE_REPLICAS: &str = "/status/availableReplicas";
/// ControlPlane: the version asked for, and the lowest version its Machines run (what the
/// MachineSet preflight checks compare).
pub const SPEC_VERSION: &str = "/spec/version";
pub const STATUS_VERSION: &str = "/status/version";
/// ControlPlane: the control plane's Machines template (the host clones its infrastructure).
pub const MACHINE_TEMPLATE_INFRASTRUCTURE_REF: &str =
    "/spec/machineTemplate/spec/infrastructureRef";
/// A machine template's spec, which a clone gets.
pub const TEMPLATE_SPEC: &str = "/spec/template/spec";

/// v1beta1 terminal failures, copied without lifecycle effect.
pub const FAILURE_REASON: &str = "/status/failureReason";
pub const FAILURE_MESSAGE: &str = "/status/failureMessage";

/// Any object being deleted.
pub const DELETION_TIMESTAMP: &str = "/metadata/deletionTimestamp";

/// Status fields the contract defines: the host sets them from the typed result (so
/// `dataSecretName` is always the Secret the host wrote), or core reads them, and a plugin's
/// status patch may set none of them (SECURITY.md, "status patches").
pub const STATUS_FIELDS: &[&str] = &[
    "initialization",
    "ready",
    "initialized",
    "dataSecretName",
    "failureDomains",
    "failureDomain",
    "addresses",
    "interruptible",
    "conditions",
    "v1beta2",
    "deprecated",
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
    "updatedReplicas",
    "unavailableReplicas",
    "version",
    "selector",
    "observedGeneration",
    "failureReason",
    "failureMessage",
];
