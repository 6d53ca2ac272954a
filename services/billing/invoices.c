/*
 * Invoices: CreateInvoice and AddInvoiceLines (one-off drafts with manual
 * lines), FinalizeInvoice, GetInvoice, ListInvoices, VoidInvoice,
 * MarkUncollectible. The steps themselves (totals, numbers, postings,
 * charges) are invoicing.c's; the transition table is model.h's (Stripe's:
 * draft -> open -> paid | void | uncollectible, uncollectible -> paid |
 * void).
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int not_found(bl_tx *tx)
{
        return bl_fail(tx, KS_NOT_FOUND, "invoice not found");
}

/* The request's manual lines (n of them) as engine lines; false with the client's message. */
static bool manual_lines(Keelson__Billing__V1__ManualLine **in, size_t n, bl_line *out, char *err,
                         size_t err_len)
{
        for (size_t i = 0; i < n; i++) {
                bl_line *l = &out[i];
                int64_t q = in[i]->quantity == 0 ? 1 : in[i]->quantity;
                char field[48];

                memset(l, 0, sizeof(*l));
                snprintf(field, sizeof(field), "lines[%zu].description", i);
                if (!bl_name_valid(field, in[i]->description, BL_LINE_DESC_MAX, l->description,
                                   sizeof(l->description), err, err_len)) {
                        return false;
                }
                if (l->description[0] == '\0') {
                        snprintf(err, err_len, "lines[%zu].description: required", i);
                        return false;
                }
                if (q < 1 || q > BL_QUANTITY_MAX) {
                        snprintf(err, err_len, "lines[%zu].quantity: 1 to %d", i, BL_QUANTITY_MAX);
                        return false;
                }
                if (!bl_mul(q, in[i]->unit_amount, &l->amount)) {
                        snprintf(err, err_len, "lines[%zu]: quantity × unit_amount overflows", i);
                        return false;
                }
                l->kind = BL_LINE_MANUAL;
                l->quantity = q;
                l->unit_amount = in[i]->unit_amount;
                l->taxable = !in[i]->tax_exempt;
        }
        return true;
}

/* ---- CreateInvoice, AddInvoiceLines ------------------------------------------------------- */

typedef struct draft_args {
        const char *id; /* the customer (create) or the invoice (add) */
        char description[BL_LINE_DESC_MAX * 4 + 1];
        bl_line *lines;
        size_t n;
} draft_args;

static int create_tx(bl_tx *tx, void *arg)
{
        draft_args *a = arg;
        bl_customer cust;
        bl_invoice inv;
        int64_t now;
        int rc;

        if ((rc = bl_customer_load(tx, a->id, false, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "customer not found") : rc;
        }
        if (cust.archived) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the customer is archived");
        }
        if ((rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK) {
                return rc;
        }
        memset(&inv, 0, sizeof(inv));
        inv.reason = BL_REASON_MANUAL;
        snprintf(inv.description, sizeof(inv.description), "%s", a->description);
        if ((rc = bl_invoice_create(tx, &cust, &inv, a->lines, a->n, now)) != KS_OK) {
                return rc;
        }
        return bl_reply_invoice(tx, inv.id, NULL);
}

static int add_tx(bl_tx *tx, void *arg)
{
        draft_args *a = arg;
        bl_customer cust;
        bl_invoice inv;
        int rc;

        if ((rc = bl_invoice_load(tx, a->id, true, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        if (inv.state != BL_INV_DRAFT || inv.reason != BL_REASON_MANUAL) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "lines can be added to a one-off draft only");
        }
        if ((rc = bl_customer_load(tx, inv.customer_id, false, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if ((rc = bl_invoice_add_lines(tx, &cust, &inv, a->lines, a->n)) != KS_OK) {
                return rc;
        }
        return bl_reply_invoice(tx, inv.id, NULL);
}

static int run_draft(ks_call *call, const char *id, const char *field, const char *description,
                     Keelson__Billing__V1__ManualLine **lines, size_t n, size_t n_min, bl_tx_fn fn)
{
        draft_args a = {.id = id, .n = n};
        char err[BL_ERR_MAX];
        int rc;

        if (!bl_id_valid(field, id, err, sizeof(err)) ||
            !bl_name_valid("description", description, BL_LINE_DESC_MAX, a.description,
                           sizeof(a.description), err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (n < n_min || n > BL_LINES_PER_CALL_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "lines: %zu to %d", n_min,
                                    BL_LINES_PER_CALL_MAX);
        }
        if ((a.lines = calloc(n + 1, sizeof(*a.lines))) == NULL) {
                return ks_call_oom(call);
        }
        if (!manual_lines(lines, n, a.lines, err, sizeof(err))) {
                free(a.lines);
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        rc = bl_tx_run(call, fn, &a);
        free(a.lines);
        return rc;
}

int bl_create_invoice(ks_call *call)
{
        const Keelson__Billing__V1__CreateInvoiceRequest *in = (const void *)call->in;

        return run_draft(call, in->customer_id, "customer_id", in->description, in->lines,
                         in->n_lines, 0, create_tx);
}

int bl_add_invoice_lines(ks_call *call)
{
        const Keelson__Billing__V1__AddInvoiceLinesRequest *in = (const void *)call->in;

        return run_draft(call, in->id, "id", "", in->lines, in->n_lines, 1, add_tx);
}

/* ---- FinalizeInvoice, VoidInvoice, MarkUncollectible -------------------------------------- */

typedef enum inv_action { I_FINALIZE, I_FINALIZE_CHARGE, I_VOID, I_UNCOLLECTIBLE } inv_action;

typedef struct inv_args {
        const char *id;
        inv_action what;
} inv_action_args;

/* A void gives back what the invoice posted (the part not written off, or the write-off). */
static int void_invoice(bl_tx *tx, bl_invoice *inv, int64_t now)
{
        bool from_uncollectible = inv->state == BL_INV_UNCOLLECTIBLE;
        int rc;

        if (inv->amount_paid > 0 || inv->amount_credited > 0) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "an invoice with payments or credit notes cannot be voided; issue"
                               " a credit note for the rest");
        }
        if ((rc = bl_invoice_move(tx, inv, BL_IE_VOID, now)) != KS_OK) {
                return rc;
        }
        const bl_fact f = bl_invoice_fact(inv, BL_SRC_VOID, from_uncollectible);
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK) {
                return rc;
        }
        /* The customer credit the invoice used comes back. */
        if (inv->balance_applied > 0 &&
            (rc = bl_customer_credit(tx, inv->customer_id, inv->balance_applied)) != KS_OK) {
                return rc;
        }
        return KS_OK;
}

static int write_off(bl_tx *tx, bl_invoice *inv, int64_t now)
{
        int rc;

        if ((rc = bl_invoice_move(tx, inv, BL_IE_MARK_UNCOLLECTIBLE, now)) != KS_OK) {
                return rc;
        }
        const bl_fact f = {.type = BL_SRC_UNCOLLECTIBLE,
                           .source_id = inv->id,
                           .customer_id = inv->customer_id,
                           .currency = inv->currency,
                           .amount = bl_invoice_remaining(inv)};
        return bl_posting_queue(tx, &f);
}

static int inv_do(bl_tx *tx, inv_action_args *a, bl_invoice *inv, bl_customer *cust, int64_t now,
                  bl_payment_made *pay, bool *charged)
{
        int rc = KS_INTERNAL;

        *charged = false;
        switch (a->what) {
        case I_FINALIZE:
        case I_FINALIZE_CHARGE:
                inv->auto_charge = a->what == I_FINALIZE_CHARGE;
                if ((rc = bl_invoice_finalize(tx, cust, inv, now)) != KS_OK) {
                        return rc;
                }
                /* Charged once, now, when there is something to charge and a card to charge:
                 * a one-off invoice has no subscription to retry it (no dunning). */
                if (inv->auto_charge && inv->state == BL_INV_OPEN &&
                    cust->payment_method[0] != '\0') {
                        *charged = true;
                        return bl_invoice_charge(tx, cust, inv, NULL, NULL, false, now, pay);
                }
                return KS_OK;
        case I_VOID:
                rc = void_invoice(tx, inv, now);
                break;
        case I_UNCOLLECTIBLE:
                rc = write_off(tx, inv, now);
                break;
        }
        if (rc != KS_OK || (rc = bl_invoice_save(tx, inv)) != KS_OK ||
            (rc = bl_event_summary(tx, "InvoiceChanged")) != KS_OK) {
                return rc;
        }
        return bl_sub_after_invoice(tx, inv, NULL, BL_SE_DUES_CLEARED, now);
}

static int inv_action_tx(bl_tx *tx, void *arg)
{
        inv_action_args *a = arg;
        Keelson__Billing__V1__Payment pm;
        bl_payment_made pay;
        bl_customer cust;
        bl_invoice inv;
        int64_t now;
        bool charged;
        int rc;

        if ((rc = bl_invoice_load(tx, a->id, true, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        if ((rc = bl_customer_load(tx, inv.customer_id, true, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if ((rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK ||
            (rc = inv_do(tx, a, &inv, &cust, now, &pay, &charged)) != KS_OK) {
                return rc;
        }
        if (charged) {
                bl_payment_message(&pay, &pm);
        }
        return bl_reply_invoice(tx, inv.id, charged ? &pm : NULL);
}

static int run_inv_action(ks_call *call, const char *id, inv_action what)
{
        inv_action_args a = {.id = id, .what = what};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, inv_action_tx, &a);
}

int bl_finalize_invoice(ks_call *call)
{
        const Keelson__Billing__V1__FinalizeInvoiceRequest *in = (const void *)call->in;

        return run_inv_action(call, in->id, in->auto_charge ? I_FINALIZE_CHARGE : I_FINALIZE);
}

int bl_void_invoice(ks_call *call)
{
        const Keelson__Billing__V1__VoidInvoiceRequest *in = (const void *)call->in;

        return run_inv_action(call, in->id, I_VOID);
}

int bl_mark_uncollectible(ks_call *call)
{
        const Keelson__Billing__V1__MarkUncollectibleRequest *in = (const void *)call->in;

        return run_inv_action(call, in->id, I_UNCOLLECTIBLE);
}

/* ---- GetInvoice ------------------------------------------------------------------------------ */

static int get_tx(bl_tx *tx, void *arg)
{
        bl_invoice inv;
        int rc;

        if ((rc = bl_invoice_load(tx, arg, false, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        return bl_reply_invoice_of(tx, &inv, NULL);
}

int bl_get_invoice(ks_call *call)
{
        const Keelson__Billing__V1__GetInvoiceRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run_reads(call, get_tx, in->id);
}

/* ---- ListInvoices ---------------------------------------------------------------------------- */

typedef struct inv_item {
        Keelson__Billing__V1__Invoice m;
        bl_invoice inv;
} inv_item;

static void list_item(void *item, const PGresult *r, int i)
{
        inv_item *it = item;

        if (bl_invoice_read(r, i, &it->inv) != KS_OK) {
                it->inv.currency = bl_currency_find("USD"); /* a row check refuses others */
        }
        bl_invoice_header(&it->inv, &it->m);
}

#define INV_SELECT                                                                                 \
        "SELECT id, customer_id, subscription_id, number, state, billing_reason, currency,"        \
        " subtotal, tax, total, balance_applied, amount_due, amount_paid, amount_credited,"        \
        " n_lines, period_start_ms, period_end_ms, auto_charge, attempt_count, next_attempt_ms,"   \
        " created_ms, finalized_ms, paid_ms, voided_ms, uncollectible_ms, description"             \
        " FROM billing.invoices WHERE tenant_id = billing.ctx_tenant()"
#define INV_PAGE                                                                                   \
        {                                                                                          \
                .name = "keelson.billing.v1.BillingService/ListInvoices",                          \
                .page_size_default = KS_LIST_PAGE_SIZE_DEFAULT,                                    \
                .page_size_max = KS_LIST_PAGE_SIZE_MAX, .n_keys = 2,                               \
                .keys = {KS_LIST_DESC_INT64(20), KS_LIST_DESC_UUID(0)},                            \
                .item_size = sizeof(inv_item), .item = list_item                                   \
        }
#define INV_REST                                                                                   \
        KS_LIST_BEFORE("created_ms", "id")                                                         \
        " AND ($4::int2 < 0 OR state = $4::int2) ORDER BY created_ms DESC, id DESC LIMIT $3::int4"

static const ks_list_method list_all = {
    .page = INV_PAGE, .sql = INV_SELECT INV_REST, .items_field = "invoices"};
static const ks_list_method list_by_customer = {.page = INV_PAGE,
                                                .sql = INV_SELECT
                                                " AND customer_id = $5::uuid" INV_REST,
                                                .items_field = "invoices"};
static const ks_list_method list_by_subscription = {.page = INV_PAGE,
                                                    .sql = INV_SELECT
                                                    " AND subscription_id = $5::uuid" INV_REST,
                                                    .items_field = "invoices"};

int bl_list_invoices(ks_call *call)
{
        const Keelson__Billing__V1__ListInvoicesRequest *in = (const void *)call->in;
        const ks_list_method *m = &list_all;
        const char *by = "";
        bl_inv_state st = BL_INV_STATES;
        char err[BL_ERR_MAX];

        if (in->customer_id[0] != '\0' && in->subscription_id[0] != '\0') {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "customer_id, subscription_id: one at most");
        }
        if (in->customer_id[0] != '\0') {
                m = &list_by_customer;
                by = in->customer_id;
        } else if (in->subscription_id[0] != '\0') {
                m = &list_by_subscription;
                by = in->subscription_id;
        }
        if (by[0] != '\0' &&
            !bl_id_valid(m == &list_by_customer ? "customer_id" : "subscription_id", by, err,
                         sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->state[0] != '\0' && !bl_inv_state_parse(in->state, &st)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "state: draft, open, paid, void or uncollectible");
        }
        ks_pg_num state = ks_pg_num_of(in->state[0] != '\0' ? (int64_t)st : -1);
        const char *filters[2] = {state.s, by};
        return ks_list_reply(call, m, in->page_size, in->page_token, filters, by[0] ? 2 : 1,
                             &bl_list_runner);
}
