/*
 * Plan and quantity changes mid-period: ChangeSubscription and
 * PreviewChange, which compute the same lines by the same code.
 *
 * Proration (docs/api.md), by the second: a change at t in a period whose
 * whole is [fs, fe) and which ends at e credits the old price for [t, e)
 * and charges the new one for it, each line rounded on its own (half away
 * from zero, bl_prorate):
 *
 *     credit = −round(old_amount × (e − t) / (fe − fs))
 *     charge = +round(new_amount × (e − t) / (fe − fs))
 *
 * so any sequence of changes in a period bills the exact rational amount
 * within half a minor unit per line. How the lines are billed is the
 * request's proration_behavior, as Stripe's: create_prorations (the
 * default: they wait, as pending items, for the next renewal's invoice),
 * always_invoice (an invoice now, finalized and charged), none.
 *
 * A change to a plan of the same interval keeps the period and its anchor.
 * A change to another interval (monthly to yearly) starts a new cycle at
 * once, as Stripe does: the anchor moves to the change, the first period of
 * the new plan runs from it, and a subscription_update invoice is made now
 * with that period in advance, the credit for the old period's unused rest
 * (unless proration_behavior is none) and every pending item, finalized and
 * charged (a credit larger than the charge goes to the customer's balance).
 * The currency never changes. A metered plan bills usage at the period's end
 * and is not prorated, so changes to or from one are refused (cancel and
 * subscribe again). In a trial nothing is billed: the plan simply changes,
 * and the periods after the trial follow its interval.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum behavior { B_CREATE_PRORATIONS, B_ALWAYS_INVOICE, B_NONE } behavior;

static const char sql_pending[] =
    "INSERT INTO billing.pending_items (tenant_id, subscription_id, kind, description, quantity,"
    " unit_amount, amount, taxable, period_start_ms, period_end_ms, created_ms)"
    " VALUES (billing.ctx_tenant(), $1::uuid, $2, $3, $4::int8, $5::int8, $6::int8, $7::bool,"
    " $8::int8, $9::int8, $10::int8)";

static int pending_add(bl_tx *tx, const bl_subscription *s, const bl_line *l, int64_t now)
{
        ks_pg_num q = ks_pg_num_of(l->quantity), u = ks_pg_num_of(l->unit_amount),
                  a = ks_pg_num_of(l->amount), ps = ks_pg_num_of(l->period_start_ms),
                  pe = ks_pg_num_of(l->period_end_ms), at = ks_pg_num_of(now);
        const char *p[10] = {s->id, bl_line_kind_name(l->kind), l->description, q.s,  u.s,
                             a.s,   l->taxable ? "t" : "f",     ps.s,           pe.s, at.s};

        return bl_defer(tx, sql_pending, 10, p);
}

/* The proration line of plan × qty over [now, period end): sign -1 a credit, +1 a charge. */
static int proration_line(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, int64_t qty,
                          int64_t now, int sign, const char *what, bl_line *l)
{
        int64_t full, fs, fe, part;
        char from[16];

        if (!bl_price_amount(&plan->price, qty, &full) ||
            bl_sub_full_period(s, plan, &fs, &fe) != KS_OK ||
            !bl_prorate(full, s->period_end_ms - now, fe - fs, &part)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the proration would overflow");
        }
        memset(l, 0, sizeof(*l));
        l->kind = BL_LINE_PRORATION;
        l->quantity = qty;
        l->unit_amount = plan->price.model == BL_PRICE_PER_UNIT ? plan->price.amount : full;
        l->amount = sign * part;
        l->taxable = true;
        l->period_start_ms = now;
        l->period_end_ms = s->period_end_ms;
        bl_date_text(now, from);
        snprintf(l->description, sizeof(l->description), "%s %lld × %s v%d from %s", what,
                 (long long)qty, plan->name[0] != '\0' ? plan->name : plan->code, plan->version,
                 from);
        return KS_OK;
}

int bl_proration_credit(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, int64_t now_ms,
                        const char *what)
{
        bl_line l;
        int rc;

        if (plan->price.model == BL_PRICE_GRADUATED || now_ms >= s->period_end_ms) {
                return KS_OK;
        }
        if ((rc = proration_line(tx, s, plan, s->quantity, now_ms, -1, what, &l)) != KS_OK) {
                return rc;
        }
        return l.amount != 0 ? pending_add(tx, s, &l, now_ms) : KS_OK;
}

/* ---- the change, shared by ChangeSubscription and PreviewChange ----------------------------- */

typedef struct change {
        const Keelson__Billing__V1__ChangeSubscriptionRequest *in;
        behavior how;
        bool preview;
        /* read and computed in the transaction: */
        bl_subscription s;
        bl_customer cust;
        bl_plan old_plan, new_plan;
        int64_t qty, now;
        bool new_cycle; /* another interval, out of a trial: a new period from now */
        bl_line lines[2];
        size_t n;
} change;

static int change_allowed(bl_tx *tx, change *c)
{
        const bl_plan *o = &c->old_plan, *p = &c->new_plan;
        bl_sub_state to;

        if (!bl_sub_next(c->s.state, BL_SE_CHANGE, &to)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "cannot change a subscription that is %s",
                               bl_sub_state_name(c->s.state));
        }
        if (p->currency != o->currency) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "the new plan must have the subscription's currency");
        }
        if ((o->price.model == BL_PRICE_GRADUATED || p->price.model == BL_PRICE_GRADUATED) &&
            strcmp(o->id, p->id) != 0) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "a metered plan is not prorated: cancel and subscribe again");
        }
        if (p->price.model != BL_PRICE_PER_UNIT && c->qty != 1) {
                return bl_fail(tx, KS_INVALID_ARGUMENT,
                               "quantity: only a per-unit plan takes a quantity");
        }
        if (strcmp(o->id, p->id) == 0 && c->qty == c->s.quantity) {
                return bl_fail(tx, KS_INVALID_ARGUMENT,
                               "nothing to change: same plan and quantity");
        }
        return KS_OK;
}

/*
 * s moved onto the new plan's first period from now: the anchor at now,
 * the period [now, now + the new interval).
 */
static int start_new_cycle(bl_tx *tx, const change *c, bl_subscription *s)
{
        int64_t end;

        if (!bl_boundary(c->now / 1000, c->new_plan.interval, 1, &end)) {
                return bl_fail(tx, KS_OUT_OF_RANGE, "period out of range");
        }
        snprintf(s->plan_id, sizeof(s->plan_id), "%s", c->new_plan.id);
        s->quantity = c->qty;
        s->anchor_ms = c->now;
        s->period_n = 0;
        s->period_start_ms = c->now;
        s->period_end_ms = end * 1000;
        return KS_OK;
}

/*
 * A change of interval: the new plan's first period in advance, then the
 * credit for the old period's unused rest (unless none, or the period
 * already ended), in the order of the invoice made now.
 */
static int new_cycle_lines(bl_tx *tx, change *c)
{
        bl_subscription next = c->s;
        size_t k = 0;
        int rc;

        if ((rc = start_new_cycle(tx, c, &next)) != KS_OK) {
                return rc;
        }
        if (bl_sub_period_lines(&next, &c->new_plan, c->lines, &k) != KS_OK) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the period's amount would overflow");
        }
        c->n = k;
        if (c->how != B_NONE && c->now < c->s.period_end_ms) {
                if ((rc = proration_line(tx, &c->s, &c->old_plan, c->s.quantity, c->now, -1,
                                         "Unused time on", &c->lines[c->n])) != KS_OK) {
                        return rc;
                }
                c->n += c->lines[c->n].amount != 0;
        }
        return KS_OK;
}

/* Reads everything, checks the change and computes its lines (c->lines, c->n). */
static int change_prepare(bl_tx *tx, change *c)
{
        const Keelson__Billing__V1__ChangeSubscriptionRequest *in = c->in;
        int rc;

        if ((rc = bl_sub_load(tx, in->id, !c->preview, &c->s)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "subscription not found")
                                          : rc;
        }
        if ((rc = bl_customer_load(tx, c->s.customer_id, !c->preview, &c->cust)) != KS_OK ||
            (rc = bl_plan_load(tx, c->s.plan_id, &c->old_plan)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if (in->plan_id[0] == '\0' && in->plan_code[0] == '\0') {
                c->new_plan = c->old_plan;
        } else if ((rc = bl_plan_named(tx, in->plan_id, in->plan_code, &c->new_plan)) != KS_OK) {
                return rc;
        }
        c->qty = in->quantity != 0 ? in->quantity : c->s.quantity;
        if ((rc = change_allowed(tx, c)) != KS_OK ||
            (rc = bl_now_for(tx, c->s.test_clock_id, &c->now)) != KS_OK) {
                return rc;
        }
        c->now -= c->now % 1000;
        c->n = 0;
        c->new_cycle = c->s.state != BL_SUB_TRIALING &&
                       (c->new_plan.interval.unit != c->old_plan.interval.unit ||
                        c->new_plan.interval.count != c->old_plan.interval.count);
        if (c->new_cycle) {
                return new_cycle_lines(tx, c);
        }
        if (c->s.state == BL_SUB_TRIALING || c->how == B_NONE || c->now >= c->s.period_end_ms) {
                return KS_OK;
        }
        if ((rc = proration_line(tx, &c->s, &c->old_plan, c->s.quantity, c->now, -1,
                                 "Unused time on", &c->lines[c->n])) != KS_OK) {
                return rc;
        }
        c->n += c->lines[c->n].amount != 0;
        if ((rc = proration_line(tx, &c->s, &c->new_plan, c->qty, c->now, +1, "Remaining time on",
                                 &c->lines[c->n])) != KS_OK) {
                return rc;
        }
        c->n += c->lines[c->n].amount != 0;
        return KS_OK;
}

/* Taxes of the change's lines at the customer's rate, and their totals. */
static bool change_totals(change *c, bl_totals *t)
{
        bl_line_amount la[2];
        int64_t taxes[2] = {0, 0};

        for (size_t i = 0; i < c->n; i++) {
                la[i] = (bl_line_amount){.amount = c->lines[i].amount, .taxable = true};
        }
        if (!bl_totals_of(la, c->n, c->cust.tax_rate_bp, taxes, t)) {
                return false;
        }
        for (size_t i = 0; i < c->n; i++) {
                c->lines[i].tax = taxes[i];
        }
        return true;
}

static int preview_tx(bl_tx *tx, void *arg)
{
        Keelson__Billing__V1__PreviewChangeResponse resp =
            KEELSON__BILLING__V1__PREVIEW_CHANGE_RESPONSE__INIT;
        Keelson__Billing__V1__InvoiceLine m[2], *ptrs[2];
        change *c = arg;
        bl_totals t;
        int rc;

        if ((rc = change_prepare(tx, c)) != KS_OK) {
                return rc;
        }
        if (!change_totals(c, &t)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the proration would overflow");
        }
        bl_line_messages(c->lines, c->n, m, ptrs);
        resp.lines = ptrs;
        resp.n_lines = c->n;
        resp.subtotal = t.subtotal;
        resp.tax = t.tax;
        resp.total = t.total;
        resp.currency = (char *)c->cust.currency->code;
        resp.proration_time_unix_ms = c->now;
        return ks_call_reply(tx->call, &resp.base);
}

/*
 * A change of interval made: the credit waits as a pending item for the
 * invoice made at once (with the new period in advance and every other
 * pending item), the subscription on its new cycle, the move recorded.
 */
static int change_new_cycle(bl_tx *tx, change *c, bl_invoice *inv, const char *detail)
{
        char with[320], from[16];
        int rc;

        for (size_t i = 0; i < c->n; i++) {
                if (c->lines[i].kind == BL_LINE_PRORATION &&
                    (rc = pending_add(tx, &c->s, &c->lines[i], c->now)) != KS_OK) {
                        return rc;
                }
        }
        if ((rc = start_new_cycle(tx, c, &c->s)) != KS_OK) {
                return rc;
        }
        bl_date_text(c->now, from);
        snprintf(with, sizeof(with), "%s, a new cycle from %s", detail, from);
        if ((rc = bl_invoice_new_id(tx, inv)) != KS_OK ||
            (rc = bl_sub_move(tx, &c->s, BL_SE_CHANGE, c->now, inv->id, with)) != KS_OK) {
                return rc;
        }
        return bl_sub_bill_new_cycle(tx, &c->s, &c->new_plan, &c->cust, c->now, inv);
}

/* The change made: lines billed as asked, the plan and quantity switched, the move recorded. */
static int change_apply(bl_tx *tx, change *c, bl_invoice *inv)
{
        char detail[256];
        int rc;

        snprintf(detail, sizeof(detail), "plan %s v%d to %s v%d, quantity %lld to %lld",
                 c->old_plan.code, c->old_plan.version, c->new_plan.code, c->new_plan.version,
                 (long long)c->s.quantity, (long long)c->qty);
        if (c->new_cycle) {
                return change_new_cycle(tx, c, inv, detail);
        }
        for (size_t i = 0; c->how != B_NONE && i < c->n; i++) {
                if ((rc = pending_add(tx, &c->s, &c->lines[i], c->now)) != KS_OK) {
                        return rc;
                }
        }
        snprintf(c->s.plan_id, sizeof(c->s.plan_id), "%s", c->new_plan.id);
        c->s.quantity = c->qty;
        if (c->how == B_ALWAYS_INVOICE && c->n > 0) {
                if ((rc = bl_invoice_new_id(tx, inv)) != KS_OK ||
                    (rc = bl_sub_move(tx, &c->s, BL_SE_CHANGE, c->now, inv->id, detail)) != KS_OK) {
                        return rc;
                }
                return bl_sub_bill(tx, &c->s, &c->new_plan, &c->cust, BL_REASON_UPDATE, 0, 0,
                                   c->now, inv);
        }
        return bl_sub_move(tx, &c->s, BL_SE_CHANGE, c->now, NULL, detail);
}

static int change_tx(bl_tx *tx, void *arg)
{
        Keelson__Billing__V1__ChangeSubscriptionResponse resp =
            KEELSON__BILLING__V1__CHANGE_SUBSCRIPTION_RESPONSE__INIT;
        Keelson__Billing__V1__InvoiceLine m[2], *ptrs[2];
        Keelson__Billing__V1__Subscription sm;
        bl_invoice inv = {.id = ""};
        bl_invoice_view v;
        change *c = arg;
        bl_totals t;
        int rc;

        if ((rc = change_prepare(tx, c)) != KS_OK || (rc = change_apply(tx, c, &inv)) != KS_OK ||
            (rc = bl_sub_plan_next(tx, &c->s)) != KS_OK ||
            (rc = bl_sub_save(tx, &c->s, c->now)) != KS_OK) {
                return rc;
        }
        if (!change_totals(c, &t)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the proration would overflow");
        }
        bl_line_messages(c->lines, c->n, m, ptrs);
        bl_sub_message(&c->s, &c->new_plan, &sm);
        resp.subscription = &sm;
        resp.proration_lines = ptrs;
        resp.n_proration_lines = c->how == B_NONE && !c->new_cycle ? 0 : c->n;
        memset(&v, 0, sizeof(v));
        if (inv.id[0] != '\0') {
                if ((rc = bl_invoice_load(tx, inv.id, false, &inv)) != KS_OK ||
                    (rc = bl_invoice_view_make(tx, &inv, true, &v)) != KS_OK ||
                    (rc = bl_invoice_view_seal(tx, &v)) != KS_OK) {
                        bl_invoice_view_free(&v);
                        return rc;
                }
                resp.invoice = &v.m;
        }
        rc = ks_call_reply(tx->call, &resp.base);
        bl_invoice_view_free(&v);
        return rc;
}

static int parse(ks_call *call, change *c)
{
        const Keelson__Billing__V1__ChangeSubscriptionRequest *in = c->in;
        const char *b = in->proration_behavior;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err)) ||
            (in->plan_id[0] != '\0' && !bl_id_valid("plan_id", in->plan_id, err, sizeof(err))) ||
            (in->plan_id[0] == '\0' && in->plan_code[0] != '\0' &&
             !bl_plan_code_valid(in->plan_code, err, sizeof(err)))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->quantity < 0 || in->quantity > BL_QUANTITY_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "quantity: 0 (unchanged) or 1 to %d",
                                    BL_QUANTITY_MAX);
        }
        if (b[0] == '\0' || strcmp(b, "create_prorations") == 0) {
                c->how = B_CREATE_PRORATIONS;
        } else if (strcmp(b, "always_invoice") == 0) {
                c->how = B_ALWAYS_INVOICE;
        } else if (strcmp(b, "none") == 0) {
                c->how = B_NONE;
        } else {
                return ks_call_fail(
                    call, KS_INVALID_ARGUMENT,
                    "proration_behavior: create_prorations, always_invoice or none");
        }
        return KS_OK;
}

/* Runs fn on a fresh change of the call's request (a few KiB: on the heap). */
static int run_change(ks_call *call, bool preview, bl_tx_fn fn)
{
        change *c = calloc(1, sizeof(*c));
        int rc;

        if (c == NULL) {
                return ks_call_oom(call);
        }
        c->in = (const void *)call->in;
        c->preview = preview;
        if ((rc = parse(call, c)) == KS_OK) {
                rc = bl_tx_run(call, fn, c);
        }
        free(c);
        return rc;
}

int bl_change_subscription(ks_call *call)
{
        return run_change(call, false, change_tx);
}

int bl_preview_change(ks_call *call)
{
        return run_change(call, true, preview_tx);
}
