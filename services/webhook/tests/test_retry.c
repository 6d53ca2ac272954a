/*
 * The delivery retry schedule (services/webhook/retry.c) and the JSON body
 * of a delivered event (topics.c): what the configuration accepts, the
 * waits with their jitter's bounds, and the bytes a subscriber receives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keelson/billing/v1/events.pb-c.h"
#include "webhook.h"

static void test_parse_default(void **state)
{
        int64_t ms[WH_RETRY_MAX];
        size_t n = 0;
        char err[128];

        (void)state;
        assert_int_equal(
            wh_retry_parse("5s,5m,30m,2h,5h,10h,10h", ms, WH_RETRY_MAX, &n, err, sizeof(err)), 0);
        assert_int_equal(n, 7);
        assert_int_equal(ms[0], 5000);
        assert_int_equal(ms[1], 300000);
        assert_int_equal(ms[2], 1800000);
        assert_int_equal(ms[3], 7200000);
        assert_int_equal(ms[6], 36000000);
        int64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                total += ms[i];
        }
        assert_int_equal(total, 99305000); /* 27.6 hours: "about a day" of retries */
        assert_int_equal(wh_retry_parse(" 1s , 2d", ms, WH_RETRY_MAX, &n, err, sizeof(err)), 0);
        assert_int_equal(n, 2);
        assert_int_equal(ms[1], 2 * 86400000LL);
}

static void test_parse_refusals(void **state)
{
        static const char *const bad[] = {
            "",
            "5",
            "5x",
            "0s",
            "-1s",
            "8d",
            "5s,",
            ",5s",
            "5s;5m",
            "5s 5m",
            "s",
            "999999999999999999999s",
            "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,"
            "1s,1s,1s,1s,1s",
        };
        int64_t ms[WH_RETRY_MAX];
        size_t n;
        char err[128];

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                assert_int_equal(wh_retry_parse(bad[i], ms, WH_RETRY_MAX, &n, err, sizeof(err)),
                                 -1);
                assert_true(strlen(err) > 0);
        }
        assert_int_equal(wh_retry_parse(NULL, ms, WH_RETRY_MAX, &n, err, sizeof(err)), -1);
}

static void test_delay_bounds(void **state)
{
        const int64_t ms[3] = {5000, 300000, 36000000};

        (void)state;
        assert_int_equal(wh_retry_delay_ms(ms, 3, 0, 0), -1);
        assert_int_equal(wh_retry_delay_ms(ms, 3, 4, 0), -1);     /* run out: the delivery fails */
        assert_int_equal(wh_retry_delay_ms(ms, 3, 1, 0), 4000);   /* ×0.8 */
        assert_int_equal(wh_retry_delay_ms(ms, 3, 1, 400), 6000); /* ×1.2 */
        assert_int_equal(wh_retry_delay_ms(ms, 3, 1, 200), 5000);
        for (uint32_t r = 0; r < 100000; r += 7) {
                for (int64_t t = 1; t <= 3; t++) {
                        int64_t d = wh_retry_delay_ms(ms, 3, t, r * 2654435761u);
                        assert_true(d >= ms[t - 1] * 8 / 10 && d <= ms[t - 1] * 12 / 10);
                }
        }
}

static void test_topics(void **state)
{
        (void)state;
        assert_non_null(wh_topic_find("billing.invoice_paid"));
        assert_non_null(wh_topic_find("billing.invoice_finalized"));
        assert_non_null(wh_topic_find("billing.subscription_changed"));
        assert_null(wh_topic_find("users.admin_summary")); /* internal */
        assert_null(wh_topic_find("auth.email"));          /* internal, and secret */
        assert_null(wh_topic_find("billing.invoice_paid "));
        for (size_t i = 0; i < wh_topics_n; i++) {
                bool known = false;
                for (size_t s = 0; s < wh_sources_n; s++) {
                        known = known || strcmp(wh_topics[i].source, wh_sources[s]) == 0;
                }
                assert_true(known);
        }
}

static void test_body(void **state)
{
        Keelson__Billing__V1__InvoicePaid m = KEELSON__BILLING__V1__INVOICE_PAID__INIT;
        uint8_t buf[512];
        char *body = NULL;
        size_t len = 0;

        (void)state;
        m.tenant_id = "t1";
        m.invoice_id = "i\"1";
        m.currency = "USD";
        m.amount_paid = 4040;
        m.paid_at_unix_ms = 1764892800123;
        size_t n = keelson__billing__v1__invoice_paid__pack(&m, buf);
        const wh_topic *t = wh_topic_find("billing.invoice_paid");
        assert_int_equal(wh_event_body(t, 1764892800123, buf, n, &body, &len), KS_OK);
        assert_string_equal(body, "{\"type\":\"billing.invoice_paid\","
                                  "\"timestamp\":\"2025-12-05T00:00:00.123Z\",\"data\":{"
                                  "\"tenantId\":\"t1\",\"invoiceId\":\"i\\\"1\","
                                  "\"currency\":\"USD\",\"amountPaid\":\"4040\","
                                  "\"paidAtUnixMs\":\"1764892800123\"}}");
        assert_int_equal(len, strlen(body));
        free(body);
        /* Not the topic's message: refused, nothing rendered. */
        const uint8_t junk[3] = {0xff, 0xff, 0xff};
        assert_int_equal(wh_event_body(t, 0, junk, sizeof(junk), &body, &len), KS_INVALID_ARGUMENT);
        assert_null(body);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_parse_default), cmocka_unit_test(test_parse_refusals),
            cmocka_unit_test(test_delay_bounds),  cmocka_unit_test(test_topics),
            cmocka_unit_test(test_body),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
