'use strict';
// The embedded cluster's CouchDB: pouchdb-server's CouchDB API (express-pouchdb over in-memory PouchDB,
// the packages scripts/setup installs into .node/) with two differences from the pouchdb-server
// command, each bringing it closer to the CouchDB OpenWhisk runs on:
//
// 1. CouchDB's `require_valid_user`: a request without the server admin's credentials is refused
//    with CouchDB's 401 before it reaches a route. (Behind the pouchdb-server command, a client
//    without credentials that creates a database makes the process exit.)
// 2. View functions run as CouchDB's JavaScript engine runs them, not in strict mode. PouchDB wraps
//    each map function in "use strict"; OpenWhisk's activation views assign an undeclared loop
//    variable, which in strict mode throws inside their own try/catch, so they would index nothing.
//
// Usage: node pouchdb_server.js HOST PORT, with ESG_COUCH_USER and ESG_COUCH_PASSWORD in the
// environment (never in argv, which any local user can read). Prints "listening" once it serves.

const crypto = require('crypto');
const vm = require('vm');

const STRICT_WRAPPER = '(function() {"use strict";';
const runInNewContext = vm.runInNewContext;
vm.runInNewContext = function (code, ...rest) {
  if (typeof code === 'string' && code.startsWith(STRICT_WRAPPER)) {
    code = '(function() {' + code.slice(STRICT_WRAPPER.length);
  }
  return runInNewContext.call(vm, code, ...rest);
};

const [host, portText] = process.argv.slice(2);
const user = process.env.ESG_COUCH_USER;
const password = process.env.ESG_COUCH_PASSWORD;
if (!host || !/^\d+$/.test(portText || '') || !user || !password) {
  console.error('usage: ESG_COUCH_USER=.. ESG_COUCH_PASSWORD=.. node pouchdb_server.js HOST PORT');
  process.exit(2);
}

const express = require('express');
const PouchDB = require('pouchdb-core')
  .plugin(require('pouchdb-adapter-http'))
  .plugin(require('pouchdb-replication'))
  .plugin(require('pouchdb-mapreduce'))
  .plugin(require('pouchdb-adapter-memory'));

const expected = Buffer.from('Basic ' + Buffer.from(`${user}:${password}`).toString('base64'));

function isAdmin(req) {
  const given = Buffer.from(req.headers.authorization || '');
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}

const app = express();
app.use(function requireValidUser(req, res, next) {
  if (isAdmin(req)) {
    return next();
  }
  req.resume(); // the body is read and dropped, so a kept-alive connection stays usable
  const body = JSON.stringify({error: 'unauthorized', reason: 'Authentication required.'}) + '\n';
  res.writeHead(401, {'Content-Type': 'application/json', 'WWW-Authenticate': 'Basic realm="server"',
                      'Content-Length': Buffer.byteLength(body)});
  res.end(body);
});

const pouchApp = require('express-pouchdb')({configPath: './config.json', logPath: './log.txt'});
pouchApp.setPouchDB(PouchDB.defaults({adapter: 'memory'}));
pouchApp.couchConfig.set('admins', user, password, function (err) {
  if (err) {
    console.error('cannot set the server admin: ' + err);
    process.exit(1);
  }
  app.use(pouchApp);
  const server = app.listen(Number(portText), host, function () {
    console.log('listening on http://' + host + ':' + portText);
  });
  server.on('error', function (e) {
    console.error('cannot serve on ' + host + ':' + portText + ': ' + e.message);
    process.exit(1);
  });
});

for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.on(sig, function () { process.exit(0); });
}
