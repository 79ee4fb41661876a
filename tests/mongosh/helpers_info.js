// test_mongosh_helpers.py, run A: moveRange with only min (mongosh sends max: null), the
// metadata helpers (getShardVersion, getShardMap, checkMetadataConsistency with its
// cursor), db.hostInfo() and serverStatus().sharding through a router.
const cfg = db.getSiblingDB("config");
out("shardingDefault", () => db.serverStatus().sharding);
out("enableSharding", () => sh.enableSharding("p", "shard0").ok);
out("shardMr", () => sh.shardCollection("p.mr", { k: 1 }).ok);
// A 4 KB chunk size (test-only valueBytes): moveRange's absent max is the chunk-size point.
out("chunkSize", () => cfg.settings.updateOne({ _id: "chunksize" }, { $set: { valueBytes: 4096 } },
                                              { upsert: true }).acknowledged);
out("insertMr", () => db.getSiblingDB("p").mr.insertMany(
  Array.from({ length: 40 }, (_, i) => ({ _id: i, k: i, pad: "x".repeat(200) }))).insertedIds[39]);
out("moveRangeMinOnly", () => sh.moveRange("p.mr", "shard1", { k: MinKey() }).ok);
const uuid = cfg.collections.findOne({ _id: "p.mr" }).uuid;
out("chunksMr", () => cfg.chunks.find({ uuid: uuid }, { _id: 0, min: 1, max: 1, shard: 1 })
                            .sort({ min: 1 }).toArray());
out("chunkSizeBack", () => cfg.settings.updateOne({ _id: "chunksize" }, { $set: { value: 128 }, $unset: { valueBytes: 1 } })
                                                 .modifiedCount);
// getShardVersion: the router's cached version, as config.collections / config.chunks have it.
out("shardVersion", () => {
  const v = db.getSiblingDB("p").mr.getShardVersion();
  const coll = cfg.collections.findOne({ _id: "p.mr" });
  const top = cfg.chunks.find({ uuid: uuid }).sort({ lastmod: -1 }).limit(1).next().lastmod;
  return [v.version.equals(top), v.versionEpoch.equals(coll.lastmodEpoch),
          v.versionTimestamp.equals(coll.timestamp), v.ok];
});
out("shardVersionFull", () => db.adminCommand({ getShardVersion: "p.mr", fullMetadata: true }).chunks.length);
out("shardVersionDb", () => db.adminCommand({ getShardVersion: "p" }).primaryShard);
out("shardVersionUnsharded", () => db.adminCommand({ getShardVersion: "p.none" }));
out("shardVersionNotAdmin", () => db.getSiblingDB("p").runCommand({ getShardVersion: "p.mr" }));
out("shardMap", () => db.adminCommand({ getShardMap: 1 }));
out("hostInfo", () => {
  const h = db.hostInfo();
  return [h.system.numCores, h.system.cpuAddrSize, Number(h.system.memSizeMB),
          h.system.currentTime instanceof Date, h.os.type, h.os.version.startsWith("Kernel "),
          h.extra.kernelVersion.length > 0, h.extra.pageSize.valueOf(), h.system.numaEnabled, h.ok];
});
// checkMetadataConsistency: the helpers' cursor drained with getMore (batchSize 1).
out("consistencyAll", () => sh.checkMetadataConsistency().toArray().map((x) => [x.type, x.details.namespace]).sort());
out("consistencyDb", () => db.getSiblingDB("p").checkMetadataConsistency({ cursor: { batchSize: 1 } })
                              .toArray().map((x) => x.details.namespace).sort());
out("consistencyColl", () => db.getSiblingDB("p").mr.checkMetadataConsistency().toArray());
