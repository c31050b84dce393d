//! The managed network, in CAPA's order (`pkg/cloud/services/network`): the VPC, a public and
//! a private subnet per availability zone, the internet gateway, a NAT gateway per public
//! subnet, and a route table per subnet; and its deletion, in reverse.

use crate::client::{Fail, Params};
use crate::scope::Scope;
use crate::tags;
use crate::xml::Node;
use capw_sdk::ProviderError;

/// A subnet the cluster owns.
#[derive(Debug, Clone, PartialEq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub cidr: String,
    pub public: bool,
}

/// What the network reconcile found or made.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub vpc: String,
    pub cidr: String,
    pub subnets: Vec<Subnet>,
}

impl Network {
    pub fn public(&self) -> impl Iterator<Item = &Subnet> {
        self.subnets.iter().filter(|s| s.public)
    }
    pub fn private(&self) -> impl Iterator<Item = &Subnet> {
        self.subnets.iter().filter(|s| !s.public)
    }
}

/// The cluster's VPC, if it has one yet.
pub fn find_vpc(s: &Scope) -> Result<Option<(String, String)>, Fail> {
    let p = tags::owned_filter(Params::new(), &s.cluster, Some(tags::COMMON));
    let vpcs = s.api.ec2("DescribeVpcs", p)?;
    Ok(vpcs
        .list("vpcSet")
        .first()
        .map(|v| (v.text("vpcId").to_string(), v.text("cidrBlock").to_string())))
}

/// The cluster's subnets.
pub fn find_subnets(s: &Scope, vpc: &str) -> Result<Vec<Subnet>, Fail> {
    let p = tags::owned_filter(Params::new().filter("vpc-id", &[vpc]), &s.cluster, None);
    Ok(s.api
        .ec2("DescribeSubnets", p)?
        .list("subnetSet")
        .iter()
        .map(|n| Subnet {
            id: n.text("subnetId").into(),
            zone: n.text("availabilityZone").into(),
            cidr: n.text("cidrBlock").into(),
            public: n.tag(tags::ROLE) == Some(tags::PUBLIC),
        })
        .collect())
}

pub fn reconcile(s: &mut Scope) -> Result<Network, ProviderError> {
    if !s.obj.str("/spec/network/vpc/id").is_empty() {
        return Err(ProviderError::InvalidSpec(
            "spec.network.vpc.id: bring-your-own VPCs are not supported yet; leave it empty and the provider makes and owns the VPC".into(),
        ));
    }
    let (vpc, cidr) = match find_vpc(s)? {
        Some(v) => v,
        None => create_vpc(s)?,
    };
    s.ready("VpcReady");
    let subnets = subnets(s, &vpc, &cidr)?;
    s.ready("SubnetsReady");
    let igw = internet_gateway(s, &vpc)?;
    s.ready("InternetGatewayReady");
    let net = Network { vpc, cidr, subnets };
    let nats = nat_gateways(s, &net)?;
    s.ready("NatGatewaysReady");
    route_tables(s, &net, &igw, &nats)?;
    s.ready("RouteTablesReady");
    Ok(net)
}

fn create_vpc(s: &Scope) -> Result<(String, String), Fail> {
    let cidr = match s.obj.str("/spec/network/vpc/cidrBlock") {
        "" => "10.0.0.0/16",
        c => c,
    }
    .to_string();
    let name = format!("{}-vpc", s.cluster);
    let vpc = s.api.ec2(
        "CreateVpc",
        Params::new()
            .set("CidrBlock", &cidr)
            .tag_spec("vpc", &s.tags(tags::COMMON, &name)),
    )?;
    let id = vpc.text("vpc/vpcId").to_string();
    for attr in ["EnableDnsSupport", "EnableDnsHostnames"] {
        s.api.ec2(
            "ModifyVpcAttribute",
            Params::new()
                .set("VpcId", &id)
                .set(format!("{attr}.Value"), "true"),
        )?;
    }
    Ok((id, cidr))
}

fn subnets(s: &Scope, vpc: &str, cidr: &str) -> Result<Vec<Subnet>, ProviderError> {
    let mut have = find_subnets(s, vpc)?;
    let limit = s
        .obj
        .get("/spec/network/vpc/availabilityZoneUsageLimit")
        .and_then(|v| v.as_u64())
        .unwrap_or(3)
        .max(1) as usize;
    let zones = s.api.ec2(
        "DescribeAvailabilityZones",
        Params::new().filter("state", &["available"]),
    )?;
    let mut zones: Vec<String> = zones
        .list("availabilityZoneInfo")
        .iter()
        .map(|z| z.text("zoneName").to_string())
        .collect();
    zones.sort();
    zones.truncate(limit);
    if zones.is_empty() {
        return Err(ProviderError::Other(format!(
            "region {} has no available zones",
            s.api.region
        )));
    }
    let blocks = crate::cidr::split(cidr, zones.len() * 2).ok_or_else(|| {
        ProviderError::InvalidSpec(format!(
            "spec.network.vpc.cidrBlock: {cidr} cannot be split into {} subnets of at least /28",
            zones.len() * 2
        ))
    })?;
    for (i, zone) in zones.iter().enumerate() {
        for (public, block) in [(true, &blocks[2 * i]), (false, &blocks[2 * i + 1])] {
            if have.iter().any(|n| n.cidr == *block) {
                continue;
            }
            let role = if public { tags::PUBLIC } else { tags::PRIVATE };
            let name = format!("{}-subnet-{role}-{zone}", s.cluster);
            let mut t = s.tags(role, &name);
            t.push((
                format!("kubernetes.io/cluster/{}", s.cluster),
                "shared".into(),
            ));
            let elb = if public {
                "kubernetes.io/role/elb"
            } else {
                "kubernetes.io/role/internal-elb"
            };
            t.push((elb.into(), "1".into()));
            let made = s.api.ec2(
                "CreateSubnet",
                Params::new()
                    .set("VpcId", vpc)
                    .set("CidrBlock", block.as_str())
                    .set("AvailabilityZone", zone.as_str())
                    .tag_spec("subnet", &t),
            )?;
            let id = made.text("subnet/subnetId").to_string();
            if public {
                s.api.ec2(
                    "ModifySubnetAttribute",
                    Params::new()
                        .set("SubnetId", &id)
                        .set("MapPublicIpOnLaunch.Value", "true"),
                )?;
            }
            have.push(Subnet {
                id,
                zone: zone.clone(),
                cidr: block.clone(),
                public,
            });
        }
    }
    have.sort_by(|a, b| (&a.zone, !a.public).cmp(&(&b.zone, !b.public)));
    Ok(have)
}

fn internet_gateway(s: &Scope, vpc: &str) -> Result<String, Fail> {
    let p = tags::owned_filter(Params::new(), &s.cluster, Some(tags::COMMON));
    let found = s.api.ec2("DescribeInternetGateways", p)?;
    let (id, attached) = match found.list("internetGatewaySet").first() {
        Some(g) => (
            g.text("internetGatewayId").to_string(),
            g.list("attachmentSet")
                .iter()
                .any(|a| a.text("vpcId") == vpc),
        ),
        None => {
            let name = format!("{}-igw", s.cluster);
            let g = s.api.ec2(
                "CreateInternetGateway",
                Params::new().tag_spec("internet-gateway", &s.tags(tags::COMMON, &name)),
            )?;
            (
                g.text("internetGateway/internetGatewayId").to_string(),
                false,
            )
        }
    };
    if !attached {
        s.api.ec2(
            "AttachInternetGateway",
            Params::new()
                .set("InternetGatewayId", &id)
                .set("VpcId", vpc),
        )?;
    }
    Ok(id)
}

/// A NAT gateway per public subnet; returns `(zone, nat id)`.
fn nat_gateways(s: &Scope, net: &Network) -> Result<Vec<(String, String)>, Fail> {
    let found = s.api.ec2(
        "DescribeNatGateways",
        Params::new()
            .filter("vpc-id", &[&net.vpc])
            .filter("state", &["pending", "available"]),
    )?;
    let mut nats: Vec<(String, String)> = vec![];
    let existing: Vec<(String, String)> = found
        .list("natGatewaySet")
        .iter()
        .map(|n| {
            (
                n.text("subnetId").to_string(),
                n.text("natGatewayId").to_string(),
            )
        })
        .collect();
    // Addresses a crash left unassociated are used before new ones are allocated.
    let addresses = s.api.ec2(
        "DescribeAddresses",
        tags::owned_filter(Params::new(), &s.cluster, Some(tags::COMMON)),
    )?;
    let mut free: Vec<String> = addresses
        .list("addressesSet")
        .iter()
        .filter(|a| a.text("associationId").is_empty())
        .map(|a| a.text("allocationId").to_string())
        .collect();
    for subnet in net.public() {
        if let Some((_, id)) = existing.iter().find(|(sub, _)| *sub == subnet.id) {
            nats.push((subnet.zone.clone(), id.clone()));
            continue;
        }
        let alloc = match free.pop() {
            Some(a) => a,
            None => {
                let name = format!("{}-eip-{}", s.cluster, subnet.zone);
                s.api
                    .ec2(
                        "AllocateAddress",
                        Params::new()
                            .set("Domain", "vpc")
                            .tag_spec("elastic-ip", &s.tags(tags::COMMON, &name)),
                    )?
                    .text("allocationId")
                    .to_string()
            }
        };
        let name = format!("{}-nat-{}", s.cluster, subnet.zone);
        let nat = s.api.ec2(
            "CreateNatGateway",
            Params::new()
                .set("SubnetId", &subnet.id)
                .set("AllocationId", &alloc)
                .tag_spec("natgateway", &s.tags(tags::COMMON, &name)),
        )?;
        nats.push((
            subnet.zone.clone(),
            nat.text("natGateway/natGatewayId").to_string(),
        ));
    }
    Ok(nats)
}

/// A route table per subnet: public ones route to the internet gateway, private ones to
/// their zone's NAT gateway.
fn route_tables(
    s: &Scope,
    net: &Network,
    igw: &str,
    nats: &[(String, String)],
) -> Result<(), Fail> {
    let found = s.api.ec2(
        "DescribeRouteTables",
        tags::owned_filter(
            Params::new().filter("vpc-id", &[&net.vpc]),
            &s.cluster,
            None,
        ),
    )?;
    let tables = found.list("routeTableSet");
    for subnet in &net.subnets {
        let role = if subnet.public {
            tags::PUBLIC
        } else {
            tags::PRIVATE
        };
        let name = format!("{}-rt-{role}-{}", s.cluster, subnet.zone);
        let table = tables.iter().find(|t| t.tag("Name") == Some(name.as_str()));
        let (id, has_route, associated) = match table {
            Some(t) => (
                t.text("routeTableId").to_string(),
                t.list("routeSet")
                    .iter()
                    .any(|r| r.text("destinationCidrBlock") == "0.0.0.0/0"),
                t.list("associationSet")
                    .iter()
                    .any(|a| a.text("subnetId") == subnet.id),
            ),
            None => {
                let t = s.api.ec2(
                    "CreateRouteTable",
                    Params::new()
                        .set("VpcId", &net.vpc)
                        .tag_spec("route-table", &s.tags(role, &name)),
                )?;
                (t.text("routeTable/routeTableId").to_string(), false, false)
            }
        };
        if !has_route {
            let p = Params::new()
                .set("RouteTableId", &id)
                .set("DestinationCidrBlock", "0.0.0.0/0");
            let p = if subnet.public {
                p.set("GatewayId", igw)
            } else {
                match nats.iter().find(|(z, _)| *z == subnet.zone) {
                    Some((_, nat)) => p.set("NatGatewayId", nat),
                    None => continue,
                }
            };
            s.api.ec2("CreateRoute", p)?;
        }
        if !associated {
            s.api.ec2(
                "AssociateRouteTable",
                Params::new()
                    .set("RouteTableId", &id)
                    .set("SubnetId", &subnet.id),
            )?;
        }
    }
    Ok(())
}

/// Deletes the network in reverse; true once nothing of it is left.
pub fn delete(s: &Scope) -> Result<bool, ProviderError> {
    let Some((vpc, _)) = find_vpc(s)? else {
        // A crash may have left an unattached gateway or an address behind the VPC.
        return Ok(delete_strays(s)?);
    };
    let nats = s.api.ec2(
        "DescribeNatGateways",
        Params::new()
            .filter("vpc-id", &[&vpc])
            .filter("state", &["pending", "available", "deleting"]),
    )?;
    let nats = nats.list("natGatewaySet");
    for n in &nats {
        if n.text("state") != "deleting" {
            ignore_gone(s.api.ec2(
                "DeleteNatGateway",
                Params::new().set("NatGatewayId", n.text("natGatewayId")),
            ))?;
        }
    }
    if !nats.is_empty() {
        // Their addresses and subnets are in use until they are gone.
        return Ok(false);
    }
    let tables = s.api.ec2(
        "DescribeRouteTables",
        Params::new().filter("vpc-id", &[&vpc]),
    )?;
    for t in tables.list("routeTableSet") {
        let main = t
            .list("associationSet")
            .iter()
            .any(|a| a.text("main") == "true");
        for a in t.list("associationSet") {
            if a.text("main") != "true" {
                ignore_gone(s.api.ec2(
                    "DisassociateRouteTable",
                    Params::new().set("AssociationId", a.text("routeTableAssociationId")),
                ))?;
            }
        }
        if !main {
            ignore_gone(s.api.ec2(
                "DeleteRouteTable",
                Params::new().set("RouteTableId", t.text("routeTableId")),
            ))?;
        }
    }
    let gws = s.api.ec2(
        "DescribeInternetGateways",
        Params::new().filter("attachment.vpc-id", &[&vpc]),
    )?;
    for g in gws.list("internetGatewaySet") {
        let id = g.text("internetGatewayId");
        ignore_gone(
            s.api.ec2(
                "DetachInternetGateway",
                Params::new()
                    .set("InternetGatewayId", id)
                    .set("VpcId", &vpc),
            ),
        )?;
        ignore_gone(s.api.ec2(
            "DeleteInternetGateway",
            Params::new().set("InternetGatewayId", id),
        ))?;
    }
    for sub in find_subnets(s, &vpc)? {
        ignore_gone(
            s.api
                .ec2("DeleteSubnet", Params::new().set("SubnetId", &sub.id)),
        )?;
    }
    match s.api.ec2("DeleteVpc", Params::new().set("VpcId", &vpc)) {
        Ok(_) => {}
        // Something still in it (an instance's interface, a group): the next pass tries again.
        Err(f) if f.code() == Some("DependencyViolation") => return Ok(false),
        Err(f) => ignore_gone(Err(f))?,
    }
    Ok(delete_strays(s)?)
}

/// Gateways and addresses tagged for the cluster that outlived their VPC.
fn delete_strays(s: &Scope) -> Result<bool, Fail> {
    let gws = s.api.ec2(
        "DescribeInternetGateways",
        tags::owned_filter(Params::new(), &s.cluster, None),
    )?;
    for g in gws.list("internetGatewaySet") {
        ignore_gone(s.api.ec2(
            "DeleteInternetGateway",
            Params::new().set("InternetGatewayId", g.text("internetGatewayId")),
        ))?;
    }
    let addresses = s.api.ec2(
        "DescribeAddresses",
        tags::owned_filter(Params::new(), &s.cluster, None),
    )?;
    // Their NAT gateways are gone by now; an address still in use is tried again next pass.
    for a in addresses.list("addressesSet") {
        match s.api.ec2(
            "ReleaseAddress",
            Params::new().set("AllocationId", a.text("allocationId")),
        ) {
            Err(f) if f.code().is_some_and(|c| c.ends_with("InUse")) => return Ok(false),
            r => ignore_gone(r)?,
        }
    }
    Ok(find_vpc(s)?.is_none())
}

/// A delete of something already gone succeeded.
pub fn ignore_gone(r: Result<Node, Fail>) -> Result<(), Fail> {
    match r {
        Ok(_) => Ok(()),
        Err(f)
            if f.code()
                .is_some_and(|c| c.ends_with(".NotFound") || c.ends_with("NotFound")) =>
        {
            Ok(())
        }
        Err(f) => Err(f),
    }
}
