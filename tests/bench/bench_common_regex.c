/*
 * bench_common_regex.c — the regex engine (common/regex.c) against glibc's regexec
 * (POSIX ERE, what the query language used before) on the same 100,000 strings and
 * patterns, timed in the same run: strings per second each and their ratio (> 1: ours
 * is faster). Also two patterns costly for backtracking engines, ours only, to show the
 * cost model: one pass, time growing with the program size. Prints a table and one final `BENCH_JSON {"regex": {...}}` line.
 */
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regex.h"

#define NSTRINGS 100000

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Strings like user data: "user<n>@<domain>.<tld>" of 20-40 bytes. */
static char **make_strings(void) {
    static const char *const domains[] = {"example", "mail", "corp", "shard", "mongo"};
    static const char *const tlds[] = {"com", "org", "net", "io"};
    char **v = malloc(sizeof *v * NSTRINGS);
    uint64_t s = 42;
    for (int i = 0; i < NSTRINGS; i++) {
        char buf[64];
        uint64_t r = rng(&s);
        snprintf(buf, sizeof buf, "user%llu.%s@%s.%s", (unsigned long long)(r % 10000000),
                 (r >> 40) % 3 ? "x" : "admin", domains[(r >> 20) % 5], tlds[(r >> 30) % 4]);
        v[i] = strdup(buf);
    }
    return v;
}

typedef struct row {
    const char *name, *ours, *ere;
    int icase;
} row_t;

int main(void) {
    static const row_t rows[] = {
        {"literal", "admin", "admin", 0},
        {"anchored prefix", "^user12", "^user12", 0},
        {"class + anchors", "^user[0-9]+\\.x@mail\\.(com|org)$", "^user[0-9]+\\.x@mail\\.(com|org)$", 0},
        {"case-insensitive", "ADMIN@CORP", "ADMIN@CORP", 1},
    };
    char **strs = make_strings();
    size_t *lens = malloc(sizeof *lens * NSTRINGS);
    size_t bytes = 0;
    for (int i = 0; i < NSTRINGS; i++) bytes += lens[i] = strlen(strs[i]);
    printf("%-20s %14s %14s %8s %8s\n", "pattern", "ours/s", "glibc/s", "ratio", "matches");
    char json[2048];
    size_t jo = 0;
    jo += (size_t)snprintf(json + jo, sizeof json - jo, "{\"regex\": {\"strings\": %d", NSTRINGS);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        rx_t *rx = NULL;
        regex_t re;
        ms_error_t err;
        if (rx_compile(rows[r].ours, rows[r].icase ? RX_ICASE : 0, &rx, &err) != 0 ||
            regcomp(&re, rows[r].ere, REG_EXTENDED | REG_NOSUB | (rows[r].icase ? REG_ICASE : 0)) != 0) {
            fprintf(stderr, "compile failed: %s\n", rows[r].name);
            return 1;
        }
        int ours_n = 0, theirs_n = 0;
        long long t0 = time_mono_us();
        for (int i = 0; i < NSTRINGS; i++) ours_n += rx_matches(rx, strs[i], lens[i]);
        long long t1 = time_mono_us();
        for (int i = 0; i < NSTRINGS; i++) theirs_n += regexec(&re, strs[i], 0, NULL, 0) == 0;
        long long t2 = time_mono_us();
        if (ours_n != theirs_n) {
            fprintf(stderr, "%s: %d matches here, %d in glibc\n", rows[r].name, ours_n, theirs_n);
            return 1;
        }
        double ours_s = NSTRINGS / ((double)(t1 - t0 + 1) / 1e6);
        double theirs_s = NSTRINGS / ((double)(t2 - t1 + 1) / 1e6);
        printf("%-20s %14.0f %14.0f %8.2f %8d\n", rows[r].name, ours_s, theirs_s, ours_s / theirs_s, ours_n);
        jo += (size_t)snprintf(json + jo, sizeof json - jo,
                               ", \"%s\": {\"ours_per_s\": %.0f, \"glibc_per_s\": %.0f, \"ratio\": %.2f}",
                               rows[r].name, ours_s, theirs_s, ours_s / theirs_s);
        rx_free(rx);
        regfree(&re);
    }
    /* ours on 5,000 x's: one pass each; the second has ~1,000 live states per character */
    {
        static const char *const pats[] = {"(x+x+)+y", "(?:x?){1000}x{1000}y"};
        char *s = malloc(5001);
        memset(s, 'x', 5000);
        s[5000] = '\0';
        for (int k = 0; k < 2; k++) {
            rx_t *rx = NULL;
            ms_error_t err;
            if (rx_compile(pats[k], 0, &rx, &err) != 0) return 1;
            long long t0 = time_mono_us();
            bool m = rx_matches(rx, s, 5000);
            long long us = time_mono_us() - t0;
            printf("%-28s on 5000 chars: %lld us (%zu instructions, match %d)\n", pats[k], us,
                   rx_program_size(rx), m);
            jo += (size_t)snprintf(json + jo, sizeof json - jo, ", \"%s_5000_us\": %lld",
                                   k == 0 ? "x+x+_y" : "x?1000_x1000_y", us);
            rx_free(rx);
        }
        free(s);
    }
    printf("%zu bytes of subject per pass\n", bytes);
    snprintf(json + jo, sizeof json - jo, "}}");
    printf("BENCH_JSON %s\n", json);
    for (int i = 0; i < NSTRINGS; i++) free(strs[i]);
    free(strs);
    free(lens);
    return 0;
}
