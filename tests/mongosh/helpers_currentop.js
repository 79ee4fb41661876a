// test_mongosh_helpers.py, run B: db.currentOp() while an insert is held at a shard's
// failpoint (hangBeforeWriteCommit): the shard's operation, tagged as mongos tags it, and
// with localOps the router's own.
out("heldOnShards", () => db.currentOp({ "command.insert": "held" }).inprog.map((o) =>
  [o.shard, o.op, o.ns, o.active, typeof o.opid, o.opid.startsWith(o.shard + ":"), typeof o.client_s,
   o.secs_running._bsontype, o.microsecs_running > 0, o.type, o.command.documents.length]));
out("heldLocal", () => db.getSiblingDB("admin").aggregate([{ $currentOp: { localOps: true } },
                                                           { $match: { "command.insert": "held" } }])
  .toArray().map((o) => [o.shard, o.op, o.ns, typeof o.opid, typeof o.client, o.desc.startsWith("conn")]));
out("currentOpAll", () => db.currentOp(true).inprog.some((o) => o.command.insert === "held"));
out("selfListed", () => db.currentOp({ "command.aggregate": 1, "command.pipeline.0.$currentOp": { $exists: true } })
  .inprog.map((o) => o.shard).sort());
out("notAdmin", () => db.getSiblingDB("p").aggregate([{ $currentOp: {} }]).toArray());
out("badOption", () => db.getSiblingDB("admin").aggregate([{ $currentOp: { nosuch: true } }]).toArray());
out("badType", () => db.getSiblingDB("admin").aggregate([{ $currentOp: { localOps: 1 } }]).toArray());
// The router's cursor over the listing, one document a batch (getMore on "$cmd.aggregate").
out("batched", () => db.getSiblingDB("admin").aggregate([{ $currentOp: {} }], { batchSize: 1 })
  .toArray().filter((o) => o.command.insert === "held" || o.command.aggregate === 1).length);
