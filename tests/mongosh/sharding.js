// sh.* helpers and sh.status() through a router of a 3-shard cluster (test_mongosh.py).
out("getBalancerState", () => sh.getBalancerState());
out("stopBalancer", () => sh.stopBalancer().ok);
out("getBalancerStateStopped", () => sh.getBalancerState());
out("isBalancerRunning", () => sh.isBalancerRunning().mode);
out("startBalancer", () => sh.startBalancer().ok);
out("balancerStatus", () => db.adminCommand({ balancerStatus: 1 }).mode);
sh.stopBalancer();   // no automatic moves while the chunk layout below is checked
out("enableSharding", () => sh.enableSharding("mshdb").ok);
out("shardCollection", () => sh.shardCollection("mshdb.people", { k: 1 }).collectionsharded);
const p = db.getSiblingDB("mshdb").people;
out("shardedInsert", () => p.insertMany([...Array(30).keys()].map(i => ({ _id: i, k: i }))).insertedIds[29]);
out("splitAt10", () => sh.splitAt("mshdb.people", { k: 10 }).ok);
out("splitAt20", () => sh.splitAt("mshdb.people", { k: 20 }).ok);
out("moveChunk", () => sh.moveChunk("mshdb.people", { k: 15 }, "shard1").ok);
out("moveRange", () => sh.moveRange("mshdb.people", "shard2", { k: 20 }, { k: MaxKey() }).ok);
out("mergedSortSkipLimit", () => p.find({}, { _id: 1 }).sort({ k: -1 }).skip(2).limit(3).toArray());
out("shardedCount", () => p.countDocuments({ k: { $gte: 5 } }));
out("chunksPerShard", () => db.getSiblingDB("config").chunks.aggregate([
  { $group: { _id: "$shard", n: { $sum: 1 } } }, { $sort: { _id: 1 } }]).toArray());
out("disableBalancing", () => sh.disableBalancing("mshdb.people").modifiedCount);
out("noBalance", () => db.getSiblingDB("config").collections.findOne({ _id: "mshdb.people" }).noBalance);
out("enableBalancing", () => sh.enableBalancing("mshdb.people").modifiedCount);
out("addShardAgain", () => sh.addShard(SHARD0_URL).shardAdded);
out("notSharded", () => sh.shardCollection("nodb.x", { k: 1 }).ok);
out("explainFind", () => { const e = p.find({ k: { $gte: 15 } }).explain();
  return [e.queryPlanner.winningPlan.stage, e.queryPlanner.winningPlan.shards.map(s => s.shardName).sort()]; });
out("explainPoint", () => { const e = p.find({ k: 3 }).explain("executionStats");
  return [e.queryPlanner.winningPlan.stage, e.executionStats.nReturned, e.executionStats.executionStages.shards[0].shardName]; });
out("statsShards", () => { const s = p.stats(); return [s.sharded, Object.keys(s.shards).sort()]; });
out("shardDistribution", () => { const d = p.getShardDistribution().value;
  return [d.Totals.chunks, Object.keys(d).sort()]; });
out("collStatsShards", () => p.aggregate([{ $collStats: { count: {} } }, { $project: { _id: 0, shard: 1 } },
  { $sort: { shard: 1 } }]).toArray());
out("latencyStats", () => p.latencyStats().toArray());
const admin = db.getSiblingDB("admin");
out("sddOwned", () => admin.aggregate([{ $shardedDataDistribution: {} }, { $match: { ns: "mshdb.people" } },
  { $unwind: "$shards" }, { $project: { _id: 0, s: "$shards.shardName", n: "$shards.numOwnedDocuments",
    sane: { $eq: ["$shards.orphanedSizeBytes", { $multiply: ["$shards.numOrphanedDocs", 21] }] } } }]).toArray());
out("sddSpec", () => admin.aggregate([{ $shardedDataDistribution: { x: 1 } }]).toArray());
out("sddNotAdmin", () => db.getSiblingDB("mshdb").aggregate([{ $shardedDataDistribution: {} }]).toArray());
out("addShardNew", () => sh.addShard(NEW_SHARD_URL).shardAdded);
out("shardCount", () => db.getSiblingDB("config").shards.countDocuments());
print("---- sh.status ----");
print(sh.status());
print("---- end ----");
