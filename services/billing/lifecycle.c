/*
 * A subscription's life in time: its state moves (the table of model.h, the
 * one place it lives), its periods, and the actions that fall due, one at a
 * time and in order: a trial's end, a period's end (a renewal, or a
 * cancellation asked for at period end), a dunning retry of one of its
 * invoices. The scheduler (real time) and AdvanceTestClock (a test clock's
 * time) both run bl_sub_step, so a year on a test clock is the same code as
 * a year in production.
 *
 * Each action happens at the time it fell due (next_action_ms), not at the
 * time it is run: a replica that catches up after downtime makes each
 * missed period's invoice as it would have been made on time, in order.
 * Periods follow the anchor (bl_boundary: month ends clamp); a first
 * period that starts before the anchor is a prorated part (period_n -1).
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"

static const char sql_history[] =
    "INSERT INTO billing.subscription_history (tenant_id, subscription_id, seq, from_state,"
    " to_state, event, at_ms, invoice_id, detail) VALUES (billing.ctx_tenant(), $1::uuid,"
    " $2::int4, $3::int2, $4::int2, $5, $6::int8, NULLIF($7, '')::uuid, $8)";

int bl_sub_record(bl_tx *tx, bl_subscription *s, int from_state, const char *event, int64_t at_ms,
                  const char *invoice_id, const char *detail)
{
        int rc;

        s->history_seq++;
        ks_pg_num seq = ks_pg_num_of(s->history_seq), from = ks_pg_num_of(from_state),
                  to = ks_pg_num_of(s->state), at = ks_pg_num_of(at_ms);
        const char *p[8] = {s->id,
                            seq.s,
                            from.s,
                            to.s,
                            event,
                            at.s,
                            invoice_id != NULL ? invoice_id : "",
                            detail != NULL ? detail : ""};
        if ((rc = bl_defer_insert(tx, NULL, sql_history, 8, p)) != KS_OK) {
                return rc;
        }
        return bl_event_subscription_changed(tx, s, from_state, event, at_ms, invoice_id);
}

/* A canceled subscription's open invoices stay owed, but no retry charges them any more. */
static const char sql_stop_dunning[] =
    "UPDATE billing.invoices SET next_attempt_ms = NULL WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND state = 1 AND next_attempt_ms IS NOT NULL";

int bl_sub_move(bl_tx *tx, bl_subscription *s, bl_sub_event ev, int64_t at_ms,
                const char *invoice_id, const char *detail)
{
        bl_sub_state from = s->state, to;
        int rc;

        if (!bl_sub_next(from, ev, &to)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "cannot %s a subscription that is %s",
                               bl_sub_event_name(ev), bl_sub_state_name(from));
        }
        s->state = to;
        if ((rc = bl_sub_record(tx, s, (int)from, bl_sub_event_name(ev), at_ms, invoice_id,
                                detail)) != KS_OK) {
                return rc;
        }
        if (to == BL_SUB_CANCELED) {
                /* Sent now, not deferred: deferred statements write rows by key and read none. */
                const char *p[1] = {s->id};
                if ((rc = bl_exec(tx, sql_stop_dunning, 1, p, NULL)) != KS_OK) {
                        return rc;
                }
        }
        return from != to ? bl_event_summary(tx, "SubscriptionChanged") : KS_OK;
}

static const char sql_next_retry[] =
    "SELECT min(next_attempt_ms) FROM billing.invoices WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND state = 1 AND next_attempt_ms IS NOT NULL";

/* The earliest dunning retry of s's open invoices (0: none). */
static int next_retry(bl_tx *tx, const bl_subscription *s, int64_t *at)
{
        const char *p[1] = {s->id};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_next_retry, 1, p, &res)) != KS_OK) {
                return rc;
        }
        *at = ks_pg_int(res, 0, 0);
        PQclear(res);
        return KS_OK;
}

void bl_sub_plan_next_known(bl_subscription *s, int64_t retry)
{
        switch (s->state) {
        case BL_SUB_TRIALING:
                s->next_action_ms = s->trial_end_ms;
                break;
        case BL_SUB_ACTIVE:
        case BL_SUB_PAST_DUE:
                s->next_action_ms =
                    retry != 0 && retry < s->period_end_ms ? retry : s->period_end_ms;
                break;
        default: /* paused and canceled: nothing falls due */
                s->next_action_ms = 0;
        }
}

int bl_sub_plan_next(bl_tx *tx, bl_subscription *s)
{
        int64_t retry = 0;
        int rc;

        if ((s->state == BL_SUB_ACTIVE || s->state == BL_SUB_PAST_DUE) &&
            (rc = next_retry(tx, s, &retry)) != KS_OK) {
                return rc;
        }
        bl_sub_plan_next_known(s, retry);
        return KS_OK;
}

/* ---- periods ---------------------------------------------------------------------------- */

static bl_interval interval_of(const bl_plan *p)
{
        return p->interval;
}

/* The period of s's plan that starts at start_ms: a part before the anchor, or a full one. */
int bl_sub_period_from(const bl_subscription *s, const bl_plan *plan, int64_t start_ms, int64_t *n,
                       int64_t *ps, int64_t *pe)
{
        int64_t a = s->anchor_ms / 1000, b0, b1;

        if (start_ms < s->anchor_ms) {
                *n = -1;
                *ps = start_ms;
                *pe = s->anchor_ms;
                return KS_OK;
        }
        if (!bl_period_at(a, interval_of(plan), start_ms / 1000, n, &b0, &b1)) {
                return KS_OUT_OF_RANGE;
        }
        *ps = start_ms;
        *pe = b1 * 1000;
        return KS_OK;
}

int bl_sub_full_period(const bl_subscription *s, const bl_plan *plan, int64_t *start_ms,
                       int64_t *end_ms)
{
        int64_t before;

        if (s->period_n >= 0) {
                *start_ms = s->period_start_ms;
                *end_ms = s->period_end_ms;
                return KS_OK;
        }
        /* A first, partial period: its whole is the interval that ends at the anchor. */
        if (!bl_boundary(s->anchor_ms / 1000, interval_of(plan), -1, &before)) {
                return KS_OUT_OF_RANGE;
        }
        *start_ms = before * 1000;
        *end_ms = s->anchor_ms;
        return KS_OK;
}

static void describe(bl_line *l, const bl_plan *plan, int64_t qty, const char *what)
{
        char from[16], to[16];

        bl_date_text(l->period_start_ms, from);
        bl_date_text(l->period_end_ms, to);
        snprintf(l->description, sizeof(l->description), "%s%lld × %s v%d (%s to %s)", what,
                 (long long)qty, plan->name[0] != '\0' ? plan->name : plan->code, plan->version,
                 from, to);
}

int bl_sub_period_lines(const bl_subscription *s, const bl_plan *plan, bl_line *lines, size_t *n)
{
        int64_t full, fs, fe, amount;

        *n = 0;
        if (plan->price.model == BL_PRICE_GRADUATED) {
                return KS_OK; /* metered: billed in arrears, at the period's end */
        }
        if (!bl_price_amount(&plan->price, s->quantity, &full) ||
            bl_sub_full_period(s, plan, &fs, &fe) != KS_OK ||
            !bl_prorate(full, s->period_end_ms - s->period_start_ms, fe - fs, &amount)) {
                return KS_OUT_OF_RANGE;
        }
        bl_line *l = &lines[(*n)++];
        memset(l, 0, sizeof(*l));
        l->kind = BL_LINE_SUBSCRIPTION;
        l->quantity = s->quantity;
        l->unit_amount = plan->price.model == BL_PRICE_PER_UNIT ? plan->price.amount : full;
        l->amount = amount;
        l->taxable = true;
        l->period_start_ms = s->period_start_ms;
        l->period_end_ms = s->period_end_ms;
        describe(l, plan, s->quantity, s->period_n < 0 ? "Prorated: " : "");
        return KS_OK;
}

static const char sql_usage[] =
    "SELECT COALESCE(sum(quantity), 0)::int8 FROM billing.usage_events"
    " WHERE tenant_id = billing.ctx_tenant() AND subscription_id = $1::uuid"
    " AND ts_ms >= $2::int8 AND ts_ms < $3::int8";

int bl_sub_usage(bl_tx *tx, const bl_subscription *s, int64_t from_ms, int64_t to_ms,
                 int64_t *units)
{
        ks_pg_num f = ks_pg_num_of(from_ms), t = ks_pg_num_of(to_ms);
        const char *p[3] = {s->id, f.s, t.s};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_usage, 3, p, &res)) != KS_OK) {
                return rc;
        }
        *units = ks_pg_int(res, 0, 0);
        PQclear(res);
        return KS_OK;
}

/* The usage line of a metered plan over [from, to); none for other plans. */
int bl_sub_usage_line(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, int64_t from_ms,
                      int64_t to_ms, bl_line *lines, size_t *n)
{
        int64_t units, amount;
        int rc;

        if (plan->price.model != BL_PRICE_GRADUATED) {
                return KS_OK;
        }
        if ((rc = bl_sub_usage(tx, s, from_ms, to_ms, &units)) != KS_OK) {
                return rc;
        }
        if (!bl_price_amount(&plan->price, units, &amount)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the period's usage would overflow");
        }
        bl_line *l = &lines[(*n)++];
        memset(l, 0, sizeof(*l));
        l->kind = BL_LINE_USAGE;
        l->quantity = units;
        l->amount = amount;
        l->taxable = true;
        l->period_start_ms = from_ms;
        l->period_end_ms = to_ms;
        describe(l, plan, units, "Usage: ");
        return KS_OK;
}

/* Pending proration items of s, taken by invoice_id: their rows, for pending_lines. */
static const char sql_take_pending[] =
    "UPDATE billing.pending_items SET invoice_id = $2::uuid WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND invoice_id IS NULL RETURNING kind, description,"
    " quantity, unit_amount, amount, taxable, period_start_ms, period_end_ms, created_ms, id";

/* The taken items as lines, in the order they were made. */
static void pending_lines(const PGresult *res, bl_line *lines, size_t *n)
{
        for (int i = 0; i < PQntuples(res); i++) {
                bl_line *l = &lines[(*n)++];
                memset(l, 0, sizeof(*l));
                l->kind = strcmp(ks_pg_text(res, i, 0), "proration") == 0 ? BL_LINE_PRORATION
                                                                          : BL_LINE_MANUAL;
                snprintf(l->description, sizeof(l->description), "%s", ks_pg_text(res, i, 1));
                l->quantity = ks_pg_int(res, i, 2);
                l->unit_amount = ks_pg_int(res, i, 3);
                l->amount = ks_pg_int(res, i, 4);
                l->taxable = ks_pg_bool(res, i, 5);
                l->period_start_ms = ks_pg_int(res, i, 6);
                l->period_end_ms = ks_pg_int(res, i, 7);
        }
}

/* ---- billing a period ----------------------------------------------------------------------- */

/* The lines of a period's invoice: the period (in advance), usage (in arrears), pending items. */
static int bill_lines(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, bool period,
                      int64_t usage_from, int64_t usage_to, const char *invoice_id, bl_line **lines,
                      size_t *n)
{
        const char *p[2] = {s->id, invoice_id};
        PGresult *res = NULL;
        int rc;

        *lines = NULL;
        *n = 0;
        if ((rc = bl_exec(tx, sql_take_pending, 2, p, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) + 2 > BL_LINES_MAX) {
                PQclear(res);
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "too many pending items for one invoice");
        }
        if ((*lines = calloc((size_t)PQntuples(res) + 2, sizeof(**lines))) == NULL) {
                PQclear(res);
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        if (period && bl_sub_period_lines(s, plan, *lines, n) != KS_OK) {
                rc = bl_fail(tx, KS_FAILED_PRECONDITION, "the period's amount would overflow");
        } else if (usage_to > usage_from) {
                rc = bl_sub_usage_line(tx, s, plan, usage_from, usage_to, *lines, n);
        }
        if (rc == KS_OK) {
                pending_lines(res, *lines, n);
        }
        PQclear(res);
        return rc;
}

/*
 * The invoice of s's current period (reason), with usage of [usage_from,
 * usage_to) for a metered plan and its pending items, finalized at at_ms
 * and charged automatically when the customer has a payment method. inv->id
 * may be set beforehand (bl_invoice_new_id); a cancellation with nothing
 * to bill makes no invoice (inv->id is then "").
 */
static int bill(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                bl_reason reason, bool period, int64_t usage_from, int64_t usage_to, int64_t at_ms,
                bl_invoice *inv)
{
        bl_payment_made pay;
        bl_line *lines = NULL;
        size_t n = 0;
        int rc;

        if (inv->id[0] == '\0' && (rc = bl_invoice_new_id(tx, inv)) != KS_OK) {
                return rc;
        }
        snprintf(inv->subscription_id, sizeof(inv->subscription_id), "%s", s->id);
        inv->reason = reason;
        inv->period_start_ms = s->period_start_ms;
        inv->period_end_ms = s->period_end_ms;
        inv->auto_charge = true;
        if ((rc = bill_lines(tx, s, plan, period, usage_from, usage_to, inv->id, &lines, &n)) !=
            KS_OK) {
                free(lines);
                return rc;
        }
        if (n == 0 && (reason == BL_REASON_CANCEL || reason == BL_REASON_UPDATE)) {
                free(lines);
                inv->id[0] = '\0';
                return KS_OK;
        }
        rc = bl_invoice_create(tx, cust, inv, lines, n, at_ms);
        free(lines);
        if (rc != KS_OK || (rc = bl_invoice_finalize(tx, cust, inv, at_ms)) != KS_OK) {
                return rc;
        }
        snprintf(s->latest_invoice_id, sizeof(s->latest_invoice_id), "%s", inv->id);
        if (inv->state == BL_INV_OPEN && cust->payment_method[0] != '\0') {
                return bl_invoice_charge(tx, cust, inv, s, NULL, true, at_ms, &pay);
        }
        return KS_OK;
}

int bl_sub_bill(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                bl_reason reason, int64_t usage_from, int64_t usage_to, int64_t at_ms,
                bl_invoice *inv)
{
        bool period = reason == BL_REASON_CREATE || reason == BL_REASON_CYCLE;
        return bill(tx, s, plan, cust, reason, period, usage_from, usage_to, at_ms, inv);
}

int bl_sub_bill_new_cycle(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                          int64_t at_ms, bl_invoice *inv)
{
        return bill(tx, s, plan, cust, BL_REASON_UPDATE, true, 0, 0, at_ms, inv);
}

/* ---- what falls due ------------------------------------------------------------------------- */

static const char sql_due_retry[] =
    "SELECT id FROM billing.invoices WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND state = 1 AND next_attempt_ms <= $2::int8"
    " ORDER BY next_attempt_ms, id LIMIT 1 FOR UPDATE";

/* A dunning retry due at or before at: *found and the charge. */
static int retry_due(bl_tx *tx, bl_subscription *s, bl_customer *cust, int64_t at, bool *found)
{
        ks_pg_num t = ks_pg_num_of(at);
        const char *p[2] = {s->id, t.s};
        PGresult *res = NULL;
        bl_invoice inv;
        bl_payment_made pay;
        int rc;

        *found = false;
        if ((rc = bl_exec(tx, sql_due_retry, 2, p, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 1) {
                *found = true;
                rc = bl_invoice_load(tx, ks_pg_text(res, 0, 0), true, &inv);
        }
        PQclear(res);
        if (!*found || rc != KS_OK) {
                return rc;
        }
        if (cust->payment_method[0] == '\0') { /* the method was removed: nothing to retry with */
                inv.next_attempt_ms = 0;
                return bl_invoice_save(tx, &inv);
        }
        return bl_invoice_charge(tx, cust, &inv, s, NULL, true, at, &pay);
}

/* The period after the current one (the trial, or a period that ended at at). */
static int next_period(bl_subscription *s, const bl_plan *plan, int64_t at)
{
        int64_t n, ps, pe;
        int rc = bl_sub_period_from(s, plan, at, &n, &ps, &pe);

        if (rc != KS_OK) {
                return rc;
        }
        s->period_n = n;
        s->period_start_ms = ps;
        s->period_end_ms = pe;
        return KS_OK;
}

static int cancel_at(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                     int64_t at)
{
        bl_invoice inv = {.id = ""};
        int64_t from = s->period_start_ms;
        int rc;

        s->canceled_ms = at;
        /* A metered plan's last period is billed now (its usage so far); nothing else is. */
        if (s->state != BL_SUB_TRIALING &&
            (rc = bl_sub_bill(tx, s, plan, cust, BL_REASON_CANCEL, from, at, at, &inv)) != KS_OK) {
                return rc;
        }
        return bl_sub_move(tx, s, BL_SE_CANCEL, at, inv.id[0] != '\0' ? inv.id : NULL,
                           "canceled at the end of the period");
}

/* The trial ended at at: the first paid period, or the end when so asked. */
static int trial_end(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                     int64_t at)
{
        bl_invoice inv;
        int rc;

        if (s->cancel_at_period_end) {
                s->canceled_ms = at;
                return bl_sub_move(tx, s, BL_SE_CANCEL, at, NULL, "canceled at the trial's end");
        }
        memset(&inv, 0, sizeof(inv));
        if ((rc = bl_invoice_new_id(tx, &inv)) != KS_OK ||
            (rc = bl_sub_move(tx, s, BL_SE_TRIAL_END, at, inv.id, NULL)) != KS_OK) {
                return rc;
        }
        if (next_period(s, plan, at) != KS_OK) {
                return bl_fail(tx, KS_OUT_OF_RANGE, "period out of range");
        }
        return bl_sub_bill(tx, s, plan, cust, BL_REASON_CYCLE, 0, 0, at, &inv);
}

/* The period ended at at: renewed (billing the next one, and the last one's usage). */
static int period_end(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                      int64_t at)
{
        int64_t used_from = s->period_start_ms;
        bl_invoice inv;
        int rc;

        if (s->cancel_at_period_end) {
                return cancel_at(tx, s, plan, cust, at);
        }
        if (next_period(s, plan, at) != KS_OK) {
                return bl_fail(tx, KS_OUT_OF_RANGE, "period out of range");
        }
        memset(&inv, 0, sizeof(inv));
        if ((rc = bl_invoice_new_id(tx, &inv)) != KS_OK ||
            (rc = bl_sub_move(tx, s, BL_SE_RENEW, at, inv.id, NULL)) != KS_OK) {
                return rc;
        }
        return bl_sub_bill(tx, s, plan, cust, BL_REASON_CYCLE, used_from, at, at, &inv);
}

int bl_sub_step(bl_tx *tx, bl_subscription *s, int64_t now_ms, bool *ran)
{
        int64_t at = s->next_action_ms;
        bl_customer cust;
        bl_plan plan;
        bool retried = false;
        int rc;

        *ran = false;
        if (at == 0 || at > now_ms) {
                return KS_OK;
        }
        if ((rc = bl_customer_load(tx, s->customer_id, true, &cust)) != KS_OK ||
            (rc = bl_plan_load(tx, s->plan_id, &plan)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        *ran = true;
        if ((rc = retry_due(tx, s, &cust, at, &retried)) != KS_OK) {
                return rc;
        }
        if (!retried && s->state == BL_SUB_TRIALING && s->trial_end_ms <= at) {
                rc = trial_end(tx, s, &plan, &cust, at);
        } else if (!retried && (s->state == BL_SUB_ACTIVE || s->state == BL_SUB_PAST_DUE) &&
                   s->period_end_ms <= at) {
                rc = period_end(tx, s, &plan, &cust, at);
        }
        if (rc != KS_OK || (rc = bl_sub_plan_next(tx, s)) != KS_OK) {
                return rc;
        }
        KS_ASSERT(s->next_action_ms == 0 || s->next_action_ms > at || retried);
        return bl_sub_save(tx, s, at);
}
