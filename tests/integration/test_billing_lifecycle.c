/*
 * A year of subscriptions on a test clock, through the gateway: month-end
 * anchors that clamp, a trial and its end, renewals, a plan change prorated
 * by the second (previewed first, to the same lines), changes to another
 * interval that start a new cycle (monthly to yearly and back, the
 * downgrade's credit paying the next renewal), a charge that fails
 * and the whole dunning cycle to cancellation, gapless invoice numbers,
 * credit notes and refunds, metered usage priced through graduated tiers, a
 * cancellation now with its credit, and at the end a reconciliation of all
 * of it against the ledger that finds nothing wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"

/* The subscription's state and its current period's end. */
static void expect_sub(const bit_tenant *t, const char *id, const char *state, int64_t period_end)
{
        json_t *j = bit_ok(t->owner.token, "GetSubscription", "{\"id\":\"%s\"}", id);

        if (strcmp(bit_str(j, "subscription.state"), state) != 0 ||
            (period_end != 0 && bit_int(j, "subscription.currentPeriodEndUnixMs") != period_end)) {
                char *s = json_dumps(j, JSON_COMPACT);
                fail_msg("expected %s ending at %lld: %.1000s", state, (long long)period_end, s);
        }
        json_decref(j);
}

/* The invoices of a subscription, newest first (at most 200). */
static json_t *invoices_of(const bit_tenant *t, const char *sub)
{
        return bit_ok(t->owner.token, "ListInvoices",
                      "{\"subscriptionId\":\"%s\",\"pageSize\":200}", sub);
}

static json_t *latest_invoice(const bit_tenant *t, const char *sub)
{
        json_t *list = invoices_of(t, sub);
        json_t *first = json_array_get(bit_at(list, "invoices"), 0);
        json_t *inv;

        assert_non_null(first);
        json_t *reply =
            bit_ok(t->owner.token, "GetInvoice", "{\"id\":\"%s\"}", bit_str(first, "id"));
        inv = json_incref(bit_at(reply, "invoice"));
        json_decref(reply);
        json_decref(list);
        return inv;
}

/* Every invoice number of the tenant, INV-000001 up, without a gap. */
static void expect_gapless_numbers(const bit_tenant *t)
{
        json_t *list = bit_ok(t->owner.token, "ListInvoices", "{\"pageSize\":200}");
        json_t *invs = bit_at(list, "invoices");
        size_t n = json_array_size(invs), numbered = 0;
        bool seen[201] = {false};

        for (size_t i = 0; i < n; i++) {
                const char *num = bit_str(json_array_get(invs, i), "number");
                if (num[0] == '\0') {
                        continue; /* a draft */
                }
                int k = atoi(num + 4);
                assert_true(strncmp(num, "INV-", 4) == 0 && k >= 1 && k <= 200 && !seen[k]);
                seen[k] = true;
                numbered++;
        }
        for (size_t k = 1; k <= numbered; k++) {
                assert_true(seen[k]);
        }
        json_decref(list);
}

/* Anchored on January 31: the periods end on the last day of short months, never carried. */
static void test_a_year_of_month_ends(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX];
        const int ends[12][3] = {{2027, 2, 28},  {2027, 3, 31},  {2027, 4, 30},  {2027, 5, 31},
                                 {2027, 6, 30},  {2027, 7, 31},  {2027, 8, 31},  {2027, 9, 30},
                                 {2027, 10, 31}, {2027, 11, 30}, {2027, 12, 31}, {2028, 1, 31}};
        int64_t start = bit_utc(2027, 1, 31, 10, 0, 0);

        bit_tenant_new("bl-year", &t);
        bit_clock(&t, start, clock);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        assert_string_equal(bit_str(j, "subscription.state"), "active");
        assert_string_equal(bit_str(j, "latestInvoice.state"), "paid");
        assert_string_equal(bit_str(j, "latestInvoice.number"), "INV-000001");
        assert_int_equal(bit_int(j, "latestInvoice.subtotal"), 1000);
        assert_int_equal(bit_int(j, "latestInvoice.tax"), 100);
        assert_int_equal(bit_int(j, "latestInvoice.total"), 1100);
        assert_int_equal(bit_int(j, "latestInvoice.amountPaid"), 1100);
        json_decref(j);
        expect_sub(&t, sub, "active", bit_utc(2027, 2, 28, 10, 0, 0));
        for (int m = 0; m < 12; m++) {
                int64_t end = bit_utc(ends[m][0], ends[m][1], ends[m][2], 10, 0, 0);
                assert_int_equal(bit_advance(&t, clock, end), 1);
                int64_t next =
                    m + 1 < 12 ? bit_utc(ends[m + 1][0], ends[m + 1][1], ends[m + 1][2], 10, 0, 0)
                               : bit_utc(2028, 2, 29, 10, 0, 0);
                expect_sub(&t, sub, "active", next);
        }
        json_t *list = invoices_of(&t, sub);
        assert_int_equal(json_array_size(bit_at(list, "invoices")), 13);
        for (size_t i = 0; i < 13; i++) {
                json_t *inv = json_array_get(bit_at(list, "invoices"), i);
                assert_string_equal(bit_str(inv, "state"), "paid");
                assert_int_equal(bit_int(inv, "total"), 1100);
        }
        json_decref(list);
        expect_gapless_numbers(&t);
        json_decref(bit_reconcile_clean(&t));
}

/* The events of a subscription's history, oldest first, joined by spaces. */
static void history(const bit_tenant *t, const char *sub, char *out, size_t len)
{
        json_t *j = bit_ok(t->owner.token, "ListSubscriptionHistory",
                           "{\"id\":\"%s\",\"pageSize\":200}", sub);
        json_t *e;
        size_t i;

        out[0] = '\0';
        json_array_foreach(bit_at(j, "entries"), i, e)
        {
                snprintf(out + strlen(out), len - strlen(out), "%s%s", i ? " " : "",
                         bit_str(e, "event"));
        }
        json_decref(j);
}

/* A trial, its end, a renewal, a prorated upgrade, then a card that fails until dunning ends it. */
static void test_trial_change_and_dunning(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX], events[1024];
        int64_t start = bit_utc(2027, 3, 1, 0, 0, 0);

        bit_tenant_new("bl-trial", &t);
        bit_clock(&t, start, clock);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 14);
        bit_plan(&t, "team", "USD", "PER_UNIT", 500, "MONTH", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        assert_string_equal(bit_str(j, "subscription.state"), "trialing");
        assert_int_equal(bit_int(j, "subscription.trialEndUnixMs"), start + 14 * BIT_DAY_MS);
        assert_int_equal(bit_int(j, "latestInvoice.total"), 0);
        assert_string_equal(bit_str(j, "latestInvoice.state"), "paid");
        json_decref(j);

        /* The trial ends on March 15: the first paid period starts, anchored there. */
        int64_t trial_end = start + 14 * BIT_DAY_MS, apr15 = bit_utc(2027, 4, 15, 0, 0, 0);
        assert_int_equal(bit_advance(&t, clock, trial_end), 1);
        expect_sub(&t, sub, "active", apr15);
        j = latest_invoice(&t, sub);
        assert_string_equal(bit_str(j, "billingReason"), "subscription_cycle");
        assert_int_equal(bit_int(j, "total"), 1100);
        assert_string_equal(bit_str(j, "state"), "paid");
        json_decref(j);

        /* March 25, 10 days in a 31-day period: pro to team × 3 for the remaining 21 days. */
        int64_t mar25 = bit_utc(2027, 3, 25, 0, 0, 0);
        assert_int_equal(bit_advance(&t, clock, mar25), 0);
        json_t *preview = bit_ok(t.owner.token, "PreviewChange",
                                 "{\"id\":\"%s\",\"planCode\":\"team\",\"quantity\":\"3\","
                                 "\"prorationBehavior\":\"always_invoice\"}",
                                 sub);
        /* −round(1000 × 21/31) = −677 and +round(1500 × 21/31) = +1016, each taxed on its own. */
        assert_int_equal(bit_int(json_array_get(bit_at(preview, "lines"), 0), "amount"), -677);
        assert_int_equal(bit_int(json_array_get(bit_at(preview, "lines"), 0), "tax"), -68);
        assert_int_equal(bit_int(json_array_get(bit_at(preview, "lines"), 1), "amount"), 1016);
        assert_int_equal(bit_int(json_array_get(bit_at(preview, "lines"), 1), "tax"), 102);
        assert_int_equal(bit_int(preview, "total"), 373);
        j = bit_ok(t.owner.token, "ChangeSubscription",
                   "{\"id\":\"%s\",\"planCode\":\"team\",\"quantity\":\"3\","
                   "\"prorationBehavior\":\"always_invoice\"}",
                   sub);
        assert_int_equal(bit_int(j, "invoice.total"), bit_int(preview, "total"));
        assert_string_equal(bit_str(j, "invoice.billingReason"), "subscription_update");
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(bit_int(j, "subscription.quantity"), 3);
        assert_true(json_equal(bit_at(j, "prorationLines"), bit_at(preview, "lines")));
        json_decref(j);
        json_decref(preview);

        /* April 15: renewed at team × 3. */
        assert_int_equal(bit_advance(&t, clock, apr15), 1);
        j = latest_invoice(&t, sub);
        assert_int_equal(bit_int(j, "total"), 1650);
        json_decref(j);

        /* The card now declines: May 15's renewal fails, then its three retries (3, 5, 7 days). */
        json_decref(bit_ok(t.owner.token, "UpdateCustomer",
                           "{\"id\":\"%s\",\"updateMask\":[\"default_payment_method\"],"
                           "\"defaultPaymentMethod\":\"pm_card_chargeDeclined\"}",
                           cust));
        int64_t may15 = bit_utc(2027, 5, 15, 0, 0, 0);
        assert_int_equal(bit_advance(&t, clock, may15), 1);
        expect_sub(&t, sub, "past_due", 0);
        j = latest_invoice(&t, sub);
        assert_string_equal(bit_str(j, "state"), "open");
        assert_int_equal(bit_int(j, "attemptCount"), 1);
        assert_int_equal(bit_int(j, "nextAttemptUnixMs"), may15 + 3 * BIT_DAY_MS);
        assert_string_equal(bit_str(json_array_get(bit_at(j, "payments"), 0), "failureCode"),
                            "card_declined");
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, may15 + 3 * BIT_DAY_MS), 1);
        assert_int_equal(bit_advance(&t, clock, may15 + 8 * BIT_DAY_MS), 1);
        expect_sub(&t, sub, "past_due", 0);
        assert_int_equal(bit_advance(&t, clock, may15 + 15 * BIT_DAY_MS), 1);
        expect_sub(&t, sub, "canceled", 0);
        j = latest_invoice(&t, sub);
        assert_string_equal(bit_str(j, "state"), "uncollectible");
        assert_int_equal(bit_int(j, "attemptCount"), 4);
        assert_int_equal(json_array_size(bit_at(j, "payments")), 4);
        /*
         * Each attempt's key to the provider names the subscription and the period, not the
         * invoice (a renewal made again after a crash is the same charge); the mock's charge id
         * is ch_mock_ and 32 hex digits of the key's SHA-256.
         */
        for (size_t i = 0; i < 4; i++) {
                char key[160], want[64];
                snprintf(key, sizeof(key), "%s/%lld/subscription_cycle:auto-%zu", sub,
                         (long long)may15, i + 1);
                bit_mock_charge_id(key, want);
                assert_string_equal(bit_str(json_array_get(bit_at(j, "payments"), i), "reference"),
                                    want);
        }
        json_decref(j);
        history(&t, sub, events, sizeof(events));
        assert_string_equal(events, "create trial_end change renew renew payment_failed"
                                    " dunning_exhausted");
        /* Nothing more falls due for a canceled subscription. */
        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 7, 1, 0, 0, 0)), 0);
        expect_gapless_numbers(&t);
        json_decref(bit_reconcile_clean(&t));
}

/* A line of a reply's array, as "kind amount tax start end". */
static void line_text(json_t *arr, size_t i, char *out, size_t len)
{
        json_t *l = json_array_get(arr, i);
        assert_non_null(l);
        snprintf(out, len, "%s %lld %lld %lld %lld", bit_str(l, "kind"),
                 (long long)bit_int(l, "amount"), (long long)bit_int(l, "tax"),
                 (long long)bit_int(l, "periodStartUnixMs"),
                 (long long)bit_int(l, "periodEndUnixMs"));
}

static void expect_line(json_t *arr, size_t i, const char *kind, int64_t amount, int64_t tax,
                        int64_t from, int64_t to)
{
        char got[256], want[256];
        line_text(arr, i, got, sizeof(got));
        snprintf(want, sizeof(want), "%s %lld %lld %lld %lld", kind, (long long)amount,
                 (long long)tax, (long long)from, (long long)to);
        if (strcmp(got, want) != 0) {
                fail_msg("line %zu: %s, expected %s", i, got, want);
        }
}

/*
 * Monthly to yearly mid-period, then yearly back to monthly: another
 * interval starts a new cycle at once (Stripe's behaviour), the new period
 * billed in advance on a subscription_update invoice with the old period's
 * unused rest credited and the pending items swept in; the downgrade's
 * credit exceeds its charge and goes to the customer's balance, which pays
 * the next renewal. Previewed first, to the same lines.
 */
static void test_interval_change_starts_a_new_cycle(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX], events[1024];
        int64_t jan1 = bit_utc(2027, 1, 1, 0, 0, 0), jan6 = bit_utc(2027, 1, 6, 0, 0, 0),
                jan16 = bit_utc(2027, 1, 16, 0, 0, 0), feb1 = bit_utc(2027, 2, 1, 0, 0, 0),
                y28 = bit_utc(2028, 1, 16, 0, 0, 0), y29 = bit_utc(2029, 1, 16, 0, 0, 0),
                jul16 = bit_utc(2028, 7, 16, 0, 0, 0), aug16 = bit_utc(2028, 8, 16, 0, 0, 0);

        bit_tenant_new("bl-interval", &t);
        bit_clock(&t, jan1, clock);
        bit_plan(&t, "monthly", "USD", "FLAT", 3100, "MONTH", 1, 0);
        bit_plan(&t, "monthly-plus", "USD", "FLAT", 6200, "MONTH", 1, 0);
        bit_plan(&t, "yearly", "USD", "FLAT", 30000, "YEAR", 1, 0);
        bit_plan(&t, "yearly-eur", "EUR", "FLAT", 30000, "YEAR", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"monthly\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        assert_int_equal(bit_int(j, "latestInvoice.total"), 3410);
        json_decref(j);

        /* January 6, same interval: prorations wait as pending items (26 of 31 days left). */
        assert_int_equal(bit_advance(&t, clock, jan6), 0);
        j = bit_ok(t.owner.token, "ChangeSubscription",
                   "{\"id\":\"%s\",\"planCode\":\"monthly-plus\"}", sub);
        assert_null(bit_at(j, "invoice"));
        expect_line(bit_at(j, "prorationLines"), 0, "proration", -2600, -260, jan6, feb1);
        expect_line(bit_at(j, "prorationLines"), 1, "proration", 5200, 520, jan6, feb1);
        json_decref(j);

        /* Another currency is refused, whatever the interval. */
        bit_fails_with(t.owner.token, "ChangeSubscription", "failed_precondition",
                       "the new plan must have the subscription's currency",
                       "{\"id\":\"%s\",\"planCode\":\"yearly-eur\"}", sub);

        /* January 16, to yearly: a new cycle from now, 16 of 31 days of monthly-plus unused. */
        assert_int_equal(bit_advance(&t, clock, jan16), 0);
        json_t *preview =
            bit_ok(t.owner.token, "PreviewChange", "{\"id\":\"%s\",\"planCode\":\"yearly\"}", sub);
        json_t *lines = bit_at(preview, "lines");
        assert_int_equal(json_array_size(lines), 2);
        expect_line(lines, 0, "subscription", 30000, 3000, jan16, y28);
        expect_line(lines, 1, "proration", -3200, -320, jan16, feb1);
        assert_int_equal(bit_int(preview, "total"), 29480);
        assert_int_equal(bit_int(preview, "prorationTimeUnixMs"), jan16);
        j = bit_ok(t.owner.token, "ChangeSubscription", "{\"id\":\"%s\",\"planCode\":\"yearly\"}",
                   sub);
        assert_true(json_equal(bit_at(j, "prorationLines"), lines));
        assert_string_equal(bit_str(j, "subscription.planCode"), "yearly");
        assert_int_equal(bit_int(j, "subscription.billingAnchorUnixMs"), jan16);
        assert_int_equal(bit_int(j, "subscription.currentPeriodStartUnixMs"), jan16);
        assert_int_equal(bit_int(j, "subscription.currentPeriodEndUnixMs"), y28);
        /* The invoice: the year in advance, the credit, and the two pending items of January 6. */
        assert_string_equal(bit_str(j, "invoice.billingReason"), "subscription_update");
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(bit_int(j, "invoice.periodStartUnixMs"), jan16);
        assert_int_equal(bit_int(j, "invoice.periodEndUnixMs"), y28);
        assert_int_equal(bit_int(j, "invoice.subtotal"), 30000 - 3200 - 2600 + 5200);
        assert_int_equal(bit_int(j, "invoice.total"), 32340);
        assert_int_equal(bit_int(j, "invoice.amountPaid"), 32340);
        assert_int_equal(json_array_size(bit_at(j, "invoice.lines")), 4);
        expect_line(bit_at(j, "invoice.lines"), 0, "subscription", 30000, 3000, jan16, y28);
        json_decref(j);
        json_decref(preview);

        /* February 1 is no longer a renewal: the next one is a year from January 16. */
        assert_int_equal(bit_advance(&t, clock, feb1), 0);
        expect_sub(&t, sub, "active", y28);
        assert_int_equal(bit_advance(&t, clock, y28), 1);
        expect_sub(&t, sub, "active", y29);
        j = latest_invoice(&t, sub);
        assert_string_equal(bit_str(j, "billingReason"), "subscription_cycle");
        assert_int_equal(bit_int(j, "total"), 33000);
        json_decref(j);

        /*
         * July 16, 2028, back to monthly: 184 of the 366 days (a leap year) unused, a credit of
         * round(30000 × 184/366) = 15082 against a month of 3100: −11982 and its tax to the
         * balance.
         */
        assert_int_equal(bit_advance(&t, clock, jul16), 0);
        j = bit_ok(t.owner.token, "ChangeSubscription", "{\"id\":\"%s\",\"planCode\":\"monthly\"}",
                   sub);
        expect_line(bit_at(j, "prorationLines"), 0, "subscription", 3100, 310, jul16, aug16);
        expect_line(bit_at(j, "prorationLines"), 1, "proration", -15082, -1508, jul16, y29);
        assert_int_equal(bit_int(j, "invoice.total"), -13180);
        assert_int_equal(bit_int(j, "invoice.amountDue"), 0);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(bit_int(j, "subscription.currentPeriodEndUnixMs"), aug16);
        json_decref(j);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 13180);
        json_decref(j);

        /* August 16: the month's 3410 comes out of the balance; nothing is charged. */
        assert_int_equal(bit_advance(&t, clock, aug16), 1);
        j = latest_invoice(&t, sub);
        assert_int_equal(bit_int(j, "total"), 3410);
        assert_int_equal(bit_int(j, "amountDue"), 0);
        assert_int_equal(json_array_size(bit_at(j, "payments")), 0);
        json_decref(j);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 13180 - 3410);
        json_decref(j);

        history(&t, sub, events, sizeof(events));
        assert_string_equal(events, "create change change renew change renew");

        /* In a trial nothing is billed: the plan changes, and the first period is a year. */
        char trial[BIT_ID_MAX];
        int64_t aug20 = bit_utc(2028, 8, 20, 0, 0, 0), aug26 = bit_utc(2028, 8, 26, 0, 0, 0);
        j = bit_ok(t.owner.token, "CreateSubscription",
                   "{\"customerId\":\"%s\",\"planCode\":\"monthly\",\"trialDays\":10}", cust);
        snprintf(trial, sizeof(trial), "%s", bit_str(j, "subscription.id"));
        assert_string_equal(bit_str(j, "subscription.state"), "trialing");
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, aug20), 0);
        j = bit_ok(t.owner.token, "ChangeSubscription", "{\"id\":\"%s\",\"planCode\":\"yearly\"}",
                   trial);
        assert_null(bit_at(j, "invoice"));
        assert_int_equal(json_array_size(bit_at(j, "prorationLines")), 0);
        assert_string_equal(bit_str(j, "subscription.state"), "trialing");
        assert_int_equal(bit_int(j, "subscription.currentPeriodEndUnixMs"), aug26);
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, aug26), 1);
        expect_sub(&t, trial, "active", bit_utc(2029, 8, 26, 0, 0, 0));
        j = latest_invoice(&t, trial);
        assert_int_equal(bit_int(j, "total"), 33000);
        assert_string_equal(bit_str(j, "state"), "paid");
        json_decref(j);
        expect_gapless_numbers(&t);
        bit_wait_posted(t.owner.tenant_id, 30000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
        json_decref(bit_reconcile_clean(&t));
}

/* A paid invoice credited in part: tax in the invoice's proportion, credit to the customer. */
static void test_credit_notes(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX], inv[BIT_ID_MAX];

        bit_tenant_new("bl-credit", &t);
        bit_clock(&t, bit_utc(2027, 6, 1, 0, 0, 0), clock);
        bit_plan(&t, "pro", "EUR", "FLAT", 2000, "MONTH", 1, 0);
        bit_customer(&t, "EUR", 2000, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        snprintf(inv, sizeof(inv), "%s", bit_str(j, "latestInvoice.id"));
        assert_int_equal(bit_int(j, "latestInvoice.total"), 2400);
        json_decref(j);

        j = bit_ok(t.owner.token, "CreateCreditNote",
                   "{\"invoiceId\":\"%s\",\"amount\":\"600\",\"reason\":\"goodwill\"}", inv);
        assert_string_equal(bit_str(j, "creditNote.number"), "CN-000001");
        assert_int_equal(bit_int(j, "creditNote.tax"), 100);
        assert_int_equal(bit_int(j, "creditNote.subtotal"), 500);
        assert_string_equal(bit_str(j, "creditNote.creditedTo"), "customer_balance");
        assert_int_equal(bit_int(j, "invoice.amountCredited"), 600);
        json_decref(j);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 600);
        json_decref(j);
        /* More than what is left to credit is refused; the rest may be credited. */
        bit_fails_with(t.owner.token, "CreateCreditNote", "failed_precondition",
                       "amount: at most 1800 can be credited",
                       "{\"invoiceId\":\"%s\",\"amount\":\"1801\"}", inv);
        j = bit_ok(t.owner.token, "CreateCreditNote", "{\"invoiceId\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "creditNote.number"), "CN-000002");
        assert_int_equal(bit_int(j, "creditNote.amount"), 1800);
        json_decref(j);

        /* The next renewal takes the 2,400 of credit first: nothing is charged. */
        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 7, 1, 0, 0, 0)), 1);
        j = latest_invoice(&t, sub);
        assert_int_equal(bit_int(j, "balanceApplied"), 2400);
        assert_int_equal(bit_int(j, "amountDue"), 0);
        assert_string_equal(bit_str(j, "state"), "paid");
        assert_int_equal(json_array_size(bit_at(j, "payments")), 0);
        json_decref(j);
        j = bit_ok(t.owner.token, "ListCreditNotes", "{\"invoiceId\":\"%s\"}", inv);
        assert_int_equal(json_array_size(bit_at(j, "creditNotes")), 2);
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

/* A subscription's first invoice for a new customer with pm (EUR, 20% tax); its id. */
static void first_invoice(const bit_tenant *t, const char *clock, const char *pm, char *cust,
                          char *inv, int64_t total)
{
        bit_customer(t, "EUR", 2000, pm, clock, cust);
        json_t *j = bit_ok(t->owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(inv, BIT_ID_MAX, "%s", bit_str(j, "latestInvoice.id"));
        assert_int_equal(bit_int(j, "latestInvoice.total"), total);
        json_decref(j);
}

/*
 * Refunds: credit notes on a paid invoice paid back through its card
 * payment, in parts, never past the payment; refused on an open invoice, on
 * one paid out of band and when the provider declines (then nothing is
 * written, not even a number); the customer's balance untouched; the
 * ledger's chains (123 customer credit -> cash) and the reconciliation clean.
 */
static void test_refunds(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], inv[BIT_ID_MAX], cust2[BIT_ID_MAX],
            inv2[BIT_ID_MAX], cust3[BIT_ID_MAX], inv3[BIT_ID_MAX], pay[BIT_ID_MAX];

        bit_tenant_new("bl-refund", &t);
        bit_clock(&t, bit_utc(2027, 6, 1, 0, 0, 0), clock);
        bit_plan(&t, "pro", "EUR", "FLAT", 2000, "MONTH", 1, 0);
        first_invoice(&t, clock, "pm_card_visa", cust, inv, 2400);
        json_t *j = bit_ok(t.owner.token, "GetInvoice", "{\"id\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        snprintf(pay, sizeof(pay), "%s",
                 bit_str(json_array_get(bit_at(j, "invoice.payments"), 0), "id"));
        json_decref(j);

        /* 600 of the 2,400 back to the card: the note says where, the balance stays 0. */
        j = bit_ok(t.owner.token, "CreateCreditNote",
                   "{\"invoiceId\":\"%s\",\"amount\":\"600\",\"refund\":true}", inv);
        assert_string_equal(bit_str(j, "creditNote.number"), "CN-000001");
        assert_string_equal(bit_str(j, "creditNote.creditedTo"), "refund");
        assert_string_equal(bit_str(j, "creditNote.refundPaymentId"), pay);
        assert_int_equal(strncmp(bit_str(j, "creditNote.refundReference"), "re_mock_", 8), 0);
        assert_int_equal(bit_int(j, "creditNote.tax"), 100);
        assert_int_equal(bit_int(j, "invoice.amountCredited"), 600);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(
            bit_int(json_array_get(bit_at(j, "invoice.payments"), 0), "amountRefunded"), 600);
        json_decref(j);
        /* Past what is left to credit: refused; the rest: refunded. Then nothing is left. */
        bit_fails_with(t.owner.token, "CreateCreditNote", "failed_precondition",
                       "amount: at most 1800 can be credited",
                       "{\"invoiceId\":\"%s\",\"amount\":\"1801\",\"refund\":true}", inv);
        j = bit_ok(t.owner.token, "CreateCreditNote", "{\"invoiceId\":\"%s\",\"refund\":true}",
                   inv);
        assert_string_equal(bit_str(j, "creditNote.number"), "CN-000002");
        assert_int_equal(bit_int(j, "creditNote.amount"), 1800);
        assert_int_equal(
            bit_int(json_array_get(bit_at(j, "invoice.payments"), 0), "amountRefunded"), 2400);
        json_decref(j);
        bit_fails_with(t.owner.token, "CreateCreditNote", "failed_precondition",
                       "nothing is left to credit", "{\"invoiceId\":\"%s\",\"refund\":true}", inv);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 0);
        json_decref(j);

        /* No card: open, then paid out of band; neither can be refunded, a credit can. */
        first_invoice(&t, clock, "", cust2, inv2, 2400);
        bit_fails_with(t.owner.token, "CreateCreditNote", "failed_precondition",
                       "a refund needs a paid invoice; this one is open",
                       "{\"invoiceId\":\"%s\",\"refund\":true}", inv2);
        json_decref(bit_ok(t.owner.token, "RecordPayment",
                           "{\"id\":\"%s\",\"amount\":\"2400\",\"reference\":\"wire 7\"}", inv2));
        bit_fails_with(
            t.owner.token, "CreateCreditNote", "failed_precondition",
            "nothing paid by card is left to refund: credit the customer's balance instead",
            "{\"invoiceId\":\"%s\",\"amount\":\"100\",\"refund\":true}", inv2);

        /* The provider declines: nothing is written, and the next note takes the next number. */
        first_invoice(&t, clock, "pm_card_refundFail", cust3, inv3, 2400);
        it_http_response r;
        bit_call(t.owner.token, NULL, "CreateCreditNote", &r,
                 "{\"invoiceId\":\"%s\",\"amount\":\"100\",\"refund\":true}", inv3);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, "the refund failed: declined"));
        it_http_response_free(&r);
        j = bit_ok(t.owner.token, "ListCreditNotes", "{\"invoiceId\":\"%s\"}", inv3);
        assert_int_equal(json_array_size(bit_at(j, "creditNotes")), 0);
        json_decref(j);
        j = bit_ok(t.owner.token, "CreateCreditNote", "{\"invoiceId\":\"%s\",\"amount\":\"100\"}",
                   inv2);
        assert_string_equal(bit_str(j, "creditNote.number"), "CN-000003");
        assert_string_equal(bit_str(j, "creditNote.creditedTo"), "customer_balance");
        json_decref(j);

        /* Listed with where they went. */
        j = bit_ok(t.owner.token, "ListCreditNotes", "{\"invoiceId\":\"%s\"}", inv);
        assert_int_equal(json_array_size(bit_at(j, "creditNotes")), 2);
        assert_string_equal(bit_str(json_array_get(bit_at(j, "creditNotes"), 0), "refundPaymentId"),
                            pay);
        json_decref(j);
        bit_wait_posted(t.owner.tenant_id, 30000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
        json_decref(bit_reconcile_clean(&t));
}

/* Metered usage: batches with resent events, billed at the period's end through the tiers. */
static void test_metered_usage(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX];
        int64_t start = bit_utc(2027, 8, 1, 0, 0, 0);

        bit_tenant_new("bl-usage", &t);
        bit_clock(&t, start, clock);
        json_decref(bit_ok(t.owner.token, "CreatePlan",
                           "{\"code\":\"api\",\"currency\":\"USD\","
                           "\"intervalUnit\":\"INTERVAL_UNIT_MONTH\",\"price\":{\"model\":"
                           "\"PRICE_MODEL_GRADUATED\",\"tiers\":[{\"upTo\":\"100\","
                           "\"unitAmount\":\"100\"},{\"upTo\":\"200\",\"unitAmount\":\"50\"},"
                           "{\"unitAmount\":\"10\"}]}}"));
        bit_customer(&t, "USD", 0, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"api\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        assert_int_equal(bit_int(j, "latestInvoice.total"), 0);
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, start + 2 * BIT_DAY_MS), 0);
        j = bit_ok(t.owner.token, "RecordUsage",
                   "{\"subscriptionId\":\"%s\",\"events\":[{\"eventId\":\"e1\",\"quantity\":"
                   "\"150\"},{\"eventId\":\"e2\",\"quantity\":\"50\"},{\"eventId\":\"e1\","
                   "\"quantity\":\"150\"}]}",
                   sub);
        assert_int_equal(bit_int(j, "recorded"), 2);
        assert_int_equal(bit_int(j, "duplicates"), 1);
        assert_int_equal(bit_int(j, "periodUsage"), 200);
        json_decref(j);
        /* A resend of the batch changes nothing; a new event adds. */
        j = bit_ok(t.owner.token, "RecordUsage",
                   "{\"subscriptionId\":\"%s\",\"events\":[{\"eventId\":\"e2\",\"quantity\":"
                   "\"50\"},{\"eventId\":\"e3\",\"quantity\":\"50\"}]}",
                   sub);
        assert_int_equal(bit_int(j, "recorded"), 1);
        assert_int_equal(bit_int(j, "periodUsage"), 250);
        json_decref(j);
        /* Outside the current period: refused. */
        bit_fails(t.owner.token, "RecordUsage", "failed_precondition",
                  "{\"subscriptionId\":\"%s\",\"events\":[{\"eventId\":\"old\",\"quantity\":\"1\","
                  "\"timestampUnixMs\":\"%lld\"}]}",
                  sub, (long long)(start - 1000));
        assert_int_equal(bit_advance(&t, clock, bit_utc(2027, 9, 1, 0, 0, 0)), 1);
        j = latest_invoice(&t, sub);
        /* 100 × 100 + 100 × 50 + 50 × 10 = 15,500 (Lago's graduated example). */
        assert_int_equal(bit_int(j, "total"), 15500);
        assert_string_equal(bit_str(json_array_get(bit_at(j, "lines"), 0), "kind"), "usage");
        assert_int_equal(bit_int(json_array_get(bit_at(j, "lines"), 0), "quantity"), 250);
        json_decref(j);
        /* A plan that is not metered takes no usage. */
        bit_plan(&t, "flat", "USD", "FLAT", 100, "MONTH", 1, 0);
        j = bit_ok(t.owner.token, "CreateSubscription",
                   "{\"customerId\":\"%s\",\"planCode\":\"flat\"}", cust);
        bit_fails_with(
            t.owner.token, "RecordUsage", "failed_precondition",
            "the subscription's plan is not metered",
            "{\"subscriptionId\":\"%s\",\"events\":[{\"eventId\":\"x\",\"quantity\":\"1\"}]}",
            bit_str(j, "subscription.id"));
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

/* Canceled now, ten days into a thirty-day period: the unused twenty come back as credit. */
static void test_cancel_now_and_pause(void **state)
{
        (void)state;
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], a[BIT_ID_MAX], b[BIT_ID_MAX];
        int64_t start = bit_utc(2027, 9, 1, 0, 0, 0);

        bit_tenant_new("bl-cancel", &t);
        bit_clock(&t, start, clock);
        bit_plan(&t, "pro", "JPY", "FLAT", 3000, "MONTH", 1, 0);
        bit_customer(&t, "JPY", 0, "pm_card_visa", clock, cust);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(a, sizeof(a), "%s", bit_str(j, "subscription.id"));
        json_decref(j);
        j = bit_ok(t.owner.token, "CreateSubscription",
                   "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(b, sizeof(b), "%s", bit_str(j, "subscription.id"));
        json_decref(j);
        assert_int_equal(bit_advance(&t, clock, start + 10 * BIT_DAY_MS), 0);
        j = bit_ok(t.owner.token, "CancelSubscription", "{\"id\":\"%s\"}", a);
        assert_string_equal(bit_str(j, "subscription.state"), "canceled");
        /* −3000 × 20/30 = −2000 yen: a credit invoice, paid, the credit to the customer. */
        assert_string_equal(bit_str(j, "latestInvoice.billingReason"), "subscription_cancel");
        assert_int_equal(bit_int(j, "latestInvoice.total"), -2000);
        assert_string_equal(bit_str(j, "latestInvoice.state"), "paid");
        json_decref(j);
        j = bit_ok(t.owner.token, "GetCustomer", "{\"id\":\"%s\"}", cust);
        assert_int_equal(bit_int(j, "customer.creditBalance"), 2000);
        json_decref(j);
        bit_fails_with(t.owner.token, "PauseSubscription", "failed_precondition",
                       "cannot pause a subscription that is canceled", "{\"id\":\"%s\"}", a);

        /* b is paused through its renewal date, then resumed: a new period from then. */
        j = bit_ok(t.owner.token, "PauseSubscription", "{\"id\":\"%s\"}", b);
        assert_string_equal(bit_str(j, "subscription.state"), "paused");
        json_decref(j);
        int64_t later = bit_utc(2027, 10, 20, 0, 0, 0);
        assert_int_equal(bit_advance(&t, clock, later), 0);
        j = bit_ok(t.owner.token, "ResumeSubscription", "{\"id\":\"%s\"}", b);
        assert_string_equal(bit_str(j, "subscription.state"), "active");
        assert_int_equal(bit_int(j, "subscription.currentPeriodStartUnixMs"), later);
        assert_int_equal(bit_int(j, "subscription.currentPeriodEndUnixMs"),
                         bit_utc(2027, 11, 20, 0, 0, 0));
        /* The credit from a pays the new period's 3,000 in part. */
        assert_int_equal(bit_int(j, "latestInvoice.balanceApplied"), 2000);
        assert_int_equal(bit_int(j, "latestInvoice.amountPaid"), 1000);
        json_decref(j);
        json_decref(bit_reconcile_clean(&t));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_year_of_month_ends),
            cmocka_unit_test(test_trial_change_and_dunning),
            cmocka_unit_test(test_interval_change_starts_a_new_cycle),
            cmocka_unit_test(test_credit_notes),
            cmocka_unit_test(test_refunds),
            cmocka_unit_test(test_metered_usage),
            cmocka_unit_test(test_cancel_now_and_pause),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
