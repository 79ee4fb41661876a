// The db.c.* set through whatever mongosh is connected to (a router or a standalone shard):
// run by test_mongosh.py with the collection `db.crud` empty.
const c = db.crud;
out("insertMany", () => c.insertMany([...Array(30).keys()].map(i => ({ _id: i, k: i, g: i % 3 }))));
out("insertOne", () => c.insertOne({ _id: 100, k: 100, g: 1 }));
out("stats", () => { const s = c.stats(); return [s.count, s.nindexes, s.avgObjSize > 0, s.ns]; });
out("dbStats", () => {
  const s = db.stats(1024);
  return [s.db, s.collections, s.views, s.objects, s.avgObjSize > 0, s.storageSize >= 1, s.scaleFactor,
    s.totalSize >= s.storageSize, s.fsTotalSize > 0, s.raw ? Object.keys(s.raw).sort() : null];
});
out("find", () => c.find({}, { _id: 1 }).sort({ k: -1 }).skip(2).limit(3).toArray());
out("findRange", () => c.find({ k: { $gte: 8, $lt: 12 } }).sort({ k: 1 }).toArray());
out("explainCount", () => typeof c.explain().count({ g: 1 }).queryPlanner);
out("findOne", () => c.findOne({ k: 5 }));
out("findOneNone", () => c.findOne({ k: 555 }));
out("countDocuments", () => c.countDocuments({ g: 1 }));
out("countAll", () => c.countDocuments());
out("estimatedDocumentCount", () => c.estimatedDocumentCount());
out("distinct", () => c.distinct("g").sort());
out("updateOne", () => c.updateOne({ k: 1 }, { $set: { x: 1 } }));
out("updateMany", () => c.updateMany({ g: 2 }, { $inc: { y: 1 } }));
out("upsert", () => c.updateOne({ _id: 200 }, { $set: { k: 200 } }, { upsert: true }));
out("replaceOne", () => c.replaceOne({ k: 3 }, { k: 3, r: true }));
out("afterReplace", () => c.findOne({ _id: 3 }));
out("deleteOne", () => c.deleteOne({ k: 4 }));
out("deleteMany", () => c.deleteMany({ g: 0 }));
out("findOneAndUpdate", () => c.findOneAndUpdate({ k: 7 }, { $set: { z: 1 } }, { returnDocument: "after" }));
out("createIndex", () => c.createIndex({ g: 1 }));
out("getIndexes", () => c.getIndexes().map(i => i.name).sort());
out("countAfter", () => c.countDocuments());
out("sumByG", () => c.aggregate([{ $group: { _id: "$g", n: { $sum: 1 } } }, { $sort: { _id: 1 } }]).toArray());
out("dupKey", () => c.insertOne({ _id: 1 }));
out("sddHere", () => db.getSiblingDB("admin").aggregate([{ $shardedDataDistribution: {} }]).toArray().length);
out("drop", () => c.drop());
out("countDropped", () => c.countDocuments());
out("renameCollection", () => {
  db.rn.insertOne({ _id: 1 });
  const r = db.rn.renameCollection("rn2");
  return [r.ok, db.rn2.countDocuments(), db.rn.countDocuments()];
});
