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
        bool creations_only; /* every finalization a subscription's creation */
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

        if (w->creations_only || (w->index + round) % 2 == 0) {
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

/* A counter of billing's RPC servers, over every billing replica. */
static double billing_metric(const char *name)
{
        int ports[IT_REPLICAS_MAX];
        int n = it_stack_ports("KEELSON_IT_BILLING_HEALTH_PORTS", ports, IT_REPLICAS_MAX);
        double sum = 0;

        assert_true(n >= 1);
        for (int i = 0; i < n; i++) {
                sum += it_metric_sum_at(ports[i], name, "service=\"billing\"");
        }
        return sum;
}

/* keelson_billing_grouped_calls_total of one outcome, over every billing replica. */
static double grouped_calls(const char *outcome)
{
        int ports[IT_REPLICAS_MAX];
        int n = it_stack_ports("KEELSON_IT_BILLING_HEALTH_PORTS", ports, IT_REPLICAS_MAX);
        char labels[64];
        double sum = 0;

        snprintf(labels, sizeof(labels), "outcome=\"%s\"", outcome);
        for (int i = 0; i < n; i++) {
                sum += it_metric_sum_at(ports[i], "keelson_billing_grouped_calls_total", labels);
        }
        return sum;
}

static double turn_waits(void)
{
        return billing_metric("keelson_rpc_tenant_turn_waits_total");
}

/*
 * The workers' numbers: each once, from before + 1 to before + total, each
 * the one stored and announced (before: invoices numbered earlier).
 */
static void expect_gapless(const char *tenant_id, worker *w, int n_workers, int total, int before)
{
        bool *seen = calloc((size_t)total + 1, sizeof(*seen));
        int got = 0;

        assert_non_null(seen);
        for (int i = 0; i < n_workers; i++) {
                for (int k = 0; k < w[i].done; k++) {
                        const char *num = w[i].numbers[k];
                        int n = atoi(num + 4) - before;
                        assert_true(strncmp(num, "INV-", 4) == 0 && strlen(num) == 10);
                        assert_true(n >= 1 && n <= total && !seen[n]);
                        seen[n] = true;
                        expect_stored(tenant_id, w[i].ids[k], num);
                        got++;
                }
        }
        assert_int_equal(got, total);
        free(seen);
        const char *p[1] = {tenant_id};
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id ="
                                      " $1::uuid AND number IS NOT NULL",
                                      1, p),
                         before + total);
        assert_int_equal(ait_sql_long("SELECT last FROM billing.counters WHERE tenant_id ="
                                      " $1::uuid AND kind = 1",
                                      1, p),
                         before + total);
}

static void test_concurrent_finalizations_are_gapless(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX];
        worker w[THREADS];
        pthread_t th[THREADS];

        bit_tenant_new("bl-numbers", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_plan(&t, "euro", "EUR", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 1000, "pm_card_visa", "", cust);
        double waits = turn_waits();
        for (int i = 0; i < THREADS; i++) {
                w[i] = (worker){.t = &t, .cust = cust, .index = i};
                assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(w[i].failed, 0);
                assert_int_equal(w[i].done, ROUNDS);
        }
        /* Six clients, two replicas, one write of the tenant at a time in each: calls queued. */
        assert_true(turn_waits() > waits);
        expect_gapless(t.owner.tenant_id, w, THREADS, CALLS, 0);
        bit_wait_posted(t.owner.tenant_id, 30000);
        json_decref(bit_reconcile_clean(&t));
}

/*
 * A burst of creations, a customer per client, some refused in the
 * transaction (the plan in another currency): a replica runs a tenant's
 * creations queued together in one transaction (KS_M_GROUPED,
 * services/core/ks_rpc_server.c "Groups"), which keelson_rpc_grouped_calls_total
 * counts. A group with a refused member is rolled back and each member runs
 * alone, so every client still gets its own answer, and the numbers stay
 * gapless, each the one its reply, its row and its event carry; the ledger
 * holds each invoice's chain once.
 */
#define BURST_THREADS   10
#define BURST_CUSTOMERS 6 /* four of them shared by two clients */
#define BURST_ROUNDS    ROUNDS

/* A finalized one-off invoice with a negative total: the customer holds that much credit. */
static void give_credit(const bit_tenant *t, const char *cust, int amount)
{
        worker w = {.t = t};
        it_http_response r;
        char json[512], id[BIT_ID_MAX];

        snprintf(json, sizeof(json),
                 "{\"customerId\":\"%s\",\"lines\":[{\"description\":\"Goodwill\","
                 "\"unitAmount\":\"-%d\"}]}",
                 cust, amount);
        assert_true(call(&w, "CreateInvoice", json, 200, &r));
        assert_true(field(r.body, "invoice.id", id, sizeof(id)));
        it_http_response_free(&r);
        snprintf(json, sizeof(json), "{\"id\":\"%s\"}", id);
        assert_true(call(&w, "FinalizeInvoice", json, 200, &r));
        it_http_response_free(&r);
}

static void test_a_burst_of_creations_runs_in_groups(void **state)
{
        (void)state;
        bit_tenant t;
        static char cust[BURST_CUSTOMERS][BIT_ID_MAX];
        static worker w[BURST_THREADS];
        pthread_t th[BURST_THREADS];

        bit_tenant_new("bl-groups", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_plan(&t, "euro", "EUR", "FLAT", 1000, "MONTH", 1, 0);
        /* Each customer's credit pays for two creations and part of a third: a customer's
         * creations in one group must each see what the one before spent. */
        for (int i = 0; i < BURST_CUSTOMERS; i++) {
                bit_customer(&t, "USD", 1000, "pm_card_visa", "", cust[i]);
                give_credit(&t, cust[i], 2500);
        }
        double grouped = billing_metric("keelson_rpc_grouped_calls_total");
        double committed = grouped_calls("committed"), alone = grouped_calls("run_alone");
        for (int i = 0; i < BURST_THREADS; i++) {
                w[i] = (worker){
                    .t = &t, .cust = cust[i % BURST_CUSTOMERS], .index = i, .creations_only = true};
                assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
        }
        int refused = 0;
        for (int i = 0; i < BURST_THREADS; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(w[i].failed, 0);
                assert_int_equal(w[i].done, BURST_ROUNDS);
                refused += w[i].refused;
        }
        assert_true(refused > 0);
        /* Groups were made; some committed whole, some (with a refused member) ran call by call. */
        assert_true(billing_metric("keelson_rpc_grouped_calls_total") > grouped);
        assert_true(grouped_calls("committed") > committed);
        assert_true(grouped_calls("run_alone") > alone);
        /* The creations' numbers after the credits' (1..BURST_CUSTOMERS): gapless all the same. */
        expect_gapless(t.owner.tenant_id, w, BURST_THREADS, BURST_THREADS * BURST_ROUNDS,
                       BURST_CUSTOMERS);
        const char *p[1] = {t.owner.tenant_id};
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.subscriptions WHERE"
                                      " tenant_id = $1::uuid",
                                      1, p),
                         BURST_THREADS * BURST_ROUNDS);
        /* A group writes the rows of each statement together (bl_defer_insert): every
         * subscription has its history from seq 1, every invoice its lines 1..n_lines. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.subscriptions s WHERE"
                                      " s.tenant_id = $1::uuid AND (SELECT count(*) FROM"
                                      " billing.subscription_history h WHERE h.tenant_id ="
                                      " s.tenant_id AND h.subscription_id = s.id AND h.seq"
                                      " BETWEEN 1 AND s.history_seq) <> s.history_seq",
                                      1, p),
                         0);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.invoices i WHERE"
                                      " i.tenant_id = $1::uuid AND (n_lines < 1 OR (SELECT"
                                      " count(*) FROM billing.invoice_lines l WHERE l.tenant_id ="
                                      " i.tenant_id AND l.invoice_id = i.id AND l.line_no BETWEEN"
                                      " 1 AND i.n_lines) <> i.n_lines OR i.total <> (SELECT"
                                      " sum(amount + tax) FROM billing.invoice_lines l WHERE"
                                      " l.tenant_id = i.tenant_id AND l.invoice_id = i.id))",
                                      1, p),
                         0);
        assert_int_equal(
            ait_sql_long("SELECT count(*) FROM billing.invoices i WHERE"
                         " i.tenant_id = $1::uuid AND i.amount_paid <> COALESCE((SELECT"
                         " sum(amount) FROM billing.payments y WHERE y.tenant_id ="
                         " i.tenant_id AND y.invoice_id = i.id AND y.status = 1), 0)",
                         1, p),
            0);
        assert_int_equal(ait_sql_long("SELECT sum(credit_balance) FROM billing.customers WHERE"
                                      " tenant_id = $1::uuid",
                                      1, p),
                         0); /* every credit spent, once */
        bit_wait_posted(t.owner.tenant_id, 30000);
        json_decref(bit_reconcile_clean(&t));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_concurrent_finalizations_are_gapless),
            cmocka_unit_test(test_a_burst_of_creations_runs_in_groups),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
