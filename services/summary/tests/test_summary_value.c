/*
 * A cached summary's value, without Redis or a broker: its text form (the
 * v2 format round-trips with billing's lists at their bound; the older v1
 * format and anything malformed are refused, which the reader takes as a
 * miss), billing's reply taken or refused, and the local level keeping each
 * entry for its own TTL (a value without billing's figures for the short one).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "summary.h"

#define TENANT "0b6f3a52-2f7e-4d1c-9a57-4f0d8c1e2a33"

static void amounts_fill(sm_amounts *a, uint32_t n, int64_t base)
{
        a->n = n;
        for (uint32_t i = 0; i < n; i++) {
                snprintf(a->v[i].currency, sizeof(a->v[i].currency), "%c%c%c", 'A' + (int)(i / 26),
                         'A' + (int)(i % 26), 'Z');
                a->v[i].amount = base - (int64_t)i;
        }
}

static sm_counts sample(bool billing)
{
        sm_counts c;

        memset(&c, 0, sizeof(c));
        c.computed_ms = 1796234344554;
        c.active = 12;
        c.invited = c.pending_invitations = 2;
        c.locked = 1;
        c.owner = 1;
        c.admin = 2;
        c.member = 8;
        c.viewer = 2;
        c.active_api_keys = 3;
        if (billing) {
                c.billing.available = true;
                c.billing.active = 4;
                c.billing.trialing = 1;
                c.billing.past_due = 1;
                c.billing.paused = 1;
                c.billing.canceled = 7;
                c.billing.invoices_open = 2;
                amounts_fill(&c.billing.mrr, SM_CURRENCIES_MAX, INT64_MAX);
                amounts_fill(&c.billing.open_amount, 1, 2000);
                amounts_fill(&c.billing.past_due_amount, SM_CURRENCIES_MAX, INT64_MIN + 40);
        }
        return c;
}

static void test_round_trip_at_the_bounds(void **state)
{
        char text[SM_VALUE_MAX];
        sm_counts in = sample(true), out;

        (void)state;
        assert_int_equal(sm_counts_format(&in, text, sizeof(text)), 0);
        assert_int_equal(strncmp(text, "v2 ", 3), 0);
        assert_int_equal(sm_counts_parse(text, &out), 0);
        assert_memory_equal(&in, &out, sizeof(in));
        /* A buffer too small is refused whole, never cut. */
        assert_int_equal(sm_counts_format(&in, text, 100), -1);
}

static void test_unavailable_round_trips(void **state)
{
        char text[SM_VALUE_MAX];
        sm_counts in = sample(false), out;

        (void)state;
        assert_int_equal(sm_counts_format(&in, text, sizeof(text)), 0);
        assert_int_equal(sm_counts_parse(text, &out), 0);
        assert_false(out.billing.available);
        assert_memory_equal(&in, &out, sizeof(in));
}

static void test_older_and_malformed_values_are_refused(void **state)
{
        static const char *const bad[] = {
            /* what a replica of before billing's figures stored */
            "v1 1796234344554 12 2 1 0 1 2 8 2 2 3",
            "",
            "v3 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0",
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0",     /* a list count missing */
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 ",  /* trailing space */
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 x", /* trailing text */
            "v2 1 0 0 0 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0 0 0",   /* available neither 0 nor 1 */
            "v2 1 -1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0",  /* a negative count */
            "v2 1 +1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0",
            "v2 1  0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0",
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 1 usd 5 0 0", /* a currency not upper case */
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 1 US 5 0 0",
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 2 USD 5 0 0", /* fewer than it says */
            "v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 33 USD 5 0 0",
            "v2 1 99999999999999999999 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0",
        };
        sm_counts out;

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (sm_counts_parse(bad[i], &out) != -1) {
                        fail_msg("taken: \"%s\"", bad[i]);
                }
        }
        assert_int_equal(
            sm_counts_parse("v2 1 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 1 USD -5 0 0", &out), 0);
        assert_string_equal(out.billing.mrr.v[0].currency, "USD");
        assert_int_equal(out.billing.mrr.v[0].amount, -5);
}

/* ---- billing's reply ------------------------------------------------------------- */

static void test_billing_reply_taken(void **state)
{
        Keelson__Billing__V1__GetBillingSummaryResponse r =
            KEELSON__BILLING__V1__GET_BILLING_SUMMARY_RESPONSE__INIT;
        Keelson__Billing__V1__CurrencyAmount eur = KEELSON__BILLING__V1__CURRENCY_AMOUNT__INIT,
                                             usd = KEELSON__BILLING__V1__CURRENCY_AMOUNT__INIT;
        Keelson__Billing__V1__CurrencyAmount *mrr[2] = {&eur, &usd};
        sm_billing b;

        (void)state;
        eur.currency = "EUR";
        eur.amount = 900;
        usd.currency = "USD";
        usd.amount = 4000;
        r.subscriptions_active = 4;
        r.subscriptions_canceled = 1;
        r.invoices_open = 2;
        r.mrr = mrr;
        r.n_mrr = 2;
        r.open_amount = mrr + 1;
        r.n_open_amount = 1;
        assert_int_equal(sm_billing_from(&r, &b), KS_OK);
        assert_true(b.available);
        assert_int_equal(b.active, 4);
        assert_int_equal(b.canceled, 1);
        assert_int_equal(b.invoices_open, 2);
        assert_int_equal(b.mrr.n, 2);
        assert_string_equal(b.mrr.v[0].currency, "EUR");
        assert_int_equal(b.mrr.v[1].amount, 4000);
        assert_int_equal(b.open_amount.n, 1);
        assert_int_equal(b.past_due_amount.n, 0);
}

static void test_billing_reply_refused(void **state)
{
        Keelson__Billing__V1__GetBillingSummaryResponse r =
            KEELSON__BILLING__V1__GET_BILLING_SUMMARY_RESPONSE__INIT;
        Keelson__Billing__V1__CurrencyAmount a[SM_CURRENCIES_MAX + 1];
        Keelson__Billing__V1__CurrencyAmount *p[SM_CURRENCIES_MAX + 1];
        sm_billing b;

        (void)state;
        for (int i = 0; i <= SM_CURRENCIES_MAX; i++) {
                keelson__billing__v1__currency_amount__init(&a[i]);
                a[i].currency = "USD";
                p[i] = &a[i];
        }
        r.mrr = p;
        r.n_mrr = SM_CURRENCIES_MAX + 1; /* more than billing ever lists */
        assert_int_equal(sm_billing_from(&r, &b), KS_INTERNAL);
        assert_false(b.available);
        r.n_mrr = SM_CURRENCIES_MAX;
        assert_int_equal(sm_billing_from(&r, &b), KS_OK);
        a[3].currency = "usd";
        assert_int_equal(sm_billing_from(&r, &b), KS_INTERNAL);
        a[3].currency = "USDX";
        assert_int_equal(sm_billing_from(&r, &b), KS_INTERNAL);
        a[3].currency = "USD";
        r.subscriptions_trialing = -1;
        assert_int_equal(sm_billing_from(&r, &b), KS_INTERNAL);
        assert_false(b.available);
        assert_int_equal(b.mrr.n, 0); /* nothing half taken */
}

/* ---- the local level: each entry its own TTL -------------------------------------- */

static void test_local_entries_keep_their_own_ttl(void **state)
{
        const int64_t ttl = 30000, partial = 5000, t0 = 1796234344554;
        sm_local l;
        sm_counts full = sample(true), part = sample(false), out;

        (void)state;
        full.computed_ms = part.computed_ms = t0;
        assert_int_equal(sm_value_ttl_ms(&full, ttl, partial), ttl);
        assert_int_equal(sm_value_ttl_ms(&part, ttl, partial), partial);
        assert_int_equal(sm_local_init(&l, 4), 0);

        sm_local_put(&l, TENANT, 1, 0, &part, t0, sm_value_ttl_ms(&part, ttl, partial));
        assert_true(sm_local_get(&l, TENANT, 1, 0, t0 + partial - 1, &out));
        assert_false(out.billing.available);
        assert_false(sm_local_get(&l, TENANT, 1, 0, t0 + partial, &out));

        /* The expired partial entry gives way; the full one lives the whole TTL. */
        sm_local_put(&l, TENANT, 1, 0, &full, t0 + partial, sm_value_ttl_ms(&full, ttl, partial));
        assert_true(sm_local_get(&l, TENANT, 1, 0, t0 + ttl - 1, &out));
        assert_memory_equal(&out, &full, sizeof(full));
        assert_false(sm_local_get(&l, TENANT, 1, 0, t0 + ttl, &out));
        assert_false(sm_local_get(&l, TENANT, 2, 0, t0, &out)); /* another generation */

        /* A fresh newer generation is not replaced by an older one; a TTL of 0 stores nothing. */
        sm_local_put(&l, TENANT, 3, 0, &full, t0, ttl);
        sm_local_put(&l, TENANT, 2, 0, &part, t0, partial);
        assert_true(sm_local_get(&l, TENANT, 3, 0, t0, &out));
        sm_local_evict(&l, TENANT);
        sm_local_put(&l, TENANT, 4, 0, &part, t0, 0);
        assert_false(sm_local_get(&l, TENANT, 4, 0, t0, &out));
        sm_local_fini(&l);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_round_trip_at_the_bounds),
            cmocka_unit_test(test_unavailable_round_trips),
            cmocka_unit_test(test_older_and_malformed_values_are_refused),
            cmocka_unit_test(test_billing_reply_taken),
            cmocka_unit_test(test_billing_reply_refused),
            cmocka_unit_test(test_local_entries_keep_their_own_ttl),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
