/*
 * hostinfo.c — the hostInfo command every daemon serves (mongosh's db.hostInfo()):
 * MongoDB's {system, os, extra} shape, read from the kernel (uname, sysconf, /proc,
 * /sys, /etc/os-release) at each call. Every file read is bounded in lines.
 */
#include <dirent.h>
#include <gnu/libc-version.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/cmd_priv.h"
#include "common/log.h"

/* Lines read from one /proc or /etc file at most: /proc/cpuinfo has ~30 per CPU. */
#define HOSTINFO_LINES_MAX 200000
/* Distinct (socket, core) pairs counted for physicalCores. */
#define HOSTINFO_CORES_MAX 4096

/* What /proc/cpuinfo says: the first CPU's MHz and flags, sockets and physical cores. */
typedef struct cpu_info {
    char mhz[32];
    char *flags;   /* owned, may be NULL */
    int sockets, cores;
} cpu_info_t;

/* The value after "key<spaces>: " of a cpuinfo line, or NULL when the line is another key. */
static const char *cpuinfo_value(const char *line, const char *key) {
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0) return NULL;
    line += n;
    while (*line == ' ' || *line == '\t') line++;
    if (*line != ':') return NULL;
    line++;
    while (*line == ' ') line++;
    return line;
}

static void read_cpuinfo(cpu_info_t *ci) {
    int (*pairs)[2] = calloc(HOSTINFO_CORES_MAX, sizeof *pairs);   /* (socket, core) seen */
    FILE *f = pairs ? fopen("/proc/cpuinfo", "r") : NULL;
    char line[8192];
    int phys = -1, npairs = 0, max_socket = -1;
    memset(ci, 0, sizeof *ci);
    if (!f) {
        free(pairs);
        return;
    }
    for (int i = 0; i < HOSTINFO_LINES_MAX && fgets(line, sizeof line, f); i++) {
        const char *v;
        line[strcspn(line, "\n")] = '\0';
        if ((v = cpuinfo_value(line, "cpu MHz")) && !ci->mhz[0]) snprintf(ci->mhz, sizeof ci->mhz, "%s", v);
        else if ((v = cpuinfo_value(line, "flags")) && !ci->flags) ci->flags = strdup(v);
        else if ((v = cpuinfo_value(line, "physical id"))) {
            phys = atoi(v);
            if (phys > max_socket) max_socket = phys;
        } else if ((v = cpuinfo_value(line, "core id"))) {
            int core = atoi(v), k = 0;
            while (k < npairs && !(pairs[k][0] == phys && pairs[k][1] == core)) k++;
            if (k == npairs && npairs < HOSTINFO_CORES_MAX) {
                pairs[npairs][0] = phys;
                pairs[npairs++][1] = core;
            }
        }
    }
    fclose(f);
    free(pairs);
    ci->sockets = max_socket + 1;
    ci->cores = npairs;
}

/* PRETTY_NAME of /etc/os-release (quotes removed), or "unknown". */
static void os_name(char *out, size_t cap) {
    FILE *f = fopen("/etc/os-release", "r");
    char line[512];
    snprintf(out, cap, "unknown");
    if (!f) return;
    for (int i = 0; i < HOSTINFO_LINES_MAX && fgets(line, sizeof line, f); i++) {
        if (strncmp(line, "PRETTY_NAME=", 12) != 0) continue;
        char *v = line + 12;
        v[strcspn(v, "\n")] = '\0';
        if (*v == '"') {
            v++;
            v[strcspn(v, "\"")] = '\0';
        }
        snprintf(out, cap, "%s", v);
        break;
    }
    fclose(f);
}

/* The first line of a small file, "" when unreadable. */
static void first_line(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (!f) return;
    if (fgets(out, (int)cap, f)) out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* NUMA nodes under /sys/devices/system/node (node0, node1, ...); 1 when it is absent. */
static int numa_nodes(void) {
    DIR *d = opendir("/sys/devices/system/node");
    struct dirent *e;
    int n = 0;
    if (!d) return 1;
    for (int i = 0; i < HOSTINFO_CORES_MAX && (e = readdir(d)); i++)
        if (strncmp(e->d_name, "node", 4) == 0 && e->d_name[4] >= '0' && e->d_name[4] <= '9') n++;
    closedir(d);
    return n > 0 ? n : 1;
}

int cmd_host_info(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    struct utsname u;
    struct rlimit rl;
    cpu_info_t ci;
    cpu_set_t set;
    char host[256], buf[512];
    bson_t d;
    long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t mem_mb = page > 0 && pages > 0 ? (int64_t)page * pages / (1024 * 1024) : 0;
    int nodes = numa_nodes();
    const char *url = cmd_server_url(ctx->srv), *port = strrchr(url, ':');
    (void)err;
    if (uname(&u) != 0) memset(&u, 0, sizeof u);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    read_cpuinfo(&ci);
    CPU_ZERO(&set);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "system", &d);
    BSON_APPEND_DATE_TIME(&d, "currentTime", time_now_ms());
    snprintf(buf, sizeof buf, "%s%s", host, port ? port : "");   /* MongoDB's host:port */
    BSON_APPEND_UTF8(&d, "hostname", buf);
    BSON_APPEND_INT32(&d, "cpuAddrSize", (int32_t)(sizeof(void *) * 8));
    BSON_APPEND_INT64(&d, "memSizeMB", mem_mb);
    BSON_APPEND_INT64(&d, "memLimitMB", mem_mb);
    BSON_APPEND_INT32(&d, "numCores", (int32_t)(cores > 0 ? cores : 1));
    BSON_APPEND_INT32(&d, "numCoresAvailableToProcess",
                      sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int32_t)cores);
    BSON_APPEND_INT32(&d, "numPhysicalCores", ci.cores > 0 ? ci.cores : (int32_t)cores);
    BSON_APPEND_INT32(&d, "numCpuSockets", ci.sockets > 0 ? ci.sockets : 1);
    BSON_APPEND_UTF8(&d, "cpuArch", u.machine);
    BSON_APPEND_BOOL(&d, "numaEnabled", nodes > 1);
    BSON_APPEND_INT32(&d, "numNumaNodes", nodes);
    bson_append_document_end(reply, &d);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "os", &d);
    BSON_APPEND_UTF8(&d, "type", u.sysname[0] ? u.sysname : "Linux");
    os_name(buf, sizeof buf);
    BSON_APPEND_UTF8(&d, "name", buf);
    snprintf(buf, sizeof buf, "Kernel %s", u.release);   /* as MongoDB's Linux hostInfo */
    BSON_APPEND_UTF8(&d, "version", buf);
    bson_append_document_end(reply, &d);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "extra", &d);
    first_line("/proc/version", buf, sizeof buf);
    BSON_APPEND_UTF8(&d, "versionString", buf);
    BSON_APPEND_UTF8(&d, "libcVersion", gnu_get_libc_version());
    BSON_APPEND_UTF8(&d, "kernelVersion", u.release);
    BSON_APPEND_UTF8(&d, "cpuFrequencyMHz", ci.mhz);
    BSON_APPEND_UTF8(&d, "cpuFeatures", ci.flags ? ci.flags : "");
    BSON_APPEND_INT64(&d, "pageSize", (int64_t)page);
    BSON_APPEND_INT64(&d, "numPages", (int64_t)pages);
    BSON_APPEND_INT64(&d, "maxOpenFiles",
                      getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (int64_t)rl.rlim_cur : -1);
    BSON_APPEND_INT32(&d, "physicalCores", ci.cores > 0 ? ci.cores : (int32_t)cores);
    BSON_APPEND_INT32(&d, "cpuSockets", ci.sockets > 0 ? ci.sockets : 1);
    bson_append_document_end(reply, &d);
    free(ci.flags);
    return 0;
}
