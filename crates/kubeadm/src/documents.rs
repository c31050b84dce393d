//! The kubeadm configuration documents (`ClusterConfiguration`, `InitConfiguration`,
//! `JoinConfiguration`) in kubeadm's v1beta3 or v1beta4 API, as CABPK marshals them from a
//! v1beta2 `KubeadmConfigSpec` (`bootstrap/kubeadm/pkg/types`).
//!
//! Each document is built as the JSON Go would write for kubeadm's own types, following their
//! `omitempty` tags field by field (a struct without a pointer is always written, `taints` is
//! written even when unset), then turned into YAML the way `sigs.k8s.io/yaml` does
//! ([`crate::goyaml`]).

use crate::goyaml;
use crate::spec::*;
use crate::version::KubeadmApi;
use serde_json::{Map, Value, json};

/// What CABPK takes from the Cluster and the Machine rather than from the spec
/// (`AdditionalData`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterData {
    /// The Cluster's name.
    pub cluster_name: Option<String>,
    /// `clusterNetwork.serviceDomain`.
    pub dns_domain: Option<String>,
    /// `clusterNetwork.services.cidrBlocks`, joined with `,`.
    pub service_subnet: Option<String>,
    /// `clusterNetwork.pods.cidrBlocks`, joined with `,`.
    pub pod_subnet: Option<String>,
    /// The Machine's `spec.version`.
    pub kubernetes_version: Option<String>,
    /// `initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds`, which v1beta3
    /// keeps in the ClusterConfiguration.
    pub control_plane_component_health_check_seconds: Option<i32>,
}

/// A Go `time.Duration` as `String()` writes it for whole seconds: `50s`, `5m0s`, `1h0m0s`.
pub fn go_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.unsigned_abs();
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

fn header(api: KubeadmApi, kind: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!(api.api_version()));
    m.insert("kind".into(), json!(kind));
    m
}

/// `omitempty` for a string.
fn put_str(m: &mut Map<String, Value>, key: &str, v: &str) {
    if !v.is_empty() {
        m.insert(key.into(), json!(v));
    }
}

/// `omitempty` for a list of strings.
fn put_list(m: &mut Map<String, Value>, key: &str, v: &[String]) {
    if !v.is_empty() {
        m.insert(key.into(), json!(v));
    }
}

/// `extraArgs`/`kubeletExtraArgs`: a `{name, value}` list in v1beta4, a map in v1beta3, where
/// a later entry of the same name wins as upstream's conversion does.
fn put_args(m: &mut Map<String, Value>, key: &str, args: &[Arg], api: KubeadmApi) {
    if args.is_empty() {
        return;
    }
    let v = match api {
        KubeadmApi::V1Beta4 => args
            .iter()
            .map(|a| json!({"name": a.name, "value": a.value}))
            .collect(),
        KubeadmApi::V1Beta3 => Value::Object(
            args.iter()
                .map(|a| (a.name.clone(), json!(a.value)))
                .collect(),
        ),
    };
    m.insert(key.into(), v);
}

/// `extraEnvs` exists only in v1beta4.
fn put_envs(m: &mut Map<String, Value>, envs: &Option<Vec<Value>>, api: KubeadmApi) {
    if api == KubeadmApi::V1Beta4
        && let Some(e) = envs.as_ref().filter(|e| !e.is_empty())
    {
        m.insert("extraEnvs".into(), json!(e));
    }
}

fn component(c: &ControlPlaneComponent, api: KubeadmApi) -> Map<String, Value> {
    let mut m = Map::new();
    put_args(&mut m, "extraArgs", &c.extra_args, api);
    if !c.extra_volumes.is_empty() {
        let volumes = c.extra_volumes.iter().map(|v| {
            // name, hostPath and mountPath have no omitempty; readOnly is a plain bool there.
            let mut o = Map::new();
            o.insert("name".into(), json!(v.name));
            o.insert("hostPath".into(), json!(v.host_path));
            o.insert("mountPath".into(), json!(v.mount_path));
            if v.read_only == Some(true) {
                o.insert("readOnly".into(), json!(true));
            }
            put_str(&mut o, "pathType", &v.path_type);
            Value::Object(o)
        });
        m.insert("extraVolumes".into(), Value::Array(volumes.collect()));
    }
    put_envs(&mut m, &c.extra_envs, api);
    m
}

fn etcd(e: &Etcd, api: KubeadmApi) -> Value {
    let mut m = Map::new();
    if let Some(local) = e.local.as_ref().filter(|l| **l != LocalEtcd::default()) {
        let mut l = Map::new();
        put_str(&mut l, "imageRepository", &local.image_repository);
        put_str(&mut l, "imageTag", &local.image_tag);
        // No omitempty on dataDir.
        l.insert("dataDir".into(), json!(local.data_dir));
        put_args(&mut l, "extraArgs", &local.extra_args, api);
        put_envs(&mut l, &local.extra_envs, api);
        put_list(&mut l, "serverCertSANs", &local.server_cert_sans);
        put_list(&mut l, "peerCertSANs", &local.peer_cert_sans);
        m.insert("local".into(), Value::Object(l));
    }
    if let Some(ext) = e
        .external
        .as_ref()
        .filter(|x| **x != ExternalEtcd::default())
    {
        // No omitempty on any external field; a nil list is written as null.
        let endpoints = if ext.endpoints.is_empty() {
            Value::Null
        } else {
            json!(ext.endpoints)
        };
        m.insert(
            "external".into(),
            json!({"endpoints": endpoints, "caFile": ext.ca_file,
                "certFile": ext.cert_file, "keyFile": ext.key_file}),
        );
    }
    Value::Object(m)
}

/// The ClusterConfiguration document, without the leading `---`.
pub fn cluster_configuration(
    cc: &ClusterConfiguration,
    api: KubeadmApi,
    data: &ClusterData,
) -> String {
    let mut m = header(api, "ClusterConfiguration");
    m.insert("etcd".into(), etcd(&cc.etcd, api));
    let mut net = Map::new();
    put_str(
        &mut net,
        "serviceSubnet",
        data.service_subnet.as_deref().unwrap_or(""),
    );
    put_str(
        &mut net,
        "podSubnet",
        data.pod_subnet.as_deref().unwrap_or(""),
    );
    put_str(
        &mut net,
        "dnsDomain",
        data.dns_domain.as_deref().unwrap_or(""),
    );
    m.insert("networking".into(), Value::Object(net));
    put_str(
        &mut m,
        "kubernetesVersion",
        data.kubernetes_version.as_deref().unwrap_or(""),
    );
    put_str(&mut m, "controlPlaneEndpoint", &cc.control_plane_endpoint);
    let mut api_server = component(&cc.api_server.component, api);
    put_list(&mut api_server, "certSANs", &cc.api_server.cert_sans);
    if api == KubeadmApi::V1Beta3
        && let Some(s) = data.control_plane_component_health_check_seconds
    {
        api_server.insert(
            "timeoutForControlPlane".into(),
            json!(go_duration(s.into())),
        );
    }
    m.insert("apiServer".into(), Value::Object(api_server));
    m.insert(
        "controllerManager".into(),
        Value::Object(component(&cc.controller_manager, api)),
    );
    m.insert(
        "scheduler".into(),
        Value::Object(component(&cc.scheduler, api)),
    );
    let mut dns = Map::new();
    put_str(&mut dns, "imageRepository", &cc.dns.image_repository);
    put_str(&mut dns, "imageTag", &cc.dns.image_tag);
    m.insert("dns".into(), Value::Object(dns));
    if api == KubeadmApi::V1Beta4 {
        m.insert("proxy".into(), json!({}));
    }
    put_str(&mut m, "certificatesDir", &cc.certificates_dir);
    put_str(&mut m, "imageRepository", &cc.image_repository);
    if !cc.feature_gates.is_empty() {
        m.insert("featureGates".into(), json!(cc.feature_gates));
    }
    put_str(
        &mut m,
        "clusterName",
        data.cluster_name.as_deref().unwrap_or(""),
    );
    if api == KubeadmApi::V1Beta4 {
        put_str(&mut m, "encryptionAlgorithm", &cc.encryption_algorithm);
        for (key, days) in [
            (
                "certificateValidityPeriod",
                cc.certificate_validity_period_days,
            ),
            (
                "caCertificateValidityPeriod",
                cc.ca_certificate_validity_period_days,
            ),
        ] {
            if days != 0 {
                m.insert(key.into(), json!(go_duration(i64::from(days) * 86_400)));
            }
        }
    }
    goyaml::to_string(&Value::Object(m))
}

fn node_registration(n: &NodeRegistration, api: KubeadmApi) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "name", &n.name);
    put_str(&mut m, "criSocket", &n.cri_socket);
    // No omitempty on taints: unset is written as null, which kubeadm reads as "the default".
    m.insert("taints".into(), json!(n.taints));
    put_args(&mut m, "kubeletExtraArgs", &n.kubelet_extra_args, api);
    put_list(&mut m, "ignorePreflightErrors", &n.ignore_preflight_errors);
    put_str(&mut m, "imagePullPolicy", &n.image_pull_policy);
    if api == KubeadmApi::V1Beta4
        && let Some(serial) = n.image_pull_serial
    {
        m.insert("imagePullSerial".into(), json!(serial));
    }
    Value::Object(m)
}

fn endpoint(e: &ApiEndpoint) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "advertiseAddress", &e.advertise_address);
    if e.bind_port != 0 {
        m.insert("bindPort".into(), json!(e.bind_port));
    }
    Value::Object(m)
}

fn timeouts(t: &Timeouts) -> Option<Value> {
    let mut m = Map::new();
    for (key, v) in [
        (
            "controlPlaneComponentHealthCheck",
            t.control_plane_component_health_check_seconds,
        ),
        ("kubeletHealthCheck", t.kubelet_health_check_seconds),
        ("kubernetesAPICall", t.kubernetes_api_call_seconds),
        ("etcdAPICall", t.etcd_api_call_seconds),
        ("tlsBootstrap", t.tls_bootstrap_seconds),
        ("discovery", t.discovery_seconds),
    ] {
        if let Some(s) = v {
            m.insert(key.into(), json!(go_duration(s.into())));
        }
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

/// `skipPhases`, `patches` and (v1beta4) `timeouts`, shared by init and join.
fn phases(m: &mut Map<String, Value>, skip: &[String], p: &Patches, t: &Timeouts, api: KubeadmApi) {
    put_list(m, "skipPhases", skip);
    if !p.directory.is_empty() {
        m.insert("patches".into(), json!({"directory": p.directory}));
    }
    if api == KubeadmApi::V1Beta4
        && let Some(t) = timeouts(t)
    {
        m.insert("timeouts".into(), t);
    }
}

/// The InitConfiguration document, without the leading `---`.
pub fn init_configuration(ic: &InitConfiguration, api: KubeadmApi) -> String {
    let mut m = header(api, "InitConfiguration");
    if !ic.bootstrap_tokens.is_empty() {
        let tokens = ic.bootstrap_tokens.iter().map(|t| {
            let mut o = Map::new();
            // A pointer without omitempty upstream: null when unset.
            let token = (!t.token.is_empty()).then(|| t.token.clone());
            o.insert("token".into(), json!(token));
            put_str(&mut o, "description", &t.description);
            if let Some(s) = t.ttl_seconds {
                o.insert("ttl".into(), json!(go_duration(s.into())));
            }
            if let Some(e) = &t.expires {
                o.insert("expires".into(), json!(e));
            }
            put_list(&mut o, "usages", &t.usages);
            put_list(&mut o, "groups", &t.groups);
            Value::Object(o)
        });
        m.insert("bootstrapTokens".into(), Value::Array(tokens.collect()));
    }
    m.insert(
        "nodeRegistration".into(),
        node_registration(&ic.node_registration, api),
    );
    m.insert("localAPIEndpoint".into(), endpoint(&ic.local_api_endpoint));
    phases(&mut m, &ic.skip_phases, &ic.patches, &ic.timeouts, api);
    goyaml::to_string(&Value::Object(m))
}

/// The JoinConfiguration document, without the leading `---`.
pub fn join_configuration(jc: &JoinConfiguration, api: KubeadmApi) -> String {
    let mut m = header(api, "JoinConfiguration");
    m.insert(
        "nodeRegistration".into(),
        node_registration(&jc.node_registration, api),
    );
    put_str(&mut m, "caCertPath", &jc.ca_cert_path);
    let mut d = Map::new();
    let bt = &jc.discovery.bootstrap_token;
    if *bt != BootstrapTokenDiscovery::default() {
        let mut o = Map::new();
        o.insert("token".into(), json!(bt.token));
        put_str(&mut o, "apiServerEndpoint", &bt.api_server_endpoint);
        put_list(&mut o, "caCertHashes", &bt.ca_cert_hashes);
        if bt.unsafe_skip_ca_verification == Some(true) {
            o.insert("unsafeSkipCAVerification".into(), json!(true));
        }
        d.insert("bootstrapToken".into(), Value::Object(o));
    }
    if jc.discovery.file != FileDiscovery::default() {
        d.insert(
            "file".into(),
            json!({"kubeConfigPath": jc.discovery.file.kube_config_path}),
        );
    }
    put_str(
        &mut d,
        "tlsBootstrapToken",
        &jc.discovery.tls_bootstrap_token,
    );
    if api == KubeadmApi::V1Beta3
        && let Some(s) = jc.timeouts.tls_bootstrap_seconds
    {
        d.insert("timeout".into(), json!(go_duration(s.into())));
    }
    m.insert("discovery".into(), Value::Object(d));
    if let Some(cp) = &jc.control_plane {
        m.insert(
            "controlPlane".into(),
            json!({"localAPIEndpoint": endpoint(&cp.local_api_endpoint)}),
        );
    }
    phases(&mut m, &jc.skip_phases, &jc.patches, &jc.timeouts, api);
    goyaml::to_string(&Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(version: &str) -> ClusterData {
        ClusterData {
            cluster_name: Some("mycluster".into()),
            dns_domain: Some("myDNSDomain".into()),
            service_subnet: Some("myServiceSubnet".into()),
            pod_subnet: Some("myPodSubnet".into()),
            kubernetes_version: Some(version.into()),
            control_plane_component_health_check_seconds: Some(30),
        }
    }

    /// Upstream's `TestMarshalClusterConfigurationForVersion`, full strings.
    #[test]
    fn cluster_configuration_as_upstream() {
        let cc = ClusterConfiguration {
            control_plane_endpoint: "myControlPlaneEndpoint:6443".into(),
            ..Default::default()
        };
        assert_eq!(
            cluster_configuration(&cc, KubeadmApi::V1Beta3, &data("v1.22.0")),
            "apiServer:\n  timeoutForControlPlane: 30s\napiVersion: kubeadm.k8s.io/v1beta3\n\
             clusterName: mycluster\ncontrolPlaneEndpoint: myControlPlaneEndpoint:6443\n\
             controllerManager: {}\ndns: {}\netcd: {}\nkind: ClusterConfiguration\n\
             kubernetesVersion: v1.22.0\nnetworking:\n  dnsDomain: myDNSDomain\n  \
             podSubnet: myPodSubnet\n  serviceSubnet: myServiceSubnet\nscheduler: {}\n"
        );
        assert_eq!(
            cluster_configuration(&cc, KubeadmApi::V1Beta4, &data("v1.31.0")),
            "apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\nclusterName: mycluster\n\
             controlPlaneEndpoint: myControlPlaneEndpoint:6443\ncontrollerManager: {}\n\
             dns: {}\netcd: {}\nkind: ClusterConfiguration\nkubernetesVersion: v1.31.0\n\
             networking:\n  dnsDomain: myDNSDomain\n  podSubnet: myPodSubnet\n  \
             serviceSubnet: myServiceSubnet\nproxy: {}\nscheduler: {}\n"
        );
    }

    /// Upstream's `TestMarshalInitConfigurationForVersion` and
    /// `TestMarshalJoinConfigurationForVersion`, full strings.
    #[test]
    fn init_and_join_configuration_as_upstream() {
        let nr = NodeRegistration {
            ignore_preflight_errors: vec!["some-preflight-check".into()],
            ..Default::default()
        };
        let t = Timeouts {
            control_plane_component_health_check_seconds: Some(50),
            ..Default::default()
        };
        let init = |timeouts: &Timeouts| InitConfiguration {
            node_registration: nr.clone(),
            timeouts: timeouts.clone(),
            ..Default::default()
        };
        let join = |timeouts: &Timeouts| JoinConfiguration {
            node_registration: nr.clone(),
            timeouts: timeouts.clone(),
            ..Default::default()
        };
        let body = "nodeRegistration:\n  ignorePreflightErrors:\n  - some-preflight-check\n  taints: null\n";
        assert_eq!(
            init_configuration(&init(&Timeouts::default()), KubeadmApi::V1Beta3),
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nlocalAPIEndpoint: {{}}\n{body}"
            )
        );
        assert_eq!(
            init_configuration(&init(&t), KubeadmApi::V1Beta4),
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint: {{}}\n{body}timeouts:\n  controlPlaneComponentHealthCheck: 50s\n"
            )
        );
        assert_eq!(
            join_configuration(&join(&Timeouts::default()), KubeadmApi::V1Beta3),
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta3\ndiscovery: {{}}\nkind: JoinConfiguration\n{body}"
            )
        );
        assert_eq!(
            join_configuration(&join(&t), KubeadmApi::V1Beta4),
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\ndiscovery: {{}}\nkind: JoinConfiguration\n{body}timeouts:\n  controlPlaneComponentHealthCheck: 50s\n"
            )
        );
    }

    #[test]
    fn args_are_lists_in_v1beta4_and_maps_in_v1beta3() {
        let nr = NodeRegistration {
            kubelet_extra_args: vec![
                Arg {
                    name: "eviction-hard".into(),
                    value: "nodefs.available<0%".into(),
                },
                Arg {
                    name: "v".into(),
                    value: "1".into(),
                },
                Arg {
                    name: "v".into(),
                    value: "2".into(),
                },
            ],
            taints: Some(vec![]),
            ..Default::default()
        };
        let v4 = node_registration(&nr, KubeadmApi::V1Beta4);
        assert_eq!(
            goyaml::to_string(&v4),
            "kubeletExtraArgs:\n- name: eviction-hard\n  value: nodefs.available<0%\n- name: v\n  value: \"1\"\n- name: v\n  value: \"2\"\ntaints: []\n"
        );
        let v3 = node_registration(&nr, KubeadmApi::V1Beta3);
        assert_eq!(
            goyaml::to_string(&v3),
            "kubeletExtraArgs:\n  eviction-hard: nodefs.available<0%\n  v: \"2\"\ntaints: []\n"
        );
    }

    #[test]
    fn durations_as_go_writes_them() {
        for (s, want) in [
            (0, "0s"),
            (50, "50s"),
            (300, "5m0s"),
            (3600, "1h0m0s"),
            (31_536_000, "8760h0m0s"),
        ] {
            assert_eq!(go_duration(s), want);
        }
    }
}
