/*
 * Invoice numbers under concurrency: a tenant's numbers stay gapless and
 * distinct while many clients finalize at once, by both ways an invoice is
 * numbered (services/billing/invoicing.c, bl_tx_seal): a subscription's
 * first invoice, written once by the insert that takes the counter, and a
 * one-off draft made in an earlier call and finalized later, numbered by an
 * UPDATE. Calls refused before any number is taken (a plan in another
 * currency) run among them and leave no hole. Every reply's number is the
 * one stored, and so is the number its invoice_finalized event carries.
 *
 * The clients outnumber what a replica runs of one tenant's writes at once
 * (KEELSON_BILLING_TENANT_WRITERS, 1 here): the others wait their turn in
 * the replica's queue (services/core/ks_rpc_server.c, "Tenants' turns"),
 * which its metric counts, and none of them fails for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "billing_it.h"

#define THREADS 6
#define ROUNDS  8
#define CALLS   (THREADS * ROUNDS)

typedef struct worker {
        const bit_tenant *t;
        const char *cust;
        int index;
        char ids[ROUNDS][BIT_ID_MAX];     /* the invoices this worker had finalized */
        char numbers[ROUNDS][BIT_ID_MAX]; /* their numbers, as the replies said */
        int done, refused, failed;
} worker;

/* The string at path of a JSON reply body into out; false when absent. */
static bool field(const char *body, const char *path, char *out, size_t len)
{
        json_t *j = json_loads(body, 0, NULL);
        const char *v = j != NULL ? bit_str(j, path) : "";

        snprintf(out, len, "%s", v);
        json_decref(j);
        return out[0] != '\0';
}

static bool call(const worker *w, const char *method, const char *json, int status,
                 it_http_response *out)
{
        if (bit_post(ait_stack.gateway_url, w->t->owner.token, NULL, method, json, out) != 0) {
                return false;
        }
        if (out->status != status) {
                it_http_response_free(out);
                return false;
        }
        return true;
}

/* One finalization: a subscription's creation, or a one-off draft made, then finalized. */
static bool finalize_one(worker *w, int round)
{
        it_http_response r;
        char json[512], draft[BIT_ID_MAX];
        const char *path = "latestInvoice";

        if ((w->index + round) % 2 == 0) {
                snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}",
                         w->cust);
                if (!call(w, "CreateSubscription", json, 200, &r)) {
                        return false;
                }
        } else {
                snprintf(json, sizeof(json),
                         "{\"customerId\":\"%s\",\"lines\":[{\"description\":\"Work\","
                         "\"unitAmount\":\"700\"}]}",
                         w->cust);
                if (!call(w, "CreateInvoice", json, 200, &r)) {
                        return false;
                }
                bool ok = field(r.body, "invoice.id", draft, sizeof(draft));
                it_http_response_free(&r);
                snprintf(json, sizeof(json), "{\"id\":\"%s\"}", draft);
                if (!ok || !call(w, "FinalizeInvoice", json, 200, &r)) {
                        return false;
                }
                path = "invoice";
        }
        char id_path[64], number_path[64];
        snprintf(id_path, sizeof(id_path), "%s.id", path);
        snprintf(number_path, sizeof(number_path), "%s.number", path);
        bool ok = field(r.body, id_path, w->ids[w->done], BIT_ID_MAX) &&
                  field(r.body, number_path, w->numbers[w->done], BIT_ID_MAX);
        it_http_response_free(&r);
        w->done += ok;
        return ok;
}

/* A creation refused before it numbers anything: the plan is in another currency. */
static bool refused_one(worker *w)
{
        it_http_response r;
        char json[256];

        snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"euro\"}", w->cust);
        if (!call(w, "CreateSubscription", json, 400, &r)) {
                return false;
        }
        it_http_response_free(&r);
        w->refused++;
        return true;
}

static void *work(void *arg)
{
        worker *w = arg;

        for (int round = 0; round < ROUNDS; round++) {
                if (!finalize_one(w, round) || (round % 3 == 1 && !refused_one(w))) {
                        w->failed++;
                }
        }
        return NULL;
}

/* The number stored for invoice id, and its invoice_finalized event's, as INV-n's n. */
static void expect_stored(const char *tenant_id, const char *id, const char *number)
{
        const char *p[3] = {tenant_id, id, number};

        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id ="
                                      " $1::uuid AND id = $2::uuid AND number = $3",
                                      3, p),
                         1);
        /* InvoiceFinalized: field 3 (number) is a string; the payload holds its bytes. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.outbox WHERE tenant_id ="
                                      " $1::uuid AND topic = 'billing.invoice_finalized'"
                                      " AND position(convert_to($2, 'UTF8') IN payload) > 0"
                                      " AND position(convert_to($3, 'UTF8') IN payload) > 0",
                                      3, p),
                         1);
}

/* keelson_rpc_tenant_turn_waits_total of billing, over every billing replica. */
static double turn_waits(void)
{
        int ports[IT_REPLICAS_MAX];
        int n = it_stack_ports("KEELSON_IT_BILLING_HEALTH_PORTS", ports, IT_REPLICAS_MAX);
        double sum = 0;

        assert_true(n >= 1);
        for (int i = 0; i < n; i++) {
                sum += it_metric_sum_at(ports[i], "keelson_rpc_tenant_turn_waits_total",
                                        "service=\"billing\"");
        }
        return sum;
}

static void test_concurrent_finalizations_are_gapless(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX];
        worker w[THREADS];
        pthread_t th[THREADS];
        bool seen[CALLS + 1] = {false};

        bit_tenant_new("bl-numbers", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_plan(&t, "euro", "EUR", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", "", cust);
        double waits = turn_waits();
        for (int i = 0; i < THREADS; i++) {
                w[i] = (worker){.t = &t, .cust = cust, .index = i};
                assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
        }
        int total = 0;
        for (int i = 0; i < THREADS; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(w[i].failed, 0);
                assert_int_equal(w[i].done, ROUNDS);
                for (int k = 0; k < w[i].done; k++) {
                        const char *num = w[i].numbers[k];
                        int n = atoi(num + 4);
                        assert_true(strncmp(num, "INV-", 4) == 0 && strlen(num) == 10);
                        assert_true(n >= 1 && n <= CALLS && !seen[n]);
                        seen[n] = true;
                        expect_stored(t.owner.tenant_id, w[i].ids[k], num);
                        total++;
                }
        }
        assert_int_equal(total, CALLS);
        /* Six clients, two replicas, one write of the tenant at a time in each: calls queued. */
        assert_true(turn_waits() > waits);
        for (int n = 1; n <= CALLS; n++) {
                assert_true(seen[n]);
        }
        const char *p[1] = {t.owner.tenant_id};
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id ="
                                      " $1::uuid AND number IS NOT NULL",
                                      1, p),
                         CALLS);
        assert_int_equal(ait_sql_long("SELECT last FROM billing.counters WHERE tenant_id ="
                                      " $1::uuid AND kind = 1",
                                      1, p),
                         CALLS);
        bit_wait_posted(t.owner.tenant_id, 30000);
        json_decref(bit_reconcile_clean(&t));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_concurrent_finalizations_are_gapless),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
