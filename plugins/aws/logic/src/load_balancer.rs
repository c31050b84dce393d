//! The control plane's network load balancer (`pkg/cloud/services/elb`, v2): the balancer in
//! the public subnets, a TCP target group on 6443 and a listener forwarding to it. Its DNS
//! name is the cluster's endpoint.

use crate::client::{Fail, Params};
use crate::network::Network;
use crate::scope::Scope;
use crate::tags;
use crate::xml::Node;
use capw_sdk::{ProviderError, Value, View, json};

pub const PORT: u16 = 6443;

/// The balancer's name: `spec.controlPlaneLoadBalancer.name`, else `<cluster>-apiserver`,
/// shortened to AWS's 32 characters with a hash of the whole, as CAPA does.
pub fn name(aws_cluster: &View, cluster: &str) -> String {
    let given = aws_cluster.str("/spec/controlPlaneLoadBalancer/name");
    if !given.is_empty() {
        return given.to_string();
    }
    let full = format!("{cluster}-apiserver");
    if full.len() <= 32 {
        return full;
    }
    // FNV-1a: stable across builds and platforms, which std's hasher does not promise.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}-{:08x}", &full[..23].trim_end_matches('-'), hash as u32)
}

/// The balancer named `name`, if it exists.
pub fn find(s: &Scope, name: &str) -> Result<Option<Node>, Fail> {
    match s.api.elb(
        "DescribeLoadBalancers",
        Params::new().set("Names.member.1", name),
    ) {
        Ok(n) => Ok(n.list("LoadBalancers").first().map(|n| (*n).clone())),
        Err(f) if f.code() == Some("LoadBalancerNotFound") => Ok(None),
        Err(f) => Err(f),
    }
}

/// The target group of the balancer named `name` (it carries the same name).
pub fn find_target_group(s: &Scope, name: &str) -> Result<Option<String>, Fail> {
    match s.api.elb(
        "DescribeTargetGroups",
        Params::new().set("Names.member.1", name),
    ) {
        Ok(n) => Ok(n
            .list("TargetGroups")
            .first()
            .map(|t| t.text("TargetGroupArn").to_string())),
        Err(f) if f.code() == Some("TargetGroupNotFound") => Ok(None),
        Err(f) => Err(f),
    }
}

fn elb_tags(s: &Scope, name: &str) -> Params {
    let mut p = Params::new();
    for (i, (k, v)) in s.tags(tags::APISERVER, name).into_iter().enumerate() {
        p = p
            .set(format!("Tags.member.{}.Key", i + 1), k)
            .set(format!("Tags.member.{}.Value", i + 1), v);
    }
    p
}

/// Makes the balancer, target group and listener; returns the DNS name once the balancer is
/// active, and `status.networkStatus.apiServerElb`.
pub fn reconcile(
    s: &mut Scope,
    net: &Network,
    lb_group: &str,
) -> Result<(Option<String>, Value), ProviderError> {
    let kind = s.obj.str("/spec/controlPlaneLoadBalancer/loadBalancerType");
    if !matches!(kind, "" | "nlb") {
        return Err(ProviderError::InvalidSpec(format!(
            "spec.controlPlaneLoadBalancer.loadBalancerType: {kind:?} is not supported yet; use nlb (the default here)"
        )));
    }
    let scheme = match s.obj.str("/spec/controlPlaneLoadBalancer/scheme") {
        "" => "internet-facing",
        other => other,
    }
    .to_string();
    let name = name(&s.obj, &s.cluster);
    let lb = match find(s, &name)? {
        Some(lb) => lb,
        None => {
            let subnets: Vec<String> = if scheme == "internal" {
                net.private().map(|x| x.id.clone()).collect()
            } else {
                net.public().map(|x| x.id.clone()).collect()
            };
            let mut p = Params::new()
                .set("Name", &name)
                .set("Type", "network")
                .set("Scheme", &scheme)
                .list("Subnets.member", &subnets)
                .set("SecurityGroups.member.1", lb_group);
            p.0.extend(elb_tags(s, &name).0);
            let made = s.api.elb("CreateLoadBalancer", p)?;
            made.list("LoadBalancers")
                .first()
                .map(|n| (*n).clone())
                .ok_or_else(|| {
                    ProviderError::Other("CreateLoadBalancer answered no balancer".into())
                })?
        }
    };
    let arn = lb.text("LoadBalancerArn").to_string();
    let tg = match find_target_group(s, &name)? {
        Some(tg) => tg,
        None => {
            let mut p = Params::new()
                .set("Name", &name)
                .set("Protocol", "TCP")
                .set("Port", PORT.to_string())
                .set("VpcId", &net.vpc)
                .set("TargetType", "instance")
                .set("HealthCheckProtocol", "TCP");
            p.0.extend(elb_tags(s, &name).0);
            s.api
                .elb("CreateTargetGroup", p)?
                .list("TargetGroups")
                .first()
                .map(|t| t.text("TargetGroupArn").to_string())
                .ok_or_else(|| ProviderError::Other("CreateTargetGroup answered no group".into()))?
        }
    };
    let listeners = s.api.elb(
        "DescribeListeners",
        Params::new().set("LoadBalancerArn", &arn),
    )?;
    if !listeners
        .list("Listeners")
        .iter()
        .any(|l| l.text("Port") == PORT.to_string())
    {
        s.api.elb(
            "CreateListener",
            Params::new()
                .set("LoadBalancerArn", &arn)
                .set("Protocol", "TCP")
                .set("Port", PORT.to_string())
                .set("DefaultActions.member.1.Type", "forward")
                .set("DefaultActions.member.1.TargetGroupArn", &tg),
        )?;
    }
    let dns = lb.text("DNSName").to_string();
    let status = json!({
        "arn": arn,
        "name": name,
        "dnsName": dns,
        "scheme": scheme,
        "loadBalancerType": "nlb",
        "availabilityZones": lb.list("AvailabilityZones").iter().map(|z| z.text("ZoneName")).collect::<Vec<_>>(),
        "subnetIds": lb.list("AvailabilityZones").iter().map(|z| z.text("SubnetId")).collect::<Vec<_>>(),
        "securityGroupIds": [lb_group],
        "targetGroupArn": tg,
    });
    // A balancer still provisioning has a name but answers nothing yet.
    let active = lb.text("State/Code") == "active";
    if active {
        s.ready("LoadBalancerReady");
    }
    Ok((active.then_some(dns).filter(|d| !d.is_empty()), status))
}

/// Deletes the balancer, then its target group; true once both are gone.
pub fn delete(s: &Scope) -> Result<bool, ProviderError> {
    let name = name(&s.obj, &s.cluster);
    if let Some(lb) = find(s, &name)? {
        s.api.elb(
            "DeleteLoadBalancer",
            Params::new().set("LoadBalancerArn", lb.text("LoadBalancerArn")),
        )?;
    }
    if let Some(tg) = find_target_group(s, &name)? {
        match s.api.elb(
            "DeleteTargetGroup",
            Params::new().set("TargetGroupArn", &tg),
        ) {
            Err(f) if f.code() == Some("ResourceInUse") => return Ok(false),
            Err(f) if f.code() == Some("TargetGroupNotFound") => {}
            r => {
                r?;
            }
        }
    }
    Ok(find(s, &name)?.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_shortened_stably() {
        let v = View(json!({"spec": {}}));
        assert_eq!(name(&v, "demo"), "demo-apiserver");
        let long = name(&v, "a-very-long-cluster-name-for-testing");
        assert!(long.len() <= 32, "{long}");
        assert_eq!(long, name(&v, "a-very-long-cluster-name-for-testing"));
        assert_ne!(long, name(&v, "a-very-long-cluster-name-for-testinh"));
        let given = View(json!({"spec": {"controlPlaneLoadBalancer": {"name": "mine"}}}));
        assert_eq!(name(&given, "demo"), "mine");
    }
}
