//! The AWS provider against moto, the EC2 emulator: the real `aws.wasm` component, the host's
//! `capw:host/aws` signing every call (moto checks the signatures), a real `capw apiserver`
//! over HTTPS and kubectl applying `examples/aws-cluster.yaml` unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use support::host::Env;
use support::moto::{Fault, FaultProxy, Inventory, Moto};

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const CLUSTER: &str = "aws-demo";

async fn host(moto: &Moto, secret: &str, manifest: &str) -> Env {
    host_at(moto.env_with(secret), manifest).await
}

async fn host_at(aws: capw_runtime::capabilities::aws::Environment, manifest: &str) -> Env {
    host_configured(manifest, |c| c.aws = aws).await
}

/// A host on `moto` whose workload clients follow `capw sim ec2`'s routes, so the clusters'
/// machines (booted by [`Moto::sim_ec2`]) reach Running.
async fn host_with_machines(moto: &Moto) -> Env {
    let (aws, routes) = (moto.env(), moto.routes());
    host_configured("capabilities: [aws]\n", |c| {
        c.aws = aws;
        c.connect_to = capw_manager::ConnectTo::file(routes);
    })
    .await
}

async fn host_configured(
    manifest: &str,
    configure: impl FnOnce(&mut capw_manager::HostConfig),
) -> Env {
    let mut env = support::host::start_configured(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("aws", "aws.wasm"),
        ],
        &[("aws", manifest)],
        configure,
    )
    .await;
    env.dump = "awsclusters,awsmachines,machines";
    env.serving("the AWS, bootstrap and control-plane plugins to serve", 4)
        .await;
    env
}

fn example() -> String {
    std::fs::read_to_string(support::repo_root().join("examples/aws-cluster.yaml")).unwrap()
}

async fn apply(env: &Env, manifest: &str) {
    env.eventually("the manifest to apply", 60, || async {
        support::kubectl(
            &env.kubeconfig,
            &env.home,
            &["apply", "-f", "-"],
            Some(manifest),
        )
        .0
        .then_some(())
    })
    .await;
}

fn aws_clusters(env: &Env) -> Api<DynamicObject> {
    env.dynamic(GROUP, "AWSCluster", "awsclusters")
}

/// The first `n` Machines to be Running with a Node: name and provider ID.
async fn running_machines(env: &Env, n: usize) -> Vec<(String, String)> {
    let api = env.dynamic("cluster.x-k8s.io", "Machine", "machines");
    env.eventually(&format!("{n} Machines Running with Nodes"), 240, || async {
        let l = api.list(&Default::default()).await.ok()?;
        let running: Vec<(String, String)> = l
            .items
            .iter()
            .filter(|m| m.data["status"]["phase"] == "Running")
            .filter(|m| m.data["status"]["nodeRef"]["name"].is_string())
            .filter_map(|m| {
                let id = m.data["spec"]["providerID"].as_str()?;
                Some((m.metadata.name.clone()?, id.to_string()))
            })
            .collect();
        (running.len() >= n).then_some(running)
    })
    .await
}

/// The provider IDs of the workload cluster's Nodes, read with kubectl through the cluster's
/// kubeconfig Secret (its server is the balancer's name, dialled where `capw sim ec2` routes it).
async fn workload_provider_ids(env: &Env, moto: &Moto, endpoint: &str) -> Vec<String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client.clone(), "default");
    let secret = secrets.get(&format!("{CLUSTER}-kubeconfig")).await.unwrap();
    let kubeconfig = env.home.join("workload.kubeconfig");
    std::fs::write(&kubeconfig, &secret.data.unwrap()["value"].0).unwrap();
    // Where the host dials it: the same routes, read the same way.
    let (addr, port) = capw_manager::ConnectTo::file(moto.routes())
        .route(endpoint, 6443)
        .unwrap_or_else(|| panic!("capw sim ec2 wrote no route for {endpoint}"));
    let server = format!("https://{addr}:{port}");
    let (ok, out) = support::kubectl(
        &kubeconfig,
        &env.home,
        &[
            "get",
            "nodes",
            "-o",
            "json",
            "--server",
            &server,
            "--tls-server-name",
            endpoint,
        ],
        None,
    );
    assert!(ok, "{out}");
    let nodes: Value = serde_json::from_str(&out).unwrap();
    nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            n["spec"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// `kubectl delete cluster`, then nothing tagged for the cluster is left in the emulator.
async fn delete_leaves_nothing(env: &Env, moto: &Moto, cluster: &str) {
    env.kubectl(&["delete", "cluster", cluster, "--wait=false"], None);
    let clusters = env.dynamic("cluster.x-k8s.io", "Cluster", "clusters");
    env.eventually("the Cluster gone", 180, || async {
        clusters
            .get_opt(cluster)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        moto.inventory(cluster).await,
        Inventory::default(),
        "everything tagged for {cluster} is gone"
    );
}

/// The message of the AWSCluster's `PluginCallSucceeded=False` condition, once it has one.
async fn call_failure(env: &Env) -> String {
    let api = aws_clusters(env);
    env.eventually("the AWSCluster to report a failed call", 60, || async {
        let c = api.get_opt(CLUSTER).await.ok()??;
        let conds = c.data["status"]["conditions"].as_array()?.clone();
        conds
            .iter()
            .find(|c| c["type"] == "PluginCallSucceeded" && c["status"] == "False")
            .map(|c| {
                format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_aws_example_reaches_three_running_machines_and_deleting_it_leaves_nothing() {
    let moto = Moto::start(true);
    let env = host_with_machines(&moto).await;
    let _machines = moto.sim_ec2();
    apply(&env, &example()).await;

    // The network, the groups and the balancer, with the balancer's name as the endpoint.
    let api = aws_clusters(&env);
    let endpoint = env
        .eventually(
            "the AWSCluster provisioned with an endpoint",
            120,
            || async {
                let c = api.get_opt(CLUSTER).await.ok()??;
                (c.data["status"]["initialization"]["provisioned"] == true)
                    .then(|| c.data["spec"]["controlPlaneEndpoint"].clone())
            },
        )
        .await;
    let host = endpoint["host"].as_str().unwrap().to_string();
    assert_eq!(endpoint["port"], 6443);
    let built = moto.inventory(CLUSTER).await;
    // A public and a private subnet, and a NAT gateway with its address, in each of 3 zones.
    let network = Inventory {
        vpcs: 1,
        subnets: 6,
        groups: 4,
        gateways: 1,
        addresses: 3,
        nats: 3,
        instances: 0,
    };
    assert_eq!(built, network);
    let lbs = moto
        .call(
            "elasticloadbalancing",
            "DescribeLoadBalancers",
            &[("Names.member.1", "aws-demo-apiserver")],
        )
        .await;
    assert!(
        lbs.contains(&format!("<DNSName>{host}</DNSName>")),
        "the endpoint is the balancer's: {host}\n{lbs}"
    );
    assert!(lbs.contains("<Type>network</Type>"), "{lbs}");
    let c = api.get(CLUSTER).await.unwrap();
    let fds = c.data["status"]["failureDomains"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        fds.len(),
        3,
        "a failure domain per private subnet's zone: {fds:?}"
    );
    assert_eq!(
        c.data["status"]["networkStatus"]["apiServerElb"]["dnsName"],
        host.as_str()
    );

    // Three Machines Running, each with the Node of its instance.
    let machines = running_machines(&env, 3).await;
    let ids: Vec<String> = machines.iter().map(|(_, id)| id.clone()).collect();
    for id in &ids {
        assert!(id.starts_with("aws:///us-east-1"), "{id}");
    }
    let mut nodes = workload_provider_ids(&env, &moto, &host).await;
    nodes.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(nodes, want, "the Nodes' provider IDs are the Machines'");

    // The emulator holds what CAPA would: the network, 3 instances of the looked-up AMI, and
    // the balancer with the control-plane instance as its only target.
    assert_eq!(
        moto.inventory(CLUSTER).await,
        Inventory {
            instances: 3,
            ..network.clone()
        }
    );
    let control_plane = machines
        .iter()
        .find(|(name, _)| name.starts_with("aws-demo-control-plane"))
        .map(|(_, id)| id.rsplit('/').next().unwrap().to_string())
        .expect("a control-plane Machine");
    let described = moto
        .call(
            "ec2",
            "DescribeInstances",
            &[("InstanceId.1", &control_plane)],
        )
        .await;
    assert!(
        described.contains("<imageId>ami-0ca9a000000000000</imageId>"),
        "CAPA's AMI lookup for v1.33.4: {described}"
    );
    let groups = moto
        .call(
            "elasticloadbalancing",
            "DescribeTargetGroups",
            &[("Names.member.1", "aws-demo-apiserver")],
        )
        .await;
    let arn = groups
        .split("<TargetGroupArn>")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_string();
    let health = moto
        .call(
            "elasticloadbalancing",
            "DescribeTargetHealth",
            &[("TargetGroupArn", &arn)],
        )
        .await;
    assert_eq!(
        health.matches("<Id>").count(),
        1,
        "only the control plane is a target: {health}"
    );
    assert!(
        health.contains(&format!("<Id>{control_plane}</Id>")),
        "{health}"
    );

    // Deleting the Cluster deletes everything tagged for it, in reverse.
    delete_leaves_nothing(&env, &moto, CLUSTER).await;
    let lbs = moto
        .call("elasticloadbalancing", "DescribeLoadBalancers", &[])
        .await;
    assert!(!lbs.contains("<LoadBalancerArn>"), "{lbs}");
}

/// The workers' MachineHealthCheck: a worker whose Node is gone is replaced.
const WORKER_HEALTH_CHECK: &str = "apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata:
  name: aws-demo-workers
  namespace: default
spec:
  clusterName: aws-demo
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: aws-demo-md-0
  checks:
    nodeStartupTimeoutSeconds: 600
    unhealthyNodeConditions:
    - type: Ready
      status: Unknown
      timeoutSeconds: 300
";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_terminated_out_of_band_fails_its_machine_and_a_health_check_replaces_it() {
    let moto = Moto::start(true);
    let env = host_with_machines(&moto).await;
    let _machines = moto.sim_ec2();
    apply(&env, &example()).await;
    let running = running_machines(&env, 3).await;
    let (victim, provider_id) = running
        .iter()
        .find(|(name, _)| name.starts_with("aws-demo-md-0"))
        .cloned()
        .expect("a worker Machine");
    let instance = provider_id.rsplit('/').next().unwrap().to_string();
    let machines = env.dynamic("cluster.x-k8s.io", "Machine", "machines");
    let aws_machine =
        machines.get(&victim).await.unwrap().data["spec"]["infrastructureRef"]["name"]
            .as_str()
            .unwrap()
            .to_string();

    // Terminated behind Cluster API's back: the AWSMachine says so in a condition.
    moto.call("ec2", "TerminateInstances", &[("InstanceId.1", &instance)])
        .await;
    let api = env.dynamic(GROUP, "AWSMachine", "awsmachines");
    let ready = env
        .eventually(
            "the AWSMachine to report its instance terminated",
            90,
            || async {
                let m = api.get_opt(&aws_machine).await.ok()??;
                m.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready" && c["reason"] == "InstanceTerminated")
                    .cloned()
            },
        )
        .await;
    assert_eq!(ready["status"], "False", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("outside Cluster API"),
        "{ready}"
    );

    // Its Node went with the instance: the health check replaces the Machine.
    apply(&env, WORKER_HEALTH_CHECK).await;
    env.eventually("the failed worker Machine to be deleted", 120, || async {
        machines
            .get_opt(&victim)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let replaced = running_machines(&env, 3).await;
    assert!(
        replaced
            .iter()
            .all(|(name, id)| name != &victim && id != &provider_id),
        "{replaced:?}"
    );
    assert_eq!(moto.inventory(CLUSTER).await.instances, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_are_the_hosts_and_a_refusal_names_their_source() {
    let moto = Moto::start(true);

    // The host's environment with a wrong secret: moto's signature check refuses it.
    let env = host(&moto, "not-the-secret", "capabilities: [aws]\n").await;
    apply(&env, &example()).await;
    let failure = call_failure(&env).await;
    assert!(
        failure.contains("AWS refused the credentials from the host's environment")
            && failure.contains("AuthFailure"),
        "{failure}"
    );
    drop(env);

    // A grant naming a Secret: missing, then created with the IAM key.
    let manifest = "capabilities: [aws]\naws:\n  credentials:\n    secretRef: {namespace: default, name: aws-creds}\n";
    let mut env = host(&moto, "not-the-secret", manifest).await;
    env.dump = "wasmproviders";
    let wp: Api<capw_api::wasmprovider::WasmProvider> = Api::all(env.client.clone());
    let shown = env
        .eventually("the grant shown in status", 60, || async {
            let w = wp.get_opt("aws").await.ok()??;
            serde_json::to_value(w.status?.aws?).ok()
        })
        .await;
    assert_eq!(shown["credentials"]["secretRef"]["name"], "aws-creds");
    assert!(
        shown["actions"]["ec2"]
            .as_array()
            .unwrap()
            .contains(&Value::from("RunInstances"))
    );
    apply(&env, &example()).await;
    let failure = call_failure(&env).await;
    assert!(
        failure.contains("Secret default/aws-creds (the WasmProvider's spec.aws.credentials.secretRef) does not exist"),
        "{failure}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client.clone(), "default");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "aws-creds"},
        "stringData": {"AccessKeyID": moto.key.0, "SecretAccessKey": moto.key.1}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let api = aws_clusters(&env);
    env.eventually(
        "the AWSCluster provisioned with the Secret's key",
        120,
        || async {
            let c = api.get_opt(CLUSTER).await.ok()??;
            (c.data["status"]["initialization"]["provisioned"] == true).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_action_outside_the_grant_is_refused_naming_the_field() {
    let moto = Moto::start(false);
    let manifest = "capabilities: [aws]\naws:\n  actions:\n    ec2: [DescribeVpcs]\n";
    let env = host(&moto, &moto.key.1.clone(), manifest).await;
    apply(&env, &example()).await;
    let failure = call_failure(&env).await;
    assert_eq!(
        failure,
        "TransientError: plugin aws 0.1.0: transient provider error: ec2:CreateVpc was refused by the host: action ec2:CreateVpc is not granted to plugin aws: add it to its WasmProvider's spec.aws.actions.ec2"
    );
    assert_eq!(
        moto.tagged(CLUSTER, "DescribeVpcs", "vpcId", &[]).await,
        0,
        "nothing was sent"
    );
}

/// Waits for the AWSCluster to be provisioned.
async fn provisioned(env: &Env, secs: u64) -> DynamicObject {
    let api = aws_clusters(env);
    env.eventually("the AWSCluster provisioned", secs, || async {
        let c = api.get_opt(CLUSTER).await.ok()??;
        (c.data["status"]["initialization"]["provisioned"] == true).then_some(c)
    })
    .await
}

fn reasons(o: &DynamicObject) -> Vec<String> {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["reason"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn throttling_and_unavailability_are_retried_not_terminal() {
    // 5xx for a moment: the host's retries inside one call absorb it. RequestLimitExceeded for
    // longer than one call retries: the call is throttled, the reconcile waits and tries again.
    // Either way the cluster still gets made, once.
    for (fault, count, secs) in [(Fault::Unavailable, 3, 60), (Fault::Throttled, 12, 90)] {
        let moto = Moto::start(false);
        let proxy = FaultProxy::start(&moto.url, fault, count).await;
        let env = host_at(
            moto.env_at(&proxy.url, &moto.key.1),
            "capabilities: [aws]\n",
        )
        .await;
        apply(&env, &example()).await;
        let c = provisioned(&env, secs).await;
        assert_eq!(
            proxy.left.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{fault:?}: every fault was answered"
        );
        assert!(
            !reasons(&c).iter().any(|r| r == "TerminalError"),
            "{fault:?}: {:?}",
            reasons(&c)
        );
        assert_eq!(moto.tagged(CLUSTER, "DescribeVpcs", "vpcId", &[]).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_mid_provisioning_makes_no_second_vpc_or_instance() {
    let moto = Moto::start(false);
    let env = host(&moto, &moto.key.1.clone(), "capabilities: [aws]\n").await;
    apply(&env, &example()).await;
    // The host stops the moment the VPC exists: the network is half made and nothing of it is
    // recorded anywhere but in the cloud's tags.
    env.eventually("the VPC", 60, || async {
        (moto.tagged(CLUSTER, "DescribeVpcs", "vpcId", &[]).await == 1).then_some(())
    })
    .await;
    let aws = moto.env();
    let env = env.restart(|c| c.aws = aws).await;
    provisioned(&env, 120).await;
    let network = Inventory {
        vpcs: 1,
        subnets: 6,
        groups: 4,
        gateways: 1,
        addresses: 3,
        nats: 3,
        instances: 0,
    };
    assert_eq!(
        moto.inventory(CLUSTER).await,
        network,
        "what existed was found, not made again"
    );

    // It stops again the moment the control-plane instance exists.
    env.eventually("the control-plane instance", 60, || async {
        (moto.inventory(CLUSTER).await.instances == 1).then_some(())
    })
    .await;
    let aws = moto.env();
    let env = env.restart(|c| c.aws = aws).await;
    let machines = env.dynamic(GROUP, "AWSMachine", "awsmachines");
    env.eventually("the control-plane AWSMachine provisioned", 120, || async {
        let l = machines.list(&Default::default()).await.ok()?;
        l.items
            .iter()
            .any(|m| m.data["status"]["initialization"]["provisioned"] == true)
            .then_some(())
    })
    .await;
    assert_eq!(
        moto.inventory(CLUSTER).await,
        Inventory {
            instances: 1,
            ..network
        },
        "the instance was found by its tags"
    );
}

/// The sandbox, through a real component (`aws-probe.wasm`): the grant is required to load it,
/// only granted actions are sent, reserved parameters and region names that are not regions
/// are refused, no socket reaches anything (the emulator's own port included), and after its
/// calls succeeded against moto's signature check the component's memory holds no trace of the
/// secret key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_component_never_holds_the_secret_and_reaches_only_granted_actions() {
    use capw_runtime::capabilities::Grants;
    use capw_runtime::capabilities::aws::{AwsBackend, AwsPermit, Policy};
    use capw_runtime::{Capability, Context, Limits, Plugin, Runtime};
    let moto = Moto::start(true);
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(dir.path()).unwrap();
    rt.engine.services.backends.provide(std::sync::Arc::new(
        AwsBackend::with(moto.env(), None, Policy::default()).unwrap(),
    ));
    let wasm = std::fs::read(support::plugin("aws-probe.wasm")).unwrap();
    let ungranted = Plugin::load(
        &rt.engine,
        &rt.cache,
        &wasm,
        None,
        [Capability::LOG].into(),
        Limits::default(),
    )
    .await;
    let e = ungranted
        .err()
        .expect("a component importing aws loaded without the grant")
        .to_string();
    assert!(e.contains("capw:host/aws"), "{e}");
    let limits = Limits {
        grants: Grants::default().with(AwsPermit::default()).into(),
        ..Limits::default()
    };
    let probe = Plugin::load(
        &rt.engine,
        &rt.cache,
        &wasm,
        None,
        [Capability::LOG, Capability::AWS].into(),
        limits,
    )
    .await
    .expect("aws-probe loads with the grant");
    let reversed = |s: &str| s.chars().rev().collect::<String>();
    let moto_port = moto.url.rsplit(':').next().unwrap().to_string();
    let ctx = Context::of(
        serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AwsProbeMachine",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {
                "calls": [
                    {"service": "ec2", "action": "DescribeVpcs"},
                    {"service": "ec2", "action": "CreateKeyPair", "params": {"KeyName": "k"}},
                    {"service": "iam", "action": "CreateUser", "params": {"UserName": "u"}},
                    {"service": "ec2", "action": "DescribeVpcs", "params": {"X-Amz-Security-Token": "t"}},
                    {"service": "ec2", "action": "DescribeVpcs", "region": "169.254.169.254"},
                ],
                "connect": format!("127.0.0.1:{moto_port}"),
                "needleReversed": reversed(&moto.key.1),
                "controlReversed": reversed("DescribeVpcsResponse"),
            }
        })
        .to_string(),
    );
    let st = probe.reconcile_machine(&ctx).await.expect("reconcile");
    let report: serde_json::Value =
        serde_json::from_str(&st.common.status_patch.expect("report")).unwrap();
    let calls = &report["calls"];
    assert_eq!(
        calls[0]["status"], 200,
        "signed by the host, checked by moto: {report}"
    );
    assert_eq!(
        calls[1]["denied"],
        "action ec2:CreateKeyPair is not granted to plugin aws-probe: add it to its WasmProvider's spec.aws.actions.ec2"
    );
    assert!(
        calls[2]["denied"]
            .as_str()
            .unwrap()
            .starts_with("service \"iam\" is not granted"),
        "{report}"
    );
    assert!(
        calls[3]["invalid"]
            .as_str()
            .unwrap()
            .contains("\"X-Amz-Security-Token\" is reserved"),
        "{report}"
    );
    assert!(
        calls[4]["invalid"]
            .as_str()
            .unwrap()
            .contains("is not a region name"),
        "{report}"
    );
    assert_ne!(
        report["connect"], "connected",
        "a socket reached the emulator directly: {report}"
    );
    assert!(
        report["scannedBytes"].as_u64().unwrap() > 1 << 20,
        "{report}"
    );
    assert_eq!(
        report["controlFound"], true,
        "the search finds what the answers brought in: {report}"
    );
    assert_eq!(
        report["secretFound"], false,
        "the secret key is in the component's memory: {report}"
    );
    let created = moto.call("ec2", "DescribeKeyPairs", &[]).await;
    assert!(
        !created.contains("<keyName>k</keyName>"),
        "a refused call reached the cloud: {created}"
    );
}

/// `examples/clusterclass-aws.yaml`: a ClusterClass over the AWS templates and a topology
/// Cluster; the patched region and instance type reach the cloud, and deleting it leaves
/// nothing tagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_aws_clusterclass_example_reaches_running_from_its_variables() {
    let moto = Moto::start(false);
    let env = host_with_machines(&moto).await;
    let _machines = moto.sim_ec2();
    let example =
        std::fs::read_to_string(support::repo_root().join("examples/clusterclass-aws.yaml"))
            .unwrap();
    apply(&env, &example).await;
    let api = aws_clusters(&env);
    let cluster = "aws-topology";
    env.eventually("the topology's AWSCluster provisioned", 120, || async {
        let l = api.list(&Default::default()).await.ok()?;
        l.items
            .iter()
            .find(|c| c.data["status"]["initialization"]["provisioned"] == true)
            .map(|c| {
                assert_eq!(
                    c.data["spec"]["region"], "us-east-1",
                    "patched from the variable"
                )
            })
    })
    .await;
    assert_eq!(moto.inventory(cluster).await.vpcs, 1);
    // The topology's control plane and its 2 workers, Running with their Nodes.
    let running = running_machines(&env, 3).await;
    assert!(
        running
            .iter()
            .all(|(_, id)| id.starts_with("aws:///us-east-1")),
        "{running:?}"
    );
    let clusters = env.dynamic("cluster.x-k8s.io", "Cluster", "clusters");
    let phase = clusters.get(cluster).await.unwrap().data["status"]["phase"].clone();
    assert_eq!(phase, "Provisioned", "the Cluster's phase");
    assert_eq!(moto.inventory(cluster).await.instances, 3);
    let key = format!("tag:sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}");
    let described = moto
        .call(
            "ec2",
            "DescribeInstances",
            &[("Filter.1.Name", &key), ("Filter.1.Value.1", "owned")],
        )
        .await;
    assert!(
        described.contains("<instanceType>m5.large</instanceType>"),
        "the control plane's type from its variable: {described}"
    );
    assert!(
        described.contains("<instanceType>t3.large</instanceType>"),
        "the workers' type from theirs: {described}"
    );
    delete_leaves_nothing(&env, &moto, cluster).await;
}

/// A grant narrowed on the WasmProvider takes effect on the running module, without a new
/// module file: what `status.aws` shows is what the next call is checked against.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_narrowed_grant_takes_effect_without_a_new_module() {
    let moto = Moto::start(false);
    let env = host(&moto, &moto.key.1.clone(), "capabilities: [aws]\n").await;
    apply(&env, &example()).await;
    provisioned(&env, 120).await;
    let narrow = "capabilities: [aws]\naws:\n  actions:\n    ec2: [DescribeVpcs]\n";
    std::fs::write(env.dir.path().join("plugins/aws.yaml"), narrow).unwrap();
    let wp: Api<capw_api::wasmprovider::WasmProvider> = Api::all(env.client.clone());
    env.eventually("the narrowed grant shown in status", 60, || async {
        let w = wp.get_opt("aws").await.ok()??;
        let actions = w.status?.aws?.actions?;
        (actions.get("ec2")? == &vec!["DescribeVpcs".to_string()]).then_some(())
    })
    .await;
    // A second cluster, after the grant changed: refused by the grant status shows.
    apply(&env, &example().replace("aws-demo", "aws-second")).await;
    let api = aws_clusters(&env);
    let failure = env
        .eventually("the second AWSCluster refused", 60, || async {
            let c = api.get_opt("aws-second").await.ok()??;
            let conds = c.data["status"]["conditions"].as_array()?.clone();
            conds
                .iter()
                .find(|c| c["type"] == "PluginCallSucceeded" && c["status"] == "False")
                .and_then(|c| c["message"].as_str().map(str::to_string))
        })
        .await;
    assert!(
        failure.contains("ec2:CreateVpc is not granted to plugin aws"),
        "{failure}"
    );
    assert_eq!(
        moto.inventory("aws-second").await.vpcs,
        0,
        "nothing was made under the old grant"
    );
}
