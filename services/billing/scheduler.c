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
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"
#include "ks_ticker.h"

#define STEPS_PER_TX   32 /* actions of one subscription per transaction */
#define PRUNE_EVERY_MS 60000
#define PRUNE_BATCH    1000

struct bl_scheduler {
        bl_service *svc;
        ks_ticker *ticker;
        int64_t pruned_at_ms;
        ks_counter *actions, *failures;
};

static const char sql_due[] =
    "SELECT tenant_id, id FROM billing.subscriptions WHERE test_clock_id IS NULL"
    " AND next_action_ms <= $1::int8 ORDER BY next_action_ms LIMIT $2::int4";

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
        bl_num t = bl_num_of(now), lim = bl_num_of(svc->cfg->scheduler_batch_max);
        const char *p[2] = {t.s, lim.s};
        PGresult *res = NULL;
        int n;

        if (as_worker(svc, sql_due, 2, p, &res) != KS_OK) {
                ks_counter_inc(sc->failures);
                return 0;
        }
        n = PQntuples(res);
        for (int i = 0; i < n; i++) {
                due_job j = {.id = PQgetvalue(res, i, 1), .now = now};
                int rc = bl_tx_run_as(svc, "scheduler", PQgetvalue(res, i, 0), due_tx, &j);
                if (rc != KS_OK) {
                        ks_counter_inc(sc->failures);
                        ks_log_warn("scheduler", "a due subscription failed; retried next pass",
                                    "{s:s, s:s, s:s}", "tenant_id", PQgetvalue(res, i, 0),
                                    "subscription_id", j.id, "code", ks_code_name(rc));
                        continue;
                }
                ks_counter_add(sc->actions, (uint64_t)j.actions);
        }
        PQclear(res);
        return n;
}

static void prune(bl_scheduler *sc, int64_t now)
{
        bl_num before = bl_num_of(now - BL_IDEMPOTENCY_TTL_MS), lim = bl_num_of(PRUNE_BATCH);
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
