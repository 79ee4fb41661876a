/*
 * raw_pipe.c — the baseline of bench_migration.py: the least work that moves a chunk's
 * rows from one SQLite file to another through NNG, with none of minishard's protocol.
 * Run by the bench (not a bench of its own: `make bench` runs only bench_*), as
 *     raw_pipe SRC_DB TABLE DST_DB
 * The parent process listens on a PULL socket on 127.0.0.1 and inserts; a child (this
 * program again, exec'd as `raw_pipe --send SRC_DB TABLE URL`: NNG's threads do not
 * survive a plain fork) opens SRC_DB read-only (the donor shard's own file, WAL mode, so the running shard is
 * not disturbed), reads TABLE in shard-key order (the `sk` index, as the donor's clone
 * does) and pushes the rows (id, sk, doc, already encoded: nothing is parsed) in
 * messages of up to BATCH_BYTES; the parent inserts each message in one transaction
 * into a table of the same shape as a shard collection's (UNIQUE id, index on sk),
 * with the shard's pragmas (WAL, synchronous NORMAL). PUSH/PULL lets reading and
 * inserting overlap, so this is a ceiling, not a copy of the migration's pull protocol.
 * Prints one line: RAW_PIPE docs=N bytes=B ms=T (bytes = BSON document bytes; ms from
 * before the fork to the last COMMIT).
 */
#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH_BYTES (4 * 1024 * 1024)   /* a quarter of a clone batch's 16 MB: keeps both sides busy */
#define NO_SK 0xffffffffu

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "raw_pipe: %s: %s\n", what, why);
    exit(1);
}

static void put_u32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Child: reads every row of table in sk order and pushes length-prefixed rows. */
static int sender(const char *src, const char *table, const char *url) {
    sqlite3 *db;
    sqlite3_stmt *st;
    nng_socket s;
    char sql[256];
    char *buf = malloc(BATCH_BYTES + 1024 * 1024 * 17);
    size_t used = 0;
    int rc;
    if (!buf) die("send", "out of memory");
    if (sqlite3_open_v2(src, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die("open src", sqlite3_errmsg(db));
    snprintf(sql, sizeof sql, "SELECT id, sk, doc FROM %s ORDER BY sk", table);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die("prepare", sqlite3_errmsg(db));
    if ((rc = nng_push0_open(&s)) != 0 || (rc = nng_dial(s, url, NULL, 0)) != 0) die("dial", nng_strerror(rc));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint32_t il = (uint32_t)sqlite3_column_bytes(st, 0), dl, sl;
        const void *id = sqlite3_column_blob(st, 0);
        const void *sk = sqlite3_column_blob(st, 1);
        const void *doc;
        sl = sqlite3_column_type(st, 1) == SQLITE_NULL ? NO_SK : (uint32_t)sqlite3_column_bytes(st, 1);
        doc = sqlite3_column_blob(st, 2);
        dl = (uint32_t)sqlite3_column_bytes(st, 2);
        put_u32(buf + used, il);
        put_u32(buf + used + 4, sl);
        put_u32(buf + used + 8, dl);
        used += 12;
        memcpy(buf + used, id, il);
        used += il;
        if (sl != NO_SK) {
            memcpy(buf + used, sk, sl);
            used += sl;
        }
        memcpy(buf + used, doc, dl);
        used += dl;
        if (used >= BATCH_BYTES) {
            if ((rc = nng_send(s, buf, used, 0)) != 0) die("send", nng_strerror(rc));
            used = 0;
        }
    }
    if (rc != SQLITE_DONE) die("read", sqlite3_errmsg(db));
    if (used && (rc = nng_send(s, buf, used, 0)) != 0) die("send", nng_strerror(rc));
    if ((rc = nng_send(s, "", 0, 0)) != 0) die("send end", nng_strerror(rc));  /* empty = done */
    sqlite3_finalize(st);
    sqlite3_close(db);
    usleep(200 * 1000);  /* let the last messages leave before the socket closes */
    nng_close(s);
    free(buf);
    return 0;
}

static void exec(sqlite3 *db, const char *sql) {
    char *e = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK) die(sql, e ? e : "?");
}

int main(int argc, char **argv) {
    nng_socket s;
    sqlite3 *db;
    sqlite3_stmt *ins;
    char url[64];
    long long t0, docs = 0, bytes = 0;
    pid_t child;
    int rc, status;
    if (argc == 5 && strcmp(argv[1], "--send") == 0) return sender(argv[2], argv[3], argv[4]);
    if (argc != 4) {
        fprintf(stderr, "usage: raw_pipe SRC_DB TABLE DST_DB\n");
        return 2;
    }
    if (sqlite3_open(argv[3], &db) != SQLITE_OK) die("open dst", sqlite3_errmsg(db));
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY;"
             " PRAGMA cache_size=-65536;"
             " CREATE TABLE c(rid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, sk BLOB, doc BLOB NOT NULL);"
             " CREATE INDEX c_sk ON c(sk) WHERE sk IS NOT NULL;");
    if (sqlite3_prepare_v2(db, "INSERT INTO c(id, sk, doc) VALUES (?, ?, ?)", -1, &ins, NULL) != SQLITE_OK)
        die("prepare", sqlite3_errmsg(db));
    if ((rc = nng_pull0_open(&s)) != 0) die("pull", nng_strerror(rc));
    /* port 0: the kernel picks a free one; ask the listener which */
    {
        nng_listener l;
        nng_sockaddr sa;
        if ((rc = nng_listener_create(&l, s, "tcp://127.0.0.1:0")) != 0 ||
            (rc = nng_listener_start(l, 0)) != 0 ||
            (rc = nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa)) != 0)
            die("listen", nng_strerror(rc));
        snprintf(url, sizeof url, "tcp://127.0.0.1:%u", (unsigned)ntohs(sa.s_in.sa_port));
    }
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
    t0 = now_ms();
    if ((child = fork()) < 0) die("fork", "failed");
    if (child == 0) {
        execl("/proc/self/exe", argv[0], "--send", argv[1], argv[2], url, (char *)NULL);
        _exit(127);
    }
    for (;;) {
        char *m;
        size_t n, off = 0;
        if ((rc = nng_recv(s, &m, &n, NNG_FLAG_ALLOC)) != 0) die("recv", nng_strerror(rc));
        if (n == 0) {
            nng_free(m, n);
            break;
        }
        exec(db, "BEGIN");
        while (off < n) {
            uint32_t il = get_u32(m + off), sl = get_u32(m + off + 4), dl = get_u32(m + off + 8);
            off += 12;
            sqlite3_bind_blob(ins, 1, m + off, (int)il, SQLITE_STATIC);
            off += il;
            if (sl == NO_SK) {
                sqlite3_bind_null(ins, 2);
            } else {
                sqlite3_bind_blob(ins, 2, m + off, (int)sl, SQLITE_STATIC);
                off += sl;
            }
            sqlite3_bind_blob(ins, 3, m + off, (int)dl, SQLITE_STATIC);
            off += dl;
            if (sqlite3_step(ins) != SQLITE_DONE) die("insert", sqlite3_errmsg(db));
            sqlite3_reset(ins);
            docs++;
            bytes += dl;
        }
        exec(db, "COMMIT");
        nng_free(m, n);
    }
    printf("RAW_PIPE docs=%lld bytes=%lld ms=%lld\n", docs, bytes, now_ms() - t0);
    waitpid(child, &status, 0);
    sqlite3_finalize(ins);
    sqlite3_close(db);
    nng_close(s);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
