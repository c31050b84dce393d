"""lightkube 1.0 against `capw apiserver`: typed calls, a watch, and server-side apply with
kube's conflict answer."""

import os

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType


@pytest.fixture(scope="module")
def kube():
    return Client(config=KubeConfig.from_file(os.environ["KUBECONFIG"]), field_manager="lightkube")


def cm(name, data):
    return ConfigMap(metadata=ObjectMeta(name=name, namespace="default"), data=data)


def test_typed_calls(kube):
    created = kube.create(cm("lk-typed", {"a": "1"}))
    assert created.metadata.uid
    got = kube.get(ConfigMap, "lk-typed", namespace="default")
    assert got.data == {"a": "1"}
    assert "lk-typed" in [c.metadata.name for c in kube.list(ConfigMap, namespace="default")]
    patched = kube.patch(ConfigMap, "lk-typed", {"data": {"b": "2"}}, namespace="default",
                         patch_type=PatchType.MERGE)
    assert patched.data == {"a": "1", "b": "2"}
    patched = kube.patch(ConfigMap, "lk-typed",
                         [{"op": "test", "path": "/metadata/resourceVersion",
                           "value": patched.metadata.resourceVersion},
                          {"op": "remove", "path": "/data/a"}],
                         namespace="default", patch_type=PatchType.JSON)
    assert patched.data == {"b": "2"}
    kube.delete(ConfigMap, "lk-typed", namespace="default")
    with pytest.raises(ApiError) as e:
        kube.get(ConfigMap, "lk-typed", namespace="default")
    assert e.value.status.code == 404


def test_watch_sees_a_change(kube):
    start = kube.create(cm("lk-watch", {"a": "1"}))
    kube.patch(ConfigMap, "lk-watch", {"data": {"a": "2"}}, namespace="default",
               patch_type=PatchType.MERGE)
    seen = []
    for op, obj in kube.watch(ConfigMap, namespace="default",
                              resource_version=start.metadata.resourceVersion):
        seen.append((op, obj.metadata.name, (obj.data or {}).get("a")))
        if op == "MODIFIED" and obj.metadata.name == "lk-watch":
            break
    assert ("MODIFIED", "lk-watch", "2") in seen


def test_server_side_apply_conflicts(kube):
    kube.apply(cm("lk-ssa", {"k": "alice"}), field_manager="alice")
    with pytest.raises(ApiError) as e:
        kube.apply(cm("lk-ssa", {"k": "bob"}), field_manager="bob")
    assert e.value.status.code == 409
    assert e.value.status.message == 'Apply failed with 1 conflict: conflict with "alice": .data.k'
    forced = kube.apply(cm("lk-ssa", {"k": "bob"}), field_manager="bob", force=True)
    assert forced.data == {"k": "bob"}
    managers = {m.manager for m in forced.metadata.managedFields}
    assert "bob" in managers
