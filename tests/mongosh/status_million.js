// long_million_chunks.py: sh.status() and a full read of config.chunks over the wire
// protocol at a million chunks. Prints the status and the times.
const cfgdb = db.getSiblingDB("config");
let t0 = Date.now();
print("---- sh.status ----");
print(sh.status());
print("---- end ----");
out("statusMS", () => Date.now() - t0);
const uuid = cfgdb.collections.findOne({ _id: "app.big" }).uuid;
t0 = Date.now();
out("itcount", () => cfgdb.chunks.find({ uuid: uuid }).sort({ min: 1 }).itcount());
out("readMS", () => Date.now() - t0);
out("countDocuments", () => cfgdb.chunks.countDocuments({ uuid: uuid }));
