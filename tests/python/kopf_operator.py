"""A small kopf operator for Tasks, run by test_kopf.py against `capw apiserver`.

It uses what real operators use: create, update and delete handlers, kopf's finalizer (added
because a delete handler exists), a status patch, and a side effect the test can see.
"""

import kopf
import kubernetes

GROUP, VERSION, PLURAL = "kopf.capw.dev", "v1", "tasks"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.watching.server_timeout = 30
    settings.watching.client_timeout = 40


@kopf.on.create(GROUP, VERSION, PLURAL)
def created(spec, patch, **_):
    patch.status["phase"] = "Created"
    return {"message": f"created with size {spec.get('size')}"}


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.size")
def resized(old, new, patch, **_):
    patch.status["phase"] = "Resized"
    patch.status["size"] = new


@kopf.on.delete(GROUP, VERSION, PLURAL)
def deleted(name, namespace, **_):
    kubernetes.config.load_kube_config()
    kubernetes.client.CoreV1Api().create_namespaced_config_map(
        namespace, {"metadata": {"name": f"deleted-{name}"}}
    )
