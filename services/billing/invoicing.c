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

#include <jansson.h>

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
        if (ks_uuid_v7(inv->id) != 0) {
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

/* An invoice's columns and their values ($1..$25). */
#define INV_COLUMNS                                                                                \
        "tenant_id, id, customer_id, subscription_id, billing_reason, currency, description,"      \
        " created_ms, state, subtotal, tax, total, balance_applied, amount_due, amount_paid,"      \
        " amount_credited, n_lines, period_start_ms, period_end_ms, auto_charge, attempt_count,"   \
        " next_attempt_ms, finalized_ms, paid_ms, voided_ms, uncollectible_ms"
#define INV_VALUES                                                                                 \
        "billing.ctx_tenant(), $1::uuid, $2::uuid, NULLIF($3, '')::uuid, $4, $5, $6, $7::int8,"    \
        " $8::int2, $9::int8, $10::int8, $11::int8, $12::int8, $13::int8, $14::int8, $15::int8,"   \
        " $16::int4, $17::int8, $18::int8, $19::bool, $20::int4, NULLIF($21::int8, 0), $22::int8," \
        " $23::int8, $24::int8, $25::int8"

/*
 * The tenant's counter of KIND moved on by K, as CTE n (its new last): an
 * UPDATE, which queues the waiters of a busy row on its tuple lock and
 * wakes one at each commit, where INSERT ... ON CONFLICT's check would wake
 * every waiter to look again; the insert only for the tenant's first number.
 */
#define COUNTER_TAKE(KIND, K)                                                                      \
        "cu AS (UPDATE billing.counters SET last = last + " K                                      \
        " WHERE tenant_id = billing.ctx_tenant() AND kind = " KIND " RETURNING last),"             \
        " ci AS (INSERT INTO billing.counters AS c (tenant_id, kind, last)"                        \
        " SELECT billing.ctx_tenant(), " KIND ", " K " WHERE NOT EXISTS (SELECT FROM cu)"          \
        " ON CONFLICT (tenant_id, kind) DO UPDATE SET last = c.last + " K " RETURNING last),"      \
        " n AS (SELECT last FROM cu UNION ALL SELECT last FROM ci)"

/*
 * A new invoice, every column ($1..$25); its lines are rows of their own
 * (sql_line). Both are written with the transaction's other rows of their
 * statement (bl_defer_insert). While it still waits to be sent, a save of
 * the invoice rewrites its values instead of adding an UPDATE
 * (bl_invoice_save): an invoice made, finalized and paid in one call is one
 * row written once.
 */
static const char sql_create[] =
    "INSERT INTO billing.invoices (" INV_COLUMNS ") VALUES (" INV_VALUES ")";

/* The same with its number given ($26: bl_tx_seal gives the numbers taken). */
static const char sql_create_numbered_as[] =
    "INSERT INTO billing.invoices (" INV_COLUMNS ", number) VALUES (" INV_VALUES ", $26)";

/* One line of a new invoice: $1 the invoice, $2 its line_no. */
static const char sql_line[] =
    "INSERT INTO billing.invoice_lines (tenant_id, invoice_id, line_no, kind, description,"
    " quantity, unit_amount, amount, tax, taxable, period_start_ms, period_end_ms) VALUES"
    " (billing.ctx_tenant(), $1::uuid, $2::int4, $3, $4, $5::int8, $6::int8, $7::int8,"
    " $8::int8, $9::bool, $10::int8, $11::int8)";

#define CREATE_HEAD   7  /* $1..$7: what never changes */
#define CREATE_STATE  18 /* $8..$25: every mutable column, as bl_invoice_save writes them */
#define CREATE_PARAMS 25

/* The mutable columns of inv as text ($8..$25 of sql_create, $2..$19 of sql_save). */
typedef struct inv_state {
        ks_pg_num v[CREATE_STATE];
        const char *p[CREATE_STATE];
} inv_state;

static void state_of(const bl_invoice *inv, inv_state *o)
{
        const int64_t v[CREATE_STATE] = {
            inv->state,           inv->subtotal,        inv->tax,           inv->total,
            inv->balance_applied, inv->amount_due,      inv->amount_paid,   inv->amount_credited,
            inv->n_lines,         inv->period_start_ms, inv->period_end_ms, inv->auto_charge,
            inv->attempt_count,   inv->next_attempt_ms, inv->finalized_ms,  inv->paid_ms,
            inv->voided_ms,       inv->uncollectible_ms};

        for (int i = 0; i < CREATE_STATE; i++) {
                o->v[i] = ks_pg_num_of(v[i]);
                o->p[i] = o->v[i].s;
        }
        o->p[11] = inv->auto_charge ? "t" : "f";
}

/* Lines [0..n) of invoice id as line_no first.., each a row of sql_line (bl_defer_insert). */
static int defer_lines(bl_tx *tx, const char *id, int64_t first, const bl_line *lines, size_t n)
{
        int rc = KS_OK;

        for (size_t i = 0; i < n && rc == KS_OK; i++) {
                const bl_line *l = &lines[i];
                ks_pg_num no = ks_pg_num_of(first + (int64_t)i), q = ks_pg_num_of(l->quantity),
                          u = ks_pg_num_of(l->unit_amount), a = ks_pg_num_of(l->amount),
                          tax = ks_pg_num_of(l->tax), ps = ks_pg_num_of(l->period_start_ms),
                          pe = ks_pg_num_of(l->period_end_ms);
                const char *lp[11] = {
                    id,  no.s,  bl_line_kind_name(l->kind), l->description, q.s, u.s,
                    a.s, tax.s, l->taxable ? "t" : "f",     ps.s,           pe.s};
                rc = bl_defer_insert(tx, NULL, sql_line, 11, lp);
        }
        return rc;
}

int bl_invoice_create(bl_tx *tx, const bl_customer *cust, bl_invoice *inv, bl_line *lines, size_t n,
                      int64_t now_ms)
{
        bl_totals t;
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
        ks_pg_num cr = ks_pg_num_of(now_ms);
        const char *p[CREATE_PARAMS] = {inv->id,
                                        inv->customer_id,
                                        inv->subscription_id,
                                        bl_reason_name(inv->reason),
                                        inv->currency->code,
                                        inv->description,
                                        cr.s};
        inv_state st;
        state_of(inv, &st);
        memcpy(p + CREATE_HEAD, st.p, sizeof(st.p));
        if ((rc = bl_defer_insert(tx, inv->id, sql_create, CREATE_PARAMS, p)) != KS_OK) {
                return rc;
        }
        return defer_lines(tx, inv->id, 1, lines, n);
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
                v[i].amount = ks_pg_int(res, (int)i, 1);
                v[i].taxable = ks_pg_bool(res, (int)i, 2);
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
        if (rc == KS_OK && bl_arr_done(&taxes) == NULL) {
                rc = tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        if (rc == KS_OK) {
                const char *tp[2] = {inv->id, taxes.s};
                if ((rc = bl_defer(tx, sql_retax, 2, tp)) == KS_OK &&
                    (rc = defer_lines(tx, inv->id, (int64_t)old + 1, v + old, n)) == KS_OK) {
                        rc = bl_flush(tx);
                }
                inv->subtotal = t.subtotal;
                inv->tax = t.tax;
                inv->total = t.total;
                inv->n_lines = (int32_t)(old + n);
        }
        if (rc == KS_OK) {
                rc = bl_invoice_save(tx, inv);
        }
        bl_arr_free(&taxes);
        free(v);
        return rc;
}

static const char sql_save[] =
    "UPDATE billing.invoices SET state = $2::int2, subtotal = $3::int8, tax = $4::int8,"
    " total = $5::int8, balance_applied = $6::int8, amount_due = $7::int8,"
    " amount_paid = $8::int8, amount_credited = $9::int8, n_lines = $10::int4,"
    " period_start_ms = $11::int8, period_end_ms = $12::int8, auto_charge = $13::bool,"
    " attempt_count = $14::int4, next_attempt_ms = NULLIF($15::int8, 0),"
    " finalized_ms = $16::int8, paid_ms = $17::int8, voided_ms = $18::int8,"
    " uncollectible_ms = $19::int8 WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

int bl_invoice_save(bl_tx *tx, const bl_invoice *inv)
{
        const char *p[1 + CREATE_STATE] = {inv->id};
        inv_state st;
        bool found = false;
        int rc;

        state_of(inv, &st);
        /* Still to be created: its creation takes the new state instead. */
        if ((rc = bl_defer_rewrite(tx, inv->id, sql_create, CREATE_HEAD, CREATE_STATE, st.p,
                                   &found)) != KS_OK ||
            found) {
                return rc;
        }
        memcpy(p + 1, st.p, sizeof(st.p));
        return bl_defer_row(tx, inv->id, sql_save, 1 + CREATE_STATE, p);
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
static const char sql_next_number[] = "WITH " COUNTER_TAKE("$1::int2", "1") " SELECT last FROM n";

static const char sql_customer_balance[] =
    "UPDATE billing.customers SET credit_balance = $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

bl_fact bl_invoice_fact(const bl_invoice *inv, bl_source_type type, bool from_uncollectible)
{
        return (bl_fact){.type = type,
                         .source_id = inv->id,
                         .customer_id = inv->customer_id,
                         .currency = inv->currency,
                         .subtotal = inv->subtotal,
                         .tax = inv->tax,
                         .total = inv->total,
                         .balance_applied = inv->balance_applied,
                         .from_uncollectible = from_uncollectible};
}

/* ---- numbers, at the end of the transaction ------------------------------------------------ */

struct bl_numbered {
        bl_invoice inv; /* as finalized, then as paid when paid in the same transaction */
        bool paid;
};

static int numbered_add(bl_tx *tx, const bl_invoice *inv)
{
        if (tx->n_numbered == tx->cap_numbered) {
                size_t cap = tx->cap_numbered == 0 ? 4 : tx->cap_numbered * 2;
                bl_numbered *v = realloc(tx->numbered, cap * sizeof(*v));
                if (v == NULL) {
                        return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
                }
                tx->numbered = v;
                tx->cap_numbered = cap;
        }
        tx->numbered[tx->n_numbered++] =
            (bl_numbered){.inv = *inv, .paid = inv->state == BL_INV_PAID};
        return KS_OK;
}

static bl_numbered *numbered_find(const bl_tx *tx, const char *id)
{
        for (size_t i = 0; i < tx->n_numbered; i++) {
                if (strcmp(tx->numbered[i].inv.id, id) == 0) {
                        return &tx->numbered[i];
                }
        }
        return NULL;
}

void bl_tx_numbered_free(bl_tx *tx)
{
        free(tx->numbered);
        tx->numbered = NULL;
        tx->n_numbered = tx->cap_numbered = 0;
}

const char *bl_number_of(const bl_tx *tx, const char *invoice_id)
{
        const bl_numbered *e = numbered_find(tx, invoice_id);

        return e != NULL && e->inv.number[0] != '\0' ? e->inv.number : NULL;
}

int bl_invoice_paid_event(bl_tx *tx, const bl_invoice *inv)
{
        bl_numbered *e = inv->number[0] == '\0' ? numbered_find(tx, inv->id) : NULL;

        if (e == NULL) {
                return bl_event_invoice_paid(tx, inv);
        }
        e->inv = *inv; /* announced at the seal, with its number */
        e->paid = true;
        return KS_OK;
}

/* A number into its entry, and the events that carry it. */
static int announce_one(bl_tx *tx, bl_numbered *e, const char *number)
{
        int rc;

        snprintf(e->inv.number, sizeof(e->inv.number), "%s", number);
        if ((rc = bl_event_invoice_finalized(tx, &e->inv)) != KS_OK ||
            (e->paid && (rc = bl_event_invoice_paid(tx, &e->inv)) != KS_OK)) {
                return rc;
        }
        return KS_OK;
}

/* ---- the take, and the seal that gives the numbers --------------------------------------- */

static const char sql_number_as[] = "UPDATE billing.invoices SET number = $2"
                                    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

static const char sql_take[] = "WITH " COUNTER_TAKE("1", "$1::int8") " SELECT last FROM n";

void bl_numbers_take_stmt(bl_tx *tx, int64_t n, ks_pg_stmt *out)
{
        KS_ASSERT(n >= 1 && tx->take_res == NULL && tx->taken_left == 0);
        tx->take_count = n;
        tx->take_n = ks_pg_num_of(n);
        *out = (ks_pg_stmt){.sql = sql_take, .n_params = 1, .out = &tx->take_res};
        tx->take_params[0] = tx->take_n.s;
        out->params = tx->take_params;
}

int bl_numbers_taken(bl_tx *tx)
{
        PGresult *res = tx->take_res;
        int rc = KS_OK;

        tx->take_res = NULL;
        if (res == NULL || PQntuples(res) != 1) {
                rc = bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        } else {
                tx->taken_next = ks_pg_int(res, 0, 0) - tx->take_count + 1;
                tx->taken_left = tx->take_count;
        }
        PQclear(res);
        return rc;
}

/* "INV-" and six digits of seq, more past 999,999 (%06lld). */
static void number_text(int64_t seq, char *out, size_t len)
{
        snprintf(out, len, "INV-%06lld", (long long)seq);
}

/*
 * The seal: each invoice finalized in tx and still unnumbered gets the next
 * of the numbers taken for them, in the order they were finalized. Numbers
 * not taken ahead are taken here, in a round trip that also carries the
 * waiting writes. Every waiting insert of an invoice is taken out first and
 * added back numbered after (a numbered insert is another statement naming
 * the table: taking them out one at a time would leave each next one behind
 * it, to be numbered by an UPDATE); an invoice already written gets an
 * UPDATE of its number. They go with COMMIT. A count other than the one
 * taken ahead fails the transaction (a group then runs its calls alone).
 */
int bl_tx_seal(bl_tx *tx)
{
        int64_t n = 0, k = 0;
        int rc = KS_OK;

        for (size_t i = 0; i < tx->n_numbered; i++) {
                n += tx->numbered[i].inv.number[0] == '\0';
        }
        if (n == 0 && tx->taken_left == 0) {
                return KS_OK;
        }
        if (tx->taken_left > 0 && n != tx->taken_left) {
                ks_log_warn(tx->request_id, "invoice numbers taken ahead do not match",
                            "{s:I, s:I}", "taken", (json_int_t)tx->taken_left, "to_number",
                            (json_int_t)n);
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        bl_deferred *d = calloc((size_t)n, sizeof(*d));
        bool *taken = calloc((size_t)n, sizeof(*taken));
        if (d == NULL || taken == NULL) {
                rc = tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
                goto out;
        }
        for (size_t i = 0; i < tx->n_numbered; i++) {
                if (tx->numbered[i].inv.number[0] == '\0') {
                        taken[k] = bl_defer_take(tx, tx->numbered[i].inv.id, sql_create,
                                                 "billing.invoices", &d[k]);
                        k++;
                }
        }
        if (tx->taken_left == 0) {
                ks_pg_stmt take;
                bl_numbers_take_stmt(tx, n, &take);
                if ((rc = bl_pipeline(tx, &take, 1)) == KS_OK) {
                        rc = bl_numbers_taken(tx);
                } else {
                        PQclear(tx->take_res);
                        tx->take_res = NULL;
                        goto out;
                }
        }
        k = 0;
        for (size_t i = 0; i < tx->n_numbered && rc == KS_OK; i++) {
                bl_numbered *e = &tx->numbered[i];
                char number[32];
                const char *p[CREATE_PARAMS + 1];

                if (e->inv.number[0] != '\0') {
                        continue;
                }
                number_text(tx->taken_next++, number, sizeof(number));
                tx->taken_left--;
                if (!taken[k]) { /* written already (a later read of the transaction sent it) */
                        const char *u[2] = {e->inv.id, number};
                        rc = bl_defer(tx, sql_number_as, 2, u);
                } else {
                        KS_ASSERT(d[k].n == CREATE_PARAMS);
                        memcpy(p, d[k].params, CREATE_PARAMS * sizeof(*p));
                        p[CREATE_PARAMS] = number;
                        rc =
                            bl_defer_insert(tx, NULL, sql_create_numbered_as, CREATE_PARAMS + 1, p);
                }
                k++;
                if (rc == KS_OK) {
                        rc = announce_one(tx, e, number);
                }
        }
        tx->sealed_any = true;
out:
        for (int64_t i = 0; taken != NULL && d != NULL && i < n; i++) {
                if (taken[i]) {
                        bl_deferred_free(&d[i]);
                }
        }
        free(taken);
        free(d);
        return rc;
}

int bl_next_number(bl_tx *tx, int kind, const char *prefix, char *out, size_t out_len)
{
        ks_pg_num k = ks_pg_num_of(kind);
        const char *p[1] = {k.s};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_next_number, 1, p, &res)) != KS_OK) {
                return rc;
        }
        snprintf(out, out_len, "%s-%06lld", prefix, (long long)ks_pg_int(res, 0, 0));
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
        ks_pg_num b = ks_pg_num_of(cust->credit_balance);
        const char *p[2] = {cust->id, b.s};
        return bl_defer(tx, sql_customer_balance, 2, p);
}

static const char sql_customer_credit[] =
    "UPDATE billing.customers SET credit_balance = credit_balance + $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
    " AND credit_balance <= 9223372036854775807 - $2::int8 RETURNING credit_balance";

int bl_customer_credit(bl_tx *tx, const char *customer_id, int64_t amount)
{
        ks_pg_num a = ks_pg_num_of(amount);
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
        if ((rc = bl_invoice_save(tx, inv)) != KS_OK) {
                return rc;
        }
        const bl_fact f = bl_invoice_fact(inv, BL_SRC_INVOICE, false);
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK) {
                return rc;
        }
        /* Numbered, and announced with its number, when the transaction seals (bl_tx_seal). */
        if ((rc = numbered_add(tx, inv)) != KS_OK) {
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
        if (p->id[0] == '\0' && ks_uuid_v7(p->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        ks_pg_num amount = ks_pg_num_of(p->amount), status = ks_pg_num_of(p->succeeded ? 1 : 2),
                  at = ks_pg_num_of(p->created_ms);
        const char *params[10] = {p->id,     inv->id,  inv->customer_id, amount.s,     status.s,
                                  p->method, p->token, p->failure_code,  p->reference, at.s};
        return bl_defer_insert(tx, NULL, sql_insert_payment, 10, params);
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
        if ((rc = bl_invoice_paid_event(tx, inv)) != KS_OK ||
            (rc = bl_event_summary(tx, "Payment")) != KS_OK) {
                return rc;
        }
        return bl_sub_after_invoice(tx, inv, sub, BL_SE_PAYMENT_SUCCEEDED, p->created_ms);
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

/*
 * The provider's idempotency key of a charge attempt: a provider that sees an attempt twice
 * charges it once.
 *   - A creation charged under the client's Idempotency-Key: the tenant and that key, so that
 *     the call sent again after an attempt that did not commit (new ids for everything) is the
 *     same charge. The key's record makes one creation of a key.
 *   - Another creation or renewal of a subscription: its subscription and period (one such
 *     invoice per period: invoices_one_per_period), not the invoice's id, so that the scheduler
 *     running a renewal again after a crash before its COMMIT (a new invoice id, the same
 *     period) is the same charge.
 *   - Another automatic charge: the invoice and the attempt; a charge by hand: the payment.
 */
static void provider_key(const bl_tx *tx, const bl_invoice *inv, bool automatic,
                         const char *payment_id, char key[BL_PROVIDER_KEY_MAX])
{
        const char *reason = bl_reason_name(inv->reason);

        if (!automatic) {
                snprintf(key, BL_PROVIDER_KEY_MAX, "%s", payment_id);
        } else if (inv->reason == BL_REASON_CREATE && tx->call != NULL &&
                   tx->call->idempotency_key[0] != '\0') {
                char text[BL_UUID_LEN + 1 + 256], hex[BL_DIGEST_HEX_MAX];
                snprintf(text, sizeof(text), "%s/%s", tx->tenant_id, tx->call->idempotency_key);
                bl_digest_hex(text, hex);
                snprintf(key, BL_PROVIDER_KEY_MAX, "idem-%s/%s:auto-%d", hex, reason,
                         inv->attempt_count);
        } else if (inv->subscription_id[0] != '\0' &&
                   (inv->reason == BL_REASON_CREATE || inv->reason == BL_REASON_CYCLE)) {
                snprintf(key, BL_PROVIDER_KEY_MAX, "%s/%lld/%s:auto-%d", inv->subscription_id,
                         (long long)inv->period_start_ms, reason, inv->attempt_count);
        } else {
                snprintf(key, BL_PROVIDER_KEY_MAX, "%s:auto-%d", inv->id, inv->attempt_count);
        }
}

int bl_invoice_charge(bl_tx *tx, bl_customer *cust, bl_invoice *inv, bl_subscription *sub,
                      const char *token, bool automatic, int64_t at_ms, bl_payment_made *out)
{
        char key[BL_PROVIDER_KEY_MAX];
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
        if (ks_uuid_v7(out->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        provider_key(tx, inv, automatic, out->id, key);
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

int bl_invoice_payment_failed(bl_tx *tx, bl_invoice *inv, bl_payment_made *p)
{
        bl_subscription mine, *s;
        bool own;
        int rc;

        KS_ASSERT(!p->succeeded && inv->state == BL_INV_OPEN);
        if ((rc = insert_payment(tx, inv, p)) != KS_OK ||
            (rc = sub_of(tx, inv, NULL, &mine, &s, &own)) != KS_OK) {
                return rc;
        }
        /* Past due, as after a declined automatic charge; the provider retries, not keelson. */
        if (s != NULL && s->state == BL_SUB_ACTIVE &&
            ((rc = bl_sub_move(tx, s, BL_SE_PAYMENT_FAILED, p->created_ms, inv->id,
                               "payment failed at the provider")) != KS_OK ||
             (rc = bl_sub_plan_next(tx, s)) != KS_OK ||
             (rc = bl_sub_save(tx, s, p->created_ms)) != KS_OK)) {
                return rc;
        }
        return bl_event_summary(tx, "ChargeFailed");
}

/* ---- the subscription after an invoice left dunning ----------------------------------------- */

static const char sql_in_dunning[] =
    "SELECT count(*) FROM billing.invoices WHERE tenant_id = billing.ctx_tenant()"
    " AND subscription_id = $1::uuid AND state = 1 AND attempt_count > 0";

int bl_sub_after_invoice(bl_tx *tx, const bl_invoice *inv, bl_subscription *given, bl_sub_event ev,
                         int64_t at_ms)
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
        int64_t left = ks_pg_int(res, 0, 0);
        PQclear(res);
        if (left > 0) {
                return KS_OK;
        }
        if ((rc = bl_sub_move(tx, s, ev, at_ms, inv->id, "no invoice left in dunning")) != KS_OK) {
                return rc;
        }
        if (own && ((rc = bl_sub_plan_next(tx, s)) != KS_OK ||
                    (rc = bl_sub_save(tx, s, at_ms)) != KS_OK)) {
                return rc;
        }
        return KS_OK;
}
