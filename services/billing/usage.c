/*
 * RecordUsage: usage events of a metered subscription (a plan priced with
 * graduated tiers), billed in arrears on the invoice made when the period
 * ends (lifecycle.c). Each event carries the client's id: an event sent
 * again, in the same batch or later, is a duplicate that changes nothing,
 * so a client may resend a whole batch after any failure. An event belongs
 * to the period its timestamp falls in, which must be the current one:
 * a period already invoiced is never changed. An event already recorded is
 * a duplicate before anything else is checked, so a batch resent after its
 * period was invoiced is answered as the duplicates it is, not refused.
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

static const char sql_insert[] =
    "INSERT INTO billing.usage_events (tenant_id, subscription_id, event_id, quantity, ts_ms)"
    " SELECT billing.ctx_tenant(), $1::uuid, e, q, t FROM unnest($2::text[], $3::int8[],"
    " $4::int8[]) AS u(e, q, t) ON CONFLICT DO NOTHING RETURNING 1";

typedef struct usage_args {
        const Keelson__Billing__V1__RecordUsageRequest *in;
} usage_args;

static const char sql_known[] =
    "SELECT event_id FROM billing.usage_events WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND event_id = ANY($2::text[])";

static bool known(const PGresult *k, const char *id)
{
        for (int r = 0; k != NULL && r < PQntuples(k); r++) {
                if (strcmp(PQgetvalue(k, r, 0), id) == 0) {
                        return true;
                }
        }
        return false;
}

/* The batch's ids recorded before (for this subscription), into *k. */
static int known_ids(bl_tx *tx, const Keelson__Billing__V1__RecordUsageRequest *in, PGresult **k)
{
        bl_arr ids = {0};
        int rc;

        for (size_t i = 0; i < in->n_events; i++) {
                bl_arr_text(&ids, in->events[i]->event_id);
        }
        const char *p[2] = {in->subscription_id, bl_arr_done(&ids)};
        rc = p[1] != NULL ? bl_exec(tx, sql_known, 2, p, k) : ks_call_oom(tx->call);
        bl_arr_free(&ids);
        return rc;
}

/*
 * Every new event's time (0: now) within the current period and not after
 * now, else the call fails; a known event (k) is a duplicate and is not
 * checked (its time here only fills the array: the insert skips it).
 */
static int times_of(bl_tx *tx, const Keelson__Billing__V1__RecordUsageRequest *in,
                    const bl_subscription *s, int64_t now, const PGresult *k, bl_arr *ts)
{
        for (size_t i = 0; i < in->n_events; i++) {
                int64_t t =
                    in->events[i]->timestamp_unix_ms != 0 ? in->events[i]->timestamp_unix_ms : now;
                if (known(k, in->events[i]->event_id)) {
                        t = now;
                } else if (t < s->period_start_ms || t >= s->period_end_ms || t > now) {
                        return bl_fail(tx, KS_FAILED_PRECONDITION,
                                       "events[%zu].timestamp_unix_ms: within the current period"
                                       " [%lld, %lld) and not after now",
                                       i, (long long)s->period_start_ms,
                                       (long long)s->period_end_ms);
                }
                bl_arr_int(ts, t);
        }
        return KS_OK;
}

static int insert(bl_tx *tx, const Keelson__Billing__V1__RecordUsageRequest *in, bl_arr *ts,
                  int *recorded)
{
        bl_arr ids = {0}, qs = {0};
        PGresult *res = NULL;
        int rc;

        for (size_t i = 0; i < in->n_events; i++) {
                bl_arr_text(&ids, in->events[i]->event_id);
                bl_arr_int(&qs, in->events[i]->quantity);
        }
        const char *p[4] = {in->subscription_id, bl_arr_done(&ids), bl_arr_done(&qs),
                            bl_arr_done(ts)};
        if (p[1] == NULL || p[2] == NULL || p[3] == NULL) {
                rc = ks_call_oom(tx->call);
        } else if ((rc = bl_exec(tx, sql_insert, 4, p, &res)) == KS_OK) {
                *recorded = PQntuples(res);
                PQclear(res);
        }
        bl_arr_free(&ids);
        bl_arr_free(&qs);
        return rc;
}

/* Whether every event of the batch was recorded before: a resend, answered as such. */
static bool all_known(const Keelson__Billing__V1__RecordUsageRequest *in, const PGresult *k)
{
        for (size_t i = 0; i < in->n_events; i++) {
                if (!known(k, in->events[i]->event_id)) {
                        return false;
                }
        }
        return true;
}

static int record(bl_tx *tx, const Keelson__Billing__V1__RecordUsageRequest *in,
                  const bl_subscription *s, const PGresult *k, int *recorded)
{
        bl_arr ts = {0};
        int64_t now;
        int rc;

        if (all_known(in, k)) {
                return KS_OK;
        }
        if (s->state != BL_SUB_ACTIVE && s->state != BL_SUB_PAST_DUE) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "usage is recorded for an active subscription; this one is %s",
                               bl_sub_state_name(s->state));
        }
        if ((rc = bl_now_for(tx, s->test_clock_id, &now)) == KS_OK &&
            (rc = times_of(tx, in, s, now, k, &ts)) == KS_OK) {
                rc = insert(tx, in, &ts, recorded);
        }
        bl_arr_free(&ts);
        return rc;
}

static int usage_tx(bl_tx *tx, void *arg)
{
        const Keelson__Billing__V1__RecordUsageRequest *in = ((usage_args *)arg)->in;
        Keelson__Billing__V1__RecordUsageResponse resp =
            KEELSON__BILLING__V1__RECORD_USAGE_RESPONSE__INIT;
        bl_subscription s;
        PGresult *k = NULL;
        bl_plan plan;
        int64_t total;
        int recorded = 0, rc;

        if ((rc = bl_sub_load(tx, in->subscription_id, true, &s)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "subscription not found")
                                          : rc;
        }
        if ((rc = bl_plan_load(tx, s.plan_id, &plan)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if (plan.price.model != BL_PRICE_GRADUATED) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "the subscription's plan is not metered");
        }
        if ((rc = known_ids(tx, in, &k)) == KS_OK &&
            (rc = record(tx, in, &s, k, &recorded)) == KS_OK &&
            (rc = bl_sub_usage(tx, &s, s.period_start_ms, s.period_end_ms, &total)) == KS_OK) {
                resp.recorded = recorded;
                resp.duplicates = (int32_t)in->n_events - recorded;
                resp.period_usage = total;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        PQclear(k);
        return rc;
}

int bl_record_usage(ks_call *call)
{
        const Keelson__Billing__V1__RecordUsageRequest *in = (const void *)call->in;
        usage_args a = {.in = in};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("subscription_id", in->subscription_id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->n_events < 1 || in->n_events > BL_USAGE_BATCH_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "events: 1 to %d",
                                    BL_USAGE_BATCH_MAX);
        }
        for (size_t i = 0; i < in->n_events; i++) {
                const Keelson__Billing__V1__UsageEvent *e = in->events[i];
                if (!bl_event_id_valid(e->event_id)) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "events[%zu].event_id: 1 to %d of [A-Za-z0-9._:-]", i,
                                            BL_EVENT_ID_MAX);
                }
                if (e->quantity < 0 || e->quantity > BL_USAGE_QUANTITY_MAX) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "events[%zu].quantity: 0 to %lld", i,
                                            BL_USAGE_QUANTITY_MAX);
                }
                if (e->timestamp_unix_ms < 0) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "events[%zu].timestamp_unix_ms: must not be negative",
                                            i);
                }
        }
        return bl_tx_run(call, usage_tx, &a);
}
