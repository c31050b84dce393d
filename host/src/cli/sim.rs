//! `capw sim ec2`: machines for an EC2 emulator that starts none.
//!
//! moto answers RunInstances but runs nothing, so a cluster on it would never get a Node. This
//! command stands in for the machines: every running instance tagged for a cluster
//! (`sigs.k8s.io/cluster-api-provider-aws/cluster/<name>`) is booted from its user data in the
//! same simulated cloud the in-memory provider uses: cloud-init's Jinja rendered with the
//! instance's metadata, kubeadm init/join run in-process, the Node registered with the instance's
//! `aws:///<az>/<id>` provider ID. An instance that stops running loses its VM and its Node, as
//! a terminated machine would.
//!
//! The workload API listens on loopback; the cluster's endpoint is the load balancer's DNS name,
//! which only the emulator knows. `--connect-to` writes the routes (curl's `--connect-to`
//! lines) the host reads with its own `--connect-to`.

use anyhow::Context as _;
use base64::Engine as _;
use capw_runtime::capabilities::aws::{AwsBackend, AwsPermit, Call, Environment, Policy};
use capw_runtime::capabilities::sim_cloud::{Metadata, SimCloud, SimSettings, VmSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Boot the running instances of an EC2 emulator (moto) from their user data, as the
    /// machines it does not start. For tests and demos: it stands in for real EC2 machines.
    ///
    /// Credentials and region come from the standard AWS environment (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION). Runs until Ctrl-C, printing each instance it boots
    /// or stops.
    Ec2(Ec2Args),
}

#[derive(Debug, clap::Args)]
pub struct Ec2Args {
    /// The emulator's EC2 endpoint, e.g. http://127.0.0.1:5000.
    #[arg(long, env = "AWS_ENDPOINT_URL_EC2")]
    pub endpoint: String,
    /// The region whose instances are booted (default: AWS_REGION, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Where to write `HOST:PORT:127.0.0.1:PORT` for each cluster's endpoint; give the host the
    /// same file (`capw up --connect-to FILE`).
    #[arg(long, env = "CAPW_CONNECT_TO")]
    pub connect_to: Option<PathBuf>,
    /// How often the emulator's instances are listed.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// How long a booted instance takes to run its user data.
    #[arg(long, default_value_t = 200)]
    pub boot_delay_ms: u64,
    /// How long its node agent takes to register its Node.
    #[arg(long, default_value_t = 500)]
    pub node_delay_ms: u64,
}

pub async fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Ec2(args) => ec2(args).await,
    }
}

/// The tag CAPA puts on everything it makes for a cluster, before the cluster's name.
const CLUSTER_TAG: &str = "sigs.k8s.io/cluster-api-provider-aws/cluster/";
const EC2_VERSION: &str = "2016-11-15";

/// An emulator instance, as DescribeInstances tells it.
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    id: String,
    image: String,
    zone: String,
    vpc: String,
    private_ip: String,
    private_dns: String,
    /// The cluster named by the CAPA tag.
    cluster: String,
}

impl Instance {
    /// The simulated cloud's cluster: one per VPC and cluster name.
    fn sim_cluster(&self) -> String {
        format!("{}/{}", self.vpc, self.cluster)
    }
}

struct Ec2 {
    backend: AwsBackend,
    permit: AwsPermit,
    region: String,
}

impl Ec2 {
    async fn call(&self, action: &str, params: Vec<(String, String)>) -> anyhow::Result<String> {
        let call = Call {
            region: self.region.clone(),
            service: "ec2".into(),
            version: EC2_VERSION.into(),
            action: action.into(),
            params,
        };
        let answer = self
            .backend
            .call("capw-sim-ec2", &self.permit, call)
            .await
            .with_context(|| format!("ec2 {action}"))?;
        anyhow::ensure!(
            answer.status < 300,
            "ec2 {action} answered {}: {}",
            answer.status,
            answer.body
        );
        Ok(answer.body)
    }

    /// The running instances tagged for a cluster, over every page.
    async fn running(&self) -> anyhow::Result<Vec<Instance>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = vec![
                ("Filter.1.Name".into(), "instance-state-name".into()),
                ("Filter.1.Value.1".into(), "running".into()),
            ];
            if let Some(t) = &token {
                params.push(("NextToken".into(), t.clone()));
            }
            let body = self.call("DescribeInstances", params).await?;
            let (page, next) = parse_instances(&body)?;
            out.extend(page);
            match next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    async fn user_data(&self, id: &str) -> anyhow::Result<String> {
        let body = self
            .call(
                "DescribeInstanceAttribute",
                vec![
                    ("InstanceId".into(), id.into()),
                    ("Attribute".into(), "userData".into()),
                ],
            )
            .await?;
        let doc = roxmltree::Document::parse(&body).context("DescribeInstanceAttribute's XML")?;
        let value = doc
            .descendants()
            .find(|n| n.has_tag_name("userData"))
            .and_then(|n| child_text(n, "value"))
            .unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .with_context(|| format!("instance {id}'s user data is not base64"))?;
        String::from_utf8(bytes).with_context(|| format!("instance {id}'s user data is not text"))
    }

    /// The Kubernetes version an AMI presents, from its name as CAPA names its images
    /// (`capa-ami-<os>-v1.33.4-<stamp>`); empty when the name holds none.
    async fn image_version(&self, image: &str) -> anyhow::Result<String> {
        let body = self
            .call("DescribeImages", vec![("ImageId.1".into(), image.into())])
            .await?;
        let doc = roxmltree::Document::parse(&body).context("DescribeImages' XML")?;
        let name = doc
            .descendants()
            .find(|n| n.has_tag_name("imagesSet"))
            .and_then(|set| set.children().find(|n| n.has_tag_name("item")))
            .and_then(|item| child_text(item, "name"))
            .unwrap_or_default();
        Ok(version_in(&name))
    }
}

/// `v1.33.4` out of an AMI name, without the `v`.
fn version_in(name: &str) -> String {
    name.split('-')
        .filter_map(|part| part.strip_prefix('v'))
        .find(|v| {
            let nums: Vec<&str> = v.split('.').collect();
            nums.len() == 3
                && nums
                    .iter()
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|v| format!("v{v}"))
        .unwrap_or_default()
}

/// The `item`s of `node`'s `set` child (`reservationSet`, `tagSet`, ...).
fn items<'a, 'i>(node: roxmltree::Node<'a, 'i>, set: &str) -> Vec<roxmltree::Node<'a, 'i>> {
    node.children()
        .filter(|c| c.has_tag_name(set))
        .flat_map(|s| s.children().filter(|c| c.has_tag_name("item")))
        .collect()
}

fn child_text(node: roxmltree::Node<'_, '_>, name: &str) -> Option<String> {
    node.children()
        .find(|n| n.has_tag_name(name))
        .map(|n| n.text().unwrap_or_default().to_string())
}

/// The instances of one DescribeInstances page that carry the CAPA cluster tag, and the next
/// page's token.
fn parse_instances(body: &str) -> anyhow::Result<(Vec<Instance>, Option<String>)> {
    let doc = roxmltree::Document::parse(body).context("DescribeInstances' XML")?;
    let root = doc.root_element();
    let mut out = Vec::new();
    for reservation in items(root, "reservationSet") {
        for i in items(reservation, "instancesSet") {
            let tags: BTreeMap<String, String> = items(i, "tagSet")
                .into_iter()
                .map(|t| {
                    (
                        child_text(t, "key").unwrap_or_default(),
                        child_text(t, "value").unwrap_or_default(),
                    )
                })
                .collect();
            let Some(cluster) = tags
                .keys()
                .find_map(|k| k.strip_prefix(CLUSTER_TAG))
                .map(str::to_string)
            else {
                continue;
            };
            let text = |name: &str| child_text(i, name).unwrap_or_default();
            let zone = i
                .children()
                .find(|n| n.has_tag_name("placement"))
                .and_then(|p| child_text(p, "availabilityZone"))
                .unwrap_or_default();
            out.push(Instance {
                id: text("instanceId"),
                image: text("imageId"),
                zone,
                vpc: text("vpcId"),
                private_ip: text("privateIpAddress"),
                private_dns: text("privateDnsName"),
                cluster,
            });
        }
    }
    let next = child_text(root, "nextToken").filter(|t| !t.is_empty());
    Ok((out, next))
}

async fn ec2(args: Ec2Args) -> anyhow::Result<()> {
    let region = args
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()))
        .unwrap_or_else(|| "us-east-1".into());
    let vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .chain([("AWS_ENDPOINT_URL_EC2".to_string(), args.endpoint.clone())])
        .collect();
    let env = Environment::from_pairs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (mut permit, _) = AwsPermit::from_spec(None);
    permit.actions = BTreeMap::from([(
        "ec2".to_string(),
        [
            "DescribeInstances",
            "DescribeInstanceAttribute",
            "DescribeImages",
        ]
        .map(String::from)
        .into(),
    )]);
    let ec2 = Ec2 {
        backend: AwsBackend::with(env, None, Policy::default())?,
        permit,
        region: region.clone(),
    };
    let sim = SimCloud::new(SimSettings {
        boot_delay: Duration::from_millis(args.boot_delay_ms),
        node_delay: Duration::from_millis(args.node_delay_ms),
    });
    println!(
        "capw sim ec2: booting the running instances of {} in {region}; Ctrl-C stops",
        args.endpoint
    );
    let mut booted: BTreeMap<String, Instance> = BTreeMap::new();
    let mut routes = String::new();
    let tick = async {
        loop {
            if let Err(e) = step(&ec2, &sim, &mut booted).await {
                eprintln!("capw sim ec2: {e:#}; retrying");
            }
            if let Some(path) = &args.connect_to {
                let now = routes_text(&sim);
                if now != routes {
                    match write_routes(path, &now) {
                        Ok(()) => routes = now,
                        Err(e) => eprintln!("capw sim ec2: writing {}: {e:#}", path.display()),
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        }
    };
    let mut stop = super::signals::Stop::listen()?;
    tokio::select! {
        () = stop.recv() => {}
        _ = tick => {}
    }
    Ok(())
}

/// Boots what newly runs, and stops what no longer does.
async fn step(
    ec2: &Ec2,
    sim: &SimCloud,
    booted: &mut BTreeMap<String, Instance>,
) -> anyhow::Result<()> {
    let running = ec2.running().await?;
    let ids: BTreeSet<&str> = running.iter().map(|i| i.id.as_str()).collect();
    let gone: Vec<Instance> = booted
        .values()
        .filter(|i| !ids.contains(i.id.as_str()))
        .cloned()
        .collect();
    for i in gone {
        booted.remove(&i.id);
        sim.delete_vm(&i.sim_cluster(), &i.id);
        println!(
            "instance {} (cluster {}) no longer runs: its VM and Node are gone",
            i.id, i.cluster
        );
        // The last machine of a cluster takes its workload API (and route) with it.
        if sim.vm_names(&i.sim_cluster()).is_empty() {
            sim.delete_api_server(&i.sim_cluster());
        }
    }
    for i in running {
        if booted.contains_key(&i.id) {
            continue;
        }
        let data = match ec2.user_data(&i.id).await {
            Ok(d) => d,
            Err(e) => {
                eprintln!("capw sim ec2: instance {}: {e:#}", i.id);
                continue;
            }
        };
        let version = ec2.image_version(&i.image).await?;
        let spec = VmSpec {
            provider_id: format!("aws:///{}/{}", i.zone, i.id),
            address: i.private_ip.clone(),
            version,
            metadata: Metadata {
                instance_id: i.id.clone(),
                local_hostname: i.private_dns.clone(),
                local_ipv4: i.private_ip.clone(),
                availability_zone: i.zone.clone(),
                region: ec2.region.clone(),
            },
        };
        match sim.boot_vm(&i.sim_cluster(), &i.id, spec, &data) {
            Ok(vm) => println!(
                "booted instance {} (cluster {}, {}) from its user data as {}",
                i.id, i.cluster, i.private_dns, vm.provider_id
            ),
            // Not bootable (not cloud-config): said once, and not tried again.
            Err(e) => eprintln!("capw sim ec2: instance {} does not boot: {e}", i.id),
        }
        booted.insert(i.id.clone(), i);
    }
    Ok(())
}

fn routes_text(sim: &SimCloud) -> String {
    sim.routes()
        .iter()
        .map(|(endpoint, port)| format!("{endpoint}:127.0.0.1:{port}\n"))
        .collect()
}

/// Replaces the file whole, so the host never reads half of it.
fn write_routes(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("# written by capw sim ec2\n{text}"))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_capa_ami_names() {
        assert_eq!(
            version_in("capa-ami-ubuntu-24.04-v1.33.4-1757000000"),
            "v1.33.4"
        );
        assert_eq!(version_in("ubuntu-jammy-22.04"), "");
    }

    #[test]
    fn only_instances_tagged_for_a_cluster_are_listed() {
        let body = r#"<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <reservationSet><item><instancesSet>
    <item><instanceId>i-1</instanceId><imageId>ami-1</imageId><vpcId>vpc-1</vpcId>
      <privateIpAddress>10.0.1.5</privateIpAddress><privateDnsName>ip-10-0-1-5.ec2.internal</privateDnsName>
      <placement><availabilityZone>us-east-1a</availabilityZone></placement>
      <tagSet><item><key>sigs.k8s.io/cluster-api-provider-aws/cluster/demo</key><value>owned</value></item></tagSet></item>
    <item><instanceId>i-2</instanceId><tagSet><item><key>Name</key><value>x</value></item></tagSet></item>
  </instancesSet></item></reservationSet>
  <nextToken>page2</nextToken>
</DescribeInstancesResponse>"#;
        let (found, next) = parse_instances(body).unwrap();
        assert_eq!(next.as_deref(), Some("page2"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, "i-1");
        assert_eq!(found[0].zone, "us-east-1a");
        assert_eq!(found[0].sim_cluster(), "vpc-1/demo");
    }
}
