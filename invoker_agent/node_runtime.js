// The Node.js runtime of `--runner process`: one action behind OpenWhisk's action runtime protocol on a
// Unix socket, the counterpart of action_worker.py for `nodejs:N` kinds (invoker_agent/runtimes.py).
//
//   node node_runtime.js SOCKET READY_FILE
//
// Started inside the worker's sandbox with nothing but Node's own modules. It listens on SOCKET (the
// sandbox has no network of the host's), creates READY_FILE once it does, and serves one request at a
// time:
//   POST /init {"value": {"name", "main", "binary", "code", "env"}} -> 200 {"ok": true, "esg_batch": bool};
//        403 if already initialised; 502 {"error"} naming what failed (a syntax error, no entry point).
//   POST /run {"value", "namespace", "action_name", "action_version", "activation_id", "transaction_id",
//        "deadline", "api_key"?} -> 200 with the action's result (an object, or what its promise resolves
//        to); a thrown error or a rejected promise -> 502 {"error"}; a result that is not an object -> 502.
// As OpenWhisk's Node.js runtime: plain code defines `main` (or the entry point `value.main` names) or
// exports it; a zip (binary) is a module directory (package.json "main", else index.js) that exports it.
// The run fields become __OW_* environment variables. Each line the action prints is stamped as OpenWhisk's
// log store formats a container's line (as action_worker.py stamps them: the time, RFC 3339 with
// nanoseconds, padded to 30 characters, then the stream); after each activation both streams get the
// unstamped sentinel line. A module that also exports `<main>_batch` gets a batch as one /run, as in
// action_worker.py. ESG_LIFELINE_FD names a pipe only the agent holds the other end of: when it closes
// (the agent stopped the worker, or died) this process exits, as action_worker.py does.
'use strict';

const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { createRequire } = require('module');
const { execFileSync } = require('child_process');

const SENTINEL = 'XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX';
const BATCH_KEY = '__esg_batch__';
const RUN_ENV = {
  namespace: '__OW_NAMESPACE', action_name: '__OW_ACTION_NAME', action_version: '__OW_ACTION_VERSION',
  activation_id: '__OW_ACTIVATION_ID', transaction_id: '__OW_TRANSACTION_ID', deadline: '__OW_DEADLINE',
  api_key: '__OW_API_KEY',
};
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

let action = null;   // {main, batch}

function unzip(code) {
  // Node has no zip reader of its own; the sandbox's Python has one in its standard library.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'action-'));
  const file = path.join(dir, 'action.zip');
  fs.writeFileSync(file, Buffer.from(code || '', 'base64'));
  execFileSync('python3', ['-m', 'zipfile', '-e', file, dir], { stdio: 'pipe' });
  fs.unlinkSync(file);
  return dir;
}

function load(value) {
  for (const [k, v] of Object.entries(value.env || {})) {
    process.env[k] = typeof v === 'string' ? v : JSON.stringify(v);
  }
  const entry = value.main || 'main';
  let exported;
  let local;
  if (value.binary) {
    exported = require(unzip(value.code));
  } else {
    const file = path.join(process.cwd(), 'action.js');
    const module = { exports: {} };
    const tail = IDENTIFIER.test(entry) ? `\nreturn typeof ${entry} === 'function' ? ${entry} : undefined;` : '';
    const body = new Function('module', 'exports', 'require', '__filename', '__dirname', `${value.code || ''}${tail}`);
    local = body(module, module.exports, createRequire(file), file, path.dirname(file));
    exported = module.exports;
  }
  const pick = (name) => (exported && typeof exported[name] === 'function' ? exported[name] : undefined);
  const main = local || pick(entry) || (entry === 'main' && typeof exported === 'function' ? exported : undefined);
  if (typeof main !== 'function') throw new Error(`action entry point '${entry}' is not a function`);
  action = { main, batch: pick(`${entry}_batch`) };
}

function reply(res, status, body) {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': data.length });
  res.end(data);
}

function now() {
  const ns = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
  const seconds = ns / 1000000000n;
  const iso = new Date(Number(seconds) * 1000).toISOString().slice(0, 19);
  return `${iso}.${String(ns % 1000000000n).padStart(9, '0')}Z`;
}

// Each complete line written to `stream` goes out stamped; `end` finishes an unfinished one and writes the
// sentinel past the stamping.
function stamped(stream, name) {
  const raw = stream.write.bind(stream);
  let partial = '';
  stream.write = (chunk, encoding, done) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString(typeof encoding === 'string' ? encoding : 'utf8');
    const lines = (partial + text).split('\n');
    partial = lines.pop();
    if (lines.length) {
      const at = now().padEnd(30);
      raw(lines.map((line) => `${at} ${name}: ${line}\n`).join(''));
    }
    const callback = typeof encoding === 'function' ? encoding : done;
    if (typeof callback === 'function') callback();
    return true;
  };
  return {
    end() {
      if (partial) stream.write('\n');
      raw(`${SENTINEL}\n`);
    },
  };
}

const streams = [stamped(process.stdout, 'stdout'), stamped(process.stderr, 'stderr')];

function sentinel() {
  for (const s of streams) s.end();
}

function describe(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : JSON.stringify(e);
}

async function run(body, res) {
  if (action === null) return reply(res, 502, { error: 'Cannot run the action: it was not initialized.' });
  for (const [k, env] of Object.entries(RUN_ENV)) {
    if (k in body) process.env[env] = String(body[k]);
  }
  const value = body.value === undefined || body.value === null ? {} : body.value;
  let out;
  try {
    if (value !== null && typeof value === 'object' && BATCH_KEY in value) {
      if (!action.batch) return reply(res, 400, { error: 'The action defines no batch entry point.' });
      const args = value[BATCH_KEY];
      const results = await action.batch(args);
      if (!Array.isArray(results) || results.length !== args.length) {
        return reply(res, 502, { error: `The batch entry point must return a list with one result per request (${args.length}).` });
      }
      out = { [BATCH_KEY]: results };
    } else {
      out = await action.main(value);
    }
  } catch (e) {
    // a rejected promise's object is the action's own error result; anything thrown is a failure
    if (e !== null && typeof e === 'object' && !(e instanceof Error)) return reply(res, 200, { error: e });
    return reply(res, 502, { error: `An error has occurred: ${describe(e)}` });
  } finally {
    sentinel();
  }
  if (out === null || typeof out !== 'object') {
    return reply(res, 502, { error: 'The action did not return a dictionary.' });
  }
  return reply(res, 200, out);
}

function handle(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    } catch (e) {
      return reply(res, 400, { error: 'request body is not JSON' });
    }
    if (req.url === '/init') {
      if (action !== null) return reply(res, 403, { error: 'Cannot initialize the action more than once.' });
      try {
        load(body.value || {});
      } catch (e) {
        action = null;
        return reply(res, 502, { error: `Initialization has failed due to: ${describe(e)}` });
      }
      return reply(res, 200, { ok: true, esg_batch: Boolean(action.batch) });
    }
    if (req.url === '/run') return run(body, res);
    return reply(res, 404, { error: `no such endpoint ${req.url}` });
  });
}

function watchLifeline() {
  const fd = process.env.ESG_LIFELINE_FD;
  delete process.env.ESG_LIFELINE_FD;
  if (fd === undefined || !/^[0-9]+$/.test(fd)) return;
  const line = new net.Socket({ fd: Number(fd), readable: true, writable: false });
  line.on('data', () => {});
  line.on('end', () => process.exit(0));
  line.on('error', () => process.exit(0));
  line.unref();   // the server keeps the process alive; the lifeline only ends it
}

function main() {
  watchLifeline();
  const [socket, ready] = process.argv.slice(2);
  if (!socket || !ready) {
    process.stderr.write('usage: node node_runtime.js SOCKET READY_FILE\n');
    process.exit(2);
  }
  const server = http.createServer(handle);
  // the agent keeps one connection open between activations and bounds each call itself
  server.keepAliveTimeout = 0;
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  server.listen(socket, () => fs.writeFileSync(ready, ''));
}

main();
