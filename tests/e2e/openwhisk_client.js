'use strict';
// Apache's npm `openwhisk` client against the embedded OpenWhisk: every call the client makes on
// namespaces, actions, activations, packages, triggers and rules, each checked against what
// OpenWhisk's controller answers (its Scala sources: Actions, Packages, Triggers, Rules, Namespaces,
// Activations). Run by tests/e2e/test_openwhisk_client.py with OW_APIHOST, OW_GUEST_KEY and
// OW_SYSTEM_KEY set; prints one line per step and exits non-zero at the first difference.

const assert = require('assert/strict');
const openwhisk = require('openwhisk');

const apihost = process.env.OW_APIHOST;
const guest = openwhisk({apihost, api_key: process.env.OW_GUEST_KEY});
const system = openwhisk({apihost, api_key: process.env.OW_SYSTEM_KEY});
const stranger = openwhisk({apihost, api_key: '00000000-0000-0000-0000-000000000000:wrong'});

const HELLO = 'def main(args):\n' +
  '    print("hello " + str(args.get("name")))\n' +
  '    return {"greeting": "hello " + str(args.get("name")), "keys": sorted(args)}\n';
const ECHO = 'def main(args):\n    return args\n';
const STAMPED = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z +stdout: /;

let step = '';
function begin(name) {
  step = name;
  console.log('step: ' + name);
}

async function refused(promise, status, message) {
  try {
    await promise;
  } catch (err) {
    assert.equal(err.statusCode, status, `${step}: ${err.message}`);
    if (message !== undefined) {
      assert.equal(err.error.error, message, step);
      assert.equal(typeof err.error.code, 'string', step);
    }
    return err;
  }
  assert.fail(`${step}: expected HTTP ${status}`);
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function eventually(read, what) {
  for (let i = 0; i < 200; i++) {
    try {
      const value = await read();
      if (value) return value;
    } catch (err) {
      if (err.statusCode !== 404) throw err;
    }
    await sleep(100);
  }
  assert.fail(`${step}: ${what} never came`);
}

const annotation = (entity, key) => (entity.annotations.find(a => a.key === key) || {}).value;

async function namespaces() {
  begin('namespaces.list answers the caller\'s namespace');
  assert.deepEqual(await guest.namespaces.list(), ['guest']);
  assert.deepEqual(await system.namespaces.list(), ['whisk.system']);
  begin('a wrong key is 401');
  await refused(stranger.namespaces.list(), 401, 'The supplied authentication is invalid');
}

async function actions() {
  begin('actions.create');
  const made = await guest.actions.create({name: 'hello', action: HELLO, kind: 'python:3',
    params: {name: 'world'}, annotations: {'esg-gpu': false}, limits: {timeout: 20000}});
  assert.equal(made.version, '0.0.1');
  assert.equal(made.namespace, 'guest');
  assert.deepEqual(made.exec, {kind: 'python:3', code: HELLO, binary: false});
  assert.deepEqual(made.parameters, [{key: 'name', value: 'world'}]);
  assert.deepEqual(made.limits, {timeout: 20000, memory: 256, logs: 10, concurrency: 1});
  assert.equal(annotation(made, 'provide-api-key'), false);
  assert.equal(annotation(made, 'exec'), 'python:3');

  begin('a second create is 409');
  await refused(guest.actions.create({name: 'hello', action: HELLO, kind: 'python:3'}), 409,
    'resource already exists');

  begin('actions.update with code only keeps parameters, limits and annotations');
  const code = await guest.actions.update({name: 'hello', action: HELLO + '\n', kind: 'python:3'});
  assert.equal(code.version, '0.0.2');
  assert.deepEqual(code.parameters, [{key: 'name', value: 'world'}]);
  assert.equal(code.limits.timeout, 20000);
  assert.equal(annotation(code, 'esg-gpu'), false);

  begin('actions.update with annotations only keeps the code');
  const tagged = await guest.actions.update({name: 'hello', annotations: {tier: 'fast'}});
  assert.equal(tagged.version, '0.0.3');
  assert.equal(tagged.exec.code, HELLO + '\n');
  assert.equal(annotation(tagged, 'tier'), 'fast');
  assert.equal(annotation(tagged, 'esg-gpu'), false);

  begin('actions.get with and without code');
  assert.equal((await guest.actions.get({name: 'hello', code: false})).exec.code, undefined);
  assert.equal((await guest.actions.get('hello')).exec.code, HELLO + '\n');
  await refused(guest.actions.get('nosuch'), 404, 'The requested resource does not exist.');
  await refused(guest.actions.delete('nosuch'), 404, 'The requested resource does not exist.');

  begin('actions.list, count, skip and limit');
  await guest.actions.create({name: 'echo', action: ECHO, kind: 'python:3'});
  const listed = await guest.actions.list();
  assert.deepEqual(listed.map(a => a.name), ['echo', 'hello']);      // newest first
  assert.deepEqual(listed[0].exec, {binary: false});
  assert.deepEqual(await guest.actions.list({count: true}), {actions: 2});
  assert.deepEqual((await guest.actions.list({skip: 1, limit: 1})).map(a => a.name), ['hello']);
  await refused(guest.actions.list({limit: 201}), 400,
    'The query parameter \'limit\' was malformed:\nThe value \'201\' is not in the range of 0 to 200 for actions.');

  begin('actions.invoke blocking: the whole activation');
  const first = await guest.actions.invoke({name: 'hello', blocking: true, params: {name: 'ann'}});
  assert.equal(first.response.success, true);
  assert.equal(first.response.status, 'success');
  assert.equal(first.response.result.greeting, 'hello ann');
  assert.equal(first.response.size, JSON.stringify(first.response.result).length + 2 +
    first.response.result.keys.length);                             // Python's separators: ", " and ": "
  assert.equal(first.namespace, 'guest');
  assert.equal(first.subject, 'guest');
  assert.equal(annotation(first, 'path'), 'guest/hello');
  assert.equal(annotation(first, 'kind'), 'python:3');
  const init = annotation(first, 'initTime');
  assert.ok(init > 0, 'a cold start has an initTime');
  assert.ok(first.duration >= init, 'the duration includes the initTime');
  assert.equal(first.duration, first.end - first.start);
  assert.ok(annotation(first, 'waitTime') >= 0);
  assert.equal(first.logs.length, 1);
  assert.match(first.logs[0], STAMPED);
  assert.ok(first.logs[0].endsWith(' stdout: hello ann'));

  begin('actions.invoke blocking with result: the result alone');
  const result = await guest.actions.invoke({name: 'hello', blocking: true, result: true, params: {name: 'bo'}});
  assert.equal(result.greeting, 'hello bo');

  begin('actions.invoke non-blocking: the id, then the record in the store');
  const {activationId} = await guest.actions.invoke({name: 'hello', params: {name: 'cy'}});
  assert.match(activationId, /^[0-9a-f]{32}$/);
  const stored = await eventually(() => guest.activations.get(activationId), 'the record');
  assert.equal(stored.response.result.greeting, 'hello cy');

  begin('invoking a missing action is 404, a wrong key 401');
  await refused(guest.actions.invoke({name: 'nosuch', blocking: true}), 404, 'The requested resource does not exist.');
  await refused(stranger.actions.invoke({name: 'hello', blocking: true}), 401);
  return {first, activationId};
}

async function activations({first, activationId}) {
  begin('activations.list summaries, newest first');
  const all = await guest.activations.list({limit: 50});
  assert.deepEqual(all.slice(0, 3).map(a => a.name), ['hello', 'hello', 'hello']);
  assert.ok(all.findIndex(a => a.activationId === activationId) < all.findIndex(a => a.activationId === first.activationId));
  const summary = all.find(a => a.activationId === first.activationId);
  assert.equal(summary.statusCode, 0);
  assert.equal(summary.response, undefined);
  assert.equal(summary.duration, first.duration);

  begin('activations.list name, count, skip, limit, since, upto, docs');
  const named = await guest.activations.list({name: 'hello'});
  assert.equal(named.length, 3);
  assert.deepEqual(await guest.activations.list({name: 'hello', count: true}), {activations: 3});
  assert.deepEqual(await guest.activations.list({name: 'hello', count: true, skip: 1}), {activations: 2});
  assert.equal((await guest.activations.list({name: 'hello', skip: 1, limit: 1}))[0].activationId, named[1].activationId);
  const since = await guest.activations.list({name: 'hello', since: named[1].start});
  assert.deepEqual(since.map(a => a.activationId), named.slice(0, 2).map(a => a.activationId));
  const upto = await guest.activations.list({name: 'hello', upto: named[1].start});
  assert.deepEqual(upto.map(a => a.activationId), named.slice(1).map(a => a.activationId));
  const docs = await guest.activations.list({name: 'hello', docs: true, limit: 1});
  assert.equal(docs[0].response.status, 'success');
  await refused(guest.activations.list({count: true, docs: true}), 400,
    'The parameter \'docs\' is not permitted with \'count\'.');

  begin('activations.get, result and logs');
  const got = await guest.activations.get(first.activationId);
  assert.deepEqual(got.response, first.response);
  assert.deepEqual(await guest.activations.result(first.activationId), first.response);
  assert.deepEqual(await guest.activations.logs(first.activationId), {logs: first.logs});
  await refused(guest.activations.get('f'.repeat(32)), 404, 'The requested resource does not exist.');
  await refused(system.activations.get(first.activationId), 404);     // another namespace's record
}

async function packages() {
  begin('packages.create, get, update');
  const made = await guest.packages.create({name: 'utils', package: {publish: true,
    parameters: [{key: 'p', value: 1}]}});
  assert.equal(made.version, '0.0.1');
  assert.deepEqual(made.annotations, []);
  assert.deepEqual(made.binding, {});
  await guest.actions.create({name: 'utils/echo', action: ECHO, kind: 'python:3'});
  const got = await guest.packages.get('utils');
  assert.deepEqual(got.actions.map(a => a.name), ['echo']);
  assert.deepEqual(got.feeds, []);
  assert.equal((await guest.packages.update({name: 'utils'})).version, '0.0.2');
  await refused(guest.packages.get('nosuch'), 404, 'The requested resource \'guest/nosuch\' does not exist.');
  await refused(guest.packages.create({name: 'default'}), 400, 'Package name \'default\' is reserved.');

  begin('a binding: parameters of the package, then the binding, then the call');
  const bound = await guest.packages.create({name: 'mine', package: {binding: {namespace: '_', name: 'utils'},
    parameters: [{key: 'b', value: 2}]}});
  assert.deepEqual(bound.binding, {namespace: 'guest', name: 'utils'});
  assert.deepEqual(annotation(bound, 'binding'), {namespace: 'guest', name: 'utils'});
  const viaBinding = await guest.actions.invoke({name: 'mine/echo', blocking: true, params: {c: 3}});
  assert.deepEqual(viaBinding.response.result, {p: 1, b: 2, c: 3});
  assert.equal(annotation(viaBinding, 'binding'), 'guest/mine');
  assert.equal(annotation(viaBinding, 'path'), 'guest/utils/echo');
  await refused(guest.actions.create({name: 'mine/other', action: ECHO, kind: 'python:3'}), 400,
    'Operation not permitted on package binding.');

  begin('packages.list and count');
  const listed = await guest.packages.list();
  assert.deepEqual(listed.map(p => [p.name, p.binding]), [['mine', {namespace: 'guest', name: 'utils'}],
    ['utils', false]]);
  assert.deepEqual(await guest.packages.list({count: true}), {packages: 2});

  begin('a package that is not empty is not deleted');
  await refused(guest.packages.delete('utils'), 409,
    'Package not empty (contains 1 entity). Set force param or delete package contents.');

  begin('whisk.system shares a package; guest reads and invokes it as guest');
  await system.packages.create({name: 'shared', package: {publish: true}});
  await system.packages.create({name: 'private'});
  await system.actions.create({name: 'shared/tool', action: ECHO, kind: 'python:3'});
  const own = await system.actions.invoke({name: 'shared/tool', blocking: true, params: {who: 'system'}});
  assert.equal(own.namespace, 'whisk.system');
  assert.deepEqual(own.response.result, {who: 'system'});
  const shared = await guest.actions.invoke({name: '/whisk.system/shared/tool', blocking: true, params: {who: 'guest'}});
  assert.equal(shared.namespace, 'guest');
  assert.equal(shared.subject, 'guest');
  assert.equal(annotation(shared, 'path'), 'whisk.system/shared/tool');
  assert.deepEqual((await guest.packages.list({namespace: 'whisk.system'})).map(p => p.name), ['shared', 'utils']);
  assert.equal((await guest.actions.get('/whisk.system/shared/tool')).namespace, 'whisk.system/shared');
  await refused(guest.actions.list({namespace: 'whisk.system'}), 403,
    'The supplied authentication is not authorized to access \'whisk.system\'.');
  await refused(guest.packages.get({name: 'private', namespace: 'whisk.system'}), 403,
    'The supplied authentication is not authorized to access \'whisk.system/private\'.');
  await refused(guest.actions.update({name: '/whisk.system/shared/tool', action: ECHO, kind: 'python:3'}), 403);
}

async function sequences() {
  begin('a sequence runs component by component, each an activation caused by it');
  const made = await guest.actions.create({name: 'greet-echo', sequence: ['/guest/hello', '/guest/utils/echo']});
  assert.deepEqual(made.exec, {kind: 'sequence', components: ['/guest/hello', '/guest/utils/echo']});
  const run = await guest.actions.invoke({name: 'greet-echo', blocking: true, params: {name: 'seq'}});
  assert.equal(run.response.success, true);
  assert.equal(run.response.result.greeting, 'hello seq');
  assert.equal(run.response.result.p, 1);                       // the echo ran in its package
  assert.equal(run.logs.length, 2);
  assert.equal(annotation(run, 'kind'), 'sequence');
  assert.equal(annotation(run, 'topmost'), true);
  const [a, b] = await Promise.all(run.logs.map(id => eventually(() => guest.activations.get(id), 'a component')));
  assert.equal(a.name, 'hello');
  assert.equal(b.name, 'echo');
  for (const c of [a, b]) {
    assert.equal(c.cause, run.activationId);
    assert.equal(annotation(c, 'causedBy'), 'sequence');
  }
  assert.equal(run.duration, a.duration + b.duration);
  await refused(guest.actions.create({name: 'broken', sequence: ['/guest/nosuch']}), 400,
    'Sequence component does not exist.');
}

async function catalog() {
  begin('whisk.system/utils, as a deployment\'s catalog has it: invoked by its full name, in a sequence, by a rule');
  const sorted = await guest.actions.invoke({name: '/whisk.system/utils/sort', blocking: true,
    params: {lines: ['b', 'c', 'a']}});
  assert.equal(sorted.response.success, true);
  assert.deepEqual(sorted.response.result, {lines: ['a', 'b', 'c'], length: 3});
  const seq = await guest.actions.create({name: 'my_sequence', sequence: ['/whisk.system/utils/echo']});
  assert.deepEqual(seq.exec.components, ['/whisk.system/utils/echo']);
  const echoed = await guest.actions.invoke({name: 'my_sequence', blocking: true, params: {hi: 1}});
  assert.deepEqual(echoed.response.result, {hi: 1});
  await guest.triggers.create({name: 'random_fire_test'});
  await guest.rules.create({name: 'echo_rule', action: '/whisk.system/utils/echo', trigger: '/guest/random_fire_test'});
  assert.ok((await guest.triggers.invoke({name: 'random_fire_test'})).activationId);
  await guest.triggers.delete('random_fire_test');
  await guest.rules.delete('echo_rule');
  await guest.actions.delete('my_sequence');
}

async function triggersAndRules() {
  begin('triggers.create, get, update');
  const made = await guest.triggers.create({name: 'ring', trigger: {parameters: [{key: 'source', value: 'bell'}]}});
  assert.equal(made.version, '0.0.1');
  assert.deepEqual(made.limits, {});
  assert.deepEqual(made.annotations, []);
  assert.equal((await guest.triggers.update({name: 'ring'})).version, '0.0.2');
  assert.deepEqual((await guest.triggers.get('ring')).parameters, [{key: 'source', value: 'bell'}]);
  await refused(guest.triggers.get('hello'), 409, 'Resource by this name exists but is not in this collection.');

  begin('rules.create links trigger and action, active');
  const rule = await guest.rules.create({name: 'on-ring', trigger: 'ring', action: 'hello'});
  assert.deepEqual(rule.trigger, {path: 'guest', name: 'ring'});
  assert.deepEqual(rule.action, {path: 'guest', name: 'hello'});
  assert.equal(rule.status, 'active');
  await refused(guest.rules.create({name: 'dangling', trigger: 'nosuch', action: 'hello'}), 400,
    'trigger /guest/nosuch does not exist');

  begin('triggers.invoke fires the rule: its action runs through the same path as any activation');
  const {activationId} = await guest.triggers.invoke({name: 'ring', params: {name: 'rang'}});
  const fired = await eventually(async () => {
    const rec = await guest.activations.get(activationId);
    return rec.logs.length ? rec : null;
  }, 'the trigger activation');
  assert.equal(fired.name, 'ring');
  assert.equal(fired.end, undefined);
  assert.deepEqual(fired.response.result, {name: 'rang'});
  const entry = JSON.parse(fired.logs[0]);
  assert.deepEqual([entry.rule, entry.action, entry.statusCode, entry.success], ['guest/on-ring', 'guest/hello', 0, true]);
  const ran = await eventually(() => guest.activations.get(entry.activationId), 'the rule\'s activation');
  assert.equal(ran.response.result.greeting, 'hello rang');
  assert.ok(ran.response.result.keys.includes('source'));         // the trigger's parameters
  assert.ok(ran.response.result.keys.includes('__ow_headers'));

  begin('rules.disable, get, enable; a trigger with no active rule fires nothing');
  assert.equal(await guest.rules.disable({name: 'on-ring'}), 'OK');
  assert.equal((await guest.rules.get('on-ring')).status, 'inactive');
  assert.equal((await guest.triggers.invoke({name: 'ring'})).length, 0);    // 204 No Content
  await guest.rules.enable({name: 'on-ring'});
  assert.equal((await guest.rules.get('on-ring')).status, 'active');

  begin('rules.update, list, count');
  const moved = await guest.rules.update({name: 'on-ring', trigger: 'ring', action: 'utils/echo'});
  assert.deepEqual(moved.action, {path: 'guest/utils', name: 'echo'});
  assert.equal(moved.status, 'active');
  assert.deepEqual((await guest.rules.list()).map(r => r.name), ['on-ring']);
  assert.deepEqual(await guest.rules.list({count: true}), {rules: 1});
  assert.deepEqual((await guest.triggers.list()).map(t => t.name), ['ring']);
  assert.deepEqual(await guest.triggers.list({count: true}), {triggers: 1});

  begin('namespaces.get lists all four collections');
  const ns = await guest.namespaces.get();
  assert.deepEqual(Object.keys(ns).sort(), ['actions', 'packages', 'rules', 'triggers']);
  assert.deepEqual(ns.rules.map(r => r.name), ['on-ring']);

  begin('rules.delete, triggers.delete');
  assert.equal((await guest.rules.delete('on-ring')).status, 'inactive');
  assert.equal((await guest.triggers.delete('ring')).name, 'ring');
  await refused(guest.triggers.get('ring'), 404, 'The requested resource does not exist.');
}

async function cleanUp() {
  begin('deletes');
  for (const name of ['greet-echo', 'hello', 'echo', 'utils/echo']) {
    assert.equal((await guest.actions.delete(name)).name, name.split('/').pop());
  }
  await guest.packages.delete('mine');
  await guest.packages.delete('utils');
  assert.deepEqual(await guest.actions.list(), []);
}

(async () => {
  await namespaces();
  const invoked = await actions();
  await activations(invoked);
  await packages();
  await sequences();
  await catalog();
  await triggersAndRules();
  await cleanUp();
  console.log('all calls answered as OpenWhisk answers them');
})().catch(err => {
  console.error(`FAILED at step "${step}": ${err.stack || err}`);
  process.exit(1);
});
