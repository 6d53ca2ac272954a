/*
 * Three billing replicas run the scheduler on real time, and no period is
 * invoiced twice.
 *
 * The stack's two billing replicas run the scheduler (polling every 200 ms
 * in the fixture: tests/CMakeLists.txt); the test starts a third of its own
 * on the stack's broker, with the same poll. In one tenant it creates a few
 * dozen subscriptions to a daily plan, each anchored a few seconds ahead
 * (most on the same whole second): each one's first period is a prorated
 * part that ends at its anchor, so that all of them fall due at about the
 * same moment and the three schedulers race for every one (a due scan, then
 * the row taken with FOR UPDATE SKIP LOCKED).
 *
 * Once every subscription's current period starts at its anchor (the
 * renewal ran; a bounded wait on real time), the test asserts, through the
 * API and in SQL: each subscription has exactly one creation invoice and
 * exactly one renewal invoice, the latter for the period that starts at the
 * anchor; no two invoices share a subscription and a period start; each
 * history has exactly one renew, at the anchor; the scheduler's action
 * counter, summed over the three replicas' /metrics, grew by at least the
 * number of subscriptions; the ledger holds exactly one chain per invoice
 * and payment; and the reconciliation is clean.
 *
 * Catch-up after downtime (missed periods made in order, each dated as it
 * fell due) is not tested here: on real time the stack's replicas never stop
 * scheduling, so there is no downtime to make; test clocks run the same
 * lifecycle code (test_billing_lifecycle.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"
#include "ks_clock.h"

#define SUBS           36
#define CUSTOMERS      6
#define AHEAD_MS       3000  /* an anchor is at least this far ahead of its creation */
#define SHARED_MIN_MS  1500  /* the shared anchor serves creations at least this far before it */
#define RENEW_WAIT_MS  30000 /* after the last anchor */
#define METRIC_WAIT_MS 5000
#define DAILY_PRICE    8640000 /* 100 a second: a few seconds' proration is not zero */
#define ACTIONS        "keelson_billing_scheduler_actions_total"
#define FAILURES       "keelson_billing_scheduler_failures_total"

static it_service g_own;
static int g_ports[IT_REPLICAS_MAX + 1];
static int g_n_ports;

static int teardown(void **state)
{
        (void)state;
        it_service_stop(&g_own);
        return 0;
}

/* The stack's billing replicas' health ports, and a third replica of the test's own. */
static int setup(void **state)
{
        char dsn[800], login[900];

        if (bit_setup(state) != 0 ||
            it_stack_env("KEELSON_IT_BILLING_LOGIN_DSN", dsn, sizeof(dsn)) != 0) {
                return -1;
        }
        g_n_ports = it_stack_ports("KEELSON_IT_BILLING_HEALTH_PORTS", g_ports, IT_REPLICAS_MAX);
        if (g_n_ports < 2) {
                fprintf(stderr, "the stack runs fewer than two billing replicas\n");
                return -1;
        }
        snprintf(login, sizeof(login), "KEELSON_BILLING_PG_LOGIN_DSN=%s", dsn);
        const char *env[] = {login, "KEELSON_BILLING_SCHEDULER=true",
                             "KEELSON_BILLING_SCHEDULER_POLL_MS=200", NULL};
        if (it_service_start(&ait_stack, "keelson-billing", "KEELSON_BILLING", env, &g_own) != 0) {
                return -1;
        }
        g_ports[g_n_ports++] = g_own.health_port;
        return 0;
}

/* A metric of each replica (each may be NULL), and their sum. */
static double per_replica(const char *metric, double *each)
{
        double sum = 0;

        for (int i = 0; i < g_n_ports; i++) {
                double v = it_metric_sum_at(g_ports[i], metric, NULL);
                if (each != NULL) {
                        each[i] = v;
                }
                sum += v;
        }
        return sum;
}

static int64_t whole_second_up(int64_t ms)
{
        return (ms + 999) / 1000 * 1000;
}

typedef struct sub {
        char id[BIT_ID_MAX];
        int64_t anchor_ms;
} sub;

/* A subscription whose first, prorated period ends at its anchor: the shared one, if in time. */
static void subscribe(const bit_tenant *t, const char *customer, int64_t shared, sub *s)
{
        int64_t now = ks_now_ms();
        int64_t anchor = now + SHARED_MIN_MS < shared ? shared : whole_second_up(now + AHEAD_MS);
        json_t *j = bit_ok(t->owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"daily\","
                           "\"billingAnchorUnixMs\":\"%lld\"}",
                           customer, (long long)anchor);

        snprintf(s->id, sizeof(s->id), "%s", bit_str(j, "subscription.id"));
        s->anchor_ms = bit_int(j, "subscription.billingAnchorUnixMs");
        assert_int_equal(s->anchor_ms, anchor);
        assert_string_equal(bit_str(j, "subscription.state"), "active");
        assert_true(bit_int(j, "subscription.currentPeriodStartUnixMs") < anchor);
        assert_int_equal(bit_int(j, "subscription.currentPeriodEndUnixMs"), anchor);
        assert_string_equal(bit_str(j, "latestInvoice.billingReason"), "subscription_create");
        assert_true(bit_int(j, "latestInvoice.total") > 0);
        json_decref(j);
}

/* Waits (bounded) until each subscription of the tenant is in the period starting at its anchor. */
static void wait_renewed(const char *tenant, int64_t last_anchor)
{
        const char *p[1] = {tenant};
        int64_t until = last_anchor + RENEW_WAIT_MS;
        long renewed = 0;

        while (ks_now_ms() < until) {
                renewed =
                    ait_sql_long("SELECT count(*) FROM billing.subscriptions"
                                 " WHERE tenant_id = $1::uuid AND period_start_ms = anchor_ms",
                                 1, p);
                if (renewed == SUBS) {
                        return;
                }
                it_sleep_ms(100);
        }
        fail_msg("%ld of %d subscriptions renewed %d ms after the last anchor", renewed, SUBS,
                 RENEW_WAIT_MS);
}

/* Through the API: each in its first full period, a day from its anchor. */
static void expect_renewed(const bit_tenant *t, const sub *subs)
{
        json_t *j = bit_ok(t->owner.token, "ListSubscriptions", "{\"pageSize\":200}");
        json_t *list = bit_at(j, "subscriptions"), *e;
        size_t i;
        int seen = 0;

        assert_int_equal(json_array_size(list), SUBS);
        json_array_foreach(list, i, e)
        {
                for (int k = 0; k < SUBS; k++) {
                        if (strcmp(subs[k].id, bit_str(e, "id")) != 0) {
                                continue;
                        }
                        seen++;
                        assert_string_equal(bit_str(e, "state"), "active");
                        assert_int_equal(bit_int(e, "currentPeriodStartUnixMs"), subs[k].anchor_ms);
                        assert_int_equal(bit_int(e, "currentPeriodEndUnixMs"),
                                         subs[k].anchor_ms + BIT_DAY_MS);
                }
        }
        assert_int_equal(seen, SUBS);
        json_decref(j);
}

/* Subscriptions of the tenant whose invoices of a reason are not exactly one (for the period). */
static const char sql_not_one_create[] =
    "SELECT count(*) FROM billing.subscriptions s WHERE s.tenant_id = $1::uuid"
    " AND (SELECT count(*) FROM billing.invoices i WHERE i.tenant_id = s.tenant_id"
    "      AND i.subscription_id = s.id AND i.billing_reason = 'subscription_create') <> 1";

static const char sql_not_one_cycle[] =
    "SELECT count(*) FROM billing.subscriptions s WHERE s.tenant_id = $1::uuid"
    " AND (SELECT count(*) FROM billing.invoices i WHERE i.tenant_id = s.tenant_id"
    "      AND i.subscription_id = s.id AND i.billing_reason = 'subscription_cycle'"
    "      AND i.period_start_ms = s.anchor_ms AND i.period_end_ms = s.anchor_ms + 86400000"
    "      AND i.state <> 0) <> 1";

static const char sql_same_period[] =
    "SELECT count(*) FROM (SELECT subscription_id, period_start_ms FROM billing.invoices"
    " WHERE tenant_id = $1::uuid"
    " AND billing_reason IN ('subscription_create', 'subscription_cycle')"
    " GROUP BY 1, 2 HAVING count(*) > 1) d";

static const char sql_not_one_renew[] =
    "SELECT count(*) FROM billing.subscriptions s WHERE s.tenant_id = $1::uuid"
    " AND ((SELECT count(*) FROM billing.subscription_history h WHERE h.tenant_id = s.tenant_id"
    "       AND h.subscription_id = s.id AND h.event = 'renew') <> 1"
    "  OR NOT EXISTS (SELECT 1 FROM billing.subscription_history h"
    "       WHERE h.tenant_id = s.tenant_id AND h.subscription_id = s.id AND h.event = 'renew'"
    "       AND h.at_ms = s.anchor_ms))";

static void expect_none(const bit_tenant *t, const char *sql, const char *what)
{
        const char *p[1] = {t->owner.tenant_id};
        long n = ait_sql_long(sql, 1, p);

        if (n != 0) {
                fail_msg("%ld %s", n, what);
        }
}

static void expect_rows(const bit_tenant *t)
{
        const char *p[1] = {t->owner.tenant_id};

        expect_none(t, sql_not_one_create, "subscriptions without exactly one creation invoice");
        expect_none(t, sql_not_one_cycle,
                    "subscriptions without exactly one renewal invoice for the anchor's period");
        expect_none(t, sql_same_period, "periods invoiced twice");
        expect_none(t, sql_not_one_renew, "subscriptions without exactly one renew, at the anchor");
        /* Nothing else was invoiced: one creation and one renewal each. */
        long n =
            ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id = $1::uuid", 1, p);
        if (n != 2 * SUBS) {
                fail_msg("%ld invoices for %d subscriptions", n, SUBS);
        }
}

/*
 * The scheduler's actions since before, summed over the replicas, once they
 * reach want (bounded: a replica counts its actions just after its COMMIT).
 */
static double wait_actions(double sum_before, double want, double *each)
{
        int64_t until = ks_now_ms() + METRIC_WAIT_MS;
        double sum;

        while ((sum = per_replica(ACTIONS, each) - sum_before) < want && ks_now_ms() < until) {
                it_sleep_ms(50);
        }
        return sum;
}

static void test_no_period_invoiced_twice(void **state)
{
        (void)state;
        static const char *const pms[2] = {"pm_card_visa", ""};
        char customers[CUSTOMERS][BIT_ID_MAX];
        double before[IT_REPLICAS_MAX + 1], after[IT_REPLICAS_MAX + 1];
        static sub subs[SUBS];
        bit_tenant t;

        bit_tenant_new("bl-sched", &t);
        bit_plan(&t, "daily", "USD", "FLAT", DAILY_PRICE, "DAY", 1, 0);
        for (int i = 0; i < CUSTOMERS; i++) {
                bit_customer(&t, "USD", i % 3 == 0 ? 0 : 825, pms[i % 2], "", customers[i]);
        }
        double sum_before = per_replica(ACTIONS, before);
        double failures_before = per_replica(FAILURES, NULL);
        int64_t shared = whole_second_up(ks_now_ms() + AHEAD_MS + SHARED_MIN_MS), last = 0;
        int on_shared = 0;
        for (int i = 0; i < SUBS; i++) {
                subscribe(&t, customers[i % CUSTOMERS], shared, &subs[i]);
                on_shared += subs[i].anchor_ms == shared;
                last = subs[i].anchor_ms > last ? subs[i].anchor_ms : last;
        }
        wait_renewed(t.owner.tenant_id, last);
        expect_renewed(&t, subs);
        expect_rows(&t);
        double actions = wait_actions(sum_before, SUBS, after);
        print_message("%d subscriptions (%d anchored on one second), renewals by replica:", SUBS,
                      on_shared);
        for (int i = 0; i < g_n_ports; i++) {
                print_message(" %.0f", after[i] - before[i]);
        }
        print_message(", scheduler failures (retried) %.0f\n",
                      per_replica(FAILURES, NULL) - failures_before);
        /* Every renewal is an action of one scheduler (other tenants' may add to the sum). */
        if (actions < SUBS) {
                fail_msg("the schedulers counted %.0f actions for %d renewals", actions, SUBS);
        }
        /* The renewals' chains reach the ledger through the relay, after their commits. */
        bit_wait_posted(t.owner.tenant_id, 30000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
        json_decref(bit_reconcile_clean(&t));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_no_period_invoiced_twice),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
