/*
 * The events billing publishes, as a subscriber on the brokers' event bus
 * receives them: billing.subscription_changed, billing.invoice_finalized
 * (with the invoice's number), billing.invoice_paid and users.admin_summary
 * after a subscription is created and its first invoice charged; a renewal's
 * on a test clock; billing.credit_note_created for a refund; nothing at all
 * for a call that failed and rolled back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "keelson/billing/v1/events.pb-c.h"
#include "ks_events.h"

#define WAIT_MS  10000 /* generous: "arrives", never "arrives within" */
#define QUIET_MS 3000  /* what did not come in this long after the relay's polls is not coming */

static ks_subscriber *subscribe(void)
{
        const char *bases[1] = {ait_stack.broker_url};
        const char *prefixes[2] = {"billing.", "users.admin_summary"};
        ks_subscriber *s = NULL;

        assert_int_equal(ks_subscriber_new(&s, bases, 1, prefixes, 2), KS_OK);
        it_sleep_ms(300); /* pub/sub drops what comes before the subscription is up */
        return s;
}

/* What a tenant's events said, collected until want events came or the wait ran out. */
typedef struct seen {
        int changed, finalized, paid, summary, noted;
        char note_number[32], credited_to[32];
        int64_t noted_amount;
        char number[32];
        char events[8][32]; /* subscription_changed's events, in order */
        int n_events;
        int64_t finalized_total, paid_amount;
} seen;

static void take(const Keelson__Events__V1__Event *ev, seen *s)
{
        if (strcmp(ev->topic, "billing.subscription_changed") == 0) {
                Keelson__Billing__V1__SubscriptionChanged *m =
                    keelson__billing__v1__subscription_changed__unpack(NULL, ev->payload.len,
                                                                       ev->payload.data);
                assert_non_null(m);
                if (s->n_events < 8) {
                        snprintf(s->events[s->n_events++], 32, "%s", m->event);
                }
                s->changed++;
                keelson__billing__v1__subscription_changed__free_unpacked(m, NULL);
        } else if (strcmp(ev->topic, "billing.invoice_finalized") == 0) {
                Keelson__Billing__V1__InvoiceFinalized *m =
                    keelson__billing__v1__invoice_finalized__unpack(NULL, ev->payload.len,
                                                                    ev->payload.data);
                assert_non_null(m);
                snprintf(s->number, sizeof(s->number), "%s", m->number);
                s->finalized_total += m->total;
                s->finalized++;
                keelson__billing__v1__invoice_finalized__free_unpacked(m, NULL);
        } else if (strcmp(ev->topic, "billing.invoice_paid") == 0) {
                Keelson__Billing__V1__InvoicePaid *m = keelson__billing__v1__invoice_paid__unpack(
                    NULL, ev->payload.len, ev->payload.data);
                assert_non_null(m);
                s->paid_amount += m->amount_paid;
                s->paid++;
                keelson__billing__v1__invoice_paid__free_unpacked(m, NULL);
        } else if (strcmp(ev->topic, "billing.credit_note_created") == 0) {
                Keelson__Billing__V1__CreditNoteCreated *m =
                    keelson__billing__v1__credit_note_created__unpack(NULL, ev->payload.len,
                                                                      ev->payload.data);
                assert_non_null(m);
                snprintf(s->note_number, sizeof(s->note_number), "%s", m->number);
                snprintf(s->credited_to, sizeof(s->credited_to), "%s", m->credited_to);
                s->noted_amount += m->amount;
                assert_int_equal(strncmp(m->refund_reference, "re_mock_", 8), 0);
                s->noted++;
                keelson__billing__v1__credit_note_created__free_unpacked(m, NULL);
        } else if (strcmp(ev->topic, "users.admin_summary") == 0) {
                s->summary++;
        }
}

/* The tenant's events for up to wait_ms, stopping once `want` of them came. */
static void collect_for(ks_subscriber *sub, const char *tenant_id, int want, int wait_ms, seen *s)
{
        int64_t until = ks_now_ms() + wait_ms;
        int got = 0;

        memset(s, 0, sizeof(*s));
        while (got < want && ks_now_ms() < until) {
                Keelson__Events__V1__Event *ev = NULL;
                if (ks_subscriber_next(sub, 200, &ev) != KS_OK) {
                        continue;
                }
                if (strcmp(ev->tenant_id, tenant_id) == 0) {
                        take(ev, s);
                        got++;
                }
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
}

static void collect(ks_subscriber *sub, const char *tenant_id, int want, seen *s)
{
        collect_for(sub, tenant_id, want, WAIT_MS, s);
}

static void test_creation_and_renewal_are_announced(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX];
        seen s;
        ks_subscriber *sub = subscribe();

        bit_tenant_new("bl-events", &t);
        bit_clock(&t, bit_utc(2027, 4, 1, 0, 0, 0), clock);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", clock, cust);
        /* What the sign-up (auth's) and CreateCustomer sent: drained, so that what follows
         * is the subscription's alone. */
        collect_for(sub, t.owner.tenant_id, 100, QUIET_MS, &s);
        assert_true(s.summary >= 1);

        char inv[BIT_ID_MAX];
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(inv, sizeof(inv), "%s", bit_str(j, "latestInvoice.id"));
        json_decref(j);
        collect(sub, t.owner.tenant_id, 4, &s);
        assert_int_equal(s.changed, 1);
        assert_string_equal(s.events[0], "create");
        assert_int_equal(s.finalized, 1);
        assert_string_equal(s.number, "INV-000001");
        assert_int_equal(s.finalized_total, 1100);
        assert_int_equal(s.paid, 1);
        assert_int_equal(s.paid_amount, 1100);
        assert_int_equal(s.summary, 1); /* once per transaction */

        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 5, 1, 0, 0, 0)), 1);
        collect(sub, t.owner.tenant_id, 4, &s);
        assert_int_equal(s.changed, 1);
        assert_string_equal(s.events[0], "renew");
        assert_string_equal(s.number, "INV-000002");
        assert_int_equal(s.paid, 1);

        /* A refund of part of the first invoice: the note, and the summary's invalidation. */
        json_decref(bit_ok(t.owner.token, "CreateCreditNote",
                           "{\"invoiceId\":\"%s\",\"amount\":\"550\",\"refund\":true}", inv));
        collect(sub, t.owner.tenant_id, 2, &s);
        assert_int_equal(s.noted, 1);
        assert_string_equal(s.note_number, "CN-000001");
        assert_string_equal(s.credited_to, "refund");
        assert_int_equal(s.noted_amount, 550);
        assert_int_equal(s.summary, 1);
        assert_int_equal(s.changed + s.finalized + s.paid, 0);

        /* A call refused in its transaction (the plan is in another currency) sends nothing. */
        bit_plan(&t, "eur", "EUR", "FLAT", 1000, "MONTH", 1, 0); /* plans send no event */
        bit_fails_with(t.owner.token, "CreateSubscription", "failed_precondition",
                       "the plan is in EUR and the customer in USD",
                       "{\"customerId\":\"%s\",\"planCode\":\"eur\"}", cust);
        collect_for(sub, t.owner.tenant_id, 1, QUIET_MS, &s);
        assert_int_equal(s.changed + s.finalized + s.paid + s.summary + s.noted, 0);
        ks_subscriber_free(sub);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_creation_and_renewal_are_announced),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
