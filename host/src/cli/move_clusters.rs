//! `capw move`: clusterctl move. The Clusters of a namespace and everything that belongs to
//! them go from one management API to another without touching the machines:
//!
//! 1. every Cluster is paused, and the move waits until its controller says so
//!    (`Paused=True` for the new generation), so no reconcile is in flight;
//! 2. the objects are copied in dependency order (owners before what they own), with their
//!    owner references re-linked to the new uids and their status written after the create.
//!    Each is read again from the source just before its copy, as clusterctl does: the graph
//!    was listed before the pause, and a Cluster copied from that listing would arrive
//!    unpaused, so the target's host would start on it while the rest is still being copied;
//! 3. the copies are unpaused, so the target's host adopts them;
//! 4. the originals are deleted with their finalizers removed first, so the source's
//!    providers do not delete the machines.
//!
//! What moves: every object of the Cluster API groups (`cluster.x-k8s.io` and its provider
//! groups) in the namespace, the Secrets and ConfigMaps they own or that carry a moved
//! cluster's `cluster.x-k8s.io/cluster-name` label, and WasmProviders the target lacks.

use anyhow::Context as _;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The source management API (default: the usual kubeconfig lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The target management API: its host must already run the same providers (as
    /// `clusterctl init` would have installed them).
    #[arg(long)]
    pub to_kubeconfig: PathBuf,
    /// The namespace whose Clusters move.
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Print what would move, in the order it would, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for the source's controllers to report each Cluster paused.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub pause_timeout: Duration,
}

/// One object to move.
struct Node {
    ar: ApiResource,
    status: bool,
    obj: DynamicObject,
}

impl Node {
    fn label(&self) -> String {
        format!("{}/{}", self.ar.kind, self.obj.name_any())
    }
    fn uid(&self) -> String {
        self.obj.uid().unwrap_or_default()
    }
}

fn is_capi_group(group: &str) -> bool {
    group == "cluster.x-k8s.io" || group.ends_with(".cluster.x-k8s.io")
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let source = super::up::client_from(args.kubeconfig.as_deref()).await?;
    let target = super::up::client_from(Some(&args.to_kubeconfig)).await?;
    let ns = args.namespace.as_str();
    let (nodes, providers) = graph(&source, ns).await?;
    let clusters: Vec<String> = nodes
        .iter()
        .filter(|n| n.ar.group == "cluster.x-k8s.io" && n.ar.kind == "Cluster")
        .map(|n| n.obj.name_any())
        .collect();
    anyhow::ensure!(
        !clusters.is_empty(),
        "no Cluster in namespace {ns}: nothing to move (pass -n NAMESPACE)"
    );
    print_graph(&nodes, ns);
    if args.dry_run {
        return Ok(());
    }
    let cluster_ar = nodes
        .iter()
        .find(|n| n.ar.kind == "Cluster")
        .map(|n| n.ar.clone())
        .context("the Cluster kind")?;
    let paused_by_us = pause(&source, ns, &cluster_ar, &clusters, args.pause_timeout).await?;
    copy_providers(&target, &providers).await?;
    ensure_namespace(&target, ns).await?;
    let mut uids: HashMap<String, String> = HashMap::new();
    for n in &nodes {
        let created = create(&source, &target, ns, n, &uids)
            .await
            .with_context(|| format!("creating {} at the target", n.label()))?;
        uids.insert(n.uid(), created);
        println!("moved {}", n.label());
    }
    let api: Api<DynamicObject> = Api::namespaced_with(target.clone(), ns, &cluster_ar);
    for c in &paused_by_us {
        api.patch(
            c,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .with_context(|| format!("unpausing Cluster {c} at the target"))?;
    }
    for n in nodes.iter().rev() {
        delete_at_source(&source, ns, n)
            .await
            .with_context(|| format!("deleting {} at the source", n.label()))?;
    }
    println!(
        "moved {} objects of {} Cluster(s) from namespace {ns}; the source no longer holds them",
        nodes.len(),
        clusters.len()
    );
    Ok(())
}

/// The objects to move in dependency order, and the WasmProviders.
async fn graph(
    client: &Client,
    ns: &str,
) -> anyhow::Result<(Vec<Node>, Vec<(ApiResource, DynamicObject)>)> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the source's API")?;
    let mut capi: Vec<Node> = vec![];
    let mut extra: Vec<Node> = vec![];
    let mut providers = vec![];
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            let wanted = is_capi_group(&ar.group)
                || (ar.group.is_empty() && matches!(ar.kind.as_str(), "Secret" | "ConfigMap"))
                || (ar.group == "runtime.capw.dev" && ar.kind == "WasmProvider");
            if !wanted || !caps.supports_operation(kube::discovery::verbs::LIST) {
                continue;
            }
            let status = has_status(&caps);
            if caps.scope == Scope::Cluster {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                for obj in api.list(&ListParams::default()).await?.items {
                    providers.push((ar.clone(), obj));
                }
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            let list = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("listing {} in {ns}", ar.plural))?;
            for obj in list.items {
                let node = Node {
                    ar: ar.clone(),
                    status,
                    obj,
                };
                if ar.group.is_empty() {
                    extra.push(node);
                } else {
                    capi.push(node);
                }
            }
        }
    }
    // Secrets and ConfigMaps go along when a moved object owns them (transitively) or they
    // carry a moved cluster's name.
    let clusters: BTreeSet<String> = capi
        .iter()
        .filter(|n| n.ar.kind == "Cluster")
        .map(|n| n.obj.name_any())
        .collect();
    let mut moved: BTreeSet<String> = capi.iter().map(Node::uid).collect();
    loop {
        let before = extra.len();
        let (take, keep): (Vec<Node>, Vec<Node>) = extra.into_iter().partition(|n| {
            n.obj
                .owner_references()
                .iter()
                .any(|o| moved.contains(&o.uid))
                || n.obj
                    .labels()
                    .get(CLUSTER_NAME_LABEL)
                    .is_some_and(|c| clusters.contains(c))
        });
        moved.extend(take.iter().map(Node::uid));
        capi.extend(take);
        extra = keep;
        if extra.len() == before {
            break;
        }
    }
    Ok((order(capi), providers))
}

fn has_status(caps: &ApiCapabilities) -> bool {
    caps.subresources
        .iter()
        .any(|(ar, _)| ar.plural == "status")
}

/// Owners before what they own (Kahn's order); ties by kind, Clusters first, then by name.
fn order(nodes: Vec<Node>) -> Vec<Node> {
    let rank = |n: &Node| match n.ar.kind.as_str() {
        "Cluster" => 0,
        "ClusterClass" => 1,
        _ if n.ar.group.is_empty() => 3,
        _ => 2,
    };
    let uids: BTreeSet<String> = nodes.iter().map(Node::uid).collect();
    let mut pending: Vec<Node> = nodes;
    pending.sort_by_key(|n| (rank(n), n.ar.kind.clone(), n.obj.name_any()));
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = vec![];
    while !pending.is_empty() {
        let ready = pending.iter().position(|n| {
            n.obj
                .owner_references()
                .iter()
                .all(|o| !uids.contains(&o.uid) || done.contains(&o.uid))
        });
        // A cycle of owners cannot be created in order; take the first and go on.
        let i = ready.unwrap_or(0);
        let n = pending.remove(i);
        done.insert(n.uid());
        out.push(n);
    }
    out
}

fn print_graph(nodes: &[Node], ns: &str) {
    println!(
        "moving {} objects from namespace {ns}, in this order:",
        nodes.len()
    );
    let labels: BTreeMap<String, String> = nodes.iter().map(|n| (n.uid(), n.label())).collect();
    for n in nodes {
        let owners: Vec<&str> = n
            .obj
            .owner_references()
            .iter()
            .filter_map(|o| labels.get(&o.uid).map(String::as_str))
            .collect();
        if owners.is_empty() {
            println!("  {}", n.label());
        } else {
            println!("  {}  (owned by {})", n.label(), owners.join(", "));
        }
    }
}

/// Pauses the Clusters not paused already and waits until their controller reports them
/// paused; returns the ones it paused.
async fn pause(
    client: &Client,
    ns: &str,
    ar: &ApiResource,
    clusters: &[String],
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let mut paused = vec![];
    for name in clusters {
        let c = api.get(name).await?;
        if c.data.pointer("/spec/paused") == Some(&Value::Bool(true)) {
            continue;
        }
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .with_context(|| format!("pausing Cluster {name}"))?;
        paused.push(name.clone());
    }
    let deadline = Instant::now() + timeout;
    for name in clusters {
        loop {
            let c = api.get(name).await?;
            let generation = c.metadata.generation;
            let reported = c
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|cond| {
                        cond["type"] == "Paused"
                            && cond["status"] == "True"
                            && cond.get("observedGeneration").and_then(Value::as_i64) == generation
                    })
                });
            if reported {
                break;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "warning: Cluster {name} is paused, but no controller reported Paused=True within {timeout:?}; moving anyway (is the source's host running?)"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(paused)
}

async fn copy_providers(
    target: &Client,
    providers: &[(ApiResource, DynamicObject)],
) -> anyhow::Result<()> {
    for (ar, obj) in providers {
        let api: Api<DynamicObject> = Api::all_with(target.clone(), ar);
        if api.get_opt(&obj.name_any()).await?.is_some() {
            continue;
        }
        let mut copy = obj.clone();
        clean(&mut copy.metadata);
        copy.data.as_object_mut().map(|o| o.remove("status"));
        api.create(&PostParams::default(), &copy)
            .await
            .with_context(|| format!("creating WasmProvider {} at the target", obj.name_any()))?;
        println!("copied {}/{}", ar.kind, obj.name_any());
    }
    Ok(())
}

async fn ensure_namespace(target: &Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(target.clone());
    if api.get_opt(ns).await?.is_none() {
        let body = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        api.create(&PostParams::default(), &body).await?;
    }
    Ok(())
}

/// What the target makes again: identity, versions, timestamps, field ownership.
fn clean(meta: &mut kube::api::ObjectMeta) {
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = None;
    meta.managed_fields = None;
}

/// Creates `n` at the target, as the source holds it now, with its owners' new uids and its
/// status; returns its new uid.
async fn create(
    source: &Client,
    target: &Client,
    ns: &str,
    n: &Node,
    uids: &HashMap<String, String>,
) -> anyhow::Result<String> {
    let now = Api::<DynamicObject>::namespaced_with(source.clone(), ns, &n.ar)
        .get(&n.obj.name_any())
        .await
        .context("reading it again at the source")?;
    let status = now.data.get("status").cloned();
    let api: Api<DynamicObject> = Api::namespaced_with(target.clone(), ns, &n.ar);
    let mut copy = now;
    clean(&mut copy.metadata);
    if let Some(owners) = copy.metadata.owner_references.as_mut() {
        owners.retain(|o| uids.contains_key(&o.uid));
        for o in owners.iter_mut() {
            if let Some(new) = uids.get(&o.uid) {
                o.uid = new.clone();
            }
        }
    }
    let created = api.create(&PostParams::default(), &copy).await?;
    if n.status
        && let Some(status) = status
    {
        api.patch_status(
            &n.obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .context("writing its status")?;
    }
    created.uid().context("the created object has no uid")
}

async fn delete_at_source(source: &Client, ns: &str, n: &Node) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(source.clone(), ns, &n.ar);
    let name = n.obj.name_any();
    // Its finalizers as they are now, not as listed: the listing is from before the pause, and
    // a finalizer added since (a driver's, on a new provider object) would leave the object
    // Terminating at the source. Paused, no controller adds another before the delete.
    let Some(current) = api.get_opt(&name).await? else {
        return Ok(());
    };
    if !current.finalizers().is_empty() {
        match api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            r => {
                r?;
            }
        }
    }
    match api.delete(&name, &DeleteParams::background()).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        r => r.map(|_| ()).map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finalizer_added_after_the_listing_is_not_left_at_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let server = capw_apiserver::Server::start(capw_apiserver::Config::ephemeral(
            dir.path().join("api"),
        ))
        .await
        .unwrap();
        let client = super::super::up::client_from(Some(server.kubeconfig_path()))
            .await
            .unwrap();
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let mut obj = DynamicObject::new("moved", &ar);
        obj.metadata.namespace = Some("default".into());
        let listed = api.create(&PostParams::default(), &obj).await.unwrap();
        api.patch(
            "moved",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/late"]}})),
        )
        .await
        .unwrap();
        let node = Node {
            ar,
            status: false,
            obj: listed,
        };
        delete_at_source(&client, "default", &node).await.unwrap();
        let left = api.get_opt("moved").await.unwrap();
        assert!(left.is_none(), "left at the source: {left:?}");
    }
}
