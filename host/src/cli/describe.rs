//! `capw describe cluster NAME`: the Cluster, its infrastructure cluster, control plane and
//! Machines as a tree, with phase, readiness, the condition that explains it, and the plugin
//! version that last reconciled each provider object, like `clusterctl describe cluster`.

use anyhow::Context as _;
use capw::api::cluster::Cluster;
use capw::api::common::ContractVersionedObjectReference;
use capw::api::common::names::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, PLUGIN_VERSION_ANNOTATION,
};
use capw::api::machine::Machine;
use capw::controllers::external::Resolver;
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
    version: String,
    message: String,
}

/// Readiness and the message of the first condition that is not True (the one to read).
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
    let why = conds
        .iter()
        .find(|c| {
            c["status"] == "False"
                && !matches!(
                    c["type"].as_str(),
                    Some("Paused" | "Deleting" | "ScalingUp" | "ScalingDown")
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
            &serde_json::to_value(&o).unwrap_or_default(),
            ready_type,
        ),
        Ok(None) => Row {
            name: label,
            ready: "-".into(),
            phase: String::new(),
            version: String::new(),
            message: "does not exist".into(),
        },
        Err(e) => Row {
            name: label,
            ready: "-".into(),
            phase: String::new(),
            version: String::new(),
            message: e.to_string(),
        },
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
    let mut children: Vec<(Row, Vec<Row>)> = vec![];
    if let Some(r) = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        children.push((provider(&resolver, ns, r, "Ready").await, vec![]));
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
            out.push(r);
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
        children.push((cp, cps));
    }
    let workers = machine_rows(
        all.iter()
            .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
            .collect(),
    )
    .await;
    if !workers.is_empty() {
        children.push((
            Row {
                name: "Workers".into(),
                ready: String::new(),
                phase: String::new(),
                version: String::new(),
                message: String::new(),
            },
            workers,
        ));
    }
    let n = children.len();
    for (i, (parent, kids)) in children.into_iter().enumerate() {
        let last = i + 1 == n;
        lines.push((if last { "└─" } else { "├─" }.to_string(), parent));
        let m = kids.len();
        for (j, k) in kids.into_iter().enumerate() {
            let prefix = format!(
                "{}{}",
                if last { "  " } else { "│ " },
                if j + 1 == m { "└─" } else { "├─" }
            );
            lines.push((prefix, k));
        }
    }
    let width = lines
        .iter()
        .map(|(p, r)| p.chars().count() + r.name.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<width$}  {:<6}  {:<12}  {:<24}  MESSAGE",
        "NAME", "READY", "PHASE", "PLUGIN"
    );
    for (prefix, r) in lines {
        // Width counts characters, so the box-drawing prefixes line up.
        let name = format!("{prefix}{}", r.name);
        println!(
            "{:<width$}  {:<6}  {:<12}  {:<24}  {}",
            name, r.ready, r.phase, r.version, r.message
        );
    }
    Ok(())
}
