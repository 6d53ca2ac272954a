/*
 * Stripe's events applied to billing, end to end: signed as Stripe signs,
 * posted to the gateway's /webhooks/stripe/<id>, stored, applied by the
 * webhook service's applier through BillingService, and what a user then
 * sees of the invoice, the subscription and the ledger.
 *
 * - One payment told five times over two event types (invoice.paid five
 *   times, payment_intent.succeeded once) and an older failure arriving
 *   last: the invoice is paid once, by one payment, with one ledger chain;
 *   the older failure is stale and changes nothing.
 * - A failed payment: a failed payment row, the subscription past due.
 * - Subscriptions: cancel at period end, an older update arriving after it
 *   (stale), then deleted: canceled.
 * - What cannot be applied (an invoice of another tenant) fails with
 *   billing's reason; re-applied, it fails again; one that names no keelson
 *   object is ignored.
 * - kill -9 of the replica that stored an event before any replica applied
 *   it: applied once a replica runs again. (The stack's own replicas are
 *   stopped meanwhile, and the one that stores runs with its applier off, so
 *   that "between store and apply" is a certainty, not a race.)
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "billing_it.h"
#include "webhook_it.h"

#define SECRET "whsec_applyTestSecret0123456789abcd"

static int setup(void **state)
{
        if (bit_setup(state) != 0 || wit_setup() != 0) {
                return -1;
        }
        return 0;
}

/* An open invoice of a new customer without a card: its id and amount due. */
static void open_invoice(const bit_tenant *t, char id[BIT_ID_MAX], int64_t *due)
{
        char cust[BIT_ID_MAX];
        bit_customer(t, "USD", 0, "", "", cust);
        json_t *j = bit_ok(t->owner.token, "CreateInvoice",
                           "{\"customerId\":\"%s\",\"lines\":[{\"description\":\"Work\","
                           "\"unitAmount\":\"4000\"}]}",
                           cust);
        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "invoice.id"));
        json_decref(j);
        j = bit_ok(t->owner.token, "FinalizeInvoice", "{\"id\":\"%s\"}", id);
        assert_string_equal(bit_str(j, "invoice.state"), "open");
        *due = bit_int(j, "invoice.amountRemaining");
        json_decref(j);
}

/* A Stripe event's JSON about an object with keelson's id in its metadata. */
static void event(char *out, size_t len, const char *id, const char *type, long created,
                  const char *object)
{
        snprintf(out, len,
                 "{\"id\":\"%s\",\"object\":\"event\",\"api_version\":\"2024-06-20\","
                 "\"created\":%ld,\"livemode\":false,\"type\":\"%s\",\"data\":{\"object\":%s}}",
                 id, created, type, object);
}

static void send_ok(const char *path, const char *body)
{
        long now = (long)time(NULL);
        assert_int_equal(wit_stripe_deliver(path, SECRET, now, body, NULL), 200);
}

/* Waits (at most 20 s) until the event's status is want; fails the test otherwise. */
static void wait_status(const char *endpoint_id, const char *event_id, long want)
{
        long got = -1;
        for (int i = 0; i < 200; i++) {
                if ((got = wit_status_of(endpoint_id, event_id)) == want) {
                        return;
                }
                it_sleep_ms(100);
        }
        fail_msg("%s: status %ld, wanted %ld", event_id, got, want);
}

static const char *last_error(const char *endpoint_id, const char *event_id, char *out, size_t len)
{
        PGconn *pg = PQconnectdb(wit_stack()->pg_dsn);
        const char *p[2] = {endpoint_id, event_id};
        PGresult *r = it_sql(pg,
                             "SELECT last_error FROM webhook.received_events WHERE"
                             " endpoint_id = $1::uuid AND provider_event_id = $2",
                             2, p);
        snprintf(out, len, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
        PQclear(r);
        PQfinish(pg);
        return out;
}

static void test_one_payment_told_many_times(void **state)
{
        (void)state;
        bit_tenant t;
        char inv[BIT_ID_MAX], path[128], ep[64], obj[512], body[1024], err[600];
        int64_t due;
        long now = (long)time(NULL);

        bit_tenant_new("wh-apply-pay", &t);
        open_invoice(&t, inv, &due);
        wit_endpoint(t.owner.token, "PROVIDER_STRIPE", SECRET, path, ep);

        snprintf(
            obj, sizeof(obj),
            "{\"id\":\"in_1\",\"object\":\"invoice\",\"amount_paid\":%lld,\"currency\":\"usd\","
            "\"payment_intent\":\"pi_1\",\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
            (long long)due, inv);
        event(body, sizeof(body), "evt_paid", "invoice.paid", now - 60, obj);
        for (int i = 0; i < 5; i++) {
                send_ok(path, body);
        }
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"pi_1\",\"object\":\"payment_intent\",\"amount_received\":%lld,"
                 "\"currency\":\"usd\",\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
                 (long long)due, inv);
        event(body, sizeof(body), "evt_pi", "payment_intent.succeeded", now - 59, obj);
        send_ok(path, body);
        /* a failure older than the payment, arriving after it */
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"in_1\",\"object\":\"invoice\",\"currency\":\"usd\","
                 "\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
                 inv);
        event(body, sizeof(body), "evt_failed_old", "invoice.payment_failed", now - 120, obj);
        send_ok(path, body);

        wait_status(ep, "evt_paid", 2);
        wait_status(ep, "evt_pi", 2);
        wait_status(ep, "evt_failed_old", 3);
        assert_non_null(strstr(last_error(ep, "evt_pi", err, sizeof(err)), "no_change"));
        assert_non_null(strstr(last_error(ep, "evt_failed_old", err, sizeof(err)), "stale"));
        assert_int_equal(wit_rows_of(ep, "evt_paid"), 1);

        json_t *j = bit_ok(t.owner.token, "GetInvoice", "{\"id\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        json_t *payments = bit_at(j, "invoice.payments");
        assert_int_equal(json_array_size(payments), 1);
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(payments, 0), "method")), "provider");
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(payments, 0), "reference")), "pi_1");
        json_decref(j);

        /* the ledger holds the invoice's chain and the payment's, once each */
        bit_wait_posted(t.owner.tenant_id, 20000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
        json_decref(bit_reconcile_clean(&t));
}

static void test_failed_payment(void **state)
{
        (void)state;
        bit_tenant t;
        char inv[BIT_ID_MAX], path[128], ep[64], obj[512], body[1024];
        int64_t due;
        long now = (long)time(NULL);

        bit_tenant_new("wh-apply-fail", &t);
        open_invoice(&t, inv, &due);
        wit_endpoint(t.owner.token, "PROVIDER_STRIPE", SECRET, path, ep);
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"pi_9\",\"object\":\"payment_intent\",\"currency\":\"usd\","
                 "\"last_payment_error\":{\"code\":\"card_declined\"},"
                 "\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
                 inv);
        event(body, sizeof(body), "evt_pf", "payment_intent.payment_failed", now, obj);
        send_ok(path, body);
        wait_status(ep, "evt_pf", 2);
        json_t *j = bit_ok(t.owner.token, "GetInvoice", "{\"id\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "invoice.state"), "open");
        json_t *p0 = json_array_get(bit_at(j, "invoice.payments"), 0);
        assert_string_equal(json_string_value(json_object_get(p0, "status")), "failed");
        assert_string_equal(json_string_value(json_object_get(p0, "failureCode")), "card_declined");
        json_decref(j);
}

static void test_subscription_events(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], sub[BIT_ID_MAX], path[128], ep[64], obj[512], body[1024];
        long now = (long)time(NULL);

        bit_tenant_new("wh-apply-sub", &t);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        bit_plan(&t, "pro", "USD", "FLAT", 2000, "MONTH", 1, 0);
        json_t *j = bit_ok(t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        json_decref(j);
        wit_endpoint(t.owner.token, "PROVIDER_STRIPE", SECRET, path, ep);

        snprintf(obj, sizeof(obj),
                 "{\"id\":\"sub_1\",\"object\":\"subscription\",\"cancel_at_period_end\":true,"
                 "\"metadata\":{\"keelson_subscription_id\":\"%s\"}}",
                 sub);
        event(body, sizeof(body), "evt_upd", "customer.subscription.updated", now - 30, obj);
        send_ok(path, body);
        wait_status(ep, "evt_upd", 2);
        j = bit_ok(t.owner.token, "GetSubscription", "{\"id\":\"%s\"}", sub);
        assert_true(bit_bool(j, "subscription.cancelAtPeriodEnd"));
        json_decref(j);

        /* an older update (not canceling) after the newer one: stale, nothing moves back */
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"sub_1\",\"object\":\"subscription\",\"cancel_at_period_end\":false,"
                 "\"metadata\":{\"keelson_subscription_id\":\"%s\"}}",
                 sub);
        event(body, sizeof(body), "evt_upd_old", "customer.subscription.updated", now - 90, obj);
        send_ok(path, body);
        wait_status(ep, "evt_upd_old", 3);
        j = bit_ok(t.owner.token, "GetSubscription", "{\"id\":\"%s\"}", sub);
        assert_true(bit_bool(j, "subscription.cancelAtPeriodEnd"));
        json_decref(j);

        event(body, sizeof(body), "evt_del", "customer.subscription.deleted", now, obj);
        send_ok(path, body);
        wait_status(ep, "evt_del", 2);
        j = bit_ok(t.owner.token, "GetSubscription", "{\"id\":\"%s\"}", sub);
        assert_string_equal(bit_str(j, "subscription.state"), "canceled");
        json_decref(j);
}

static void test_what_cannot_be_applied(void **state)
{
        (void)state;
        bit_tenant t, other;
        char inv[BIT_ID_MAX], path[128], ep[64], obj[512], body[1024], err[600], req[128];
        int64_t due;
        long now = (long)time(NULL);

        bit_tenant_new("wh-apply-x", &t);
        bit_tenant_new("wh-apply-y", &other);
        open_invoice(&other, inv, &due); /* another tenant's invoice */
        wit_endpoint(t.owner.token, "PROVIDER_STRIPE", SECRET, path, ep);
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"in_x\",\"amount_paid\":100,\"currency\":\"usd\","
                 "\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
                 inv);
        event(body, sizeof(body), "evt_x", "invoice.paid", now, obj);
        send_ok(path, body);
        wait_status(ep, "evt_x", 4);
        assert_non_null(strstr(last_error(ep, "evt_x", err, sizeof(err)), "not_found"));
        json_t *j = bit_ok(other.owner.token, "GetInvoice", "{\"id\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "invoice.state"), "open");
        json_decref(j);

        /* re-applied by an operator: pending, then failed again for the same reason */
        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\"}", ep);
        j = wit_call_ok(t.owner.token, "ListReceivedEvents", req);
        snprintf(req, sizeof(req), "{\"id\":\"%s\"}",
                 wit_str(json_array_get(json_object_get(j, "events"), 0), "id", NULL));
        json_decref(j);
        json_decref(wit_call_ok(t.owner.token, "ReapplyReceivedEvent", req));
        wait_status(ep, "evt_x", 4);
        assert_non_null(strstr(last_error(ep, "evt_x", err, sizeof(err)), "not_found"));

        /* an invoice.paid that names no keelson invoice: ignored */
        event(body, sizeof(body), "evt_nometa", "invoice.paid", now,
              "{\"id\":\"in_z\",\"amount_paid\":100,\"currency\":\"usd\"}");
        send_ok(path, body);
        wait_status(ep, "evt_nometa", 3);
}

/* Signals every webhook replica of the stack. */
static void stack_webhooks(int sig)
{
        int pids[IT_REPLICAS_MAX];
        char v[256];
        int n = 0;

        assert_int_equal(it_stack_env("KEELSON_IT_WEBHOOK_PIDS", v, sizeof(v)), 0);
        for (char *s = strtok(v, ","); s != NULL && n < IT_REPLICAS_MAX; s = strtok(NULL, ",")) {
                pids[n++] = atoi(s);
        }
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
                assert_int_equal(kill(pids[i], sig), 0);
        }
}

/* As a provider does: sends until answered 2xx (a stopped replica's calls time out). */
static void send_until_stored(const char *path, const char *body)
{
        for (int i = 0; i < 60; i++) {
                long now = (long)time(NULL);
                if (wit_stripe_deliver(path, SECRET, now, body, NULL) == 200) {
                        return;
                }
                it_sleep_ms(500);
        }
        fail_msg("never stored");
}

static void test_killed_between_store_and_apply(void **state)
{
        (void)state;
        bit_tenant t;
        char inv[BIT_ID_MAX], path[128], ep[64], obj[512], body[1024];
        int64_t due;
        it_service mine = {0}, again = {0};
        static const char *const no_apply[] = {"KEELSON_WEBHOOK_APPLY=false", NULL};

        bit_tenant_new("wh-apply-kill", &t);
        open_invoice(&t, inv, &due);
        wit_endpoint(t.owner.token, "PROVIDER_STRIPE", SECRET, path, ep);
        snprintf(obj, sizeof(obj),
                 "{\"id\":\"in_k\",\"amount_paid\":%lld,\"currency\":\"usd\","
                 "\"payment_intent\":\"pi_k\",\"metadata\":{\"keelson_invoice_id\":\"%s\"}}",
                 (long long)due, inv);
        event(body, sizeof(body), "evt_kill", "invoice.paid", (long)time(NULL), obj);

        stack_webhooks(SIGSTOP);
        assert_int_equal(
            it_service_start(wit_stack(), "keelson-webhook", "KEELSON_WEBHOOK", no_apply, &mine),
            0);
        send_until_stored(path, body);
        assert_int_equal(wit_status_of(ep, "evt_kill"), 1); /* stored, pending */
        it_pid_stop(&mine.pid, SIGKILL);
        it_sleep_ms(500);
        assert_int_equal(wit_status_of(ep, "evt_kill"), 1);

        /* a replica runs again (this one with its applier): applied */
        assert_int_equal(
            it_service_start(wit_stack(), "keelson-webhook", "KEELSON_WEBHOOK", NULL, &again), 0);
        wait_status(ep, "evt_kill", 2);
        stack_webhooks(SIGCONT);
        it_service_stop(&again);
        json_t *j = bit_ok(t.owner.token, "GetInvoice", "{\"id\":\"%s\"}", inv);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        assert_int_equal(json_array_size(bit_at(j, "invoice.payments")), 1);
        json_decref(j);
        bit_wait_posted(t.owner.tenant_id, 20000);
        assert_int_equal(bit_ledger_mismatches(t.owner.tenant_id), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_one_payment_told_many_times),
            cmocka_unit_test(test_failed_payment),
            cmocka_unit_test(test_subscription_events),
            cmocka_unit_test(test_what_cannot_be_applied),
            cmocka_unit_test(test_killed_between_store_and_apply),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
