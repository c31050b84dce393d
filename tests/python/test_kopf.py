"""kopf 1.45 against `capw apiserver`: an operator with create, update and delete handlers,
kopf's finalizer and a status patch. kopf ≥ 1.44 writes with JSON Patch guarded by a `test` of
`metadata.resourceVersion`, so this is also the regression test of that defect with a real
client.
"""

import json
import os
import time

import kopf.testing
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

HERE = os.path.dirname(__file__)
GROUP, VERSION, PLURAL = "kopf.capw.dev", "v1", "tasks"


def wait(what, check, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def api():
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    c = client.ApiClient()
    ext = client.ApiextensionsV1Api(c)
    with open(os.path.join(HERE, "task-crd.json")) as f:
        try:
            ext.create_custom_resource_definition(json.load(f))
        except ApiException as e:
            assert e.status == 409
    return c


def test_kopf_operator_handles_create_update_delete(api):
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    args = ["run", "--standalone", "--namespace", "default", os.path.join(HERE, "kopf_operator.py")]
    with kopf.testing.KopfRunner(args, timeout=60) as runner:
        objs.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL,
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
             "metadata": {"name": "t1"}, "spec": {"size": 1}},
        )

        def handled():
            t = objs.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "t1")
            status = t.get("status") or {}
            return t if status.get("phase") == "Created" and "created" in status else None

        t = wait("the create handler", handled)
        assert t["status"]["created"] == {"message": "created with size 1"}
        assert "kopf.zalando.org/KopfFinalizerMarker" in t["metadata"]["finalizers"]

        objs.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "t1", {"spec": {"size": 3}}
        )
        wait(
            "the update handler",
            lambda: (objs.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "t1")
                     .get("status", {}).get("size") == 3),
        )

        objs.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "t1")

        def gone():
            try:
                objs.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "t1")
                return False
            except ApiException as e:
                return e.status == 404

        wait("the Task to be deleted after its delete handler ran", gone)
        assert core.read_namespaced_config_map("deleted-t1", "default").metadata.name == "deleted-t1"
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output
    assert "Handler 'created' succeeded" in runner.output, runner.output
