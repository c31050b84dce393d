//! The cluster's security groups, one per CAPA role (`pkg/cloud/services/securitygroup`):
//! `apiserver-lb`, `lb`, `controlplane` and `node`. Rules between roles name the VPC's CIDR
//! rather than another group, so the groups can be deleted in any order (CAPA revokes the
//! cross-group rules first instead).

use crate::client::{Fail, Params};
use crate::network::{Network, ignore_gone};
use crate::scope::Scope;
use crate::tags;
use capw_sdk::{ProviderError, Value, json};

pub const ROLES: &[&str] = &["apiserver-lb", "lb", "controlplane", "node"];

/// An ingress rule: protocol (`tcp`, or a number such as `4`), ports, source CIDR.
struct Rule {
    protocol: String,
    from: i64,
    to: i64,
    cidr: String,
}

fn tcp(from: i64, to: i64, cidr: &str) -> Rule {
    Rule {
        protocol: "tcp".into(),
        from,
        to,
        cidr: cidr.into(),
    }
}

/// The rules of a role. CNI rules come from `spec.network.cni.cniIngressRules` (CAPA's
/// default is Calico's: BGP on 179/tcp and IP-in-IP).
fn rules(s: &Scope, role: &str, vpc_cidr: &str) -> Vec<Rule> {
    let cni: Vec<Rule> = match s
        .obj
        .get("/spec/network/cni/cniIngressRules")
        .and_then(Value::as_array)
    {
        Some(list) => list
            .iter()
            .map(|r| Rule {
                protocol: r
                    .get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("tcp")
                    .to_lowercase(),
                from: r.get("fromPort").and_then(Value::as_i64).unwrap_or(-1),
                to: r.get("toPort").and_then(Value::as_i64).unwrap_or(-1),
                cidr: vpc_cidr.into(),
            })
            .collect(),
        None => vec![
            tcp(179, 179, vpc_cidr),
            Rule {
                protocol: "4".into(),
                from: -1,
                to: -1,
                cidr: vpc_cidr.into(),
            },
        ],
    };
    match role {
        "apiserver-lb" => vec![tcp(6443, 6443, "0.0.0.0/0")],
        "controlplane" => [
            tcp(6443, 6443, "0.0.0.0/0"),
            tcp(2379, 2380, vpc_cidr),
            tcp(10250, 10250, vpc_cidr),
        ]
        .into_iter()
        .chain(cni)
        .collect(),
        "node" => [tcp(30000, 32767, "0.0.0.0/0"), tcp(10250, 10250, vpc_cidr)]
            .into_iter()
            .chain(cni)
            .collect(),
        _ => vec![],
    }
}

/// Makes the groups and their rules; returns `status.networkStatus.securityGroups`.
pub fn reconcile(s: &mut Scope, net: &Network) -> Result<Value, ProviderError> {
    let found = s.api.ec2(
        "DescribeSecurityGroups",
        tags::owned_filter(
            Params::new().filter("vpc-id", &[&net.vpc]),
            &s.cluster,
            None,
        ),
    )?;
    let found = found.list("securityGroupInfo");
    let mut out = capw_sdk::serde_json::Map::new();
    for role in ROLES {
        let name = format!("{}-{role}", s.cluster);
        let existing = found.iter().find(|g| g.text("groupName") == name);
        let (id, has_rules) = match existing {
            Some(g) => (
                g.text("groupId").to_string(),
                !g.list("ipPermissions").is_empty(),
            ),
            None => {
                let g = s.api.ec2(
                    "CreateSecurityGroup",
                    Params::new()
                        .set("GroupName", &name)
                        .set(
                            "GroupDescription",
                            format!("Kubernetes cluster {}: {role}", s.cluster),
                        )
                        .set("VpcId", &net.vpc)
                        .tag_spec("security-group", &s.tags(role, &name)),
                )?;
                (g.text("groupId").to_string(), false)
            }
        };
        let rules = rules(s, role, &net.cidr);
        if !has_rules && !rules.is_empty() {
            let mut p = Params::new().set("GroupId", &id);
            for (i, r) in rules.iter().enumerate() {
                let n = i + 1;
                p = p
                    .set(format!("IpPermissions.{n}.IpProtocol"), &r.protocol)
                    .set(format!("IpPermissions.{n}.FromPort"), r.from.to_string())
                    .set(format!("IpPermissions.{n}.ToPort"), r.to.to_string())
                    .set(format!("IpPermissions.{n}.IpRanges.1.CidrIp"), &r.cidr);
            }
            match s.api.ec2("AuthorizeSecurityGroupIngress", p) {
                Ok(_) => {}
                Err(f) if f.code() == Some("InvalidPermission.Duplicate") => {}
                Err(f) => return Err(f.into()),
            }
        }
        out.insert(role.to_string(), json!({"id": id, "name": name}));
    }
    s.ready("ClusterSecurityGroupsReady");
    Ok(Value::Object(out))
}

/// The id of the cluster's group of `role`.
pub fn find(s: &Scope, role: &str) -> Result<Option<String>, Fail> {
    let name = format!("{}-{role}", s.cluster);
    let found = s.api.ec2(
        "DescribeSecurityGroups",
        tags::owned_filter(
            Params::new().filter("group-name", &[&name]),
            &s.cluster,
            None,
        ),
    )?;
    Ok(found
        .list("securityGroupInfo")
        .first()
        .map(|g| g.text("groupId").to_string()))
}

/// Deletes every group the cluster owns; true once none is left.
pub fn delete(s: &Scope) -> Result<bool, ProviderError> {
    let found = s.api.ec2(
        "DescribeSecurityGroups",
        tags::owned_filter(Params::new(), &s.cluster, None),
    )?;
    let groups = found.list("securityGroupInfo");
    for g in &groups {
        match s.api.ec2(
            "DeleteSecurityGroup",
            Params::new().set("GroupId", g.text("groupId")),
        ) {
            // An instance still uses it: the next pass tries again.
            Err(f) if f.code() == Some("DependencyViolation") => return Ok(false),
            r => ignore_gone(r)?,
        }
    }
    Ok(true)
}
