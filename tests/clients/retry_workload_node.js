// retry_workload_node.js MODULE URL SEED OPS PREFIX — the Node driver's half of
// test_retryable_writes.py: the same single-document retryable writes as
// retry_workload_pymongo.py (updateOne $inc, insertOne, findOneAndUpdate, deleteOne on a
// group of two), printing one JSON line of what was acknowledged.
'use strict';
const [modPath, url, seedArg, opsArg, prefix] = process.argv.slice(2);
const { MongoClient, ReturnDocument } = require(modPath);

let state = Number(seedArg) >>> 0;   // a small seeded generator (xorshift32)
function rnd(n) {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state % n;
}

async function main() {
  const ops = Number(opsArg);
  const client = new MongoClient(url, { retryWrites: true, serverSelectionTimeoutMS: 20000,
                                        socketTimeoutMS: 20000, directConnection: true });
  await client.connect();
  const c = client.db('app').collection('c');
  const d = client.db('app').collection('d');
  const inc = {}, fam = {}, inserted = [], deleted = [], errors = [];
  const kinds = ['inc', 'inc', 'insert', 'fam', 'delete'];
  for (let i = 0; i < ops; i++) {
    const k = rnd(40);
    const kind = kinds[rnd(kinds.length)];
    try {
      if (kind === 'inc') {
        const r = await c.updateOne({ _id: k }, { $inc: { n: 1 } });
        if (r.matchedCount !== 1 || r.modifiedCount !== 1) throw new Error(JSON.stringify(r));
        inc[k] = (inc[k] || 0) + 1;
      } else if (kind === 'insert') {
        const id = `${prefix}-i${i}`;
        await c.insertOne({ _id: id, p: prefix });
        inserted.push(id);
      } else if (kind === 'fam') {
        const doc = await c.findOneAndUpdate({ _id: k }, { $inc: { f: 1 } },
                                             { returnDocument: ReturnDocument.AFTER,
                                               includeResultMetadata: false });
        if (!doc || doc.f === undefined) throw new Error('no post-image');
        fam[k] = (fam[k] || 0) + 1;
      } else {
        const g = `${prefix}-${i}`;
        const r = await d.deleteOne({ g });
        if (r.deletedCount !== 1) throw new Error(JSON.stringify(r));
        deleted.push(g);
      }
    } catch (e) {
      errors.push(`${kind} ${i}: ${e && e.message}`);
    }
  }
  await client.close();
  console.log(JSON.stringify({ inc, fam, inserted, deleted_groups: deleted,
                               errors: errors.slice(0, 20), nerrors: errors.length }));
}

main().catch((e) => { console.error(e); process.exit(1); });
