"""The official Python `kubernetes` client against `capw apiserver`.

Run by host/tests/python.rs with KUBECONFIG pointing at a fresh server; CAPW_WIDGET_CRD names
the Widget CRD fixture.
"""

import json
import os
import time

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "example.com", "v1", "widgets"


@pytest.fixture(scope="module")
def api_client():
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    c = client.ApiClient()
    ext = client.ApiextensionsV1Api(c)
    with open(os.environ["CAPW_WIDGET_CRD"]) as f:
        crd = json.load(f)
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as e:
        assert e.status == 409
    deadline = time.time() + 10
    while time.time() < deadline:
        got = ext.read_custom_resource_definition("widgets.example.com")
        # The server establishes a CRD right after creating it; status may not be there yet.
        conditions = (got.status.conditions if got.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            break
        time.sleep(0.1)
    else:
        pytest.fail("CRD never became Established")
    return c


def widget(name, color="red", labels=None):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"color": color, "extra": {}, "raw": {}, "tags": []},
    }


def test_core_configmap_and_secret(api_client):
    core = client.CoreV1Api(api_client)
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pc"), data={"a": "1"})
    created = core.create_namespaced_config_map("default", cm)
    assert created.metadata.uid
    assert core.read_namespaced_config_map("pc", "default").data == {"a": "1"}
    patched = core.patch_namespaced_config_map("pc", "default", {"data": {"b": "2"}})
    assert patched.data == {"a": "1", "b": "2"}
    patched.data["c"] = "3"
    replaced = core.replace_namespaced_config_map("pc", "default", patched)
    assert replaced.data["c"] == "3"
    listed = core.list_namespaced_config_map("default")
    assert [i.metadata.name for i in listed.items] == ["pc"]
    core.delete_namespaced_config_map("pc", "default")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("pc", "default")
    assert e.value.status == 404
    body = json.loads(e.value.body)
    assert body["reason"] == "NotFound" and body["kind"] == "Status"

    secret = client.V1Secret(metadata=client.V1ObjectMeta(name="ps"), string_data={"password": "hunter2"})
    s = core.create_namespaced_secret("default", secret)
    assert s.data == {"password": "aHVudGVyMg=="}
    assert s.type == "Opaque"


def test_custom_objects_crud_patch_status_and_errors(api_client):
    co = client.CustomObjectsApi(api_client)
    co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("p1", labels={"a": "b"}))
    co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("p2"))
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "p1")
    assert got["spec"]["replicas"] == 1
    selected = co.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, label_selector="a=b")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["p1"]
    patched = co.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "p1", {"spec": {"color": "blue"}})
    assert patched["spec"]["color"] == "blue" and patched["metadata"]["generation"] == 2
    status = {"status": {"ok": True, "conditions": []}}
    s = co.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "p1", status)
    assert s["status"]["ok"] is True and s["metadata"]["generation"] == 2

    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("p1"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    bad = widget("p3")
    bad["spec"]["replicas"] = 11
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, bad)
    status = json.loads(e.value.body)
    assert e.value.status == 422 and status["details"]["causes"][0]["field"] == "spec.replicas"

    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "p1")
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "p2", propagation_policy="Foreground")
    with pytest.raises(ApiException) as e:
        co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "p1")
    assert e.value.status == 404


def test_watch_sees_added_modified_deleted(api_client):
    co = client.CustomObjectsApi(api_client)
    rv = co.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("wv"))
    co.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "wv", {"spec": {"color": "green"}})
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "wv")
    seen = []
    w = watch.Watch()
    for ev in w.stream(
        co.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, resource_version=rv, timeout_seconds=5
    ):
        seen.append((ev["type"], ev["object"]["metadata"]["name"]))
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "wv"), ("MODIFIED", "wv"), ("DELETED", "wv")]


def test_watch_from_expired_rv_raises_410(api_client):
    core = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version="1"):
            pass
    assert e.value.status == 410


def test_dynamic_client(api_client):
    dyn = dynamic.DynamicClient(api_client)
    widgets = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="Widget")
    widgets.create(body=widget("dyn1"), namespace="default")
    names = [i.metadata.name for i in widgets.get(namespace="default").items]
    assert "dyn1" in names
    patched = widgets.patch(
        name="dyn1", namespace="default", body={"spec": {"color": "pink"}}, content_type="application/merge-patch+json"
    )
    assert patched.spec.color == "pink"
    widgets.delete(name="dyn1", namespace="default")
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cms.get(namespace="default").kind == "ConfigMapList"
