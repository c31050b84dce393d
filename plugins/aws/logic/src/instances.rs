//! AWSMachines as EC2 instances (`controllers/awsmachine_controller.go`,
//! `pkg/cloud/services/ec2/instances.go`): found by their tags, made with the bootstrap data as
//! user data, registered with the API load balancer when they are control-plane machines, and
//! terminated on delete.

use crate::client::{Fail, Params};
use crate::load_balancer;
use crate::network;
use crate::scope::Scope;
use crate::security_groups;
use crate::tags;
use crate::xml::Node;
use base64::Engine;
use capw_sdk::{ProviderError, Value, View};

/// CAPA's AMI owner and name pattern (`imageLookupOrg`, `imageLookupFormat`).
const AMI_OWNER: &str = "819546954734";
const AMI_BASE_OS: &str = "ubuntu-24.04";

/// States an instance that still counts is in; a `terminated` one is history.
const LIVE: &[&str] = &["pending", "running", "stopping", "stopped", "shutting-down"];

/// The instance of this AWSMachine: by the id in its provider ID, else by its tags.
pub fn find(s: &Scope, machine: &View) -> Result<Option<Node>, Fail> {
    if let Some(id) = instance_id(machine) {
        let found = match s
            .api
            .ec2("DescribeInstances", Params::new().set("InstanceId.1", id))
        {
            Ok(n) => n,
            Err(f) if f.code() == Some("InvalidInstanceID.NotFound") => return Ok(None),
            Err(f) => return Err(f),
        };
        return Ok(first_instance(&found));
    }
    let p = tags::owned_filter(Params::new(), &s.cluster, None)
        .filter("tag:Name", &[machine.name()])
        .filter("instance-state-name", LIVE);
    Ok(first_instance(&s.api.ec2("DescribeInstances", p)?))
}

fn first_instance(n: &Node) -> Option<Node> {
    n.list("reservationSet")
        .iter()
        .flat_map(|r| r.list("instancesSet"))
        .next()
        .cloned()
}

/// `i-…` from `aws:///<zone>/i-…`.
pub fn instance_id(machine: &View) -> Option<&str> {
    machine
        .str("/spec/providerID")
        .strip_prefix("aws://")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
}

pub fn provider_id(instance: &Node) -> String {
    format!(
        "aws:///{}/{}",
        instance.text("placement/availabilityZone"),
        instance.text("instanceId")
    )
}

/// The AMI: `spec.ami.id`, else CAPA's lookup for the Machine's Kubernetes version.
fn image(s: &Scope, machine: &View, version: &str) -> Result<String, ProviderError> {
    let id = machine.str("/spec/ami/id");
    if !id.is_empty() {
        return Ok(id.to_string());
    }
    let org = match machine.str("/spec/imageLookupOrg") {
        "" => AMI_OWNER,
        o => o,
    };
    let os = match machine.str("/spec/imageLookupBaseOS") {
        "" => AMI_BASE_OS,
        o => o,
    };
    let pattern = format!("capa-ami-{os}-?{}-*", version.trim_start_matches('v'));
    let found = s.api.ec2(
        "DescribeImages",
        Params::new()
            .set("Owner.1", org)
            .filter("name", &[&pattern])
            .filter("architecture", &["x86_64"])
            .filter("state", &["available"]),
    )?;
    let mut images: Vec<(String, String)> = found
        .list("imagesSet")
        .iter()
        .map(|i| {
            (
                i.text("creationDate").to_string(),
                i.text("imageId").to_string(),
            )
        })
        .collect();
    images.sort();
    images.pop().map(|(_, id)| id).ok_or_else(|| {
        ProviderError::Other(format!(
            "no AMI of owner {org} is named {pattern} in {}: set spec.ami.id, or publish the image",
            s.api.region
        ))
    })
}

/// Runs the instance of `machine` (an AWSMachine) for `owner` (its Machine).
pub fn create(
    s: &Scope,
    machine: &View,
    owner: &View,
    control_plane: bool,
    bootstrap: &str,
) -> Result<Node, ProviderError> {
    let instance_type = machine.str("/spec/instanceType");
    if instance_type.len() < 2 {
        return Err(ProviderError::InvalidSpec(
            "spec.instanceType: required (for example t3.large)".into(),
        ));
    }
    let image = image(s, machine, owner.str("/spec/version"))?;
    let subnet = match machine.str("/spec/subnet/id") {
        "" => {
            let zone = owner.str("/spec/failureDomain");
            let subnets = subnets(s)?;
            subnets
                .iter()
                .filter(|x| !x.public)
                .find(|x| zone.is_empty() || x.zone == zone)
                .map(|x| x.id.clone())
                .ok_or_else(|| {
                    ProviderError::Other(format!(
                        "cluster {} has no private subnet in failure domain {zone:?}",
                        s.cluster
                    ))
                })?
        }
        id => id.to_string(),
    };
    let role = if control_plane {
        "controlplane"
    } else {
        "node"
    };
    // The AWSCluster's status names the groups it made; looked up only if it does not yet.
    let recorded = s
        .obj
        .str(&format!("/status/networkStatus/securityGroups/{role}/id"))
        .to_string();
    let mut groups: Vec<String> = if recorded.is_empty() {
        security_groups::find(s, role)?.into_iter().collect()
    } else {
        vec![recorded]
    };
    groups.extend(
        machine
            .get("/spec/additionalSecurityGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("id").and_then(Value::as_str).map(str::to_string)),
    );
    let tag_role = if control_plane {
        tags::CONTROL_PLANE
    } else {
        tags::NODE
    };
    let mut t = s.tags(tag_role, machine.name());
    t.push((
        format!("kubernetes.io/cluster/{}", s.cluster),
        "owned".into(),
    ));
    let mut p = Params::new()
        .set("ImageId", image)
        .set("InstanceType", instance_type)
        .set("MinCount", "1")
        .set("MaxCount", "1")
        .set("SubnetId", subnet)
        .list("SecurityGroupId", &groups)
        .set(
            "UserData",
            base64::engine::general_purpose::STANDARD.encode(bootstrap),
        )
        .tag_spec("instance", &t);
    let key = match machine.get("/spec/sshKeyName") {
        Some(Value::String(k)) => k.as_str(),
        _ => s.obj.str("/spec/sshKeyName"),
    };
    if !key.is_empty() {
        p = p.set("KeyName", key);
    }
    let profile = machine.str("/spec/iamInstanceProfile");
    if !profile.is_empty() {
        p = p.set("IamInstanceProfile.Name", profile);
    }
    let made = s.api.ec2("RunInstances", p)?;
    made.list("instancesSet")
        .first()
        .map(|i| (*i).clone())
        .ok_or_else(|| ProviderError::Other("RunInstances answered no instance".into()))
}

/// The cluster's subnets: as the AWSCluster's status records them, else as EC2 lists them.
fn subnets(s: &Scope) -> Result<Vec<network::Subnet>, ProviderError> {
    let recorded: Vec<network::Subnet> = s
        .obj
        .get("/status/networkStatus/subnets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|x| {
            let text = |k: &str| {
                x.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            network::Subnet {
                id: text("id"),
                zone: text("availabilityZone"),
                cidr: text("cidrBlock"),
                public: x.get("isPublic").and_then(Value::as_bool).unwrap_or(false),
            }
        })
        .filter(|x| !x.id.is_empty())
        .collect();
    if !recorded.is_empty() {
        return Ok(recorded);
    }
    let Some((vpc, _)) = network::find_vpc(s)? else {
        return Err(ProviderError::Other(format!(
            "the VPC of cluster {} is gone",
            s.cluster
        )));
    };
    Ok(network::find_subnets(s, &vpc)?)
}

/// Registers a control-plane instance with the API load balancer's target group, unless the
/// AWSMachine's status says it already did (`registered`).
pub fn register(s: &Scope, instance: &str, registered: bool) -> Result<(), ProviderError> {
    if registered {
        return Ok(());
    }
    let name = load_balancer::name(&s.obj, &s.cluster);
    let recorded = s
        .obj
        .str("/status/networkStatus/apiServerElb/targetGroupArn");
    let tg = match recorded {
        "" => load_balancer::find_target_group(s, &name)?,
        arn => Some(arn.to_string()),
    };
    let Some(tg) = tg else {
        return Err(ProviderError::Other(format!(
            "the API load balancer's target group {name} does not exist yet"
        )));
    };
    let health = s.api.elb(
        "DescribeTargetHealth",
        Params::new().set("TargetGroupArn", &tg),
    )?;
    let registered = health
        .list("TargetHealthDescriptions")
        .iter()
        .any(|d| d.text("Target/Id") == instance);
    if !registered {
        s.api.elb(
            "RegisterTargets",
            Params::new()
                .set("TargetGroupArn", &tg)
                .set("Targets.member.1.Id", instance)
                .set("Targets.member.1.Port", load_balancer::PORT.to_string()),
        )?;
    }
    Ok(())
}

/// Deregisters and terminates the instance; true once it is terminated or gone.
pub fn delete(s: &Scope, machine: &View, control_plane: bool) -> Result<bool, ProviderError> {
    let Some(i) = find(s, machine)? else {
        return Ok(true);
    };
    let id = i.text("instanceId").to_string();
    match i.text("instanceState/name") {
        "terminated" => return Ok(true),
        "shutting-down" => return Ok(false),
        _ => {}
    }
    if control_plane {
        let name = load_balancer::name(&s.obj, &s.cluster);
        if let Some(tg) = load_balancer::find_target_group(s, &name)? {
            match s.api.elb(
                "DeregisterTargets",
                Params::new()
                    .set("TargetGroupArn", &tg)
                    .set("Targets.member.1.Id", &id),
            ) {
                Err(f) if f.code() == Some("InvalidTarget") => {}
                r => {
                    r?;
                }
            }
        }
    }
    network::ignore_gone(
        s.api
            .ec2("TerminateInstances", Params::new().set("InstanceId.1", &id)),
    )?;
    Ok(false)
}
