/*
 * Rows of billing's tables as the engine's structs (billing.h), and
 * structs as the API's messages. Each SELECT list lives here once, next to
 * the reader that knows its column order.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"

static const char *const reason_names[] = {"subscription_create", "subscription_cycle",
                                           "subscription_update", "subscription_cancel", "manual"};
static const char *const line_kind_names[] = {"subscription", "proration", "usage", "manual"};

const char *bl_reason_name(bl_reason r)
{
        return (unsigned)r < sizeof(reason_names) / sizeof(reason_names[0]) ? reason_names[r] : "";
}

static bl_reason reason_parse(const char *s)
{
        for (unsigned i = 0; i < sizeof(reason_names) / sizeof(reason_names[0]); i++) {
                if (strcmp(s, reason_names[i]) == 0) {
                        return (bl_reason)i;
                }
        }
        return BL_REASON_MANUAL;
}

const char *bl_line_kind_name(bl_line_kind k)
{
        return (unsigned)k < sizeof(line_kind_names) / sizeof(line_kind_names[0])
                   ? line_kind_names[k]
                   : "";
}

int64_t bl_invoice_remaining(const bl_invoice *inv)
{
        return inv->amount_due - inv->amount_paid - inv->amount_credited;
}

static void copy(char *out, size_t len, const PGresult *res, int row, int col)
{
        snprintf(out, len, "%s", ks_pg_text(res, row, col));
}

/* One row of a query by id in the caller's tenant; KS_NOT_FOUND when none (call not failed). */
static int load_one(bl_tx *tx, const char *sql, const char *id, PGresult **res)
{
        const char *params[1] = {id};
        int rc;

        *res = NULL;
        if (!bl_uuid_valid(id)) {
                return KS_NOT_FOUND;
        }
        if ((rc = bl_exec(tx, sql, 1, params, res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(*res) != 1) {
                PQclear(*res);
                *res = NULL;
                return KS_NOT_FOUND;
        }
        return KS_OK;
}

/* ---- customers ------------------------------------------------------------------- */

#define CUSTOMER_COLS                                                                              \
        "id, currency, tax_rate_bp, tax_exempt, default_payment_method, credit_balance,"           \
        " test_clock_id, archived FROM billing.customers"                                          \
        " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"

const char bl_customer_sql_locked[] = "SELECT " CUSTOMER_COLS " FOR UPDATE";

int bl_customer_from(bl_tx *tx, PGresult *res, bl_customer *out)
{
        memset(out, 0, sizeof(*out));
        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_NOT_FOUND;
        }
        copy(out->id, sizeof(out->id), res, 0, 0);
        out->currency = bl_currency_find(ks_pg_text(res, 0, 1));
        out->tax_rate_bp = ks_pg_bool(res, 0, 3) ? 0 : (int32_t)ks_pg_int(res, 0, 2);
        copy(out->payment_method, sizeof(out->payment_method), res, 0, 4);
        out->credit_balance = ks_pg_int(res, 0, 5);
        copy(out->test_clock_id, sizeof(out->test_clock_id), res, 0, 6);
        out->archived = ks_pg_bool(res, 0, 7);
        PQclear(res);
        if (out->currency == NULL) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        return KS_OK;
}

int bl_customer_load(bl_tx *tx, const char *id, bool for_update, bl_customer *out)
{
        static const char sql[] = "SELECT " CUSTOMER_COLS;
        PGresult *res;
        int rc;

        if ((rc = load_one(tx, for_update ? bl_customer_sql_locked : sql, id, &res)) != KS_OK) {
                return rc;
        }
        return bl_customer_from(tx, res, out);
}

/* ---- plans ------------------------------------------------------------------------ */

#define PLAN_COLS                                                                                  \
        "id, code, version, name, currency, interval_unit, interval_count, trial_days,"            \
        " price_model, price_amount, tiers, archived, created_ms FROM billing.plans"

int bl_plan_read(const PGresult *res, int row, bl_plan *out)
{
        memset(out, 0, sizeof(*out));
        copy(out->id, sizeof(out->id), res, row, 0);
        copy(out->code, sizeof(out->code), res, row, 1);
        out->version = (int32_t)ks_pg_int(res, row, 2);
        copy(out->name, sizeof(out->name), res, row, 3);
        out->currency = bl_currency_find(ks_pg_text(res, row, 4));
        out->interval.unit = (bl_unit)ks_pg_int(res, row, 5);
        out->interval.count = (int32_t)ks_pg_int(res, row, 6);
        out->trial_days = (int32_t)ks_pg_int(res, row, 7);
        out->price.model = (bl_price_model)ks_pg_int(res, row, 8);
        out->price.amount = ks_pg_int(res, row, 9);
        out->archived = ks_pg_bool(res, row, 11);
        out->created_ms = ks_pg_int(res, row, 12);
        if (out->currency == NULL || bl_tiers_from_json(ks_pg_text(res, row, 10), out->price.tiers,
                                                        &out->price.n_tiers) != 0) {
                return KS_INTERNAL;
        }
        return KS_OK;
}

int bl_plan_from(bl_tx *tx, PGresult *res, bl_plan *out)
{
        int rc;

        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_NOT_FOUND;
        }
        rc = bl_plan_read(res, 0, out);
        PQclear(res);
        return rc == KS_OK ? KS_OK : bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
}

static int plan_load(bl_tx *tx, const char *sql, const char *key, bl_plan *out)
{
        const char *params[1] = {key};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql, 1, params, &res)) != KS_OK) {
                return rc;
        }
        return bl_plan_from(tx, res, out);
}

const char bl_plan_sql_id[] =
    "SELECT " PLAN_COLS " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";
const char bl_plan_sql_code[] =
    "SELECT " PLAN_COLS " WHERE tenant_id = billing.ctx_tenant() AND code = $1 AND latest";
const char bl_plan_sql_of_sub[] =
    "SELECT " PLAN_COLS " WHERE tenant_id = billing.ctx_tenant() AND id = (SELECT plan_id"
    " FROM billing.subscriptions WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid)";

int bl_plan_load(bl_tx *tx, const char *id, bl_plan *out)
{
        return bl_uuid_valid(id) ? plan_load(tx, bl_plan_sql_id, id, out) : KS_NOT_FOUND;
}

int bl_plan_load_code(bl_tx *tx, const char *code, bl_plan *out)
{
        return plan_load(tx, bl_plan_sql_code, code, out);
}

/* ---- subscriptions ----------------------------------------------------------------- */

const char bl_sub_columns[] =
    "id, customer_id, plan_id, quantity, state, currency, anchor_ms, period_n, period_start_ms,"
    " period_end_ms, trial_end_ms, cancel_at_period_end, canceled_ms, paused_ms, test_clock_id,"
    " next_action_ms, latest_invoice_id, history_seq, created_ms, updated_ms";

#define SUB_SELECT                                                                                 \
        "SELECT id, customer_id, plan_id, quantity, state, currency, anchor_ms, period_n,"         \
        " period_start_ms, period_end_ms, trial_end_ms, cancel_at_period_end, canceled_ms,"        \
        " paused_ms, test_clock_id, next_action_ms, latest_invoice_id, history_seq, created_ms,"   \
        " updated_ms FROM billing.subscriptions"                                                   \
        " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"

void bl_sub_read(const PGresult *res, int row, bl_subscription *out)
{
        memset(out, 0, sizeof(*out));
        copy(out->id, sizeof(out->id), res, row, 0);
        copy(out->customer_id, sizeof(out->customer_id), res, row, 1);
        copy(out->plan_id, sizeof(out->plan_id), res, row, 2);
        out->quantity = ks_pg_int(res, row, 3);
        out->state = (bl_sub_state)ks_pg_int(res, row, 4);
        copy(out->currency, sizeof(out->currency), res, row, 5);
        out->anchor_ms = ks_pg_int(res, row, 6);
        out->period_n = ks_pg_int(res, row, 7);
        out->period_start_ms = ks_pg_int(res, row, 8);
        out->period_end_ms = ks_pg_int(res, row, 9);
        out->trial_end_ms = ks_pg_int(res, row, 10);
        out->cancel_at_period_end = ks_pg_bool(res, row, 11);
        out->canceled_ms = ks_pg_int(res, row, 12);
        out->paused_ms = ks_pg_int(res, row, 13);
        copy(out->test_clock_id, sizeof(out->test_clock_id), res, row, 14);
        out->next_action_ms = ks_pg_int(res, row, 15);
        copy(out->latest_invoice_id, sizeof(out->latest_invoice_id), res, row, 16);
        out->history_seq = (int32_t)ks_pg_int(res, row, 17);
        out->created_ms = ks_pg_int(res, row, 18);
        out->updated_ms = ks_pg_int(res, row, 19);
}

const char bl_sub_sql_id[] = SUB_SELECT;

int bl_sub_load(bl_tx *tx, const char *id, bool for_update, bl_subscription *out)
{
        static const char sql_locked[] = SUB_SELECT " FOR UPDATE";
        PGresult *res;
        int rc;

        if ((rc = load_one(tx, for_update ? sql_locked : bl_sub_sql_id, id, &res)) != KS_OK) {
                return rc;
        }
        bl_sub_read(res, 0, out);
        PQclear(res);
        return KS_OK;
}

int bl_sub_save(bl_tx *tx, bl_subscription *s, int64_t now_ms)
{
        static const char sql[] =
            "UPDATE billing.subscriptions SET plan_id = $2::uuid, quantity = $3::int8,"
            " state = $4::int2, anchor_ms = $5::int8, period_n = $6::int8,"
            " period_start_ms = $7::int8, period_end_ms = $8::int8, trial_end_ms = $9::int8,"
            " cancel_at_period_end = $10::bool, canceled_ms = $11::int8, paused_ms = $12::int8,"
            " next_action_ms = NULLIF($13::int8, 0), latest_invoice_id = NULLIF($14, '')::uuid,"
            " history_seq = $15::int4, updated_ms = $16::int8"
            " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";
        ks_pg_num q = ks_pg_num_of(s->quantity), st = ks_pg_num_of(s->state),
                  a = ks_pg_num_of(s->anchor_ms), pn = ks_pg_num_of(s->period_n),
                  ps = ks_pg_num_of(s->period_start_ms), pe = ks_pg_num_of(s->period_end_ms),
                  te = ks_pg_num_of(s->trial_end_ms), c = ks_pg_num_of(s->canceled_ms),
                  pa = ks_pg_num_of(s->paused_ms), na = ks_pg_num_of(s->next_action_ms),
                  hs = ks_pg_num_of(s->history_seq), up = ks_pg_num_of(now_ms);
        const char *p[16] = {s->id, s->plan_id,
                             q.s,   st.s,
                             a.s,   pn.s,
                             ps.s,  pe.s,
                             te.s,  s->cancel_at_period_end ? "t" : "f",
                             c.s,   pa.s,
                             na.s,  s->latest_invoice_id,
                             hs.s,  up.s};

        KS_ASSERT(s->period_end_ms > s->period_start_ms);
        s->updated_ms = now_ms;
        return bl_defer_row(tx, s->id, sql, 16, p);
}

void bl_sub_message(const bl_subscription *s, const bl_plan *plan,
                    Keelson__Billing__V1__Subscription *m)
{
        keelson__billing__v1__subscription__init(m);
        m->id = (char *)s->id;
        m->customer_id = (char *)s->customer_id;
        m->plan_id = (char *)s->plan_id;
        m->plan_code = (char *)(plan != NULL ? plan->code : "");
        m->plan_version = plan != NULL ? plan->version : 0;
        m->quantity = s->quantity;
        m->state = (char *)bl_sub_state_name(s->state);
        m->currency = (char *)s->currency;
        m->current_period_start_unix_ms = s->period_start_ms;
        m->current_period_end_unix_ms = s->period_end_ms;
        m->trial_end_unix_ms = s->trial_end_ms;
        m->billing_anchor_unix_ms = s->anchor_ms;
        m->cancel_at_period_end = s->cancel_at_period_end;
        m->canceled_at_unix_ms = s->canceled_ms;
        m->paused_at_unix_ms = s->paused_ms;
        m->test_clock_id = (char *)s->test_clock_id;
        m->latest_invoice_id = (char *)s->latest_invoice_id;
        m->created_at_unix_ms = s->created_ms;
        m->updated_at_unix_ms = s->updated_ms;
}

/* ---- invoices ------------------------------------------------------------------------- */

const char bl_invoice_columns[] =
    "id, customer_id, subscription_id, number, state, billing_reason, currency, subtotal, tax,"
    " total, balance_applied, amount_due, amount_paid, amount_credited, n_lines,"
    " period_start_ms, period_end_ms, auto_charge, attempt_count, next_attempt_ms, created_ms,"
    " finalized_ms, paid_ms, voided_ms, uncollectible_ms, description";

#define INVOICE_SELECT                                                                             \
        "SELECT id, customer_id, subscription_id, number, state, billing_reason, currency,"        \
        " subtotal, tax, total, balance_applied, amount_due, amount_paid, amount_credited,"        \
        " n_lines, period_start_ms, period_end_ms, auto_charge, attempt_count, next_attempt_ms,"   \
        " created_ms, finalized_ms, paid_ms, voided_ms, uncollectible_ms, description"             \
        " FROM billing.invoices WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"

int bl_invoice_read(const PGresult *res, int row, bl_invoice *out)
{
        memset(out, 0, sizeof(*out));
        copy(out->id, sizeof(out->id), res, row, 0);
        copy(out->customer_id, sizeof(out->customer_id), res, row, 1);
        copy(out->subscription_id, sizeof(out->subscription_id), res, row, 2);
        copy(out->number, sizeof(out->number), res, row, 3);
        out->state = (bl_inv_state)ks_pg_int(res, row, 4);
        out->reason = reason_parse(ks_pg_text(res, row, 5));
        out->currency = bl_currency_find(ks_pg_text(res, row, 6));
        out->subtotal = ks_pg_int(res, row, 7);
        out->tax = ks_pg_int(res, row, 8);
        out->total = ks_pg_int(res, row, 9);
        out->balance_applied = ks_pg_int(res, row, 10);
        out->amount_due = ks_pg_int(res, row, 11);
        out->amount_paid = ks_pg_int(res, row, 12);
        out->amount_credited = ks_pg_int(res, row, 13);
        out->n_lines = (int32_t)ks_pg_int(res, row, 14);
        out->period_start_ms = ks_pg_int(res, row, 15);
        out->period_end_ms = ks_pg_int(res, row, 16);
        out->auto_charge = ks_pg_bool(res, row, 17);
        out->attempt_count = (int32_t)ks_pg_int(res, row, 18);
        out->next_attempt_ms = ks_pg_int(res, row, 19);
        out->created_ms = ks_pg_int(res, row, 20);
        out->finalized_ms = ks_pg_int(res, row, 21);
        out->paid_ms = ks_pg_int(res, row, 22);
        out->voided_ms = ks_pg_int(res, row, 23);
        out->uncollectible_ms = ks_pg_int(res, row, 24);
        copy(out->description, sizeof(out->description), res, row, 25);
        return out->currency != NULL ? KS_OK : KS_INTERNAL;
}

int bl_invoice_load(bl_tx *tx, const char *id, bool for_update, bl_invoice *out)
{
        static const char sql[] = INVOICE_SELECT;
        static const char sql_locked[] = INVOICE_SELECT " FOR UPDATE";
        PGresult *res;
        int rc;

        if ((rc = load_one(tx, for_update ? sql_locked : sql, id, &res)) != KS_OK) {
                return rc;
        }
        rc = bl_invoice_read(res, 0, out);
        PQclear(res);
        return rc == KS_OK ? KS_OK : bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
}

void bl_invoice_header(const bl_invoice *inv, Keelson__Billing__V1__Invoice *m)
{
        keelson__billing__v1__invoice__init(m);
        m->id = (char *)inv->id;
        m->number = (char *)inv->number;
        m->customer_id = (char *)inv->customer_id;
        m->subscription_id = (char *)inv->subscription_id;
        m->state = (char *)bl_inv_state_name(inv->state);
        m->billing_reason = (char *)bl_reason_name(inv->reason);
        m->currency = (char *)inv->currency->code;
        m->subtotal = inv->subtotal;
        m->tax = inv->tax;
        m->total = inv->total;
        m->balance_applied = inv->balance_applied;
        m->amount_due = inv->amount_due;
        m->amount_paid = inv->amount_paid;
        m->amount_credited = inv->amount_credited;
        m->amount_remaining = inv->state == BL_INV_OPEN || inv->state == BL_INV_UNCOLLECTIBLE
                                  ? bl_invoice_remaining(inv)
                                  : 0;
        m->period_start_unix_ms = inv->period_start_ms;
        m->period_end_unix_ms = inv->period_end_ms;
        m->created_at_unix_ms = inv->created_ms;
        m->finalized_at_unix_ms = inv->finalized_ms;
        m->paid_at_unix_ms = inv->paid_ms;
        m->voided_at_unix_ms = inv->voided_ms;
        m->uncollectible_at_unix_ms = inv->uncollectible_ms;
        m->attempt_count = inv->attempt_count;
        m->next_attempt_unix_ms = inv->next_attempt_ms;
        m->description = (char *)inv->description;
}

static const char sql_lines[] =
    "SELECT line_no, kind, description, quantity, unit_amount, amount, tax, taxable,"
    " period_start_ms, period_end_ms FROM billing.invoice_lines"
    " WHERE tenant_id = billing.ctx_tenant() AND invoice_id = $1::uuid ORDER BY line_no";

static const char sql_payments[] =
    "SELECT id, amount, CASE status WHEN 1 THEN 'succeeded' ELSE 'failed' END, method,"
    " payment_method, failure_code, reference, created_ms, amount_refunded FROM billing.payments"
    " WHERE tenant_id = billing.ctx_tenant() AND invoice_id = $1::uuid ORDER BY created_ms, id";

static const char sql_notes[] =
    "SELECT " BL_NOTE_COLUMNS " FROM billing.credit_notes WHERE tenant_id = billing.ctx_tenant()"
    " AND invoice_id = $1::uuid ORDER BY created_ms, id";

static char *text(const PGresult *res, int row, int col)
{
        return (char *)ks_pg_text(res, row, col);
}

static void line_item(void *item, const PGresult *r, int i)
{
        Keelson__Billing__V1__InvoiceLine *l = item;

        keelson__billing__v1__invoice_line__init(l);
        l->line_no = (int32_t)ks_pg_int(r, i, 0);
        l->kind = text(r, i, 1);
        l->description = text(r, i, 2);
        l->quantity = ks_pg_int(r, i, 3);
        l->unit_amount = ks_pg_int(r, i, 4);
        l->amount = ks_pg_int(r, i, 5);
        l->tax = ks_pg_int(r, i, 6);
        l->taxable = ks_pg_bool(r, i, 7);
        l->period_start_unix_ms = ks_pg_int(r, i, 8);
        l->period_end_unix_ms = ks_pg_int(r, i, 9);
}

static void payment_item(void *item, const PGresult *r, int i)
{
        Keelson__Billing__V1__Payment *p = item;

        keelson__billing__v1__payment__init(p);
        p->id = text(r, i, 0);
        p->amount = ks_pg_int(r, i, 1);
        p->status = text(r, i, 2);
        p->method = text(r, i, 3);
        p->payment_method = text(r, i, 4);
        p->failure_code = text(r, i, 5);
        p->reference = text(r, i, 6);
        p->created_at_unix_ms = ks_pg_int(r, i, 7);
        p->amount_refunded = ks_pg_int(r, i, 8);
}

void bl_credit_note_item(void *item, const PGresult *r, int i)
{
        Keelson__Billing__V1__CreditNote *c = item;

        keelson__billing__v1__credit_note__init(c);
        c->id = text(r, i, 0);
        c->number = text(r, i, 1);
        c->invoice_id = text(r, i, 2);
        c->amount = ks_pg_int(r, i, 3);
        c->subtotal = ks_pg_int(r, i, 4);
        c->tax = ks_pg_int(r, i, 5);
        c->reason = text(r, i, 6);
        c->credited_to = text(r, i, 7);
        c->created_at_unix_ms = ks_pg_int(r, i, 8);
        c->refund_payment_id = text(r, i, 9);
        c->refund_reference = text(r, i, 10);
}

/* The rows of res as an array of items and an array of pointers to them. */
static int items_of(const PGresult *res, size_t size, void (*fill)(void *, const PGresult *, int),
                    void **block, void **ptrs, size_t *n)
{
        int rows = PQntuples(res);

        *n = (size_t)rows;
        *block = calloc((size_t)rows + 1, size);
        *ptrs = calloc((size_t)rows + 1, sizeof(void *));
        if (*block == NULL || *ptrs == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        for (int i = 0; i < rows; i++) {
                void *item = (char *)*block + (size_t)i * size;
                fill(item, res, i);
                ((void **)*ptrs)[i] = item;
        }
        return KS_OK;
}

void bl_line_messages(const bl_line *lines, size_t n, Keelson__Billing__V1__InvoiceLine *m,
                      Keelson__Billing__V1__InvoiceLine **ptrs)
{
        for (size_t i = 0; i < n; i++) {
                keelson__billing__v1__invoice_line__init(&m[i]);
                m[i].line_no = (int32_t)i + 1;
                m[i].kind = (char *)bl_line_kind_name(lines[i].kind);
                m[i].description = (char *)lines[i].description;
                m[i].quantity = lines[i].quantity;
                m[i].unit_amount = lines[i].unit_amount;
                m[i].amount = lines[i].amount;
                m[i].tax = lines[i].tax;
                m[i].taxable = lines[i].taxable;
                m[i].period_start_unix_ms = lines[i].period_start_ms;
                m[i].period_end_unix_ms = lines[i].period_end_ms;
                ptrs[i] = &m[i];
        }
}

int bl_invoice_view_fresh(bl_invoice_view *v, const bl_invoice *inv, const bl_line *lines, size_t n,
                          const Keelson__Billing__V1__Payment *payment)
{
        Keelson__Billing__V1__InvoiceLine *m;

        memset(v, 0, sizeof(*v));
        bl_invoice_header(inv, &v->m);
        v->blocks[0] = m = calloc(n + 1, sizeof(*m));
        v->blocks[1] = calloc(n + 1, sizeof(void *));
        v->blocks[3] = calloc(1, sizeof(void *));
        if (m == NULL || v->blocks[1] == NULL || v->blocks[3] == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        bl_line_messages(lines, n, m, v->blocks[1]);
        v->m.lines = v->blocks[1];
        v->m.n_lines = n;
        if (payment != NULL) {
                ((const Keelson__Billing__V1__Payment **)v->blocks[3])[0] = payment;
                v->m.payments = v->blocks[3];
                v->m.n_payments = 1;
        }
        return KS_OK;
}

int bl_invoice_view_make(bl_tx *tx, const bl_invoice *inv, bool details, bl_invoice_view *v)
{
        const char *params[1] = {inv->id};
        Keelson__Billing__V1__Invoice *m = &v->m;
        int rc;

        memset(v, 0, sizeof(*v));
        bl_invoice_header(inv, m);
        if (!details) {
                return KS_OK;
        }
        const ks_pg_stmt s[3] = {
            {.sql = sql_lines, .n_params = 1, .params = params, .out = &v->res[0]},
            {.sql = sql_payments, .n_params = 1, .params = params, .out = &v->res[1]},
            {.sql = sql_notes, .n_params = 1, .params = params, .out = &v->res[2]}};
        if ((rc = bl_pipeline(tx, s, 3)) != KS_OK) {
                return rc;
        }
        if (items_of(v->res[0], sizeof(Keelson__Billing__V1__InvoiceLine), line_item, &v->blocks[0],
                     &v->blocks[1], &m->n_lines) != KS_OK ||
            items_of(v->res[1], sizeof(Keelson__Billing__V1__Payment), payment_item, &v->blocks[2],
                     &v->blocks[3], &m->n_payments) != KS_OK ||
            items_of(v->res[2], sizeof(Keelson__Billing__V1__CreditNote), bl_credit_note_item,
                     &v->blocks[4], &v->blocks[5], &m->n_credit_notes) != KS_OK) {
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        m->lines = v->blocks[1];
        m->payments = v->blocks[3];
        m->credit_notes = v->blocks[5];
        return KS_OK;
}

void bl_invoice_view_free(bl_invoice_view *v)
{
        for (int i = 0; i < 3; i++) {
                PQclear(v->res[i]);
                v->res[i] = NULL;
        }
        for (int i = 0; i < 6; i++) {
                free(v->blocks[i]);
                v->blocks[i] = NULL;
        }
}

int bl_reply_invoice(bl_tx *tx, const char *invoice_id,
                     const Keelson__Billing__V1__Payment *payment)
{
        bl_invoice inv;
        int rc;

        if ((rc = bl_invoice_load(tx, invoice_id, false, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        return bl_reply_invoice_of(tx, &inv, payment);
}

int bl_reply_invoice_of(bl_tx *tx, const bl_invoice *inv,
                        const Keelson__Billing__V1__Payment *payment)
{
        Keelson__Billing__V1__InvoiceResponse resp = KEELSON__BILLING__V1__INVOICE_RESPONSE__INIT;
        bl_invoice_view v;
        int rc;

        if ((rc = bl_invoice_view_make(tx, inv, true, &v)) == KS_OK &&
            (rc = bl_invoice_view_seal(tx, &v)) == KS_OK) {
                resp.invoice = &v.m;
                resp.payment = (Keelson__Billing__V1__Payment *)payment;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        bl_invoice_view_free(&v);
        return rc;
}

int bl_invoice_view_seal(bl_tx *tx, bl_invoice_view *v)
{
        const char *number;
        int rc;

        if ((rc = bl_tx_seal(tx)) != KS_OK) {
                return rc;
        }
        if (v->m.number[0] == '\0' && (number = bl_number_of(tx, v->m.id)) != NULL) {
                v->m.number = (char *)number;
        }
        return KS_OK;
}

/* ---- array literals ------------------------------------------------------------------------ */

static void arr_put(bl_arr *a, const char *s, size_t n)
{
        if (a->oom) {
                return;
        }
        if (a->len + n + 3 > a->cap) {
                size_t cap = a->cap == 0 ? 256 : a->cap;
                while (a->len + n + 3 > cap) {
                        cap *= 2;
                }
                char *p = realloc(a->s, cap);
                if (p == NULL) {
                        a->oom = true;
                        return;
                }
                a->s = p;
                a->cap = cap;
        }
        memcpy(a->s + a->len, s, n);
        a->len += n;
}

static void arr_sep(bl_arr *a)
{
        arr_put(a, a->len == 0 ? "{" : ",", 1);
}

void bl_arr_int(bl_arr *a, int64_t v)
{
        ks_pg_num n = ks_pg_num_of(v);

        arr_sep(a);
        arr_put(a, n.s, strlen(n.s));
}

void bl_arr_text(bl_arr *a, const char *v)
{
        arr_sep(a);
        arr_put(a, "\"", 1);
        for (const char *p = v; *p != '\0'; p++) {
                if (*p == '"' || *p == '\\') {
                        arr_put(a, "\\", 1);
                }
                arr_put(a, p, 1);
        }
        arr_put(a, "\"", 1);
}

void bl_arr_null(bl_arr *a)
{
        arr_sep(a);
        arr_put(a, "NULL", 4);
}

const char *bl_arr_done(bl_arr *a)
{
        if (a->len == 0) {
                arr_put(a, "{", 1);
        }
        arr_put(a, "}", 1);
        if (a->oom) {
                return NULL;
        }
        a->s[a->len] = '\0';
        return a->s;
}

void bl_arr_free(bl_arr *a)
{
        free(a->s);
        memset(a, 0, sizeof(*a));
}
