//! AWSCluster, AWSMachine and their templates, on the v1beta2 contract.

use crate::scope::Scope;
use crate::{instances, load_balancer, network, security_groups};
use capw_sdk::*;

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const VERSION: &str = "0.1.0";
const CONTROL_PLANE_LABEL: &str = "/metadata/labels/cluster.x-k8s.io~1control-plane";

pub struct Aws;
fn crds() -> Vec<String> {
    let cluster_col = (
        "Cluster",
        "string",
        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
    );
    vec![
        crd(
            GROUP,
            "AWSCluster",
            "awsclusters",
            &[
                cluster_col,
                (
                    "Provisioned",
                    "boolean",
                    ".status.initialization.provisioned",
                ),
                ("Endpoint", "string", ".spec.controlPlaneEndpoint.host"),
                ("Region", "string", ".spec.region"),
            ],
        ),
        crd(
            GROUP,
            "AWSMachine",
            "awsmachines",
            &[
                cluster_col,
                ("State", "string", ".status.instanceState"),
                (
                    "Provisioned",
                    "boolean",
                    ".status.initialization.provisioned",
                ),
                ("InstanceID", "string", ".spec.providerID"),
                (
                    "Machine",
                    "string",
                    ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
                ),
            ],
        ),
        crd(GROUP, "AWSMachineTemplate", "awsmachinetemplates", &[]),
        crd(GROUP, "AWSClusterTemplate", "awsclustertemplates", &[]),
    ]
}

impl Provider for Aws {
    fn metadata() -> Metadata {
        Metadata {
            kinds: vec![
                kind(GROUP, "AWSCluster", KindRole::InfrastructureCluster),
                kind(GROUP, "AWSMachine", KindRole::InfrastructureMachine),
                kind(
                    GROUP,
                    "AWSMachineTemplate",
                    KindRole::InfrastructureMachineTemplate("AWSMachine".into()),
                ),
                kind(
                    GROUP,
                    "AWSClusterTemplate",
                    KindRole::InfrastructureClusterTemplate("AWSCluster".into()),
                ),
            ],
            crds: crds(),
            ..Metadata::new("aws", VERSION, ProviderType::Infrastructure)
        }
    }

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.owning_cluster(&obj)?;
        if obj.get("/spec/bastion/enabled") == Some(&Value::Bool(true)) {
            // Refused rather than ignored: a status must not read as if the host were there.
            return Err(ProviderError::InvalidSpec(
                "spec.bastion.enabled: bastion hosts are not supported yet; set it to false and reach the machines through the load balancer or SSM".into(),
            ));
        }
        let mut s = Scope::new(cluster.name(), View(obj.0.clone()));
        let net = network::reconcile(&mut s)?;
        let groups = security_groups::reconcile(&mut s, &net)?;
        let lb_group = groups
            .get("apiserver-lb")
            .and_then(|g| g.get("id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (dns, elb) = load_balancer::reconcile(&mut s, &net, &lb_group)?;
        let mut zones: Vec<String> = net.private().map(|x| x.zone.clone()).collect();
        zones.dedup();
        let failure_domains = zones
            .into_iter()
            .map(|z| FailureDomain {
                name: z,
                control_plane: true,
                attributes: vec![],
            })
            .collect();
        let was = obj.get("/status/initialization/provisioned") == Some(&Value::Bool(true));
        let endpoint = dns
            .map(|host| ApiEndpoint {
                host,
                port: load_balancer::PORT,
            })
            .or_else(|| {
                let host = obj.str("/spec/controlPlaneEndpoint/host");
                (!host.is_empty()).then(|| ApiEndpoint {
                    host: host.into(),
                    port: obj
                        .get("/spec/controlPlaneEndpoint/port")
                        .and_then(Value::as_u64)
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(load_balancer::PORT),
                })
            });
        let provisioned = was || endpoint.is_some();
        let mut conditions = std::mem::take(&mut s.conditions);
        conditions.push(if provisioned {
            condition("Ready", true, "Provisioned", "")
        } else {
            condition(
                "Ready",
                false,
                "LoadBalancerProvisioning",
                "waiting for the API load balancer to become active",
            )
        });
        let mut common = common(
            conditions,
            Some(json!({"networkStatus": {
                "securityGroups": groups,
                "apiServerElb": elb,
                "vpc": {"id": net.vpc, "cidrBlock": net.cidr},
                "subnets": net.subnets.iter().map(|x| json!({
                    "id": x.id, "availabilityZone": x.zone, "cidrBlock": x.cidr, "isPublic": x.public,
                })).collect::<Vec<_>>(),
            }})),
        );
        if !provisioned {
            common.requeue_after_seconds = Some(5);
        }
        Ok(ClusterStatus {
            provisioned,
            control_plane_endpoint: endpoint,
            failure_domains,
            common,
        })
    }

    fn delete_cluster(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let s = Scope::new(&ctx.cluster_name(&obj)?, obj);
        // CAPA's order: the load balancer, the security groups, then the network.
        let done =
            load_balancer::delete(&s)? && security_groups::delete(&s)? && network::delete(&s)?;
        let mut common = common(vec![], None);
        if !done {
            common.requeue_after_seconds = Some(3);
        }
        Ok(DeleteStatus { done, common })
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.owning_cluster(&obj)?;
        let machine = ctx.machine_view()?.ok_or_else(|| {
            wait(
                format!(
                    "waiting for the Machine controller to set an owner reference on {}",
                    obj.name()
                ),
                5,
            )
        })?;
        let Some(aws_cluster) = ctx.infrastructure_cluster_view()? else {
            return Ok(waiting(
                "WaitingForInfrastructureCluster",
                "the AWSCluster is not there yet",
            ));
        };
        if cluster.get("/status/initialization/infrastructureProvisioned")
            != Some(&Value::Bool(true))
        {
            return Ok(waiting(
                "WaitingForClusterInfrastructure",
                "the cluster's network and load balancer are not provisioned yet",
            ));
        }
        let s = Scope::new(cluster.name(), aws_cluster);
        let control_plane = machine.get(CONTROL_PLANE_LABEL).is_some();
        let instance = match instances::find(&s, &obj)? {
            Some(i) => i,
            None if instances::instance_id(&obj).is_some() => {
                return Ok(terminated(&obj, "the instance is gone from EC2"));
            }
            None => {
                let Some(data) = ctx.bootstrap_data.as_deref() else {
                    return Ok(waiting(
                        "WaitingForBootstrapData",
                        "the bootstrap provider has not made the data yet",
                    ));
                };
                instances::create(&s, &obj, &machine, control_plane, data)?
            }
        };
        let state = instance.text("instanceState/name").to_string();
        let mut patch = json!({"instanceState": state});
        match state.as_str() {
            "running" => {}
            "shutting-down" | "terminated" | "stopping" | "stopped"
                if instances::instance_id(&obj).is_some() =>
            {
                return Ok(terminated(
                    &obj,
                    &format!(
                        "the instance is {state}: it was stopped or terminated outside Cluster API"
                    ),
                ));
            }
            _ => {
                let mut c = common(
                    vec![condition(
                        "InstanceReady",
                        false,
                        "InstanceNotReady",
                        &format!("instance {} is {state}", instance.text("instanceId")),
                    )],
                    Some(patch),
                );
                c.requeue_after_seconds = Some(2);
                return Ok(MachineStatus::pending(c));
            }
        }
        let id = instance.text("instanceId");
        if control_plane {
            // Noted in status once done, so a resync of a running machine does not ask again.
            let registered = obj.str("/status/apiServerTarget") == id;
            instances::register(&s, id, registered)?;
        }
        let mut addresses = vec![];
        for (type_, path) in [
            ("InternalIP", "privateIpAddress"),
            ("ExternalIP", "ipAddress"),
            ("InternalDNS", "privateDnsName"),
            ("ExternalDNS", "dnsName"),
        ] {
            let a = instance.text(path);
            if !a.is_empty() {
                addresses.push(Address {
                    type_: type_.into(),
                    address: a.into(),
                });
            }
        }
        if control_plane {
            patch["apiServerTarget"] = json!(id);
        }
        let mut c = common(
            vec![
                condition("InstanceReady", true, "InstanceRunning", ""),
                condition("Ready", true, "Provisioned", ""),
            ],
            Some(patch),
        );
        // An instance terminated outside Cluster API is noticed by looking: CAPA waits for its
        // sync period (10 minutes) unless EC2's state-change events are wired to it; one
        // DescribeInstances per machine each half minute finds it sooner for little.
        c.requeue_after_seconds = Some(RUNNING_RESYNC_SECONDS);
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(instances::provider_id(&instance)),
            addresses,
            failure_domain: Some(instance.text("placement/availabilityZone").to_string())
                .filter(|z| !z.is_empty()),
            interruptible: false,
            common: c,
        })
    }

    fn delete_machine(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.cluster_name(&obj)?;
        let aws_cluster = ctx
            .infrastructure_cluster_view()?
            .unwrap_or_else(|| View(json!({})));
        let s = Scope::new(&cluster, aws_cluster);
        let control_plane = ctx
            .machine_view()?
            .is_some_and(|m| m.get(CONTROL_PLANE_LABEL).is_some());
        let done = instances::delete(&s, &obj, control_plane)?;
        let mut common = common(vec![], None);
        if !done {
            common.requeue_after_seconds = Some(2);
        }
        Ok(DeleteStatus { done, common })
    }
}

/// How often a running instance's state is looked at again.
const RUNNING_RESYNC_SECONDS: u32 = 30;

fn waiting(reason: &str, message: &str) -> MachineStatus {
    let mut c = common(
        vec![condition("InstanceReady", false, reason, message)],
        None,
    );
    c.requeue_after_seconds = Some(10);
    MachineStatus::pending(c)
}

/// An instance gone behind Cluster API's back. The machine stays provisioned (the contract's
/// flag is sticky) with its provider ID, and says it failed: a MachineHealthCheck replaces it
/// once its Node goes.
fn terminated(obj: &View, why: &str) -> MachineStatus {
    MachineStatus {
        provisioned: true,
        provider_id: Some(obj.str("/spec/providerID").to_string()),
        addresses: vec![],
        failure_domain: None,
        interruptible: false,
        common: common(
            vec![
                condition("InstanceReady", false, "InstanceTerminated", why),
                condition("Ready", false, "InstanceTerminated", why),
            ],
            Some(json!({"instanceState": "terminated"})),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;
    use capw_sdk::testing::{ContextBuilder, context};

    /// Unsupported options are refused naming their field, before any call is made (no host
    /// is installed here: a call would fail differently).
    #[test]
    fn unsupported_options_are_refused_naming_the_field() {
        for (spec, field) in [
            (
                json!({"bastion": {"enabled": true}}),
                "spec.bastion.enabled",
            ),
            (
                json!({"network": {"vpc": {"id": "vpc-1"}}}),
                "spec.network.vpc.id",
            ),
        ] {
            let ctx = context(json!({
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": spec,
            }))
            .cluster(json!({"metadata": {"name": "c"}}));
            match Aws::reconcile_cluster(ctx) {
                Err(ProviderError::InvalidSpec(m)) => assert!(m.starts_with(field), "{m}"),
                other => panic!("{field}: {:?}", other.map(|s| s.provisioned)),
            }
        }
    }
}
