/*
 * Idempotency-Key on billing's writes, with Stripe's semantics, through the
 * gateway: the same key and request replay the stored reply (marked
 * Idempotent-Replayed: true) and change nothing; another request under the
 * key is refused; a refusal after the request ran is replayed too, one
 * before it ran (validation) stores nothing; a key in flight makes the
 * others retry, so 8 concurrent calls with one key have one effect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"

#include <pthread.h>

/* One call under an Idempotency-Key; the caller frees out. */
static void keyed(const bit_tenant *t, const char *key, const char *method, const char *json,
                  it_http_response *out)
{
        char header[300];
        const char *headers[2] = {header, NULL};

        snprintf(header, sizeof(header), "Idempotency-Key: %s", key);
        bit_call(t->owner.token, headers, method, out, "%s", json);
}

static bool replayed(const it_http_response *r)
{
        char v[16];

        return it_http_header(r, "Idempotent-Replayed", v, sizeof(v)) == 0 &&
               strcmp(v, "true") == 0;
}

static long customers(const bit_tenant *t)
{
        const char *p[1] = {t->owner.tenant_id};

        return ait_sql_long("SELECT count(*) FROM billing.customers WHERE tenant_id = $1::uuid", 1,
                            p);
}

static void test_replay_and_mismatch(void **state)
{
        (void)state;
        bit_tenant t, other;
        it_http_response a, b, c;
        const char *body = "{\"email\":\"idem@example.com\",\"currency\":\"USD\"}";

        bit_tenant_new("bl-idem", &t);
        keyed(&t, "create-idem-1", "CreateCustomer", body, &a);
        keyed(&t, "create-idem-1", "CreateCustomer", body, &b);
        assert_int_equal(a.status, 200);
        assert_int_equal(b.status, 200);
        assert_false(replayed(&a));
        assert_true(replayed(&b));
        assert_string_equal(a.body, b.body);
        assert_int_equal(customers(&t), 1);
        /* Another request under the same key: refused, nothing made. */
        keyed(&t, "create-idem-1", "CreateCustomer",
              "{\"email\":\"other@example.com\",\"currency\":\"USD\"}", &c);
        assert_int_equal(c.status, 400);
        assert_non_null(strstr(c.body, "invalid_argument"));
        assert_int_equal(customers(&t), 1);
        it_http_response_free(&c);
        /* The same request under another method is another request too. */
        keyed(&t, "create-idem-1", "CreatePlan",
              "{\"code\":\"p\",\"currency\":\"USD\",\"intervalUnit\":\"INTERVAL_UNIT_MONTH\","
              "\"price\":{\"model\":\"PRICE_MODEL_FLAT\"}}",
              &c);
        assert_int_equal(c.status, 400);
        it_http_response_free(&c);
        /* Keys belong to a tenant: another tenant's same key is a new request. */
        bit_tenant_new("bl-idem-2", &other);
        keyed(&other, "create-idem-1", "CreateCustomer", body, &c);
        assert_int_equal(c.status, 200);
        assert_false(replayed(&c));
        it_http_response_free(&a);
        it_http_response_free(&b);
        it_http_response_free(&c);
}

static void test_refusals(void **state)
{
        (void)state;
        bit_tenant t;
        it_http_response a, b;
        char missing[] = "00000000-0000-4000-8000-000000000001", json[256];

        bit_tenant_new("bl-idem-r", &t);
        /* Refused after it ran (not_found): replayed as such. */
        snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", missing);
        keyed(&t, "sub-1", "CreateSubscription", json, &a);
        keyed(&t, "sub-1", "CreateSubscription", json, &b);
        assert_int_equal(a.status, 404);
        assert_int_equal(b.status, 404);
        assert_true(replayed(&b));
        assert_string_equal(a.body, b.body);
        it_http_response_free(&a);
        it_http_response_free(&b);
        /* Refused before it ran (validation): nothing stored, the key is free. */
        keyed(&t, "cust-1", "CreateCustomer", "{\"email\":\"bad\",\"currency\":\"USD\"}", &a);
        assert_int_equal(a.status, 400);
        it_http_response_free(&a);
        keyed(&t, "cust-1", "CreateCustomer", "{\"email\":\"ok@example.com\",\"currency\":\"USD\"}",
              &a);
        assert_int_equal(a.status, 200);
        assert_false(replayed(&a));
        it_http_response_free(&a);
        /* Keys the gateway refuses: empty, too long, control characters. */
        char longest[300];
        memset(longest, 'k', 256);
        longest[256] = '\0';
        const char *bad[] = {longest, "tab\there"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                keyed(&t, bad[i], "CreateCustomer",
                      "{\"email\":\"k@example.com\",\"currency\":\"USD\"}", &a);
                assert_int_equal(a.status, 400);
                it_http_response_free(&a);
        }
        assert_int_equal(customers(&t), 1);
}

typedef struct racer {
        const bit_tenant *t;
        const char *json;
        it_http_response r;
        int aborted;
} racer;

/* Retries while the key is in flight (aborted, 409), as a client should. */
static void *race(void *arg)
{
        racer *x = arg;
        char header[64];
        const char *headers[2] = {header, NULL};
        it_request req = {.token = x->t->owner.token, .headers = headers};

        snprintf(header, sizeof(header), "Idempotency-Key: race-1");
        for (int i = 0; i < 400; i++) {
                if (it_connect(ait_stack.gateway_url, BIT_PATH "CreateSubscription", x->json,
                               strlen(x->json), &req, &x->r) != 0) {
                        return NULL;
                }
                if (x->r.status != 409) {
                        return NULL;
                }
                x->aborted++;
                it_http_response_free(&x->r);
                it_sleep_ms(5);
        }
        return NULL;
}

static void test_concurrent_calls_have_one_effect(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], json[256];
        racer x[8];
        pthread_t th[8];

        bit_tenant_new("bl-idem-c", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        for (int i = 0; i < 8; i++) {
                x[i] = (racer){.t = &t, .json = json};
                assert_int_equal(pthread_create(&th[i], NULL, race, &x[i]), 0);
        }
        int fresh = 0;
        for (int i = 0; i < 8; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(x[i].r.status, 200);
                assert_string_equal(x[i].r.body, x[0].r.body);
                fresh += !replayed(&x[i].r);
        }
        assert_int_equal(fresh, 1);
        const char *p[1] = {t.owner.tenant_id};
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.subscriptions"
                                      " WHERE tenant_id = $1::uuid",
                                      1, p),
                         1);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.invoices"
                                      " WHERE tenant_id = $1::uuid",
                                      1, p),
                         1);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.payments"
                                      " WHERE tenant_id = $1::uuid",
                                      1, p),
                         1);
        for (int i = 0; i < 8; i++) {
                it_http_response_free(&x[i].r);
        }
        json_decref(bit_reconcile_clean(&t));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_replay_and_mismatch),
            cmocka_unit_test(test_refusals),
            cmocka_unit_test(test_concurrent_calls_have_one_effect),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
