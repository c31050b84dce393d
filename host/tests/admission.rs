//! Admission as upstream: `capw up` serves the Cluster and ClusterClass webhooks and registers
//! them with the embedded API server, which calls them for every write they match. Each bad
//! input gets upstream's message through `kubectl apply`, and nothing is stored; variable
//! defaults land on the Cluster. The API server's side (failurePolicy, timeouts) is checked
//! against webhooks that are not there or do not answer.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::up::Up;

/// A class over the in-memory example's templates, with a required variable without default,
/// a constrained one and one with a default. `infra` names its infrastructure template.
fn class(name: &str, infra: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata:
  name: {name}
  namespace: default
spec:
  infrastructure:
    templateRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: {infra}}}
  controlPlane:
    templateRef: {{apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, name: in-memory-control-plane}}
    machineInfrastructure:
      templateRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: InMemoryMachineTemplate, name: in-memory-control-plane}}
  workers:
    machineDeployments:
    - class: default-worker
      bootstrap:
        templateRef: {{apiVersion: bootstrap.cluster.x-k8s.io/v1beta2, kind: KubeadmConfigTemplate, name: in-memory-default-worker-bootstraptemplate}}
      infrastructure:
        templateRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: InMemoryMachineTemplate, name: in-memory-default-worker-machinetemplate}}
  variables:
  - name: region
    required: true
    schema:
      openAPIV3Schema: {{type: string}}
  - name: replicas
    required: false
    schema:
      openAPIV3Schema: {{type: integer, minimum: 1}}
  - name: flavor
    required: false
    schema:
      openAPIV3Schema: {{type: string, default: small}}
"#
    )
}

/// The templates of `examples/clusterclass-inmemory.yaml`, without its class and Cluster.
fn templates() -> String {
    let example =
        std::fs::read_to_string(support::repo_root().join("examples/clusterclass-inmemory.yaml"))
            .unwrap();
    example
        .split("\n---")
        .filter(|d| d.contains("Template\n") && !d.contains("kind: ClusterClass"))
        .collect::<Vec<_>>()
        .join("\n---")
}

/// A topology Cluster, paused so that nothing is provisioned while admission is checked.
fn cluster(name: &str, class: &str, version: &str, variables: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {name}
  namespace: default
spec:
  paused: true
  topology:
    classRef: {{name: {class}}}
    version: {version}
    workers:
      machineDeployments:
      - {{class: default-worker, name: md-0, replicas: 1}}
    variables: {variables}
"#
    )
}

/// `kubectl apply` must fail with exactly `message`, and leave the object as it was. kubectl
/// words an `Invalid` answer by its object and causes (`The Cluster "x" is invalid: ...`), as it
/// does for upstream's webhooks; the webhook's name is in the Status message the API returns.
fn refused(up: &Up, manifest: &str, message: &str) {
    let (ok, out) = up.try_kubectl(&["apply", "-f", "-"], Some(manifest));
    assert!(
        !ok,
        "applied although it should be refused:\n{manifest}\n{out}"
    );
    assert!(
        out.trim_end().ends_with(message),
        "kubectl printed\n{out}\nexpected it to end with\n{message}"
    );
}

fn stored(up: &Up, name: &str, path: &str) -> String {
    up.kubectl(
        &[
            "get",
            "cluster",
            name,
            "-o",
            &format!("jsonpath={{{path}}}"),
        ],
        None,
    )
}

/// `capw up` with the providers of the in-memory example, and its templates applied.
fn with_templates() -> Up {
    let up = Up::start(&[], &["inmemory", "bootstrap", "control-plane"]);
    up.eventually("the providers' template kinds", 120, || {
        up.try_kubectl(&["apply", "-f", "-"], Some(&templates()))
            .0
            .then_some(())
    });
    up
}

/// Waits until `n` classes have their variables reconciled, as the webhooks need.
fn wait_for_classes(up: &Up, n: usize) {
    up.eventually("the classes' variables to be reconciled", 60, || {
        let out = up.kubectl(
            &[
                "get",
                "clusterclass",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type==\"VariablesReady\")].status}",
            ],
            None,
        );
        (out.split_whitespace().filter(|s| *s == "True").count() == n).then_some(())
    });
}

#[test]
fn bad_topologies_are_refused_with_upstreams_messages_and_nothing_is_stored() {
    let up = with_templates();
    up.kubectl(
        &["apply", "-f", "-"],
        Some(&class(
            "dev",
            "InMemoryClusterTemplate, name: in-memory-cluster",
        )),
    );
    up.kubectl(
        &["apply", "-f", "-"],
        Some(&class(
            "machines",
            "InMemoryMachineTemplate, name: in-memory-control-plane",
        )),
    );
    wait_for_classes(&up, 2);
    let configs = up.kubectl(
        &[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations",
        ],
        None,
    );
    assert!(
        configs.contains("capi-validating-webhook-configuration"),
        "{configs}"
    );
    assert!(
        configs.contains("capi-mutating-webhook-configuration"),
        "{configs}"
    );

    // A missing required variable: the defaulting webhook refuses it, as upstream's does.
    refused(
        &up,
        &cluster("missing", "dev", "v1.30.0", "[]"),
        r#"The Cluster "missing" is invalid: spec.topology.variables: Required value: required variable "region" must be set"#,
    );
    // A value its schema refuses.
    refused(
        &up,
        &cluster(
            "low",
            "dev",
            "v1.30.0",
            "[{name: region, value: eu}, {name: replicas, value: 0}]",
        ),
        r#"The Cluster "low" is invalid: spec.topology.variables[replicas].value: Invalid value: 0: spec.topology.variables[replicas].value in body should be greater than or equal to 1"#,
    );
    // A worker class the class does not have.
    let wrong_class = cluster("nomd", "dev", "v1.30.0", "[{name: region, value: eu}]")
        .replace("class: default-worker", "class: gpu-worker");
    refused(
        &up,
        &wrong_class,
        r#"The Cluster "nomd" is invalid: spec.topology.workers.machineDeployments[0].class: Invalid value: "gpu-worker": MachineDeploymentClass with name "gpu-worker" does not exist in ClusterClass "dev""#,
    );
    for name in ["missing", "low", "nomd"] {
        let (ok, out) = up.try_kubectl(&["get", "cluster", name], None);
        assert!(!ok && out.contains("NotFound"), "{name} was stored: {out}");
    }

    // A good one is stored with the variable's default and the version's `v`.
    up.kubectl(
        &["apply", "-f", "-"],
        Some(&cluster(
            "c1",
            "dev",
            "1.30.0",
            "[{name: region, value: eu}]",
        )),
    );
    assert_eq!(stored(&up, "c1", ".spec.topology.version"), "v1.30.0");
    assert_eq!(
        stored(
            &up,
            "c1",
            ".spec.topology.variables[?(@.name==\"flavor\")].value"
        ),
        "small",
        "the default is persisted on the Cluster"
    );
    let good =
        |version: &str, class: &str| cluster("c1", class, version, "[{name: region, value: eu}]");

    // Versions: never down, never two minors up.
    refused(
        &up,
        &good("v1.29.0", "dev"),
        r#"The Cluster "c1" is invalid: spec.topology.version: Invalid value: "v1.29.0": version cannot be decreased from "1.30.0" to "1.29.0""#,
    );
    refused(
        &up,
        &good("v1.32.0", "dev"),
        r#"The Cluster "c1" is invalid: spec.topology.version: Invalid value: "v1.32.0": version cannot be increased from "1.30.0" to "1.32.0""#,
    );
    // One minor up is refused while the control plane has not caught up (it has none yet).
    let (ok, out) = up.try_kubectl(&["apply", "-f", "-"], Some(&good("v1.31.0", "dev")));
    assert!(!ok, "{out}");
    assert!(out.contains(r#"spec.topology.version: Invalid value: "v1.31.0": version cannot be changed: failed to check if control plane is upgrading"#), "{out}");
    // A class whose infrastructure template is of another kind.
    refused(
        &up,
        &good("v1.30.0", "machines"),
        r#"The Cluster "c1" is invalid: spec.infrastructure.ref.kind: Forbidden: apiVersion.kind cannot be changed from "InMemoryClusterTemplate" to "InMemoryMachineTemplate" to prevent incompatible changes in the Clusters"#,
    );
    // A class that does not exist, on update.
    refused(
        &up,
        &good("v1.30.0", "nope"),
        r#"The Cluster "c1" is invalid: spec.topology.class: Internal error: clusterclasses.cluster.x-k8s.io "nope" not found"#,
    );
    assert_eq!(stored(&up, "c1", ".spec.topology.version"), "v1.30.0");
    assert_eq!(stored(&up, "c1", ".spec.topology.classRef.name"), "dev");

    // An unknown class is refused on create too (upstream only warns there; see
    // docs/clusterclass.md), and nothing is stored.
    refused(
        &up,
        &cluster("early", "later", "v1.30.0", "[{name: region, value: eu}]"),
        r#"The Cluster "early" is invalid: spec.topology.class: Internal error: clusterclasses.cluster.x-k8s.io "later" not found"#,
    );
    let (ok, out) = up.try_kubectl(&["get", "cluster", "early"], None);
    assert!(!ok && out.contains("NotFound"), "early was stored: {out}");

    // A class whose variable schema kube-apiserver would not take, or whose default fails it.
    let bad_default = class("bad", "InMemoryClusterTemplate, name: in-memory-cluster").replace(
        "{type: integer, minimum: 1}",
        "{type: integer, minimum: 1, default: 0}",
    );
    refused(
        &up,
        &bad_default,
        r#"The ClusterClass "bad" is invalid: spec.variables[1].schema.openAPIV3Schema.default: Invalid value: 0: spec.variables[1].schema.openAPIV3Schema.default in body should be greater than or equal to 1"#,
    );
    let untyped = class("bad", "InMemoryClusterTemplate, name: in-memory-cluster").replace(
        "{type: string, default: small}",
        "{type: object, properties: {size: {}}}",
    );
    let (ok, out) = up.try_kubectl(&["apply", "-f", "-"], Some(&untyped));
    assert!(!ok, "{out}");
    assert!(
        out.contains(r#"The ClusterClass "bad" is invalid: spec.variables[2].schema.openAPIV3Schema.properties[size].type: Required value"#),
        "{out}"
    );
    let (ok, out) = up.try_kubectl(&["get", "clusterclass", "bad"], None);
    assert!(
        !ok && out.contains("NotFound"),
        "a refused class was stored: {out}"
    );

    // A class in use cannot be deleted.
    let (ok, out) = up.try_kubectl(&["delete", "clusterclass", "dev"], None);
    assert!(!ok, "{out}");
    assert!(
        out.contains(r#"Error from server (Forbidden): admission webhook "validation.clusterclass.cluster.x-k8s.io" denied the request: ClusterClass.cluster.x-k8s.io "dev" is forbidden: ClusterClass cannot be deleted because it is used by Cluster(s): default/c1"#),
        "{out}"
    );
    up.kubectl(&["get", "clusterclass", "dev"], None);
}

/// The API server's side: a webhook that cannot be reached refuses the write under
/// `failurePolicy: Fail` and is skipped under `Ignore`; one that does not answer in
/// `timeoutSeconds` counts as unreachable; a selector that does not match skips it.
#[test]
fn failure_policy_timeout_and_selectors_are_kubes() {
    let up = Up::start(&[], &[]);
    // Accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = |policy: &str, port: u16, timeout: u32, selector: &str| {
        format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: configmaps}}
webhooks:
- name: configmaps.example.com
  clientConfig: {{url: "https://127.0.0.1:{port}/validate"}}
  rules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]
  failurePolicy: {policy}
  timeoutSeconds: {timeout}
  objectSelector: {selector}
  sideEffects: None
  admissionReviewVersions: [v1]
"#
        )
    };
    up.kubectl(
        &["apply", "-f", "-"],
        Some(&config("Fail", closed_port, 5, "{}")),
    );
    let (ok, out) = up.try_kubectl(&["create", "configmap", "refused"], None);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            r#"Internal error occurred: failed calling webhook "configmaps.example.com": failed to call webhook: Post "https://127.0.0.1:{closed_port}/validate?timeout=5s""#
        )),
        "{out}"
    );
    let (ok, _) = up.try_kubectl(&["get", "configmap", "refused"], None);
    assert!(!ok, "a refused ConfigMap was stored");

    up.kubectl(
        &["apply", "-f", "-"],
        Some(&config("Fail", silent_port, 1, "{}")),
    );
    let (ok, out) = up.try_kubectl(&["create", "configmap", "slow"], None);
    assert!(!ok, "{out}");
    assert!(out.contains("context deadline exceeded"), "{out}");

    up.kubectl(
        &["apply", "-f", "-"],
        Some(&config(
            "Fail",
            closed_port,
            5,
            "{matchLabels: {checked: \"yes\"}}",
        )),
    );
    up.kubectl(&["create", "configmap", "unlabelled"], None);

    up.kubectl(
        &["apply", "-f", "-"],
        Some(&config("Ignore", closed_port, 5, "{}")),
    );
    up.kubectl(&["create", "configmap", "ignored"], None);
    up.kubectl(&["get", "configmap", "ignored", "unlabelled"], None);
    drop(silent);
}

/// A patch whose Go template calls a function capw does not have passes admission (upstream
/// does not check templates there either) and is reported on the Cluster: `TopologyReconciled`
/// is False and names the patch, the kind and the function. Nothing is generated.
#[test]
fn an_unknown_template_function_is_named_on_the_cluster() {
    let up = with_templates();
    let broken = class("hashed", "InMemoryClusterTemplate, name: in-memory-cluster")
        + r#"  patches:
  - name: hashed
    definitions:
    - selector:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: InMemoryClusterTemplate
        matchResources: {infrastructureCluster: true}
      jsonPatches:
      - op: add
        path: /spec/template/metadata/annotations
        valueFrom:
          template: "{{ sha256sum .builtin.cluster.name }}"
"#;
    up.kubectl(&["apply", "-f", "-"], Some(&broken));
    wait_for_classes(&up, 1);
    let unpaused = cluster("hashed", "hashed", "v1.30.0", "[{name: region, value: eu}]")
        .replace("paused: true", "paused: false");
    up.kubectl(&["apply", "-f", "-"], Some(&unpaused));
    let message = up.eventually("TopologyReconciled=False", 60, || {
        let out = up.kubectl(
            &[
                "get",
                "cluster",
                "hashed",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"TopologyReconciled\")]}",
            ],
            None,
        );
        let c: serde_json::Value = serde_json::from_str(&out).ok()?;
        (c["status"] == "False").then(|| c["message"].as_str().unwrap_or_default().to_string())
    });
    assert!(
        message.contains(r#"patch "hashed" on InMemoryClusterTemplate"#)
            && message.contains("sha256sum"),
        "{message}"
    );
    let (_, generated) = up.try_kubectl(
        &["get", "inmemoryclusters,kubeadmcontrolplanes", "-o", "name"],
        None,
    );
    assert!(
        !generated.contains('/'),
        "objects were generated from a failed patch: {generated}"
    );
}
