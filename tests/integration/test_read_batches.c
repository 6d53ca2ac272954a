/*
 * Short reads of several callers in one round trip to PostgreSQL (ks_pg.h,
 * "Batched reads"): a replica's loop sends the reads of the calls one pass
 * of it read together, each with its own tenant setting. Callers of four
 * tenants, sixteen threads at once through the gateways, call WhoAmI,
 * ListMembers (the caller's role and the page in one read),
 * ListCustomers, GetSubscription (the subscription with its plan) and
 * GetCustomer with another tenant's customer: each
 * must see exactly itself and its own tenant's rows, and not_found for the
 * other's, and the replicas must have batched reads meanwhile (else this
 * test would show nothing about batches).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "billing_it.h"

#define TENANTS 4
#define THREADS 16
#define ROUNDS  60

typedef struct tenant {
        bit_tenant t;
        int customers;                /* tenant i has i + 2, emails "b<i>-<k>@..." */
        char customer_id[BIT_ID_MAX]; /* its first */
        char sub_id[BIT_ID_MAX];      /* of that customer, on plan "rb<i>" */
        char plan_id[BIT_ID_MAX];
} tenant;

static tenant g_tenants[TENANTS];

typedef struct worker {
        const tenant *tn;
        const char *gateway_url;
        pthread_barrier_t *start;
        int calls;
        char failure[256]; /* the first thing that was wrong */
} worker;

/* One call through the worker's gateway, with its tenant owner's session. */
static int post(const worker *w, const char *path, const char *json, it_http_response *out)
{
        it_request req = {.token = w->tn->t.owner.token};
        return it_connect(w->gateway_url, path, json, strlen(json), &req, out);
}

static void failed(worker *w, const char *what, const char *detail)
{
        if (w->failure[0] == '\0') {
                snprintf(w->failure, sizeof(w->failure), "%s: %.200s", what, detail);
        }
}

/* WhoAmI: the caller, in its tenant. */
static void whoami(worker *w)
{
        it_http_response r;
        if (post(w, "/keelson.auth.v1.AuthService/WhoAmI", "{}", &r) != 0) {
                failed(w, "WhoAmI", "no reply");
                return;
        }
        json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        const char *user = json_string_value(json_object_get(j, "userId"));
        const char *tenant_id = json_string_value(json_object_get(j, "tenantId"));
        if (j == NULL || user == NULL || tenant_id == NULL) {
                failed(w, "WhoAmI", r.body != NULL ? r.body : "");
        } else if (strcmp(user, w->tn->t.owner.user_id) != 0 ||
                   strcmp(tenant_id, w->tn->t.owner.tenant_id) != 0) {
                failed(w, "WhoAmI answered for another caller", r.body);
        }
        json_decref(j);
        it_http_response_free(&r);
        w->calls++;
}

/* ListMembers: the tenant's one member, its owner. */
static void members(worker *w)
{
        it_http_response r;
        if (post(w, "/keelson.auth.v1.AuthService/ListMembers", "{}", &r) != 0) {
                failed(w, "ListMembers", "no reply");
                return;
        }
        json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        json_t *items = json_object_get(j, "members");
        const char *user = json_string_value(json_object_get(json_array_get(items, 0), "userId"));
        if (!json_is_array(items) || user == NULL) {
                failed(w, "ListMembers", r.body != NULL ? r.body : "");
        } else if (json_array_size(items) != 1 || strcmp(user, w->tn->t.owner.user_id) != 0) {
                failed(w, "ListMembers listed another tenant's member", r.body);
        }
        json_decref(j);
        it_http_response_free(&r);
        w->calls++;
}

/* ListCustomers: every customer of its tenant, none of another's. */
static void list(worker *w, int index)
{
        it_http_response r;
        char prefix[32];
        if (post(w, BIT_PATH "ListCustomers", "{\"pageSize\":50}", &r) != 0) {
                failed(w, "ListCustomers", "no reply");
                return;
        }
        json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        json_t *items = json_object_get(j, "customers");
        snprintf(prefix, sizeof(prefix), "b%d-", index);
        if (!json_is_array(items)) {
                failed(w, "ListCustomers", r.body != NULL ? r.body : "");
        } else if ((int)json_array_size(items) != w->tn->customers) {
                failed(w, "ListCustomers: another count of customers", r.body);
        } else {
                for (size_t k = 0; k < json_array_size(items); k++) {
                        const char *email =
                            json_string_value(json_object_get(json_array_get(items, k), "email"));
                        if (email == NULL || strncmp(email, prefix, strlen(prefix)) != 0) {
                                failed(w, "ListCustomers listed another tenant's customer", r.body);
                                break;
                        }
                }
        }
        json_decref(j);
        it_http_response_free(&r);
        w->calls++;
}

/* GetSubscription: its tenant's subscription, with that subscription's plan. */
static void get_subscription(worker *w)
{
        it_http_response r;
        char body[128];
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}", w->tn->sub_id);
        if (post(w, BIT_PATH "GetSubscription", body, &r) != 0) {
                failed(w, "GetSubscription", "no reply");
                return;
        }
        json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        json_t *sub = json_object_get(j, "subscription");
        const char *id = json_string_value(json_object_get(sub, "id"));
        const char *customer = json_string_value(json_object_get(sub, "customerId"));
        const char *plan = json_string_value(json_object_get(sub, "planId"));
        if (id == NULL || customer == NULL || plan == NULL) {
                failed(w, "GetSubscription", r.body != NULL ? r.body : "");
        } else if (strcmp(id, w->tn->sub_id) != 0 || strcmp(customer, w->tn->customer_id) != 0 ||
                   strcmp(plan, w->tn->plan_id) != 0) {
                failed(w, "GetSubscription answered with another subscription", r.body);
        }
        json_decref(j);
        it_http_response_free(&r);
        w->calls++;
}

/* GetCustomer of another tenant's customer: not_found (404), as for an id that never was. */
static void get_other_customer(worker *w, int index)
{
        it_http_response r;
        char body[128];
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}",
                 g_tenants[(index + 1) % TENANTS].customer_id);
        if (post(w, BIT_PATH "GetCustomer", body, &r) != 0) {
                failed(w, "GetCustomer", "no reply");
                return;
        }
        if (r.status != 404 || r.body == NULL || strstr(r.body, "\"not_found\"") == NULL) {
                failed(w, "GetCustomer of another tenant's customer", r.body != NULL ? r.body : "");
        }
        it_http_response_free(&r);
        w->calls++;
}

static void *run(void *arg)
{
        worker *w = arg;
        int index = (int)(w->tn - g_tenants);
        pthread_barrier_wait(w->start);
        for (int i = 0; i < ROUNDS && w->failure[0] == '\0'; i++) {
                whoami(w);
                members(w);
                list(w, index);
                get_subscription(w);
                get_other_customer(w, index);
        }
        return NULL;
}

/* Reads the replicas of auth and billing have batched so far. */
static double batched_reads(void)
{
        const char *keys[] = {"KEELSON_IT_AUTH_HEALTH_PORTS", "KEELSON_IT_BILLING_HEALTH_PORTS"};
        double sum = 0;
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
                int ports[IT_REPLICAS_MAX];
                int n = it_stack_ports(keys[k], ports, IT_REPLICAS_MAX);
                assert_true(n > 0);
                for (int i = 0; i < n; i++) {
                        sum += it_metric_sum_at(ports[i], "keelson_rpc_batched_reads_total", NULL);
                }
        }
        return sum;
}

static int setup(void **state)
{
        if (bit_setup(state) != 0) {
                return -1;
        }
        for (int i = 0; i < TENANTS; i++) {
                char prefix[32];
                snprintf(prefix, sizeof(prefix), "batch%d", i);
                bit_tenant_new(prefix, &g_tenants[i].t);
                g_tenants[i].customers = i + 2;
                tenant *tn = &g_tenants[i];
                for (int k = 0; k < tn->customers; k++) {
                        json_t *c = bit_ok(tn->t.owner.token, "CreateCustomer",
                                           "{\"email\":\"b%d-%d@example.test\",\"name\":\"C %d\","
                                           "\"currency\":\"USD\"}",
                                           i, k, k);
                        if (k == 0) {
                                snprintf(tn->customer_id, BIT_ID_MAX, "%s",
                                         bit_str(c, "customer.id"));
                        }
                        json_decref(c);
                }
                char code[16];
                snprintf(code, sizeof(code), "rb%d", i);
                bit_plan(&tn->t, code, "USD", "FLAT", 1000 + i, "MONTH", 1, 0);
                json_t *sub =
                    bit_ok(tn->t.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"%s\"}", tn->customer_id, code);
                snprintf(tn->sub_id, BIT_ID_MAX, "%s", bit_str(sub, "subscription.id"));
                snprintf(tn->plan_id, BIT_ID_MAX, "%s", bit_str(sub, "subscription.planId"));
                json_decref(sub);
        }
        return 0;
}

static void test_each_caller_reads_its_own(void **state)
{
        (void)state;
        worker w[THREADS];
        pthread_t threads[THREADS];
        pthread_barrier_t start;
        double before = batched_reads();

        assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
        for (int i = 0; i < THREADS; i++) {
                w[i] = (worker){.tn = &g_tenants[i % TENANTS],
                                .gateway_url = ait_stack.gateway_urls[i % ait_stack.n_gateways],
                                .start = &start};
                assert_int_equal(pthread_create(&threads[i], NULL, run, &w[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
                assert_int_equal(pthread_join(threads[i], NULL), 0);
        }
        pthread_barrier_destroy(&start);
        for (int i = 0; i < THREADS; i++) {
                if (w[i].failure[0] != '\0') {
                        fail_msg("thread %d (tenant %d): %s", i, i % TENANTS, w[i].failure);
                }
                assert_int_equal(w[i].calls, 5 * ROUNDS);
        }
        double batched = batched_reads() - before;
        print_message("%d calls, %.0f of their reads batched\n", THREADS * 5 * ROUNDS, batched);
        assert_true(batched > 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_each_caller_reads_its_own),
        };
        return cmocka_run_group_tests_name("read_batches", tests, setup, NULL);
}
