// node_monitor_soak.js — MongoDB's Node.js driver (6.x, build/nodedriver) against a router:
// mixed operations for a while with fast heartbeats, counting the server-monitoring
// events that tell whether the streaming hello works (tests/integration/
// test_streaming_hello.py runs it with NODE_PATH set to the driver's node_modules).
//
//   node node_monitor_soak.js URL SECONDS
//
// The monitor streams (serverMonitoringMode "stream": awaitable hello with exhaustAllowed,
// heartbeatFrequencyMS 500 = its maxAwaitTimeMS). A reply without moreToCome makes the
// driver fail the heartbeat ("Server ended moreToCome unexpectedly"), mark the server
// Unknown and clear its connection pool: connectionPoolCleared and serverHeartbeatFailed
// must stay at zero. serverHeartbeatSucceeded with awaited: true shows the stream was used.
// Prints one line: "RESULT {json}".
'use strict';
const { MongoClient } = require('mongodb');

const url = process.argv[2];
const seconds = Number(process.argv[3] || 60);
const DB = 'soak';
const COLL = 'mixed';

function counter() {
  return { poolCleared: 0, hbFailed: 0, hbSucceeded: 0, hbAwaited: 0, hbStarted: 0 };
}

// One round of every kind of operation on the sharded collection; i makes keys unique.
async function round(coll, i, stats) {
  const docs = [];
  for (let k = 0; k < 5; k++) docs.push({ _id: i * 10 + k, k: i * 10 + k, g: i % 7 });
  await coll.insertMany(docs);
  stats.inserted += docs.length;
  const found = await coll.find({ g: i % 7 }).limit(20).toArray();
  if (found.length === 0) throw new Error('find returned nothing after an insert');
  await coll.updateMany({ _id: { $in: [i * 10, i * 10 + 1] } }, { $inc: { u: 1 } });
  await coll.deleteOne({ _id: i * 10 + 4 });
  const agg = await coll.aggregate([{ $match: { g: i % 7 } }, { $group: { _id: '$g', n: { $sum: 1 } } }])
    .toArray();
  if (agg.length !== 1) throw new Error('aggregate gave ' + JSON.stringify(agg));
  stats.rounds++;
}

async function main() {
  const ev = counter();
  const errors = [];
  const stats = { rounds: 0, inserted: 0 };
  const client = new MongoClient(url, {
    heartbeatFrequencyMS: 500,
    serverMonitoringMode: 'stream',
    serverSelectionTimeoutMS: 10000,
    maxPoolSize: 10,
  });
  client.on('connectionPoolCleared', (e) => {
    ev.poolCleared++;
    if (errors.length < 5) errors.push('poolCleared ' + e.address);
  });
  client.on('serverHeartbeatStarted', () => { ev.hbStarted++; });
  client.on('serverHeartbeatFailed', (e) => {
    ev.hbFailed++;
    if (errors.length < 5) errors.push('heartbeatFailed ' + String(e.failure && e.failure.message));
  });
  client.on('serverHeartbeatSucceeded', (e) => {
    ev.hbSucceeded++;
    if (e.awaited) ev.hbAwaited++;
  });
  await client.connect();
  const admin = client.db('admin');
  await admin.command({ enableSharding: DB });
  await admin.command({ shardCollection: DB + '.' + COLL, key: { k: 'hashed' } });
  const coll = client.db(DB).collection(COLL);

  const end = Date.now() + seconds * 1000;
  // Three workers share the pool, so operations overlap the monitor's stream.
  const workers = [0, 1, 2].map(async (w) => {
    for (let i = w; Date.now() < end; i += 3) {
      try {
        await round(coll, i, stats);
      } catch (err) {
        if (errors.length < 5) errors.push('op ' + String(err && err.message));
        stats.failed = (stats.failed || 0) + 1;
      }
    }
  });
  await Promise.all(workers);
  const count = await coll.countDocuments({});
  await client.close();
  console.log('RESULT ' + JSON.stringify({ ...ev, ...stats, count, errors }));
}

main().catch((err) => {
  console.log('RESULT ' + JSON.stringify({ fatal: String(err && err.stack) }));
  process.exit(1);
});
