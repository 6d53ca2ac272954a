/*
 * One-off invoices and every way an invoice ends, through the gateway:
 * drafts with manual lines (taxed per line, a tax-exempt one, a discount),
 * lines added to a draft, finalization with and without a card, partial and
 * full payments recorded by hand, a declined charge that is an OK reply,
 * voids and write-offs and a payment after a write-off, a credit note that
 * settles an open invoice; then the rules around them: a void that would
 * undo a payment, a metadata merge past its bound, a cancellation at period
 * end taken back, a usage batch resent after its period was invoiced, the
 * event a subscription records when its overdue invoice is voided, and a
 * role refused before its input is read. Each tenant's reconciliation is
 * clean at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"

static json_t *draft(const bit_tenant *t, const char *cust)
{
        return bit_ok(t->owner.token, "CreateInvoice",
                      "{\"customerId\":\"%s\",\"description\":\"consulting\",\"lines\":["
                      "{\"description\":\"Design\",\"quantity\":\"3\",\"unitAmount\":\"1000\"},"
                      "{\"description\":\"Books\",\"unitAmount\":\"500\",\"taxExempt\":true},"
                      "{\"description\":\"Discount\",\"unitAmount\":\"-300\"}]}",
                      cust);
}

static void test_one_off_invoice_paid_by_hand(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], id[BIT_ID_MAX];

        bit_tenant_new("bl-inv", &t);
        bit_customer(&t, "USD", 2000, "", "", cust);
        json_t *j = draft(&t, cust);
        snprintf(id, sizeof(id), "%s", bit_str(j, "invoice.id"));
        /* 3000 + 500 (no tax) − 300: tax 600 − 60 on the taxed lines. */
        assert_string_equal(bit_str(j, "invoice.state"), "draft");
        assert_string_equal(bit_str(j, "invoice.number"), "");
        assert_int_equal(bit_int(j, "invoice.subtotal"), 3200);
        assert_int_equal(bit_int(j, "invoice.tax"), 540);
        assert_int_equal(bit_int(j, "invoice.total"), 3740);
        json_decref(j);
        j = bit_ok(
            t.owner.token, "AddInvoiceLines",
            "{\"id\":\"%s\",\"lines\":[{\"description\":\"Travel\",\"unitAmount\":\"250\"}]}", id);
        assert_int_equal(json_array_size(bit_at(j, "invoice.lines")), 4);
        assert_int_equal(bit_int(j, "invoice.total"), 3740 + 250 + 50);
        json_decref(j);
        /* No card: finalized and left open, whatever autoCharge says. */
        j = bit_ok(t.owner.token, "FinalizeInvoice", "{\"id\":\"%s\",\"autoCharge\":true}", id);
        assert_string_equal(bit_str(j, "invoice.state"), "open");
        assert_string_equal(bit_str(j, "invoice.number"), "INV-000001");
        assert_int_equal(bit_int(j, "invoice.amountRemaining"), 4040);
        json_decref(j);
        bit_fails_with(t.owner.token, "AddInvoiceLines", "failed_precondition",
                       "lines can be added to a one-off draft only",
                       "{\"id\":\"%s\",\"lines\":[{\"description\":\"x\",\"unitAmount\":\"1\"}]}",
                       id);
        bit_fails_with(t.owner.token, "RecordPayment", "failed_precondition",
                       "amount: more than the 4040 that remains to pay",
                       "{\"id\":\"%s\",\"amount\":\"4041\"}", id);
        j = bit_ok(t.owner.token, "RecordPayment",
                   "{\"id\":\"%s\",\"amount\":\"1040\",\"reference\":\"wire 1\"}", id);
        assert_string_equal(bit_str(j, "invoice.state"), "open");
        assert_int_equal(bit_int(j, "invoice.amountRemaining"), 3000);
        assert_string_equal(bit_str(j, "payment.method"), "out_of_band");
        json_decref(j);
        /* Part paid: a void would undo a payment. */
        bit_fails_with(t.owner.token, "VoidInvoice", "failed_precondition",
                       "an invoice with payments or credit notes cannot be voided; issue a credit "
                       "note for the rest",
                       "{\"id\":\"%s\"}", id);
        j = bit_ok(t.owner.token, "RecordPayment", "{\"id\":\"%s\",\"amount\":\"3000\"}", id);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(json_array_size(bit_at(j, "invoice.payments")), 2);
        json_decref(j);
        /* Bad drafts. */
        bit_fails_with(t.owner.token, "CreateInvoice", "invalid_argument",
                       "lines[0].description: required",
                       "{\"customerId\":\"%s\",\"lines\":[{\"unitAmount\":\"1\"}]}", cust);
        bit_fails_with(t.owner.token, "CreateInvoice", "invalid_argument",
                       "lines[0].quantity: 1 to 1000000",
                       "{\"customerId\":\"%s\",\"lines\":[{\"description\":\"x\",\"quantity\":"
                       "\"1000001\"}]}",
                       cust);
        json_decref(bit_reconcile_clean(&t));
}

static void test_cards_voids_and_write_offs(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], a[BIT_ID_MAX], b[BIT_ID_MAX], c[BIT_ID_MAX];

        bit_tenant_new("bl-void", &t);
        bit_customer(&t, "EUR", 0, "pm_card_chargeDeclinedInsufficientFunds", "", cust);
        char *ids[3] = {a, b, c};
        for (int i = 0; i < 3; i++) {
                json_t *j = draft(&t, cust);
                snprintf(ids[i], BIT_ID_MAX, "%s", bit_str(j, "invoice.id"));
                json_decref(j);
                /* A declined card: an OK reply, the payment failed, the invoice open. */
                j = bit_ok(t.owner.token, "FinalizeInvoice", "{\"id\":\"%s\",\"autoCharge\":true}",
                           ids[i]);
                assert_string_equal(bit_str(j, "invoice.state"), "open");
                assert_string_equal(bit_str(j, "payment.status"), "failed");
                assert_string_equal(bit_str(j, "payment.failureCode"), "insufficient_funds");
                json_decref(j);
        }
        /* Another card, named in the request: paid. */
        json_t *j = bit_ok(t.owner.token, "PayInvoice",
                           "{\"id\":\"%s\",\"paymentMethod\":\"pm_card_visa\"}", a);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_string_equal(bit_str(j, "payment.status"), "succeeded");
        json_decref(j);
        bit_fails_with(t.owner.token, "PayInvoice", "invalid_argument",
                       "payment_method: printable ASCII without spaces",
                       "{\"id\":\"%s\",\"paymentMethod\":\"has space\"}", b);
        /* Voided: nothing owed, nothing in the ledger but the reversal. */
        j = bit_ok(t.owner.token, "VoidInvoice", "{\"id\":\"%s\"}", b);
        assert_string_equal(bit_str(j, "invoice.state"), "void");
        json_decref(j);
        bit_fails_with(t.owner.token, "RecordPayment", "failed_precondition",
                       "cannot pay an invoice that is void", "{\"id\":\"%s\",\"amount\":\"1\"}", b);
        /* Written off, then paid after all. */
        j = bit_ok(t.owner.token, "MarkUncollectible", "{\"id\":\"%s\"}", c);
        assert_string_equal(bit_str(j, "invoice.state"), "uncollectible");
        assert_true(bit_int(j, "invoice.uncollectibleAtUnixMs") > 0);
        json_decref(j);
        j = bit_ok(t.owner.token, "RecordPayment", "{\"id\":\"%s\",\"amount\":\"3200\"}",
                   c); /* no tax here */
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

static void test_credit_note_settles_an_open_invoice(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], id[BIT_ID_MAX];

        bit_tenant_new("bl-cn", &t);
        bit_customer(&t, "USD", 2000, "", "", cust);
        json_t *j = draft(&t, cust);
        snprintf(id, sizeof(id), "%s", bit_str(j, "invoice.id"));
        json_decref(j);
        json_decref(bit_ok(t.owner.token, "FinalizeInvoice", "{\"id\":\"%s\"}", id));
        j = bit_ok(t.owner.token, "CreateCreditNote", "{\"invoiceId\":\"%s\",\"amount\":\"740\"}",
                   id);
        assert_string_equal(bit_str(j, "creditNote.creditedTo"), "reduced_amount_due");
        assert_int_equal(bit_int(j, "invoice.amountRemaining"), 3000);
        json_decref(j);
        j = bit_ok(t.owner.token, "CreateCreditNote", "{\"invoiceId\":\"%s\"}", id);
        assert_int_equal(bit_int(j, "creditNote.amount"), 3000);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        json_decref(j);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 0);
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

static void test_rules_around_them(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], clock[BIT_ID_MAX], sub[BIT_ID_MAX], meter[BIT_ID_MAX];
        char body[8192];
        size_t n = 0;
        int64_t start = bit_utc(2027, 5, 1, 0, 0, 0);

        bit_tenant_new("bl-rules", &t);
        /* A metadata merge past 50 keys: refused, not a 500. */
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        for (int round = 0; round < 2; round++) {
                n = (size_t)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"metadata\":{", cust);
                for (int k = 0; k < 30; k++) {
                        n += (size_t)snprintf(body + n, sizeof(body) - n, "%s\"k%d_%d\":\"v\"",
                                              k ? "," : "", round, k);
                }
                snprintf(body + n, sizeof(body) - n, "}}");
                if (round == 0) {
                        json_decref(bit_ok(t.owner.token, "UpdateCustomer", "%s", body));
                } else {
                        bit_fails_with(t.owner.token, "UpdateCustomer", "invalid_argument",
                                       "metadata: at most 50 keys once merged", "%s", body);
                }
        }
        /* A cancellation at period end, taken back: the subscription renews. */
        bit_clock(&t, start, clock);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        char ccust[BIT_ID_MAX];
        bit_customer(&t, "USD", 0, "pm_card_visa", clock, ccust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", ccust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        json_decref(j);
        bit_fails_with(t.owner.token, "CancelSubscription", "failed_precondition",
                       "no cancellation at period end to withdraw",
                       "{\"id\":\"%s\",\"withdraw\":true}", sub);
        j = bit_ok(t.owner.token, "CancelSubscription", "{\"id\":\"%s\",\"atPeriodEnd\":true}",
                   sub);
        assert_true(bit_bool(j, "subscription.cancelAtPeriodEnd"));
        json_decref(j);
        j = bit_ok(t.owner.token, "CancelSubscription", "{\"id\":\"%s\",\"withdraw\":true}", sub);
        assert_false(bit_bool(j, "subscription.cancelAtPeriodEnd"));
        json_decref(j);
        /* A metered subscription: a batch resent after its period was invoiced is duplicates. */
        json_decref(bit_ok(t.owner.token, "CreatePlan",
                           "{\"code\":\"api\",\"currency\":\"USD\",\"intervalUnit\":"
                           "\"INTERVAL_UNIT_MONTH\",\"price\":{\"model\":\"PRICE_MODEL_GRADUATED\","
                           "\"tiers\":[{\"unitAmount\":\"2\"}]}}"));
        j = bit_ok(t.owner.token, "CreateSubscription",
                   "{\"customerId\":\"%s\",\"planCode\":\"api\"}", ccust);
        snprintf(meter, sizeof(meter), "%s", bit_str(j, "subscription.id"));
        json_decref(j);
        snprintf(body, sizeof(body),
                 "{\"subscriptionId\":\"%s\",\"events\":[{\"eventId\":\"u1\",\"quantity\":\"7\","
                 "\"timestampUnixMs\":\"%lld\"}]}",
                 meter, (long long)start);
        j = bit_ok(t.owner.token, "RecordUsage", "%s", body);
        assert_int_equal(bit_int(j, "recorded"), 1);
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 6, 1, 0, 0, 0)), 2);
        j = bit_ok(t.owner.token, "RecordUsage", "%s", body);
        assert_int_equal(bit_int(j, "recorded"), 0);
        assert_int_equal(bit_int(j, "duplicates"), 1);
        json_decref(j);
        /* The card declines now; voiding the overdue invoice clears the dues. */
        json_decref(bit_ok(t.owner.token, "UpdateCustomer",
                           "{\"id\":\"%s\",\"updateMask\":[\"default_payment_method\"],"
                           "\"defaultPaymentMethod\":\"pm_card_chargeDeclined\"}",
                           ccust));
        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 7, 1, 0, 0, 0)), 2);
        j = bit_ok(t.owner.token, "GetSubscription", "{\"id\":\"%s\"}", sub);
        assert_string_equal(bit_str(j, "subscription.state"), "past_due");
        const char *overdue = bit_str(j, "subscription.latestInvoiceId");
        json_decref(bit_ok(t.owner.token, "VoidInvoice", "{\"id\":\"%s\"}", overdue));
        json_decref(j);
        j = bit_ok(t.owner.token, "ListSubscriptionHistory", "{\"id\":\"%s\"}", sub);
        json_t *entries = bit_at(j, "entries");
        json_t *last = json_array_get(entries, json_array_size(entries) - 1);
        assert_string_equal(bit_str(last, "event"), "dues_cleared");
        assert_string_equal(bit_str(last, "toState"), "active");
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

/* The role is checked before the input: a viewer learns nothing of what it sent. */
static void test_role_before_input(void **state)
{
        (void)state;
        ait_user owner, viewer;

        ait_tenant_of_two("bl-role", "bl-role", "viewer", &owner, &viewer);
        bit_fails_with(viewer.token, "CreateCustomer", "permission_denied",
                       "your role (viewer) lacks billing.manage",
                       "{\"email\":\"not an address\",\"currency\":\"nope\"}");
        bit_fails_with(viewer.token, "GetInvoice", "permission_denied",
                       "your role (viewer) lacks billing.read", "{\"id\":\"not-a-uuid\"}");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_one_off_invoice_paid_by_hand),
            cmocka_unit_test(test_cards_voids_and_write_offs),
            cmocka_unit_test(test_credit_note_settles_an_open_invoice),
            cmocka_unit_test(test_rules_around_them),
            cmocka_unit_test(test_role_before_input),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
