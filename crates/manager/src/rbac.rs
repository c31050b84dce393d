//! What the host asks of the management API, as RBAC rules per identity: the host itself
//! (CRDs, webhook registration, the Lease, and impersonating its components) and each
//! component it runs as its own ServiceAccount with `--component-identities`. `capw manifests`
//! writes a ClusterRole per account from these lists, and `host/tests/manifests.rs` runs the
//! host on exactly these against an API server with RBAC on, so a call a list lacks fails that
//! test (the API server records every decision per user).
//!
//! Provider kinds are granted by group (`resources: ["*"]`): plugins declare their kinds at
//! run time, so the manifests cannot name them (upstream aggregates each provider's own role
//! instead).

/// One RBAC rule: API groups, resources, verbs, and the names it is limited to (none: all).
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub names: &'static [&'static str],
}

/// An identity and what it may do: cluster-wide, and in the host's own namespace.
#[derive(Debug, Clone, Copy)]
pub struct Account {
    /// The ServiceAccount's name.
    pub name: &'static str,
    pub cluster: &'static [Rule],
    pub namespace: &'static [Rule],
}

const ALL: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];
const PROVIDER_GROUPS: &[&str] = &[
    "infrastructure.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
];
const CORE_KINDS: &[&str] = &[
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
];

const fn rule(
    groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
) -> Rule {
    Rule {
        groups,
        resources,
        verbs,
        names: &[],
    }
}

const EVENTS: Rule = rule(&["events.k8s.io"], &["events"], &["create", "patch"]);
const CRDS_READ: Rule = rule(
    &["apiextensions.k8s.io"],
    &["customresourcedefinitions"],
    READ,
);
const CRDS_WRITE: Rule = rule(
    &["apiextensions.k8s.io"],
    &["customresourcedefinitions"],
    &["get", "list", "watch", "create", "update", "patch"],
);

/// The host's own account (`capw-controller-manager`): it installs the host's CRDs, registers
/// the webhooks with the CA it keeps in its namespace, holds the Lease, and acts as its
/// components.
pub const HOST: Account = Account {
    name: "capw-controller-manager",
    cluster: &[
        CRDS_WRITE,
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ],
            &["get", "create", "update", "patch"],
        ),
    ],
    namespace: &[
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "update"],
        ),
        rule(&[""], &["secrets"], &["get", "create", "update"]),
        Rule {
            groups: &[""],
            resources: &["serviceaccounts"],
            verbs: &["impersonate"],
            names: &crate::COMPONENT_ACCOUNTS,
        },
    ],
};

/// The core controllers: Cluster API's own kinds, the provider objects they clone, adopt and
/// delete, and the Secrets they read (kubeconfigs) and make.
pub const CORE: Account = Account {
    name: crate::COMPONENT_ACCOUNTS[0],
    cluster: &[
        rule(&["cluster.x-k8s.io"], CORE_KINDS, ALL),
        rule(PROVIDER_GROUPS, &["*"], ALL),
        rule(&[""], &["secrets"], ALL),
        CRDS_READ,
        EVENTS,
    ],
    namespace: &[],
};

/// The provider driver: the plugins' kinds and their status, the Machines a control-plane
/// provider makes, and the Secrets of bootstrap data, certificates and kubeconfigs.
pub const DRIVER: Account = Account {
    name: crate::COMPONENT_ACCOUNTS[1],
    cluster: &[
        rule(PROVIDER_GROUPS, &["*"], ALL),
        rule(&["cluster.x-k8s.io"], &["machines", "machines/status"], ALL),
        rule(&["cluster.x-k8s.io"], &["clusters"], READ),
        rule(&[""], &["secrets"], ALL),
        CRDS_READ,
        EVENTS,
    ],
    namespace: &[],
};

/// The plugin runtime: WasmProviders and the drop-in directory, the plugins' CRDs, and the
/// Secrets an AWS grant names.
pub const RUNTIME: Account = Account {
    name: crate::COMPONENT_ACCOUNTS[2],
    cluster: &[
        rule(
            &["runtime.capw.dev"],
            &["wasmproviders", "wasmproviders/status"],
            ALL,
        ),
        CRDS_WRITE,
        rule(&[""], &["secrets"], READ),
        EVENTS,
    ],
    namespace: &[],
};

/// Every account, the host's first.
pub const ACCOUNTS: [Account; 4] = [HOST, CORE, DRIVER, RUNTIME];

impl Rule {
    /// The rule as a Kubernetes PolicyRule.
    pub fn to_json(&self) -> serde_json::Value {
        let mut r = serde_json::json!({
            "apiGroups": self.groups,
            "resources": self.resources,
            "verbs": self.verbs,
        });
        if !self.names.is_empty() {
            r["resourceNames"] = serde_json::json!(self.names);
        }
        r
    }
}
