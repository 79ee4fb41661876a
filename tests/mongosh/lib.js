// Shared by tests/mongosh/*.js (loaded first by test_mongosh.py): out(name, fn) runs fn and
// prints one line "name => <relaxed EJSON of the result>" or "name !! <error> code=<code>",
// which tests/integration/test_mongosh.py compares with what MongoDB prints.
function out(name, f) {
  try {
    print(name + " => " + EJSON.stringify(f(), { relaxed: true }));
  } catch (e) {
    print(name + " !! " + e.message + " code=" + e.code);
  }
}
