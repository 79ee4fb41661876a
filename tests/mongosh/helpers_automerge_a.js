// test_mongosh_helpers.py, run C1: sh.disableAutoMerger(ns) keeps a collection's chunks
// while the auto-merger merges another's; sh.enableAutoMerger(ns) lets it merge.
function nchunks(ns) {
  const cfg = db.getSiblingDB("config");
  return cfg.chunks.countDocuments({ uuid: cfg.collections.findOne({ _id: ns }).uuid });
}
function waitChunks(ns, n) {  // bounded: 20 s
  for (let i = 0; i < 200 && nchunks(ns) !== n; i++) sleep(100);
  return nchunks(ns);
}
out("shardOn", () => sh.shardCollection("p.on", { k: 1 }).ok);
out("shardOff", () => sh.shardCollection("p.off", { k: 1 }).ok);
out("disableOff", () => sh.disableAutoMerger("p.off"));
out("flagOff", () => db.getSiblingDB("config").collections.findOne({ _id: "p.off" }).enableAutoMerge);
for (const ns of ["p.on", "p.off"]) for (const k of [10, 20, 30]) sh.splitAt(ns, { k: k });
out("mergedOn", () => waitChunks("p.on", 1));
sleep(1000);  // five more passes of the auto-merger (--auto-merger-interval-ms 200)
out("keptOff", () => nchunks("p.off"));
out("enableOff", () => sh.enableAutoMerger("p.off"));
out("flagOn", () => db.getSiblingDB("config").collections.findOne({ _id: "p.off" }).enableAutoMerge);
out("mergedOff", () => waitChunks("p.off", 1));
out("badField", () => db.getSiblingDB("config").runCommand({
  update: "collections", updates: [{ q: { _id: "p.off" }, u: { $set: { key: { x: 1 } } } }] }).writeErrors);
out("stopAll", () => sh.stopAutoMerger().acknowledged);
out("isEnabledStopped", () => sh.isAutoMergerEnabled());
for (const k of [10, 20]) sh.splitAt("p.on", { k: k });
out("splitAgain", () => nchunks("p.on"));
