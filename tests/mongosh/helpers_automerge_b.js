// test_mongosh_helpers.py, run C2 (after the config server logged passes skipped for
// settings automerge {enabled: false}): the chunks are still split; sh.startAutoMerger()
// lets the auto-merger merge them.
function nchunks(ns) {
  const cfg = db.getSiblingDB("config");
  return cfg.chunks.countDocuments({ uuid: cfg.collections.findOne({ _id: ns }).uuid });
}
out("keptWhileStopped", () => nchunks("p.on"));
out("startAll", () => sh.startAutoMerger().acknowledged);
out("isEnabledStarted", () => sh.isAutoMergerEnabled());
out("mergedAfterStart", () => {
  for (let i = 0; i < 200 && nchunks("p.on") !== 1; i++) sleep(100);
  return nchunks("p.on");
});
