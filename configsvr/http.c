/*
 * http.c — the config server's web view (bin/configsvr --http-port P): minishard's own
 * small HTTP/1.1 server serving the page (web/index.html, app.js, style.css, compiled in
 * by http_assets.c) and read-only JSON endpoints over the cluster state that http_api.c
 * builds. (NNG 1.5's HTTP server did this before; its reader lost pipelined requests
 * past its 8 KiB buffer and reset the connection without a word, and it bounded neither
 * idle connections nor their number.)
 *
 * Threads. One loop thread owns the listener and every connection (poll(2), non-blocking
 * sockets) and never waits on a shard. A request for static content, or for JSON while the
 * cached state is younger than MS_HTTP_STATE_TTL_MS, is answered at once; otherwise it is
 * parked in its connection's queue and the collector, our other thread, is woken: it
 * builds the state (catalog reads and short shard calls), swaps it in and wakes the loop
 * through a pipe, and the loop answers every parked request from it. Any number of open
 * pages therefore cost at most one build per TTL, and no request, no build: an idle port
 * costs nothing. At most MS_HTTP_PENDING_MAX requests are parked at once (more: 503).
 *
 * HTTP/1.1 (RFC 9112). Keep-alive is the default (HTTP/1.0: only with Connection:
 * keep-alive); Connection: close is honoured. Pipelined requests are parsed as they arrive
 * and answered strictly in order: each takes a slot of its connection's queue, and answers
 * leave the queue from its head only, so a ready answer waits behind a parked one. Caps,
 * each per connection (common/limits.h): the request head (request line and headers)
 * must fit MS_HTTP_HEAD_BYTES_MAX, the read buffer, with lines of at most
 * MS_HTTP_LINE_BYTES_MAX and at most MS_HTTP_HEADERS_MAX fields (else 400 for the request
 * line, 431 for the headers, and the connection closed); at most MS_HTTP_PIPELINE_MAX
 * requests wait in the queue (the one past it is not answered: the queued ones are,
 * then the connection is closed); while MS_HTTP_OUT_BYTES_MAX bytes of answers are unsent
 * no further request is read (the client's own socket buffer holds them), and answers of
 * which no byte could be sent for --http-idle-ms get the connection cut (a client that
 * never reads; a slow reader that keeps taking bytes is not cut).
 *
 * Input. Other methods than GET/HEAD get 405 with Allow; a target over
 * MS_HTTP_URI_BYTES_MAX, bad percent-encoding, too many or unknown query parameters, or a
 * non-numeric n get 400; unknown paths 404; errors are a small JSON body {ok: 0, status,
 * error}. No request here has a body, and the server reads none: one announcing a body
 * (Content-Length > 0, any Transfer-Encoding) is answered 400 (405 for another method)
 * with Connection: close. Nothing on this port changes the cluster.
 *
 * Connections. At most MS_HTTP_CONNS_MAX: a new one past the cap closes the one that has
 * waited longest since its last answer. One with nothing to answer and no answer for
 * --http-idle-ms is closed (an abandoned keep-alive, a client that never finishes its
 * request or trickles it). After a connection's last answer our side is shut and what the
 * client still sends is drained for MS_HTTP_LINGER_MS at most, so that the close does not
 * reset the answer away. Every close is logged with its reason
 * (`http connection closed conn=N peer=... reason=...`).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/buf.h"
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

/* One request's place in its connection's queue, and then its whole answer. */
typedef struct web_slot {
    web_req_t r;
    bool parked;           /* waits for a build newer than park_gen */
    int64_t park_gen;
    bool keep_alive;       /* HTTP/1.0 keep-alive: said back in the answer */
    buf_t resp;            /* status line, headers and body once answered */
    bool close;            /* the last answer of the connection (Connection: close) */
} web_slot_t;

/* One client connection; only the loop thread touches it. */
typedef struct web_conn {
    int fd;
    unsigned long long id;
    char peer[64];
    char in[MS_HTTP_HEAD_BYTES_MAX];
    size_t in_off, in_len;         /* unread request bytes are in[in_off, in_len) */
    size_t scan;                   /* in[in_off, scan) holds whole lines of the current head */
    int head_lines;                /* lines of the current head seen so far */
    web_slot_t q[MS_HTTP_PIPELINE_MAX];
    int q_first, q_n;              /* a ring, in request order */
    buf_t out;                     /* answers taken from the queue, out.data[out_off..) unsent */
    size_t out_off;
    long long accepted_ms, answered_ms;  /* accept, and the last answer fully sent */
    long long out_since_ms;        /* when out last went from empty to holding answers, or
                                    * last sent a byte: the send deadline runs from there */
    const char *closing;           /* set: read no more requests; close once answered */
    bool read_eof, lingering;      /* lingering: answers sent, our side shut, draining */
    long long linger_until;
    size_t lingered;
    long long requests;
} web_conn_t;

struct cfg_http {
    cfg_t *cfg;
    char url[MS_URL_BYTES_MAX];
    int idle_ms;
    int lfd;                       /* the listener */
    int wake[2];                   /* the collector (and stop) wake the loop through it */
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* collector: a build wanted, or stop */
    pthread_t th, loop_th;
    bool th_started, loop_started, stop;
    bool want_build, building;     /* under mu */
    bson_t state;                  /* the last build, under mu */
    bool have_state;
    char *state_json;              /* /api/state of this build without ageMS, rendered once */
    size_t state_json_len;
    long long built_ms;            /* monotonic time the last build started */
    int64_t builds;                /* under mu */
    /* the loop thread's own */
    web_conn_t *conns[MS_HTTP_CONNS_MAX];
    int nconns;
    unsigned long long next_id;
    int nparked;
    int64_t seen_builds;
    long long accept_paused_until;
    int64_t requests, closed_idle, closed_over_cap, closed_other;
};

/* ---- answers ---------------------------------------------------------------------------- */

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Writes the whole answer into the slot. allow: the Allow header of a 405, or NULL;
 * close (or s->close, the client's wish): Connection: close, the connection's last answer. HEAD gets the GET's headers,
 * Content-Length included, and no body. */
static void reply(web_slot_t *s, int status, const char *ctype, const void *body, size_t len,
                  bool head, const char *allow, bool close) {
    char hdr[512];
    close = close || s->close;  /* the client's Connection: close, set before */
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nCache-Control: no-store\r\n"
                     "Content-Length: %zu\r\n%s%s%s%s\r\n",
                     status, status_text(status), ctype, len, allow ? "Allow: " : "",
                     allow ? allow : "", allow ? "\r\n" : "",
                     close ? "Connection: close\r\n" : s->keep_alive ? "Connection: keep-alive\r\n" : "");
    buf_reset(&s->resp);
    buf_put(&s->resp, hdr, (size_t)n < sizeof hdr ? (size_t)n : sizeof hdr - 1);
    if (!head && !s->r.head && len > 0) buf_put(&s->resp, body, len);
    s->close = close;
    s->parked = false;
}

static void reply_error(web_slot_t *s, int status, const char *allow, bool close, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reply_error(web_slot_t *s, int status, const char *allow, bool close, const char *fmt, ...) {
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
    reply(s, status, "application/json", body, strlen(body), false, allow, close);
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
static void reply_from_state(cfg_http_t *h, web_slot_t *slot, const web_req_t *r) {
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
                    reply(slot, 200, "application/json", body, n - 1 + (size_t)tl, r->head, NULL, false);
                    free(body);
                    bson_destroy(&out);
                    return;
                }
                free(body);
            }
        }
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
        reply_error(slot, 500, NULL, false, "state is not JSON");
        return;
    }
    reply(slot, 200, "application/json", json, len, r->head, NULL, false);
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
                size_t vl = strlen(val);
                if (vl > MS_NS_BYTES_MAX || !strchr(val, '.')) {
                    snprintf(msg, cap, "ns must be a namespace db.collection");
                    return 400;
                }
                memcpy(r->ns, val, vl + 1);  /* fits: checked just above */
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

/* ---- one request --------------------------------------------------------------------------- */

/* What a request head says (its lines are NUL-terminated in place, in the read buffer). */
typedef struct web_head {
    const char *method, *target;
    bool http10;
    bool conn_close, conn_keep_alive;   /* Connection: tokens */
    bool has_body;
    char body_msg[128];                 /* which header announced a body */
} web_head_t;

/* Whether a Content-Length or Transfer-Encoding field announces a body. No request to
 * this port has one and the server reads none, so a body's bytes would be read as the
 * next request (a request smuggled in a body): a GET or HEAD announcing one gets 400,
 * another method its 405, and the connection is closed after the answer, as RFC 9112
 * §6.3 asks of a server that does not read a body. Content-Length: 0 is no body. */
static void note_body(web_head_t *hd, const char *name, const char *value) {
    if (hd->has_body) return;
    if (!strcasecmp(name, "Transfer-Encoding")) {
        snprintf(hd->body_msg, sizeof hd->body_msg, "Transfer-Encoding %.32s: this port takes no request body",
                 value);
        hd->has_body = true;
    } else if (!strcasecmp(name, "Content-Length") && (value[0] == '\0' || strspn(value, "0") != strlen(value))) {
        snprintf(hd->body_msg, sizeof hd->body_msg, "Content-Length %.32s: this port takes no request body",
                 value);
        hd->has_body = true;
    }
}

/* The comma-separated tokens of a Connection field. */
static void note_connection(web_head_t *hd, const char *value) {
    const char *p = value;
    while (*p) {  /* bounded: p moves forward each turn */
        size_t n = strcspn(p, ",");
        while (n > 0 && (*p == ' ' || *p == '\t')) p++, n--;
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t')) m--;
        if (m == 5 && !strncasecmp(p, "close", 5)) hd->conn_close = true;
        if (m == 10 && !strncasecmp(p, "keep-alive", 10)) hd->conn_keep_alive = true;
        p += n;
        if (*p == ',') p++;
    }
}

static bool is_tchar(int c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Cuts the next line off [*p, end) — it ends at '\n', as the head's last line does; an
 * optional '\r' before it is dropped — and NUL-terminates it. false when the line holds a
 * control character (a bare CR, a NUL, DEL): refused, RFC 9112 §2.2. */
static bool next_line(char **p, char *end, char **line) {
    char *nl = memchr(*p, '\n', (size_t)(end - *p));
    if (!nl) return false;
    *line = *p;
    *p = nl + 1;
    if (nl > *line && nl[-1] == '\r') nl--;
    for (const char *c = *line; c < nl; c++)
        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) return false;
    *nl = '\0';
    return true;
}

/* "METHOD SP target SP HTTP/1.x"; 0, or 400/505 with msg. */
static int parse_request_line(char *line, web_head_t *hd, char *msg, size_t cap) {
    char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ')) {
        snprintf(msg, cap, "malformed request line");
        return 400;
    }
    *sp1 = *sp2 = '\0';
    for (const char *c = line; *c; c++)
        if (!is_tchar((unsigned char)*c)) {
            snprintf(msg, cap, "malformed method");
            return 400;
        }
    const char *v = sp2 + 1;
    if (strncmp(v, "HTTP/", 5) != 0 || strlen(v) != 8 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
        v[7] < '0' || v[7] > '9') {
        snprintf(msg, cap, "malformed HTTP version");
        return 400;
    }
    if (v[5] != '1') {
        snprintf(msg, cap, "HTTP version %.3s not supported (1.0 and 1.1 are)", v + 5);
        return 505;
    }
    hd->method = line;
    hd->target = sp1 + 1;
    hd->http10 = v[7] == '0';
    return 0;
}

/* Parses the complete head [p, end) (it ends with an empty line) into hd; 0, or 400/505. */
static int parse_head(char *p, char *end, web_head_t *hd, char *msg, size_t cap) {
    char *line;
    memset(hd, 0, sizeof *hd);
    if (!next_line(&p, end, &line)) {
        snprintf(msg, cap, "control character in the request line");
        return 400;
    }
    int st = parse_request_line(line, hd, msg, cap);
    if (st) return st;
    for (;;) {  /* bounded: the scan counted at most MS_HTTP_HEADERS_MAX lines */
        if (!next_line(&p, end, &line)) {
            snprintf(msg, cap, "control character in a header field");
            return 400;
        }
        if (!line[0]) return 0;
        char *colon = strchr(line, ':');
        /* a field name is a token, the colon right after it (no space: RFC 9112 §5.1);
         * a line starting with a space would be obsolete line folding, refused too */
        size_t nlen = colon ? (size_t)(colon - line) : 0;
        for (size_t i = 0; i < nlen; i++)
            if (!is_tchar((unsigned char)line[i])) nlen = 0;
        if (nlen == 0) {
            snprintf(msg, cap, "malformed header field");
            return 400;
        }
        *colon = '\0';
        char *val = colon + 1, *vend = val + strlen(val);
        while (*val == ' ' || *val == '\t') val++;
        while (vend > val && (vend[-1] == ' ' || vend[-1] == '\t')) *--vend = '\0';
        if (!strcasecmp(line, "Connection")) note_connection(hd, val);
        note_body(hd, line, val);
    }
}

/* Answers (or parks) one request whose head parsed. */
static void web_answer(cfg_http_t *h, web_slot_t *s, const web_head_t *hd) {
    char msg[256];
    web_req_t r;
    bool is_static;
    const char *ctype = NULL, *body = NULL;
    size_t blen = 0;
    bool head = !strcmp(hd->method, "HEAD");
    s->r.head = head;
    if (hd->has_body) log_info("http request refused, connection closed: %s", hd->body_msg);
    if (strcmp(hd->method, "GET") != 0 && !head) {
        reply_error(s, 405, "GET, HEAD", hd->has_body, "method %.32s not allowed: this port is read-only",
                    hd->method);
        return;
    }
    if (hd->has_body) {
        reply_error(s, 400, NULL, true, "%s", hd->body_msg);
        return;
    }
    int st = parse_target(hd->target, &r, &is_static, &ctype, &body, &blen, msg, sizeof msg);
    if (st) {
        reply_error(s, st, NULL, false, "%s", msg);
        return;
    }
    r.head = head;
    s->r = r;
    if (is_static) {
        reply(s, 200, ctype, body, blen, head, NULL, false);
        return;
    }
    h->requests++;
    if (h->nparked >= MS_HTTP_PENDING_MAX) {
        reply_error(s, 503, NULL, false, "too many requests waiting for the cluster state");
        return;
    }
    pthread_mutex_lock(&h->mu);
    if (h->stop) {
        reply_error(s, 503, NULL, false, "shutting down");
    } else if (h->have_state && time_mono_ms() - h->built_ms < MS_HTTP_STATE_TTL_MS) {
        reply_from_state(h, s, &r);
    } else {
        /* parked until a build newer than this one; the loop answers it then */
        s->parked = true;
        s->park_gen = h->builds;
        h->nparked++;
        if (!h->building) {  /* a build under way answers it: it is newer than park_gen */
            h->want_build = true;
            pthread_cond_signal(&h->cv);
        }
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- the collector ------------------------------------------------------------------------- */

/* Wakes the loop thread (a byte in the pipe; a full pipe already wakes it). */
static void wake_loop(cfg_http_t *h) {
    char b = 1;
    ssize_t n = write(h->wake[1], &b, 1);
    (void)n;
}

static void *collector(void *arg) {
    cfg_http_t *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && !h->want_build) pthread_cond_wait(&h->cv, &h->mu);
        if (h->stop) break;
        /* requests parked from here on are answered by this build or the next */
        h->want_build = false;
        h->building = true;
        int64_t gen = h->builds;
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
        h->builds = gen + 1;
        h->building = false;
        pthread_mutex_unlock(&h->mu);
        wake_loop(h);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- connections ---------------------------------------------------------------------------- */

static size_t out_unsent(const web_conn_t *c) {
    return c->out.len - c->out_off;
}

static web_slot_t *slot_at(web_conn_t *c, int i) {
    return &c->q[(c->q_first + i) % MS_HTTP_PIPELINE_MAX];
}

/* The next slot of the queue, empty (the caller checked q_n < MS_HTTP_PIPELINE_MAX). */
static web_slot_t *slot_push(web_conn_t *c) {
    web_slot_t *s = slot_at(c, c->q_n++);
    buf_free(&s->resp);
    memset(s, 0, sizeof *s);
    return s;
}

/* Moves the answers ready at the head of the queue to out, in order. */
static void conn_flush(web_conn_t *c) {
    while (c->q_n > 0 && !slot_at(c, 0)->parked) {  /* bounded by the queue */
        web_slot_t *s = slot_at(c, 0);
        if (out_unsent(c) == 0) {
            buf_reset(&c->out);
            c->out_off = 0;
            c->out_since_ms = time_mono_ms();
        }
        buf_put(&c->out, s->resp.data, s->resp.len);
        buf_free(&s->resp);  /* an answer may be a whole state: not kept by an idle slot */
        if (s->close && !c->closing) c->closing = "connectionClose";
        c->q_first = (c->q_first + 1) % MS_HTTP_PIPELINE_MAX;
        c->q_n--;
    }
}

static void conn_free(cfg_http_t *h, web_conn_t *c) {
    for (int i = 0; i < c->q_n; i++)
        if (slot_at(c, i)->parked) h->nparked--;
    for (int i = 0; i < MS_HTTP_PIPELINE_MAX; i++) buf_free(&c->q[i].resp);
    buf_free(&c->out);
    close(c->fd);
    free(c);
}

/* Closes conns[i] (the last one takes its place) with a log line saying why. */
static void conn_close(cfg_http_t *h, int i, const char *reason) {
    web_conn_t *c = h->conns[i];
    log_info("http connection closed conn=%llu peer=%s reason=%s requests=%lld queued=%d unsent=%zu "
             "unread=%zu ageMS=%lld",
             c->id, c->peer, reason ? reason : "unknown", c->requests, c->q_n, out_unsent(c), c->in_len - c->in_off,
             time_mono_ms() - c->accepted_ms);
    if (reason && !strcmp(reason, "idle")) h->closed_idle++;
    else if (reason && !strcmp(reason, "overCap")) h->closed_over_cap++;
    else h->closed_other++;
    conn_free(h, c);
    h->conns[i] = h->conns[--h->nconns];
}

/* Makes s the connection's last answer: Connection: close in its headers, now or when it
 * is answered. */
static void slot_mark_last(web_slot_t *s) {
    static const char hdr[] = "Connection: close\r\n";
    s->close = true;
    if (s->parked) return;
    const char *end = memmem((const char *)s->resp.data, s->resp.len, "\r\n\r\n", 4);
    if (!end) return;
    size_t head = (size_t)(end - (const char *)s->resp.data);
    char *ka = memmem(s->resp.data, head, "\r\nConnection: keep-alive", 24);
    if (ka) {   /* an HTTP/1.0 keep-alive answer: it now says close */
        char *v = ka + 14;
        memcpy(v, "close", 5);
        memmove(v + 5, v + 10, s->resp.len - (size_t)(v + 10 - (char *)s->resp.data));
        s->resp.len -= 5;
        return;
    }
    if (memmem(s->resp.data, head, "\r\nConnection:", 13)) return;
    size_t at = (size_t)(end - (const char *)s->resp.data) + 2, tail = s->resp.len - at;
    buf_reserve(&s->resp, sizeof hdr - 1);
    memmove(s->resp.data + at + sizeof hdr - 1, s->resp.data + at, tail);
    memcpy(s->resp.data + at, hdr, sizeof hdr - 1);
    s->resp.len += sizeof hdr - 1;
}

/* Answers a request the server refuses to read further (bad framing, a head over a cap):
 * the last answer of the connection, logged. */
static void conn_refuse(web_conn_t *c, int status, const char *reason, const char *msg) {
    web_slot_t *s = slot_push(c);
    log_info("http request refused, connection closed: conn=%llu peer=%s status=%d %s", c->id, c->peer,
             status, msg);
    reply_error(s, status, NULL, true, "%s", msg);
    c->closing = reason;
}

/* Looks for the end of the request head in the read buffer, line by line from where the
 * last look stopped (so a head trickled byte by byte costs its length, not its square).
 * -1: a whole head of *head_len bytes at in_off; 0: not yet; else the status refusing it
 * (400: request line over MS_HTTP_LINE_BYTES_MAX; 431: a header line over it, more than
 * MS_HTTP_HEADERS_MAX fields, a head over MS_HTTP_HEAD_BYTES_MAX), with msg. */
static int scan_head(web_conn_t *c, size_t *head_len, char *msg, size_t cap) {
    for (;;) {  /* bounded: each turn moves scan past one line of in[] */
        size_t start = c->scan;
        const char *nl = memchr(c->in + start, '\n', c->in_len - start);
        size_t len = nl ? (size_t)(nl - (c->in + start)) : c->in_len - start;
        if (len > MS_HTTP_LINE_BYTES_MAX) {
            bool req_line = c->head_lines == 0;
            snprintf(msg, cap, "%s longer than %d bytes", req_line ? "request line" : "header field line",
                     MS_HTTP_LINE_BYTES_MAX);
            return req_line ? 400 : 431;
        }
        if (!nl) break;
        c->scan = start + len + 1;
        if (len == 0 || (len == 1 && c->in[start] == '\r')) {
            if (c->head_lines > 0) {
                *head_len = c->scan - c->in_off;
                return -1;
            }
            c->in_off = c->scan;  /* empty lines before a request are ignored (RFC 9112 §2.2) */
            continue;
        }
        if (++c->head_lines > MS_HTTP_HEADERS_MAX + 1) {
            snprintf(msg, cap, "more than %d header fields", MS_HTTP_HEADERS_MAX);
            return 431;
        }
    }
    if (c->in_len - c->in_off >= MS_HTTP_HEAD_BYTES_MAX) {
        snprintf(msg, cap, "request head larger than %d bytes", MS_HTTP_HEAD_BYTES_MAX);
        return 431;
    }
    return 0;
}

/* Parses and answers the whole requests in the read buffer, in order, while answers may
 * still be queued: not past a closing answer, not while MS_HTTP_OUT_BYTES_MAX bytes of
 * answers are unsent (the rest waits in the buffer and the client's socket). */
static void conn_process(cfg_http_t *h, web_conn_t *c) {
    while (!c->closing && out_unsent(c) < MS_HTTP_OUT_BYTES_MAX) {  /* bounded: each turn takes a head off in[] */
        char msg[256];
        size_t head_len = 0;
        int st = scan_head(c, &head_len, msg, sizeof msg);
        if (st == 0) break;
        if (c->q_n == MS_HTTP_PIPELINE_MAX) {
            log_info("http pipelined requests over the cap, connection closed after the %d queued: conn=%llu "
                     "peer=%s", MS_HTTP_PIPELINE_MAX, c->id, c->peer);
            slot_mark_last(slot_at(c, c->q_n - 1));
            c->closing = "pipelineCap";
            break;
        }
        if (st > 0) {
            conn_refuse(c, st, st == 431 ? "headerTooLarge" : "badRequest", msg);
            break;
        }
        web_head_t hd;
        char *head = c->in + c->in_off;
        c->requests++;
        st = parse_head(head, head + head_len, &hd, msg, sizeof msg);
        if (st) {
            conn_refuse(c, st, "badRequest", msg);
            break;
        }
        web_slot_t *s = slot_push(c);
        s->close = hd.conn_close || (hd.http10 && !hd.conn_keep_alive);
        s->keep_alive = hd.http10 && !s->close;
        web_answer(h, s, &hd);
        if (s->close) c->closing = hd.has_body ? "bodyRefused" : "connectionClose";
        c->in_off += head_len;
        c->scan = c->in_off;
        c->head_lines = 0;
        conn_flush(c);
    }
    conn_flush(c);
}

/* ---- the loop's I/O --------------------------------------------------------------------------- */

/* Whether the loop reads from c now: not past a closing answer (except to drain it while
 * lingering), not while its answers back up, and only with room in the buffer. */
static bool conn_wants_read(const web_conn_t *c) {
    if (c->read_eof) return false;
    if (c->lingering) return true;
    return !c->closing && out_unsent(c) < MS_HTTP_OUT_BYTES_MAX && c->in_len - c->in_off < MS_HTTP_HEAD_BYTES_MAX;
}

/* One read. A lingering connection's bytes are dropped; others' go to the buffer and are
 * parsed. false when the connection is to be closed now (*reason says why). */
static bool conn_read(cfg_http_t *h, web_conn_t *c, const char **reason) {
    char drop[4096];
    if (c->in_off > 0) {  /* keep the unread bytes at the start: room at the end */
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->scan -= c->in_off;
        c->in_off = 0;
    }
    char *to = c->lingering ? drop : c->in + c->in_len;
    size_t room = c->lingering ? sizeof drop : sizeof c->in - c->in_len;
    ssize_t n = recv(c->fd, to, room, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n < 0) {
        *reason = "readError";
        return false;
    }
    if (n == 0) {
        c->read_eof = true;
        if (c->lingering) {
            *reason = c->closing;
            return false;
        }
        if (!c->closing) c->closing = "clientClosed";  /* what it asked is still answered */
        return true;
    }
    if (c->lingering) {
        c->lingered += (size_t)n;
        if (c->lingered <= MS_HTTP_LINGER_BYTES_MAX) return true;
        *reason = c->closing;
        return false;
    }
    c->in_len += (size_t)n;
    conn_process(h, c);
    return true;
}

/* Sends what it can of out (a few sends, each as much as the socket takes). false when
 * the connection is to be closed now. */
static bool conn_write(web_conn_t *c, const char **reason) {
    for (int i = 0; i < 8 && out_unsent(c) > 0; i++) {  /* bounded */
        ssize_t n = send(c->fd, c->out.data + c->out_off, out_unsent(c), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
        if (n <= 0) {
            *reason = "writeError";
            return false;
        }
        c->out_off += (size_t)n;
        c->out_since_ms = time_mono_ms();   /* progress: a slow reader is not a dead one */
    }
    if (out_unsent(c) == 0 && c->out.len > 0) {
        buf_free(&c->out);  /* up to MS_HTTP_OUT_BYTES_MAX and an answer: not kept while idle */
        c->out_off = 0;
        c->answered_ms = time_mono_ms();
    }
    return true;
}

/* After its last answer is sent, a closing connection shuts its sending side and drains
 * what the client still sends for a moment before closing: closing with unread bytes
 * would reset the connection, and the client could lose the answer (RFC 9112 §9.6). */
static void conn_maybe_linger(web_conn_t *c) {
    if (!c->closing || c->lingering || c->q_n > 0 || out_unsent(c) > 0) return;
    shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->linger_until = time_mono_ms() + MS_HTTP_LINGER_MS;
}

/* The connection's deadline check: NULL, or why it is closed now. */
static const char *conn_expired(const cfg_http_t *h, const web_conn_t *c, long long now) {
    if (c->lingering) return now >= c->linger_until ? c->closing : NULL;
    if (out_unsent(c) > 0) return now - c->out_since_ms >= h->idle_ms ? "sendTimeout" : NULL;
    if (c->q_n == 0 && now - c->answered_ms >= h->idle_ms) return "idle";
    return NULL;
}

/* When conn_expired may next say something (for poll's timeout). */
static long long conn_deadline(const cfg_http_t *h, const web_conn_t *c) {
    if (c->lingering) return c->linger_until;
    if (out_unsent(c) > 0) return c->out_since_ms + h->idle_ms;
    if (c->q_n == 0) return c->answered_ms + h->idle_ms;
    return time_mono_ms() + MS_HTTP_TICK_MS;  /* waits for a build */
}

/* Parked requests a newer build can answer now, answered (under mu: the state). */
static void answer_parked(cfg_http_t *h) {
    pthread_mutex_lock(&h->mu);
    int64_t builds = h->builds;
    if (builds != h->seen_builds) {
        for (int i = 0; i < h->nconns; i++) {
            web_conn_t *c = h->conns[i];
            for (int j = 0; j < c->q_n; j++) {
                web_slot_t *s = slot_at(c, j);
                if (!s->parked || s->park_gen >= builds) continue;
                reply_from_state(h, s, &s->r);
                h->nparked--;
            }
        }
        h->seen_builds = builds;
    }
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < h->nconns; i++) conn_process(h, h->conns[i]);
}

static void peer_name(int fd, char *out, size_t cap) {
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    char host[INET6_ADDRSTRLEN] = "?", serv[8] = "?";  /* fit peer[64] with the ':' */
    if (getpeername(fd, (struct sockaddr *)&a, &al) == 0)
        getnameinfo((struct sockaddr *)&a, al, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, cap, "%s:%s", host, serv);
}

/* The connection that has waited longest since its last answer. */
static int conn_longest_silent(const cfg_http_t *h) {
    int k = 0;
    for (int i = 1; i < h->nconns; i++)
        if (h->conns[i]->answered_ms < h->conns[k]->answered_ms) k = i;
    return k;
}

/* Takes the waiting connections (a few per turn); past MS_HTTP_CONNS_MAX the longest
 * silent one is closed for each new one. */
static void accept_conns(cfg_http_t *h) {
    for (int i = 0; i < 16; i++) {  /* bounded: the rest wait for the next turn */
        int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED))
            return;
        if (fd < 0) {
            /* out of descriptors or memory: the listener stays readable, so it is left out of
             * poll for a tick instead of spinning on it */
            log_warn("http accept failed, retried in %d ms: %s", MS_HTTP_TICK_MS, strerror(errno));
            h->accept_paused_until = time_mono_ms() + MS_HTTP_TICK_MS;
            return;
        }
        web_conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            return;
        }
        if (h->nconns == MS_HTTP_CONNS_MAX) conn_close(h, conn_longest_silent(h), "overCap");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->id = ++h->next_id;
        peer_name(fd, c->peer, sizeof c->peer);
        c->accepted_ms = c->answered_ms = time_mono_ms();
        h->conns[h->nconns++] = c;
    }
}

/* poll's timeout: the nearest connection deadline, within [1, MS_HTTP_TICK_MS * 10] ms. */
static int loop_timeout(const cfg_http_t *h) {
    long long now = time_mono_ms(), until = now + MS_HTTP_TICK_MS * 10;
    for (int i = 0; i < h->nconns; i++) {
        long long d = conn_deadline(h, h->conns[i]);
        if (d < until) until = d;
    }
    if (h->accept_paused_until > now && h->accept_paused_until < until) until = h->accept_paused_until;
    return until <= now ? 1 : (int)(until - now);
}

/* One turn's events and deadlines of conns[i]; closes it when it is done. */
static void conn_turn(cfg_http_t *h, int i, short revents, long long now) {
    web_conn_t *c = h->conns[i];
    const char *reason = NULL;
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && conn_wants_read(c) && !conn_read(h, c, &reason)) goto close;
    /* answer what is parsed; when the answers drain, read on in the buffer (bounded) */
    for (int k = 0; k < 4; k++) {
        conn_process(h, c);
        if (!conn_write(c, &reason)) goto close;
        if (out_unsent(c) > 0) break;
    }
    conn_process(h, c);  /* out holds what the next turn sends, when the buffer has more */
    conn_maybe_linger(c);
    if (c->read_eof && c->lingering) {
        reason = c->closing;
        goto close;
    }
    if ((reason = conn_expired(h, c, now)) != NULL) goto close;
    return;
close:
    conn_close(h, i, reason);
}

static void *loop(void *arg) {
    cfg_http_t *h = arg;
    struct pollfd pf[2 + MS_HTTP_CONNS_MAX];
    web_conn_t *polled[MS_HTTP_CONNS_MAX];
    for (;;) {
        pthread_mutex_lock(&h->mu);
        bool stop = h->stop;
        pthread_mutex_unlock(&h->mu);
        if (stop) break;
        int n = h->nconns;
        pf[0] = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = time_mono_ms() < h->accept_paused_until ? -1 : h->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            web_conn_t *c = polled[i] = h->conns[i];
            short ev = (short)((conn_wants_read(c) ? POLLIN : 0) | (out_unsent(c) > 0 ? POLLOUT : 0));
            /* nothing asked: left out (a hung-up socket would otherwise wake poll at once) */
            pf[2 + i] = (struct pollfd){.fd = ev ? c->fd : -1, .events = ev};
        }
        if (poll(pf, (nfds_t)(2 + n), loop_timeout(h)) < 0 && errno != EINTR) {
            log_warn("http poll failed: %s", strerror(errno));
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pf[0].revents & POLLIN) {
            char drain[64];
            while (read(h->wake[0], drain, sizeof drain) > 0) {}  /* bounded: the pipe empties */
        }
        answer_parked(h);
        long long now = time_mono_ms();
        int before_idle = (int)h->closed_idle, before_over = (int)h->closed_over_cap;
        /* backwards: a close moves the last connection into the closed one's place */
        for (int i = n - 1; i >= 0; i--) conn_turn(h, i, h->conns[i] == polled[i] ? pf[2 + i].revents : 0, now);
        if (pf[1].revents & POLLIN) accept_conns(h);
        int idle = (int)h->closed_idle - before_idle, over = (int)h->closed_over_cap - before_over;
        if (idle || over)
            log_info("http connections closed idle=%d overCap=%d open=%d idle_ms=%d cap=%d", idle, over,
                     h->nconns, h->idle_ms, MS_HTTP_CONNS_MAX);
    }
    while (h->nconns > 0) conn_close(h, h->nconns - 1, "shutdown");
    return NULL;
}

/* ---- start / stop --------------------------------------------------------------------------- */

/* The listening socket on bind_addr:port (non-blocking); -1 with *rc and err set. */
static int listen_on(const char *bind_addr, int port, const char *url, int *rc_out, ms_error_t *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    int rc = getaddrinfo(bind_addr, serv, &hints, &ai);
    if (rc != 0) {
        *rc_out = err_set(err, MS_ERR_SOCKET_EXCEPTION, "http server on %s: %s", url, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        *rc_out = err_set(err, MS_ERR_SOCKET_EXCEPTION, "http server on %s: %s", url, strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int cfg_http_start(cfg_t *cfg, const char *bind_addr, int port, int idle_ms, cfg_http_t **out,
                   ms_error_t *err) {
    cfg_http_t *h = calloc(1, sizeof *h);
    int rc;
    if (!h) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "http: out of memory");
    h->cfg = cfg;
    h->idle_ms = idle_ms;
    h->wake[0] = h->wake[1] = -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    snprintf(h->url, sizeof h->url, "http://%s:%d/", bind_addr, port);
    h->lfd = listen_on(bind_addr, port, h->url, &rc, err);
    if (h->lfd < 0) goto fail;
    if (pipe2(h->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        rc = err_set(err, MS_ERR_SOCKET_EXCEPTION, "http server on %s: pipe: %s", h->url, strerror(errno));
        goto fail;
    }
    if (pthread_create(&h->th, NULL, collector, h) != 0) goto no_thread;
    h->th_started = true;
    if (pthread_create(&h->loop_th, NULL, loop, h) != 0) goto no_thread;
    h->loop_started = true;
    log_info("http serving url=%s", h->url);
    *out = h;
    return 0;
no_thread:
    rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "http server on %s: no thread", h->url);
fail:
    cfg_http_stop(h);
    return rc;
}

const char *cfg_http_url(const cfg_http_t *h) {
    return h->url;
}

void cfg_http_stop(cfg_http_t *h) {
    if (!h) return;
    /* The loop closes every connection (reason=shutdown) before it ends; the collector ends
     * after the build under way, if any. */
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->wake[1] >= 0) wake_loop(h);
    if (h->loop_started) pthread_join(h->loop_th, NULL);
    if (h->th_started) pthread_join(h->th, NULL);
    if (h->lfd >= 0) close(h->lfd);
    for (int i = 0; i < 2; i++)
        if (h->wake[i] >= 0) close(h->wake[i]);
    if (h->have_state) bson_destroy(&h->state);
    bson_free(h->state_json);
    log_info("http stopped requests=%lld builds=%lld closed_idle=%lld closed_over_cap=%lld closed_other=%lld",
             (long long)h->requests, (long long)h->builds, (long long)h->closed_idle,
             (long long)h->closed_over_cap, (long long)h->closed_other);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
