//! The provider: metadata and the contract calls.
//!
//! The user data is CABPK's, byte for byte (`capw_kubeadm::render`): the kubeadm PKI at
//! `certificatesDir`, the user's files, the kubeadm configuration file, then
//! `preKubeadmCommands`, `kubeadm init` or `kubeadm join`, `postKubeadmCommands` and the
//! sentinel. A real kubeadm node image builds a real cluster from it; the capw node image runs
//! capw's `kubeadm` on the same files.

use capw_kubeadm::{Bootstrap as Role, Certificates, KeyPair, schema};
use capw_sdk::*;

const GROUP: &str = "bootstrap.cluster.x-k8s.io";
const VERSION: &str = "0.1.0";

pub struct Bootstrap;

/// `spec.files[]`: what this provider cannot write yet is refused, naming the field. The API
/// server has checked the shape (the CRD schema).
///
/// `contentFrom` is resolved by the host, which reads the Secret and hands its key over as
/// `files/<i>` (see [`resolved_files`]).
fn check_files(obj: &View) -> Result<(), ProviderError> {
    let Some(list) = obj.get("/spec/files") else {
        return Ok(());
    };
    let list = list.as_array().ok_or_else(|| {
        ProviderError::InvalidSpec(format!("{}: spec.files must be a list", obj.name()))
    })?;
    for (i, f) in list.iter().enumerate() {
        if !f
            .get("path")
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with('/'))
        {
            return Err(ProviderError::InvalidSpec(format!(
                "{}: spec.files[{i}].path must be an absolute path",
                obj.name()
            )));
        }
        if f.get("contentFormat").and_then(Value::as_str) == Some("Template") {
            return Err(ProviderError::InvalidSpec(format!(
                "{}: spec.files[{i}].contentFormat Template is not supported by the capw bootstrap provider yet; use Raw",
                obj.name()
            )));
        }
    }
    Ok(())
}

/// The spec's files with each `contentFrom` replaced by the content the host read, as CABPK's
/// `resolveFiles`; `Err` with the host's message when a Secret or key cannot be used.
fn resolved_files(
    ctx: &Context,
    obj: &View,
    spec: &capw_kubeadm::KubeadmConfigSpec,
) -> Result<Result<Vec<capw_kubeadm::spec::File>, String>, ProviderError> {
    let mut files = spec.files.clone();
    for (i, f) in files.iter_mut().enumerate() {
        if obj.get(&format!("/spec/files/{i}/contentFrom")).is_none() {
            continue;
        }
        if let Some(problem) = ctx.secret(&format!("files/{i}.error")) {
            return Ok(Err(problem.to_string()));
        }
        f.content = ctx
            .secret(&format!("files/{i}"))
            .ok_or_else(|| {
                wait(
                    format!("waiting for the host to read spec.files[{i}].contentFrom"),
                    5,
                )
            })?
            .to_string();
    }
    Ok(Ok(files))
}

/// The spec's command lists, checked to be lists of strings before the typed parse reports
/// something vaguer.
fn check_commands(obj: &View, field: &str) -> Result<(), ProviderError> {
    match obj.get(&format!("/spec/{field}")) {
        None => Ok(()),
        Some(Value::Array(a)) => match a.iter().position(|c| !c.is_string()) {
            None => Ok(()),
            Some(i) => Err(ProviderError::InvalidSpec(format!(
                "{}: spec.{field}[{i}] must be a string",
                obj.name()
            ))),
        },
        Some(_) => Err(ProviderError::InvalidSpec(format!(
            "{}: spec.{field} must be a list of strings",
            obj.name()
        ))),
    }
}

/// The kubeadm PKI of a control-plane Machine, from the Secrets the host hands over.
fn certificates(ctx: &Context) -> Option<Certificates> {
    let pair = |cert: &str, key: &str| {
        Some(KeyPair {
            cert: ctx.secret(cert)?.to_string(),
            key: ctx.secret(key)?.to_string(),
        })
    };
    let cluster_ca = pair("ca.crt", "ca.key")?;
    Some(Certificates {
        cluster_ca: Some(cluster_ca),
        etcd_ca: pair("etcd.crt", "etcd.key"),
        front_proxy_ca: pair("proxy.crt", "proxy.key"),
        service_account: pair("sa.pub", "sa.key"),
        apiserver_etcd_client: None,
    })
}

/// What the user data needs from the Cluster.
fn cluster_facts(cluster: &View) -> capw_kubeadm::ClusterFacts {
    let port = cluster
        .get("/spec/controlPlaneEndpoint/port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok());
    let host = cluster.str("/spec/controlPlaneEndpoint/host");
    capw_kubeadm::ClusterFacts {
        name: cluster.name().to_string(),
        endpoint: port
            .filter(|_| !host.is_empty())
            .map(|p| (host.to_string(), p)),
        service_domain: cluster
            .str("/spec/clusterNetwork/serviceDomain")
            .to_string(),
        services: cluster.strings("/spec/clusterNetwork/services/cidrBlocks"),
        pods: cluster.strings("/spec/clusterNetwork/pods/cidrBlocks"),
    }
}

impl Provider for Bootstrap {
    fn metadata() -> Metadata {
        // Upstream's columns, in upstream's order.
        let config_columns = vec![
            column(
                "Cluster",
                "string",
                ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                0,
            ),
            column(
                "Paused",
                "string",
                ".status.conditions[?(@.type==\"Paused\")].status",
                10,
            ),
            column(
                "Data secret created",
                "boolean",
                ".status.initialization.dataSecretCreated",
                0,
            ),
            column("Age", "date", ".metadata.creationTimestamp", 0),
        ];
        let template_columns = vec![
            column(
                "ClusterClass",
                "string",
                ".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name",
                0,
            ),
            column(
                "Cluster",
                "string",
                ".metadata.ownerReferences[?(@.kind==\"Cluster\")].name",
                0,
            ),
            column("Age", "date", ".metadata.creationTimestamp", 0),
        ];
        Metadata {
            name: "bootstrap".into(),
            version: VERSION.into(),
            provider_type: ProviderType::Bootstrap,
            contract_version: "v1beta2".into(),
            kinds: vec![
                kind(GROUP, "KubeadmConfig", KindRole::BootstrapConfig),
                kind(
                    GROUP,
                    "KubeadmConfigTemplate",
                    KindRole::BootstrapConfigTemplate("KubeadmConfig".into()),
                ),
            ],
            crds: vec![
                CrdDef {
                    columns: config_columns,
                    spec: schema::kubeadm_config_spec(),
                    ..CrdDef::new(GROUP, "KubeadmConfig", "kubeadmconfigs")
                }
                .render(),
                CrdDef {
                    columns: template_columns,
                    spec: schema::kubeadm_config_template_spec(),
                    status: false,
                    ..CrdDef::new(GROUP, "KubeadmConfigTemplate", "kubeadmconfigtemplates")
                }
                .render(),
            ],
        }
    }

    fn reconcile_bootstrap(ctx: Context) -> Result<BootstrapStatus, ProviderError> {
        let obj = ctx.view()?;
        // Data once made is never made again, as CABPK: the Machine may have booted from it,
        // and a control plane initialized since would now ask for a join instead.
        if obj
            .get("/status/initialization/dataSecretCreated")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Ok(BootstrapStatus {
                data: None,
                common: common(
                    vec![condition("Ready", true, "DataSecretAvailable", "")],
                    None,
                ),
            });
        }
        let machine = ctx
            .machine_view()?
            .ok_or_else(|| wait(format!("waiting for a Machine to own {}", obj.name()), 5))?;
        let cluster = ctx
            .cluster_view()?
            .ok_or_else(|| wait("waiting for the Cluster", 5))?;
        let control_plane = machine
            .get("/metadata/labels/cluster.x-k8s.io~1control-plane")
            .is_some();
        let host = cluster.str("/spec/controlPlaneEndpoint/host");
        let port = cluster
            .get("/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if host.is_empty() || port == 0 {
            return Ok(waiting(
                "WaitingForControlPlaneEndpoint",
                "the Cluster has no controlPlaneEndpoint yet",
            ));
        }
        let initialized = cluster
            .get("/status/initialization/controlPlaneInitialized")
            .and_then(Value::as_bool)
            == Some(true);
        if !control_plane && !initialized {
            return Ok(waiting(
                "WaitingForControlPlaneInitialized",
                "workers join once the control plane is initialized",
            ));
        }
        if obj.str("/spec/format") == "ignition" {
            return Err(ProviderError::InvalidSpec(format!(
                "{}: spec.format ignition is not supported by the capw bootstrap provider; remove spec.format or set it to cloud-config",
                obj.name()
            )));
        }
        let role = match (control_plane, initialized) {
            // CABPK's init lock admits one `kubeadm init`; KubeadmControlPlane creates one
            // Machine until the control plane is initialized.
            (true, false) => Role::Init,
            (true, true) => Role::ControlPlaneJoin,
            (false, _) => Role::WorkerJoin,
        };
        if role != Role::Init && !discovery_filled(&obj)? {
            return Ok(waiting(
                "WaitingForBootstrapToken",
                "the host fills spec.joinConfiguration.discovery.bootstrapToken once the control plane is initialized",
            ));
        }
        check_files(&obj)?;
        check_commands(&obj, "preKubeadmCommands")?;
        check_commands(&obj, "postKubeadmCommands")?;
        let spec: capw_kubeadm::KubeadmConfigSpec =
            serde_json::from_value(obj.get("/spec").cloned().unwrap_or_else(|| json!({})))
                .map_err(|e| ProviderError::InvalidSpec(format!("{}: spec: {e}", obj.name())))?;
        // A worker holds no cluster secret: it joins with its bootstrap token and learns the
        // CA from cluster-info, checked against the pinned hashes.
        let certs = if role == Role::WorkerJoin {
            Certificates::default()
        } else {
            certificates(&ctx)
                .ok_or_else(|| wait("waiting for the host to make the cluster's certificates", 2))?
        };
        let files = match resolved_files(&ctx, &obj, &spec)? {
            Ok(files) => files,
            Err(problem) => return Ok(waiting("FileContentUnavailable", &problem)),
        };
        let version = machine.str("/spec/version");
        let data = capw_kubeadm::render(
            &spec,
            &cluster_facts(&cluster),
            version,
            role,
            &certs,
            &files,
        )
        .map_err(|e| ProviderError::InvalidSpec(format!("{e} (Machine {})", machine.name())))?;
        Ok(BootstrapStatus {
            data: Some(BootstrapData {
                format: BootstrapFormat::CloudConfig,
                value: data,
            }),
            common: common(
                vec![condition("Ready", true, "DataSecretAvailable", "")],
                None,
            ),
        })
    }
}

/// Whether a join's `spec.joinConfiguration.discovery.bootstrapToken` is filled, which the host
/// does as CABPK once the control plane is initialized. Each value is checked against its
/// shape, naming the field: the node's kubeadm reads them, and a wrong one is better refused
/// here than found in a node's log.
fn discovery_filled(obj: &View) -> Result<bool, ProviderError> {
    const AT: &str = "/spec/joinConfiguration/discovery";
    let invalid = |field: &str, what: &str| {
        ProviderError::InvalidSpec(format!(
            "{}: spec.joinConfiguration.discovery.{field} {what}",
            obj.name()
        ))
    };
    if !obj.str(&format!("{AT}/file/kubeConfigPath")).is_empty() {
        return Err(invalid(
            "file",
            "is not supported by the capw bootstrap provider yet; remove it so the host fills bootstrapToken",
        ));
    }
    let token = obj.str(&format!("{AT}/bootstrapToken/token"));
    let endpoint = obj.str(&format!("{AT}/bootstrapToken/apiServerEndpoint"));
    if token.is_empty() || endpoint.is_empty() {
        return Ok(false);
    }
    let token_ok = token.split_once('.').is_some_and(|(id, secret)| {
        let ok = |s: &str, n| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        ok(id, 6) && ok(secret, 16)
    });
    if !token_ok {
        return Err(invalid(
            "bootstrapToken.token",
            "must be a bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}",
        ));
    }
    if !endpoint
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
    {
        return Err(invalid(
            "bootstrapToken.apiServerEndpoint",
            "must be host:port",
        ));
    }
    let hashes = obj.strings(&format!("{AT}/bootstrapToken/caCertHashes"));
    for (i, h) in hashes.iter().enumerate() {
        let hex = h.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(
                &format!("bootstrapToken.caCertHashes[{i}]"),
                "must be sha256:<64 hex digits>",
            ));
        }
    }
    let unsafe_skip = obj
        .get(&format!("{AT}/bootstrapToken/unsafeSkipCAVerification"))
        .and_then(Value::as_bool)
        == Some(true);
    if hashes.is_empty() && !unsafe_skip {
        return Err(invalid(
            "bootstrapToken.caCertHashes",
            "is empty and unsafeSkipCAVerification is not true: the node could not check the cluster's CA",
        ));
    }
    Ok(true)
}

fn waiting(reason: &str, message: &str) -> BootstrapStatus {
    let mut c = common(vec![condition("Ready", false, reason, message)], None);
    // The Cluster getting its endpoint or an initialized control plane calls again; this is
    // only a fallback.
    c.requeue_after_seconds = Some(30);
    BootstrapStatus {
        data: None,
        common: c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_cloud_config::CloudConfig;
    use capw_sdk::testing::{ContextBuilder, condition_of, context};

    fn config(spec: Value) -> Value {
        json!({"metadata": {"name": "m", "namespace": "ns"}, "spec": spec})
    }

    const PIN: &str = "sha256:e1570500003bfe99b08eb09e4fb3462ec5a0903be3a33e71c176fa81bde1b1bb";

    /// `spec` with the discovery the host fills for a joining worker.
    fn joined(mut spec: Value) -> Value {
        spec["joinConfiguration"]["discovery"]["bootstrapToken"] = json!({
            "token": "abcdef.0123456789abcdef",
            "apiServerEndpoint": "10.0.0.1:6443",
            "caCertHashes": [PIN],
        });
        spec
    }

    fn machine(control_plane: bool) -> Value {
        let mut m =
            json!({"metadata": {"name": "m", "labels": {}}, "spec": {"version": "v1.30.4"}});
        if control_plane {
            m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
        }
        m
    }

    fn cluster(endpoint: bool, initialized: bool) -> Value {
        let mut c = json!({"metadata": {"name": "c"}, "spec": {},
            "status": {"initialization": {"controlPlaneInitialized": initialized}}});
        if endpoint {
            c["spec"]["controlPlaneEndpoint"] = json!({"host": "10.0.0.1", "port": 6443});
        }
        c
    }

    fn with_secrets(ctx: Context) -> Context {
        ctx.secret("token", "TOKEN")
            .secret("ca.crt", "CA")
            .secret("ca.key", "KEY")
            .secret("etcd.crt", "ETCD")
            .secret("etcd.key", "ETCDKEY")
            .secret("proxy.crt", "PROXY")
            .secret("proxy.key", "PROXYKEY")
            .secret("sa.pub", "SAPUB")
            .secret("sa.key", "SAKEY")
    }

    /// What the config waits for, in order, before it renders anything.
    #[test]
    fn waiting_table() {
        let cases = [
            (
                "no endpoint",
                true,
                cluster(false, false),
                "WaitingForControlPlaneEndpoint",
            ),
            (
                "worker before init",
                false,
                cluster(true, false),
                "WaitingForControlPlaneInitialized",
            ),
            (
                "worker before the host filled its token",
                false,
                cluster(true, true),
                "WaitingForBootstrapToken",
            ),
        ];
        for (name, cp, cl, reason) in cases {
            let ctx = with_secrets(context(config(json!({}))).machine(machine(cp)).cluster(cl));
            let st =
                Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert!(st.data.is_none(), "{name}");
            assert_eq!(
                condition_of(&st.common.conditions, "Ready"),
                Some(("False".into(), reason.into())),
                "{name}"
            );
        }
        // No owner Machine, no Cluster, or no CA yet: asked again later.
        for ctx in [
            context(config(json!({}))),
            context(config(json!({}))).machine(machine(true)),
            context(config(json!({})))
                .machine(machine(true))
                .cluster(cluster(true, false)),
        ] {
            assert!(matches!(
                Bootstrap::reconcile_bootstrap(ctx),
                Err(ProviderError::Transient(_))
            ));
        }
    }

    /// The user data for a control-plane (initialized or not) or worker Machine at `version`.
    fn data(cp: bool, initialized: bool, version: &str, spec: Value) -> String {
        let spec = if cp && !initialized {
            spec
        } else {
            joined(spec)
        };
        let mut m = machine(cp);
        m["spec"] = json!({"version": version});
        let mut c = cluster(true, initialized);
        c["spec"]["clusterNetwork"] = json!({"serviceDomain": "cluster.local",
            "pods": {"cidrBlocks": ["192.168.0.0/16"]}});
        let ctx = with_secrets(context(config(spec)).machine(m).cluster(c));
        let st = Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        let data = st.data.unwrap_or_else(|| panic!("no data"));
        assert_eq!(data.format, BootstrapFormat::CloudConfig);
        data.value
    }

    fn parsed(data: &str) -> CloudConfig {
        CloudConfig::parse(data).unwrap_or_else(|e| panic!("{e}\n{data}"))
    }

    fn file(cc: &CloudConfig, path: &str) -> String {
        String::from_utf8(cc.file(path).unwrap_or_default()).unwrap_or_default()
    }

    const INIT: &str = "/run/kubeadm/kubeadm.yaml";
    const JOIN: &str = "/run/kubeadm/kubeadm-join-config.yaml";
    const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

    /// The first control-plane Machine runs `kubeadm init` with the whole PKI at
    /// certificatesDir and the configuration filled from the Cluster and the Machine.
    #[test]
    fn the_first_control_plane_runs_kubeadm_init_as_cabpk_writes_it() {
        let spec = json!({"clusterConfiguration": {"apiServer": {"certSANs": ["localhost"]}}});
        let raw = data(true, false, "v1.30.4", spec);
        assert!(
            raw.starts_with("## template: jinja\n#cloud-config\n"),
            "{raw}"
        );
        let cc = parsed(&raw);
        for (path, content) in [
            ("/etc/kubernetes/pki/ca.crt", "CA"),
            ("/etc/kubernetes/pki/ca.key", "KEY"),
            ("/etc/kubernetes/pki/etcd/ca.crt", "ETCD"),
            ("/etc/kubernetes/pki/front-proxy-ca.key", "PROXYKEY"),
            ("/etc/kubernetes/pki/sa.pub", "SAPUB"),
        ] {
            // A literal block ends its content with one newline, as upstream's template does.
            assert_eq!(file(&cc, path), format!("{content}\n"), "{path}");
        }
        let kubeadm = file(&cc, INIT);
        for line in [
            "kind: ClusterConfiguration",
            "kind: InitConfiguration",
            "apiVersion: kubeadm.k8s.io/v1beta3",
            "clusterName: c",
            "controlPlaneEndpoint: 10.0.0.1:6443",
            "kubernetesVersion: v1.30.4",
            "  podSubnet: 192.168.0.0/16",
            "  - localhost",
        ] {
            assert!(kubeadm.lines().any(|l| l == line), "{line}: {kubeadm}");
        }
        assert!(
            raw.contains(&format!(
                "  - 'kubeadm init --config {INIT}  && echo success > {SENTINEL}'"
            )),
            "{raw}"
        );
        // v1.31 and later get kubeadm's v1beta4.
        let newer = file(&parsed(&data(true, false, "v1.33.0", json!({}))), INIT);
        assert!(
            newer.contains("apiVersion: kubeadm.k8s.io/v1beta4"),
            "{newer}"
        );
    }

    #[test]
    fn later_control_planes_join_with_the_pki_and_workers_with_a_token_alone() {
        let cp = parsed(&data(true, true, "v1.30.4", json!({})));
        assert_eq!(file(&cp, "/etc/kubernetes/pki/ca.key"), "KEY\n");
        let join = file(&cp, JOIN);
        assert!(join.contains("controlPlane:"), "{join}");
        assert!(join.contains("token: abcdef.0123456789abcdef"), "{join}");
        let worker_raw = data(false, true, "v1.30.4", json!({}));
        let worker = parsed(&worker_raw);
        // A worker holds no cluster secret: its bootstrap token, and the CA's pin.
        assert!(
            worker
                .write_files
                .iter()
                .all(|f| !f.path.starts_with("/etc/kubernetes/pki")),
            "{worker_raw}"
        );
        assert!(!worker_raw.contains("KEY"), "{worker_raw}");
        let join = file(&worker, JOIN);
        for needle in [
            "token: abcdef.0123456789abcdef",
            "apiServerEndpoint: 10.0.0.1:6443",
            PIN,
            "key: node.cluster.x-k8s.io/uninitialized",
        ] {
            assert!(join.contains(needle), "{needle}: {join}");
        }
        assert!(!join.contains("controlPlane:"), "{join}");
        assert!(
            worker_raw.contains(&format!(
                "  - kubeadm join --config {JOIN}  && echo success > {SENTINEL}"
            )),
            "{worker_raw}"
        );
    }

    #[test]
    fn user_files_and_commands_come_back_byte_for_byte_in_order() {
        let raw = data(
            false,
            true,
            "v1.30.4",
            json!({
                "files": [{"path": "/etc/x", "content": "key: value\n  nested: \"quoted # not a comment\"\n\tand a tab\n"}],
                "preKubeadmCommands": ["echo pre"],
                "postKubeadmCommands": ["echo post"],
            }),
        );
        let cc = parsed(&raw);
        assert_eq!(
            file(&cc, "/etc/x"),
            "key: value\n  nested: \"quoted # not a comment\"\n\tand a tab\n"
        );
        let all: Vec<String> = cc.argvs().iter().map(|a| a.join(" ")).collect();
        let pos = |needle: &str| all.iter().position(|a| a.contains(needle));
        assert!(pos("echo pre") < pos("kubeadm join"), "{all:?}");
        assert!(pos("kubeadm join") < pos("echo post"), "{all:?}");
    }

    /// `contentFrom` is written with the content the host read from the Secret, in its
    /// place among the files; until the host hands it over, the config waits.
    #[test]
    fn files_from_secrets_are_written_with_the_content_the_host_read() {
        let spec = joined(json!({"files": [
            {"path": "/etc/a", "content": "first\n"},
            {"path": "/etc/b", "contentFrom": {"secret": {"name": "s", "key": "k"}}, "permissions": "0600"},
        ]}));
        let run = |ctx: Context| {
            Bootstrap::reconcile_bootstrap(
                with_secrets(ctx)
                    .machine(machine(false))
                    .cluster(cluster(true, true)),
            )
        };
        assert!(matches!(
            run(context(config(spec.clone()))),
            Err(ProviderError::Transient(_))
        ));
        let missing = run(context(config(spec.clone())).secret(
            "files/1.error",
            "spec.files[1].contentFrom.secret: Secret ns/s not found; create it",
        ))
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(missing.data.is_none());
        assert_eq!(
            condition_of(&missing.common.conditions, "Ready"),
            Some(("False".into(), "FileContentUnavailable".into()))
        );
        let st = run(context(config(spec)).secret("files/1", "from the secret\n"))
            .unwrap_or_else(|e| panic!("{e:?}"));
        let raw = st.data.unwrap_or_else(|| panic!("no data")).value;
        let cc = parsed(&raw);
        assert_eq!(file(&cc, "/etc/b"), "from the secret\n");
        let order: Vec<&str> = cc.write_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(order[..2], ["/etc/a", "/etc/b"], "{raw}");
        assert!(raw.contains("permissions: '0600'"), "{raw}");
    }

    #[test]
    fn data_once_made_is_not_made_again() {
        let mut cfg = config(json!({}));
        cfg["status"] = json!({"initialization": {"dataSecretCreated": true}});
        let ctx = with_secrets(
            context(cfg)
                .machine(machine(true))
                .cluster(cluster(true, true)),
        );
        let st = Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(st.data.is_none());
        assert_eq!(st.common.requeue_after_seconds, None);
        assert_eq!(
            condition_of(&st.common.conditions, "Ready"),
            Some(("True".into(), "DataSecretAvailable".into()))
        );
    }

    #[test]
    fn a_machine_without_a_kubeadm_version_is_refused_naming_it() {
        for version in ["", "v1.20.0", "v1.34; rm -rf /"] {
            let mut m = machine(false);
            m["spec"] = json!({"version": version});
            let ctx = with_secrets(
                context(config(joined(json!({}))))
                    .machine(m)
                    .cluster(cluster(true, true)),
            );
            match Bootstrap::reconcile_bootstrap(ctx) {
                Err(ProviderError::InvalidSpec(msg)) => {
                    assert!(
                        msg.contains("spec.version") && msg.contains("Machine m"),
                        "{msg}"
                    )
                }
                other => panic!("{version}: {other:?}"),
            }
        }
    }

    #[test]
    fn invalid_specs_name_the_field() {
        for (spec, field) in [
            (json!({"files": {}}), "spec.files must be a list"),
            (
                json!({"files": [{"path": "relative"}]}),
                "spec.files[0].path",
            ),
            (
                json!({"preKubeadmCommands": "echo"}),
                "spec.preKubeadmCommands must be a list",
            ),
            (
                json!({"postKubeadmCommands": [1]}),
                "spec.postKubeadmCommands[0]",
            ),
            (
                json!({"files": [{"path": "/x", "content": "x", "contentFormat": "Template"}]}),
                "spec.files[0].contentFormat Template",
            ),
            (json!({"format": "ignition"}), "spec.format ignition"),
        ] {
            let ctx = with_secrets(
                context(config(joined(spec)))
                    .machine(machine(false))
                    .cluster(cluster(true, true)),
            );
            match Bootstrap::reconcile_bootstrap(ctx) {
                Err(ProviderError::InvalidSpec(m)) => assert!(m.contains(field), "{field}: {m}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    /// What a worker's join reads from the spec reaches a shell line: each value is checked
    /// against its shape, naming the field; no hash needs unsafeSkipCAVerification.
    #[test]
    fn join_discovery_is_checked_naming_the_field() {
        let bad = |patch: Value| {
            let mut spec = joined(json!({}));
            let bt = &mut spec["joinConfiguration"]["discovery"]["bootstrapToken"];
            for (k, v) in patch.as_object().into_iter().flatten() {
                bt[k] = v.clone();
            }
            spec
        };
        for (spec, field) in [
            (
                bad(json!({"token": "abcdef.0123; rm -rf /"})),
                "bootstrapToken.token",
            ),
            (
                bad(json!({"apiServerEndpoint": "10.0.0.1:6443; rm -rf /"})),
                "bootstrapToken.apiServerEndpoint",
            ),
            (
                bad(json!({"caCertHashes": ["md5:00"]})),
                "bootstrapToken.caCertHashes[0]",
            ),
            (
                bad(json!({"caCertHashes": []})),
                "bootstrapToken.caCertHashes is empty",
            ),
            (
                json!({"joinConfiguration": {"discovery": {"file": {"kubeConfigPath": "/k"}}}}),
                "discovery.file",
            ),
        ] {
            let ctx = with_secrets(
                context(config(spec))
                    .machine(machine(false))
                    .cluster(cluster(true, true)),
            );
            match Bootstrap::reconcile_bootstrap(ctx) {
                Err(ProviderError::InvalidSpec(m)) => assert!(m.contains(field), "{field}: {m}"),
                other => panic!("{field}: {other:?}"),
            }
        }
        let skip = bad(json!({"caCertHashes": [], "unsafeSkipCAVerification": true}));
        let ctx = with_secrets(
            context(config(skip))
                .machine(machine(false))
                .cluster(cluster(true, true)),
        );
        let st = Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        let data = st.data.unwrap_or_else(|| panic!("no data")).value;
        assert!(data.contains("unsafeSkipCAVerification: true"), "{data}");
    }
}
