/*
 * ctl_explain.c — shardctl's `explain-balance NS`: asks the router for balancerExplain
 * (configsvr/cmd_bal.c) and prints it as a few lines a learner can read: the verdict
 * and why, the policy with its threshold, one row per shard (chunks, jumbo, data,
 * draining, maxSize, busy), and the next moves. --json prints the raw reply instead.
 * Also status's per-collection "balancerCompliant" line (balancerCollectionStatus).
 */
#include <stdio.h>
#include <string.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/flags.h"

static const char usage_text[] = "usage: shardctl [--host URL] explain-balance DB.COLL [--json]\n";

static const char *s_of(const bson_t *d, const char *k) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_UTF8(&it)) return bson_iter_utf8(&it, NULL);
    return "";
}

static int64_t i_of(const bson_t *d, const char *k) {
    bson_iter_t it;
    int64_t v = 0;
    if (bson_iter_init_find(&it, d, k)) bsonx_as_int64(&it, &v);
    return v;
}

static bool b_of(const bson_t *d, const char *k) {
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && bsonx_truthy(&it);
}

/* A sub-document (or array) of d as a static view; false when absent. */
static bool sub(const bson_t *d, const char *k, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, d, k)) return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) bson_iter_document(&it, &len, &data);
    else if (BSON_ITER_HOLDS_ARRAY(&it)) bson_iter_array(&it, &len, &data);
    else return false;
    return bson_init_static(out, data, len);
}

static void print_doc(const bson_t *d, const char *k) {
    bson_t v;
    char *json = sub(d, k, &v) ? bsonx_to_json(&v) : NULL;
    fputs(json ? json : "-", stdout);
    bson_free(json);
}

static double mb(int64_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

static void print_explain(const char *ns, const bson_t *r) {
    bson_t pol, bal, coll, arr, row;
    bson_iter_t it;
    if (!sub(r, "policy", &pol)) bson_init(&pol);
    printf("%s: %s — %s\n", ns, s_of(r, "verdict"), s_of(r, "verdictMessage"));
    if (sub(r, "balancer", &bal)) {
        printf("balancer: %s", b_of(&bal, "enabled") ? "enabled" : "off");
        if (!b_of(&bal, "enabled")) printf(" (%s)", s_of(&bal, "offReason"));
        bson_t w;
        if (sub(&bal, "activeWindow", &w))
            printf(", activeWindow %s-%s (%s)", s_of(&w, "start"), s_of(&w, "stop"),
                   b_of(&bal, "inWindow") ? "inside now" : "outside now");
        printf("\n");
    }
    if (sub(r, "collection", &coll))
        printf("collection: noBalance %s, allowMigrations %s, defragmenting %s\n",
               b_of(&coll, "noBalance") ? "true" : "false",
               b_of(&coll, "allowMigrations") ? "true" : "false",
               b_of(&coll, "defragmentCollection") ? "true" : "false");
    bool data = strcmp(s_of(&pol, "policy"), "dataSize") == 0;
    printf("policy %s: %lld chunks, chunk size %.1f MB, ", s_of(&pol, "policy"),
           (long long)i_of(&pol, "nChunks"), mb(i_of(&pol, "chunkSizeBytes")));
    if (data)
        printf("data size difference %.1f MB (moves from %.1f MB)\n",
               mb(i_of(&pol, "dataSizeDifference")), mb(i_of(&pol, "dataSizeThreshold")));
    else
        printf("chunk count difference %lld (moves from %lld)\n",
               (long long)i_of(&pol, "chunkCountDifference"), (long long)i_of(&pol, "threshold"));
    printf("  %-16s %7s %6s %10s %9s %12s %5s\n", "shard", "chunks", "jumbo", "data(MB)", "draining",
           "maxSize(MB)", "busy");
    if (sub(&pol, "shards", &arr) && bson_iter_init(&it, &arr)) {
        while (bson_iter_next(&it)) {
            uint32_t len;
            const uint8_t *d;
            char cap[32] = "-";
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            if (i_of(&row, "maxSizeBytes") > 0)
                snprintf(cap, sizeof cap, "%.0f%s", mb(i_of(&row, "maxSizeBytes")),
                         b_of(&row, "atMaxSize") ? " FULL" : "");
            printf("  %-16s %7lld %6lld %10.1f %9s %12s %5s\n", s_of(&row, "shard"),
                   (long long)i_of(&row, "chunks"), (long long)i_of(&row, "jumboChunks"),
                   mb(i_of(&row, "dataBytes")), b_of(&row, "draining") ? "yes" : "no", cap,
                   b_of(&row, "busy") ? "yes" : "no");
        }
    }
    if (sub(&pol, "next", &arr) && bson_iter_init(&it, &arr) && bson_iter_next(&it)) {
        printf("next moves:\n");
        do {
            uint32_t len;
            const uint8_t *d;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            printf("  ");
            print_doc(&row, "min");
            printf(" .. ");
            print_doc(&row, "max");
            printf("  %s -> %s  (%s)\n", s_of(&row, "from"), s_of(&row, "to"), s_of(&row, "reason"));
        } while (bson_iter_next(&it));
    } else {
        printf("next moves: none (%s)\n", s_of(&pol, "message"));
    }
    if (sub(r, "migrationsInProgress", &arr) && bson_iter_init(&it, &arr))
        while (bson_iter_next(&it)) {
            uint32_t len;
            const uint8_t *d;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            printf("migrating now: %s %s -> %s\n", s_of(&row, "ns"), s_of(&row, "fromShard"),
                   s_of(&row, "toShard"));
        }
}

int ctl_explain_balance(ctl_t *c, int argc, char **argv) {
    bool json = false;
    const flag_spec_t specs[] = {
        {"json", FLAG_BOOL, &json, "print the raw balancerExplain reply"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    /* Flags before or after the namespace: parse, take the positional, parse the rest. */
    int i = flags_parse(argc, argv, specs, usage_text);
    if (i >= argc) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *ns = argv[i];
    if (flags_parse(argc - i, argv + i, specs, usage_text) < argc - i) {
        fputs(usage_text, stderr);
        return 2;
    }
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t err = {0};
    BSON_APPEND_UTF8(&cmd, "balancerExplain", ns);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int rc = ctl_command(c, &cmd, &reply, &err);
    bson_destroy(&cmd);
    if (rc) {
        fprintf(stderr, "shardctl: balancerExplain %s: %s (code %d)\n", ns, err.msg, rc);
        return 1;
    }
    if (json) {
        char *s = bsonx_to_json(&reply);
        printf("%s\n", s ? s : "{}");
        bson_free(s);
    } else {
        print_explain(ns, &reply);
    }
    bson_destroy(&reply);
    return 0;
}

void ctl_print_compliance(ctl_t *c, const char *ns) {
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t err = {0};
    BSON_APPEND_UTF8(&cmd, "balancerCollectionStatus", ns);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(c, &cmd, &reply, &err) == 0) {
        if (b_of(&reply, "balancerCompliant")) printf("        balancerCompliant: true\n");
        else printf("        balancerCompliant: false (%s)\n", s_of(&reply, "firstComplianceViolation"));
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
}
