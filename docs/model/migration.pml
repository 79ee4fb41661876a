/* migration.pml — a Promela model of minishard's chunk migration protocol, checked by spin.
 *
 * Two shards, one chunk moving from S0 (the donor) to S1 (the recipient), a config server,
 * a range deleter and a refresher on each shard, one router shared by a single-document
 * writer, a multi-document writer and a reader, and a chaos process that crashes any of
 * them at most MAXCRASH times. Each step is named after the C function (and the failpoint)
 * it mirrors; docs/model/README.md walks through the model. The durable state (coordinator
 * document, range-deletion tasks, config.chunks, documents) survives a crash; everything
 * else is reset and the process takes its recovery path.
 *
 * Switches putting back defects minishard once had (each makes `pan` find a trail):
 *   -DBUG_STALE_REFRESH    recovery decides from a refresh that began before its fence
 *   -DBUG_ABORT_ACK_EARLY  the recipient acknowledges _recvChunkAbort before its task is ready
 *   -DBUG_ABORT_BEFORE_START  an abort reaching the recipient before its start is forgotten
 *   -DBUG_MULTI_ACROSS_COMMIT the router retries a multi-write on "owners now minus answered"
 */

#ifndef MAXCRASH
#define MAXCRASH 2
#endif
#ifndef MAXNET
#define MAXNET 1          /* network faults the donor may see (start held, commit reply lost) */
#endif

/* ---- names ------------------------------------------------------------------------------ */
#define S0 0              /* donor: owns K1's chunk before the move */
#define S1 1              /* recipient: owns K0's chunk throughout */
#define K0 0              /* a key outside the moving chunk */
#define K1 1              /* the moving chunk's key */
#define NONE 7            /* a document that is not there */
#define UNK 3             /* filtering metadata unknown (after a start or an invalidation) */

/* Routing table versions (config.chunks): 0 before, 1 committed (K1 on S1),
 * 2 fenced by _configsvrEnsureChunkVersionIsGreaterThan (K1 still on S0, major bumped). */
#define OWNER(t)   ((t) == 1 -> S1 : S0)
/* A shard's version: S0's changes with both the commit and the fence; S1's only with the
 * commit (the fence bumps a chunk S1 does not own). Equal shard versions = same chunks. */
#define SV(s, t)   ((s) == S0 -> (t) : ((t) == 1 -> 1 : 0))
#define NEWER(a, b) ((a) != 0 && (b) == 0)
/* Keys shard s owns in table t, as a bit mask (bit k = key k). */
#define OWNED(s, t) ((s) == S1 -> (1 + ((t) == 1 -> 2 : 0)) : ((t) == 1 -> 0 : 2))

mtype = { START, COMMIT, ABORT, RELEASE,                       /* donor -> recipient */
          START_OK, START_REFUSED, COMMIT_OK, COMMIT_FAIL, ABORT_ACK, RELEASE_ACK };

/* coordinator document (config.migrationCoordinators on the donor) */
#define C_NONE 0
#define C_UNDECIDED 1
#define C_COMMITTED 2
#define C_ABORTED 3
/* range-deletion task (config.rangeDeletions) */
#define T_NONE 0
#define T_PENDING 1
#define T_READY 2
/* recipient thread state (mig_recipient.c rstate) */
#define R_NONE 0
#define R_READY 1
#define R_CLONE 2
#define R_CATCHUP 3
#define R_STEADY 4
#define R_DONE 5
#define R_FAIL 6
/* client operation status */
#define OP_RUNNING 0
#define OP_ACKED 1
#define OP_ABANDONED 2

/* ---- durable state ---------------------------------------------------------------------- */
byte cfg_tv = 0;                  /* config.chunks: the table's version (see OWNER) */
byte coord = C_NONE;              /* donor's coordinator document */
byte dtask = T_NONE;              /* donor's range-deletion task */
byte rtask = T_NONE;              /* recipient's range-deletion task */
byte val[4];                      /* val[2*s+k]: $inc count of key k's document on shard s */
#define VAL(s, k) val[2 * (s) + (k)]

/* ---- volatile state (lost by a crash of its process) ------------------------------------ */
byte md[2];                       /* shv: filtering metadata (a table version or UNK) */
bool crit;                        /* shv_crit_enter on the donor: writes blocked */
bool block_reads;                 /* shv_crit_block_reads: versioned reads blocked too */
bool capture;                     /* mig_cloner.c write capture running */
bool mods;                        /* captured writes not yet transferred */
bool rf_inflight[2];              /* refresh_ns running: fetched rf_snap, not yet installed */
byte rf_snap[2];
bool rf_valid[2];                 /* no invalidation since it began (e->invalidations) */
byte rstate = R_NONE;             /* recipient's migrate thread */
bool abort_req;                   /* recipient: _recvChunkAbort arrived for the running receive */
bool abort_reply;                 /* recipient: an abort acknowledgement is owed */
bool remembered_abort;            /* mig_remember_abort: an abort seen before its start */
byte rc = 0;                      /* the router's cached routing table version */

/* incarnations: bumped by a crash, so waiters see their peer restarted */
byte dinc, rinc, cinc, rtinc;
byte crashes, netfaults;
bool dcrash;                      /* the donor's crash is pending its restart path */
bool donor_idle;                  /* ghost: the donor's thread (or its recovery) has ended */
byte cfg_res;                     /* reply to _configsvrCommitChunkMigration: 0 none, 1 ok, 2 refused */

/* clients' bookkeeping: napplied[2*w+k] = times write w was applied to key k */
byte napplied[4];
byte opst[3];                     /* status of W1 (single), W2 (multi), the reader */
#define W1 0
#define W2 1
#define RD 2

chan start_ch = [1] of { mtype };            /* _recvChunkStart travels on its own connection */
chan to_rcv = [2] of { mtype };              /* the donor's other requests to the recipient */
chan to_don = [3] of { mtype };              /* the recipient's replies */
chan cfg_req = [1] of { mtype };             /* _configsvrCommitChunkMigration in flight */

/* ---- properties ------------------------------------------------------------------------- */
/* A shard accepts writes for K1: it knows its metadata, it owns K1 there, and no critical
 * section blocks writes (only the donor ever holds one). */
#define ACCEPTS(s) (md[s] != UNK && (OWNED(s, md[s]) & 2) != 0 && !((s) == S0 && crit))

#define QUIET (donor_idle && coord == C_NONE && dtask == T_NONE && rtask == T_NONE && !crit && \
               rstate == R_NONE && opst[W1] != OP_RUNNING && opst[W2] != OP_RUNNING && \
               opst[RD] != OP_RUNNING && len(start_ch) == 0 && len(cfg_req) == 0)

ltl quiet_eventually { <> QUIET }

/* P1: at every instant at most one shard accepts writes for the moving key. */
proctype one_owner() {
end_watch:
    atomic { (ACCEPTS(S0) && ACCEPTS(S1)) -> assert(false) }
}

/* P2: once quiet, no acknowledged write lost or applied twice, no orphan left. */
proctype quiet_check() {
end_watch:
    atomic {
        QUIET ->
        assert(VAL(OWNER(cfg_tv), K1) == napplied[2 * W1 + K1] + napplied[2 * W2 + K1]);
        assert(VAL(S1, K0) == napplied[2 * W2 + K0]);
        assert(VAL(1 - OWNER(cfg_tv), K1) == NONE);
        assert(opst[W1] != OP_ACKED || napplied[2 * W1 + K1] == 1);
        assert(opst[W2] != OP_ACKED || (napplied[2 * W2 + K0] == 1 && napplied[2 * W2 + K1] == 1));
        assert(napplied[2 * W1 + K1] <= 1 && napplied[2 * W2 + K0] <= 1 && napplied[2 * W2 + K1] <= 1)
    }
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* A reply from the recipient; the channel is sized so that it never overflows. */
#define REPLY(x) assert(len(to_don) < 3); to_don!x

/* Empty a channel: a crash loses what was in flight on its connections; a new request
 * never reads the answer to one its sender stopped waiting for. */
#define FLUSH(c) do :: nempty(c) -> c?_ :: empty(c) -> break od

/* Shard s answered "your version is older than mine" or "mine is older": when the router's
 * is newer, the shard forgets its metadata and refreshes (shv_invalidate). */
#define STALE_SIDE(s, rv) if :: NEWER(rv, md[s]) -> md[s] = UNK; rf_valid[s] = false :: else -> skip fi

/* The router's cache: empty after its restart, loaded from the config server on use. */
#define ROUTER_TABLE(rv) if :: rc == UNK -> rc = cfg_tv :: else -> skip fi; rv = rc

/* ---- the donor shard: mig_donor.c donor_run, mig_coord.c recover_main -------------------- */

/* Wait for one reply type on to_don, dropping stale replies of earlier requests; a restart
 * of the recipient (its incarnation changed) is a network error. */
inline await_reply(want) {
    got = false;
    do
    :: to_don?m -> if :: m == want -> got = true; break :: else -> skip fi
    :: rinc != myrinc -> break
    od
}

/* mig_coord_decide: the fence (_configsvrEnsureChunkVersionIsGreaterThan), then the owner
 * of the range in a table fetched after the fence (fetch_owner), then shv_invalidate. */
inline mig_coord_decide() {
    atomic { if :: cfg_tv == 0 -> cfg_tv = 2 :: else -> skip fi };
    atomic {
#ifdef BUG_STALE_REFRESH
        /* the old code: joined the shard's refresh in flight, whatever it had fetched */
        if
        :: rf_inflight[S0] -> decided_commit = (OWNER(rf_snap[S0]) == S1)
        :: else -> decided_commit = (OWNER(cfg_tv) == S1)
        fi;
#else
        decided_commit = (OWNER(cfg_tv) == S1);
#endif
        md[S0] = UNK; rf_valid[S0] = false
    }
}

/* mig_coord_complete: decision persisted (aborted: our task deleted with it), the
 * recipient told (notify_recipient, retried until it answers), then in one transaction
 * the task made ready (committed) and the coordinator document deleted. */
inline mig_coord_complete() {
    if
    :: decided_commit -> coord = C_COMMITTED
    :: else -> atomic { coord = C_ABORTED; dtask = T_NONE }
    fi;
    do
    :: myrinc = rinc;
       (len(to_rcv) < 2 || rinc != myrinc);
       if
       :: rinc == myrinc && decided_commit -> FLUSH(to_don); to_rcv!RELEASE; await_reply(RELEASE_ACK)
       :: rinc == myrinc && !decided_commit -> FLUSH(to_don); to_rcv!ABORT; await_reply(ABORT_ACK)
       :: else -> got = false
       fi;
       if :: got -> break :: else -> skip fi
    od;
    atomic { if :: decided_commit -> dtask = T_READY :: else -> skip fi; coord = C_NONE }
}

proctype donor() {
    mtype m;
    bool got, decided_commit, first = true;
    byte myrinc, mycinc;

restart:
    {
        if
        :: first -> first = false;
           /* step_checks (moveChunkHangAtStep1): refresh; nothing persisted yet */
           atomic { md[S0] = cfg_tv; (OWNER(cfg_tv) == S0) };   /* always: nothing moved it */
           /* step_start_clone (moveChunkHangAtStep2): the capture first, then the
            * coordinator document and the pending task in one transaction, then
            * _recvChunkStart */
           atomic { capture = true; mods = false; coord = C_UNDECIDED; dtask = T_PENDING };
           atomic { myrinc = rinc; start_ch!START };
           do
           :: to_don?m ->
              if
              :: m == START_OK -> break
              :: m == START_REFUSED -> goto abort
              :: else -> skip
              fi
           :: rinc != myrinc -> goto abort
           :: atomic { netfaults < MAXNET -> netfaults++ } -> goto abort  /* start held past 20 s */
           od;
           /* step_catch_up (moveChunkHangAtStep3): _recvChunkStatus until steady */
           if
           :: rstate == R_STEADY && rinc == myrinc -> skip
           :: rstate == R_FAIL || rinc != myrinc -> goto abort
           fi;
           /* shv_crit_enter (moveChunkHangAtStep4) */
           crit = true;
           /* step_commit_recipient (moveChunkHangAtStep5): _recvChunkCommit + digest */
           (len(to_rcv) < 2 || rinc != myrinc);
           if :: rinc != myrinc -> goto abort :: else -> FLUSH(to_don); to_rcv!COMMIT fi;
           do
           :: to_don?m ->
              if
              :: m == COMMIT_OK -> break
              :: m == COMMIT_FAIL -> goto abort
              :: else -> skip
              fi
           :: rinc != myrinc -> goto abort
           od;
           if :: VAL(S0, K1) != VAL(S1, K1) -> goto abort :: else -> skip fi;
           /* step_commit_config (moveChunkHangAtStep6): blockReads, then
            * _configsvrCommitChunkMigration (hangBeforeCommitMigration on the config server) */
           atomic { block_reads = true; cfg_res = 0; mycinc = cinc; cfg_req!COMMIT };
           if
           :: cfg_res == 1 -> cfg_res = 0; decided_commit = true
           :: cfg_res == 2 -> cfg_res = 0; goto abort
           :: cinc != mycinc -> mig_coord_decide()                   /* outcome unknown */
           :: atomic { netfaults < MAXNET -> netfaults++ } ->
              mig_coord_decide()                                    /* migrationCommitNetworkError */
           fi;
           if :: !decided_commit -> goto abort :: else -> skip fi;
           /* committed: decision persisted, shv_refresh, then the section is left
            * (hangBeforeLeavingCriticalSection) */
           coord = C_COMMITTED;
           atomic { md[S0] = cfg_tv; rf_valid[S0] = false;
                    crit = false; block_reads = false; capture = false };
           mig_coord_complete();
           goto idle;
abort:
           /* before the commit: aborted, the section left, the recipient told */
           atomic { decided_commit = false; crit = false; block_reads = false; capture = false };
           mig_coord_complete()
        :: !first ->
           /* mig_donor_recover_all -> recover_main (hangBeforeMigrationRecovery). An
            * undecided document had the section entered at start (see chaos). */
           if
           :: coord == C_NONE -> skip
           :: coord == C_UNDECIDED ->
              mig_coord_decide();
              coord = (decided_commit -> C_COMMITTED : C_ABORTED);
              atomic { crit = false; block_reads = false };            /* shv_crit_leave_as */
              mig_coord_complete()
           :: coord == C_COMMITTED -> decided_commit = true; mig_coord_complete()
           :: coord == C_ABORTED -> decided_commit = false; mig_coord_complete()
           fi
        fi;
idle:
        donor_idle = true;
end_idle:
        (dcrash)
    } unless { dcrash };
    /* kill -9: chaos reset the volatile state; start again on the recovery path */
    atomic { dcrash = false; donor_idle = false; got = false; decided_commit = false };
    goto restart
}

/* ---- the recipient shard: mig_recipient.c --------------------------------------------- */

proctype recipient() {
    byte rcv_dinc;
end_loop:
    do
    /* cmd_recv_chunk_start (hangBeforeRecvChunkStart) */
    :: atomic { start_ch?START ->
           if
#ifndef BUG_ABORT_BEFORE_START
           :: remembered_abort -> REPLY(START_REFUSED)
#endif
           :: else -> rstate = R_READY; abort_req = false; abort_reply = false;
              rcv_dinc = dinc; REPLY(START_OK)
           fi }
    /* recv_main, ready: the pending task persisted before any copy (migrateThreadHangAtStep1) */
    :: atomic { rstate == R_READY -> if :: abort_req -> rstate = R_FAIL
                                       :: else -> rtask = T_PENDING; rstate = R_CLONE fi }
    /* clone: _migrateClone from the donor (migrateThreadHangAtStep2) */
    :: atomic { rstate == R_CLONE && !abort_req && capture && dinc == rcv_dinc ->
           VAL(S1, K1) = VAL(S0, K1); mods = false; rstate = R_CATCHUP }
    /* catchup / steady: _transferMods rounds until one is empty (migrateThreadHangAtStep3/4) */
    :: atomic { (rstate == R_CATCHUP || rstate == R_STEADY) && mods && !abort_req && capture &&
                dinc == rcv_dinc -> VAL(S1, K1) = VAL(S0, K1); mods = false }
    :: atomic { rstate == R_CATCHUP && !mods && !abort_req && capture && dinc == rcv_dinc ->
           rstate = R_STEADY }
    /* fail: the donor's migration is gone (its capture ended), or an abort arrived */
    :: atomic { (rstate == R_CLONE || rstate == R_CATCHUP || rstate == R_STEADY) &&
                (abort_req || !capture || dinc != rcv_dinc) -> rstate = R_FAIL }
    :: atomic { rstate == R_DONE && abort_req -> rstate = R_FAIL }
    /* cmd_recv_chunk_commit: final drain under the donor's section, then done */
    :: atomic { to_rcv?COMMIT ->
           if
           :: rstate == R_STEADY && capture && dinc == rcv_dinc ->
              VAL(S1, K1) = VAL(S0, K1); mods = false; rstate = R_DONE; REPLY(COMMIT_OK)
           :: else -> REPLY(COMMIT_FAIL)
           fi }
    /* cmd_recv_chunk_abort */
    :: atomic { to_rcv?ABORT ->
           if
           :: rstate != R_NONE -> abort_req = true;
#ifdef BUG_ABORT_ACK_EARLY
              REPLY(ABORT_ACK)         /* the old code: answered before the task was ready */
#else
              abort_reply = true       /* answered once the thread stopped and the task is ready */
#endif
           :: else ->
#ifndef BUG_ABORT_BEFORE_START
              remembered_abort = true;                                   /* mig_remember_abort */
#endif
              if :: rtask == T_PENDING -> rtask = T_READY :: else -> skip fi;
              REPLY(ABORT_ACK)
           fi }
    /* the thread ends after an abort (migrateThreadHangAtStep7): mig_recv_task_ready, and
     * the abort's answer if still owed */
    :: atomic { rstate == R_FAIL && abort_req ->
           if :: rtask == T_PENDING -> rtask = T_READY :: else -> skip fi;
           if :: abort_reply -> REPLY(ABORT_ACK) :: else -> skip fi;
           abort_reply = false; abort_req = false; rstate = R_NONE }
    /* cmd_recv_chunk_release: committed, the range is ours, the pending task goes */
    :: atomic { to_rcv?RELEASE ->
           if :: rtask == T_PENDING -> rtask = T_NONE :: else -> skip fi;
           rstate = R_NONE; abort_req = false; abort_reply = false; REPLY(RELEASE_ACK) }
    od
}

/* ---- the config server: cat_migrate.c ---------------------------------------------------- */

proctype config() {
end_loop:
    do
    /* _configsvrCommitChunkMigration: one transaction; refused unless the chunk is still
     * the donor's at the version the migration started from (not fenced, not moved) */
    :: atomic { cfg_req?COMMIT -> if :: cfg_tv == 0 -> cfg_tv = 1; cfg_res = 1
                                     :: else -> cfg_res = 2 fi }
    od
}

/* ---- each shard's refresher (shardver.c refresh_ns) and range deleter (rdel.c) -------- */

proctype background() {
end_loop:
    do
    /* refresh_ns: fetch the table ... (hangRefreshBeforeInstall) ... install it unless an
     * invalidation came in between */
    :: atomic { md[S0] == UNK && !rf_inflight[S0] ->
           rf_inflight[S0] = true; rf_snap[S0] = cfg_tv; rf_valid[S0] = true }
    :: atomic { rf_inflight[S0] -> if :: rf_valid[S0] -> md[S0] = rf_snap[S0] :: else -> skip fi;
           rf_inflight[S0] = false; rf_snap[S0] = 0; rf_valid[S0] = false }
    :: atomic { md[S1] == UNK && !rf_inflight[S1] ->
           rf_inflight[S1] = true; rf_snap[S1] = cfg_tv; rf_valid[S1] = true }
    :: atomic { rf_inflight[S1] -> if :: rf_valid[S1] -> md[S1] = rf_snap[S1] :: else -> skip fi;
           rf_inflight[S1] = false; rf_snap[S1] = 0; rf_valid[S1] = false }
    /* run_task after ownership_guard (suspendRangeDeletion): a ready task of a range the
     * shard does not own deletes the documents, then the task (finish_task) */
    :: atomic { dtask == T_READY && md[S0] != UNK && (OWNED(S0, md[S0]) & 2) == 0 ->
           VAL(S0, K1) = NONE; dtask = T_NONE }
    :: atomic { rtask == T_READY && md[S1] != UNK && (OWNED(S1, md[S1]) & 2) == 0 ->
           VAL(S1, K1) = NONE; rtask = T_NONE }
    od
}

#define ROUTER_BUSY (opst[W1] == OP_RUNNING || opst[W2] == OP_RUNNING || opst[RD] == OP_RUNNING)

/* ---- chaos: kill -9 of a process at any step, at most MAXCRASH times --------------------- */

proctype chaos() {
end_loop:
    do
    :: crashes < MAXCRASH ->
       atomic {
           crashes++;
           if
           :: !dcrash ->                /* the donor shard */
              md[S0] = UNK; rf_inflight[S0] = false; capture = false; mods = false;
              crit = (coord == C_UNDECIDED); block_reads = false;
              FLUSH(to_don); dinc++; dcrash = true
           ::                           /* the recipient shard */
              md[S1] = UNK; rf_inflight[S1] = false; rstate = R_NONE; abort_req = false;
              abort_reply = false; remembered_abort = false;
              FLUSH(start_ch); FLUSH(to_rcv); rinc++
           :: len(cfg_req) > 0 ->       /* the config server, a commit in flight (a crash
                                         * with nothing in flight changes nothing) */
              FLUSH(cfg_req); cinc++
           :: ROUTER_BUSY ->            /* the router, while a client uses it */
              rc = UNK; rtinc++
           fi
       }
    :: break
    od
}

/* ---- clients through the router: rt_write.c, rt_find ------------------------------------- */

/* updateOne {k: K1} {$inc}: targeted by shard key; on StaleConfig the router refreshes. */
proctype writer1() {
    byte rv, s, myinc = rtinc;
    bool ok;
    {
        do
        :: /* the router picks the owner from its cached table; the shard checks the
            * version, the critical section and writes in one transaction (shv_recheck
            * under the writer lock; hangBeforeWriteCommit) */
           atomic { ROUTER_TABLE(rv); s = OWNER(rv);
               (md[s] != UNK && !(s == S0 && crit)) ->
               if
               :: SV(s, md[s]) == SV(s, rv) ->
                  if
                  :: VAL(s, K1) != NONE -> VAL(s, K1)++; napplied[2 * W1 + K1]++;
                     if :: s == S0 && capture -> mods = true :: else -> skip fi
                  :: else -> skip       /* nothing matched: n: 0 */
                  fi;
                  opst[W1] = OP_ACKED; ok = true
               :: else -> ok = false; STALE_SIDE(s, rv); rc = cfg_tv   /* StaleConfig: refresh */
               fi };
           if :: ok -> break :: else -> skip fi
        od
    } unless { rtinc != myinc };
    if :: opst[W1] != OP_ACKED -> opst[W1] = OP_ABANDONED :: else -> skip fi
}

/* One shard's part of updateMany {} {$inc} over both keys at the router's version rv. */
inline multi_on_shard(s) {
    atomic { (md[s] != UNK && !(s == S0 && crit)) ->
        if
        :: SV(s, md[s]) == SV(s, rv) ->
#ifdef BUG_MULTI_ACROSS_COMMIT
           keys = OWNED(s, rv); answered = answered | (1 << s);  /* the old retry: unnarrowed */
#else
           keys = OWNED(s, rv) & pending;                       /* $_shardKeyRanges */
#endif
           if
           :: (keys & 1) && VAL(s, K0) != NONE -> VAL(s, K0)++; napplied[2 * W2 + K0]++
           :: else -> skip
           fi;
           if
           :: (keys & 2) && VAL(s, K1) != NONE -> VAL(s, K1)++; napplied[2 * W2 + K1]++;
              if :: s == S0 && capture -> mods = true :: else -> skip fi
           :: else -> skip
           fi;
           pending = pending & ~keys
        :: else -> stale = true; STALE_SIDE(s, rv); rc = cfg_tv     /* StaleConfig: refresh */
        fi;
        todo = todo & ~(1 << s) }
}

/* updateMany {} {$inc}: every document exactly once (versioning-and-routing.md "Multi-document
 * writes across a migration"): a shard applies only at the router's version; a stale shard's
 * old ranges are retried at their new owners, narrowed. */
proctype writer2() {
    byte rv, todo, keys, answered, pending = 3, myinc = rtinc;
    bool stale;
    {
        do
        :: atomic {
               ROUTER_TABLE(rv); todo = 0; stale = false;
#ifdef BUG_MULTI_ACROSS_COMMIT
               /* the old code: shards owning chunks now, minus those that answered */
               if :: OWNED(S0, rv) != 0 && (answered & 1) == 0 -> todo = todo | 1 :: else -> skip fi;
               if :: OWNED(S1, rv) != 0 && (answered & 2) == 0 -> todo = todo | 2 :: else -> skip fi
#else
               if :: (OWNED(S0, rv) & pending) != 0 -> todo = todo | 1 :: else -> skip fi;
               if :: (OWNED(S1, rv) & pending) != 0 -> todo = todo | 2 :: else -> skip fi
#endif
           };
           do
           :: todo == 0 -> break
           :: (todo & 1) -> multi_on_shard(S0)
           :: (todo & 2) -> multi_on_shard(S1)
           od;
#ifdef BUG_MULTI_ACROSS_COMMIT
           if :: !stale -> opst[W2] = OP_ACKED; break :: else -> skip fi
#else
           if :: pending == 0 -> opst[W2] = OP_ACKED; break :: else -> skip fi
#endif
        od
    } unless { rtinc != myinc };
    if :: opst[W2] != OP_ACKED -> opst[W2] = OP_ABANDONED :: else -> skip fi
}

/* One shard's part of find {}: versioned, filtered by ownership at its metadata (orphans
 * and documents still being cloned in are skipped); waits while reads are blocked. */
inline read_on_shard(s) {
    atomic { (md[s] != UNK && !(s == S0 && block_reads)) ->
        if
        :: SV(s, md[s]) == SV(s, rv) ->
           if :: (OWNED(s, md[s]) & 1) && VAL(s, K0) != NONE -> n0++ :: else -> skip fi;
           if :: (OWNED(s, md[s]) & 2) && VAL(s, K1) != NONE -> n1++ :: else -> skip fi
        :: else -> stale = true; STALE_SIDE(s, rv); rc = cfg_tv     /* StaleConfig: refresh */
        fi;
        todo = todo & ~(1 << s) }
}

/* find {} over the collection: on StaleConfig from any shard the router refreshes and runs
 * the whole query again. P3: every document exactly once. */
proctype reader() {
    byte rv, todo, n0, n1, myinc = rtinc;
    bool stale;
    {
        do
        :: atomic {
               ROUTER_TABLE(rv); n0 = 0; n1 = 0; stale = false; todo = 0;
               if :: OWNED(S0, rv) != 0 -> todo = todo | 1 :: else -> skip fi;
               if :: OWNED(S1, rv) != 0 -> todo = todo | 2 :: else -> skip fi
           };
           do
           :: todo == 0 -> break
           :: (todo & 1) -> read_on_shard(S0)
           :: (todo & 2) -> read_on_shard(S1)
           od;
           if :: !stale -> break :: else -> skip fi
        od;
        assert(n0 == 1 && n1 == 1);
        opst[RD] = OP_ACKED
    } unless { rtinc != myinc };
    if :: opst[RD] != OP_ACKED -> opst[RD] = OP_ABANDONED :: else -> skip fi
}

init {
    atomic {
        VAL(S0, K0) = NONE; VAL(S0, K1) = 0; VAL(S1, K0) = 0; VAL(S1, K1) = NONE;
        md[S0] = 0; md[S1] = 0;
        run one_owner(); run quiet_check();
        run donor(); run recipient(); run config(); run background(); run chaos();
#ifndef NO_W1
        run writer1();
#else
        opst[W1] = OP_ABANDONED;
#endif
#ifndef NO_W2
        run writer2();
#else
        opst[W2] = OP_ABANDONED;
#endif
#ifndef NO_RD
        run reader()
#else
        opst[RD] = OP_ABANDONED
#endif
    }
}
