/*
 * Subscriptions: CreateSubscription, GetSubscription, ListSubscriptions,
 * CancelSubscription, PauseSubscription, ResumeSubscription,
 * ListSubscriptionHistory. Plan changes are in changes.c, what falls due
 * in lifecycle.c.
 *
 * Every method acts at the customer's now (its test clock's, or real time),
 * in whole seconds: periods and prorations are counted by the second.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_crypto.h"

static int64_t whole_second(int64_t ms)
{
        return ms - ms % 1000;
}

/* The plan a request names: a version id, or a code's latest version; refused when archived. */
int bl_plan_named(bl_tx *tx, const char *id, const char *code, bl_plan *out)
{
        int rc = id[0] != '\0' ? bl_plan_load(tx, id, out) : bl_plan_load_code(tx, code, out);

        if (rc == KS_NOT_FOUND) {
                return bl_fail(tx, KS_NOT_FOUND, "plan not found");
        }
        if (rc == KS_OK && out->archived) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the plan is archived");
        }
        return rc;
}

/* A subscription with its plan, for a reply. */
int bl_reply_subscription(bl_tx *tx, const bl_subscription *s, const bl_plan *plan,
                          const bl_invoice *latest)
{
        Keelson__Billing__V1__SubscriptionResponse resp =
            KEELSON__BILLING__V1__SUBSCRIPTION_RESPONSE__INIT;
        Keelson__Billing__V1__Subscription m;
        bl_invoice_view v;
        bl_plan read;
        int rc;

        if (plan == NULL) {
                if ((rc = bl_plan_load(tx, s->plan_id, &read)) != KS_OK) {
                        return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
                }
                plan = &read;
        }
        bl_sub_message(s, plan, &m);
        resp.subscription = &m;
        memset(&v, 0, sizeof(v));
        if (latest != NULL && latest->id[0] != '\0') {
                if ((rc = bl_invoice_view_make(tx, latest, true, &v)) != KS_OK ||
                    (rc = bl_invoice_view_seal(tx, &v)) != KS_OK) {
                        bl_invoice_view_free(&v);
                        return rc;
                }
                resp.latest_invoice = &v.m;
        }
        rc = ks_call_reply(tx->call, &resp.base);
        bl_invoice_view_free(&v);
        return rc;
}

/* ---- CreateSubscription ------------------------------------------------------------------ */

/* A new subscription, written once in the state its creation left it. */
static const char sql_insert[] =
    "INSERT INTO billing.subscriptions (tenant_id, id, customer_id, plan_id, quantity, state,"
    " currency, anchor_ms, period_n, period_start_ms, period_end_ms, trial_end_ms,"
    " test_clock_id, next_action_ms, latest_invoice_id, history_seq, created_ms, updated_ms)"
    " VALUES (billing.ctx_tenant(), $1::uuid, $2::uuid, $3::uuid, $4::int8, $5::int2, $6,"
    " $7::int8, $8::int8, $9::int8, $10::int8, $11::int8, NULLIF($12, '')::uuid,"
    " NULLIF($13::int8, 0), NULLIF($14, '')::uuid, $15::int4, $16::int8, $16::int8)";

static const char sql_clock_subs[] =
    "SELECT count(*) FROM billing.subscriptions WHERE tenant_id = billing.ctx_tenant()"
    " AND test_clock_id = $1::uuid";

static int insert_sub(bl_tx *tx, const bl_subscription *s)
{
        ks_pg_num q = ks_pg_num_of(s->quantity), st = ks_pg_num_of(s->state),
                  a = ks_pg_num_of(s->anchor_ms), n = ks_pg_num_of(s->period_n),
                  ps = ks_pg_num_of(s->period_start_ms), pe = ks_pg_num_of(s->period_end_ms),
                  te = ks_pg_num_of(s->trial_end_ms), na = ks_pg_num_of(s->next_action_ms),
                  hs = ks_pg_num_of(s->history_seq), cr = ks_pg_num_of(s->created_ms);
        const char *p[16] = {s->id,      s->customer_id,
                             s->plan_id, q.s,
                             st.s,       s->currency,
                             a.s,        n.s,
                             ps.s,       pe.s,
                             te.s,       s->test_clock_id,
                             na.s,       s->latest_invoice_id,
                             hs.s,       cr.s};

        return bl_defer_insert(tx, NULL, sql_insert, 16, p);
}

/* The anchor a request asks for, checked against the first billed instant. */
static int anchor_of(bl_tx *tx, int64_t asked, int64_t first, const bl_plan *plan, int64_t *out)
{
        int64_t next;

        if (asked == 0) {
                *out = first;
                return KS_OK;
        }
        asked = whole_second(asked);
        if (!bl_boundary(first / 1000, plan->interval, 1, &next) || asked < first ||
            asked >= next * 1000) {
                return bl_fail(tx, KS_INVALID_ARGUMENT,
                               "billing_anchor_unix_ms: after the start (or the trial's end) and"
                               " within one interval of it");
        }
        *out = asked;
        return KS_OK;
}

/* A customer on a test clock holds a bounded number of subscriptions (the clock runs them all). */
static int clock_room(bl_tx *tx, const bl_customer *cust)
{
        const char *p[1] = {cust->test_clock_id};
        PGresult *res = NULL;
        int rc;

        if (cust->test_clock_id[0] == '\0') {
                return KS_OK;
        }
        if ((rc = bl_exec(tx, sql_clock_subs, 1, p, &res)) != KS_OK) {
                return rc;
        }
        rc = ks_pg_int(res, 0, 0) >= BL_CLOCK_SUBS_MAX
                 ? bl_fail(tx, KS_FAILED_PRECONDITION,
                           "a test clock holds at most %d subscriptions", BL_CLOCK_SUBS_MAX)
                 : KS_OK;
        PQclear(res);
        return rc;
}

/* What the first invoice was made of, for the reply. */
typedef struct first_made {
        bl_invoice inv;
        bl_line line;
        size_t n_lines;
        bl_payment_made pay;
        bool charged;
} first_made;

/* A creation: its request, then what its transaction made, for the reply. */
typedef struct create_args {
        const Keelson__Billing__V1__CreateSubscriptionRequest *in;
        int64_t quantity;
        bl_subscription s;
        bl_plan plan;
        first_made f;
        /* its group's reads (create_reads), until load_inputs takes them */
        const char *cp[1], *pp[1];
        PGresult *cres, *pres;
} create_args;

/* The new subscription's first state, period and anchor, at now. */
static int first_period(bl_tx *tx, const create_args *a, const bl_plan *plan, int64_t now,
                        bl_subscription *s)
{
        int32_t days = a->in->trial_days == 0 ? plan->trial_days : a->in->trial_days;
        int64_t first = now;
        int rc;

        if (days > 0) {
                s->state = BL_SUB_TRIALING;
                s->trial_end_ms = now + (int64_t)days * BL_DAY_MS;
                first = s->trial_end_ms;
        } else {
                s->state = BL_SUB_ACTIVE;
        }
        if ((rc = anchor_of(tx, a->in->billing_anchor_unix_ms, first, plan, &s->anchor_ms)) !=
            KS_OK) {
                return rc;
        }
        if (s->state == BL_SUB_TRIALING) { /* the trial is the first period, free */
                s->period_n = -1;
                s->period_start_ms = now;
                s->period_end_ms = s->trial_end_ms;
                return KS_OK;
        }
        if (bl_sub_period_from(s, plan, now, &s->period_n, &s->period_start_ms,
                               &s->period_end_ms) != KS_OK) {
                return bl_fail(tx, KS_OUT_OF_RANGE, "period out of range");
        }
        return KS_OK;
}

/* The first invoice: the trial (free), or the first period (prorated before the anchor). */
static int first_invoice(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                         first_made *f)
{
        bl_line *line = &f->line;
        int rc;

        memset(f, 0, sizeof(*f));
        snprintf(f->inv.subscription_id, sizeof(f->inv.subscription_id), "%s", s->id);
        f->inv.reason = BL_REASON_CREATE;
        f->inv.period_start_ms = s->period_start_ms;
        f->inv.period_end_ms = s->period_end_ms;
        f->inv.auto_charge = true;
        if (s->state == BL_SUB_TRIALING || plan->price.model == BL_PRICE_GRADUATED) {
                line->kind = s->state == BL_SUB_TRIALING ? BL_LINE_SUBSCRIPTION : BL_LINE_USAGE;
                line->quantity = s->state == BL_SUB_TRIALING ? s->quantity : 0;
                line->taxable = true;
                line->period_start_ms = s->period_start_ms;
                line->period_end_ms = s->period_end_ms;
                snprintf(line->description, sizeof(line->description), "%s %s v%d",
                         s->state == BL_SUB_TRIALING ? "Free trial of"
                                                     : "Usage billed at the period's end:",
                         plan->code, plan->version);
                f->n_lines = 1;
        } else if (bl_sub_period_lines(s, plan, line, &f->n_lines) != KS_OK) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the period's amount would overflow");
        }
        if ((rc = bl_invoice_create(tx, cust, &f->inv, line, f->n_lines, s->created_ms)) != KS_OK ||
            (rc = bl_invoice_finalize(tx, cust, &f->inv, s->created_ms)) != KS_OK) {
                return rc;
        }
        snprintf(s->latest_invoice_id, sizeof(s->latest_invoice_id), "%s", f->inv.id);
        if (f->inv.state == BL_INV_OPEN && cust->payment_method[0] != '\0') {
                f->charged = true;
                return bl_invoice_charge(tx, cust, &f->inv, s, NULL, true, s->created_ms, &f->pay);
        }
        return KS_OK;
}

/*
 * The reply from what the call holds: no read. The invoice gets its number
 * as the transaction seals, here, as late as the reply allows.
 */
static int reply_created(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, first_made *f)
{
        Keelson__Billing__V1__SubscriptionResponse resp =
            KEELSON__BILLING__V1__SUBSCRIPTION_RESPONSE__INIT;
        Keelson__Billing__V1__Subscription m;
        Keelson__Billing__V1__Payment pm;
        bl_invoice_view v;
        int rc;

        if (f->charged) {
                bl_payment_message(&f->pay, &pm);
        }
        bl_sub_message(s, plan, &m);
        resp.subscription = &m;
        if ((rc = bl_invoice_view_fresh(&v, &f->inv, &f->line, f->n_lines,
                                        f->charged ? &pm : NULL)) != KS_OK) {
                rc = ks_call_oom(tx->call);
        } else if ((rc = bl_invoice_view_seal(tx, &v)) == KS_OK) {
                resp.latest_invoice = &v.m;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        bl_invoice_view_free(&v);
        return rc;
}

/* The reads of a creation's inputs: its customer, locked, and its plan, into a. */
static void input_reads(create_args *a, ks_pg_stmt s[2])
{
        a->cp[0] = a->in->customer_id;
        a->pp[0] = a->in->plan_id[0] != '\0' ? a->in->plan_id : a->in->plan_code;
        s[0] = (ks_pg_stmt){
            .sql = bl_customer_sql_locked, .n_params = 1, .params = a->cp, .out = &a->cres};
        s[1] = (ks_pg_stmt){.sql = a->in->plan_id[0] != '\0' ? bl_plan_sql_id : bl_plan_sql_code,
                            .n_params = 1,
                            .params = a->pp,
                            .out = &a->pres};
}

/* Drops the results of a's reads that no load_inputs took (a group given up). */
static void create_forget(void *arg)
{
        create_args *a = arg;

        PQclear(a->cres);
        PQclear(a->pres);
        a->cres = a->pres = NULL;
}

/* Whether a creation before args[i] in its group is for the same customer. */
static bool customer_before(void *const *args, int i)
{
        const create_args *a = args[i];

        for (int k = 0; k < i; k++) {
                if (strcmp(((const create_args *)args[k])->in->customer_id, a->in->customer_id) ==
                    0) {
                        return true;
                }
        }
        return false;
}

/*
 * The reads of a group's creations, every one's customer and plan, in one
 * round trip (with BEGIN): their writes then wait, deferred, for the seal,
 * which numbers every invoice in its insert. A customer's second creation
 * in the group reads for itself, after the first one's writes (its credit
 * balance may have been spent).
 */
static int create_reads(bl_tx *tx, void *const *args, int n)
{
        ks_pg_stmt s[KS_PG_PIPELINE_MAX / 2];
        int k = 0, rc;

        KS_ASSERT(n >= 1 && 2 * n + 1 <= KS_PG_PIPELINE_MAX / 2);
        for (int i = 0; i < n; i++) {
                if (!customer_before(args, i)) {
                        input_reads(args[i], &s[k]);
                        k += 2;
                }
        }
        bl_numbers_take_stmt(tx, n, &s[k++]); /* last: after the customers' locks */
        if ((rc = bl_pipeline(tx, s, k)) != KS_OK) {
                return rc;
        }
        return bl_numbers_taken(tx);
}

/*
 * The customer, locked, and the plan: read by its group's create_reads, or
 * else here in one round trip (the plan's read needs nothing of the
 * customer's); then refused in the order the request is checked: the
 * customer, then the plan.
 */
static int load_inputs(bl_tx *tx, create_args *a, bl_customer *cust, bl_plan *plan)
{
        ks_pg_stmt s[2];
        int rc, prc;

        if (a->cres == NULL) {
                input_reads(a, s);
                if ((rc = bl_pipeline(tx, s, 2)) != KS_OK) {
                        return rc;
                }
        }
        PGresult *cres = a->cres, *pres = a->pres;
        a->cres = a->pres = NULL; /* from here on bl_customer_from and bl_plan_from own them */
        if ((rc = bl_customer_from(tx, cres, cust)) != KS_OK || cust->archived) {
                PQclear(pres);
                if (rc == KS_NOT_FOUND) {
                        return bl_fail(tx, KS_NOT_FOUND, "customer not found");
                }
                return rc != KS_OK
                           ? rc
                           : bl_fail(tx, KS_FAILED_PRECONDITION, "the customer is archived");
        }
        if ((prc = bl_plan_from(tx, pres, plan)) == KS_NOT_FOUND) {
                return bl_fail(tx, KS_NOT_FOUND, "plan not found");
        }
        if (prc == KS_OK && plan->archived) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the plan is archived");
        }
        return prc;
}

/* The creation up to its reply: every row it writes, its invoice still to number. */
static int create_body(bl_tx *tx, void *arg)
{
        create_args *a = arg;
        bl_subscription *s = &a->s;
        bl_customer cust;
        int64_t now;
        int rc;

        if ((rc = load_inputs(tx, a, &cust, &a->plan)) != KS_OK) {
                return rc;
        }
        if (a->plan.currency != cust.currency) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "the plan is in %s and the customer in %s", a->plan.currency->code,
                               cust.currency->code);
        }
        if (a->plan.price.model != BL_PRICE_PER_UNIT && a->quantity != 1) {
                return bl_fail(tx, KS_INVALID_ARGUMENT,
                               "quantity: only a per-unit plan takes a quantity");
        }
        if ((rc = clock_room(tx, &cust)) != KS_OK ||
            (rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK) {
                return rc;
        }
        memset(s, 0, sizeof(*s));
        if (ks_uuid_v7(s->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        snprintf(s->customer_id, sizeof(s->customer_id), "%s", cust.id);
        snprintf(s->plan_id, sizeof(s->plan_id), "%s", a->plan.id);
        snprintf(s->currency, sizeof(s->currency), "%s", cust.currency->code);
        snprintf(s->test_clock_id, sizeof(s->test_clock_id), "%s", cust.test_clock_id);
        s->quantity = a->quantity;
        s->created_ms = s->updated_ms = now = whole_second(now);
        /* The row is written once, at the end, as its first invoice and charge left it. */
        if ((rc = first_period(tx, a, &a->plan, now, s)) != KS_OK ||
            (rc = bl_sub_record(tx, s, -1, "create", now, NULL, NULL)) != KS_OK ||
            (rc = first_invoice(tx, s, &a->plan, &cust, &a->f)) != KS_OK) {
                return rc;
        }
        /* Its only invoice is the first: its retry, if any, is the only one. */
        bl_sub_plan_next_known(s, a->f.inv.state == BL_INV_OPEN ? a->f.inv.next_attempt_ms : 0);
        if ((rc = insert_sub(tx, s)) != KS_OK) {
                return rc;
        }
        return bl_event_summary(tx, "CreateSubscription");
}

static int create_finish(bl_tx *tx, void *arg)
{
        create_args *a = arg;

        return reply_created(tx, &a->s, &a->plan, &a->f);
}

static int create_tx(bl_tx *tx, void *arg)
{
        int rc = create_body(tx, arg);

        return rc == KS_OK ? create_finish(tx, arg) : rc;
}

/* The request's own checks, before any transaction; a->in and a->quantity set. */
static int create_check(ks_call *call, create_args *a)
{
        const Keelson__Billing__V1__CreateSubscriptionRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        a->in = in;
        a->quantity = in->quantity == 0 ? 1 : in->quantity;
        if (!bl_id_valid("customer_id", in->customer_id, err, sizeof(err)) ||
            (in->plan_id[0] != '\0' ? !bl_id_valid("plan_id", in->plan_id, err, sizeof(err))
                                    : !bl_plan_code_valid(in->plan_code, err, sizeof(err)))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (a->quantity < 1 || a->quantity > BL_QUANTITY_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "quantity: 1 to %d",
                                    BL_QUANTITY_MAX);
        }
        if (in->trial_days < -1 || in->trial_days > BL_TRIAL_DAYS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "trial_days: -1 (none), 0 (the plan's) or 1 to %d",
                                    BL_TRIAL_DAYS_MAX);
        }
        if (in->billing_anchor_unix_ms < 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "billing_anchor_unix_ms: must not be negative");
        }
        return KS_OK;
}

int bl_create_subscription(ks_call *call)
{
        create_args *a = calloc(1, sizeof(*a));
        int rc;

        if (a == NULL) {
                return ks_call_oom(call);
        }
        if ((rc = create_check(call, a)) == KS_OK) {
                rc = bl_tx_run(call, create_tx, a);
        }
        free(a);
        return rc;
}

/* A group member, in the order its customer's row is locked. */
typedef struct member {
        ks_call *call;
        create_args *args;
} member;

static int by_customer(const void *x, const void *y)
{
        const member *a = x, *b = y;

        return strcmp(a->args->in->customer_id, b->args->in->customer_id);
}

/*
 * A tenant's queued creations in one transaction (bl_tx_run_group), their
 * customers locked in the order of their ids, as every group locks them:
 * two groups on two replicas never wait for each other crosswise.
 */
void bl_create_subscriptions(ks_call *const *calls, int *codes, int n)
{
        static const bl_group_fns fns = {create_tx, create_reads, create_body, create_finish,
                                         create_forget};
        create_args *args = calloc((size_t)n, sizeof(*args));
        member *m = calloc((size_t)n, sizeof(*m));
        ks_call **gc = calloc((size_t)n, sizeof(*gc));
        void **ga = calloc((size_t)n, sizeof(*ga));
        int *gcodes = calloc((size_t)n, sizeof(*gcodes));
        int k = 0;

        if (args == NULL || m == NULL || gc == NULL || ga == NULL || gcodes == NULL) {
                for (int i = 0; i < n; i++) {
                        codes[i] = bl_create_subscription(calls[i]);
                }
                goto out;
        }
        for (int i = 0; i < n; i++) {
                if ((codes[i] = create_check(calls[i], &args[i])) == KS_OK) {
                        m[k++] = (member){calls[i], &args[i]};
                }
        }
        qsort(m, (size_t)k, sizeof(*m), by_customer);
        for (int i = 0; i < k; i++) {
                gc[i] = m[i].call;
                ga[i] = m[i].args;
        }
        if (k == 1) {
                gcodes[0] = bl_tx_run(gc[0], create_tx, ga[0]);
        } else if (k > 1) {
                bl_tx_run_group(gc, ga, k, &fns, gcodes);
        }
        for (int i = 0; i < k; i++) { /* each code to its call */
                codes[m[i].args - args] = gcodes[i];
        }
out:
        free(gcodes);
        free(ga);
        free(gc);
        free(m);
        free(args);
}

/* ---- GetSubscription --------------------------------------------------------------------- */

static int not_found(bl_tx *tx)
{
        return bl_fail(tx, KS_NOT_FOUND, "subscription not found");
}

/* The subscription and its plan in one read. */
static int get_tx(bl_tx *tx, void *arg)
{
        const char *p[1] = {arg};
        PGresult *sres = NULL, *pres = NULL;
        const ks_pg_stmt reads[2] = {
            {.sql = bl_sub_sql_id, .n_params = 1, .params = p, .out = &sres},
            {.sql = bl_plan_sql_of_sub, .n_params = 1, .params = p, .out = &pres}};
        bl_subscription s;
        bl_plan plan;
        int rc;

        if ((rc = bl_pipeline(tx, reads, 2)) != KS_OK) {
                return rc;
        }
        if (PQntuples(sres) != 1) {
                PQclear(sres);
                PQclear(pres);
                return not_found(tx);
        }
        bl_sub_read(sres, 0, &s);
        PQclear(sres);
        if ((rc = bl_plan_from(tx, pres, &plan)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        return bl_reply_subscription(tx, &s, &plan, NULL);
}

int bl_get_subscription(ks_call *call)
{
        const Keelson__Billing__V1__GetSubscriptionRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run_reads(call, get_tx, in->id);
}

/* ---- Cancel, Pause, Resume --------------------------------------------------------------- */

typedef enum action { A_CANCEL_NOW, A_CANCEL_AT_END, A_WITHDRAW, A_PAUSE, A_RESUME } action;

typedef struct action_args {
        const char *id;
        action what;
} action_args;

/* Cancel now: the unused rest of a period paid in advance comes back as credit. */
/*
 * Cancel now: an active subscription's unused rest of the period comes back
 * as credit (a past_due one's is not: its period was never paid, and its
 * open invoices stay owed); a metered plan's usage of the period is billed,
 * all of it (usage is never recorded past now, nor after a cancellation).
 */
static int cancel_now(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                      int64_t now, bl_invoice *inv)
{
        int rc;

        if (s->state == BL_SUB_ACTIVE &&
            (rc = bl_proration_credit(tx, s, plan, now, "Unused time after cancellation")) !=
                KS_OK) {
                return rc;
        }
        if (s->state != BL_SUB_TRIALING &&
            (rc = bl_sub_bill(tx, s, plan, cust, BL_REASON_CANCEL, s->period_start_ms,
                              s->period_end_ms, now, inv)) != KS_OK) {
                return rc;
        }
        s->canceled_ms = now;
        return bl_sub_move(tx, s, BL_SE_CANCEL, now, inv->id[0] != '\0' ? inv->id : NULL,
                           "canceled now");
}

/*
 * Resumed: the period goes on; or, when it ended while paused, a new one
 * starts now, on an invoice that also bills a metered plan's usage of the
 * period that ended (recorded before the pause) — unless a cancellation at
 * period end was asked for, which then happens.
 */
static int resume(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                  int64_t now, bl_invoice *inv)
{
        int64_t used_from = s->period_start_ms, used_to = s->period_end_ms;
        int rc;

        s->paused_ms = 0;
        if (now < s->period_end_ms) {
                return bl_sub_move(tx, s, BL_SE_RESUME, now, NULL, "the period goes on");
        }
        if (s->cancel_at_period_end) {
                if ((rc = bl_sub_bill(tx, s, plan, cust, BL_REASON_CANCEL, used_from, used_to, now,
                                      inv)) != KS_OK) {
                        return rc;
                }
                s->canceled_ms = now;
                return bl_sub_move(tx, s, BL_SE_CANCEL, now, inv->id[0] != '\0' ? inv->id : NULL,
                                   "its period ended while paused");
        }
        s->anchor_ms = now;
        s->period_n = 0;
        s->period_start_ms = now;
        if ((rc = bl_sub_period_from(s, plan, now, &s->period_n, &s->period_start_ms,
                                     &s->period_end_ms)) != KS_OK) {
                return bl_fail(tx, KS_OUT_OF_RANGE, "period out of range");
        }
        if ((rc = bl_invoice_new_id(tx, inv)) != KS_OK ||
            (rc = bl_sub_move(tx, s, BL_SE_RESUME, now, inv->id, "a new period from now")) !=
                KS_OK) {
                return rc;
        }
        return bl_sub_bill(tx, s, plan, cust, BL_REASON_CYCLE, used_from, used_to, now, inv);
}

static int act(bl_tx *tx, action what, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
               int64_t now, bl_invoice *inv)
{
        static const bl_sub_event moves[] = {[A_CANCEL_NOW] = BL_SE_CANCEL,
                                             [A_CANCEL_AT_END] = BL_SE_CANCEL,
                                             [A_PAUSE] = BL_SE_PAUSE,
                                             [A_RESUME] = BL_SE_RESUME};
        bl_sub_state to;

        /* The table first: nothing is billed or charged for a move it then refuses. */
        if (what != A_WITHDRAW && !bl_sub_next(s->state, moves[what], &to)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "cannot %s a subscription that is %s",
                               bl_sub_event_name(moves[what]), bl_sub_state_name(s->state));
        }

        switch (what) {
        case A_CANCEL_NOW:
                return cancel_now(tx, s, plan, cust, now, inv);
        case A_CANCEL_AT_END:
                s->cancel_at_period_end = true;
                return KS_OK;
        case A_WITHDRAW:
                if (!s->cancel_at_period_end || s->state == BL_SUB_CANCELED) {
                        return bl_fail(tx, KS_FAILED_PRECONDITION,
                                       "no cancellation at period end to withdraw");
                }
                s->cancel_at_period_end = false;
                return KS_OK;
        case A_PAUSE:
                s->paused_ms = now;
                return bl_sub_move(tx, s, BL_SE_PAUSE, now, NULL, NULL);
        case A_RESUME:
                return resume(tx, s, plan, cust, now, inv);
        }
        return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
}

/* The action on subscription a->id, locked, saved; *s, *plan and *inv as they are after it. */
static int action_do(bl_tx *tx, const action_args *a, bl_subscription *s, bl_plan *plan,
                     bl_invoice *inv)
{
        bl_customer cust;
        int64_t now;
        int rc;

        if ((rc = bl_sub_load(tx, a->id, true, s)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        if ((rc = bl_customer_load(tx, s->customer_id, true, &cust)) != KS_OK ||
            (rc = bl_plan_load(tx, s->plan_id, plan)) != KS_OK ||
            (rc = bl_now_for(tx, s->test_clock_id, &now)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        now = whole_second(now);
        if ((rc = act(tx, a->what, s, plan, &cust, now, inv)) != KS_OK ||
            (rc = bl_sub_plan_next(tx, s)) != KS_OK || (rc = bl_sub_save(tx, s, now)) != KS_OK) {
                return rc;
        }
        return KS_OK;
}

static int action_tx(bl_tx *tx, void *arg)
{
        bl_invoice inv = {.id = ""};
        bl_subscription s;
        bl_plan plan;
        int rc;

        if ((rc = action_do(tx, arg, &s, &plan, &inv)) != KS_OK) {
                return rc;
        }
        if (inv.id[0] != '\0' && (rc = bl_invoice_load(tx, inv.id, false, &inv)) != KS_OK) {
                return rc;
        }
        return bl_reply_subscription(tx, &s, &plan, &inv);
}

int bl_sub_cancel_as_provider(bl_tx *tx, const bl_subscription *s, bl_provider_cancel how,
                              bool *changed)
{
        static const action what[] = {[BL_PROVIDER_CANCEL_NOW] = A_CANCEL_NOW,
                                      [BL_PROVIDER_CANCEL_AT_END] = A_CANCEL_AT_END,
                                      [BL_PROVIDER_CANCEL_WITHDRAW] = A_WITHDRAW};
        bl_invoice inv = {.id = ""};
        bl_subscription after;
        bl_plan plan;
        const action_args a = {.id = s->id, .what = what[how]};

        /* Already so: nothing to do, and no refusal (the provider says what is, not what to do). */
        *changed = !(s->state == BL_SUB_CANCELED ||
                     (how == BL_PROVIDER_CANCEL_AT_END && s->cancel_at_period_end) ||
                     (how == BL_PROVIDER_CANCEL_WITHDRAW && !s->cancel_at_period_end));
        return *changed ? action_do(tx, &a, &after, &plan, &inv) : KS_OK;
}

static int run_action(ks_call *call, const char *id, action what)
{
        action_args a = {.id = id, .what = what};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, action_tx, &a);
}

int bl_cancel_subscription(ks_call *call)
{
        const Keelson__Billing__V1__CancelSubscriptionRequest *in = (const void *)call->in;

        if (in->withdraw && in->at_period_end) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "withdraw: not with at_period_end (withdraw takes one back)");
        }
        return run_action(call, in->id,
                          in->withdraw ? A_WITHDRAW
                                       : (in->at_period_end ? A_CANCEL_AT_END : A_CANCEL_NOW));
}

int bl_pause_subscription(ks_call *call)
{
        const Keelson__Billing__V1__PauseSubscriptionRequest *in = (const void *)call->in;

        return run_action(call, in->id, A_PAUSE);
}

int bl_resume_subscription(ks_call *call)
{
        const Keelson__Billing__V1__ResumeSubscriptionRequest *in = (const void *)call->in;

        return run_action(call, in->id, A_RESUME);
}

/* ---- ListSubscriptions ------------------------------------------------------------------- */

#define SUB_SELECT                                                                                 \
        "SELECT s.id, s.customer_id, s.plan_id, s.quantity, s.state, s.currency, s.anchor_ms,"     \
        " s.period_n, s.period_start_ms, s.period_end_ms, s.trial_end_ms,"                         \
        " s.cancel_at_period_end, s.canceled_ms, s.paused_ms, s.test_clock_id,"                    \
        " s.next_action_ms, s.latest_invoice_id, s.history_seq, s.created_ms, s.updated_ms,"       \
        " p.code, p.version FROM billing.subscriptions s JOIN billing.plans p"                     \
        " ON p.tenant_id = s.tenant_id AND p.id = s.plan_id"

/* A list item: the message and the row it points into (the page's result keeps both alive). */
typedef struct sub_item {
        Keelson__Billing__V1__Subscription m;
        bl_subscription s;
        bl_plan plan;
} sub_item;

static void list_item(void *item, const PGresult *r, int i)
{
        sub_item *it = item;

        bl_sub_read(r, i, &it->s);
        memset(&it->plan, 0, sizeof(it->plan));
        snprintf(it->plan.code, sizeof(it->plan.code), "%s", ks_pg_text(r, i, 20));
        it->plan.version = (int32_t)ks_pg_int(r, i, 21);
        bl_sub_message(&it->s, &it->plan, &it->m);
}

#define SUB_PAGE                                                                                   \
        {                                                                                          \
                .name = "keelson.billing.v1.BillingService/ListSubscriptions",                     \
                .page_size_default = KS_LIST_PAGE_SIZE_DEFAULT,                                    \
                .page_size_max = KS_LIST_PAGE_SIZE_MAX, .n_keys = 2,                               \
                .keys = {KS_LIST_DESC_INT64(18), KS_LIST_DESC_UUID(0)},                            \
                .item_size = sizeof(sub_item), .item = list_item                                   \
        }
#define SUB_AFTER KS_LIST_BEFORE("s.created_ms", "s.id")
#define SUB_STATE " AND ($4::int2 < 0 OR s.state = $4::int2)"
#define SUB_ORDER " ORDER BY s.created_ms DESC, s.id DESC LIMIT $3::int4"

static const ks_list_method list_all = {
    .page = SUB_PAGE,
    .sql = SUB_SELECT " WHERE s.tenant_id = billing.ctx_tenant()" SUB_AFTER SUB_STATE SUB_ORDER,
    .items_field = "subscriptions",
};

static const ks_list_method list_by_customer = {
    .page = SUB_PAGE,
    .sql = SUB_SELECT
    " WHERE s.tenant_id = billing.ctx_tenant() AND s.customer_id = $5::uuid" SUB_AFTER SUB_STATE
        SUB_ORDER,
    .items_field = "subscriptions",
};

int bl_list_subscriptions(ks_call *call)
{
        const Keelson__Billing__V1__ListSubscriptionsRequest *in = (const void *)call->in;
        bl_sub_state st = BL_SUB_STATES;
        char err[BL_ERR_MAX];
        bool by_customer = in->customer_id[0] != '\0';

        if (by_customer && !bl_id_valid("customer_id", in->customer_id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->state[0] != '\0' && !bl_sub_state_parse(in->state, &st)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "state: trialing, active, past_due, paused or canceled");
        }
        ks_pg_num state = ks_pg_num_of(in->state[0] != '\0' ? (int64_t)st : -1);
        const char *filters[2] = {state.s, in->customer_id};
        return ks_list_reply(call, by_customer ? &list_by_customer : &list_all, in->page_size,
                             in->page_token, filters, by_customer ? 2 : 1, &bl_list_runner);
}

/* ---- ListSubscriptionHistory --------------------------------------------------------------- */

static void history_item(void *item, const PGresult *r, int i)
{
        Keelson__Billing__V1__SubscriptionHistoryEntry *e = item;
        int from = (int)ks_pg_int(r, i, 1);

        keelson__billing__v1__subscription_history_entry__init(e);
        e->seq = ks_pg_int(r, i, 0);
        e->from_state = (char *)(from < 0 ? "" : bl_sub_state_name((bl_sub_state)from));
        e->to_state = (char *)bl_sub_state_name((bl_sub_state)ks_pg_int(r, i, 2));
        e->event = (char *)ks_pg_text(r, i, 3);
        e->at_unix_ms = ks_pg_int(r, i, 4);
        e->invoice_id = (char *)ks_pg_text(r, i, 5);
        e->detail = (char *)ks_pg_text(r, i, 6);
}

/* Oldest first, by seq; a subscription of another tenant has no rows (and is not_found). */
static const ks_list_method list_history = {
    .page = {.name = "keelson.billing.v1.BillingService/ListSubscriptionHistory",
             .page_size_default = KS_LIST_PAGE_SIZE_DEFAULT,
             .page_size_max = KS_LIST_PAGE_SIZE_MAX,
             .n_keys = 1,
             .keys = {KS_LIST_ASC_INT64(0)},
             .item_size = sizeof(Keelson__Billing__V1__SubscriptionHistoryEntry),
             .item = history_item},
    .sql = "SELECT seq, from_state, to_state, event, at_ms, COALESCE(invoice_id::text, ''), detail"
           " FROM billing.subscription_history WHERE tenant_id = billing.ctx_tenant()"
           " AND subscription_id = $3::uuid AND seq > $1::int8"
           " ORDER BY seq LIMIT $2::int4",
    .items_field = "entries",
};

typedef struct history_query {
        const ks_pg_stmt *query;
        const char *id;
} history_query;

static const char sql_sub_exists[] = "SELECT 1 FROM billing.subscriptions"
                                     " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

/*
 * Whether the subscription is there, and the page, in one read: another
 * tenant's is not_found, not an empty list.
 */
static int history_tx(bl_tx *tx, void *arg)
{
        history_query *q = arg;
        const char *p[1] = {q->id};
        PGresult *found = NULL;
        const ks_pg_stmt reads[2] = {
            {.sql = sql_sub_exists, .n_params = 1, .params = p, .out = &found}, *q->query};
        int rc;

        if ((rc = bl_pipeline(tx, reads, 2)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(found) == 1 ? KS_OK : not_found(tx);
        PQclear(found);
        return rc;
}

static int history_run(ks_call *call, const ks_pg_stmt *query, void *run_arg)
{
        history_query q = {query, run_arg};

        return bl_tx_run_reads(call, history_tx, &q);
}

int bl_list_subscription_history(ks_call *call)
{
        const Keelson__Billing__V1__ListSubscriptionHistoryRequest *in = (const void *)call->in;
        const ks_list_runner runner = {
            .run = history_run, .run_arg = in->id, .internal_msg = BL_INTERNAL_MSG};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        const char *filters[1] = {in->id};
        return ks_list_reply(call, &list_history, in->page_size, in->page_token, filters, 1,
                             &runner);
}
