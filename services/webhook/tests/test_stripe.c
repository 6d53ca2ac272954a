/*
 * What billing is told of a Stripe event (services/webhook/stripe.c): the
 * fields of each type's object, keelson's ids from its metadata, one
 * reference for the two events of one payment, and what is left out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "stripe.h"

#define INV "6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11"
#define SUB "0d2b3a43-2f9c-4e7a-8d1e-3c5b7f9a1d2e"

static int read_text(const char *json, wh_stripe_event *ev,
                     Keelson__Billing__V1__ApplyProviderEventRequest *req)
{
        return wh_stripe_read((const uint8_t *)json, strlen(json), ev, req);
}

static void test_invoice_paid(void **state)
{
        wh_stripe_event ev;
        Keelson__Billing__V1__ApplyProviderEventRequest req;

        (void)state;
        assert_int_equal(
            read_text("{\"id\":\"evt_1\",\"object\":\"event\",\"type\":\"invoice.paid\","
                      "\"created\":1764892800,\"data\":{\"object\":{\"id\":\"in_1\","
                      "\"object\":\"invoice\",\"amount_paid\":4040,\"currency\":\"usd\","
                      "\"payment_intent\":\"pi_1\",\"metadata\":{\"keelson_invoice_id\":\"" INV
                      "\"}}}}",
                      &ev, &req),
            0);
        assert_string_equal(req.provider, "stripe");
        assert_string_equal(req.event_id, "evt_1");
        assert_string_equal(req.type, "invoice.paid");
        assert_int_equal(req.created_unix_ms, 1764892800000LL);
        assert_string_equal(req.invoice_id, INV);
        assert_string_equal(req.subscription_id, "");
        assert_int_equal(req.amount, 4040);
        assert_string_equal(req.currency, "USD");
        assert_string_equal(req.payment_reference, "pi_1");
}

static void test_one_payment_one_reference(void **state)
{
        wh_stripe_event ev;
        Keelson__Billing__V1__ApplyProviderEventRequest req;

        (void)state;
        /* the payment intent itself: its id */
        assert_int_equal(
            read_text("{\"id\":\"evt_2\",\"type\":\"payment_intent.succeeded\",\"created\":1,"
                      "\"data\":{\"object\":{\"id\":\"pi_1\",\"amount_received\":4040,"
                      "\"currency\":\"usd\",\"metadata\":{\"keelson_invoice_id\":\"" INV "\"}}}}",
                      &ev, &req),
            0);
        assert_string_equal(req.payment_reference, "pi_1");
        assert_int_equal(req.amount, 4040);
        /* an invoice with its payment intent expanded */
        assert_int_equal(read_text("{\"id\":\"evt_3\",\"type\":\"invoice.paid\",\"created\":1,"
                                   "\"data\":{\"object\":{\"id\":\"in_1\",\"payment_intent\":"
                                   "{\"id\":\"pi_1\",\"object\":\"payment_intent\"}}}}",
                                   &ev, &req),
                         0);
        assert_string_equal(req.payment_reference, "pi_1");
        /* paid without a payment intent (out of band): the invoice's own id */
        assert_int_equal(
            read_text("{\"id\":\"evt_4\",\"type\":\"invoice.paid\",\"created\":1,"
                      "\"data\":{\"object\":{\"id\":\"in_9\",\"payment_intent\":null}}}",
                      &ev, &req),
            0);
        assert_string_equal(req.payment_reference, "in_9");
}

static void test_failed_and_subscription(void **state)
{
        wh_stripe_event ev;
        Keelson__Billing__V1__ApplyProviderEventRequest req;

        (void)state;
        assert_int_equal(
            read_text("{\"id\":\"evt_5\",\"type\":\"payment_intent.payment_failed\",\"created\":2,"
                      "\"data\":{\"object\":{\"id\":\"pi_2\",\"last_payment_error\":"
                      "{\"code\":\"card_declined\"},\"metadata\":{\"keelson_invoice_id\":\"" INV
                      "\"}}}}",
                      &ev, &req),
            0);
        assert_string_equal(req.failure_code, "card_declined");
        assert_string_equal(req.payment_reference, "pi_2");
        assert_int_equal(
            read_text("{\"id\":\"evt_6\",\"type\":\"customer.subscription.updated\",\"created\":3,"
                      "\"data\":{\"object\":{\"id\":\"sub_1\",\"cancel_at_period_end\":true,"
                      "\"metadata\":{\"keelson_subscription_id\":\"" SUB
                      "\",\"keelson_invoice_id\":\"x\"}}}}",
                      &ev, &req),
            0);
        assert_string_equal(req.subscription_id, SUB);
        assert_string_equal(req.invoice_id, ""); /* a subscription's event names no invoice */
        assert_true(req.cancel_at_period_end);
}

static void test_what_is_left_out(void **state)
{
        wh_stripe_event ev;
        Keelson__Billing__V1__ApplyProviderEventRequest req;
        char long_id[400];

        (void)state;
        /* no metadata, no object: read, with nothing to apply */
        assert_int_equal(read_text("{\"id\":\"evt_7\",\"type\":\"ping\",\"created\":4}", &ev, &req),
                         0);
        assert_string_equal(req.invoice_id, "");
        assert_int_equal(req.amount, 0);
        /* an id too long for its field is left out, not cut */
        memset(long_id, 'a', 300);
        long_id[300] = '\0';
        char body[700];
        snprintf(body, sizeof(body),
                 "{\"id\":\"evt_8\",\"type\":\"invoice.paid\",\"created\":5,\"data\":{\"object\":"
                 "{\"metadata\":{\"keelson_invoice_id\":\"%s\"},\"amount_paid\":-5}}}",
                 long_id);
        assert_int_equal(read_text(body, &ev, &req), 0);
        assert_string_equal(req.invoice_id, "");
        assert_int_equal(req.amount, 0); /* negative: not an amount */
        /* what is not an event at all */
        static const char *const bad[] = {
            "",
            "null",
            "[]",
            "{\"type\":\"x\",\"created\":1}",
            "{\"id\":\"e\",\"created\":1}",
            "{\"id\":\"e\",\"type\":\"x\"}",
            "{\"id\":\"e\",\"type\":\"x\",\"created\":\"1\"}",
            "{\"id\":7,\"type\":\"x\",\"created\":1}",
            "{\"id\":\"e\",\"type\":\"x\",\"created\":1",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (read_text(bad[i], &ev, &req) == 0) {
                        fail_msg("read %s", bad[i]);
                }
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_invoice_paid),
            cmocka_unit_test(test_one_payment_one_reference),
            cmocka_unit_test(test_failed_and_subscription),
            cmocka_unit_test(test_what_is_left_out),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
