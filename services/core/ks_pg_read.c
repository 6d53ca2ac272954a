/*
 * Reads (ks_pg_read): one alone, or several calls' in one round trip
 * (ks_pg.h, "Batched reads").
 *
 * A loop that runs short reads itself (ks_rpc_server.c) runs the calls one
 * pass of it read in three steps: each handler up to its read, which
 * ks_pg_read records here instead of sending (plan); the recorded reads,
 * each with its own Sync and so its own transaction, in one pipeline on one
 * connection (run); each handler again, whose read is now answered from
 * what the run returned (replay). A read whose statements in the replay
 * are not those planned (a parameter that moved) is sent as ever, and so
 * is a second read of a handler: the batch is a shortcut, never a
 * different answer.
 *
 * The state of the steps is the calling thread's: a handler planned or
 * replayed runs on the thread that set the step.
 */
#include "ks_pg.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"
#include "ks_pg_pipeline.h"

typedef struct recorded {
        ks_pg_stmt *stmts; /* their sql, params and expected_sqlstate owned; out: results[i] */
        PGresult **results;
        const char **names; /* prepared on the run's connection */
        int n;
        int code;      /* of the run */
        bool planned;  /* the call recorded its read */
        bool consumed; /* a replay took it */
} recorded;

struct ks_pg_batch {
        recorded *calls;
        int n_calls;
        ks_pg_batch_ready_fn ready; /* ks_pg_batch_on_ready */
        void *ready_ctx;
};

enum { STEP_OFF, STEP_PLAN, STEP_REPLAY };

static __thread struct {
        ks_pg_batch *b;
        int call;
        int step;
} tl;

int ks_pg_batch_new(ks_pg_batch **out, int n_calls)
{
        *out = NULL;
        if (n_calls < 1) {
                return KS_INVALID_ARGUMENT;
        }
        ks_pg_batch *b = calloc(1, sizeof(*b));
        if (b == NULL || (b->calls = calloc((size_t)n_calls, sizeof(recorded))) == NULL) {
                free(b);
                return KS_RESOURCE_EXHAUSTED;
        }
        b->n_calls = n_calls;
        *out = b;
        return KS_OK;
}

static void recorded_clear(recorded *r)
{
        for (int i = 0; i < r->n; i++) {
                ks_pg_stmt *s = &r->stmts[i];
                for (int k = 0; k < s->n_params; k++) {
                        free((char *)s->params[k]);
                }
                free((char **)s->params);
                free((char *)s->sql);
                free((char *)s->expected_sqlstate);
                PQclear(r->results[i]);
        }
        free(r->stmts);
        free(r->results);
        free(r->names);
        memset(r, 0, sizeof(*r));
}

void ks_pg_batch_free(ks_pg_batch *b)
{
        if (b == NULL) {
                return;
        }
        if (tl.b == b) {
                ks_pg_batch_off();
        }
        for (int i = 0; i < b->n_calls; i++) {
                recorded_clear(&b->calls[i]);
        }
        free(b->calls);
        free(b);
}

void ks_pg_batch_on_ready(ks_pg_batch *b, ks_pg_batch_ready_fn fn, void *ctx)
{
        b->ready = fn;
        b->ready_ctx = ctx;
}

static void step(ks_pg_batch *b, int call, int s)
{
        tl.b = b;
        tl.call = call;
        tl.step = b != NULL && call >= 0 && call < b->n_calls ? s : STEP_OFF;
        /* The handler's own connection is not used for a read the step takes. */
        ks_pg_spare_idle_check(tl.step != STEP_OFF);
}

void ks_pg_batch_plan(ks_pg_batch *b, int call)
{
        step(b, call, STEP_PLAN);
}

void ks_pg_batch_replay(ks_pg_batch *b, int call)
{
        step(b, call, STEP_REPLAY);
}

void ks_pg_batch_off(void)
{
        step(NULL, 0, STEP_OFF);
}

bool ks_pg_batch_active(void)
{
        return tl.step != STEP_OFF;
}

int ks_pg_batch_reads(const ks_pg_batch *b)
{
        int n = 0;
        for (int i = 0; i < b->n_calls; i++) {
                n += b->calls[i].planned;
        }
        return n;
}

static char *dup_or_null(const char *s, bool *ok)
{
        if (s == NULL) {
                return NULL;
        }
        char *d = strdup(s);
        *ok = *ok && d != NULL;
        return d;
}

/* The n statements of a read into r, copied; false when out of memory (r is cleared). */
static bool record(recorded *r, const ks_pg_stmt *stmts, int n)
{
        bool ok = (r->stmts = calloc((size_t)n, sizeof(*r->stmts))) != NULL &&
                  (r->results = calloc((size_t)n, sizeof(*r->results))) != NULL &&
                  (r->names = calloc((size_t)n, sizeof(*r->names))) != NULL;

        r->n = ok ? n : 0;
        for (int i = 0; ok && i < n; i++) {
                const ks_pg_stmt *s = &stmts[i];
                ks_pg_stmt *d = &r->stmts[i];
                d->n_params = s->n_params;
                d->unprepared = s->unprepared;
                d->sql = dup_or_null(s->sql, &ok);
                d->expected_sqlstate = dup_or_null(s->expected_sqlstate, &ok);
                d->out = &r->results[i];
                char **p = calloc((size_t)s->n_params + 1, sizeof(char *));
                d->params = (const char *const *)p;
                ok = ok && p != NULL;
                for (int k = 0; ok && k < s->n_params; k++) {
                        p[k] = dup_or_null(s->params[k], &ok);
                }
        }
        if (!ok) {
                recorded_clear(r);
        }
        return ok;
}

static bool same_text(const char *a, const char *b)
{
        return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool same_stmt(const ks_pg_stmt *rec, const ks_pg_stmt *s)
{
        if (s->args != NULL || rec->n_params != s->n_params || rec->unprepared != s->unprepared ||
            !same_text(rec->sql, s->sql) ||
            !same_text(rec->expected_sqlstate, s->expected_sqlstate)) {
                return false;
        }
        for (int k = 0; k < s->n_params; k++) {
                if (!same_text(rec->params[k], s->params[k])) {
                        return false;
                }
        }
        return true;
}

/* The run's results for the statements asked now, when they are the ones planned. */
static bool replay(recorded *r, const ks_pg_stmt *stmts, int n, int *code)
{
        if (!r->planned || r->consumed || r->n != n) {
                return false;
        }
        for (int i = 0; i < n; i++) {
                if (!same_stmt(&r->stmts[i], &stmts[i])) {
                        return false;
                }
        }
        r->consumed = true;
        for (int i = 0; i < n; i++) {
                if (stmts[i].out != NULL) {
                        *stmts[i].out = r->code == KS_OK ? r->results[i] : NULL;
                        r->results[i] = r->code == KS_OK ? NULL : r->results[i];
                }
        }
        *code = r->code;
        return true;
}

/* Whether the thread's step took this read (*code: KS_PG_DEFERRED, or the run's). */
static bool batch_take(const ks_pg_stmt *stmts, int n, int *code)
{
        if (tl.step == STEP_OFF) {
                return false;
        }
        recorded *r = &tl.b->calls[tl.call];
        if (tl.step == STEP_REPLAY) {
                return replay(r, stmts, n, code);
        }
        /* Planning: the first read of the call, in text parameters, is kept for the run. */
        if (r->planned) {
                return false;
        }
        for (int i = 0; i < n; i++) {
                if (stmts[i].args != NULL) {
                        return false;
                }
        }
        if (!record(r, stmts, n)) {
                return false; /* out of memory: the read runs now, as without a batch */
        }
        for (int i = 0; i < n; i++) {
                if (stmts[i].out != NULL) {
                        *stmts[i].out = NULL;
                }
        }
        r->planned = true;
        *code = KS_PG_DEFERRED;
        return true;
}

int ks_pg_batch_run(PGconn *c, const char *request_id, ks_pg_batch *b)
{
        int code = KS_OK;

        if (c == NULL || PQtransactionStatus(c) != PQTRANS_IDLE) {
                for (int i = 0; i < b->n_calls; i++) {
                        b->calls[i].code = KS_UNAVAILABLE;
                }
                return KS_UNAVAILABLE;
        }
        for (int i = 0; code == KS_OK && i < b->n_calls; i++) {
                recorded *r = &b->calls[i];
                for (int k = 0; r->planned && code == KS_OK && k < r->n; k++) {
                        code = ks_pg_pipeline_prepare(c, request_id, &r->stmts[k], &r->names[k]);
                }
        }
        if (code == KS_OK && PQenterPipelineMode(c) != 1) {
                code = ks_pg_failure(c, request_id, NULL);
        }
        bool sent_all = code == KS_OK;
        int sent = 0;
        for (int i = 0; sent_all && i < b->n_calls; i++) {
                recorded *r = &b->calls[i];
                for (int k = 0; r->planned && sent_all && k < r->n; k++) {
                        sent_all = ks_pg_pipeline_send(c, &r->stmts[k], r->names[k]) == 1;
                }
                sent_all = sent_all && (!r->planned || PQpipelineSync(c) == 1);
                sent += sent_all && r->planned;
        }
        if (code == KS_OK && !sent_all) {
                ks_pg_failure(c, request_id, NULL);
                code = KS_UNAVAILABLE; /* a send that failed: the pool resets the connection */
        }
        /* Each call's statements, then its Sync: a failure ends only that call's read. */
        for (int i = 0, done = 0; i < b->n_calls; i++) {
                recorded *r = &b->calls[i];
                if (!r->planned) {
                        continue;
                }
                r->code = done < sent ? KS_OK : (code != KS_OK ? code : KS_UNAVAILABLE);
                if (done++ >= sent) {
                        continue;
                }
                for (int k = 0; k < r->n; k++) {
                        r->code = ks_pg_pipeline_take(c, request_id, &r->stmts[k], r->code);
                }
                ks_pg_pipeline_sync(c);
                if (r->code != KS_OK) {
                        for (int k = 0; k < r->n; k++) {
                                PQclear(r->results[k]);
                                r->results[k] = NULL;
                        }
                }
                if (code == KS_OK && b->ready != NULL) {
                        b->ready(b->ready_ctx, b, i); /* the later reads run meanwhile */
                }
        }
        if (PQpipelineStatus(c) != PQ_PIPELINE_OFF && PQexitPipelineMode(c) != 1 && code == KS_OK) {
                code = KS_UNAVAILABLE; /* the pool resets the connection */
        }
        return code;
}

int ks_pg_read(PGconn *conn, const char *request_id, const ks_pg_stmt *first, int n_first,
               const ks_pg_stmt *reads, int n_reads)
{
        ks_pg_stmt s[KS_PG_PIPELINE_MAX];
        int code;

        if (conn == NULL || n_first < 0 || n_reads < 1 || n_first > KS_PG_PIPELINE_MAX - n_reads ||
            PQtransactionStatus(conn) != PQTRANS_IDLE) {
                return KS_INTERNAL;
        }
        for (int i = 0; i < n_first; i++) {
                s[i] = first[i];
        }
        for (int i = 0; i < n_reads; i++) {
                s[n_first + i] = reads[i];
        }
        if (batch_take(s, n_first + n_reads, &code)) {
                return code; /* recorded for a batch, or answered from one */
        }
        return ks_pg_pipeline(conn, request_id, s, n_first + n_reads);
}
