/*
 * GetBillingSummary (internal): the billing figures of the admin summary,
 * which keelson-summary asks for over RPC, caches and invalidates with the
 * rest (users.admin_summary, published by billing's writes).
 *
 * MRR (monthly recurring revenue) is per currency, over active and
 * past_due subscriptions on flat and per-unit plans (a metered plan's
 * revenue is not recurring: it is what was used): each period's amount
 * normalised to a month of a 365-day year and rounded half away from zero
 * per plan interval, as billing rounds everything (bl_mul_div): a year is
 * 12 months, 52 weeks or 365 days.
 *
 *   month × n: amount / n          year × n: amount / (12 n)
 *   week × n:  amount × 52 / (12 n) day × n:  amount × 365 / (12 n)
 */
#include "billing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CURRENCIES_MAX 32 /* listed per figure; a tenant with more shows its first 32 */

static const char sql_states[] =
    "SELECT count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 0),"
    " count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3),"
    " count(*) FILTER (WHERE state = 4) FROM billing.subscriptions"
    " WHERE tenant_id = billing.ctx_tenant()";

static const char sql_mrr[] =
    "SELECT s.currency, p.interval_unit, p.interval_count,"
    " sum(p.price_amount::numeric * CASE p.price_model WHEN 2 THEN s.quantity ELSE 1 END)::text"
    " FROM billing.subscriptions s JOIN billing.plans p ON p.tenant_id = s.tenant_id"
    " AND p.id = s.plan_id WHERE s.tenant_id = billing.ctx_tenant() AND s.state IN (1, 2)"
    " AND p.price_model IN (1, 2) GROUP BY 1, 2, 3 ORDER BY 1";

static const char sql_open[] =
    "SELECT currency, sum(amount_due - amount_paid - amount_credited)::int8,"
    " (sum(amount_due - amount_paid - amount_credited) FILTER (WHERE attempt_count > 0))::int8,"
    " count(*) FROM billing.invoices WHERE tenant_id = billing.ctx_tenant() AND state = 1"
    " GROUP BY 1 ORDER BY 1";

typedef struct amounts {
        Keelson__Billing__V1__CurrencyAmount v[CURRENCIES_MAX];
        Keelson__Billing__V1__CurrencyAmount *p[CURRENCIES_MAX];
        size_t n;
} amounts;

/* Adds amount to currency's entry (made when new); false on overflow. */
static bool add(amounts *a, const char *currency, int64_t amount)
{
        for (size_t i = 0; i < a->n; i++) {
                if (strcmp(a->v[i].currency, currency) == 0) {
                        return bl_add(a->v[i].amount, amount, &a->v[i].amount);
                }
        }
        if (a->n == CURRENCIES_MAX) {
                return true;
        }
        keelson__billing__v1__currency_amount__init(&a->v[a->n]);
        a->v[a->n].currency = (char *)currency;
        a->v[a->n].amount = amount;
        a->p[a->n] = &a->v[a->n];
        a->n++;
        return true;
}

/* A period's amount as a month's (see above); false when it leaves int64. */
static bool monthly(int64_t amount, bl_unit unit, int64_t count, int64_t *out)
{
        switch (unit) {
        case BL_UNIT_MONTH:
                return bl_mul_div(amount, 1, count, out);
        case BL_UNIT_YEAR:
                return bl_mul_div(amount, 1, 12 * count, out);
        case BL_UNIT_WEEK:
                return bl_mul_div(amount, 52, 12 * count, out);
        case BL_UNIT_DAY:
                return bl_mul_div(amount, 365, 12 * count, out);
        }
        return false;
}

static int summary_tx(bl_tx *tx, void *arg)
{
        Keelson__Billing__V1__GetBillingSummaryResponse resp =
            KEELSON__BILLING__V1__GET_BILLING_SUMMARY_RESPONSE__INIT;
        PGresult *st = NULL, *mrr = NULL, *open = NULL;
        amounts m = {.n = 0}, o = {.n = 0}, pd = {.n = 0};
        int rc;

        (void)arg;
        const ks_pg_stmt s[3] = {{.sql = sql_states, .out = &st},
                                 {.sql = sql_mrr, .out = &mrr},
                                 {.sql = sql_open, .out = &open}};
        if ((rc = bl_pipeline(tx, s, 3)) != KS_OK) {
                return rc;
        }
        resp.subscriptions_active = ks_pg_int(st, 0, 0);
        resp.subscriptions_trialing = ks_pg_int(st, 0, 1);
        resp.subscriptions_past_due = ks_pg_int(st, 0, 2);
        resp.subscriptions_paused = ks_pg_int(st, 0, 3);
        resp.subscriptions_canceled = ks_pg_int(st, 0, 4);
        for (int i = 0; rc == KS_OK && i < PQntuples(mrr); i++) {
                char *end;
                errno = 0;
                /* numeric in SQL, so the sum cannot fail there; past int64 it is refused here */
                long long sum = strtoll(ks_pg_text(mrr, i, 3), &end, 10);
                int64_t month;
                if (*end != '\0' || errno == ERANGE ||
                    !monthly(sum, (bl_unit)ks_pg_int(mrr, i, 1), ks_pg_int(mrr, i, 2), &month) ||
                    !add(&m, ks_pg_text(mrr, i, 0), month)) {
                        rc = bl_fail(tx, KS_OUT_OF_RANGE, "MRR leaves the range of int64");
                }
        }
        for (int i = 0; rc == KS_OK && i < PQntuples(open); i++) {
                add(&o, ks_pg_text(open, i, 0), ks_pg_int(open, i, 1));
                if (ks_pg_int(open, i, 2) > 0) {
                        add(&pd, ks_pg_text(open, i, 0), ks_pg_int(open, i, 2));
                }
                resp.invoices_open += ks_pg_int(open, i, 3);
        }
        if (rc == KS_OK) {
                resp.mrr = m.p;
                resp.n_mrr = m.n;
                resp.open_amount = o.p;
                resp.n_open_amount = o.n;
                resp.past_due_amount = pd.p;
                resp.n_past_due_amount = pd.n;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        PQclear(st);
        PQclear(mrr);
        PQclear(open);
        return rc;
}

int bl_get_billing_summary(ks_call *call)
{
        return bl_tx_run_reads(call, summary_tx, NULL);
}
