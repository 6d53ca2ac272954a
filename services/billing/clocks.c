/*
 * Test clocks, as Stripe has them: CreateTestClock, GetTestClock,
 * AdvanceTestClock. A customer made on a clock lives on its frozen time for
 * good (clock.c), and so do its subscriptions and invoices: the scheduler
 * leaves them alone, and AdvanceTestClock runs, in one transaction and in
 * the order they fall due, every action of the clock's subscriptions up to
 * the new time (bl_sub_step, the code the scheduler runs), then moves the
 * clock. A year of renewals, a trial's end and a dunning cycle are tested
 * in seconds, by us and by users.
 *
 * Bounds, as Stripe's: a clock moves forward only, by at most two intervals
 * of the shortest plan among its subscriptions that are not canceled (two
 * years with none); it holds at most BL_CLOCK_SUBS_MAX subscriptions; one
 * advance runs at most BL_CLOCK_STEPS_MAX actions. A second advance while
 * one runs (or while a call on one of its customers holds the clock) is
 * told to retry (aborted).
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

#include "ks_text.h"

#define CLOCK_COLS "id, name, frozen_ms, created_ms"

static int reply_clock(bl_tx *tx, const PGresult *res, int actions)
{
        Keelson__Billing__V1__TestClockResponse resp =
            KEELSON__BILLING__V1__TEST_CLOCK_RESPONSE__INIT;
        Keelson__Billing__V1__TestClock c = KEELSON__BILLING__V1__TEST_CLOCK__INIT;

        c.id = (char *)ks_pg_text(res, 0, 0);
        c.name = (char *)ks_pg_text(res, 0, 1);
        c.frozen_time_unix_ms = ks_pg_int(res, 0, 2);
        c.created_at_unix_ms = ks_pg_int(res, 0, 3);
        c.status = "ready";
        resp.test_clock = &c;
        resp.actions_run = actions;
        return ks_call_reply(tx->call, &resp.base);
}

/* ---- CreateTestClock, GetTestClock --------------------------------------------------------- */

static const char sql_insert[] =
    "INSERT INTO billing.test_clocks (tenant_id, name, frozen_ms)"
    " VALUES (billing.ctx_tenant(), $1, $2::int8) RETURNING " CLOCK_COLS;

typedef struct create_args {
        char name[BL_NAME_BYTES_MAX + 1];
        int64_t frozen_ms;
} create_args;

static int create_tx(bl_tx *tx, void *arg)
{
        create_args *a = arg;
        ks_pg_num f = ks_pg_num_of(a->frozen_ms);
        const char *p[2] = {a->name, f.s};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_insert, 2, p, &res)) != KS_OK) {
                return rc;
        }
        rc = reply_clock(tx, res, 0);
        PQclear(res);
        return rc;
}

int bl_create_test_clock(ks_call *call)
{
        const Keelson__Billing__V1__CreateTestClockRequest *in = (const void *)call->in;
        create_args a = {.frozen_ms = in->frozen_time_unix_ms};
        char err[BL_ERR_MAX];

        if (!bl_name_valid("name", in->name, BL_NAME_CHARS_MAX, a.name, sizeof(a.name), err,
                           sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        /* Years 1970..9000: periods are counted in seconds up to 9999 */
        if (in->frozen_time_unix_ms <= 0 || in->frozen_time_unix_ms > 221845392000000LL) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "frozen_time_unix_ms: after 1970 and before the year 9000");
        }
        return bl_tx_run(call, create_tx, &a);
}

static const char sql_get[] = "SELECT " CLOCK_COLS " FROM billing.test_clocks"
                              " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

static int get_tx(bl_tx *tx, void *arg)
{
        const char *p[1] = {arg};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_get, 1, p, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? reply_clock(tx, res, 0)
                                 : bl_fail(tx, KS_NOT_FOUND, "test clock not found");
        PQclear(res);
        return rc;
}

int bl_get_test_clock(ks_call *call)
{
        const Keelson__Billing__V1__GetTestClockRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run_reads(call, get_tx, in->id);
}

/* ---- AdvanceTestClock ------------------------------------------------------------------------ */

static const char sql_lock[] = "SELECT " CLOCK_COLS " FROM billing.test_clocks"
                               " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
                               " FOR UPDATE SKIP LOCKED";

static const char sql_intervals[] =
    "SELECT DISTINCT p.interval_unit, p.interval_count FROM billing.subscriptions s"
    " JOIN billing.plans p ON p.tenant_id = s.tenant_id AND p.id = s.plan_id"
    " WHERE s.tenant_id = billing.ctx_tenant() AND s.test_clock_id = $1::uuid AND s.state <> 4";

static const char sql_next_due[] =
    "SELECT id FROM billing.subscriptions WHERE tenant_id = billing.ctx_tenant()"
    " AND test_clock_id = $1::uuid AND next_action_ms <= $2::int8"
    " ORDER BY next_action_ms, id LIMIT 1";

static const char sql_move[] =
    "UPDATE billing.test_clocks SET frozen_ms = $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid RETURNING " CLOCK_COLS;

/* The furthest the clock may go from frozen: two intervals of its shortest plan, or two years. */
static int reach(bl_tx *tx, const char *id, int64_t frozen, int64_t *limit)
{
        const char *p[1] = {id};
        PGresult *res = NULL;
        int64_t b;
        int rc;

        if ((rc = bl_exec(tx, sql_intervals, 1, p, &res)) != KS_OK) {
                return rc;
        }
        *limit = bl_boundary(frozen / 1000, (bl_interval){BL_UNIT_YEAR, 2}, 1, &b) ? b * 1000
                                                                                   : INT64_MAX;
        for (int i = 0; i < PQntuples(res); i++) {
                bl_interval iv = {(bl_unit)ks_pg_int(res, i, 0), (int32_t)ks_pg_int(res, i, 1)};
                if (bl_boundary(frozen / 1000, iv, 2, &b) && b * 1000 < *limit) {
                        *limit = b * 1000;
                }
        }
        PQclear(res);
        return KS_OK;
}

/* The clock's subscription whose action falls due first, up to target: *found. */
static int step_next(bl_tx *tx, const char *clock, int64_t target, bool *found)
{
        ks_pg_num t = ks_pg_num_of(target);
        const char *p[2] = {clock, t.s};
        PGresult *res = NULL;
        bl_subscription s;
        bool ran = false;
        int rc;

        *found = false;
        if ((rc = bl_exec(tx, sql_next_due, 2, p, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 0) {
                PQclear(res);
                return KS_OK;
        }
        rc = bl_sub_load(tx, ks_pg_text(res, 0, 0), true, &s);
        PQclear(res);
        if (rc != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if ((rc = bl_sub_step(tx, &s, target, &ran)) != KS_OK) {
                return rc;
        }
        *found = ran;
        return KS_OK;
}

typedef struct advance_args {
        const char *id;
        int64_t target;
} advance_args;

static int advance_tx(bl_tx *tx, void *arg)
{
        advance_args *a = arg;
        const char *p[1] = {a->id};
        PGresult *res = NULL;
        int64_t frozen, limit;
        int actions = 0, rc;
        bool found = true;

        if ((rc = bl_exec(tx, sql_lock, 1, p, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                if ((rc = bl_exec(tx, sql_get, 1, p, &res)) != KS_OK) {
                        return rc;
                }
                rc = PQntuples(res) == 1 ? bl_fail(tx, KS_ABORTED, "the test clock is busy; retry")
                                         : bl_fail(tx, KS_NOT_FOUND, "test clock not found");
                PQclear(res);
                return rc;
        }
        frozen = ks_pg_int(res, 0, 2);
        PQclear(res);
        if (a->target <= frozen) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "frozen_time_unix_ms: a clock only moves forward (it is at %lld)",
                               (long long)frozen);
        }
        if ((rc = reach(tx, a->id, frozen, &limit)) != KS_OK) {
                return rc;
        }
        if (a->target > limit) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "frozen_time_unix_ms: at most two intervals of the clock's shortest"
                               " plan ahead (%lld)",
                               (long long)limit);
        }
        while (found) {
                if (actions >= BL_CLOCK_STEPS_MAX) {
                        return bl_fail(tx, KS_FAILED_PRECONDITION,
                                       "more than %d actions fall due; advance by less",
                                       BL_CLOCK_STEPS_MAX);
                }
                if ((rc = step_next(tx, a->id, a->target, &found)) != KS_OK) {
                        return rc;
                }
                actions += found;
        }
        ks_pg_num t = ks_pg_num_of(a->target);
        const char *mp[2] = {a->id, t.s};
        if ((rc = bl_exec(tx, sql_move, 2, mp, &res)) != KS_OK) {
                return rc;
        }
        rc = reply_clock(tx, res, actions);
        PQclear(res);
        return rc;
}

int bl_advance_test_clock(ks_call *call)
{
        const Keelson__Billing__V1__AdvanceTestClockRequest *in = (const void *)call->in;
        advance_args a = {.id = in->id, .target = in->frozen_time_unix_ms};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, advance_tx, &a);
}
