/*
 * The scheduler: a ks_ticker in every replica that runs what falls due for
 * subscriptions on real time (trial ends, renewals, cancellations at period
 * end, dunning retries: lifecycle.c), and prunes idempotency keys older
 * than a day.
 *
 * Any number of replicas run it at once, safely. A pass first finds due
 * subscriptions across tenants as keelson_billing_worker (it may read only
 * their ids, tenant, clock and next action), then acts for each in a
 * transaction of its tenant as keelson_billing_rt, taking the
 * subscription's row with FOR UPDATE SKIP LOCKED: a row another replica
 * holds is skipped, and the one that holds it sees it due no more when it
 * is done. Even so, the unique key on (subscription, period start) of
 * creation and renewal invoices would refuse a second invoice for a period
 * (invoices_one_per_period): no period is invoiced twice.
 *
 * It catches up after downtime: each action happens at the time it fell
 * due, so a replica started after three missed months makes the three
 * renewals in order, each dated as it would have been.
 *
 * A subscription whose step fails (a bug, a row the step cannot take) is
 * left out of this replica's scans for a while (a backoff from 1 s doubling
 * to a minute, at most SKIP_MAX of them remembered), so that it cannot hold
 * the head of the due list and starve the others; its due time stays what it
 * is, so the action, once it succeeds, is still dated when it fell due.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"
#include "ks_ticker.h"

#define STEPS_PER_TX    32 /* actions of one subscription per transaction */
#define SKIP_MAX        256
#define SKIP_FIRST_MS   1000
#define SKIP_LONGEST_MS 60000
#define PRUNE_EVERY_MS  60000
#define PRUNE_BATCH     1000

/* A subscription whose step failed, and when this replica tries it again. */
typedef struct skipped {
        char id[BL_UUID_LEN + 1];
        int64_t until_ms, backoff_ms;
} skipped;

struct bl_scheduler {
        bl_service *svc;
        ks_ticker *ticker;
        int64_t pruned_at_ms;
        ks_counter *actions, *failures;
        skipped skip[SKIP_MAX];
        int n_skip;
};

static const char sql_due[] =
    "SELECT tenant_id, id FROM billing.subscriptions WHERE test_clock_id IS NULL"
    " AND next_action_ms <= $1::int8 AND NOT (id = ANY($3::uuid[]))"
    " ORDER BY next_action_ms LIMIT $2::int4";

/*
 * The ids to leave out now, as an array literal (the ticker's thread alone
 * uses it). An entry whose wait ended a minute ago and that failed no more
 * since (it succeeded elsewhere, or is due no more) is forgotten.
 */
static void skip_list(bl_scheduler *sc, int64_t now, bl_arr *out)
{
        for (int i = 0; i < sc->n_skip;) {
                if (sc->skip[i].until_ms + SKIP_LONGEST_MS < now) {
                        sc->skip[i] = sc->skip[--sc->n_skip];
                        continue;
                }
                if (sc->skip[i].until_ms > now) {
                        bl_arr_text(out, sc->skip[i].id);
                }
                i++;
        }
}

/* A failure: the subscription waits, longer each time; forgotten when it next succeeds. */
static void skip_add(bl_scheduler *sc, const char *id, int64_t now)
{
        skipped *e = NULL;

        for (int i = 0; i < sc->n_skip && e == NULL; i++) {
                e = strcmp(sc->skip[i].id, id) == 0 ? &sc->skip[i] : NULL;
        }
        if (e == NULL) {
                if (sc->n_skip == SKIP_MAX) {
                        return; /* the ones held stay; a full list only costs the newest */
                }
                e = &sc->skip[sc->n_skip++];
                snprintf(e->id, sizeof(e->id), "%s", id);
                e->backoff_ms = SKIP_FIRST_MS / 2;
        }
        e->backoff_ms = e->backoff_ms * 2 > SKIP_LONGEST_MS ? SKIP_LONGEST_MS : e->backoff_ms * 2;
        e->until_ms = now + e->backoff_ms;
}

static void skip_forget(bl_scheduler *sc, const char *id)
{
        for (int i = 0; i < sc->n_skip; i++) {
                if (strcmp(sc->skip[i].id, id) == 0) {
                        sc->skip[i] = sc->skip[--sc->n_skip];
                        return;
                }
        }
}

static const char sql_claim[] = "SELECT 1 FROM billing.subscriptions"
                                " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
                                " FOR UPDATE SKIP LOCKED";

static const char sql_prune[] =
    "DELETE FROM billing.idempotency_keys WHERE (tenant_id, key) IN (SELECT tenant_id, key FROM"
    " billing.idempotency_keys WHERE created_ms < $1::int8 LIMIT $2::int4)";

/* Statements run as the worker role, in a transaction of their own. */
static int as_worker(bl_service *svc, const char *sql, int n, const char *const *params,
                     PGresult **out)
{
        PGconn *conn = NULL;
        int rc;

        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        const ks_pg_stmt s[4] = {{.sql = "BEGIN"},
                                 {.sql = "SET LOCAL ROLE keelson_billing_worker"},
                                 {.sql = sql, .n_params = n, .params = params, .out = out},
                                 {.sql = "COMMIT"}};
        if ((rc = ks_pg_pipeline(conn, "scheduler", s, 4)) != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        return rc;
}

typedef struct due_job {
        const char *id;
        int64_t now;
        int actions;
} due_job;

static int due_tx(bl_tx *tx, void *arg)
{
        due_job *j = arg;
        const char *p[1] = {j->id};
        PGresult *res = NULL;
        bl_subscription s;
        bool ran = true;
        int rc;

        if ((rc = bl_exec(tx, sql_claim, 1, p, &res)) != KS_OK) {
                return rc;
        }
        bool mine = PQntuples(res) == 1; /* another replica holds it: its to do */
        PQclear(res);
        if (!mine || (rc = bl_sub_load(tx, j->id, true, &s)) != KS_OK) {
                return mine ? rc : KS_OK;
        }
        for (int i = 0; ran && i < STEPS_PER_TX; i++) {
                if ((rc = bl_sub_step(tx, &s, j->now, &ran)) != KS_OK) {
                        return rc;
                }
                j->actions += ran;
        }
        return KS_OK;
}

/* One pass: what is due now, each in its tenant's transaction. Returns the subscriptions seen. */
static int run_due(bl_scheduler *sc, int64_t now)
{
        bl_service *svc = sc->svc;
        ks_pg_num t = ks_pg_num_of(now), lim = ks_pg_num_of(svc->cfg->scheduler_batch_max);
        bl_arr skip = {0};
        PGresult *res = NULL;
        int n, rc;

        skip_list(sc, now, &skip);
        const char *p[3] = {t.s, lim.s, bl_arr_done(&skip)};
        rc = p[2] != NULL ? as_worker(svc, sql_due, 3, p, &res) : KS_RESOURCE_EXHAUSTED;
        bl_arr_free(&skip);
        if (rc != KS_OK) {
                ks_counter_inc(sc->failures);
                return 0;
        }
        n = PQntuples(res);
        for (int i = 0; i < n; i++) {
                due_job j = {.id = PQgetvalue(res, i, 1), .now = now};
                if ((rc = bl_tx_run_as(svc, "scheduler", PQgetvalue(res, i, 0), due_tx, &j)) !=
                    KS_OK) {
                        ks_counter_inc(sc->failures);
                        skip_add(sc, j.id, now);
                        ks_log_warn("scheduler", "a due subscription failed; retried later",
                                    "{s:s, s:s, s:s}", "tenant_id", PQgetvalue(res, i, 0),
                                    "subscription_id", j.id, "code", ks_code_name(rc));
                        continue;
                }
                skip_forget(sc, j.id);
                ks_counter_add(sc->actions, (uint64_t)j.actions);
        }
        PQclear(res);
        return n;
}

static void prune(bl_scheduler *sc, int64_t now)
{
        ks_pg_num before = ks_pg_num_of(now - BL_IDEMPOTENCY_TTL_MS),
                  lim = ks_pg_num_of(PRUNE_BATCH);
        const char *p[2] = {before.s, lim.s};

        if (now - sc->pruned_at_ms < PRUNE_EVERY_MS) {
                return;
        }
        sc->pruned_at_ms = now;
        if (as_worker(sc->svc, sql_prune, 2, p, NULL) != KS_OK) {
                ks_counter_inc(sc->failures);
        }
}

static ks_ticker_next step(void *arg)
{
        bl_scheduler *sc = arg;
        int64_t now = ks_now_ms();
        int seen = run_due(sc, now);

        prune(sc, now);
        return seen >= sc->svc->cfg->scheduler_batch_max ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

int bl_scheduler_start(bl_scheduler **out, bl_service *svc)
{
        bl_scheduler *sc = calloc(1, sizeof(*sc));
        ks_metrics *reg = ks_metrics_default();

        *out = NULL;
        if (sc == NULL) {
                return KS_INTERNAL;
        }
        sc->svc = svc;
        sc->actions = ks_counter_get(reg, "keelson_billing_scheduler_actions_total",
                                     "Renewals, trial ends, cancellations and dunning retries run"
                                     " by the scheduler",
                                     NULL);
        sc->failures =
            ks_counter_get(reg, "keelson_billing_scheduler_failures_total",
                           "Scheduler passes or subscriptions that failed (retried)", NULL);
        ks_ticker_options o = {.name = "billing-scheduler",
                               .interval_ms = svc->cfg->scheduler_poll_ms,
                               .step_at_start = true,
                               .step = step,
                               .arg = sc};
        if (ks_ticker_start(&sc->ticker, &o) != KS_OK) {
                free(sc);
                return KS_INTERNAL;
        }
        *out = sc;
        return KS_OK;
}

void bl_scheduler_stop(bl_scheduler *sc)
{
        if (sc == NULL) {
                return;
        }
        ks_ticker_stop(sc->ticker);
        free(sc);
}
