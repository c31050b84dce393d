//! Provider objects as core finds them: resolved through their CRD's contract label (read
//! through [`capw_api::contract`]), cached, and watched dynamically once core first reads a kind
//! (upstream's "external tracker").

use super::fanout::Fanout;
use capw_api::common::ContractVersionedObjectReference;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a provider object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// No CRD serves the kind, or its contract label is missing.
    #[error(
        "cannot find any versions matching contract versions [v1beta2 v1beta1] for {kind}.{group}: the CRD is missing or its contract version label(s) (cluster.x-k8s.io/v1beta2) are either missing or empty"
    )]
    NoContract { group: String, kind: String },
    /// The object is controlled by something that did not make the one adopting it.
    #[error("{0}")]
    NotAdopted(String),
}

pub use capw_api::contract::Contract;

#[derive(Debug, Clone)]
pub struct Resolved {
    pub ar: ApiResource,
    pub contract: Contract,
}

/// Resolves provider kinds and remembers them, and keeps a cache (a reflector) of every kind
/// read through it, so core reads provider objects from memory after the first list.
pub struct Resolver {
    client: Client,
    kinds: Mutex<HashMap<(String, String), Resolved>>,
    caches: Mutex<HashMap<(String, String), KindCache>>,
    created: Created,
    served: Served,
}

/// What the driver puts on an object of each kind it serves, by group and kind.
#[derive(Default)]
struct Served(Mutex<HashMap<(String, String), Marks>>);

/// What the driver puts on a provider object before its first plugin call: its finalizer and
/// the version of the plugin about to be called. An object the host creates of a kind the
/// driver serves is born with them ([`Resolver::mark`]), which saves the driver's first write
/// of each clone; the driver puts them on any other object itself, as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    pub finalizer: String,
    /// `<plugin>/<version>`, for the plugin version annotation.
    pub version: String,
}

/// Objects the host just created, by kind, namespace and name, until their kind's cache shows
/// them: a reader that looks for one in that gap (a Machine whose MachineSet has just written
/// its clones) finds it, instead of reporting it missing and writing that into a status
/// only to write the truth a moment later. An entry goes once the cache shows the object, or
/// after [`CREATED_TTL`] (an object created and deleted again before the cache saw it).
#[derive(Default)]
struct Created {
    pending: AtomicUsize,
    objects: Mutex<HashMap<ObjectRef<DynamicObject>, Noted>>,
}

/// When an object was created, and what its creation returned.
type Noted = (Instant, Arc<DynamicObject>);

/// How long a created object stands in for its cache's view (the cache is a watch event
/// behind the write: milliseconds, a second or two under load).
const CREATED_TTL: Duration = Duration::from_secs(10);

struct KindCache {
    store: Store<DynamicObject>,
    ready: Arc<AtomicBool>,
    changes: Arc<Fanout<DynamicObject>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The apiVersion a contract label allows: the highest Kubernetes-sorted of `v1beta1_v1beta2`.
fn pick_version(label: &str) -> Option<String> {
    fn rank(v: &str) -> (u32, u32, u32) {
        let rest = v.trim_start_matches('v');
        let major: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[major.len()..];
        let (stage, n) = if let Some(n) = after.strip_prefix("alpha") {
            (0, n)
        } else if let Some(n) = after.strip_prefix("beta") {
            (1, n)
        } else {
            (2, "0")
        };
        (major.parse().unwrap_or(0), stage, n.parse().unwrap_or(0))
    }
    label
        .split('_')
        .filter(|v| !v.is_empty())
        .max_by_key(|v| rank(v))
        .map(str::to_string)
}

impl Resolver {
    pub fn new(client: Client) -> Arc<Resolver> {
        Arc::new(Resolver {
            client,
            kinds: Mutex::new(HashMap::new()),
            caches: Mutex::new(HashMap::new()),
            created: Created::default(),
            served: Served::default(),
        })
    }

    /// The kinds the driver serves now, and what it puts on their objects; kinds left out
    /// are served no more.
    pub fn serve(&self, marks: HashMap<(String, String), Marks>) {
        *lock(&self.served.0) = marks;
    }

    /// Gives `obj`, of kind `r`, which the host is about to create, what the driver would put
    /// on it first, when the driver serves the kind.
    pub fn mark(&self, r: &Resolved, obj: &mut DynamicObject) {
        self.served.mark(r, obj);
    }

    pub async fn resolve(&self, group: &str, kind: &str) -> Result<Resolved, ExternalError> {
        let key = (group.to_string(), kind.to_string());
        if let Some(r) = lock(&self.kinds).get(&key) {
            return Ok(r.clone());
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let list = crds.list(&ListParams::default()).await?;
        let crd = list
            .items
            .iter()
            .find(|c| c.spec.group == group && c.spec.names.kind == kind);
        let labels = crd.and_then(|c| c.metadata.labels.as_ref());
        let found = labels.and_then(|l| {
            [
                ("cluster.x-k8s.io/v1beta2", Contract::V1Beta2),
                ("cluster.x-k8s.io/v1beta1", Contract::V1Beta1),
            ]
            .iter()
            .find_map(|(k, c)| l.get(*k).and_then(|v| pick_version(v)).map(|v| (v, *c)))
        });
        let (Some(crd), Some((version, contract))) = (crd, found) else {
            return Err(ExternalError::NoContract {
                group: group.into(),
                kind: kind.into(),
            });
        };
        let r = Resolved {
            ar: ApiResource {
                group: group.into(),
                version: version.clone(),
                api_version: format!("{group}/{version}"),
                kind: kind.into(),
                plural: crd.spec.names.plural.clone(),
            },
            contract,
        };
        lock(&self.kinds).insert(key, r.clone());
        Ok(r)
    }

    pub fn api(&self, ns: &str, r: &Resolved) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &r.ar)
    }

    /// Starts the cache of a kind (once); every change it sees goes to the subscribers.
    fn cache(&self, r: &Resolved) -> (Store<DynamicObject>, bool, Arc<Fanout<DynamicObject>>) {
        let key = (r.ar.group.clone(), r.ar.kind.clone());
        let mut caches = lock(&self.caches);
        if let Some(c) = caches.get(&key) {
            return (
                c.store.clone(),
                c.ready.load(Ordering::Acquire),
                c.changes.clone(),
            );
        }
        let writer = Writer::new(r.ar.clone());
        let store = writer.as_reader();
        let ready = Arc::new(AtomicBool::new(false));
        let changes: Arc<Fanout<DynamicObject>> = Arc::default();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &r.ar);
        let fanout = changes.clone();
        let listed = ready.clone();
        tokio::spawn(async move {
            let mut stream = reflector(
                writer,
                watcher(api, watcher::Config::default())
                    .modify(crate::trim::for_cache::<DynamicObject>),
            )
            .default_backoff()
            .boxed();
            // Ready is read off the reflector's own events, not awaited with
            // `Store::wait_until_ready`: kube-runtime wakes only the last task waiting on a
            // store, and a controller driven from this store ([`Resolver::share`]) waits on it
            // too.
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => listed.store(true, Ordering::Release),
                    Ok(
                        watcher::Event::Apply(obj)
                        | watcher::Event::InitApply(obj)
                        | watcher::Event::Delete(obj),
                    ) => fanout.send(&Arc::new(obj)),
                    Ok(watcher::Event::Init) | Err(_) => {}
                }
            }
        });
        caches.insert(
            key,
            KindCache {
                store: store.clone(),
                ready,
                changes: changes.clone(),
            },
        );
        (store, false, changes)
    }

    /// The cache of kind `r` for a controller of its own: its store, and every object it
    /// holds now followed by every change from now on, so each object is seen at least once.
    /// One reflector per kind then serves core and the driver alike.
    pub fn share(
        &self,
        r: &Resolved,
    ) -> (
        Store<DynamicObject>,
        impl futures::Stream<Item = Arc<DynamicObject>> + Send + 'static,
    ) {
        let (store, _, changes) = self.cache(r);
        // Subscribed before the snapshot: a change in between arrives twice, none is lost.
        let rx = changes.subscribe();
        let now = store.state();
        let stream = futures::stream::iter(now)
            .chain(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        (store, stream)
    }

    /// Every change of objects of kind `r`, from now on.
    pub fn subscribe(
        &self,
        r: &Resolved,
    ) -> tokio::sync::mpsc::UnboundedReceiver<Arc<DynamicObject>> {
        self.cache(r).2.subscribe()
    }

    /// The referenced object, or `None` when it does not exist. Served from the kind's cache
    /// once it has listed, as the cache's own shared copy: every caller only reads it, and a
    /// deep copy per read was 1 % of the host's CPU at 1000 clusters. A change the cache has not
    /// seen yet arrives as a watch event, which reconciles the reader again.
    pub async fn get(
        &self,
        ns: &str,
        reference: &ContractVersionedObjectReference,
    ) -> Result<Option<(Arc<DynamicObject>, Resolved)>, ExternalError> {
        let r = self.resolve(&reference.api_group, &reference.kind).await?;
        let (store, ready, _) = self.cache(&r);
        if ready {
            let key = ObjectRef::new_with(&reference.name, r.ar.clone()).within(ns);
            let found = store.get(&key);
            let found = self.created.settle(&key, found);
            return Ok(found.map(|o| (o, r)));
        }
        // Read before the watch has listed: trimmed as the cache would hold it.
        Ok(self
            .api(ns, &r)
            .get_opt(&reference.name)
            .await?
            .map(|mut o| {
                crate::trim::for_cache(&mut o);
                (Arc::new(o), r)
            }))
    }

    /// Notes `obj`, of kind `r`, as created by this host: [`Resolver::get`] finds it before
    /// the kind's cache shows it.
    pub fn created(&self, r: &Resolved, mut obj: DynamicObject) {
        crate::trim::for_cache(&mut obj);
        let Some(name) = obj.metadata.name.clone() else {
            return;
        };
        let mut key = ObjectRef::new_with(&name, r.ar.clone());
        if let Some(ns) = obj.metadata.namespace.as_deref() {
            key = key.within(ns);
        }
        let now = Instant::now();
        let mut objects = lock(&self.created.objects);
        objects.retain(|_, (at, _)| now.duration_since(*at) < CREATED_TTL);
        objects.insert(key, (now, Arc::new(obj)));
        self.created.pending.store(objects.len(), Ordering::Release);
    }
}

impl Served {
    fn mark(&self, r: &Resolved, obj: &mut DynamicObject) {
        let key = (r.ar.group.clone(), r.ar.kind.clone());
        let Some(marks) = lock(&self.0).get(&key).cloned() else {
            return;
        };
        let finalizers = obj.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.contains(&marks.finalizer) {
            finalizers.push(marks.finalizer);
        }
        obj.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                capw_api::common::names::PLUGIN_VERSION_ANNOTATION.to_string(),
                marks.version,
            );
    }
}

impl Created {
    /// What a read of `key` finds: the cache's object once it has one (the note goes), else a
    /// note younger than [`CREATED_TTL`].
    fn settle(
        &self,
        key: &ObjectRef<DynamicObject>,
        cached: Option<Arc<DynamicObject>>,
    ) -> Option<Arc<DynamicObject>> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return cached;
        }
        let mut objects = lock(&self.objects);
        let noted = objects.remove(key);
        let found = match (cached, noted) {
            (Some(c), _) => Some(c),
            (None, Some((at, obj))) if at.elapsed() < CREATED_TTL => {
                objects.insert(key.clone(), (at, obj.clone()));
                Some(obj)
            }
            (None, _) => None,
        };
        self.pending.store(objects.len(), Ordering::Release);
        found
    }
}

/// Maps a changed provider object to the objects of type `K` to reconcile.
pub type OwnerMap<K> = Arc<dyn Fn(&DynamicObject) -> Vec<ObjectRef<K>> + Send + Sync>;

/// Starts a watch per provider kind the first time a controller reads one, and turns each
/// change into a reconcile request for the owning object of type `K`.
pub struct Tracker<K: Resource<DynamicType = ()>> {
    resolver: Arc<Resolver>,
    seen: Mutex<HashSet<(String, String)>>,
    tx: tokio::sync::mpsc::UnboundedSender<ObjectRef<K>>,
    owner: OwnerMap<K>,
}

impl<K: Resource<DynamicType = ()> + Send + Sync + 'static> Tracker<K> {
    /// A tracker sending reconcile requests into `tx`.
    pub fn new(
        resolver: Arc<Resolver>,
        owner: OwnerMap<K>,
        tx: tokio::sync::mpsc::UnboundedSender<ObjectRef<K>>,
    ) -> Arc<Tracker<K>> {
        Arc::new(Tracker {
            resolver,
            seen: Mutex::new(HashSet::new()),
            tx,
            owner,
        })
    }

    pub fn ensure(&self, r: &Resolved) {
        let key = (r.ar.group.clone(), r.ar.kind.clone());
        if !lock(&self.seen).insert(key) {
            return;
        }
        let mut changes = self.resolver.subscribe(r);
        let tx = self.tx.clone();
        let owner = self.owner.clone();
        tokio::spawn(async move {
            while let Some(obj) = changes.recv().await {
                for r in owner(&obj) {
                    if tx.send(r).is_err() {
                        return;
                    }
                }
            }
        });
    }
}

/// The owner reference of `kind` in `cluster.x-k8s.io`, as an ObjectRef in the object's namespace.
pub fn owner_of_kind<K: Resource<DynamicType = ()>>(
    obj: &DynamicObject,
    kind: &str,
) -> Option<ObjectRef<K>> {
    let ns = obj.metadata.namespace.clone()?;
    obj.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn the_newest_version_of_a_contract_label_wins() {
        assert_eq!(pick_version("v1beta1_v1beta2").as_deref(), Some("v1beta2"));
        assert_eq!(pick_version("v1alpha4_v1beta1").as_deref(), Some("v1beta1"));
        assert_eq!(pick_version("v1beta2_v1").as_deref(), Some("v1"));
        assert_eq!(pick_version(""), None);
    }

    fn key(name: &str) -> ObjectRef<DynamicObject> {
        let ar = ApiResource {
            group: "bootstrap.cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmConfig".into(),
            plural: "kubeadmconfigs".into(),
        };
        ObjectRef::new_with(name, ar).within("ns")
    }

    /// An object of a served kind is born with the driver's finalizer (kept once, after any
    /// of its own) and the plugin version; other kinds, and kinds served no more, get nothing.
    #[test]
    fn a_clone_of_a_served_kind_is_born_with_the_drivers_marks() {
        let served = Served::default();
        let ar = key("a").dyntype;
        let r = Resolved {
            ar: ar.clone(),
            contract: Contract::V1Beta2,
        };
        let marks = Marks {
            finalizer: "kubeadmconfig.bootstrap.cluster.x-k8s.io".into(),
            version: "bootstrap/0.1.0".into(),
        };
        let born = |served: &Served| {
            let mut obj = DynamicObject::new("a", &ar);
            obj.metadata.finalizers = Some(vec!["theirs".into()]);
            served.mark(&r, &mut obj);
            obj
        };
        assert_eq!(
            born(&served).metadata.finalizers,
            Some(vec!["theirs".into()])
        );
        assert_eq!(born(&served).metadata.annotations, None);
        *served.0.lock().unwrap() = HashMap::from([(
            ("bootstrap.cluster.x-k8s.io".into(), "KubeadmConfig".into()),
            marks,
        )]);
        let obj = born(&served);
        assert_eq!(
            obj.metadata.finalizers,
            Some(vec![
                "theirs".into(),
                "kubeadmconfig.bootstrap.cluster.x-k8s.io".into()
            ])
        );
        assert_eq!(
            obj.annotations()
                .get("runtime.capw.dev/plugin-version")
                .map(String::as_str),
            Some("bootstrap/0.1.0")
        );
        let mut twice = obj.clone();
        served.mark(&r, &mut twice);
        assert_eq!(twice.metadata.finalizers, obj.metadata.finalizers);
    }

    /// A created object stands in until the cache shows it, then the cache's copy is read and
    /// the note goes; a note past its time stands in for nothing.
    #[test]
    fn a_created_object_is_found_until_the_cache_shows_it() {
        let created = Created::default();
        let obj = Arc::new(DynamicObject::new("a", &key("a").dyntype));
        let noted = |at| {
            created
                .objects
                .lock()
                .unwrap()
                .insert(key("a"), (at, obj.clone()));
            created.pending.store(1, Ordering::Release);
        };
        noted(Instant::now());
        assert!(created.settle(&key("a"), None).is_some());
        assert!(created.settle(&key("b"), None).is_none());
        let mut cached = DynamicObject::new("a", &key("a").dyntype);
        cached.metadata.resource_version = Some("7".into());
        let got = created.settle(&key("a"), Some(Arc::new(cached)));
        assert_eq!(got.unwrap().metadata.resource_version.as_deref(), Some("7"));
        assert!(created.settle(&key("a"), None).is_none(), "the note went");
        assert_eq!(created.pending.load(Ordering::Acquire), 0);

        let Some(old) = Instant::now().checked_sub(CREATED_TTL) else {
            return;
        };
        noted(old);
        assert!(created.settle(&key("a"), None).is_none());
    }
}
