//! What the host asks of the management API, as RBAC rules: `capw manifests` writes them into
//! the host's ClusterRole, and `host/tests/manifests.rs` runs the host on exactly these
//! against an API server with RBAC on, so a call the list lacks fails that test.
//!
//! Provider kinds are granted by group (`resources: ["*"]`): plugins declare their kinds at
//! run time, so the manifests cannot name them (upstream aggregates each provider's own role
//! instead).

/// One RBAC rule: API groups, resources, verbs.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

const ALL: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// Cluster-wide rules (the host's ClusterRole).
pub const RULES: &[Rule] = &[
    // The host's own CRDs and each plugin's, installed with server-side apply and waited on.
    Rule {
        groups: &["apiextensions.k8s.io"],
        resources: &["customresourcedefinitions"],
        verbs: &["get", "list", "watch", "create", "update", "patch"],
    },
    // The core controllers and the topology controller.
    Rule {
        groups: &["cluster.x-k8s.io"],
        resources: &[
            "clusters",
            "clusters/status",
            "clusterclasses",
            "clusterclasses/status",
            "machines",
            "machines/status",
            "machinesets",
            "machinesets/status",
            "machinedeployments",
            "machinedeployments/status",
            "machinehealthchecks",
            "machinehealthchecks/status",
        ],
        verbs: ALL,
    },
    // The provider driver, for whatever kinds the plugins declare.
    Rule {
        groups: &[
            "infrastructure.cluster.x-k8s.io",
            "bootstrap.cluster.x-k8s.io",
            "controlplane.cluster.x-k8s.io",
        ],
        resources: &["*"],
        verbs: ALL,
    },
    // The plugin runtime and the drop-in directory.
    Rule {
        groups: &["runtime.capw.dev"],
        resources: &["wasmproviders", "wasmproviders/status"],
        verbs: ALL,
    },
    // Kubeconfigs, CAs, bootstrap data, AWS credentials, the webhook CA the replicas share.
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: ALL,
    },
    Rule {
        groups: &["events.k8s.io"],
        resources: &["events"],
        verbs: &["create", "patch"],
    },
    // The admission webhooks' registration, with the CA the host made.
    Rule {
        groups: &["admissionregistration.k8s.io"],
        resources: &[
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ],
        verbs: &["get", "create", "update", "patch"],
    },
];

/// Rules in the host's own namespace (a Role): the leader-election Lease.
pub const NAMESPACE_RULES: &[Rule] = &[Rule {
    groups: &["coordination.k8s.io"],
    resources: &["leases"],
    verbs: &["get", "create", "update"],
}];

impl Rule {
    /// The rule as a Kubernetes PolicyRule.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "apiGroups": self.groups,
            "resources": self.resources,
            "verbs": self.verbs,
        })
    }
}
