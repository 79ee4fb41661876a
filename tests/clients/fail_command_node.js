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
 * errorLabels); appName fails only the client of that name. Each check prints `OK <name>`
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

check('close_connection_retried_once', async () => {
  const coll = await fresh('close1');
  const c = await client('node-close');
  try {
    await fail({ times: 1 }, { failCommands: ['insert'], closeConnection: true });
    await c.db('failcmdnode').collection('close1').insertOne({ _id: 1 });
    eq(c.inserts, 2, 'inserts sent');
    eq(await coll.countDocuments({}), 1, 'documents');
  } finally { await c.close(); }
});

check('close_connection_twice_gives_up', async () => {
  const coll = await fresh('close2');
  const c = await client('node-close2');
  try {
    await fail({ times: 2 }, { failCommands: ['insert'], closeConnection: true });
    let err = null;
    await c.db('failcmdnode').collection('close2').insertOne({ _id: 1 }).catch((e) => { err = e; });
    if (!err) throw new Error('insert succeeded through two closed connections');
    if (!/Network/.test(err.name)) throw new Error(`expected a network error, got ${err.name}: ${err.message}`);
    eq(c.inserts, 2, 'inserts sent');
    eq(await coll.countDocuments({}), 0, 'documents');
  } finally { await c.close(); }
});

check('shutdown_in_progress_labelled_and_retried', async () => {
  const coll = await fresh('sip');
  const c = await client('node-sip');
  try {
    await fail({ times: 1 }, { failCommands: ['insert'], errorCode: 91 });
    await c.db('failcmdnode').collection('sip').insertOne({ _id: 1 });
    eq(c.inserts, 2, 'inserts sent');
    eq(await coll.countDocuments({}), 1, 'documents');
  } finally { await c.close(); }
});

check('empty_error_labels_not_retried', async () => {
  await fresh('nolabel');
  const c = await client('node-nolabel');
  try {
    await fail({ times: 1 }, { failCommands: ['insert'], errorCode: 91, errorLabels: [] });
    let err = null;
    await c.db('failcmdnode').collection('nolabel').insertOne({ _id: 1 }).catch((e) => { err = e; });
    if (!err) throw new Error('insert succeeded');
    eq(err.code, 91, 'error code');
    eq(c.inserts, 1, 'inserts sent');
  } finally { await c.close(); }
});

check('write_concern_error_reported', async () => {
  const coll = await fresh('wce');
  const c = await client('node-wce');
  try {
    await fail({ times: 1 }, { failCommands: ['insert'],
      writeConcernError: { code: 100, codeName: 'UnsatisfiableWriteConcern', errmsg: 'wc' } });
    let err = null;
    await c.db('failcmdnode').collection('wce').insertOne({ _id: 1 }).catch((e) => { err = e; });
    if (!err) throw new Error('no writeConcernError reported');
    eq(err.code, 100, 'writeConcernError code');
    eq(c.inserts, 1, 'inserts sent');
    eq(await coll.countDocuments({}), 1, 'documents (the insert ran)');
  } finally { await c.close(); }
});

check('server_labelled_write_concern_error_retried', async () => {
  const coll = await fresh('wce2');
  const c = await client('node-wce2');
  try {
    await fail({ times: 1 }, { failCommands: ['insert'],
      writeConcernError: { code: 91, codeName: 'ShutdownInProgress', errmsg: 'stop' } });
    // The retry runs the insert again; without a retry record it meets the first (11000).
    await c.db('failcmdnode').collection('wce2').insertOne({ _id: 1 }).catch((e) => {
      if (e.code !== 11000) throw e;
    });
    eq(c.inserts, 2, 'inserts sent (the labelled writeConcernError was retried)');
    eq(await coll.countDocuments({}), 1, 'documents');
  } finally { await c.close(); }
});

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
