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
 * Catch-up after downtime, on real time: the stack's replicas never stop
 * scheduling, so the test makes the downtime in the database instead. Two
 * subscriptions to the daily plan, one with a day's trial, are moved three
 * and a half days into the past in one transaction (every time of theirs,
 * their invoices', lines', payments' and history's): to a scheduler that is
 * what three and a half days without one looks like. The schedulers then
 * find them due and must make every missed action in order, each dated
 * when it fell due: three renewals of the first; the trial's end and two
 * renewals of the second. Asserted through the API: each in the period that
 * contains now; its invoices one per period, contiguous, each finalized and
 * paid at its period's start, numbered in order, the tenant's numbers 1..8
 * each once; its history one step per missed action, dated when it fell due
 * and naming its invoice. The ledger holds exactly one chain per invoice and
 * payment, and the reconciliation is clean.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "billing_it.h"
#include "ks_clock.h"
#include "ks_pg.h"

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

/* ---- catch-up after downtime ------------------------------------------------------------- */

#define DOWN_MS          (3 * BIT_DAY_MS + BIT_DAY_MS / 2) /* the downtime: three and a half days */
#define CATCH_UP_WAIT_MS 30000

/* Every time of the subscription and its rows, moved ms into the past (0 means none: kept). */
static const char sql_backdate[] =
    "WITH s AS (UPDATE billing.subscriptions SET anchor_ms = anchor_ms - $3::int8,"
    "  period_start_ms = period_start_ms - $3::int8, period_end_ms = period_end_ms - $3::int8,"
    "  trial_end_ms = CASE WHEN trial_end_ms = 0 THEN 0 ELSE trial_end_ms - $3::int8 END,"
    "  next_action_ms = next_action_ms - $3::int8, created_ms = created_ms - $3::int8,"
    "  updated_ms = updated_ms - $3::int8"
    "  WHERE tenant_id = $1::uuid AND id = $2::uuid AND test_clock_id IS NULL"
    "  AND next_action_ms > $4::int8 RETURNING id),"
    " i AS (UPDATE billing.invoices SET period_start_ms = period_start_ms - $3::int8,"
    "  period_end_ms = period_end_ms - $3::int8, created_ms = created_ms - $3::int8,"
    "  finalized_ms = CASE WHEN finalized_ms = 0 THEN 0 ELSE finalized_ms - $3::int8 END,"
    "  paid_ms = CASE WHEN paid_ms = 0 THEN 0 ELSE paid_ms - $3::int8 END"
    "  WHERE tenant_id = $1::uuid AND subscription_id IN (SELECT id FROM s) RETURNING id),"
    " l AS (UPDATE billing.invoice_lines SET period_start_ms = period_start_ms - $3::int8,"
    "  period_end_ms = period_end_ms - $3::int8"
    "  WHERE tenant_id = $1::uuid AND invoice_id IN (SELECT id FROM i) RETURNING 1),"
    " p AS (UPDATE billing.payments SET created_ms = created_ms - $3::int8"
    "  WHERE tenant_id = $1::uuid AND invoice_id IN (SELECT id FROM i) RETURNING 1),"
    " h AS (UPDATE billing.subscription_history SET at_ms = at_ms - $3::int8"
    "  WHERE tenant_id = $1::uuid AND subscription_id IN (SELECT id FROM s) RETURNING 1)"
    " SELECT count(*) FROM s"; /* the others run whole whether read or not */

#define PERIODS                                                                                    \
        4 /* a subscription's periods by the end of its downtime, the current one included */

/* What one subscription must show once caught up: its start and, per period, its history. */
typedef struct caught_up {
        const char *id;
        int64_t start;
        bool trial; /* its first period a day's trial: a zero invoice, then trial_end */
        int64_t number[PERIODS]; /* out: its invoices' numbers, by period */
} caught_up;

/* A subscription to the daily plan, made now; its start. */
static int64_t subscribe_daily(const bit_tenant *t, const char *customer, int trial_days,
                               char id[BIT_ID_MAX])
{
        json_t *j = bit_ok(t->owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"daily\",\"trialDays\":%d}",
                           customer, trial_days);
        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "subscription.id"));
        int64_t start = bit_int(j, "subscription.currentPeriodStartUnixMs");
        json_decref(j);
        return start;
}

/*
 * Both subscriptions moved DOWN_MS into the past in one transaction, after
 * both were made: the schedulers, which never stop, see neither due before
 * both first invoices have their numbers. Moved one by one, the first could
 * be caught up (three renewals numbered) before the second was made.
 */
static void go_down(const bit_tenant *t, caught_up *c, int n)
{
        PGconn *pg = ait_pg();
        ks_pg_num down = ks_pg_num_of(DOWN_MS), now = ks_pg_num_of(ks_now_ms());

        PQclear(it_sql(pg, "BEGIN", 0, NULL));
        for (int i = 0; i < n; i++) {
                const char *p[4] = {t->owner.tenant_id, c[i].id, down.s, now.s};
                /* Not due yet (nothing ran for it), and moved whole. */
                assert_int_equal(it_sql_long(pg, sql_backdate, 4, p), 1);
                c[i].start -= DOWN_MS;
        }
        PQclear(it_sql(pg, "COMMIT", 0, NULL));
        PQfinish(pg);
}

/* Waits (bounded) until neither subscription has anything due before now. */
static void wait_caught_up(const bit_tenant *t, const char *a, const char *b)
{
        const char *p[3] = {t->owner.tenant_id, a, b};
        int64_t until = ks_now_ms() + CATCH_UP_WAIT_MS;
        long behind = 0;

        while (ks_now_ms() < until) {
                behind =
                    ait_sql_long("SELECT count(*) FROM billing.subscriptions"
                                 " WHERE tenant_id = $1::uuid AND id IN ($2::uuid, $3::uuid)"
                                 " AND (next_action_ms IS NULL"
                                 "  OR next_action_ms <= (extract(epoch FROM now()) * 1000)::int8)",
                                 3, p);
                if (behind == 0) {
                        return;
                }
                it_sleep_ms(100);
        }
        fail_msg("%ld subscriptions still behind %d ms after their downtime", behind,
                 CATCH_UP_WAIT_MS);
}

/* "INV-000042" as 42; -1 for anything else. */
static int64_t number_of(const char *s)
{
        char *end = NULL;
        if (strncmp(s, "INV-", 4) != 0 || s[4] == '\0') {
                return -1;
        }
        long long n = strtoll(s + 4, &end, 10);
        return *end == '\0' ? n : -1;
}

/*
 * Through the API: in the period that contains now (start + 3 days), one
 * invoice per day from start (newest first), each finalized and paid when its
 * period started, the first for the creation, numbered in order; the history
 * one step per day, each dated when it fell due and naming its invoice.
 */
static void expect_caught_up(const bit_tenant *t, caught_up *c)
{
        static const int64_t total =
            (int64_t)DAILY_PRICE + (int64_t)DAILY_PRICE * 825 / 10000; /* tax 8.25% */
        char invoice[PERIODS][BIT_ID_MAX];
        size_t i;
        json_t *e;

        json_t *s = bit_ok(t->owner.token, "GetSubscription", "{\"id\":\"%s\"}", c->id);
        assert_string_equal(bit_str(s, "subscription.state"), "active");
        assert_int_equal(bit_int(s, "subscription.currentPeriodStartUnixMs"),
                         c->start + (PERIODS - 1) * BIT_DAY_MS);
        assert_int_equal(bit_int(s, "subscription.currentPeriodEndUnixMs"),
                         c->start + PERIODS * BIT_DAY_MS);
        json_decref(s);

        json_t *j = bit_ok(t->owner.token, "ListInvoices",
                           "{\"subscriptionId\":\"%s\",\"pageSize\":50}", c->id);
        json_t *list = bit_at(j, "invoices");
        assert_int_equal(json_array_size(list), PERIODS);
        json_array_foreach(list, i, e)
        {
                int k = PERIODS - 1 - (int)i; /* newest first */
                int64_t from = c->start + k * BIT_DAY_MS;
                assert_string_equal(bit_str(e, "billingReason"),
                                    k == 0 ? "subscription_create" : "subscription_cycle");
                assert_int_equal(bit_int(e, "total"), k == 0 && c->trial ? 0 : total);
                assert_string_equal(bit_str(e, "state"), "paid");
                assert_int_equal(bit_int(e, "periodStartUnixMs"), from);
                assert_int_equal(bit_int(e, "periodEndUnixMs"), from + BIT_DAY_MS);
                assert_int_equal(bit_int(e, "finalizedAtUnixMs"), from);
                assert_int_equal(bit_int(e, "paidAtUnixMs"), from);
                c->number[k] = number_of(bit_str(e, "number"));
                snprintf(invoice[k], sizeof(invoice[k]), "%s", bit_str(e, "id"));
        }
        json_decref(j);
        for (int k = 1; k < PERIODS; k++) {
                assert_true(c->number[k] > c->number[k - 1]); /* made in order */
        }

        j = bit_ok(t->owner.token, "ListSubscriptionHistory", "{\"id\":\"%s\"}", c->id);
        list = bit_at(j, "entries");
        assert_int_equal(json_array_size(list), PERIODS);
        json_array_foreach(list, i, e)
        {
                int k = (int)i;
                const char *event = k == 0 ? "create" : k == 1 && c->trial ? "trial_end" : "renew";
                assert_int_equal(bit_int(e, "seq"), k + 1);
                assert_string_equal(bit_str(e, "event"), event);
                assert_string_equal(bit_str(e, "toState"),
                                    k == 0 && c->trial ? "trialing" : "active");
                assert_int_equal(bit_int(e, "atUnixMs"), c->start + k * BIT_DAY_MS);
                if (k > 0) {
                        assert_string_equal(bit_str(e, "invoiceId"), invoice[k]);
                }
        }
        json_decref(j);
}

static void test_catch_up_after_downtime(void **state)
{
        (void)state;
        char customer[BIT_ID_MAX], plain[BIT_ID_MAX], trial[BIT_ID_MAX];
        bool seen[2 * PERIODS + 1] = {false};
        bit_tenant t;

        bit_tenant_new("bl-down", &t);
        bit_plan(&t, "daily", "USD", "FLAT", DAILY_PRICE, "DAY", 1, 0);
        bit_customer(&t, "USD", 825, "pm_card_visa", "", customer);
        caught_up c[2] = {
            {.id = plain, .start = subscribe_daily(&t, customer, -1, plain)},
            {.id = trial, .start = subscribe_daily(&t, customer, 1, trial), .trial = true},
        };
        go_down(&t, c, 2);
        wait_caught_up(&t, plain, trial);
        for (int s = 0; s < 2; s++) {
                expect_caught_up(&t, &c[s]);
        }
        /* The tenant's numbers: 1..8, each once, the creations' first (made before the downtime).
         */
        assert_int_equal(c[0].number[0], 1);
        assert_int_equal(c[1].number[0], 2);
        for (int s = 0; s < 2; s++) {
                for (int k = 0; k < PERIODS; k++) {
                        int64_t n = c[s].number[k];
                        assert_true(n >= 1 && n <= 2 * PERIODS && !seen[n]);
                        seen[n] = true;
                }
        }
        bit_wait_posted(t.owner.tenant_id, 30000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
        json_decref(bit_reconcile_clean(&t));
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
            cmocka_unit_test(test_catch_up_after_downtime),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
