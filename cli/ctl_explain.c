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

static double mb(int64_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

void ctl_print_explain(const char *ns, const bson_t *r) {
    bson_t pol, bal, coll, arr, row;
    bson_iter_t it;
    if (!ctl_sub(r, "policy", &pol)) bson_init(&pol);
    printf("%s: %s — %s\n", ns, ctl_str(r, "verdict"), ctl_str(r, "verdictMessage"));
    if (ctl_sub(r, "balancer", &bal)) {
        printf("balancer: %s", ctl_bool(&bal, "enabled") ? "enabled" : "off");
        if (!ctl_bool(&bal, "enabled")) printf(" (%s)", ctl_str(&bal, "offReason"));
        bson_t w;
        if (ctl_sub(&bal, "activeWindow", &w))
            printf(", activeWindow %s-%s (%s)", ctl_str(&w, "start"), ctl_str(&w, "stop"),
                   ctl_bool(&bal, "inWindow") ? "inside now" : "outside now");
        printf("\n");
    }
    if (ctl_sub(r, "collection", &coll))
        printf("collection: noBalance %s, allowMigrations %s, defragmenting %s\n",
               ctl_bool(&coll, "noBalance") ? "true" : "false",
               ctl_bool(&coll, "allowMigrations") ? "true" : "false",
               ctl_bool(&coll, "defragmentCollection") ? "true" : "false");
    bool data = strcmp(ctl_str(&pol, "policy"), "dataSize") == 0;
    printf("policy %s: %lld chunks, chunk size %.1f MB, ", ctl_str(&pol, "policy"),
           (long long)ctl_int(&pol, "nChunks", 0), mb(ctl_int(&pol, "chunkSizeBytes", 0)));
    if (data)
        printf("data size difference %.1f MB (moves from %.1f MB)\n",
               mb(ctl_int(&pol, "dataSizeDifference", 0)), mb(ctl_int(&pol, "dataSizeThreshold", 0)));
    else
        printf("chunk count difference %lld (moves from %lld)\n",
               (long long)ctl_int(&pol, "chunkCountDifference", 0), (long long)ctl_int(&pol, "threshold", 0));
    printf("  %-16s %7s %6s %10s %9s %12s %5s\n", "shard", "chunks", "jumbo", "data(MB)", "draining",
           "maxSize(MB)", "busy");
    if (ctl_sub(&pol, "shards", &arr) && bson_iter_init(&it, &arr)) {
        while (bson_iter_next(&it)) {
            uint32_t len;
            const uint8_t *d;
            char cap[32] = "-";
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            if (ctl_int(&row, "maxSizeBytes", 0) > 0)
                snprintf(cap, sizeof cap, "%.0f%s", mb(ctl_int(&row, "maxSizeBytes", 0)),
                         ctl_bool(&row, "atMaxSize") ? " FULL" : "");
            printf("  %-16s %7lld %6lld %10.1f %9s %12s %5s\n", ctl_str(&row, "shard"),
                   (long long)ctl_int(&row, "chunks", 0), (long long)ctl_int(&row, "jumboChunks", 0),
                   mb(ctl_int(&row, "dataBytes", 0)), ctl_bool(&row, "draining") ? "yes" : "no", cap,
                   ctl_bool(&row, "busy") ? "yes" : "no");
        }
    }
    if (ctl_sub(&pol, "next", &arr) && bson_iter_init(&it, &arr) && bson_iter_next(&it)) {
        printf("next moves:\n");
        do {
            uint32_t len;
            const uint8_t *d;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            printf("  ");
            ctl_print_json(stdout, &row, "min", "-");
            printf(" .. ");
            ctl_print_json(stdout, &row, "max", "-");
            printf("  %s -> %s  (%s)\n", ctl_str(&row, "from"), ctl_str(&row, "to"), ctl_str(&row, "reason"));
        } while (bson_iter_next(&it));
    } else {
        printf("next moves: none (%s)\n", ctl_str(&pol, "message"));
    }
    if (ctl_sub(r, "migrationsInProgress", &arr) && bson_iter_init(&it, &arr))
        while (bson_iter_next(&it)) {
            uint32_t len;
            const uint8_t *d;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
            bson_iter_document(&it, &len, &d);
            bson_init_static(&row, d, len);
            printf("migrating now: %s %s -> %s\n", ctl_str(&row, "ns"), ctl_str(&row, "fromShard"),
                   ctl_str(&row, "toShard"));
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
        ctl_print_explain(ns, &reply);
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
        if (ctl_bool(&reply, "balancerCompliant")) printf("        balancerCompliant: true\n");
        else printf("        balancerCompliant: false (%s)\n", ctl_str(&reply, "firstComplianceViolation"));
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
}
