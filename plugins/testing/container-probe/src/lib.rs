//! `container-probe`: a test provider for `capw:host/container-runtime`. Reconciling a machine
//! whose spec names `image`, `container` and `foreign` creates and starts the container, runs a
//! command in it, inspects it, tries to inspect and remove the foreign one, removes its own, and
//! returns what every step answered as its status patch. `spec.privileged` and `spec.network`
//! make it ask for a privileged container or another network mode.

use capw_sdk::bindings::capw::host::container_runtime as cr;
use capw_sdk::*;

struct Probe;

fn err(e: cr::RuntimeError) -> Value {
    match e {
        cr::RuntimeError::NotFound(m) => json!({"notFound": m}),
        cr::RuntimeError::Unavailable(m) => json!({"unavailable": m}),
        cr::RuntimeError::Invalid(m) => json!({"invalid": m}),
        cr::RuntimeError::Other(m) => json!({"other": m}),
    }
}

impl Provider for Probe {
    fn metadata() -> Metadata {
        let group = "infrastructure.cluster.x-k8s.io";
        Metadata {
            name: "container-probe".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![
                kind(group, "ProbeCluster", KindRole::InfrastructureCluster),
                kind(group, "ProbeMachine", KindRole::InfrastructureMachine),
            ],
            crds: vec![
                crd(group, "ProbeCluster", "probeclusters", &[]),
                crd(group, "ProbeMachine", "probemachines", &[]),
            ],
        }
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        let (image, name, foreign) = (
            obj.str("/spec/image"),
            obj.str("/spec/container"),
            obj.str("/spec/foreign"),
        );
        let spec = cr::ContainerSpec {
            name: name.into(),
            image: image.into(),
            command: vec!["/bin/sleep".into(), "300".into()],
            env: vec![],
            labels: vec![("probe".into(), "yes".into())],
            // A hostile probe asks for what its object says: the host must refuse what the
            // grant does not allow.
            network: Some(obj.str("/spec/network"))
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            ports: vec![],
            privileged: obj
                .get("/spec/privileged")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        let mut report = serde_json::Map::new();
        report.insert(
            "create".into(),
            cr::create(&spec).map(|_| json!("ok")).unwrap_or_else(err),
        );
        report.insert(
            "start".into(),
            cr::start(name).map(|_| json!("ok")).unwrap_or_else(err),
        );
        report.insert(
            "exec".into(),
            cr::exec(
                name,
                &["/bin/sh".into(), "-c".into(), "echo hi; exit 4".into()],
            )
            .map(|o| json!({"exitCode": o.exit_code, "stdout": o.stdout}))
            .unwrap_or_else(err),
        );
        report.insert(
            "inspect".into(),
            cr::inspect(name)
                .map(|i| json!({"running": i.running, "name": i.name}))
                .unwrap_or_else(err),
        );
        report.insert(
            "list".into(),
            cr::list(&[("probe".into(), "yes".into())])
                .map(|l| json!(l.into_iter().map(|c| c.name).collect::<Vec<_>>()))
                .unwrap_or_else(err),
        );
        report.insert(
            "inspectForeign".into(),
            cr::inspect(foreign)
                .map(|_| json!("visible"))
                .unwrap_or_else(err),
        );
        report.insert(
            "removeForeign".into(),
            cr::remove(foreign)
                .map(|_| json!("removed"))
                .unwrap_or_else(err),
        );
        report.insert(
            "remove".into(),
            cr::remove(name).map(|_| json!("ok")).unwrap_or_else(err),
        );
        Ok(MachineStatus::pending(common(
            vec![],
            Some(Value::Object(report)),
        )))
    }
}

export_provider!(Probe);
