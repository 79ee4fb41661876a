// sh.status() of a collection with more chunks than it lists (test_config_chunks_cursor.py):
// the chunks per shard, then 20 chunks and "too many chunks to print".
print("---- sh.status ----");
print(sh.status());
print("---- end ----");
out("chunkCount", () => db.getSiblingDB("config").chunks.countDocuments(
  { uuid: db.getSiblingDB("config").collections.findOne({ _id: "app.c" }).uuid }));
