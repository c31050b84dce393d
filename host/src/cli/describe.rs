//! `capw describe cluster NAME`: the Cluster, its infrastructure cluster, control plane and
//! workers (MachineDeployment → MachineSet → Machine, with ready counts) as a tree, with phase, readiness, the condition that explains it, and the plugin
//! version that last reconciled each provider object, like `clusterctl describe cluster`.

use anyhow::Context as _;
use capw_api::cluster::Cluster;
use capw_api::clusterclass::ClusterClass;
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, PLUGIN_VERSION_ANNOTATION};
use capw_api::machine::Machine;
use capw_reconcile::external::Resolver;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show a Cluster and everything under it as a tree.
    Cluster(ClusterArgs),
}

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The Cluster's name.
    pub name: String,
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// The management cluster's kubeconfig (default: the usual kubeconfig lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

struct Row {
    name: String,
    ready: String,
    phase: String,
    /// The plugin version that last reconciled it.
    version: String,
    /// The Kubernetes version it asks for (Machines, sets, deployments).
    kubernetes: String,
    message: String,
}

/// A row and the rows under it.
struct Node {
    row: Row,
    children: Vec<Node>,
}

fn leaf(row: Row) -> Node {
    Node {
        row,
        children: vec![],
    }
}

/// Draws `nodes` under `indent` with box-drawing prefixes.
fn draw(nodes: Vec<Node>, indent: &str, out: &mut Vec<(String, Row)>) {
    let n = nodes.len();
    for (i, node) in nodes.into_iter().enumerate() {
        let last = i + 1 == n;
        out.push((
            format!("{indent}{}", if last { "└─" } else { "├─" }),
            node.row,
        ));
        let deeper = format!("{indent}{}", if last { "  " } else { "│ " });
        draw(node.children, &deeper, out);
    }
}

/// `ready/desired` for a MachineSet or MachineDeployment, from its status.
fn counts(obj: &Value) -> String {
    let n = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    format!("{}/{}", n("/status/readyReplicas"), n("/spec/replicas"))
}

/// Condition types whose good state is False (upstream's negative polarity), as clusterctl
/// reads them.
const NEGATIVE: &[&str] = &[
    "Paused",
    "Deleting",
    "ScalingUp",
    "ScalingDown",
    "RollingOut",
    "Remediating",
    "Updating",
];

/// Whether a condition is not in its good state: True for most, False for [`NEGATIVE`] ones.
/// Only those get a message, as in clusterctl.
fn needs_attention(c: &Value) -> bool {
    let negative = c["type"].as_str().is_some_and(|t| NEGATIVE.contains(&t));
    let good = if negative { "False" } else { "True" };
    c["status"] != good
}

/// Readiness and the message of the first condition not in its good state (the one to read).
fn summary(status: Option<&Value>, ready_type: &str) -> (String, String) {
    let conds: Vec<&Value> = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let get = |t: &str| conds.iter().find(|c| c["type"] == t);
    let ready = get(ready_type)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("-")
        .to_string();
    // Deleting and scaling say what is happening, not what is wrong: the phase column shows
    // those.
    let why = conds
        .iter()
        .find(|c| {
            needs_attention(c)
                && !matches!(
                    c["type"].as_str(),
                    Some("Deleting" | "ScalingUp" | "ScalingDown")
                )
        })
        .map(|c| {
            let msg = c["message"].as_str().unwrap_or_default();
            format!(
                "{}: {}{}",
                c["type"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                if msg.is_empty() {
                    String::new()
                } else {
                    format!(" ({msg})")
                }
            )
        })
        .unwrap_or_default();
    (ready, why)
}

fn row(name: String, obj: &Value, ready_type: &str) -> Row {
    let (ready, message) = summary(obj.get("status"), ready_type);
    Row {
        name,
        ready,
        phase: obj
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        version: obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(PLUGIN_VERSION_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        kubernetes: obj
            .pointer("/spec/version")
            .or_else(|| obj.pointer("/spec/template/spec/version"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        message,
    }
}

async fn provider(
    resolver: &Resolver,
    ns: &str,
    r: &ContractVersionedObjectReference,
    ready_type: &str,
) -> Row {
    let label = format!("{}/{}", r.kind, r.name);
    match resolver.get(ns, r).await {
        Ok(Some((o, _))) => row(
            label,
            &serde_json::to_value(&*o).unwrap_or_default(),
            ready_type,
        ),
        Ok(None) => missing(label, "does not exist".into()),
        Err(e) => missing(label, e.to_string()),
    }
}

/// The row of an object that could not be read.
fn missing(name: String, message: String) -> Row {
    Row {
        name,
        ready: "-".into(),
        phase: String::new(),
        version: String::new(),
        kubernetes: String::new(),
        message,
    }
}

pub async fn run(cmd: Command) -> anyhow::Result<()> {
    let Command::Cluster(args) = cmd;
    let client = super::up::client_from(args.kubeconfig.as_deref()).await?;
    let ns = &args.namespace;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get_opt(&args.name)
        .await
        .context("reading the Cluster")?
        .with_context(|| format!("Cluster {ns}/{} does not exist", args.name))?;
    let resolver = Resolver::new(client.clone());
    let cv = serde_json::to_value(&cluster)?;
    let mut lines: Vec<(String, Row)> = vec![(
        String::new(),
        row(format!("Cluster/{}", args.name), &cv, "Available"),
    )];
    let mut children: Vec<Node> = vec![];
    // A managed topology shows its class first, as clusterctl does.
    if let Some(t) = &cluster.spec.topology {
        let class_ns = t.class_ref.namespace.clone().unwrap_or_else(|| ns.clone());
        let label = format!("ClusterClass/{}", t.class_ref.name);
        let classes: Api<ClusterClass> = Api::namespaced(client.clone(), &class_ns);
        let r = match classes.get_opt(&t.class_ref.name).await {
            Ok(Some(cc)) => row(label, &serde_json::to_value(&cc)?, "VariablesReady"),
            Ok(None) => missing(label, "does not exist".into()),
            Err(e) => missing(label, e.to_string()),
        };
        children.push(leaf(r));
    }
    if let Some(r) = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        children.push(leaf(provider(&resolver, ns, r, "Ready").await));
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let mut all = machines
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={}", args.name)))
        .await
        .context("listing Machines")?
        .items;
    all.sort_by_key(|m| m.name_any());
    let machine_rows = async |ms: Vec<&Machine>| {
        let mut out = vec![];
        for m in ms {
            let mv = serde_json::to_value(m).unwrap_or_default();
            let mut r = row(format!("Machine/{}", m.name_any()), &mv, "Ready");
            let infra = provider(&resolver, ns, &m.spec.infrastructure_ref, "Ready").await;
            r.version = infra.version;
            if r.message.is_empty() {
                r.message = infra.message;
            }
            out.push(leaf(r));
        }
        out
    };
    if let Some(r) = cluster
        .spec
        .control_plane_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        let cp = provider(&resolver, ns, r, "Available").await;
        let cps = machine_rows(
            all.iter()
                .filter(|m| m.labels().contains_key(CONTROL_PLANE_LABEL))
                .collect(),
        )
        .await;
        children.push(Node {
            row: cp,
            children: cps,
        });
    }
    // Workers: MachineDeployment → MachineSet → Machine, then stand-alone sets and Machines.
    let of_cluster =
        |o: &Value| o.pointer("/spec/clusterName").and_then(Value::as_str) == Some(&args.name);
    let list = async |plural: &str| -> anyhow::Result<Vec<Value>> {
        let ar = kube::api::ApiResource {
            group: "cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: String::new(),
            plural: plural.into(),
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let mut items: Vec<Value> = api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {plural}"))?
            .items
            .iter()
            .map(|o| serde_json::to_value(o).unwrap_or_default())
            .filter(|o| of_cluster(o))
            .collect();
        items.sort_by_key(|o| {
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        });
        Ok(items)
    };
    let deployments = list("machinedeployments").await?;
    let sets = list("machinesets").await?;
    let uid = |o: &Value| {
        o.pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let controlled_by = |o: &Value, owner: &str| {
        o.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter()
                    .any(|r| r["controller"] == true && r["uid"] == owner)
            })
    };
    let machine_uid_owner = |m: &Machine, owner: &str| {
        m.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == owner)
    };
    let set_node = async |set: &Value| -> Node {
        let name = set
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut r = row(format!("MachineSet/{name}"), set, "MachinesReady");
        r.ready = counts(set);
        let owner = uid(set);
        Node {
            row: r,
            children: machine_rows(
                all.iter()
                    .filter(|m| machine_uid_owner(m, &owner))
                    .collect(),
            )
            .await,
        }
    };
    let mut workers = vec![];
    for d in &deployments {
        let name = d
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut r = row(format!("MachineDeployment/{name}"), d, "Available");
        r.ready = counts(d);
        let owner = uid(d);
        let mut kids = vec![];
        for s in sets.iter().filter(|s| controlled_by(s, &owner)) {
            kids.push(set_node(s).await);
        }
        workers.push(Node {
            row: r,
            children: kids,
        });
    }
    let set_uids: Vec<String> = sets.iter().map(uid).collect();
    let deployment_uids: Vec<String> = deployments.iter().map(uid).collect();
    for s in sets
        .iter()
        .filter(|s| !deployment_uids.iter().any(|d| controlled_by(s, d)))
    {
        workers.push(set_node(s).await);
    }
    workers.extend(
        machine_rows(
            all.iter()
                .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
                .filter(|m| !set_uids.iter().any(|u| machine_uid_owner(m, u)))
                .collect(),
        )
        .await,
    );
    if !workers.is_empty() {
        children.push(Node {
            row: Row {
                name: "Workers".into(),
                ready: String::new(),
                phase: String::new(),
                version: String::new(),
                kubernetes: String::new(),
                message: String::new(),
            },
            children: workers,
        });
    }
    draw(children, "", &mut lines);
    let width = lines
        .iter()
        .map(|(p, r)| p.chars().count() + r.name.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<width$}  {:<6}  {:<12}  {:<9}  {:<24}  MESSAGE",
        "NAME", "READY", "PHASE", "VERSION", "PLUGIN"
    );
    for (prefix, r) in lines {
        // Width counts characters, so the box-drawing prefixes line up.
        let name = format!("{prefix}{}", r.name);
        println!(
            "{:<width$}  {:<6}  {:<12}  {:<9}  {:<24}  {}",
            name, r.ready, r.phase, r.kubernetes, r.version, r.message
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(t: &str, s: &str, reason: &str) -> Value {
        json!({"type": t, "status": s, "reason": reason, "message": ""})
    }

    #[test]
    fn a_condition_in_its_good_state_has_no_message() {
        let status = json!({"conditions": [
            cond("Available", "True", "Available"),
            cond("RollingOut", "False", "NotRollingOut"),
            cond("Paused", "False", "NotPaused"),
        ]});
        assert_eq!(
            summary(Some(&status), "Available"),
            ("True".to_string(), String::new())
        );
    }

    #[test]
    fn the_first_condition_out_of_its_good_state_is_the_message() {
        let status = json!({"conditions": [
            cond("Available", "True", "Available"),
            cond("RollingOut", "True", "RollingOut"),
            cond("MachinesReady", "False", "NotReady"),
        ]});
        assert_eq!(
            summary(Some(&status), "Available").1,
            "RollingOut: RollingOut"
        );
        let status = json!({"conditions": [cond("InfrastructureReady", "Unknown", "Waiting")]});
        assert_eq!(
            summary(Some(&status), "Ready").1,
            "InfrastructureReady: Waiting"
        );
    }
}
