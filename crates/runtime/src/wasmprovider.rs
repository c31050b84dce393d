//! The WasmProvider controller: loads the named component (checking its sha256 and its
//! imports against the grants), installs the CRDs its `metadata()` declares, swaps it in as the
//! active version, and reports what it did in status. A finalizer keeps a WasmProvider while
//! objects of its kinds still exist.

use crate::plugin::Plugin;
use crate::slot::{Rollout, Slot};
use crate::{Capability, Limits, Registry, Runtime};
use capw_api::contract::conditions::{reasons, types};
use capw_api::wasmprovider::{Condition, WasmProvider, WasmProviderStatus};
use capw_reconcile::events::BoundedRecorder;
use capw_reconcile::skeleton::{Failure, Skeleton, finalizer_wait, write_status};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The finalizer that keeps a WasmProvider until the objects of its kinds are gone.
pub const FINALIZER: &str = "runtime.capw.dev/objects-remain";
/// The kind this controller reconciles.
pub const OWNS: &str = "WasmProvider";
const MANAGER: &str = "capw-runtime";

/// Failures of one reconcile; all are retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A CRD the plugin declares could not be decoded.
    #[error("CRD {index} of the plugin is not a CustomResourceDefinition: {message}")]
    BadCrd { index: usize, message: String },
    /// Applying a CRD would take over fields another field manager owns.
    #[error(
        "crds[{index}]: CRD {crd} is managed by {managers}, and applying it would take over their fields ({conflict}); a plugin installs only CRDs of its own: choose other names, or an admin moves the kind with spec.takeOverKinds"
    )]
    CrdOwned {
        index: usize,
        crd: String,
        managers: String,
        conflict: String,
    },
    /// Not a failure: deletion waits for the plugin's objects to go.
    #[error("{0}")]
    Waiting(String, Duration),
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<Error>>),
}

impl Failure for Error {
    fn wait_time(&self) -> Option<Duration> {
        match self {
            Error::Waiting(_, d) => Some(*d),
            Error::Finalizer(f) => finalizer_wait(f),
            _ => None,
        }
    }

    fn finalizer(e: kube::runtime::finalizer::Error<Self>) -> Self {
        Error::Finalizer(Box::new(e))
    }
}

/// What the controller needs.
pub struct Ctx {
    pub client: Client,
    pub plugins_dir: PathBuf,
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub recorder: BoundedRecorder,
    /// Kinds a plugin passed the ownership check for and is installing: two plugins loading at
    /// once cannot both find a kind free, and the lock is never held across an await.
    pub claims: std::sync::Mutex<std::collections::BTreeMap<String, crate::trust::Claim>>,
    /// The shared reconcile skeleton (span, finalizer, metrics, retries).
    pub skeleton: Skeleton,
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str, old: &[Condition]) -> Condition {
    capw_api::contract::conditions::updated(
        old,
        type_,
        capw_api::contract::conditions::status_str(ok),
        reason,
        message,
        None,
    )
}

/// `Active` after a version was not taken: the loaded one (if any) keeps serving.
fn still_active(loaded: bool, kept: &str, msg: &str, old: &[Condition]) -> Condition {
    let reason = if loaded { kept } else { "NotLoaded" };
    condition(types::ACTIVE, loaded, reason, msg, old)
}

/// The conditions of a version refused for `reason`: not validated, and the loaded one (if
/// any) kept serving (`kept` says why).
fn refused(reason: &str, msg: &str, loaded: bool, kept: &str, old: &[Condition]) -> Vec<Condition> {
    vec![
        condition(types::VALIDATED, false, reason, msg, old),
        still_active(loaded, kept, msg, old),
    ]
}

fn grants(wp: &WasmProvider) -> (BTreeSet<Capability>, Vec<String>) {
    let mut set: BTreeSet<Capability> = [Capability::LOG].into();
    let mut unknown = vec![];
    for c in &wp.spec.capabilities {
        match Capability::parse(c) {
            Some(cap) => {
                set.insert(cap);
            }
            None => unknown.push(c.clone()),
        }
    }
    (set, unknown)
}

/// The limits of each call, with the grants; and the first thing wrong with a grant.
fn limits(wp: &WasmProvider) -> (Limits, Option<String>) {
    let mut l = Limits::default();
    if let Some(spec) = &wp.spec.limits {
        if let Some(t) = spec.timeout_seconds {
            l.reconcile_timeout = Duration::from_secs(u64::from(t.max(1)));
        }
        if let Some(m) = spec.memory_mib {
            l.memory_bytes = (m.clamp(1, 256) as usize) << 20;
        }
    }
    let (grants, wrong) = crate::capabilities::grants(&wp.spec);
    l.grants = std::sync::Arc::new(grants);
    (l, wrong)
}

fn rollout(wp: &WasmProvider) -> Rollout {
    let mut r = Rollout::default();
    if let Some(spec) = &wp.spec.rollout {
        if let Some(b) = spec.bake_seconds {
            r.bake = Duration::from_secs(u64::from(b));
        }
        if let Some(m) = spec.max_failure_rate {
            r.max_failure_rate = m;
        }
    }
    r
}

/// Applies a CRD with server-side apply and waits (up to 10 s) until it is established.
async fn apply_crd(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    crd: &(impl serde::Serialize + std::fmt::Debug),
) -> Result<(), Error> {
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await?;
    established(api, name).await;
    Ok(())
}

async fn established(api: &Api<CustomResourceDefinition>, name: &str) {
    let established = kube::runtime::wait::await_condition(
        api.clone(),
        name,
        kube::runtime::conditions::is_crd_established(),
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), established).await;
}

/// The field manager a plugin's CRDs are applied under: one per plugin, so the API server
/// knows whose each field is, and one plugin's apply cannot silently take another's fields.
fn plugin_manager(plugin: &str) -> String {
    format!("capw-plugin-{plugin}")
}

/// Who else manages fields of `crd` outside its status: the managers a conflict is with.
/// [`MANAGER`] applied every plugin's CRDs before each plugin had its own manager; its fields
/// pass to the plugin that applies next.
fn other_managers(crd: &CustomResourceDefinition, own: &str) -> Vec<String> {
    let mut out: Vec<String> = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref().unwrap_or_default() != "status")
        .filter_map(|f| f.manager.clone())
        .filter(|m| m != own && m != MANAGER)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Installs (or updates) the plugin's CRDs with server-side apply under the plugin's own field
/// manager and waits until they serve. An apply that would take over fields another manager
/// owns is refused ([`Error::CrdOwned`]), unless the admin moved the CRD's kind to this plugin
/// (`spec.takeOverKinds`).
async fn install_crds(
    client: &Client,
    plugin: &Plugin,
    name: &str,
    take_over: &[String],
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let manager = plugin_manager(name);
    for (index, text) in plugin.metadata.crds.iter().enumerate() {
        let value: serde_json::Value = serde_json::from_str(text)
            .or_else(|_| serde_yaml::from_str(text))
            .map_err(|e| Error::BadCrd {
                index,
                message: e.to_string(),
            })?;
        let crd: CustomResourceDefinition =
            serde_json::from_value(value.clone()).map_err(|e| Error::BadCrd {
                index,
                message: e.to_string(),
            })?;
        let crd_name = crd.name_any();
        match api
            .patch(
                &crd_name,
                &PatchParams::apply(&manager),
                &Patch::Apply(&value),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api.get(&crd_name).await?;
                let others = other_managers(&existing, &manager);
                let moved =
                    take_over.contains(&format!("{}.{}", crd.spec.names.kind, crd.spec.group));
                if !others.is_empty() && !moved {
                    return Err(Error::CrdOwned {
                        index,
                        crd: crd_name,
                        managers: others.join(", "),
                        conflict: e.message,
                    });
                }
                api.patch(
                    &crd_name,
                    &PatchParams::apply(&manager).force(),
                    &Patch::Apply(&value),
                )
                .await?;
            }
            Err(e) => return Err(e.into()),
        }
        established(&api, &crd_name).await;
    }
    Ok(())
}

async fn set_status(
    api: &Api<WasmProvider>,
    wp: &WasmProvider,
    status: WasmProviderStatus,
) -> Result<(), Error> {
    write_status(api, &wp.name_any(), wp.status.as_ref(), &status).await?;
    Ok(())
}

fn counters(status: &mut WasmProviderStatus, slot: &Slot) {
    let p = slot.current();
    let c = &p.counters;
    status.calls = c.calls.load(Ordering::Relaxed);
    status.traps = c.traps.load(Ordering::Relaxed);
    status.timeouts = c.timeouts.load(Ordering::Relaxed);
    status.errors = c.errors.load(Ordering::Relaxed);
    status.log_lines = c.log_lines.load(Ordering::Relaxed);
    status.log_bytes = c.log_bytes.load(Ordering::Relaxed);
    status.log_dropped_bytes = c.log_dropped_bytes.load(Ordering::Relaxed);
}

/// `spec.module` inside the plugin directory: a relative path of plain components, which after
/// following links still lies under the directory. The host reads no other file for a plugin.
fn module_path(dir: &std::path::Path, module: &str) -> Result<std::path::PathBuf, String> {
    use std::path::Component;
    let rel = std::path::Path::new(module);
    let plain = !module.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    let outside = || {
        format!(
            "spec.module {module:?} is not a file inside the plugin directory {}: name a file relative to it, without `..` or a leading `/`",
            dir.display()
        )
    };
    if !plain {
        return Err(outside());
    }
    let path = dir.join(rel);
    // A missing file is reported when it is read; a present one must not be a link out.
    if let (Ok(real), Ok(root)) = (path.canonicalize(), dir.canonicalize())
        && !real.starts_with(&root)
    {
        return Err(outside());
    }
    Ok(path)
}

/// Ends the claim a plugin took on its kinds while it loaded.
fn release_claim(ctx: &Ctx, name: &str) {
    ctx.claims
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(name);
}

/// A version not taken for `reason`: its conditions, a Warning Event, the status; the loaded
/// version (if any) keeps serving, and nothing is tried again until the WasmProvider changes.
#[allow(clippy::too_many_arguments)]
async fn refuse_version(
    ctx: &Ctx,
    api: &Api<WasmProvider>,
    wp: &WasmProvider,
    mut status: WasmProviderStatus,
    old: &WasmProviderStatus,
    loaded: bool,
    reason: &str,
    msg: String,
    action: &str,
) -> Result<Action, Error> {
    status.conditions = refused(reason, &msg, loaded, "PreviousVersion", &old.conditions);
    let _ = ctx
        .recorder
        .publish(
            &Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(msg),
                action: action.into(),
                secondary: None,
            },
            &capw_reconcile::events::reference(wp, &()),
        )
        .await;
    set_status(api, wp, status).await?;
    Ok(Action::await_change())
}

async fn apply(wp: Arc<WasmProvider>, ctx: &Ctx) -> Result<Action, Error> {
    let name = wp.name_any();
    let api: Api<WasmProvider> = Api::all(ctx.client.clone());
    let old = wp.status.clone().unwrap_or_default();
    let mut status = WasmProviderStatus {
        observed_generation: wp.metadata.generation,
        ..old.clone()
    };
    let slot = ctx.registry.get(&name);
    let (granted, unknown) = grants(&wp);
    status.granted_capabilities = granted.iter().map(|c| c.name().to_string()).collect();
    let (limits, wrong_grant) = limits(&wp);
    crate::capabilities::show(&granted, &limits.grants, &mut status);
    let reference = capw_reconcile::events::reference(&*wp, &());
    let path = match module_path(&ctx.plugins_dir, &wp.spec.module) {
        Ok(p) => p,
        Err(msg) => {
            status.conditions = refused(
                "ModuleOutsidePluginDir",
                &msg,
                slot.is_some(),
                "KeptRunning",
                &old.conditions,
            );
            set_status(&api, &wp, status).await?;
            return Ok(Action::await_change());
        }
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!(
                "cannot read {}: {e}; the active version (if any) keeps running",
                path.display()
            );
            status.conditions = vec![
                condition(
                    types::VALIDATED,
                    false,
                    reasons::MODULE_MISSING,
                    &msg,
                    &old.conditions,
                ),
                still_active(slot.is_some(), "KeptRunning", &msg, &old.conditions),
                condition(
                    types::DEGRADED,
                    true,
                    reasons::MODULE_MISSING,
                    &msg,
                    &old.conditions,
                ),
            ];
            set_status(&api, &wp, status).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    if !unknown.is_empty() {
        let msg = format!(
            "unknown capabilities {unknown:?}: known are {}",
            Capability::known().join(", ")
        );
        status.conditions = vec![condition(
            types::VALIDATED,
            false,
            "UnknownCapability",
            &msg,
            &old.conditions,
        )];
        set_status(&api, &wp, status).await?;
        return Ok(Action::await_change());
    }
    if let Some(e) = wrong_grant {
        let msg = format!("WasmProvider {name}: {e}");
        status.conditions = refused(
            "InvalidGrant",
            &msg,
            slot.is_some(),
            "KeptRunning",
            &old.conditions,
        );
        set_status(&api, &wp, status).await?;
        return Ok(Action::await_change());
    }
    let digest = crate::cache::sha256_hex(&bytes);
    let current = slot.as_ref().map(|s| s.current());
    if let Some(s) = &slot
        && s.is_quarantined(&digest)
    {
        let msg = format!(
            "digest {digest} was rolled back and stays quarantined until the module changes"
        );
        status.conditions = vec![
            condition(
                types::VALIDATED,
                false,
                reasons::QUARANTINED,
                &msg,
                &old.conditions,
            ),
            condition(
                types::ACTIVE,
                true,
                "PreviousVersion",
                "the previous version keeps serving",
                &old.conditions,
            ),
            condition(
                types::ROLLED_BACK,
                true,
                reasons::BAKE_FAILED,
                &msg,
                &old.conditions,
            ),
        ];
        counters(&mut status, s);
        set_status(&api, &wp, status).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    // The same module under the same grants and limits: nothing to load. A changed grant (or
    // limit) with the same module is loaded again below, so what status shows is in force.
    if current
        .as_ref()
        .is_some_and(|c| c.digest == digest && c.grants == granted && c.limits == limits)
    {
        if let Some(s) = &slot {
            counters(&mut status, s);
            status.previous_digests = s.previous_digests();
            if let Some(rb) = s.rollbacks().last() {
                let msg = format!(
                    "rolled back from {} to {}: {}",
                    rb.from_version, rb.to_version, rb.reason
                );
                status.conditions.retain(|c| c.type_ != types::ROLLED_BACK);
                status.conditions.push(condition(
                    types::ROLLED_BACK,
                    true,
                    reasons::BAKE_FAILED,
                    &msg,
                    &old.conditions,
                ));
            }
        }
        set_status(&api, &wp, status).await?;
        return Ok(Action::requeue(Duration::from_secs(15)));
    }
    let loaded = Plugin::load(
        &ctx.runtime.engine,
        &ctx.runtime.cache,
        &bytes,
        Some(&wp.spec.sha256),
        granted,
        limits,
    )
    .await;
    let verdict = {
        let mut claims = ctx.claims.lock().unwrap_or_else(|p| p.into_inner());
        let mut others: Vec<crate::trust::Claim> = ctx
            .registry
            .names()
            .into_iter()
            .filter(|n| *n != name)
            .filter_map(|n| {
                let slot = ctx.registry.get(&n)?;
                Some(crate::trust::Claim::of(&n, &slot.current().metadata))
            })
            .collect();
        others.extend(
            claims
                .iter()
                .filter(|(n, _)| **n != name)
                .map(|(_, c)| c.clone()),
        );
        let verdict = match loaded {
            Ok(p) => {
                match crate::trust::check(&name, &p.metadata, &others, &wp.spec.take_over_kinds) {
                    Ok(()) => Ok(p),
                    Err(e) => Err((e.reason(), e.to_string())),
                }
            }
            Err(e) => Err((
                match &e {
                    crate::PluginError::DigestMismatch { .. } => "DigestMismatch",
                    crate::PluginError::UngrantedImport { .. } => "UngrantedImport",
                    crate::PluginError::MissingExport(..) => "MissingExport",
                    crate::PluginError::Smoke(_) => "MetadataFailed",
                    _ => "Invalid",
                },
                e.to_string(),
            )),
        };
        if let Ok(p) = &verdict {
            claims.insert(name.clone(), crate::trust::Claim::of(&name, &p.metadata));
        }
        verdict
    };
    let refuse =
        |status: WasmProviderStatus, reason: &'static str, e: String, action: &'static str| {
            let msg = format!("{} {e}", wp.spec.module);
            refuse_version(
                ctx,
                &api,
                &wp,
                status,
                &old,
                slot.is_some(),
                reason,
                msg,
                action,
            )
        };
    let plugin = match verdict {
        Ok(p) => p,
        Err((reason, e)) => return refuse(status, reason, e, "Validate").await,
    };
    let installed = install_crds(&ctx.client, &plugin, &name, &wp.spec.take_over_kinds).await;
    if installed.is_err() {
        release_claim(ctx, &name);
    }
    match installed {
        Ok(()) => {}
        Err(e @ Error::CrdOwned { .. }) => {
            return refuse(status, "CrdOwned", e.to_string(), "InstallCRDs").await;
        }
        Err(e) => return Err(e),
    }
    status.plugin_name = Some(plugin.metadata.name.clone());
    status.active_digest = Some(plugin.digest.clone());
    status.active_version = Some(plugin.metadata.version.clone());
    status.imports = plugin.imports.clone();
    status.kinds = plugin
        .metadata
        .kinds
        .iter()
        .map(|k| format!("{}.{}", k.kind, k.group))
        .collect();
    let version = plugin.metadata.version.clone();
    let swapped = match &slot {
        Some(s) => s.swap(plugin).map(|_| s.clone()),
        None => {
            let s = Arc::new(Slot::new(plugin, rollout(&wp)));
            ctx.registry.insert(&name, s.clone());
            Ok(s)
        }
    };
    release_claim(ctx, &name);
    if swapped.is_ok() {
        for k in &wp.spec.take_over_kinds {
            if status.kinds.contains(k) {
                ctx.registry.take_over(k, &name);
            }
        }
    }
    match swapped {
        Ok(s) => {
            counters(&mut status, &s);
            status.previous_digests = s.previous_digests();
            let msg = format!("version {version} serves {}", status.kinds.join(", "));
            status.conditions = vec![
                condition(
                    types::VALIDATED,
                    true,
                    reasons::VALID,
                    "imports are granted, exports and metadata are valid",
                    &old.conditions,
                ),
                condition(types::ACTIVE, true, reasons::SERVING, &msg, &old.conditions),
            ];
            let _ = ctx
                .recorder
                .publish(
                    &Event {
                        type_: EventType::Normal,
                        reason: "Activated".into(),
                        note: Some(msg),
                        action: "Swap".into(),
                        secondary: None,
                    },
                    &reference,
                )
                .await;
        }
        Err(e) => {
            status.conditions = vec![
                condition(
                    types::VALIDATED,
                    false,
                    "Incompatible",
                    &e.to_string(),
                    &old.conditions,
                ),
                condition(
                    types::ACTIVE,
                    true,
                    "PreviousVersion",
                    "the previous version keeps serving",
                    &old.conditions,
                ),
            ];
        }
    }
    set_status(&api, &wp, status).await?;
    Ok(Action::requeue(Duration::from_secs(15)))
}

/// Objects of the plugin's kinds that still exist.
async fn remaining_objects(client: &Client, kinds: &[String]) -> Result<usize, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // One CRD list for all kinds, not one per kind.
    let all = crds.list(&ListParams::default()).await?.items;
    let mut n = 0;
    for k in kinds {
        let Some((kind, group)) = k.split_once('.') else {
            continue;
        };
        for crd in &all {
            if crd.spec.group != group || crd.spec.names.kind != kind {
                continue;
            }
            let version = crd
                .spec
                .versions
                .first()
                .map(|v| v.name.clone())
                .unwrap_or_default();
            let ar = ApiResource {
                group: group.into(),
                version: version.clone(),
                api_version: format!("{group}/{version}"),
                kind: kind.into(),
                plural: crd.spec.names.plural.clone(),
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            n += api.list(&ListParams::default().limit(1)).await?.items.len();
        }
    }
    Ok(n)
}

async fn cleanup(wp: Arc<WasmProvider>, ctx: &Ctx) -> Result<Action, Error> {
    let kinds = wp
        .status
        .as_ref()
        .map(|s| s.kinds.clone())
        .unwrap_or_default();
    let left = remaining_objects(&ctx.client, &kinds).await?;
    if left > 0 {
        let api: Api<WasmProvider> = Api::all(ctx.client.clone());
        let mut status = wp.status.clone().unwrap_or_default();
        let old = status.conditions.clone();
        let msg = format!(
            "objects of {} still exist; delete them first",
            kinds.join(", ")
        );
        status.conditions.retain(|c| c.type_ != types::DELETING);
        status.conditions.push(condition(
            types::DELETING,
            false,
            reasons::OBJECTS_REMAIN,
            &msg,
            &old,
        ));
        set_status(&api, &wp, status).await?;
        // Asked again soon, quietly: the admin deleting those objects is the way forward.
        return Err(Error::Waiting(msg, Duration::from_secs(5)));
    }
    ctx.registry.remove(&wp.name_any());
    release_claim(ctx, &wp.name_any());
    Ok(Action::await_change())
}

async fn reconcile(wp: Arc<WasmProvider>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let span = tracing::info_span!("reconcile", controller = "wasmprovider", object.ref = %format!("wasmprovider/{}", wp.name_any()));
    let api: Api<WasmProvider> = Api::all(ctx.client.clone());
    ctx.skeleton
        .reconcile(&api, wp, span, |wp| apply(wp, &ctx), |wp| cleanup(wp, &ctx))
        .await
}

fn error_policy(wp: Arc<WasmProvider>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.skeleton.error_policy(&*wp, err)
}

/// Installs the WasmProvider CRD (generated from the Rust type) and waits until it serves.
pub async fn install_crd(client: &Client) -> Result<(), Error> {
    use kube::CustomResourceExt;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = WasmProvider::crd();
    apply_crd(&api, &crd.name_any(), &crd).await
}

/// Runs the controller until the process ends.
pub async fn run(ctx: Arc<Ctx>) {
    let api: Api<WasmProvider> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// The reporter for Events the runtime publishes.
pub fn reporter() -> Reporter {
    Reporter {
        controller: "capw-runtime".into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}
