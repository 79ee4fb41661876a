/*
 * rt_retry.c — the router's one place that sends targeted requests and retries stale ones,
 * run by bin/router (MongoDB's mongos retries StaleConfig / StaleDbVersion in each of its
 * dispatch layers; here one function serves scatter reads, findAndModify, commands to the
 * primary and write batches): rt_dispatch gets the routing table, has the caller build
 * this attempt's requests from it, sends them in parallel (rt_send_all), and on
 * StaleConfig refreshes the collection's table (incrementally when possible) or on
 * StaleDbVersion forgets the database's entry, then rebuilds and resends — bounded by
 * MS_STALE_RETRIES_MAX and by the operation's maxTimeMS (op_check before every attempt).
 *
 * Two kinds of caller:
 *   - all-or-nothing (reads, findAndModify, primary commands): an attempt with a stale
 *     reply is retried whole; the ok replies of that attempt are let go (discard: close
 *     the cursor they opened); a failed request ends the dispatch, not retried;
 *   - per-request (write batches, rt_write.c): every reply that is not stale as a whole —
 *     ok, error or transport failure — is handed to absorb as soon as the attempt is in,
 *     also when the attempt is then retried: a shard that applied its ops has them
 *     recorded there, and the caller's next build sends only what is left (never again to
 *     a shard that applied it). absorb reports staleness found inside a reply (a
 *     StaleConfig writeError), retried like a stale reply; retries running out or a failed
 *     refresh go to give_up (the batch fails its pending ops) instead of being the
 *     dispatch's error. An ordered batch's rounds are the caller's (one dispatch each),
 *     sharing one count of stale attempts (stale_rounds) so that the bound is per command.
 */
#include <string.h>
#include <time.h>

#include "common/opctx.h"
#include "router/router.h"

#define RT_STALE_EXHAUSTED (-1)   /* stale_settle: no retry remains */

/* Counts a stale attempt; 0 when a retry remains (the table refreshed from t when
 * stale_config), RT_STALE_EXHAUSTED when none does (err untouched), or the refresh's
 * error. StaleDbVersion: rt_note_stale_db forgot the database's entry already. */
static int stale_settle(router_t *r, const char *ns, const rt_table_t *t, bool stale_config,
                        int *rounds, ms_error_t *err) {
    if (++*rounds > MS_STALE_RETRIES_MAX) return RT_STALE_EXHAUSTED;
    return stale_config ? rt_table_refresh(r, ns, t, err) : 0;
}

int rt_dispatch(router_t *r, const rt_dispatch_t *d, rt_req_t *reqs, int *nreqs, int *failed,
                ms_error_t *err) {
    int own_rounds = 0, *rounds = d->stale_rounds ? d->stale_rounds : &own_rounds;
    *nreqs = 0;
    *failed = -1;
    for (;;) {
        rt_table_t *t = NULL;
        int rc, n = 0;
        if ((rc = op_check(err)) != 0) return rc;   /* a refresh may have used the time up */
        if (d->ns && (rc = rt_table_get(r, d->ns, &t, err)) != 0) return rc;
        if ((rc = d->build(d->arg, r, t, reqs, &n, err)) != 0) {
            rt_table_release(t);
            return rc;
        }
        rt_send_all(r, reqs, n);
        /* Every stale answer is noted (logged, counted); a failure ends an all-or-nothing
         * dispatch, the rest goes to absorb. */
        bool stale = false, stale_db = false, end = false;
        int fail = -1;
        for (int i = 0; i < n; i++) {
            rt_req_t *q = &reqs[i];
            int code = q->rc ? q->rc : rt_reply_status(&q->reply, NULL);
            if (code == MS_ERR_STALE_CONFIG && d->ns && !q->rc) {
                stale = true;
                rt_note_stale(r, d->ns, q->shard, &q->reply);
            } else if (code == MS_ERR_STALE_DB_VERSION && !q->rc) {
                stale_db = true;
                rt_note_stale_db(r, d->db, q->shard, &q->reply);
            } else if (d->absorb) {
                int a = d->absorb(d->arg, r, q, code);
                if ((a & RT_ABSORB_STALE_CONFIG) && d->ns) {
                    stale = true;
                    rt_note_stale(r, d->ns, q->shard, NULL);
                }
                if (a & RT_ABSORB_STALE_DB) {
                    stale_db = true;
                    rt_note_stale_db(r, d->db, q->shard, NULL);
                }
                if (a & RT_ABSORB_END) end = true;
            } else if (code && fail < 0) {
                fail = i;
            }
        }
        if (d->absorb) {   /* absorbed: the requests are spent */
            for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
            n = 0;
        }
        /* Done: every reply is in, or one failed (a failure is not retried). */
        if (end || fail >= 0 || (!stale && !stale_db)) {
            *nreqs = n;
            *failed = fail;
            rt_table_release(t);
            return 0;
        }
        /* Stale: let go of what the shards that answered opened, then retry. */
        if (d->discard)
            for (int i = 0; i < n; i++)
                if (reqs[i].rc == 0 && rt_reply_status(&reqs[i].reply, NULL) == 0)
                    d->discard(d->arg, r, &reqs[i]);
        for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
        ms_error_t e = {0};
        rc = stale_settle(r, d->ns, t, stale, rounds, &e);
        rt_table_release(t);
        if (rc == RT_STALE_EXHAUSTED) {
            const char *what = d->what ? d->what : d->ns ? d->ns : d->db;
            if (d->ns)
                err_set(&e, stale ? MS_ERR_STALE_CONFIG : MS_ERR_STALE_DB_VERSION,
                        "%s: shards kept answering %s after %d refreshes", what,
                        stale ? "StaleConfig" : "StaleDbVersion", MS_STALE_RETRIES_MAX);
            else
                err_set(&e, MS_ERR_STALE_DB_VERSION, "%s: primary kept answering StaleDbVersion",
                        what);
            rc = e.code;
        }
        if (rc && d->give_up) {
            d->give_up(d->arg, &e);
            return 0;
        }
        if (rc) {
            *err = e;
            return rc;
        }
    }
}

/* ---- retryable writes: resends after network and retryable errors --------------------- */

bool rt_write_retry_wait(int attempt) {
    long long ms = (long long)MS_ROUTER_WRITE_RETRY_BACKOFF_MS << (attempt < 5 ? attempt : 5);
    ms_error_t e;
    if (attempt >= MS_ROUTER_WRITE_RETRIES_MAX || op_check(&e) != 0) return false;
    if (op_deadline_ms() > 0) {
        long long left = op_time_left_ms(0);
        if (left <= 1) return false;
        if (ms > left / 2) ms = left / 2;
    }
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) { /* EINTR: sleep the rest */ }
    return true;
}
