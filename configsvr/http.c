/*
 * http.c — the config server's web view (bin/configsvr --http-port P, issue 15): NNG's own
 * HTTP server (nng/supplemental/http) serving the page (web/index.html, app.js,
 * style.css, compiled in by http_assets.c) and read-only JSON endpoints over the cluster
 * state that http_api.c builds.
 *
 * Threads. NNG calls our handler on one of its own threads, which must not wait on a
 * shard. So the handler only checks the request and, when the cached state is younger
 * than MS_HTTP_STATE_TTL_MS, answers from it at once; otherwise it parks the request's
 * nng_aio (nng_aio_defer, with a cancel function for a client that goes away) and wakes
 * the collector, our one thread, which builds the state (catalog reads and short shard
 * calls), swaps it in and finishes every parked request from it. Any number of open pages
 * therefore cost at most one build per TTL, and no request, no build: an idle port costs
 * nothing. At most MS_HTTP_PENDING_MAX requests wait at once (more: 503).
 *
 * Input. One handler takes every path and method (nng_http_handler_set_method NULL plus
 * set_tree), so that the answers to bad input are ours: other methods than GET/HEAD get
 * 405 with Allow; a target over MS_HTTP_URI_BYTES_MAX, bad percent-encoding, too many or
 * unknown query parameters, or a non-numeric n get 400; unknown paths 404; errors are a
 * small JSON body {ok: 0, status, error}. Nothing on this port changes the cluster.
 *
 * Connections. NNG 1.5's HTTP server has neither an idle timeout nor a connection cap, so a
 * sweeper thread bounds them from outside every MS_HTTP_SWEEP_MS (see "the sweeper").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* The page's three files (http_assets.c: .incbin of web/). */
extern const char web_index_html[], web_app_js[], web_style_css[];
extern const uint64_t web_index_html_len, web_app_js_len, web_style_css_len;

enum web_ep { EP_STATE, EP_CLUSTER, EP_COLLECTIONS, EP_MIGRATIONS, EP_BALANCER, EP_CHANGELOG };

/* The JSON endpoints: path, the state's section (NULL = all), and the parameters taken. */
static const struct {
    const char *path;
    const char *section;
    bool takes_n, takes_ns;
} web_eps[] = {
    [EP_STATE] = {"/api/state", NULL, false, false},
    [EP_CLUSTER] = {"/api/cluster", "cluster", false, false},
    [EP_COLLECTIONS] = {"/api/collections", "collections", false, true},
    [EP_MIGRATIONS] = {"/api/migrations", "migrations", false, false},
    [EP_BALANCER] = {"/api/balancer", "balancer", true, false},
    [EP_CHANGELOG] = {"/api/changelog", "changelog", true, false},
};
#define WEB_NEPS ((int)(sizeof web_eps / sizeof web_eps[0]))

/* One request: which endpoint and its parameters (n = 0: all). */
typedef struct web_req {
    int ep;
    int n;
    char ns[MS_NS_BYTES_MAX + 1];
    bool head;
} web_req_t;

typedef struct web_pending {
    nng_aio *aio;
    web_req_t r;
} web_pending_t;

struct cfg_http {
    cfg_t *cfg;
    nng_http_server *srv;
    nng_http_handler *h;
    char url[MS_URL_BYTES_MAX];
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* collector: requests parked or stop */
    pthread_t th;
    bool th_started, stop;
    bson_t state;                /* the last build, under mu */
    bool have_state;
    char *state_json;            /* /api/state of this build without ageMS, rendered once */
    size_t state_json_len;
    long long built_ms;          /* monotonic time the last build started */
    web_pending_t pending[MS_HTTP_PENDING_MAX];
    int npending;
    int64_t requests, builds;
    /* the sweeper (its own thread; stop is h->stop, woken through sweep_cv) */
    int port, idle_ms;
    pthread_cond_t sweep_cv;     /* monotonic clock */
    pthread_t sweep_th;
    bool sweep_started;
    int64_t closed_idle, closed_over_cap;
};

/* ---- replies --------------------------------------------------------------------------- */

/* allow: the Allow header of a 405, or NULL; close: Connection: close, which makes NNG close
 * the connection once the answer is sent. */
static void reply(nng_aio *aio, uint16_t status, const char *ctype, const void *body, size_t len,
                  bool head, const char *allow, bool close) {
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0) rv = nng_http_res_set_status(res, status);
    if (rv == 0) rv = nng_http_res_set_header(res, "Content-Type", ctype);
    if (rv == 0) rv = nng_http_res_set_header(res, "Cache-Control", "no-store");
    if (rv == 0 && allow) rv = nng_http_res_set_header(res, "Allow", allow);
    if (rv == 0 && close) rv = nng_http_res_set_header(res, "Connection", "close");
    /* HEAD: the headers of the GET answer; the server sends no body for it. */
    if (rv == 0 && len > 0 && !head) rv = nng_http_res_copy_data(res, body, len);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void reply_error(nng_aio *aio, uint16_t status, const char *allow, bool close, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reply_error(nng_aio *aio, uint16_t status, const char *allow, bool close, const char *fmt, ...) {
    char msg[256], body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bson_t b = BSON_INITIALIZER;
    BSON_APPEND_INT32(&b, "ok", 0);
    BSON_APPEND_INT32(&b, "status", status);
    BSON_APPEND_UTF8(&b, "error", msg);
    size_t len = 0;
    char *json = bson_as_relaxed_extended_json(&b, &len);
    snprintf(body, sizeof body, "%s", json ? json : "{}");
    bson_free(json);
    bson_destroy(&b);
    reply(aio, status, "application/json", body, strlen(body), false, allow, close);
}

/* Appends the newest n (0: all) elements of the array it points at to dst under key. */
static void append_head_of(bson_t *dst, const char *key, bson_iter_t *it, int n) {
    bson_t arr, src;
    bson_iter_t a;
    int i = 0;
    BSON_APPEND_ARRAY_BEGIN(dst, key, &arr);
    if (bsonx_view_container(it, &src) && bson_iter_init(&a, &src))
        while (bson_iter_next(&a) && (n == 0 || i < n)) {
            char k[16];
            snprintf(k, sizeof k, "%d", i++);
            bson_append_iter(&arr, k, -1, &a);
        }
    bson_append_array_end(dst, &arr);
}

/* The answer to r from the state (under mu). */
static void reply_from_state(cfg_http_t *h, nng_aio *aio, const web_req_t *r) {
    bson_t out = BSON_INITIALIZER, sec;
    bson_iter_t it, s;
    const char *section = web_eps[r->ep].section;
    long long age = time_mono_ms() - h->built_ms;
    if (!section) {
        /* The page's poll: rendered once per build and shared (N pages, one rendering);
         * ageMS goes in by replacing the closing brace. */
        if (!h->state_json) h->state_json = bson_as_relaxed_extended_json(&h->state, &h->state_json_len);
        if (h->state_json && h->state_json_len >= 2) {
            char tail[64];
            int tl = snprintf(tail, sizeof tail, ", \"ageMS\" : %lld }", age);
            char *body = malloc(h->state_json_len + (size_t)tl);
            if (body) {
                size_t n = h->state_json_len;
                while (n > 0 && h->state_json[n - 1] != '}') n--;  /* the last '}' */
                if (n > 0) {
                    memcpy(body, h->state_json, n - 1);
                    memcpy(body + n - 1, tail, (size_t)tl);
                    reply(aio, 200, "application/json", body, n - 1 + (size_t)tl, r->head, NULL, false);
                    free(body);
                    bson_destroy(&out);
                    return;
                }
                free(body);
            }
        }
        bson_concat(&out, &h->state);
        bson_concat(&out, &h->state);
    } else if (bson_iter_init_find(&it, &h->state, section) && bsonx_view_container(&it, &sec) &&
               bson_iter_init(&s, &sec)) {
        if (bson_iter_init_find(&it, &h->state, "builtAt")) bson_append_iter(&out, "builtAt", -1, &it);
        while (bson_iter_next(&s)) {
            const char *k = bson_iter_key(&s);
            if (r->n > 0 && BSON_ITER_HOLDS_ARRAY(&s) &&
                (!strcmp(k, "entries") || !strcmp(k, "rounds"))) {
                append_head_of(&out, k, &s, r->n);
            } else if (r->ns[0] && !strcmp(k, "collections") && BSON_ITER_HOLDS_ARRAY(&s)) {
                bson_t arr, src, c;
                bson_iter_t a;
                int i = 0;
                BSON_APPEND_ARRAY_BEGIN(&out, k, &arr);
                if (bsonx_view_container(&s, &src) && bson_iter_init(&a, &src))
                    while (bson_iter_next(&a))
                        if (bsonx_view_container(&a, &c)) {
                            bson_iter_t nt;
                            if (bson_iter_init_find(&nt, &c, "ns") && BSON_ITER_HOLDS_UTF8(&nt) &&
                                !strcmp(bson_iter_utf8(&nt, NULL), r->ns)) {
                                char key[16];
                                snprintf(key, sizeof key, "%d", i++);
                                BSON_APPEND_DOCUMENT(&arr, key, &c);
                            }
                        }
                bson_append_array_end(&out, &arr);
            } else {
                bson_append_iter(&out, k, -1, &s);
            }
        }
    }
    BSON_APPEND_INT64(&out, "ageMS", age);
    size_t len = 0;
    char *json = bson_as_relaxed_extended_json(&out, &len);
    bson_destroy(&out);
    if (!json) {
        reply_error(aio, 500, NULL, false, "state is not JSON");
        return;
    }
    reply(aio, 200, "application/json", json, len, r->head, NULL, false);
    bson_free(json);
}

/* ---- request checks ------------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes src[0..len) into dst (cap bytes with the NUL); '+' is a space in a
 * query. false for a bad escape, a NUL byte or an overflow. */
static bool pct_decode(const char *src, size_t len, bool query, char *dst, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= len) return false;
            hi = hexval(src[i + 1]);
            lo = hexval(src[i + 2]);
            if (hi < 0 || lo < 0) return false;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+' && query) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= cap) return false;
        dst[o++] = (char)c;
    }
    dst[o] = 0;
    return true;
}

/* Parses the request target into r; 0, or the HTTP status (400/404) with msg. */
static int parse_target(const char *uri, web_req_t *r, bool *is_static, const char **ctype,
                        const char **body, size_t *blen, char *msg, size_t cap) {
    char path[MS_HTTP_URI_BYTES_MAX + 1];
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    memset(r, 0, sizeof *r);
    *is_static = false;
    if (strlen(uri) > MS_HTTP_URI_BYTES_MAX) {
        snprintf(msg, cap, "request target longer than %d bytes", MS_HTTP_URI_BYTES_MAX);
        return 400;
    }
    if (!pct_decode(uri, plen, false, path, sizeof path)) {
        snprintf(msg, cap, "malformed percent-encoding in the path");
        return 400;
    }
    r->ep = -1;
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        *ctype = "text/html; charset=utf-8";
        *body = web_index_html;
        *blen = (size_t)web_index_html_len;
    } else if (!strcmp(path, "/app.js")) {
        *ctype = "text/javascript; charset=utf-8";
        *body = web_app_js;
        *blen = (size_t)web_app_js_len;
    } else if (!strcmp(path, "/style.css")) {
        *ctype = "text/css; charset=utf-8";
        *body = web_style_css;
        *blen = (size_t)web_style_css_len;
    } else {
        for (int i = 0; i < WEB_NEPS; i++)
            if (!strcmp(path, web_eps[i].path)) r->ep = i;
        if (r->ep < 0) {
            snprintf(msg, cap, "no such path (the endpoints are /api/state, /api/cluster, "
                     "/api/collections, /api/migrations, /api/balancer, /api/changelog)");
            return 404;
        }
    }
    *is_static = r->ep < 0;
    /* The query: name=value pairs, each percent-decoded; only the endpoint's own names. */
    int nparams = 0;
    const char *p = q ? q + 1 : NULL;
    while (p && *p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (++nparams > MS_HTTP_QUERY_PARAMS_MAX) {
            snprintf(msg, cap, "more than %d query parameters", MS_HTTP_QUERY_PARAMS_MAX);
            return 400;
        }
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len;
        char key[64], val[MS_HTTP_URI_BYTES_MAX + 1];
        if (klen >= sizeof key || !pct_decode(p, klen, true, key, sizeof key) ||
            !pct_decode(eq ? eq + 1 : p + len, eq ? len - klen - 1 : 0, true, val, sizeof val)) {
            snprintf(msg, cap, "malformed query parameter");
            return 400;
        }
        if (len > 0) {
            bool takes_n = r->ep >= 0 && web_eps[r->ep].takes_n;
            bool takes_ns = r->ep >= 0 && web_eps[r->ep].takes_ns;
            if (!strcmp(key, "n") && takes_n) {
                char *end = NULL;
                errno = 0;
                long v = strtol(val, &end, 10);
                if (!val[0] || *end || errno || v < 1) {
                    snprintf(msg, cap, "n must be a positive integer");
                    return 400;
                }
                r->n = v > MS_HTTP_CHANGELOG_MAX ? MS_HTTP_CHANGELOG_MAX : (int)v;
            } else if (!strcmp(key, "ns") && takes_ns) {
                if (strlen(val) > MS_NS_BYTES_MAX || !strchr(val, '.')) {
                    snprintf(msg, cap, "ns must be a namespace db.collection");
                    return 400;
                }
                snprintf(r->ns, sizeof r->ns, "%s", val);
            } else if (!strcmp(key, "_")) {
                /* a cache buster some clients add: accepted and ignored */
            } else {
                snprintf(msg, cap, "unknown query parameter for this path");
                return 400;
            }
        }
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* ---- parking requests -------------------------------------------------------------------- */

static void pending_cancel(nng_aio *aio, void *arg, int rv) {
    cfg_http_t *h = arg;
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < h->npending; i++) {
        if (h->pending[i].aio != aio) continue;
        h->pending[i] = h->pending[--h->npending];
        pthread_mutex_unlock(&h->mu);
        nng_aio_finish(aio, rv);
        return;
    }
    pthread_mutex_unlock(&h->mu);  /* already taken by the collector, which finishes it */
}

/* Whether the request carries a body (msg says which header). No request to this port has
 * one, and the server is told not to read bodies (collect_body false), so a body's bytes
 * would be read as the next request: a GET or HEAD with a Content-Length other than 0, or
 * any Transfer-Encoding, gets 400, another method its 405, and the connection is closed
 * after the answer, as RFC 9112 §6.3 asks of a server that does not read a body. */
static bool has_body(nng_http_req *req, char *msg, size_t cap) {
    const char *te = nng_http_req_get_header(req, "Transfer-Encoding");
    const char *cl = nng_http_req_get_header(req, "Content-Length");
    if (te) {
        snprintf(msg, cap, "Transfer-Encoding %.32s: this port takes no request body", te);
        return true;
    }
    if (cl && (cl[0] == '\0' || strspn(cl, "0") != strlen(cl))) {
        snprintf(msg, cap, "Content-Length %.32s: this port takes no request body", cl);
        return true;
    }
    return false;
}

static void web_handle(nng_aio *aio) {
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *hd = nng_aio_get_input(aio, 1);
    cfg_http_t *h = nng_http_handler_get_data(hd);
    const char *method = nng_http_req_get_method(req);
    const char *uri = nng_http_req_get_uri(req);
    char msg[256];
    web_req_t r;
    bool is_static;
    const char *ctype = NULL, *body = NULL;
    size_t blen = 0;
    bool head = method && !strcmp(method, "HEAD");
    bool with_body = has_body(req, msg, sizeof msg);
    if (with_body) log_info("http request refused, connection closed: %s", msg);
    if (!method || (strcmp(method, "GET") != 0 && !head)) {
        reply_error(aio, 405, "GET, HEAD", with_body, "method %.32s not allowed: this port is read-only",
                    method ? method : "?");
        return;
    }
    if (with_body) {
        reply_error(aio, 400, NULL, true, "%s", msg);
        return;
    }
    int st = parse_target(uri ? uri : "", &r, &is_static, &ctype, &body, &blen, msg, sizeof msg);
    if (st) {
        reply_error(aio, (uint16_t)st, NULL, false, "%s", msg);
        return;
    }
    r.head = head;
    if (is_static) {
        reply(aio, 200, ctype, body, blen, head, NULL, false);
        return;
    }
    pthread_mutex_lock(&h->mu);
    h->requests++;
    if (h->stop) {
        pthread_mutex_unlock(&h->mu);
        reply_error(aio, 503, NULL, false, "shutting down");
        return;
    }
    if (h->have_state && time_mono_ms() - h->built_ms < MS_HTTP_STATE_TTL_MS) {
        reply_from_state(h, aio, &r);
        pthread_mutex_unlock(&h->mu);
        return;
    }
    if (h->npending >= MS_HTTP_PENDING_MAX) {
        pthread_mutex_unlock(&h->mu);
        reply_error(aio, 503, NULL, false, "too many requests waiting for the cluster state");
        return;
    }
    nng_aio_defer(aio, pending_cancel, h);
    h->pending[h->npending++] = (web_pending_t){aio, r};
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* ---- the collector ------------------------------------------------------------------------- */

static void *collector(void *arg) {
    cfg_http_t *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->npending == 0) pthread_cond_wait(&h->cv, &h->mu);
        if (h->stop) break;
        long long t0 = time_mono_ms();
        pthread_mutex_unlock(&h->mu);
        bson_t fresh = BSON_INITIALIZER;
        cfg_web_state_build(h->cfg, &fresh);
        pthread_mutex_lock(&h->mu);
        if (h->have_state) bson_destroy(&h->state);
        bson_free(h->state_json);
        h->state_json = NULL;
        bson_steal(&h->state, &fresh);
        h->have_state = true;
        h->built_ms = t0;
        h->builds++;
        /* Every parked request gets this build; the lock keeps pending_cancel out. */
        for (int i = 0; i < h->npending; i++) reply_from_state(h, h->pending[i].aio, &h->pending[i].r);
        h->npending = 0;
    }
    for (int i = 0; i < h->npending; i++) nng_aio_finish(h->pending[i].aio, NNG_ECLOSED);
    h->npending = 0;
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- the sweeper ----------------------------------------------------------------------------- */

/* NNG owns the connections' descriptors and tells us nothing about them, so the sweeper
 * finds them in /proc/self/fd. Each descriptor is duplicated first and everything after
 * is asked of the duplicate: what we inspect and what we shut down are then one socket,
 * whatever NNG does meanwhile with the number (closes it, reuses it). A connection is a
 * connected TCP socket whose local port is ours (the listener has no peer); TCP_INFO says
 * how long ago we last sent it data. shutdown(2) on the duplicate ends the connection
 * for NNG too — its pending read fails and it closes its own descriptor; closing our
 * duplicate alone would not. Bounded: one pass reads each open descriptor once, and keeps
 * at most SWEEP_KEEP_MAX duplicates open at a time (past that, a connection is over the
 * cap anyway and is shut at once). */

#define SWEEP_KEEP_MAX (4 * MS_HTTP_CONNS_MAX)

typedef struct web_conn {
    int dup;
    uint32_t silent_ms;  /* since we last sent it data */
} web_conn_t;

static int web_conn_cmp_silent_desc(const void *a, const void *b) {
    uint32_t x = ((const web_conn_t *)a)->silent_ms, y = ((const web_conn_t *)b)->silent_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The duplicate of fd when it is a connection of ours, with how long it has been silent;
 * -1 otherwise (nothing left open). */
static int web_conn_probe(int fd, int port, uint32_t *silent_ms) {
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    struct stat st;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0), lport = -1;
    if (d < 0) return -1;
    if (fstat(d, &st) != 0 || !S_ISSOCK(st.st_mode) ||
        getsockname(d, (struct sockaddr *)&a, &al) != 0)
        goto no;
    if (a.ss_family == AF_INET) lport = ntohs(((struct sockaddr_in *)&a)->sin_port);
    else if (a.ss_family == AF_INET6) lport = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    al = sizeof a;
    if (lport != port || getpeername(d, (struct sockaddr *)&a, &al) != 0) goto no;
    if (getsockopt(d, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) goto no;
    *silent_ms = ti.tcpi_last_data_sent;
    return d;
no:
    close(d);
    return -1;
}

/* One pass: shuts connections silent for idle_ms, then the longest silent beyond the cap. */
static void web_sweep(cfg_http_t *h) {
    web_conn_t keep[SWEEP_KEEP_MAX];
    int nkeep = 0, open_conns = 0, idle = 0, over = 0;
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    if (!dir) return;
    while ((e = readdir(dir)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        uint32_t silent;
        if (*end != '\0' || end == e->d_name || fd == dirfd(dir)) continue;
        int d = web_conn_probe((int)fd, h->port, &silent);
        if (d < 0) continue;
        open_conns++;
        if (silent >= (uint32_t)h->idle_ms) {
            shutdown(d, SHUT_RDWR);
            close(d);
            idle++;
        } else if (nkeep < SWEEP_KEEP_MAX) {
            keep[nkeep++] = (web_conn_t){d, silent};
        } else {
            shutdown(d, SHUT_RDWR);
            close(d);
            over++;
        }
    }
    closedir(dir);
    if (nkeep > MS_HTTP_CONNS_MAX) {
        qsort(keep, (size_t)nkeep, sizeof keep[0], web_conn_cmp_silent_desc);
        for (int i = 0; i < nkeep - MS_HTTP_CONNS_MAX; i++, over++)
            shutdown(keep[i].dup, SHUT_RDWR);
    }
    for (int i = 0; i < nkeep; i++) close(keep[i].dup);
    if (idle || over) {
        pthread_mutex_lock(&h->mu);
        h->closed_idle += idle;
        h->closed_over_cap += over;
        pthread_mutex_unlock(&h->mu);
        log_info("http connections closed idle=%d overCap=%d open=%d idle_ms=%d cap=%d", idle, over,
                 open_conns - idle - over, h->idle_ms, MS_HTTP_CONNS_MAX);
    }
}

static void *sweeper(void *arg) {
    cfg_http_t *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec ts;
        long long until = time_mono_ms() + MS_HTTP_SWEEP_MS;
        ts.tv_sec = (time_t)(until / 1000);
        ts.tv_nsec = (long)(until % 1000) * 1000000L;
        pthread_cond_timedwait(&h->sweep_cv, &h->mu, &ts);
        if (h->stop) break;
        pthread_mutex_unlock(&h->mu);
        web_sweep(h);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- start / stop --------------------------------------------------------------------------- */

int cfg_http_start(cfg_t *cfg, const char *bind_addr, int port, int idle_ms, cfg_http_t **out,
                   ms_error_t *err) {
    cfg_http_t *h = calloc(1, sizeof *h);
    nng_url *url = NULL;
    pthread_condattr_t ca;
    int rv;
    if (!h) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "http: out of memory");
    h->cfg = cfg;
    h->port = port;
    h->idle_ms = idle_ms;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->sweep_cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(h->url, sizeof h->url, "http://%s:%d/", bind_addr, port);
    if ((rv = nng_url_parse(&url, h->url)) != 0 || (rv = nng_http_server_hold(&h->srv, url)) != 0 ||
        (rv = nng_http_handler_alloc(&h->h, "/", web_handle)) != 0 ||
        (rv = nng_http_handler_set_method(h->h, NULL)) != 0 ||
        (rv = nng_http_handler_set_tree(h->h)) != 0 ||
        (rv = nng_http_handler_collect_body(h->h, false, 0)) != 0 ||
        (rv = nng_http_handler_set_data(h->h, h, NULL)) != 0 ||
        (rv = nng_http_server_add_handler(h->srv, h->h)) != 0) {
        if (h->h && rv != 0) nng_http_handler_free(h->h);
        h->h = NULL;
        goto fail;
    }
    if (pthread_create(&h->th, NULL, collector, h) != 0) {
        rv = NNG_ENOMEM;
        goto fail;
    }
    h->th_started = true;
    if ((rv = nng_http_server_start(h->srv)) != 0) goto fail;
    if (pthread_create(&h->sweep_th, NULL, sweeper, h) != 0) {
        rv = NNG_ENOMEM;
        goto fail;
    }
    h->sweep_started = true;
    nng_url_free(url);
    log_info("http serving url=%s", h->url);
    *out = h;
    return 0;
fail:
    nng_url_free(url);
    {
        char what[MS_URL_BYTES_MAX + 32];
        snprintf(what, sizeof what, "http server on %s", h->url);
        rv = err_from_nng(err, rv, what);
    }
    cfg_http_stop(h);
    return rv;
}

const char *cfg_http_url(const cfg_http_t *h) {
    return h->url;
}

void cfg_http_stop(cfg_http_t *h) {
    if (!h) return;
    /* Parked requests are finished first (the collector does it on stop), so that
     * nng_http_server_stop, which waits for its connections' handlers, never waits on us. */
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_cond_broadcast(&h->sweep_cv);
    pthread_mutex_unlock(&h->mu);
    if (h->th_started) pthread_join(h->th, NULL);
    if (h->sweep_started) pthread_join(h->sweep_th, NULL);
    if (h->srv) {
        nng_http_server_stop(h->srv);
        nng_http_server_release(h->srv);  /* frees the handler with the server */
    }
    if (h->have_state) bson_destroy(&h->state);
    bson_free(h->state_json);
    log_info("http stopped requests=%lld builds=%lld closed_idle=%lld closed_over_cap=%lld",
             (long long)h->requests, (long long)h->builds, (long long)h->closed_idle,
             (long long)h->closed_over_cap);
    pthread_cond_destroy(&h->cv);
    pthread_cond_destroy(&h->sweep_cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
