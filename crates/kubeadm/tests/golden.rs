//! Golden user data for the three bootstraps (init, control-plane join, worker join) at a
//! kubeadm v1beta3 version (v1.30) and a v1beta4 one (v1.33), from the quick-start's
//! KubeadmControlPlane and KubeadmConfigTemplate specs as users write them.
//!
//! Each case is pinned whole in `tests/golden/` (the user data, and the kubeadm file it writes,
//! read back through the cloud-config parser the node side uses), and checked against the
//! facts upstream's templates fix, independently of the golden bytes. After a deliberate
//! change, `CAPW_UPDATE_GOLDEN=1 cargo test -p capw-kubeadm --test golden` rewrites the files;
//! review the diff before committing it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_cloud_config::CloudConfig;
use capw_kubeadm::*;
use serde_json::json;
use std::path::PathBuf;

fn pem(kind: &str, body: &str) -> String {
    format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n")
}

fn certificates() -> Certificates {
    let kp = |name: &str| KeyPair {
        cert: pem("CERTIFICATE", &format!("{name}-CERT")),
        key: pem("RSA PRIVATE KEY", &format!("{name}-KEY")),
    };
    Certificates {
        cluster_ca: Some(kp("CLUSTER-CA")),
        etcd_ca: Some(kp("ETCD-CA")),
        front_proxy_ca: Some(kp("FRONT-PROXY-CA")),
        service_account: Some(KeyPair {
            cert: pem("PUBLIC KEY", "SA-PUB"),
            key: pem("RSA PRIVATE KEY", "SA-KEY"),
        }),
        apiserver_etcd_client: None,
    }
}

/// The quick-start KubeadmControlPlane's `kubeadmConfigSpec`, with the Pod Security admission
/// file its ClusterClass patch adds, and a command on either side of kubeadm.
fn control_plane_spec() -> KubeadmConfigSpec {
    let eviction = json!([{"name": "eviction-hard",
        "value": "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%"}]);
    serde_json::from_value(json!({
        "clusterConfiguration": {
            "apiServer": {
                "certSANs": ["localhost", "127.0.0.1", "0.0.0.0", "host.docker.internal"],
                "extraArgs": [{"name": "admission-control-config-file",
                    "value": "/etc/kubernetes/kube-apiserver-admission-pss.yaml"}],
                "extraVolumes": [{"name": "admission-pss", "hostPath": "/etc/kubernetes/kube-apiserver-admission-pss.yaml",
                    "mountPath": "/etc/kubernetes/kube-apiserver-admission-pss.yaml", "readOnly": true, "pathType": "File"}]
            }
        },
        "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": eviction}},
        "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": eviction}},
        "files": [{"path": "/etc/kubernetes/kube-apiserver-admission-pss.yaml", "owner": "root:root", "permissions": "0600",
            "content": "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: baseline\n    exemptions:\n      namespaces: [kube-system]\n"}],
        "preKubeadmCommands": ["echo \"pre $(hostname)\""],
        "postKubeadmCommands": ["echo post"]
    }))
    .unwrap()
}

/// The quick-start KubeadmConfigTemplate's spec, after CABPK filled its discovery.
fn worker_spec() -> KubeadmConfigSpec {
    let mut spec: KubeadmConfigSpec = serde_json::from_value(json!({
        "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "eviction-hard",
            "value": "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%"}]}}
    }))
    .unwrap();
    fill_discovery(
        &mut spec,
        "172.18.0.3:6443",
        &[hash()],
        "abcdef.0123456789abcdef",
    );
    spec
}

fn hash() -> String {
    format!("sha256:{}", "0a1b2c3d".repeat(8))
}

fn cluster() -> ClusterFacts {
    ClusterFacts {
        name: "capi-quickstart".into(),
        endpoint: Some(("172.18.0.3".into(), 6443)),
        service_domain: "cluster.local".into(),
        services: vec!["10.128.0.0/12".into()],
        pods: vec!["192.168.0.0/16".into()],
    }
}

struct Case {
    name: &'static str,
    version: &'static str,
    bootstrap: Bootstrap,
}

fn cases() -> Vec<Case> {
    let mut v = vec![];
    for version in ["v1.30.4", "v1.33.1"] {
        for (name, bootstrap) in [
            ("init", Bootstrap::Init),
            ("control-plane-join", Bootstrap::ControlPlaneJoin),
            ("worker-join", Bootstrap::WorkerJoin),
        ] {
            v.push(Case {
                name,
                version,
                bootstrap,
            });
        }
    }
    v
}

fn render_case(c: &Case) -> String {
    let (spec, certs) = match c.bootstrap {
        Bootstrap::WorkerJoin => (worker_spec(), Certificates::default()),
        Bootstrap::ControlPlaneJoin => {
            let mut s = control_plane_spec();
            fill_discovery(
                &mut s,
                "172.18.0.3:6443",
                &[hash()],
                "abcdef.0123456789abcdef",
            );
            (s, certificates())
        }
        Bootstrap::Init => (control_plane_spec(), certificates()),
    };
    render(
        &spec,
        &cluster(),
        c.version,
        c.bootstrap,
        &certs,
        &spec.files,
    )
    .unwrap()
}

fn golden(file: &str, got: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("CAPW_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run CAPW_UPDATE_GOLDEN=1 cargo test -p capw-kubeadm --test golden",
            path.display()
        )
    });
    if want != got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{file} differs from the golden file at line {}:\n  golden: {:?}\n  now:    {:?}\n(if the change is deliberate, rerun with CAPW_UPDATE_GOLDEN=1 and review the diff)",
            line + 1,
            want.lines().nth(line),
            got.lines().nth(line)
        );
    }
}

#[test]
fn user_data_matches_the_golden_files() {
    for c in cases() {
        let minor = &c.version[..5];
        let data = render_case(&c);
        golden(&format!("{}-{minor}.cloud-config", c.name), &data);
        let parsed = CloudConfig::parse(&data)
            .unwrap_or_else(|e| panic!("{} {}: {e}\n{data}", c.name, c.version));
        let kubeadm_file = if c.bootstrap == Bootstrap::Init {
            cloudinit::INIT_CONFIG
        } else {
            cloudinit::JOIN_CONFIG
        };
        let kubeadm = String::from_utf8(parsed.file(kubeadm_file).unwrap()).unwrap();
        golden(&format!("{}-{minor}.kubeadm.yaml", c.name), &kubeadm);
        if c.bootstrap == Bootstrap::Init {
            // What capw's control-plane machines write, byte for byte the init user data's.
            let file = capw_kubeadm::init_config_file(&control_plane_spec(), &cluster(), c.version)
                .unwrap();
            assert_eq!(file, kubeadm, "{}", c.version);
            let doc = capw_kubeadm::cluster_configuration_document(&file).unwrap();
            assert!(doc.starts_with("apiServer:\n"), "{doc}");
            assert!(doc.contains("\nkind: ClusterConfiguration\n"), "{doc}");
            assert!(
                doc.contains(&format!("\nkubernetesVersion: {}\n", c.version)),
                "{doc}"
            );
            assert!(
                !doc.contains("InitConfiguration") && !doc.contains("---"),
                "{doc}"
            );
        }
    }
}

/// What upstream's templates fix, checked on every case without the golden bytes.
#[test]
fn user_data_keeps_upstreams_order_and_commands() {
    for c in cases() {
        let data = render_case(&c);
        let label = format!("{} {}", c.name, c.version);
        assert!(
            data.starts_with("## template: jinja\n#cloud-config\n\nwrite_files:\n"),
            "{label}"
        );
        assert!(data.ends_with('\n') && !data.ends_with("\n\n"), "{label}");
        let parsed = CloudConfig::parse(&data).unwrap();
        let paths: Vec<&str> = parsed.write_files.iter().map(|f| f.path.as_str()).collect();
        let pki = [
            "/etc/kubernetes/pki/ca.crt",
            "/etc/kubernetes/pki/ca.key",
            "/etc/kubernetes/pki/etcd/ca.crt",
            "/etc/kubernetes/pki/etcd/ca.key",
            "/etc/kubernetes/pki/front-proxy-ca.crt",
            "/etc/kubernetes/pki/front-proxy-ca.key",
            "/etc/kubernetes/pki/sa.pub",
            "/etc/kubernetes/pki/sa.key",
        ];
        let pss = "/etc/kubernetes/kube-apiserver-admission-pss.yaml";
        let placeholder = "/run/cluster-api/placeholder";
        let (want, line): (Vec<&str>, String) = match c.bootstrap {
            Bootstrap::Init => (
                [&pki[..], &[pss, cloudinit::INIT_CONFIG, placeholder]].concat(),
                "'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'".into(),
            ),
            Bootstrap::ControlPlaneJoin => (
                [&pki[..], &[pss, cloudinit::JOIN_CONFIG, placeholder]].concat(),
                "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete".into(),
            ),
            Bootstrap::WorkerJoin => (
                vec![cloudinit::JOIN_CONFIG, placeholder],
                "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete".into(),
            ),
        };
        assert_eq!(paths, want, "{label}");
        let keys: Vec<&str> = parsed
            .write_files
            .iter()
            .filter(|f| f.path.ends_with(".key"))
            .map(|f| f.mode())
            .collect();
        assert!(keys.iter().all(|m| *m == "0600"), "{label}: {keys:?}");
        // Content ending in a newline leaves a line of six spaces after it.
        assert!(
            data.contains("-----END CERTIFICATE-----\n      \n")
                || c.bootstrap == Bootstrap::WorkerJoin,
            "{label}"
        );
        let runcmd = data.split("\nruncmd:\n").nth(1).unwrap();
        if c.bootstrap == Bootstrap::WorkerJoin {
            assert_eq!(runcmd, format!("  - {line}\n"), "{label}");
        } else {
            assert_eq!(
                runcmd,
                format!("  - \"echo \\\"pre $(hostname)\\\"\"\n  - {line}\n  - \"echo post\"\n"),
                "{label}"
            );
        }
        let kubeadm = String::from_utf8(
            parsed
                .file(if c.bootstrap == Bootstrap::Init {
                    cloudinit::INIT_CONFIG
                } else {
                    cloudinit::JOIN_CONFIG
                })
                .unwrap(),
        )
        .unwrap();
        let (api, args) = if c.version.starts_with("v1.30") {
            (
                "apiVersion: kubeadm.k8s.io/v1beta3\n",
                "  kubeletExtraArgs:\n    eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%\n",
            )
        } else {
            (
                "apiVersion: kubeadm.k8s.io/v1beta4\n",
                "  kubeletExtraArgs:\n  - name: eviction-hard\n    value: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%\n",
            )
        };
        assert!(kubeadm.contains(api), "{label}\n{kubeadm}");
        assert!(kubeadm.contains(args), "{label}\n{kubeadm}");
        match c.bootstrap {
            Bootstrap::Init => {
                assert!(
                    kubeadm.starts_with("---\napiServer:\n"),
                    "{label}\n{kubeadm}"
                );
                for fact in [
                    "clusterName: capi-quickstart\n",
                    "controlPlaneEndpoint: 172.18.0.3:6443\n",
                    &format!("kubernetesVersion: {}\n", c.version),
                    "networking:\n  dnsDomain: cluster.local\n  podSubnet: 192.168.0.0/16\n  serviceSubnet: 10.128.0.0/12\n",
                    "\n---\napiVersion: ",
                    "kind: InitConfiguration\nlocalAPIEndpoint: {}\nnodeRegistration:\n",
                    "  taints: null\n",
                ] {
                    assert!(kubeadm.contains(fact), "{label}: {fact:?}\n{kubeadm}");
                }
            }
            Bootstrap::ControlPlaneJoin => {
                assert!(!kubeadm.starts_with("---"), "{label}");
                assert!(
                    kubeadm.contains("controlPlane:\n  localAPIEndpoint: {}\n"),
                    "{label}\n{kubeadm}"
                );
                assert!(kubeadm.contains("  taints: null\n"), "{label}\n{kubeadm}");
            }
            Bootstrap::WorkerJoin => {
                assert!(
                    kubeadm.starts_with("---\napiVersion: "),
                    "{label}\n{kubeadm}"
                );
                assert!(!kubeadm.contains("controlPlane:"), "{label}");
                for fact in [
                    "discovery:\n  bootstrapToken:\n    apiServerEndpoint: 172.18.0.3:6443\n    caCertHashes:\n    - sha256:",
                    "    token: abcdef.0123456789abcdef\n",
                    "  taints:\n  - effect: NoSchedule\n    key: node.cluster.x-k8s.io/uninitialized\n",
                ] {
                    assert!(kubeadm.contains(fact), "{label}: {fact:?}\n{kubeadm}");
                }
            }
        }
    }
}

#[test]
fn a_worker_asking_for_a_control_plane_join_is_refused_by_field() {
    let mut spec = worker_spec();
    spec.join_configuration.control_plane = Some(Default::default());
    let err = render(
        &spec,
        &cluster(),
        "v1.33.1",
        Bootstrap::WorkerJoin,
        &Certificates::default(),
        &[],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.joinConfiguration.controlPlane"),
        "{err}"
    );
    let err = render(
        &spec,
        &cluster(),
        "v1.21.0",
        Bootstrap::Init,
        &Certificates::default(),
        &[],
    )
    .unwrap_err();
    assert!(err.to_string().contains("Machine spec.version"), "{err}");
}

#[test]
fn upstream_manifests_deserialize_unchanged() {
    // The e2e KubeadmConfigTemplate has no spec; a template's spec may also be empty.
    let empty: KubeadmConfigSpec = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, KubeadmConfigSpec::default());
    // Taints: unset and [] mean different things to kubeadm and stay apart.
    let none: KubeadmConfigSpec =
        serde_json::from_value(json!({"joinConfiguration": {"nodeRegistration": {}}})).unwrap();
    let empty: KubeadmConfigSpec =
        serde_json::from_value(json!({"joinConfiguration": {"nodeRegistration": {"taints": []}}}))
            .unwrap();
    assert_eq!(none.join_configuration.node_registration.taints, None);
    assert_eq!(
        empty.join_configuration.node_registration.taints,
        Some(vec![])
    );
}
