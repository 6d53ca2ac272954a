/*
 * Credit notes: CreateCreditNote and ListCreditNotes.
 *
 * A credit note takes back part or all of a finalized invoice, tax
 * included, without changing the invoice itself (its lines are frozen):
 *
 *   - on an open invoice it reduces what is left to pay (credited_to
 *     "reduced_amount_due"), at most that; the invoice is paid when nothing
 *     is left;
 *   - on a paid invoice it becomes credit the customer holds (credited_to
 *     "customer_balance"), applied to its next invoices; at most the total
 *     less what was credited before;
 *   - or, asked with refund, it is paid back through the invoice's card
 *     payment (credited_to "refund"): the newest succeeded card payment
 *     whose unrefunded part covers the amount is refunded at the provider,
 *     with the note's id as the idempotency key, before anything is
 *     written; a refund the provider refuses fails the call and leaves
 *     nothing. The customer's balance does not change: the note's chain
 *     takes the amount on from the customer's credit to cash.
 *
 * The amount splits into a tax part and the rest in the invoice's own
 * proportion: tax = round(amount × invoice tax / invoice total), half away
 * from zero, and subtotal = amount − tax, so the two add up exactly.
 * Numbers are per tenant and gapless ("CN-000001"). Each note is announced
 * (billing.credit_note_created) and posts its chain to the ledger (revenue and tax payable back,
 * against the receivable or the customer's credit).
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

#include "ks_crypto.h"

typedef bl_credit_note note;

static const char sql_insert[] =
    "INSERT INTO billing.credit_notes (tenant_id, id, number, invoice_id, customer_id, currency,"
    " amount, subtotal, tax, reason, credited_to, created_ms, refund_payment_id,"
    " refund_reference) VALUES (billing.ctx_tenant(), $1::uuid, $2, $3::uuid, $4::uuid, $5,"
    " $6::int8, $7::int8, $8::int8, $9, $10, $11::int8, NULLIF($12, '')::uuid, $13)";

static int insert(bl_tx *tx, const bl_invoice *inv, const note *n)
{
        ks_pg_num a = ks_pg_num_of(n->amount), s = ks_pg_num_of(n->subtotal),
                  t = ks_pg_num_of(n->tax), at = ks_pg_num_of(n->created_ms);
        const char *p[13] = {n->id,
                             n->number,
                             inv->id,
                             inv->customer_id,
                             inv->currency->code,
                             a.s,
                             s.s,
                             t.s,
                             n->reason,
                             n->credited_to,
                             at.s,
                             n->refund_payment_id,
                             n->refund_reference};

        return bl_defer(tx, sql_insert, 13, p);
}

/* ---- refunds -------------------------------------------------------------------------------- */

/* The invoice's succeeded card payments, newest first, with what is left to refund of each. */
static const char sql_refundable[] =
    "SELECT id, amount - amount_refunded, payment_method, reference FROM billing.payments"
    " WHERE tenant_id = billing.ctx_tenant() AND invoice_id = $1::uuid AND status = 1"
    " AND method = 'card' AND amount_refunded < amount ORDER BY created_ms DESC, id DESC"
    " FOR UPDATE";

static const char sql_refunded[] =
    "UPDATE billing.payments SET amount_refunded = amount_refunded + $2::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

/*
 * n's amount paid back through the newest card payment of inv that still
 * covers it, at the provider (nothing is written yet: a refusal fails the
 * call), then that payment's refunded amount moved on.
 */
static int refund(bl_tx *tx, const bl_invoice *inv, note *n)
{
        const char *p[1] = {inv->id};
        PGresult *res = NULL;
        char key[64];
        int64_t largest = 0;
        int row = -1, rc;
        bl_charge out;

        if ((rc = bl_exec(tx, sql_refundable, 1, p, &res)) != KS_OK) {
                return rc;
        }
        for (int i = 0; i < PQntuples(res) && row < 0; i++) {
                int64_t left = ks_pg_int(res, i, 1);
                largest = left > largest ? left : largest;
                row = left >= n->amount ? i : -1;
        }
        if (row < 0) {
                PQclear(res);
                return largest == 0 ? bl_fail(tx, KS_FAILED_PRECONDITION,
                                              "nothing paid by card is left to refund: credit "
                                              "the customer's balance instead")
                                    : bl_fail(tx, KS_FAILED_PRECONDITION,
                                              "amount: at most %lld can be refunded (what is "
                                              "left of one card payment)",
                                              (long long)largest);
        }
        snprintf(n->refund_payment_id, sizeof(n->refund_payment_id), "%s", ks_pg_text(res, row, 0));
        snprintf(key, sizeof(key), "refund/%s", n->id);
        bl_provider_refund(ks_pg_text(res, row, 2), ks_pg_text(res, row, 3), n->amount,
                           inv->currency, key, &out);
        PQclear(res);
        if (!out.ok) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the refund failed: %s",
                               out.failure_code);
        }
        snprintf(n->refund_reference, sizeof(n->refund_reference), "%s", out.reference);
        ks_pg_num a = ks_pg_num_of(n->amount);
        const char *u[2] = {n->refund_payment_id, a.s};
        return bl_defer(tx, sql_refunded, 2, u);
}

/* How much may still be credited, and where it goes. */
static int creditable(bl_tx *tx, const bl_invoice *inv, bool refund, int64_t *max, bool *to_balance)
{
        if (refund && inv->state != BL_INV_PAID) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "a refund needs a paid invoice; this one is %s",
                               bl_inv_state_name(inv->state));
        }
        if (inv->state == BL_INV_OPEN) {
                *max = bl_invoice_remaining(inv);
                *to_balance = false;
        } else if (inv->state == BL_INV_PAID) {
                *max = (inv->total > 0 ? inv->total : 0) - inv->amount_credited;
                *to_balance = true;
        } else {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "a credit note needs an open or paid invoice; this one is %s",
                               bl_inv_state_name(inv->state));
        }
        if (*max <= 0) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "nothing is left to credit");
        }
        return KS_OK;
}

/* The note's split and its effects on the invoice and the customer. */
static int apply(bl_tx *tx, bl_invoice *inv, note *n, bool to_balance)
{
        int rc;

        if (inv->total <= 0 || !bl_mul_div(n->amount, inv->tax, inv->total, &n->tax)) {
                n->tax = 0;
        }
        n->subtotal = n->amount - n->tax;
        n->credited_to = n->refund    ? "refund"
                         : to_balance ? "customer_balance"
                                      : "reduced_amount_due";
        if (ks_uuid_v7(n->id) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        if ((n->refund && (rc = refund(tx, inv, n)) != KS_OK) ||
            (rc = bl_next_number(tx, 2, "CN", n->number, sizeof(n->number))) != KS_OK ||
            (rc = insert(tx, inv, n)) != KS_OK) {
                return rc;
        }
        inv->amount_credited += n->amount;
        const bl_fact f = {.type = BL_SRC_CREDIT_NOTE,
                           .source_id = n->id,
                           .customer_id = inv->customer_id,
                           .currency = inv->currency,
                           .amount = n->amount,
                           .subtotal = n->subtotal,
                           .tax = n->tax,
                           .to_credit = to_balance,
                           .refunded = n->refund ? n->amount : 0};
        if ((rc = bl_posting_queue(tx, &f)) != KS_OK ||
            (rc = bl_event_credit_note_created(tx, inv, n)) != KS_OK) {
                return rc;
        }
        if (n->refund) {
                return KS_OK; /* paid back: the balance does not move */
        }
        if (to_balance) {
                return bl_customer_credit(tx, inv->customer_id, n->amount);
        }
        if (bl_invoice_remaining(inv) == 0 &&
            ((rc = bl_invoice_move(tx, inv, BL_IE_PAY, n->created_ms)) != KS_OK ||
             (rc = bl_invoice_paid_event(tx, inv)) != KS_OK)) {
                return rc;
        }
        return KS_OK;
}

typedef struct create_args {
        const Keelson__Billing__V1__CreateCreditNoteRequest *in;
        char reason[BL_REASON_MAX * 4 + 1];
} create_args;

static int reply(bl_tx *tx, const bl_invoice *inv, const note *n)
{
        Keelson__Billing__V1__CreditNoteResponse resp =
            KEELSON__BILLING__V1__CREDIT_NOTE_RESPONSE__INIT;
        Keelson__Billing__V1__CreditNote m = KEELSON__BILLING__V1__CREDIT_NOTE__INIT;
        bl_invoice_view v;
        int rc;

        m.id = (char *)n->id;
        m.number = (char *)n->number;
        m.invoice_id = (char *)inv->id;
        m.amount = n->amount;
        m.subtotal = n->subtotal;
        m.tax = n->tax;
        m.reason = (char *)n->reason;
        m.credited_to = (char *)n->credited_to;
        m.created_at_unix_ms = n->created_ms;
        m.refund_payment_id = (char *)n->refund_payment_id;
        m.refund_reference = (char *)n->refund_reference;
        resp.credit_note = &m;
        if ((rc = bl_invoice_view_make(tx, inv, true, &v)) == KS_OK) {
                resp.invoice = &v.m;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        bl_invoice_view_free(&v);
        return rc;
}

static int create_tx(bl_tx *tx, void *arg)
{
        create_args *a = arg;
        bl_customer cust;
        bl_invoice inv;
        bool to_balance = false;
        int64_t max = 0;
        note n;
        int rc;

        if ((rc = bl_invoice_load(tx, a->in->invoice_id, true, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "invoice not found") : rc;
        }
        if ((rc = bl_customer_load(tx, inv.customer_id, true, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        if ((rc = creditable(tx, &inv, a->in->refund, &max, &to_balance)) != KS_OK) {
                return rc;
        }
        memset(&n, 0, sizeof(n));
        n.refund = a->in->refund;
        n.amount = a->in->amount == 0 ? max : a->in->amount;
        if (n.amount > max) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "amount: at most %lld can be credited",
                               (long long)max);
        }
        snprintf(n.reason, sizeof(n.reason), "%s", a->reason);
        if ((rc = bl_now_for(tx, cust.test_clock_id, &n.created_ms)) != KS_OK ||
            (rc = apply(tx, &inv, &n, to_balance)) != KS_OK ||
            (rc = bl_invoice_save(tx, &inv)) != KS_OK ||
            (rc = bl_event_summary(tx, "CreateCreditNote")) != KS_OK ||
            (inv.state == BL_INV_PAID && !to_balance &&
             (rc = bl_sub_after_invoice(tx, &inv, NULL, BL_SE_DUES_CLEARED, n.created_ms)) !=
                 KS_OK)) {
                return rc;
        }
        return reply(tx, &inv, &n);
}

int bl_create_credit_note(ks_call *call)
{
        const Keelson__Billing__V1__CreateCreditNoteRequest *in = (const void *)call->in;
        create_args a = {.in = in};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("invoice_id", in->invoice_id, err, sizeof(err)) ||
            !bl_name_valid("reason", in->reason, BL_REASON_MAX, a.reason, sizeof(a.reason), err,
                           sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->amount < 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "amount: 0 (all that is left) or more");
        }
        return bl_tx_run(call, create_tx, &a);
}

/* ---- ListCreditNotes ---------------------------------------------------------------------- */

#define NOTE_SELECT                                                                                \
        "SELECT " BL_NOTE_COLUMNS                                                                  \
        " FROM billing.credit_notes WHERE tenant_id = billing.ctx_tenant()"
#define NOTE_PAGE                                                                                  \
        KS_LIST_PAGE("keelson.billing.v1.BillingService/ListCreditNotes",                          \
                     Keelson__Billing__V1__CreditNote, bl_credit_note_item, KS_LIST_DESC_INT64(8), \
                     KS_LIST_DESC_UUID(0))
#define NOTE_REST                                                                                  \
        KS_LIST_BEFORE("created_ms", "id")                                                         \
        " ORDER BY created_ms DESC, id DESC LIMIT $3::int4"

static const ks_list_method list_all = {
    .page = NOTE_PAGE, .sql = NOTE_SELECT NOTE_REST, .items_field = "credit_notes"};
static const ks_list_method list_by_invoice = {.page = NOTE_PAGE,
                                               .sql = NOTE_SELECT
                                               " AND invoice_id = $4::uuid" NOTE_REST,
                                               .items_field = "credit_notes"};

int bl_list_credit_notes(ks_call *call)
{
        const Keelson__Billing__V1__ListCreditNotesRequest *in = (const void *)call->in;
        bool by = in->invoice_id[0] != '\0';
        char err[BL_ERR_MAX];

        if (by && !bl_id_valid("invoice_id", in->invoice_id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        const char *filters[1] = {in->invoice_id};
        return ks_list_reply(call, by ? &list_by_invoice : &list_all, in->page_size, in->page_token,
                             filters, by ? 1 : 0, &bl_list_runner);
}
