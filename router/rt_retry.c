/*
 * rt_retry.c — the router's stale retries in one place, run by bin/router (MongoDB's
 * mongos retries StaleConfig / StaleDbVersion in its own dispatch layers; here one
 * function): rt_dispatch gets the routing table, has the caller build this attempt's
 * requests from it, sends them in parallel (rt_send_all), and on StaleConfig refreshes
 * the collection's table (incrementally when possible) or on StaleDbVersion forgets the
 * database's entry, then rebuilds and resends — bounded by MS_STALE_RETRIES_MAX and by
 * the operation's maxTimeMS (op_check before every attempt).
 *
 * rt_stale_settle is the one decision "may we retry, and refresh how" shared by
 * rt_dispatch and the write-batch loop (rt_write.c), which tracks per-op state across
 * rounds and so drives its own sends.
 */
#include <string.h>

#include "common/opctx.h"
#include "router/router.h"

int rt_stale_settle(router_t *r, const char *ns, const rt_table_t *t, bool stale_config,
                    int *rounds, ms_error_t *err) {
    if (++*rounds > MS_STALE_RETRIES_MAX) return RT_STALE_EXHAUSTED;
    /* StaleDbVersion: rt_note_stale_db forgot the database's entry already. */
    return stale_config ? rt_table_refresh(r, ns, t, err) : 0;
}

int rt_dispatch(router_t *r, const rt_dispatch_t *d, rt_req_t *reqs, int *nreqs, int *failed,
                ms_error_t *err) {
    int rounds = 0;
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
        int stale = -1, stale_db = -1, fail = -1;
        for (int i = 0; i < n; i++) {
            if (reqs[i].rc) {
                if (fail < 0) fail = i;
                continue;
            }
            int code = rt_reply_status(&reqs[i].reply, NULL);
            if (code == MS_ERR_STALE_CONFIG && d->ns) {
                if (stale < 0) stale = i;
            } else if (code == MS_ERR_STALE_DB_VERSION) {
                if (stale_db < 0) stale_db = i;
            } else if (code && fail < 0) {
                fail = i;
            }
        }
        /* Done: every reply is in, or one failed (a failure is not retried). */
        if (fail >= 0 || (stale < 0 && stale_db < 0)) {
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
        if (stale_db >= 0) rt_note_stale_db(r, d->db, reqs[stale_db].shard, &reqs[stale_db].reply);
        if (stale >= 0) rt_note_stale(r, d->ns, reqs[stale].shard, &reqs[stale].reply);
        for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
        rc = rt_stale_settle(r, d->ns, t, stale >= 0, &rounds, err);
        rt_table_release(t);
        if (rc == RT_STALE_EXHAUSTED) {
            const char *what = d->what ? d->what : d->ns ? d->ns : d->db;
            if (d->ns)
                return err_set(err, MS_ERR_STALE_CONFIG,
                               "%s: shards kept answering StaleConfig or StaleDbVersion after "
                               "%d refreshes", what, MS_STALE_RETRIES_MAX);
            return err_set(err, MS_ERR_STALE_DB_VERSION,
                           "%s: primary kept answering StaleDbVersion", what);
        }
        if (rc) return rc;
    }
}
