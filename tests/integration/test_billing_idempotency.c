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

/* A keyed CreateSubscription's first charge: its id at the (mock) provider. */
static void charge_of(const bit_tenant *t, const char *key, const char *body, char ref[64],
                      char sub[BIT_ID_MAX])
{
        it_http_response r;

        keyed(t, key, "CreateSubscription", body, &r);
        assert_int_equal(r.status, 200);
        assert_false(replayed(&r));
        json_t *j = ait_json(&r);
        it_http_response_free(&r);
        json_t *pay = json_array_get(bit_at(j, "latestInvoice.payments"), 0);
        assert_non_null(pay);
        assert_string_equal(bit_str(pay, "status"), "succeeded");
        snprintf(ref, 64, "%s", bit_str(pay, "reference"));
        snprintf(sub, BIT_ID_MAX, "%s", bit_str(j, "subscription.id"));
        json_decref(j);
}

/*
 * A creation sent again under its Idempotency-Key after an attempt whose
 * record did not commit (made here by deleting the record: everything else
 * of the first attempt stays) makes new ids for everything, but its charge
 * carries the same key to the provider, derived from the tenant and the
 * Idempotency-Key: a real provider would answer with the first charge
 * instead of charging again. Another key, or the same key in another
 * tenant, is another charge.
 */
static void test_provider_key_follows_the_idempotency_key(void **state)
{
        (void)state;
        char cust[BIT_ID_MAX], cust2[BIT_ID_MAX], body[256], body2[256], text[128], key[160],
            want[64], first[64], again[64], other[64], elsewhere[64];
        char sub1[BIT_ID_MAX], sub2[BIT_ID_MAX], sub3[BIT_ID_MAX], sub4[BIT_ID_MAX];
        char hex[33];
        bit_tenant t, u;

        bit_tenant_new("bl-idem-pay", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        snprintf(body, sizeof(body), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        charge_of(&t, "signup-42", body, first, sub1);

        snprintf(text, sizeof(text), "%s/signup-42", t.owner.tenant_id);
        bit_digest_hex(text, hex);
        snprintf(key, sizeof(key), "idem-%s/subscription_create:auto-1", hex);
        bit_mock_charge_id(key, want);
        assert_string_equal(first, want);

        const char *p[1] = {t.owner.tenant_id};
        ait_exec("DELETE FROM billing.idempotency_keys WHERE tenant_id = $1::uuid"
                 " AND key = 'signup-42'",
                 1, p);
        charge_of(&t, "signup-42", body, again, sub2);
        assert_string_not_equal(sub2, sub1); /* made again: new ids */
        assert_string_equal(again, first);   /* the same charge at the provider */

        charge_of(&t, "signup-43", body, other, sub3);
        assert_string_not_equal(other, first);
        bit_tenant_new("bl-idem-pay2", &u);
        bit_plan(&u, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&u, "USD", 0, "pm_card_visa", "", cust2);
        snprintf(body2, sizeof(body2), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust2);
        charge_of(&u, "signup-42", body2, elsewhere, sub4);
        assert_string_not_equal(elsewhere, first);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_replay_and_mismatch),
            cmocka_unit_test(test_refusals),
            cmocka_unit_test(test_concurrent_calls_have_one_effect),
            cmocka_unit_test(test_provider_key_follows_the_idempotency_key),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
