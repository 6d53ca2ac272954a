/*
 * The steps every path that bills shares: an invoice made (its lines taxed
 * and totalled), finalized (numbered, customer credit applied, posted),
 * charged, paid; and what an invoice's fate does to its subscription.
 * CreateSubscription, renewals, trial ends, dunning retries, plan changes,
 * cancellations and one-off invoices all go through these, so an invoice
 * is made one way.
 *
 * Rounding (docs/api.md): each taxable line's tax is its amount times the
 * customer's rate, rounded half away from zero on the line (bl_tax); the
 * invoice's subtotal, tax and total are the sums of its lines, so lines
 * always add up to the totals exactly.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_crypto.h"

void bl_date_text(int64_t ms, char out[16])
{
        bl_civil c = bl_civil_from_unix(ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000));

        snprintf(out, 16, "%04lld-%02d-%02d", (long long)c.year % 10000, c.month % 100,
                 c.day % 100);
}

int bl_invoice_new_id(bl_tx *tx, bl_invoice *inv)
{
        if (ks_uuid_v4(inv->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        return KS_OK;
}

/* Taxes of lines (filled in) and the totals of all of them; false on overflow. */
static bool tax_lines(const bl_customer *cust, bl_line *lines, size_t n, bl_totals *t)
{
        bl_line_amount la[BL_LINES_MAX] = {{0}};
        int64_t taxes[BL_LINES_MAX];

        KS_ASSERT(n <= BL_LINES_MAX);
        for (size_t i = 0; i < n; i++) {
                la[i] = (bl_line_amount){.amount = lines[i].amount, .taxable = lines[i].taxable};
        }
        if (!bl_totals_of(la, n, cust->tax_rate_bp, taxes, t)) {
                return false;
        }
        for (size_t i = 0; i < n; i++) {
                lines[i].tax = taxes[i];
        }
        return true;
}

static const char sql_insert_invoice[] =
    "INSERT INTO billing.invoices (tenant_id, id, customer_id, subscription_id, state,"
    " billing_reason, currency, description, subtotal, tax, total, n_lines, period_start_ms,"
    " period_end_ms, auto_charge, created_ms) VALUES (billing.ctx_tenant(), $1::uuid, $2::uuid,"
    " NULLIF($3, '')::uuid, 0, $4, $5, $6, $7::int8, $8::int8, $9::int8, $10::int4, $11::int8,"
    " $12::int8, $13::bool, $14::int8)";

/* The lines from line_no first on: one statement over arrays, whatever their number. */
static const char sql_insert_lines[] =
    "INSERT INTO billing.invoice_lines (tenant_id, invoice_id, line_no, kind, description,"
    " quantity, unit_amount, amount, tax, taxable, period_start_ms, period_end_ms)"
    " SELECT billing.ctx_tenant(), $1::uuid, $2::int4 + o - 1, k, d, q, u, a, t, x, ps, pe"
    " FROM unnest($3::text[], $4::text[], $5::int8[], $6::int8[], $7::int8[], $8::int8[],"
    " $9::bool[], $10::int8[], $11::int8[]) WITH ORDINALITY AS l(k, d, q, u, a, t, x, ps, pe, o)";

typedef struct line_arrays {
        bl_arr a[9];
} line_arrays;

static void line_arrays_free(line_arrays *la)
{
        for (int i = 0; i < 9; i++) {
                bl_arr_free(&la->a[i]);
        }
}

/* The statement that inserts lines[0..n) as line_no first.. of invoice id. */
static int lines_stmt(const char *id, const bl_num *first, const bl_line *lines, size_t n,
                      line_arrays *la, const char *params[11])
{
        memset(la, 0, sizeof(*la));
        for (size_t i = 0; i < n; i++) {
                const bl_line *l = &lines[i];
                bl_arr_text(&la->a[0], bl_line_kind_name(l->kind));
                bl_arr_text(&la->a[1], l->description);
                bl_arr_int(&la->a[2], l->quantity);
                bl_arr_int(&la->a[3], l->unit_amount);
                bl_arr_int(&la->a[4], l->amount);
                bl_arr_int(&la->a[5], l->tax);
                bl_arr_text(&la->a[6], l->taxable ? "t" : "f");
                bl_arr_int(&la->a[7], l->period_start_ms);
                bl_arr_int(&la->a[8], l->period_end_ms);
        }
        params[0] = id;
        params[1] = first->s;
        for (int i = 0; i < 9; i++) {
                if ((params[2 + i] = bl_arr_done(&la->a[i])) == NULL) {
                        return KS_RESOURCE_EXHAUSTED;
                }
        }
        return KS_OK;
}

int bl_invoice_create(bl_tx *tx, const bl_customer *cust, bl_invoice *inv, bl_line *lines, size_t n,
                      int64_t now_ms)
{
        bl_totals t;
        line_arrays la = {0};
        const char *lp[11];
        int rc;

        if (n > BL_LINES_MAX) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "an invoice holds at most %d lines",
                               BL_LINES_MAX);
        }
        if (!tax_lines(cust, lines, n, &t)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the invoice's totals would overflow");
        }
        if (inv->id[0] == '\0' && (rc = bl_invoice_new_id(tx, inv)) != KS_OK) {
                return rc;
        }
        inv->state = BL_INV_DRAFT;
        inv->currency = cust->currency;
        snprintf(inv->customer_id, sizeof(inv->customer_id), "%s", cust->id);
        inv->subtotal = t.subtotal;
        inv->tax = t.tax;
        inv->total = t.total;
        inv->n_lines = (int32_t)n;
        inv->created_ms = now_ms;
        bl_num sub = bl_num_of(inv->subtotal), tax = bl_num_of(inv->tax),
               tot = bl_num_of(inv->total), nl = bl_num_of(inv->n_lines),
               ps = bl_num_of(inv->period_start_ms), pe = bl_num_of(inv->period_end_ms),
               cr = bl_num_of(now_ms), first = bl_num_of(1);
        const char *ip[14] = {inv->id,
                              inv->customer_id,
                              inv->subscription_id,
                              bl_reason_name(inv->reason),
                              inv->currency->code,
                              inv->description,
                              sub.s,
                              tax.s,
                              tot.s,
                              nl.s,
                              ps.s,
                              pe.s,
                              inv->auto_charge ? "t" : "f",
                              cr.s};
        if (lines_stmt(inv->id, &first, lines, n, &la, lp) != KS_OK) {
                line_arrays_free(&la);
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        const ks_pg_stmt s[2] = {{.sql = sql_insert_invoice, .n_params = 14, .params = ip},
                                 {.sql = sql_insert_lines, .n_params = 11, .params = lp}};
        rc = bl_pipeline(tx, s, n > 0 ? 2 : 1);
        line_arrays_free(&la);
        return rc;
}

static const char sql_lines_of[] =
    "SELECT kind, amount, taxable FROM billing.invoice_lines"
    " WHERE tenant_id = billing.ctx_tenant() AND invoice_id = $1::uuid ORDER BY line_no";

static const char sql_retax[] =
    "UPDATE billing.invoice_lines l SET tax = t.tax FROM unnest($2::int8[]) WITH ORDINALITY"
    " AS t(tax, o) WHERE l.tenant_id = billing.ctx_tenant() AND l.invoice_id = $1::uuid"
    " AND l.line_no = t.o AND l.tax <> t.tax";

/*
 * A draft's lines so far and the new ones, taxed and totalled together
 * (each line's tax depends on nothing but itself, but the totals are the
 * sums of all of them).
 */
int bl_invoice_add_lines(bl_tx *tx, const bl_customer *cust, bl_invoice *inv, bl_line *lines,
                         size_t n)
{
        PGresult *res = NULL;
        const char *p[1] = {inv->id};
        size_t old;
        int rc;

        if ((rc = bl_exec(tx, sql_lines_of, 1, p, &res)) != KS_OK) {
                return rc;
        }
        old = (size_t)PQntuples(res);
        if (old + n > BL_LINES_MAX) {
                PQclear(res);
                return bl_fail(tx, KS_FAILED_PRECONDITION, "an invoice holds at most %d lines",
                               BL_LINES_MAX);
        }
        bl_line *v = calloc(old + n + 1, sizeof(*v));
        if (v == NULL) {
                PQclear(res);
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        for (size_t i = 0; i < old; i++) {
                v[i].amount = bl_int(res, (int)i, 1);
                v[i].taxable = bl_bool(res, (int)i, 2);
        }
        PQclear(res);
        memcpy(v + old, lines, n * sizeof(*v));
        rc = KS_OK;
        bl_totals t;
        if (!tax_lines(cust, v, old + n, &t)) {
                rc = bl_fail(tx, KS_FAILED_PRECONDITION, "the invoice's totals would overflow");
        }
        bl_arr taxes = {0};
        for (size_t i = 0; rc == KS_OK && i < old; i++) {
                bl_arr_int(&taxes, v[i].tax);
        }
        line_arrays la = {0};
        const char *lp[11];
        bl_num first = bl_num_of((int64_t)old + 1);

        if (rc == KS_OK && (lines_stmt(inv->id, &first, v + old, n, &la, lp) != KS_OK ||
                            bl_arr_done(&taxes) == NULL)) {
                rc = tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        if (rc == KS_OK) {
                const char *tp[2] = {inv->id, taxes.s};
                const ks_pg_stmt s[2] = {{.sql = sql_retax, .n_params = 2, .params = tp},
                                         {.sql = sql_insert_lines, .n_params = 11, .params = lp}};
                rc = bl_pipeline(tx, s, 2);
                inv->subtotal = t.subtotal;
                inv->tax = t.tax;
                inv->total = t.total;
                inv->n_lines = (int32_t)(old + n);
        }
        if (rc == KS_OK) {
                rc = bl_invoice_save(tx, inv);
        }
        line_arrays_free(&la);
        bl_arr_free(&taxes);
        free(v);
        return rc;
}

static const char sql_save[] =
    "UPDATE billing.invoices SET number = NULLIF($2, ''), state = $3::int2, subtotal = $4::int8,"
    " tax = $5::int8, total = $6::int8, balance_applied = $7::int8, amount_due = $8::int8,"
    " amount_paid = $9::int8, amount_credited = $10::int8, n_lines = $11::int4,"
    " attempt_count = $12::int4, next_attempt_ms = NULLIF($13::int8, 0),"
    " finalized_ms = $14::int8, paid_ms = $15::int8, voided_ms = $16::int8,"
    " uncollectible_ms = $17::int8, auto_charge = $18::bool"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

int bl_invoice_save(bl_tx *tx, const bl_invoice *inv)
{
        bl_num st = bl_num_of(inv->state), sub = bl_num_of(inv->subtotal),
               tax = bl_num_of(inv->tax), tot = bl_num_of(inv->total),
               ba = bl_num_of(inv->balance_applied), due = bl_num_of(inv->amount_due),
               paid = bl_num_of(inv->amount_paid), cred = bl_num_of(inv->amount_credited),
               nl = bl_num_of(inv->n_lines), ac = bl_num_of(inv->attempt_count),
               na = bl_num_of(inv->next_attempt_ms), fin = bl_num_of(inv->finalized_ms),
               pd = bl_num_of(inv->paid_ms), vd = bl_num_of(inv->voided_ms),
               un = bl_num_of(inv->uncollectible_ms);
        const char *p[18] = {
            inv->id, inv->number, st.s,   sub.s,  tax.s, tot.s,
            ba.s,    due.s,       paid.s, cred.s, nl.s,  ac.s,
            na.s,    fin.s,       pd.s,   vd.s,   un.s,  inv->auto_charge ? "t" : "f"};

        return bl_exec(tx, sql_save, 18, p, NULL);
}

int bl_invoice_move(bl_tx *tx, bl_invoice *inv, bl_inv_event ev, int64_t at_ms)
{
        bl_inv_state to;

        if (!bl_inv_next(inv->state, ev, &to)) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "cannot %s an invoice that is %s",
                               bl_inv_event_name(ev), bl_inv_state_name(inv->state));
        }
        inv->state = to;
        if (to == BL_INV_PAID) {
                inv->paid_ms = at_ms;
        } else if (to == BL_INV_VOID) {
                inv->voided_ms = at_ms;
        } else if (to == BL_INV_UNCOLLECTIBLE) {
                inv->uncollectible_ms = at_ms;
        } else if (to == BL_INV_OPEN) {
                inv->finalized_ms = at_ms;
        }
        if (to != BL_INV_OPEN) {
                inv->next_attempt_ms = 0; /* dunning ends with the invoice's life */
        }
        return KS_OK;
}

/* ---- finalize ------------------------------------------------------------------------------ */

/* The next number of kind (1 invoices, 2 credit notes) in the tenant, gapless. */
static const char sql_next_number[] =
    "INSERT INTO billing.counters AS c (tenant_id, kind, last) VALUES (billing.ctx_tenant(),"
    " $1::int2, 1) ON CONFLICT (tenant_id, kind) DO UPDATE SET last = c.last + 1 RETURNING last";

static const char sql_customer_balance[] =
    "UPDATE billing.customers SET credit_balance = $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

int bl_next_number(bl_tx *tx, int kind, const char *prefix, char *out, size_t out_len)
{
        bl_num k = bl_num_of(kind);
        const char *p[1] = {k.s};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_next_number, 1, p, &res)) != KS_OK) {
                return rc;
        }
        snprintf(out, out_len, "%s-%06lld", prefix, (long long)bl_int(res, 0, 0));
        PQclear(res);
        return KS_OK;
}

/* Customer credit against the total: what it covers, or what a negative total adds to it. */
static int apply_balance(bl_tx *tx, bl_customer *cust, bl_invoice *inv)
{
        int64_t before = cust->credit_balance;

        inv->balance_applied = 0;
        if (inv->total > 0) {
                inv->balance_applied = before < inv->total ? before : inv->total;
                cust->credit_balance = before - inv->balance_applied;
                inv->amount_due = inv->total - inv->balance_applied;
        } else {
                inv->amount_due = 0;
                if (!bl_sub(before, inv->total, &cust->credit_balance)) {
                        return bl_fail(tx, KS_FAILED_PRECONDITION,
                                       "the customer's credit balance would overflow");
                }
        }
        if (cust->credit_balance == before) {
                return KS_OK;
        }
        bl_num b = bl_num_of(cust->credit_balance);
        const char *p[2] = {cust->id, b.s};
        return bl_exec(tx, sql_customer_balance, 2, p, NULL);
}

static const char sql_customer_credit[] =
    "UPDATE billing.customers SET credit_balance = credit_balance + $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
    " AND credit_balance <= 9223372036854775807 - $2::int8 RETURNING credit_balance";

int bl_customer_credit(bl_tx *tx, const char *customer_id, int64_t amount)
{
        bl_num a = bl_num_of(amount);
        const char *p[2] = {customer_id, a.s};
        PGresult *res = NULL;
        int rc;

        KS_ASSERT(amount > 0);
        if ((rc = bl_exec(tx, sql_customer_credit, 2, p, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? KS_OK
                                 : bl_fail(tx, KS_FAILED_PRECONDITION,
                                           "the customer's credit balance would overflow");
        PQclear(res);
        return rc;
}

int bl_invoice_finalize(bl_tx *tx, bl_customer *cust, bl_invoice *inv, int64_t at_ms)
{
        int rc;

        if ((rc = bl_invoice_move(tx, inv, BL_IE_FINALIZE, at_ms)) != KS_OK ||
            (rc = apply_balance(tx, cust, inv)) != KS_OK) {
                return rc;
        }
        if (inv->amount_due == 0 && (rc = bl_invoice_move(tx, inv, BL_IE_PAY, at_ms)) != KS_OK) {
                return rc;
        }
        /* Numbered last: the counter's row is held from here to COMMIT, as briefly as can be. */
        if ((rc = bl_next_number(tx, 1, "INV", inv->number, sizeof(inv->number))) != KS_OK ||
            (rc = bl_invoice_save(tx, inv)) != KS_OK) {
                return rc;
        }
        const bl_fact f = {.type = BL_SRC_INVOICE,
                           .source_id = inv->id,
                           .customer_id = inv->customer_id,
                           .currency = inv->currency,
                           .subtotal = inv->subtotal,
                           .tax = inv->tax,
                           .total = inv->total,
                           .balance_applied = inv->balance_applied};
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK ||
            (rc = bl_event_invoice_finalized(tx, inv)) != KS_OK) {
                return rc;
        }
        if (inv->state == BL_INV_PAID && (rc = bl_event_invoice_paid(tx, inv)) != KS_OK) {
                return rc;
        }
        return bl_event_summary(tx, "FinalizeInvoice");
}

/* ---- payments ---------------------------------------------------------------------------- */

static const char sql_insert_payment[] =
    "INSERT INTO billing.payments (tenant_id, id, invoice_id, customer_id, amount, status, method,"
    " payment_method, failure_code, reference, created_ms) VALUES (billing.ctx_tenant(),"
    " $1::uuid, $2::uuid, $3::uuid, $4::int8, $5::int2, $6, $7, $8, $9, $10::int8)";

static int insert_payment(bl_tx *tx, const bl_invoice *inv, bl_payment_made *p)
{
        if (p->id[0] == '\0' && ks_uuid_v4(p->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        bl_num amount = bl_num_of(p->amount), status = bl_num_of(p->succeeded ? 1 : 2),
               at = bl_num_of(p->created_ms);
        const char *params[10] = {p->id,     inv->id,  inv->customer_id, amount.s,     status.s,
                                  p->method, p->token, p->failure_code,  p->reference, at.s};
        return bl_exec(tx, sql_insert_payment, 10, params, NULL);
}

void bl_payment_message(const bl_payment_made *p, Keelson__Billing__V1__Payment *m)
{
        keelson__billing__v1__payment__init(m);
        m->id = (char *)p->id;
        m->amount = p->amount;
        m->status = (char *)(p->succeeded ? "succeeded" : "failed");
        m->method = (char *)p->method;
        m->payment_method = (char *)p->token;
        m->failure_code = (char *)p->failure_code;
        m->reference = (char *)p->reference;
        m->created_at_unix_ms = p->created_ms;
}

int bl_invoice_apply_payment(bl_tx *tx, bl_invoice *inv, bl_subscription *sub, bl_payment_made *p)
{
        bool from_uncollectible = inv->state == BL_INV_UNCOLLECTIBLE;
        int rc;

        KS_ASSERT(p->succeeded && p->amount > 0 && p->amount <= bl_invoice_remaining(inv));
        if ((rc = insert_payment(tx, inv, p)) != KS_OK) {
                return rc;
        }
        inv->amount_paid += p->amount;
        const bl_fact f = {.type = BL_SRC_PAYMENT,
                           .source_id = p->id,
                           .customer_id = inv->customer_id,
                           .currency = inv->currency,
                           .amount = p->amount,
                           .from_uncollectible = from_uncollectible};
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK) {
                return rc;
        }
        if (bl_invoice_remaining(inv) == 0 &&
            (rc = bl_invoice_move(tx, inv, BL_IE_PAY, p->created_ms)) != KS_OK) {
                return rc;
        }
        if ((rc = bl_invoice_save(tx, inv)) != KS_OK) {
                return rc;
        }
        if (inv->state != BL_INV_PAID) {
                return bl_event_summary(tx, "Payment");
        }
        if ((rc = bl_event_invoice_paid(tx, inv)) != KS_OK ||
            (rc = bl_event_summary(tx, "Payment")) != KS_OK) {
                return rc;
        }
        return bl_sub_after_invoice(tx, inv, sub, p->created_ms);
}

/* A failed automatic charge: the next retry of the schedule, or the end of dunning. */
static int dunning_step(bl_tx *tx, bl_invoice *inv, bl_subscription *s, int64_t at_ms)
{
        const bl_service *svc = tx->svc;
        int retries_done = inv->attempt_count - 1;
        int rc;

        if (retries_done < svc->n_dunning) {
                inv->next_attempt_ms = at_ms + (int64_t)svc->dunning_days[retries_done] * BL_DAY_MS;
                if (s != NULL && s->state != BL_SUB_PAST_DUE &&
                    (rc = bl_sub_move(tx, s, BL_SE_PAYMENT_FAILED, at_ms, inv->id,
                                      "automatic charge failed")) != KS_OK) {
                        return rc;
                }
                return KS_OK;
        }
        /* Every retry failed: written off, and the subscription ends. */
        if ((rc = bl_invoice_move(tx, inv, BL_IE_MARK_UNCOLLECTIBLE, at_ms)) != KS_OK) {
                return rc;
        }
        const bl_fact f = {.type = BL_SRC_UNCOLLECTIBLE,
                           .source_id = inv->id,
                           .customer_id = inv->customer_id,
                           .currency = inv->currency,
                           .amount = bl_invoice_remaining(inv)};
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK) {
                return rc;
        }
        if (s != NULL && s->state != BL_SUB_CANCELED) {
                if (s->state != BL_SUB_PAST_DUE &&
                    (rc = bl_sub_move(tx, s, BL_SE_PAYMENT_FAILED, at_ms, inv->id,
                                      "automatic charge failed")) != KS_OK) {
                        return rc;
                }
                s->canceled_ms = at_ms;
                return bl_sub_move(tx, s, BL_SE_DUNNING_EXHAUSTED, at_ms, inv->id,
                                   "every retry failed: invoice uncollectible");
        }
        return KS_OK;
}

/* The locked subscription of inv: the caller's, or loaded here (*own then true). */
static int sub_of(bl_tx *tx, const bl_invoice *inv, bl_subscription *given, bl_subscription *mine,
                  bl_subscription **out, bool *own)
{
        int rc;

        *out = given;
        *own = false;
        if (given != NULL || inv->subscription_id[0] == '\0') {
                return KS_OK;
        }
        if ((rc = bl_sub_load(tx, inv->subscription_id, true, mine)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        *out = mine;
        *own = true;
        return KS_OK;
}

static int charge_failed(bl_tx *tx, bl_invoice *inv, bl_subscription *given, bool automatic,
                         int64_t at_ms)
{
        bl_subscription mine, *s;
        bool own;
        int rc;

        if (!automatic) {
                return KS_OK; /* a charge asked for by hand does not move dunning */
        }
        if ((rc = sub_of(tx, inv, given, &mine, &s, &own)) != KS_OK ||
            (rc = dunning_step(tx, inv, s, at_ms)) != KS_OK ||
            (rc = bl_invoice_save(tx, inv)) != KS_OK) {
                return rc;
        }
        if (own && ((rc = bl_sub_plan_next(tx, s)) != KS_OK ||
                    (rc = bl_sub_save(tx, s, at_ms)) != KS_OK)) {
                return rc;
        }
        return bl_event_summary(tx, "ChargeFailed");
}

int bl_invoice_charge(bl_tx *tx, bl_customer *cust, bl_invoice *inv, bl_subscription *sub,
                      const char *token, bool automatic, int64_t at_ms, bl_payment_made *out)
{
        char key[BL_UUID_LEN + 32];
        bl_charge ch;
        int rc;

        memset(out, 0, sizeof(*out));
        if (inv->state != BL_INV_OPEN) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "cannot charge an invoice that is %s",
                               bl_inv_state_name(inv->state));
        }
        if (token == NULL || token[0] == '\0') {
                token = cust->payment_method;
        }
        if (token[0] == '\0') {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the customer has no payment method");
        }
        if (automatic) {
                inv->attempt_count++;
        }
        snprintf(out->method, sizeof(out->method), "card");
        snprintf(out->token, sizeof(out->token), "%s", token);
        out->amount = bl_invoice_remaining(inv);
        out->created_ms = at_ms;
        if (ks_uuid_v4(out->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        /* One key per attempt: a provider that sees an attempt twice charges it once. */
        if (automatic) {
                snprintf(key, sizeof(key), "%s:auto-%d", inv->id, inv->attempt_count);
        } else {
                snprintf(key, sizeof(key), "%s", out->id);
        }
        bl_provider_charge(token, out->amount, inv->currency, key, &ch);
        out->succeeded = ch.ok;
        snprintf(out->failure_code, sizeof(out->failure_code), "%s", ch.failure_code);
        snprintf(out->reference, sizeof(out->reference), "%s", ch.reference);
        if (ch.ok) {
                ks_counter_inc(tx->svc->charges_ok);
                return bl_invoice_apply_payment(tx, inv, sub, out);
        }
        ks_counter_inc(tx->svc->charges_declined);
        if ((rc = insert_payment(tx, inv, out)) != KS_OK) {
                return rc;
        }
        return charge_failed(tx, inv, sub, automatic, at_ms);
}

/* ---- the subscription after an invoice left dunning ----------------------------------------- */

static const char sql_in_dunning[] =
    "SELECT count(*) FROM billing.invoices WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND state = 1 AND attempt_count > 0";

int bl_sub_after_invoice(bl_tx *tx, const bl_invoice *inv, bl_subscription *given, int64_t at_ms)
{
        bl_subscription mine, *s;
        PGresult *res = NULL;
        bool own;
        int rc;

        if ((rc = sub_of(tx, inv, given, &mine, &s, &own)) != KS_OK || s == NULL ||
            s->state != BL_SUB_PAST_DUE) {
                return rc;
        }
        const char *p[1] = {s->id};
        if ((rc = bl_exec(tx, sql_in_dunning, 1, p, &res)) != KS_OK) {
                return rc;
        }
        int64_t left = bl_int(res, 0, 0);
        PQclear(res);
        if (left > 0) {
                return KS_OK;
        }
        if ((rc = bl_sub_move(tx, s, BL_SE_PAYMENT_SUCCEEDED, at_ms, inv->id,
                              "no invoice left in dunning")) != KS_OK) {
                return rc;
        }
        if (own && ((rc = bl_sub_plan_next(tx, s)) != KS_OK ||
                    (rc = bl_sub_save(tx, s, at_ms)) != KS_OK)) {
                return rc;
        }
        return KS_OK;
}
