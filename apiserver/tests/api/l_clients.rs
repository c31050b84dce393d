//! L. kube-rs end to end: typed (derived CRD) and dynamic APIs, the watcher in both initial
//! list strategies, a forced 410 relist, a Controller with `.owns()` and the finalizer helper,
//! and Recorder series.

use crate::harness::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher::{self, Event};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "test.capw.dev",
    version = "v1",
    kind = "Gizmo",
    namespaced,
    status = "GizmoStatus"
)]
#[kube(printcolumn = r#"{"name":"Color","type":"string","jsonPath":".spec.color"}"#)]
pub struct GizmoSpec {
    color: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq, Default)]
pub struct GizmoStatus {
    ready: bool,
}

fn gizmo(name: &str, color: &str) -> Gizmo {
    Gizmo::new(
        name,
        GizmoSpec {
            color: color.into(),
            replicas: None,
        },
    )
}

async fn install_gizmos(t: &TestServer) -> Api<Gizmo> {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &Gizmo::crd())
        .await
        .expect("derived CRD accepted");
    let established = await_condition(
        crds,
        "gizmos.test.capw.dev",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), established)
        .await
        .expect("established in time")
        .expect("await");
    Api::default_namespaced(t.client.clone())
}

#[tokio::test]
async fn l131_l138_typed_and_dynamic_apis() {
    let t = start().await;
    let api = install_gizmos(&t).await;
    let pp = PostParams::default();
    let g = api.create(&pp, &gizmo("g1", "red")).await.unwrap();
    assert_eq!(g.spec.color, "red");
    assert!(api.get_opt("missing").await.unwrap().is_none());
    let mut g = api.get("g1").await.unwrap();
    g.spec.replicas = Some(3);
    let g = api.replace("g1", &pp, &g).await.unwrap();
    assert_eq!(g.metadata.generation, Some(2));
    let g = api
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"color":"blue"}})),
        )
        .await
        .unwrap();
    assert_eq!(g.spec.color, "blue");
    let applied = json!({"apiVersion":"test.capw.dev/v1","kind":"Gizmo","spec":{"color":"green"}});
    let g = api
        .patch(
            "g1",
            &PatchParams::apply("probe").force(),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    assert_eq!(g.spec.color, "green");
    let status = json!({"apiVersion":"test.capw.dev/v1","kind":"Gizmo","status":{"ready":true}});
    let g = api
        .patch_status(
            "g1",
            &PatchParams::apply("probe").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert_eq!(g.status, Some(GizmoStatus { ready: true }));
    let mut g2 = api.get_status("g1").await.unwrap();
    g2.status = Some(GizmoStatus { ready: false });
    let g = api.replace_status("g1", &pp, &g2).await.unwrap();
    assert_eq!(g.status, Some(GizmoStatus { ready: false }));
    let jp: json_patch::Patch = serde_json::from_value(json!([{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["x"]}])).unwrap();
    let g = api
        .patch("g1", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(g.finalizers(), &["x".to_string()]);
    let listed = api
        .list(
            &ListParams::default()
                .fields("metadata.name=g1")
                .labels("")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(
        api.list(&ListParams::default().match_any())
            .await
            .unwrap()
            .metadata
            .resource_version
            .is_some()
    );
    let meta = api.get_metadata("g1").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("g1"));
    assert_eq!(
        api.list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Dynamic API over the same kind, through discovery.
    let gvk = GroupVersionKind::gvk("test.capw.dev", "v1", "Gizmo");
    let (ar, _caps) = kube::discovery::pinned_kind(&t.client, &gvk).await.unwrap();
    let dynapi: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), "default", &ar);
    let mut d = DynamicObject::new("g2", &ar);
    d.data = json!({"spec":{"color":"pink"}});
    dynapi.create(&pp, &d).await.unwrap();
    let all = dynapi.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 2);
    let cms: Api<DynamicObject> =
        Api::default_namespaced_with(t.client.clone(), &ApiResource::erase::<ConfigMap>(&()));
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    kube::Discovery::new(t.client.clone())
        .run()
        .await
        .expect("discovery runs");

    // Delete: with a finalizer the object is returned; without, too (custom resources).
    let r = api.delete("g1", &DeleteParams::default()).await.unwrap();
    assert!(
        r.left()
            .is_some_and(|g| g.metadata.deletion_timestamp.is_some())
    );
    let rm = json!([{"op":"remove","path":"/metadata/finalizers/0"}]);
    api.patch(
        "g1",
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(rm).unwrap()),
    )
    .await
    .unwrap();
    assert!(api.get_opt("g1").await.unwrap().is_none());
    let cm_api: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    cm_api
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata":{"name":"c","labels":{"a":"b"}}})).unwrap(),
        )
        .await
        .unwrap();
    let r = cm_api
        .delete("c", &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(r.is_left() || r.is_right());
    cm_api
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata":{"name":"d","labels":{"a":"b"}}})).unwrap(),
        )
        .await
        .unwrap();
    dynapi
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A raw watch from "0".
    let mut stream = api
        .watch(&WatchParams::default().timeout(2), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&pp, &gizmo("g3", "red")).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Added(ref g) if g.name_any() == "g3"));
}

async fn next_event(
    s: &mut (impl futures::Stream<Item = Result<Event<Gizmo>, watcher::Error>> + Unpin),
) -> Event<Gizmo> {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("watcher event in time")
        .expect("stream open")
        .expect("no error")
}

#[tokio::test]
async fn l132_l133_watcher_paginated_and_streaming() {
    let t = start().await;
    let api = install_gizmos(&t).await;
    for i in 0..5 {
        api.create(&PostParams::default(), &gizmo(&format!("g{i}"), "red"))
            .await
            .unwrap();
    }
    for cfg in [
        watcher::Config::default().page_size(2),
        watcher::Config::default().streaming_lists(),
    ] {
        let mut s = watcher::watcher(api.clone(), cfg).boxed();
        assert!(matches!(next_event(&mut s).await, Event::Init));
        let mut names = vec![];
        loop {
            match next_event(&mut s).await {
                Event::InitApply(g) => names.push(g.name_any()),
                Event::InitDone => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(names, vec!["g0", "g1", "g2", "g3", "g4"]);
        api.patch(
            "g0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"color":"x"}})),
        )
        .await
        .unwrap();
        assert!(matches!(next_event(&mut s).await, Event::Apply(g) if g.spec.color == "x"));
        api.delete("g0", &DeleteParams::default()).await.unwrap();
        assert!(matches!(next_event(&mut s).await, Event::Delete(g) if g.name_any() == "g0"));
        api.create(&PostParams::default(), &gizmo("g0", "red"))
            .await
            .unwrap();
        assert!(matches!(next_event(&mut s).await, Event::Apply(_)));
    }
}

#[tokio::test]
async fn l134_forced_410_relists() {
    let t = start_with(|c| c.store.retention = 5).await;
    let api = install_gizmos(&t).await;
    let mut one = gizmo("watched", "red");
    one.metadata.labels = Some([("w".to_string(), "y".to_string())].into());
    api.create(&PostParams::default(), &one).await.unwrap();
    let cfg = watcher::Config::default()
        .labels("w=y")
        .timeout(1)
        .disable_bookmarks();
    let mut s = watcher::watcher(api.clone(), cfg).boxed();
    assert!(matches!(next_event(&mut s).await, Event::Init));
    assert!(matches!(next_event(&mut s).await, Event::InitApply(_)));
    assert!(matches!(next_event(&mut s).await, Event::InitDone));
    // While the watcher sits on its old RV, push the window far past it with writes it does not see.
    let cms: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    for i in 0..100 {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata":{"name":format!("c{i}")}})).unwrap(),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // kube-runtime surfaces the in-stream 410 once, then relists.
    let first = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .unwrap()
        .unwrap();
    match first {
        Err(watcher::Error::WatchError(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                matches!(next_event(&mut s).await, Event::Init),
                "the in-stream 410 leads to a relist"
            );
        }
        other => panic!("expected the 410 error, got {other:?}"),
    }
}

#[tokio::test]
async fn l135_stream_end_resumes_without_relist() {
    let t = start().await;
    let api = install_gizmos(&t).await;
    api.create(&PostParams::default(), &gizmo("g", "red"))
        .await
        .unwrap();
    let mut s = watcher::watcher(api.clone(), watcher::Config::default().timeout(1)).boxed();
    assert!(matches!(next_event(&mut s).await, Event::Init));
    assert!(matches!(next_event(&mut s).await, Event::InitApply(_)));
    assert!(matches!(next_event(&mut s).await, Event::InitDone));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    api.patch(
        "g",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec":{"color":"blue"}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_event(&mut s).await, Event::Apply(g) if g.spec.color == "blue"),
        "resumed, no second Init"
    );
}

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

struct Ctx {
    client: kube::Client,
    cleanups: AtomicUsize,
}

async fn reconcile(
    g: Arc<Gizmo>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<ReconcileError>> {
    let api: Api<Gizmo> = Api::default_namespaced(ctx.client.clone());
    finalizer(&api, "test.capw.dev/cleanup", g, |ev| async {
        match ev {
            Finalizer::Apply(g) => {
                let cms: Api<ConfigMap> = Api::default_namespaced(ctx.client.clone());
                let mut cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":format!("{}-child", g.name_any())},"data":{"color":g.spec.color}})).unwrap();
                cm.metadata.owner_references = Some(vec![g.controller_owner_ref(&()).unwrap()]);
                cms.patch(&cm.name_any(), &PatchParams::apply("gizmo-controller").force(), &Patch::Apply(&cm)).await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
}

#[tokio::test]
async fn l136_controller_owns_children_and_finalizer_cleans_up() {
    let t = start().await;
    let api = install_gizmos(&t).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(t.client.clone());
    let ctx = Arc::new(Ctx {
        client: t.client.clone(),
        cleanups: AtomicUsize::new(0),
    });
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);
    api.create(&PostParams::default(), &gizmo("g", "red"))
        .await
        .unwrap();
    eventually("child created", || async {
        cms.get_opt("g-child").await.unwrap().is_some()
    })
    .await;
    let child = cms.get("g-child").await.unwrap();
    assert_eq!(child.owner_references()[0].name, "g");
    // Deleting the child by hand: the controller (via .owns) recreates it.
    cms.delete("g-child", &DeleteParams::default())
        .await
        .unwrap();
    eventually("child recreated", || async {
        cms.get_opt("g-child")
            .await
            .unwrap()
            .is_some_and(|c| c.uid() != child.uid())
    })
    .await;
    api.delete("g", &DeleteParams::default()).await.unwrap();
    eventually("finalizer ran and the CR is gone", || async {
        api.get_opt("g").await.unwrap().is_none()
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    eventually("child garbage-collected", || async {
        cms.get_opt("g-child").await.unwrap().is_none()
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn l137_recorder_series() {
    let t = start().await;
    let api = install_gizmos(&t).await;
    let g = api
        .create(&PostParams::default(), &gizmo("g", "red"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        t.client.clone(),
        Reporter {
            controller: "gizmo-controller".into(),
            instance: Some("test".into()),
        },
    );
    let ev = KEvent {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = g.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(t.client.clone());
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=g,involvedObject.kind=Gizmo"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].count, Some(2));
    assert_eq!(list.items[0].series.as_ref().and_then(|s| s.count), Some(2));
}
