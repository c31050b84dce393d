//! The provider: metadata and the contract calls.

use capw_cloud_config::{CloudConfig, Command, WriteFile};
use capw_kubeadm::schema;
use capw_sdk::*;

const GROUP: &str = "bootstrap.cluster.x-k8s.io";
const VERSION: &str = "0.1.0";
const PKI: &str = "/etc/capw/pki";
const TOKEN: &str = "/etc/capw/token";
/// A worker's bootstrap token (`spec.joinConfiguration.discovery.bootstrapToken.token`).
const BOOTSTRAP_TOKEN: &str = "/etc/capw/bootstrap-token";
const SENTINEL_DIR: &str = "/run/cluster-api";
const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";
/// Where kubeadm init reads its configuration; capw's control-plane machines write it too, and
/// their node agent uploads its ClusterConfiguration as `kube-system/kubeadm-config`.
const KUBEADM_CONFIG: &str = capw_kubeadm::cloudinit::INIT_CONFIG;

pub struct Bootstrap;

/// The user data: files, then commands, rendered by the YAML library, so every file's content
/// comes back byte for byte.
fn render(files: Vec<WriteFile>, commands: Vec<String>) -> String {
    CloudConfig {
        write_files: files,
        runcmd: commands.into_iter().map(Command::Shell).collect(),
    }
    .render()
}

/// `spec.files[]`, checked with field paths. The API server has checked the shape (the CRD
/// schema); what is left is what this provider cannot do.
fn user_files(obj: &View) -> Result<Vec<WriteFile>, ProviderError> {
    let Some(list) = obj.get("/spec/files") else {
        return Ok(vec![]);
    };
    let list = list.as_array().ok_or_else(|| {
        ProviderError::InvalidSpec(format!("{}: spec.files must be a list", obj.name()))
    })?;
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let path = f
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| p.starts_with('/'));
            let path = path.ok_or_else(|| {
                ProviderError::InvalidSpec(format!(
                    "{}: spec.files[{i}].path must be an absolute path",
                    obj.name()
                ))
            })?;
            if f.get("contentFrom").is_some() {
                // The host hands this component only the cluster's own Secrets.
                return Err(ProviderError::InvalidSpec(format!(
                    "{}: spec.files[{i}].contentFrom is not supported by the capw bootstrap provider yet; put the file's content in spec.files[{i}].content",
                    obj.name()
                )));
            }
            if f.get("contentFormat").and_then(Value::as_str) == Some("Template") {
                return Err(ProviderError::InvalidSpec(format!(
                    "{}: spec.files[{i}].contentFormat Template is not supported by the capw bootstrap provider yet; use Raw",
                    obj.name()
                )));
            }
            let text = |k: &str| f.get(k).and_then(Value::as_str).map(String::from);
            Ok(WriteFile {
                path: path.into(),
                content: text("content").unwrap_or_default(),
                permissions: Some(text("permissions").unwrap_or_else(|| "0644".into())),
                owner: text("owner"),
                encoding: text("encoding"),
                append: f.get("append").and_then(Value::as_bool).unwrap_or(false),
            })
        })
        .collect()
}

fn commands(obj: &View, field: &str) -> Result<Vec<String>, ProviderError> {
    match obj.get(&format!("/spec/{field}")) {
        None => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.as_str().map(str::to_string).ok_or_else(|| {
                    ProviderError::InvalidSpec(format!(
                        "{}: spec.{field}[{i}] must be a string",
                        obj.name()
                    ))
                })
            })
            .collect(),
        Some(_) => Err(ProviderError::InvalidSpec(format!(
            "{}: spec.{field} must be a list of strings",
            obj.name()
        ))),
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
        let join = if control_plane {
            None
        } else {
            match Join::read(&obj)? {
                Some(j) => Some(j),
                None => {
                    return Ok(waiting(
                        "WaitingForBootstrapToken",
                        "the host fills spec.joinConfiguration.discovery.bootstrapToken once the control plane is initialized",
                    ));
                }
            }
        };
        // The Node reports the Machine's version, as a kubelet of that version would.
        let version = machine.str("/spec/version");
        let version_flag = |flag: &str| {
            if version.is_empty() {
                Ok(String::new())
            } else if version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "v.-+".contains(c))
            {
                Ok(format!(" --{flag} {version}"))
            } else {
                Err(ProviderError::InvalidSpec(format!(
                    "Machine {}: spec.version {version:?} is not a Kubernetes version (such as v1.33.0)",
                    machine.name()
                )))
            }
        };
        let mut files = vec![];
        let mut run = commands(&obj, "preKubeadmCommands")?;
        run.push(format!("mkdir -p {PKI} {SENTINEL_DIR}"));
        let (server, credentials) = if let Some(join) = &join {
            // A worker holds no cluster secret: it joins with its bootstrap token and learns
            // the CA from cluster-info, checked against the pinned hashes, as kubeadm join.
            files.push(WriteFile::new(BOOTSTRAP_TOKEN, join.token.clone(), "0600"));
            (join.endpoint.clone(), join.flags())
        } else {
            let (Some(token), Some(ca), Some(ca_key)) = (
                ctx.secret("token"),
                ctx.secret("ca.crt"),
                ctx.secret("ca.key"),
            ) else {
                return Err(wait(
                    "waiting for the host to make the cluster's CA and token",
                    2,
                ));
            };
            files.push(WriteFile::new(TOKEN, token, "0600"));
            files.push(WriteFile::new(format!("{PKI}/ca.crt"), ca, "0644"));
            files.push(WriteFile::new(format!("{PKI}/ca.key"), ca_key, "0600"));
            run.push(daemon(
                "apiserver",
                &format!(
                    "capw apiserver --listen 0.0.0.0:6443 --ca-cert {PKI}/ca.crt --ca-key {PKI}/ca.key --token-file {TOKEN}{}",
                    version_flag("kubernetes-version")?
                ),
            ));
            (
                format!("{host}:{port}"),
                format!("--ca-cert {PKI}/ca.crt --token-file {TOKEN}"),
            )
        };
        files.extend(user_files(&obj)?);
        let kubelet_version = version_flag("kubelet-version")?;
        // A control-plane node shows the API server it runs, as kubeadm's static Pod would,
        // and uploads the cluster's kubeadm configuration, as kubeadm init does.
        let mut role = String::new();
        if control_plane {
            role.push_str(" --control-plane");
            if !version.is_empty() {
                files.push(WriteFile::new(
                    KUBEADM_CONFIG,
                    kubeadm_config(&obj, &cluster, &machine, version)?,
                    "0640",
                ));
                role.push_str(&format!(" --kubeadm-config {KUBEADM_CONFIG}"));
            }
        }
        run.push(daemon(
            "node-agent",
            &format!(
                "capw node-agent --node-name {} --server https://{server} {credentials}{kubelet_version}{role}",
                machine.name()
            ),
        ));
        run.extend(commands(&obj, "postKubeadmCommands")?);
        run.push(format!("touch {SENTINEL}"));
        Ok(BootstrapStatus {
            data: Some(BootstrapData {
                format: BootstrapFormat::CloudConfig,
                value: render(files, run),
            }),
            common: common(
                vec![condition("Ready", true, "DataSecretAvailable", "")],
                None,
            ),
        })
    }
}

/// The strings of the list at `pointer` (none when it is absent).
fn strings(obj: &View, pointer: &str) -> Vec<String> {
    obj.get(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A worker's join, from `spec.joinConfiguration.discovery.bootstrapToken`, which the host
/// fills as CABPK does once the control plane is initialized.
struct Join {
    token: String,
    endpoint: String,
    hashes: Vec<String>,
    unsafe_skip: bool,
}

impl Join {
    /// `None` until the host filled the token. Everything here reaches a shell line or a file,
    /// so each value is checked against its shape, naming the field.
    fn read(obj: &View) -> Result<Option<Join>, ProviderError> {
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
            return Ok(None);
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
        let hashes = strings(obj, &format!("{AT}/bootstrapToken/caCertHashes"));
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
        Ok(Some(Join {
            token: token.to_string(),
            endpoint: endpoint.to_string(),
            hashes,
            unsafe_skip,
        }))
    }

    /// The node agent's credentials: the token and how to check the CA.
    fn flags(&self) -> String {
        let mut out = format!("--bootstrap-token-file {BOOTSTRAP_TOKEN}");
        for h in &self.hashes {
            out.push_str(&format!(" --discovery-token-ca-cert-hash {h}"));
        }
        if self.hashes.is_empty() && self.unsafe_skip {
            out.push_str(" --discovery-token-unsafe-skip-ca-verification");
        }
        out
    }
}

/// `/run/kubeadm/kubeadm.yaml` as CABPK's init user data writes it: the spec's
/// ClusterConfiguration and InitConfiguration, filled from the Cluster and the Machine.
fn kubeadm_config(
    obj: &View,
    cluster: &View,
    machine: &View,
    version: &str,
) -> Result<String, ProviderError> {
    let spec: capw_kubeadm::KubeadmConfigSpec =
        serde_json::from_value(obj.get("/spec").cloned().unwrap_or_else(|| json!({})))
            .map_err(|e| ProviderError::InvalidSpec(format!("{}: spec: {e}", obj.name())))?;
    let cidrs = |pointer: &str| strings(cluster, pointer);
    let port = cluster
        .get("/spec/controlPlaneEndpoint/port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok());
    let host = cluster.str("/spec/controlPlaneEndpoint/host");
    let facts = capw_kubeadm::ClusterFacts {
        name: cluster.name().to_string(),
        endpoint: port
            .filter(|_| !host.is_empty())
            .map(|p| (host.to_string(), p)),
        service_domain: cluster
            .str("/spec/clusterNetwork/serviceDomain")
            .to_string(),
        services: cidrs("/spec/clusterNetwork/services/cidrBlocks"),
        pods: cidrs("/spec/clusterNetwork/pods/cidrBlocks"),
    };
    capw_kubeadm::init_config_file(&spec, &facts, version)
        .map_err(|e| ProviderError::InvalidSpec(format!("{e} (Machine {})", machine.name())))
}

/// A long-running service as a shell line: runcmd entries run one after the other and must
/// return, as `kubeadm init` does once it has handed its services to systemd.
fn daemon(name: &str, command: &str) -> String {
    format!("nohup {command} >/var/log/capw-{name}.log 2>&1 &")
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
        let mut m = json!({"metadata": {"name": "m", "labels": {}}});
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

    fn rendered(cp: bool, spec: Value) -> CloudConfig {
        let spec = if cp { spec } else { joined(spec) };
        let ctx = with_secrets(
            context(config(spec))
                .machine(machine(cp))
                .cluster(cluster(true, true)),
        );
        let st = Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        let data = st.data.unwrap_or_else(|| panic!("no data"));
        assert_eq!(data.format, BootstrapFormat::CloudConfig);
        CloudConfig::parse(&data.value).unwrap_or_else(|e| panic!("{e}\n{}", data.value))
    }

    fn versioned(cp: bool, version: &str) -> Result<BootstrapStatus, ProviderError> {
        let mut m = machine(cp);
        m["spec"] = json!({"version": version});
        let mut c = cluster(true, true);
        c["spec"]["clusterNetwork"] = json!({"serviceDomain": "cluster.local",
            "pods": {"cidrBlocks": ["192.168.0.0/16"]}});
        Bootstrap::reconcile_bootstrap(with_secrets(
            context(config(joined(
                json!({"clusterConfiguration": {"apiServer": {"certSANs": ["localhost"]}}}),
            )))
            .machine(m)
            .cluster(c),
        ))
    }

    /// A control plane writes kubeadm init's configuration, presents the Machine's version at
    /// its API's /version, and uploads the ClusterConfiguration; a worker does neither.
    #[test]
    fn control_planes_present_their_version_and_kubeadm_configuration() {
        let parse = |st: Result<BootstrapStatus, ProviderError>| {
            let data = st
                .unwrap_or_else(|e| panic!("{e:?}"))
                .data
                .unwrap_or_else(|| panic!("no data"));
            CloudConfig::parse(&data.value).unwrap_or_else(|e| panic!("{e}"))
        };
        let cp = parse(versioned(true, "v1.30.4"));
        let file =
            String::from_utf8(cp.file(KUBEADM_CONFIG).unwrap_or_default()).unwrap_or_default();
        for line in [
            "kind: ClusterConfiguration",
            "kind: InitConfiguration",
            "clusterName: c",
            "controlPlaneEndpoint: 10.0.0.1:6443",
            "kubernetesVersion: v1.30.4",
            "  podSubnet: 192.168.0.0/16",
            "  - localhost",
        ] {
            assert!(file.lines().any(|l| l == line), "{line}: {file}");
        }
        let all: Vec<String> = cp.argvs().iter().map(|a| a.join(" ")).collect();
        assert!(
            all.iter().any(|a| a.contains("capw apiserver") && a.contains("--kubernetes-version v1.30.4")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|a| a.contains("capw node-agent")
                && a.contains(&format!("--kubeadm-config {KUBEADM_CONFIG}"))
                && a.contains("--kubelet-version v1.30.4")),
            "{all:?}"
        );
        let worker = parse(versioned(false, "v1.30.4"));
        assert_eq!(worker.file(KUBEADM_CONFIG), None);
        let all: Vec<String> = worker.argvs().iter().map(|a| a.join(" ")).collect();
        assert!(
            !all.iter().any(|a| a.contains("--kubeadm-config")),
            "{all:?}"
        );
        // A version kubeadm has no configuration API for is refused, naming the Machine.
        match versioned(true, "v1.20.0") {
            Err(ProviderError::InvalidSpec(m)) => {
                assert!(m.contains("spec.version") && m.contains("Machine m"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn control_planes_get_the_ca_key_and_the_apiserver_and_workers_do_not() {
        let cp = rendered(true, json!({}));
        assert_eq!(cp.file("/etc/capw/pki/ca.key"), Some(b"KEY".to_vec()));
        assert!(
            cp.argvs()
                .iter()
                .any(|a| a.join(" ").contains("capw apiserver"))
        );
        // The control-plane node agent posts the API server's mirror Pod; a worker's does not.
        let agent = |cc: &CloudConfig| {
            cc.argvs()
                .iter()
                .map(|a| a.join(" "))
                .find(|a| a.contains("capw node-agent"))
                .unwrap_or_default()
        };
        assert!(agent(&cp).contains("--control-plane"), "{}", agent(&cp));
        let worker = rendered(false, json!({}));
        assert!(
            !agent(&worker).contains("--control-plane"),
            "{}",
            agent(&worker)
        );
        // A worker holds no cluster secret: its bootstrap token, and the CA's pin.
        assert_eq!(worker.file("/etc/capw/pki/ca.key"), None);
        assert_eq!(worker.file("/etc/capw/pki/ca.crt"), None);
        assert_eq!(worker.file(TOKEN), None);
        assert_eq!(
            worker.file(BOOTSTRAP_TOKEN),
            Some(b"abcdef.0123456789abcdef".to_vec())
        );
        assert!(
            agent(&worker).contains(&format!(
                "--bootstrap-token-file {BOOTSTRAP_TOKEN} --discovery-token-ca-cert-hash {PIN}"
            )),
            "{}",
            agent(&worker)
        );
        assert!(
            agent(&cp).contains("--token-file /etc/capw/token"),
            "{}",
            agent(&cp)
        );
        assert!(
            !worker
                .argvs()
                .iter()
                .any(|a| a.join(" ").contains("capw apiserver"))
        );
        for cc in [cp, worker] {
            let all: Vec<String> = cc.argvs().iter().map(|a| a.join(" ")).collect();
            assert!(
                all.iter()
                    .any(|a| a.contains("--server https://10.0.0.1:6443")),
                "{all:?}"
            );
            assert!(
                all.last().is_some_and(|a| a.contains(SENTINEL)),
                "the sentinel comes last: {all:?}"
            );
        }
    }

    #[test]
    fn user_files_and_commands_come_back_byte_for_byte_in_order() {
        let cc = rendered(
            false,
            json!({
                "files": [{"path": "/etc/x", "content": "  leading: spaces\n\tand a tab\n"}],
                "preKubeadmCommands": ["echo pre"],
                "postKubeadmCommands": ["echo post"],
            }),
        );
        assert_eq!(
            cc.file("/etc/x"),
            Some(b"  leading: spaces\n\tand a tab\n".to_vec())
        );
        let all: Vec<String> = cc.argvs().iter().map(|a| a.join(" ")).collect();
        let pos = |needle: &str| all.iter().position(|a| a.contains(needle));
        assert!(pos("echo pre") < pos("node-agent"), "{all:?}");
        assert!(pos("node-agent") < pos("echo post"), "{all:?}");
        assert!(pos("echo post") < pos(SENTINEL), "{all:?}");
    }

    #[test]
    fn the_node_reports_the_machines_version() {
        let run = |version: &str| {
            let mut m = machine(false);
            m["spec"] = json!({"version": version});
            let ctx = with_secrets(
                context(config(joined(json!({}))))
                    .machine(m)
                    .cluster(cluster(true, true)),
            );
            Bootstrap::reconcile_bootstrap(ctx)
        };
        let st = run("v1.34.0").unwrap_or_else(|e| panic!("{e:?}"));
        let data = st.data.unwrap_or_else(|| panic!("no data"));
        let cc = CloudConfig::parse(&data.value).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            cc.argvs()
                .iter()
                .any(|a| a.join(" ").contains("--kubelet-version v1.34.0")),
            "{}",
            data.value
        );
        match run("v1.34; rm -rf /") {
            Err(ProviderError::InvalidSpec(m)) => assert!(m.contains("spec.version"), "{m}"),
            other => panic!("{other:?}"),
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
                json!({"files": [{"path": "/x", "contentFrom": {"secret": {"name": "s", "key": "k"}}}]}),
                "spec.files[0].contentFrom",
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
        let cc = rendered(false, json!({}));
        assert!(
            cc.argvs()
                .iter()
                .any(|a| a.join(" ").contains("--discovery-token-ca-cert-hash"))
        );
        let ctx = with_secrets(
            context(config(skip))
                .machine(machine(false))
                .cluster(cluster(true, true)),
        );
        let st = Bootstrap::reconcile_bootstrap(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        let data = st.data.unwrap_or_else(|| panic!("no data")).value;
        assert!(
            data.contains("--discovery-token-unsafe-skip-ca-verification"),
            "{data}"
        );
    }
}
