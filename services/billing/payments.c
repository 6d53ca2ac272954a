/*
 * Payments: PayInvoice (a charge of the customer's payment method, or of
 * the one the request names, through the provider) and RecordPayment (money
 * received outside keelson: a bank transfer, a cheque). Both go through
 * invoicing.c, so a payment is applied, posted and announced one way.
 *
 * A declined charge is not an error of the call: the reply is OK, its
 * payment says failed with the provider's code (card_declined,
 * insufficient_funds), and the invoice stays open. A charge asked for by
 * hand does not move the dunning schedule; a successful one ends it.
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

#include "ks_text.h"

typedef struct pay_args {
        const char *id;
        const char *token;                        /* PayInvoice */
        int64_t amount;                           /* RecordPayment */
        char reference[BL_REFERENCE_MAX * 4 + 1]; /* RecordPayment */
        bool manual;
} pay_args;

/* The invoice and its customer, both locked, at the customer's now. */
static int load(bl_tx *tx, const char *id, bl_invoice *inv, bl_customer *cust, int64_t *now)
{
        int rc;

        if ((rc = bl_invoice_load(tx, id, true, inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "invoice not found") : rc;
        }
        if ((rc = bl_customer_load(tx, inv->customer_id, true, cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        return bl_now_for(tx, cust->test_clock_id, now);
}

static int pay_tx(bl_tx *tx, void *arg)
{
        pay_args *a = arg;
        Keelson__Billing__V1__Payment pm;
        bl_payment_made pay;
        bl_customer cust;
        bl_invoice inv;
        int64_t now;
        int rc;

        if ((rc = load(tx, a->id, &inv, &cust, &now)) != KS_OK) {
                return rc;
        }
        if (!a->manual) {
                rc = bl_invoice_charge(tx, &cust, &inv, NULL, a->token, false, now, &pay);
        } else if (inv.state != BL_INV_OPEN && inv.state != BL_INV_UNCOLLECTIBLE) {
                rc = bl_fail(tx, KS_FAILED_PRECONDITION, "cannot pay an invoice that is %s",
                             bl_inv_state_name(inv.state));
        } else if (a->amount > bl_invoice_remaining(&inv)) {
                rc = bl_fail(tx, KS_FAILED_PRECONDITION,
                             "amount: more than the %lld that remains to pay",
                             (long long)bl_invoice_remaining(&inv));
        } else {
                memset(&pay, 0, sizeof(pay));
                pay.succeeded = true;
                pay.amount = a->amount;
                pay.created_ms = now;
                snprintf(pay.method, sizeof(pay.method), "out_of_band");
                snprintf(pay.reference, sizeof(pay.reference), "%s", a->reference);
                rc = bl_invoice_apply_payment(tx, &inv, NULL, &pay);
        }
        if (rc != KS_OK) {
                return rc;
        }
        bl_payment_message(&pay, &pm);
        return bl_reply_invoice(tx, inv.id, &pm);
}

int bl_pay_invoice(ks_call *call)
{
        const Keelson__Billing__V1__PayInvoiceRequest *in = (const void *)call->in;
        pay_args a = {.id = in->id, .token = in->payment_method};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err)) ||
            !bl_payment_method_valid("payment_method", in->payment_method, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, pay_tx, &a);
}

int bl_record_payment(ks_call *call)
{
        const Keelson__Billing__V1__RecordPaymentRequest *in = (const void *)call->in;
        pay_args a = {.id = in->id, .amount = in->amount, .manual = true};
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err)) ||
            !bl_name_valid("reference", in->reference, BL_REFERENCE_MAX, a.reference,
                           sizeof(a.reference), err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->amount < 1) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "amount: at least 1");
        }
        return bl_tx_run(call, pay_tx, &a);
}
