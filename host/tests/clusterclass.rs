//! ClusterClass end to end: upstream's quick-start class for the Docker kinds (v1.13.5,
//! unchanged) applied with kubectl to a real `capw apiserver`, with the host's controllers and
//! the real bootstrap, control-plane and Docker components. The ClusterClass controller owns
//! every template, lists the variables, and says when a reference is missing or outdated.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::clusterclass::ClusterClass;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::host::Env;

const QUICK_START: &str = "host/tests/data/clusterclass-quick-start.yaml";

async fn env() -> Env {
    let mut env = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("docker", "docker.wasm"),
        ],
        &[("docker", "capabilities: [container-runtime]\n")],
    )
    .await;
    env.dump = "clusterclasses";
    env.serving(
        "the bootstrap, control-plane and Docker plugins to serve",
        4,
    )
    .await;
    env
}

/// The condition `type_` of the class: (status, reason, message).
fn condition(cc: &ClusterClass, type_: &str) -> Option<(String, String, String)> {
    cc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the class has reconciled its current generation's references, and returns it
/// with its `RefVersionsUpToDate` condition.
async fn references_settled(
    env: &Env,
    api: &Api<ClusterClass>,
    generation: i64,
) -> (ClusterClass, (String, String, String)) {
    env.eventually(
        "the ClusterClass to reconcile its references",
        60,
        || async {
            let cc = api.get("quick-start").await.ok()?;
            let c = condition(&cc, "RefVersionsUpToDate")?;
            let current = cc
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "RefVersionsUpToDate")?
                .observed_generation
                == Some(generation);
            current.then_some((cc, c))
        },
    )
    .await
}

#[tokio::test]
async fn upstreams_quick_start_class_is_reconciled_as_upstream_does() {
    let env = env().await;
    let path = support::repo_root().join(QUICK_START);
    let path = path.to_str().unwrap();
    // The template kinds come with the plugins; apply once their CRDs are served.
    env.eventually(
        "the quick-start class and templates to apply",
        60,
        || async {
            let (ok, _) =
                support::kubectl(&env.kubeconfig, &env.home, &["apply", "-f", path], None);
            ok.then_some(())
        },
    )
    .await;
    let api: Api<ClusterClass> = Api::default_namespaced(env.client.clone());
    let cc = env
        .eventually("VariablesReady and RefVersionsUpToDate", 60, || async {
            let cc = api.get("quick-start").await.ok()?;
            let ready = condition(&cc, "VariablesReady")?.0 == "True"
                && condition(&cc, "RefVersionsUpToDate")?.0 == "True";
            ready.then_some(cc)
        })
        .await;
    let status = cc.status.clone().unwrap();
    assert_eq!(status.observed_generation, cc.metadata.generation);
    let names: Vec<&str> = status.variables.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "coreDNSImageTag",
            "etcdImageTag",
            "imageRepository",
            "podSecurityStandard"
        ]
    );
    let pss = &status.variables[3];
    assert_eq!(pss.definitions[0].from, "inline");
    assert_eq!(pss.definitions_conflict, Some(false));
    assert_eq!(
        pss.definitions[0].schema.open_api_v3_schema["properties"]["enforce"]["default"],
        "baseline"
    );

    // Every template is owned by the class (not controlled: a template may serve several).
    let uid = cc.uid().unwrap();
    for (group, kind, plural, name) in [
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerClusterTemplate",
            "dockerclustertemplates",
            "quick-start-cluster",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlaneTemplate",
            "kubeadmcontrolplanetemplates",
            "quick-start-control-plane",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachineTemplate",
            "dockermachinetemplates",
            "quick-start-control-plane",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachineTemplate",
            "dockermachinetemplates",
            "quick-start-default-worker-machinetemplate",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachinePoolTemplate",
            "dockermachinepooltemplates",
            "quick-start-default-worker-machinepooltemplate",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
            "quick-start-default-worker-bootstraptemplate",
        ),
    ] {
        let t = env
            .dynamic(group, kind, plural)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
        let owners: Vec<_> = t
            .owner_references()
            .iter()
            .filter(|o| o.kind == "ClusterClass")
            .collect();
        assert_eq!(owners.len(), 1, "{kind} {name}: {:?}", t.owner_references());
        assert_eq!(owners[0].uid, uid);
        assert_eq!(owners[0].name, "quick-start");
        assert_eq!(owners[0].controller, None);
    }

    // Upstream's printer columns.
    let table = env.kubectl(&["get", "cc"], None);
    let header = table.lines().next().unwrap();
    assert!(
        header.split_whitespace().collect::<Vec<_>>() == ["NAME", "VARIABLES", "READY", "AGE"],
        "{table}"
    );
    assert!(table.contains("quick-start   True"), "{table}");

    outdated_and_missing_references_are_conditions(&env, &api).await;
}

/// A reference to an older apiVersion than the CRD's contract names is `RefVersionsNotUpToDate`;
/// one to a template that does not exist is `InternalError` naming the field, and the class's
/// `observedGeneration` stays where it was.
async fn outdated_and_missing_references_are_conditions(env: &Env, api: &Api<ClusterClass>) {
    let pp = PatchParams::default();
    let patch = json!({"spec": {"infrastructure": {"templateRef": {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerClusterTemplate",
        "name": "quick-start-cluster",
    }}}});
    let cc = api
        .patch("quick-start", &pp, &Patch::Merge(&patch))
        .await
        .unwrap();
    let (_, c) = references_settled(env, api, cc.metadata.generation.unwrap()).await;
    assert_eq!(
        c,
        (
            "False".into(),
            "RefVersionsNotUpToDate".into(),
            "The following templateRefs are not using the latest apiVersion: * DockerClusterTemplate quick-start-cluster: current: v1beta1, latest: v1beta2".into()
        )
    );

    let patch = json!({"spec": {"infrastructure": {"templateRef": {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "DockerClusterTemplate",
        "name": "nowhere",
    }}}});
    let before = api.get("quick-start").await.unwrap();
    let cc = api
        .patch("quick-start", &pp, &Patch::Merge(&patch))
        .await
        .unwrap();
    let (cc, c) = references_settled(env, api, cc.metadata.generation.unwrap()).await;
    assert_eq!((c.0.as_str(), c.1.as_str()), ("Unknown", "InternalError"));
    assert!(
        c.2.contains(
            "DockerClusterTemplate default/nowhere (spec.infrastructure.templateRef) does not exist"
        ),
        "{}",
        c.2
    );
    assert_eq!(
        cc.status.unwrap().observed_generation,
        before.status.unwrap().observed_generation,
        "a class that did not reconcile does not claim its generation"
    );
}
