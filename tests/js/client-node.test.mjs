// @kubernetes/client-node 1.x against `capw apiserver`: CRUD, all four patch types, Watch, an
// informer, and CustomObjectsApi with the scale subresource. Run by host/tests/js.rs with
// KUBECONFIG pointing at a fresh server and CAPW_GADGET_CRD naming the Gadget CRD fixture.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as k8s from '@kubernetes/client-node';

const kc = new k8s.KubeConfig();
kc.loadFromFile(process.env.KUBECONFIG);
const core = kc.makeApiClient(k8s.CoreV1Api);
const namespace = 'default';
const patchAs = (type) => k8s.setHeaderOptions('Content-Type', type);

const eventually = async (what, check, ms = 20000) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

test('CRUD and all four patch types', async () => {
  const name = 'js-crud';
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: { a: '1' } } });
  const got = await core.readNamespacedConfigMap({ name, namespace });
  assert.equal(got.data.a, '1');
  got.data.a = '2';
  const replaced = await core.replaceNamespacedConfigMap({ name, namespace, body: got });
  assert.equal(replaced.data.a, '2');

  let p = await core.patchNamespacedConfigMap(
    { name, namespace, body: [{ op: 'add', path: '/data/b', value: '3' }] },
    patchAs(k8s.PatchStrategy.JsonPatch));
  assert.equal(p.data.b, '3');
  p = await core.patchNamespacedConfigMap(
    { name, namespace, body: { data: { c: '4' } } }, patchAs(k8s.PatchStrategy.MergePatch));
  assert.equal(p.data.c, '4');
  p = await core.patchNamespacedConfigMap(
    { name, namespace, body: { metadata: { labels: { tier: 'x' } } } },
    patchAs(k8s.PatchStrategy.StrategicMergePatch));
  assert.equal(p.metadata.labels.tier, 'x');
  p = await core.patchNamespacedConfigMap(
    { name, namespace, fieldManager: 'client-node', force: true,
      body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace }, data: { d: '5' } } },
    patchAs(k8s.PatchStrategy.ServerSideApply));
  assert.equal(p.data.d, '5');
  assert.ok(p.metadata.managedFields.some((m) => m.manager === 'client-node' && m.operation === 'Apply'));

  const list = await core.listNamespacedConfigMap({ namespace });
  assert.ok(list.items.some((c) => c.metadata.name === name));
  await core.deleteNamespacedConfigMap({ name, namespace });
  await assert.rejects(core.readNamespacedConfigMap({ name, namespace }), (e) => e.code === 404);
});

test('Watch delivers ADDED and MODIFIED', async () => {
  const list = await core.listNamespacedConfigMap({ namespace });
  const seen = [];
  const watch = new k8s.Watch(kc);
  const req = await watch.watch(`/api/v1/namespaces/${namespace}/configmaps`,
    { resourceVersion: list.metadata.resourceVersion },
    (type, obj) => seen.push(`${type} ${obj.metadata.name}`), () => {});
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'js-watch' } } });
  await core.patchNamespacedConfigMap({ name: 'js-watch', namespace, body: { data: { a: '1' } } },
    patchAs(k8s.PatchStrategy.MergePatch));
  await eventually('watch events', () => seen.includes('MODIFIED js-watch'));
  assert.ok(seen.includes('ADDED js-watch'), seen.join(', '));
  req.abort();
});

test('an informer lists, then follows changes', async () => {
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'js-before' } } });
  const path = `/api/v1/namespaces/${namespace}/configmaps`;
  const informer = k8s.makeInformer(kc, path, () => core.listNamespacedConfigMap({ namespace }));
  const added = new Set();
  const deleted = new Set();
  informer.on('add', (o) => added.add(o.metadata.name));
  informer.on('delete', (o) => deleted.add(o.metadata.name));
  await informer.start();
  await eventually('the listed object', () => added.has('js-before'));
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'js-after' } } });
  await eventually('the watched object', () => added.has('js-after'));
  await core.deleteNamespacedConfigMap({ name: 'js-after', namespace });
  await eventually('the delete', () => deleted.has('js-after'));
  assert.ok(informer.list(namespace).some((o) => o.metadata.name === 'js-before'));
  await informer.stop();
});

test('CustomObjectsApi with the scale subresource', async () => {
  const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
  const crd = JSON.parse(readFileSync(process.env.CAPW_GADGET_CRD, 'utf8'));
  await ext.createCustomResourceDefinition({ body: crd });
  const co = kc.makeApiClient(k8s.CustomObjectsApi);
  const at = { group: 'fidelity.example.com', version: 'v1beta2', namespace, plural: 'gadgets' };
  await co.createNamespacedCustomObject({ ...at, body: {
    apiVersion: 'fidelity.example.com/v1beta2', kind: 'Gadget', metadata: { name: 'js' },
    spec: { replicas: 1, infrastructureRef: { apiGroup: 'infra.example.com', kind: 'Box', name: 'js' } } } });
  const scale = await co.getNamespacedCustomObjectScale({ ...at, name: 'js' });
  assert.equal(scale.kind, 'Scale');
  assert.equal(scale.spec.replicas, 1);
  scale.spec.replicas = 2;
  const put = await co.replaceNamespacedCustomObjectScale({ ...at, name: 'js', body: scale });
  assert.equal(put.spec.replicas, 2);
  const patched = await co.patchNamespacedCustomObjectScale(
    { ...at, name: 'js', body: { spec: { replicas: 4 } } }, patchAs(k8s.PatchStrategy.MergePatch));
  assert.equal(patched.spec.replicas, 4);
  const obj = await co.getNamespacedCustomObject({ ...at, name: 'js' });
  assert.equal(obj.spec.replicas, 4);
  const gone = await co.deleteNamespacedCustomObject({ ...at, name: 'js' });
  assert.equal(gone.kind, 'Status');
});
