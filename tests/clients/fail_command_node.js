#!/usr/bin/env node
/*
 * fail_command_node.js — failCommand as drivers' test suites use it, seen by the Node
 * driver (npm `mongodb`, found through NODE_PATH) through a minishard router's wire port:
 *
 *     NODE_PATH=build/mongosh/node_modules node tests/clients/fail_command_node.js URL
 *
 * closeConnection and a labelled errorCode make the driver retry an insert once (and give
 * up when the point fires twice, or when errorLabels is []); a writeConcernError is
 * reported on an applied insert, and retried when the server labels it (top-level
 * errorLabels); appName fails only the client of that name; a failed hello reaches the
 * driver's monitor. Each check prints `OK <name>`
 * or `FAIL <name>: <why>`; the last line is `FAILCMD DONE passed=N failed=M`.
 */
'use strict';
const { MongoClient } = require('mongodb');

const URL = process.argv[2];
const checks = [];
const check = (name, fn) => checks.push([name, fn]);

function eq(got, want, what) {
  if (JSON.stringify(got) !== JSON.stringify(want))
    throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

/* A client whose insert commands are counted (a retry is a second one). */
async function client(appName) {
  const c = new MongoClient(URL, { appName, monitorCommands: true, retryWrites: true,
                                   serverSelectionTimeoutMS: 10000, connectTimeoutMS: 5000 });
  c.inserts = 0;
  c.on('commandStarted', (e) => { if (e.commandName === 'insert') c.inserts++; });
  await c.connect();
  return c;
}

let admin;

async function fail(mode, data) {
  const cmd = { configureFailPoint: 'failCommand', mode };
  if (data) cmd.data = data;
  return (await admin.db('admin').command(cmd)).count;
}

async function fresh(name) {
  const coll = admin.db('failcmdnode').collection(name);
  await coll.drop().catch(() => {});
  return coll;
}

/* One insertOne({_id: 1}) by a fresh client while failCommand (mode, data) is on:
 * `inserts` insert commands sent (2 = retried once), `docs` documents after, and the
 * error it fails with (`errName` matched against the error's name, `code` its code;
 * neither: it succeeds). `tolerate(e)`: an error accepted in place of a success. */
async function insertUnder(name, mode, data, { inserts, docs, errName, code, tolerate }) {
  const coll = await fresh(name);
  const c = await client('node-' + name);
  try {
    await fail(mode, Object.assign({ failCommands: ['insert'] }, data));
    let err = null;
    await c.db('failcmdnode').collection(name).insertOne({ _id: 1 }).catch((e) => { err = e; });
    if (err && tolerate && tolerate(err)) err = null;
    if (errName === undefined && code === undefined && err) throw err;
    if ((errName !== undefined || code !== undefined) && !err) throw new Error('insert succeeded');
    if (errName !== undefined && !errName.test(err.name)) throw new Error(`got ${err.name}: ${err.message}`);
    if (code !== undefined) eq(err.code, code, 'error code');
    eq(c.inserts, inserts, 'insert commands sent');
    eq(await coll.countDocuments({}), docs, 'documents');
  } finally { await c.close(); }
}

check('close_connection_retried_once', () =>
  insertUnder('close1', { times: 1 }, { closeConnection: true }, { inserts: 2, docs: 1 }));

check('close_connection_twice_gives_up', () =>
  insertUnder('close2', { times: 2 }, { closeConnection: true },
              { inserts: 2, docs: 0, errName: /Network/ }));

check('shutdown_in_progress_labelled_and_retried', () =>
  insertUnder('sip', { times: 1 }, { errorCode: 91 }, { inserts: 2, docs: 1 }));

check('empty_error_labels_not_retried', () =>
  insertUnder('nolabel', { times: 1 }, { errorCode: 91, errorLabels: [] },
              { inserts: 1, docs: 0, code: 91 }));

check('write_concern_error_reported', () =>
  insertUnder('wce', { times: 1 },
              { writeConcernError: { code: 100, codeName: 'UnsatisfiableWriteConcern', errmsg: 'wc' } },
              { inserts: 1, docs: 1, code: 100 }));

/* The server labels it (top-level errorLabels). The retry runs the insert again: without a
 * retry record it may meet the first (11000). */
check('server_labelled_write_concern_error_retried', () =>
  insertUnder('wce2', { times: 1 },
              { writeConcernError: { code: 91, codeName: 'ShutdownInProgress', errmsg: 'stop' } },
              { inserts: 2, docs: 1, tolerate: (e) => e.code === 11000 }));

check('app_name_filter', async () => {
  const coll = await fresh('app');
  await coll.insertOne({ _id: 1 });
  const a = await client('node-appA');
  const b = await client('node-appB');
  try {
    const n0 = await fail('alwaysOn', { failCommands: ['find'], errorCode: 2, appName: 'node-appA' });
    let err = null;
    await a.db('failcmdnode').collection('app').findOne({}).catch((e) => { err = e; });
    eq(err && err.code, 2, "appA's error");
    eq(await b.db('failcmdnode').collection('app').findOne({}), { _id: 1 }, "appB's find");
    const n1 = await fail('off');
    eq(n1 - n0, 1, 'times the point fired');
  } finally {
    await fail('off');
    await a.close();
    await b.close();
  }
});

check('failed_hello_reaches_the_monitor', async () => {
  const c = new MongoClient(URL, { appName: 'node-monitor', heartbeatFrequencyMS: 500,
                                   serverSelectionTimeoutMS: 10000 });
  const failures = [];
  c.on('serverHeartbeatFailed', (e) => failures.push(e.failure));
  await c.connect();
  try {
    await fail('alwaysOn', { failCommands: ['hello', 'isMaster'], errorCode: 91,
                             appName: 'node-monitor' });
    const deadline = Date.now() + 15000;
    while (!failures.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    await fail('off');
    if (!failures.length) throw new Error('no failed heartbeat in 15 s');
    eq(failures[0].code, 91, 'heartbeat error code');
  } finally {
    await fail('off');
    await c.close();
  }
});

async function main() {
  let passed = 0, failed = 0;
  admin = new MongoClient(URL, { appName: 'node-admin', serverSelectionTimeoutMS: 10000 });
  await admin.connect();
  for (const [name, fn] of checks) {
    try {
      await fn();
      passed++;
      console.log(`OK ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      await fail('off').catch(() => {});
    }
  }
  await admin.close();
  console.log(`FAILCMD DONE passed=${passed} failed=${failed}`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => { console.log(`FAIL main: ${e && e.stack}`); console.log('FAILCMD DONE passed=0 failed=1'); process.exit(1); });
