/*
 * sm_billing_ask through a real in-process broker on loopback TCP, with a
 * stand-in for keelson-billing serving GetBillingSummary: the caller's
 * context and request id reach billing as GetSummary's caller sent them, the
 * figures come back; and every way billing can fail (an error, a reply that
 * cannot be trusted, no answer within KEELSON_SUMMARY_BILLING_TIMEOUT_MS or
 * within the caller's own deadline, no replica at all) gives "unavailable",
 * counted, never a failed summary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "broker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ks_broker.h"
#include "summary.h"

#define TENANT     "0b6f3a52-2f7e-4d1c-9a57-4f0d8c1e2a33"
#define TIMEOUT_MS 1000

typedef enum { MODE_OK, MODE_FAIL, MODE_BAD_CURRENCY, MODE_HANG } mode;

/* The stand-in billing: what it saw of the last call, and how to answer the next. */
typedef struct fake_billing {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        mode mode;
        bool release; /* MODE_HANG: answer now */
        int calls;
        char tenant[64], role[16], request_id[64];
} fake_billing;

typedef struct fixture {
        ks_broker *broker;
        char base[64], back[KS_URL_MAX];
        fake_billing fake;
        ks_rpc_server *srv;
        sm_service svc;
        uint64_t ok0, unavailable0; /* the counters are process-wide: each test counts from these */
} fixture;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static int fake_summary(ks_call *call)
{
        fake_billing *f = call->service;
        Keelson__Billing__V1__GetBillingSummaryResponse r =
            KEELSON__BILLING__V1__GET_BILLING_SUMMARY_RESPONSE__INIT;
        Keelson__Billing__V1__CurrencyAmount usd = KEELSON__BILLING__V1__CURRENCY_AMOUNT__INIT;
        Keelson__Billing__V1__CurrencyAmount *mrr[1] = {&usd};
        mode m;

        pthread_mutex_lock(&f->mu);
        f->calls++;
        snprintf(f->tenant, sizeof(f->tenant), "%s", call->caller->tenant_id);
        snprintf(f->role, sizeof(f->role), "%s", call->caller->role);
        snprintf(f->request_id, sizeof(f->request_id), "%s", call->request_id);
        m = f->mode;
        while (m == MODE_HANG && !f->release) {
                pthread_cond_wait(&f->cv, &f->mu);
        }
        pthread_mutex_unlock(&f->mu);
        if (m == MODE_FAIL) {
                return ks_call_fail(call, KS_INTERNAL, "billing failed");
        }
        usd.currency = m == MODE_BAD_CURRENCY ? "usd" : "USD";
        usd.amount = 1000;
        r.subscriptions_active = 2;
        r.subscriptions_past_due = 1;
        r.mrr = mrr;
        r.n_mrr = 1;
        r.invoices_open = 1;
        return ks_call_reply(call, &r.base);
}

static const ks_method methods[] = {
    {.name = "keelson.billing.v1.BillingService/GetBillingSummary",
     .input = &keelson__billing__v1__get_billing_summary_request__descriptor,
     .output = &keelson__billing__v1__get_billing_summary_response__descriptor,
     .handler = fake_summary,
     .flags = KS_M_INTERNAL | KS_M_IDEMPOTENT,
     .bearer = KS_BEARER_ANY},
};

static void start_fake(fixture *f)
{
        const char *urls[] = {f->back};
        ks_rpc_server_options o = {.service_name = "billing",
                                   .dial_urls = urls,
                                   .n_dial_urls = 1,
                                   .methods = methods,
                                   .n_methods = 1,
                                   .workers = 4,
                                   .queue_max = 4,
                                   .max_inflight = 16,
                                   .service = &f->fake};

        assert_int_equal(ks_rpc_server_start(&f->srv, &o), KS_OK);
        for (int t = 0; t < 300; t++) {
                if (ks_rpc_server_connected(f->srv) > 0 &&
                    ks_rpc_client_connected(f->svc.billing) > 0) {
                        sleep_ms(50); /* the broker's side of each pipe too */
                        return;
                }
                sleep_ms(10);
        }
        fail_msg("billing stand-in never connected");
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));
        const char *bases[1];

        assert_non_null(f);
        pthread_mutex_init(&f->fake.mu, NULL);
        pthread_cond_init(&f->fake.cv, NULL);
        assert_int_equal(test_broker_start(&f->broker, f->base, sizeof(f->base)), 0);
        assert_int_equal(
            ks_broker_url(f->back, sizeof(f->back), f->base, KS_SVC_BILLING, KS_SIDE_BACK), 0);
        f->svc.billing_timeout_ms = TIMEOUT_MS;
        f->svc.m.billing_ok = ks_counter_get(ks_metrics_default(), "test_billing_calls_total",
                                             "calls", "result=\"ok\"");
        f->svc.m.billing_unavailable = ks_counter_get(
            ks_metrics_default(), "test_billing_calls_total", "calls", "result=\"unavailable\"");
        f->ok0 = ks_counter_value(f->svc.m.billing_ok);
        f->unavailable0 = ks_counter_value(f->svc.m.billing_unavailable);
        bases[0] = f->base;
        assert_int_equal(sm_billing_start(&f->svc, bases, 1, 4), KS_OK);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        pthread_mutex_lock(&f->fake.mu);
        f->fake.release = true;
        pthread_cond_broadcast(&f->fake.cv);
        pthread_mutex_unlock(&f->fake.mu);
        /* Replica, broker, then client (see tests/unit/test_rpc.c: nng 1.5 closing). */
        ks_rpc_server_stop(f->srv);
        ks_broker_stop(f->broker);
        sm_billing_stop(&f->svc);
        free(f);
        return 0;
}

static uint64_t ok_calls(const fixture *f)
{
        return ks_counter_value(f->svc.m.billing_ok) - f->ok0;
}

static uint64_t unavailable_calls(const fixture *f)
{
        return ks_counter_value(f->svc.m.billing_unavailable) - f->unavailable0;
}

static void set_mode(fixture *f, mode m)
{
        pthread_mutex_lock(&f->fake.mu);
        f->fake.mode = m;
        pthread_mutex_unlock(&f->fake.mu);
}

/* GetSummary's call as the RPC server hands it to the handler. */
static void ask(fixture *f, int64_t deadline_unix_ms, sm_billing *out)
{
        ks_caller caller = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        ks_call call;

        memset(&call, 0, sizeof(call));
        caller.authenticated = true;
        caller.tenant_id = TENANT;
        caller.role = "viewer";
        call.caller = &caller;
        call.request_id = "req-summary-1";
        call.deadline_unix_ms = deadline_unix_ms;
        call.idempotency_key = "";
        sm_billing_ask(&f->svc, &call, out);
}

/* The caller's tenant and request id reach billing; the role is the tenant's admin, whoever asks.
 */
static void test_the_callers_context_reaches_billing(void **state)
{
        fixture *f = *state;
        sm_billing b;

        start_fake(f);
        ask(f, 0, &b);
        assert_true(b.available);
        assert_int_equal(b.active, 2);
        assert_int_equal(b.past_due, 1);
        assert_int_equal(b.invoices_open, 1);
        assert_int_equal(b.mrr.n, 1);
        assert_string_equal(b.mrr.v[0].currency, "USD");
        assert_int_equal(b.mrr.v[0].amount, 1000);
        assert_string_equal(f->fake.tenant, TENANT);
        /* The figures are the tenant's, cached for every role: asked as its admin. */
        assert_string_equal(f->fake.role, "admin");
        assert_string_equal(f->fake.request_id, "req-summary-1");
        assert_int_equal(ok_calls(f), 1);
        assert_int_equal(unavailable_calls(f), 0);
}

static void test_a_failure_is_unavailable(void **state)
{
        fixture *f = *state;
        sm_billing b;

        start_fake(f);
        set_mode(f, MODE_FAIL);
        ask(f, 0, &b);
        assert_false(b.available);
        set_mode(f, MODE_BAD_CURRENCY); /* answered, but not what billing answers */
        ask(f, 0, &b);
        assert_false(b.available);
        assert_int_equal(b.mrr.n, 0);
        assert_int_equal(unavailable_calls(f), 2);
        assert_int_equal(f->fake.calls, 2);
}

static void test_a_hung_billing_costs_the_timeout_at_most(void **state)
{
        fixture *f = *state;
        sm_billing b;
        int64_t t0, caller_ms = 100;

        start_fake(f);
        set_mode(f, MODE_HANG);
        t0 = ks_mono_ms();
        ask(f, 0, &b);
        assert_false(b.available);
        assert_true(ks_mono_ms() - t0 >= TIMEOUT_MS - 5);
        /* The caller's own deadline, when sooner, bounds it instead. */
        t0 = ks_mono_ms();
        ask(f, ks_now_ms() + caller_ms, &b);
        assert_false(b.available);
        assert_true(ks_mono_ms() - t0 < TIMEOUT_MS - 100);
        /* Already past: not even sent. */
        ask(f, ks_now_ms() - 1, &b);
        assert_false(b.available);
        assert_int_equal(unavailable_calls(f), 3);
}

static void test_no_replica_is_unavailable(void **state)
{
        fixture *f = *state;
        sm_billing b;

        /* The broker runs, no billing replica behind it: the call waits out its deadline. */
        for (int t = 0; t < 300 && ks_rpc_client_connected(f->svc.billing) == 0; t++) {
                sleep_ms(10);
        }
        ask(f, 0, &b);
        assert_false(b.available);
        assert_int_equal(unavailable_calls(f), 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_the_callers_context_reaches_billing, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_a_failure_is_unavailable, setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_hung_billing_costs_the_timeout_at_most, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_no_replica_is_unavailable, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
