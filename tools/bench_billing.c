/*
 * bench_billing: subscription creation and an authenticated list through
 * the gateway, against the same work done by PostgreSQL alone.
 *
 *   bench_billing --stack DIR [--clients 20] [--seconds 30] [--list-clients 50]
 *                 [--list-seconds 15] [--customers-per-client 25] [--pgbench pgbench]
 *                 [--wrk wrk|none] [--create-by threads|wrk]
 *
 * With a stack started by deploy/local/stack.sh (its DIR/env), it signs a
 * tenant up, makes a plan (flat, monthly, 10% tax on its customers) and
 * customers with the mock provider's pm_card_visa, then:
 *
 *   1. CreateSubscription: --clients connections for --seconds, each call a
 *      subscription, its first invoice with tax, finalized (a gapless
 *      number), charged through the mock provider, and its ledger postings
 *      queued (invoice and payment chains); req/s and p50/p95/p99. Each
 *      connection names its own customers in turn. Driven by this tool's
 *      threads, one a connection, each a client that waits for its reply
 *      (libcurl: about 80 µs of the shared cores a creation); with
 *      --create-by wrk, by wrk (two threads, each cycling through its half
 *      of the customers: about 30 µs, but a wrk thread that waits for a
 *      core delays the replies of its ten connections, and its p99 is 3 to
 *      5 ms above the threads'). The tool says which.
 *   2. After the relay drained the postings: GetReconciliation, and the
 *      invoices, ledger chains and discrepancies it reports (must be 0),
 *      with the ledger's own count of transfers for the tenant.
 *   3. ListCustomers (50 per page): --list-clients connections for
 *      --list-seconds; req/s and p99. Driven by wrk when it is installed
 *      (two threads, an event loop each, as a load generator drives a
 *      server), else by this tool's threads, one a connection, which cost
 *      the shared cores about 50 µs a page; the tool says which.
 *   4. Baselines in the same run: pgbench, with the same clients and
 *      seconds, on the rows a subscription creation writes (subscription,
 *      history, invoice, line, counter, payment, two postings, three outbox
 *      events) as a naive transaction of plain INSERTs and UPDATEs, and the
 *      select of a 50-customer page. The ratios are keelson over PostgreSQL
 *      alone doing the same rows without HTTP, auth, idempotency, events or
 *      the ledger. And the same rows for the clients' creations written
 *      ten at a time, a statement per table and one transaction for the
 *      ten: the ceiling of a creation path that grouped its writes.
 *
 * It also prints the CPU each request cost each process group of the stack
 * (gateways, broker, billing replicas, ledger replicas, PostgreSQL and all
 * its backends), read from /proc before and after each phase: a figure that
 * other load on the machine disturbs less than req/s.
 *
 * Recurso (the seed's billing system) reports 578 subscription creations/s
 * at p99 67 ms and 7,814 authenticated list reads/s at p99 27 ms on a
 * 10-core M2 Pro.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_support.h"

#define CLIENTS_MAX   256
#define GROUP_MAX     10 /* creations a grouped baseline transaction writes */
#define LATENCIES_MAX (1u << 21)
#define BODY_MAX      (1u << 20)
#define PATH_AUTH     "/keelson.auth.v1.AuthService/"
#define PATH_BILLING  "/keelson.billing.v1.BillingService/"
#define PASSWORD      "correct horse battery staple"

typedef struct options {
        char gateway[256];
        char pg_dsn[512];
        int clients, seconds, list_clients, list_seconds, per_client;
        const char *pgbench;
        const char *wrk; /* "" or "none": the list phase on the thread client */
        bool create_wrk; /* --create-by wrk: creations driven by wrk too */
} options;

static options g_opt;
static char g_dir[512];
static char g_token[512];
static char g_tenant[64];
static char (*g_customers)[40]; /* clients × per_client ids */

typedef struct reply {
        char *body;
        size_t len;
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
        reply *r = arg;
        size_t add = size * n;

        if (r->len + add + 1 > BODY_MAX) {
                return 0;
        }
        if (r->body == NULL && (r->body = malloc(BODY_MAX)) == NULL) {
                return 0;
        }
        memcpy(r->body + r->len, p, add);
        r->len += add;
        r->body[r->len] = '\0';
        return add;
}

/* One POST on handle c (kept alive between calls); the HTTP status, or -1. */
static long post(CURL *c, const char *path, const char *body, reply *out)
{
        char url[512], auth[600];
        struct curl_slist *h = NULL;
        long status = -1;

        out->len = 0;
        snprintf(url, sizeof(url), "%s%s", g_opt.gateway, path);
        h = curl_slist_append(h, "Content-Type: application/json");
        if (g_token[0] != '\0') {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_token);
                h = curl_slist_append(h, auth);
        }
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        if (curl_easy_perform(c) == CURLE_OK) {
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        }
        curl_slist_free_all(h);
        return status;
}

/* A call that must succeed; its JSON reply (json_decref it), or NULL with a line on stderr. */
static json_t *must(CURL *c, const char *path, const char *body)
{
        reply r = {0};
        long status = post(c, path, body, &r);
        json_t *j = status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;

        if (j == NULL) {
                fprintf(stderr, "bench_billing: %s: HTTP %ld: %.300s\n", path, status,
                        r.body != NULL ? r.body : "");
        }
        free(r.body);
        return j;
}

/* ---- set up ---------------------------------------------------------------------------- */

static int sign_up(CURL *c)
{
        char body[512], email[128];
        json_t *j;

        snprintf(email, sizeof(email), "bench-billing-%ld-%d@example.test", (long)time(NULL),
                 getpid());
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"%s\",\"tenantName\":\"bench billing\"}", email,
                 PASSWORD);
        if ((j = must(c, PATH_AUTH "SignUp", body)) == NULL) {
                return -1;
        }
        snprintf(g_tenant, sizeof(g_tenant), "%s",
                 json_string_value(json_object_get(j, "tenantId")));
        json_decref(j);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"%s\"}", email, PASSWORD);
        if ((j = must(c, PATH_AUTH "Login", body)) == NULL) {
                return -1;
        }
        snprintf(g_token, sizeof(g_token), "%s",
                 json_string_value(json_object_get(j, "sessionToken")));
        json_decref(j);
        return 0;
}

static int make_plan_and_customers(CURL *c)
{
        int n = g_opt.clients * g_opt.per_client;
        char body[512];
        json_t *j;

        j = must(c, PATH_BILLING "CreatePlan",
                 "{\"code\":\"bench\",\"currency\":\"USD\",\"intervalUnit\":"
                 "\"INTERVAL_UNIT_MONTH\",\"price\":{\"model\":\"PRICE_MODEL_FLAT\","
                 "\"amount\":\"1999\"}}");
        if (j == NULL) {
                return -1;
        }
        json_decref(j);
        if ((g_customers = calloc((size_t)n, sizeof(*g_customers))) == NULL) {
                return -1;
        }
        for (int i = 0; i < n; i++) {
                snprintf(body, sizeof(body),
                         "{\"email\":\"c%d@example.test\",\"name\":\"Customer %d\",\"currency\":"
                         "\"USD\",\"taxRateBp\":1000,\"defaultPaymentMethod\":\"pm_card_visa\"}",
                         i, i);
                if ((j = must(c, PATH_BILLING "CreateCustomer", body)) == NULL) {
                        return -1;
                }
                snprintf(g_customers[i], sizeof(g_customers[i]), "%s",
                         json_string_value(json_object_get(json_object_get(j, "customer"), "id")));
                json_decref(j);
        }
        return 0;
}

/* ---- a timed phase ------------------------------------------------------------------------ */

typedef struct worker {
        int index;
        bool list; /* ListCustomers instead of CreateSubscription */
        int64_t until_ns;
        int64_t *lat_ns;
        size_t n, cap;
        long failed;
        char first_error[300];
} worker;

static void *work(void *arg)
{
        worker *w = arg;
        CURL *c = curl_easy_init();
        reply r = {0};
        char body[256];
        int k = 0;

        while (c != NULL && bench_now_ns() < w->until_ns && w->n < w->cap) {
                const char *path =
                    w->list ? PATH_BILLING "ListCustomers" : PATH_BILLING "CreateSubscription";
                if (w->list) {
                        snprintf(body, sizeof(body), "{\"pageSize\":50}");
                } else {
                        snprintf(body, sizeof(body),
                                 "{\"customerId\":\"%s\",\"planCode\":\"bench\"}",
                                 g_customers[w->index * g_opt.per_client + k]);
                        k = (k + 1) % g_opt.per_client;
                }
                int64_t t0 = bench_now_ns();
                long status = post(c, path, body, &r);
                int64_t t1 = bench_now_ns();
                if (status != 200) {
                        if (w->failed++ == 0) {
                                snprintf(w->first_error, sizeof(w->first_error), "HTTP %ld %.200s",
                                         status, r.body != NULL ? r.body : "");
                        }
                        continue;
                }
                w->lat_ns[w->n++] = t1 - t0;
        }
        free(r.body);
        curl_easy_cleanup(c);
        return NULL;
}

typedef struct phase {
        double per_s, p50_ms, p95_ms, p99_ms;
        long done, failed;
} phase;

static int run_phase(bool list, int clients, int seconds, phase *out)
{
        worker w[CLIENTS_MAX];
        pthread_t th[CLIENTS_MAX];
        size_t cap = LATENCIES_MAX / (size_t)clients, total = 0;
        int64_t start = bench_now_ns();
        int64_t *all;

        memset(out, 0, sizeof(*out));
        for (int i = 0; i < clients; i++) {
                w[i] = (worker){.index = i,
                                .list = list,
                                .until_ns = start + (int64_t)seconds * 1000000000LL,
                                .lat_ns = malloc(cap * sizeof(int64_t)),
                                .cap = cap};
                if (w[i].lat_ns == NULL || pthread_create(&th[i], NULL, work, &w[i]) != 0) {
                        return -1;
                }
        }
        for (int i = 0; i < clients; i++) {
                pthread_join(th[i], NULL);
                total += w[i].n;
                out->failed += w[i].failed;
                if (w[i].failed > 0) {
                        fprintf(stderr, "bench_billing: client %d: %ld failed, first: %s\n", i,
                                w[i].failed, w[i].first_error);
                }
        }
        double elapsed = (double)(bench_now_ns() - start) / 1e9;
        if ((all = malloc((total + 1) * sizeof(int64_t))) == NULL) {
                return -1;
        }
        total = 0;
        for (int i = 0; i < clients; i++) {
                memcpy(all + total, w[i].lat_ns, w[i].n * sizeof(int64_t));
                total += w[i].n;
                free(w[i].lat_ns);
        }
        bench_sort_ns(all, total);
        out->done = (long)total;
        out->per_s = (double)total / elapsed;
        if (total > 0) {
                out->p50_ms = (double)bench_percentile_ns(all, total, 50) / 1e6;
                out->p95_ms = (double)bench_percentile_ns(all, total, 95) / 1e6;
                out->p99_ms = (double)bench_percentile_ns(all, total, 99) / 1e6;
        }
        free(all);
        return 0;
}

/* ---- CPU per request, per process group --------------------------------------------------- */

/* The stack's groups, then this process (the load generator, shown apart from the total). */
enum { G_GATEWAY, G_BROKER, G_BILLING, G_LEDGER, G_POSTGRES, G_N, G_CLIENT = G_N, G_ALL };
static const char *const g_names[G_N] = {"gateway", "broker", "billing", "ledger", "postgres"};

/* This process's CPU and its finished children's (wrk) in clock ticks, as /proc gives the others.
 */
static long long self_ticks(void)
{
        double us = 0;
        const int who[2] = {RUSAGE_SELF, RUSAGE_CHILDREN};

        for (int i = 0; i < 2; i++) {
                struct rusage ru;
                getrusage(who[i], &ru);
                us += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
        }
        return (long long)(us / bench_tick_us());
}

static void cpu_snapshot(long long out[G_ALL])
{
        out[G_CLIENT] = self_ticks();
        out[G_GATEWAY] = bench_env_pids_ticks(g_dir, "KEELSON_IT_GATEWAY_PIDS");
        out[G_BROKER] = bench_pid_file_ticks(g_dir, "pids/broker.pid");
        out[G_BILLING] = bench_env_pids_ticks(g_dir, "KEELSON_IT_BILLING_PIDS");
        out[G_LEDGER] = bench_env_pids_ticks(g_dir, "KEELSON_IT_LEDGER_PIDS");
        out[G_POSTGRES] = bench_postgres_ticks(g_dir);
}

/* CPU µs per request of each group between two snapshots. */
static void print_cpu(const char *what, const long long a[G_ALL], const long long b[G_ALL], long n)
{
        double tick_us = bench_tick_us(), total = 0;

        printf("%s CPU per request:", what);
        for (int g = 0; g < G_N; g++) {
                double us = n > 0 ? (double)(b[g] - a[g]) * tick_us / (double)n : 0;
                total += us;
                printf(" %s %.0f µs,", g_names[g], us);
        }
        printf(" total %.0f µs; this client %.0f µs\n", total,
               n > 0 ? (double)(b[G_CLIENT] - a[G_CLIENT]) * tick_us / (double)n : 0);
}

/* ---- the ledger's side ----------------------------------------------------------------------- */

static long sql_long(PGconn *pg, const char *sql)
{
        const char *p[1] = {g_tenant};
        PGresult *r = PQexecParams(pg, sql, 1, NULL, p, NULL, NULL, 0);
        long v = PQresultStatus(r) == PGRES_TUPLES_OK ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : -1;

        PQclear(r);
        return v;
}

/* Waits for the relay to post everything queued; the seconds it took after the load, or -1. */
static double drain(PGconn *pg)
{
        int64_t start = bench_now_ns();

        while (sql_long(pg, "SELECT count(*) FROM billing.postings_queue"
                            " WHERE tenant_id = $1::uuid") > 0) {
                if (bench_now_ns() - start > 300LL * 1000000000LL) {
                        return -1;
                }
                usleep(50000);
        }
        return (double)(bench_now_ns() - start) / 1e9;
}

/* A count of a reply (an int64, a JSON string in Connect's mapping); 0 when absent. */
static long long count_of(const json_t *j, const char *key)
{
        const char *v = json_string_value(json_object_get(j, key));
        return v != NULL ? strtoll(v, NULL, 10) : 0;
}

/*
 * GetReconciliation over windows of RECONCILE_WINDOW_MS of the load (a
 * call refuses more than 20,000 invoices; billing's invoices are finalized
 * at their creation), from a minute before it to a minute after, and the
 * unbounded time on either side: their counts summed.
 */
#define RECONCILE_WINDOW_MS 4000LL

static int reconcile(CURL *c, PGconn *pg, long long load_from_ms, long long load_to_ms)
{
        long long invoices = 0, chains = 0, expected = 0, found_total = 0;
        long long from = load_from_ms - 60000, end = load_to_ms + 60000;
        int windows = 0;
        char body[128];
        long transfers =
            sql_long(pg, "SELECT count(*) FROM ledger.transfers WHERE tenant_id = $1::uuid");

        for (long long lo = 0, hi = from;; lo = hi, hi = hi + RECONCILE_WINDOW_MS) {
                bool last = lo >= end;
                snprintf(body, sizeof(body), "{\"fromUnixMs\":\"%lld\",\"toUnixMs\":\"%lld\"}", lo,
                         last ? 0LL : hi);
                json_t *j = must(c, PATH_BILLING "GetReconciliation", body);
                if (j == NULL) {
                        return -1;
                }
                invoices += count_of(j, "invoices");
                chains += count_of(j, "chains");
                expected += count_of(j, "transfersExpected");
                found_total += count_of(j, "discrepanciesTotal");
                json_decref(j);
                windows++;
                if (last) {
                        break;
                }
        }
        printf("reconciliation (%d windows of time): %lld invoices, %lld ledger chains, %lld"
               " transfers expected, %ld in the ledger, %lld discrepancies\n",
               windows, invoices, chains, expected, transfers, found_total);
        return found_total == 0 && expected == transfers ? 0 : -1;
}

/* ---- baselines ---------------------------------------------------------------------------------
 */

static const char naive_schema[] =
    "DROP SCHEMA IF EXISTS bench_billing_naive CASCADE; CREATE SCHEMA bench_billing_naive;"
    " CREATE TABLE bench_billing_naive.subscriptions (id uuid PRIMARY KEY, customer int, plan int,"
    "  state int2, period_start int8, period_end int8, created int8);"
    " CREATE TABLE bench_billing_naive.history (sub uuid, seq int, event text, at int8,"
    "  PRIMARY KEY (sub, seq));"
    " CREATE TABLE bench_billing_naive.invoices (id uuid PRIMARY KEY, sub uuid, number text UNIQUE,"
    "  subtotal int8, tax int8, total int8, paid int8, state int2, created int8);"
    " CREATE TABLE bench_billing_naive.lines (invoice uuid, no int, amount int8, tax int8,"
    "  PRIMARY KEY (invoice, no));"
    " CREATE TABLE bench_billing_naive.counters (id int PRIMARY KEY, last int8);"
    " INSERT INTO bench_billing_naive.counters VALUES (1, 0);"
    " CREATE TABLE bench_billing_naive.payments (id uuid PRIMARY KEY, invoice uuid, amount int8);"
    " CREATE TABLE bench_billing_naive.postings (id bigserial PRIMARY KEY, source uuid,"
    "  transfers bytea);"
    " CREATE TABLE bench_billing_naive.outbox (id bigserial PRIMARY KEY, topic text,"
    "  payload bytea);"
    " CREATE TABLE bench_billing_naive.customers (id int PRIMARY KEY, email text, name text,"
    "  created int8);"
    " INSERT INTO bench_billing_naive.customers SELECT g, 'c' || g || '@example.test',"
    "  'Customer ' || g, g FROM generate_series(1, 1000) g;"
    " CREATE INDEX ON bench_billing_naive.customers (created DESC);";

static const char naive_create[] =
    "\\set c random(1, 1000)\n"
    "BEGIN;\n"
    "SELECT id FROM bench_billing_naive.customers WHERE id = :c FOR UPDATE;\n"
    "INSERT INTO bench_billing_naive.subscriptions VALUES (gen_random_uuid(), :c, 1, 1, 0, 1, 0);\n"
    "INSERT INTO bench_billing_naive.history VALUES (gen_random_uuid(), 1, 'create', 0);\n"
    "INSERT INTO bench_billing_naive.invoices VALUES (gen_random_uuid(), NULL, NULL, 1999, 200,"
    " 2199, 0, 0, 0);\n"
    "INSERT INTO bench_billing_naive.lines VALUES (gen_random_uuid(), 1, 1999, 200);\n"
    "INSERT INTO bench_billing_naive.payments VALUES (gen_random_uuid(), NULL, 2199);\n"
    "INSERT INTO bench_billing_naive.postings (source, transfers) VALUES (gen_random_uuid(),"
    " '\\x00');\n"
    "INSERT INTO bench_billing_naive.postings (source, transfers) VALUES (gen_random_uuid(),"
    " '\\x00');\n"
    "INSERT INTO bench_billing_naive.outbox (topic, payload) VALUES ('a', '\\x00'), ('b', '\\x00'),"
    " ('c', '\\x00');\n"
    "UPDATE bench_billing_naive.counters SET last = last + 1 WHERE id = 1;\n"
    "END;\n";

/*
 * The same rows for g creations in one transaction, a statement per table
 * (the counter moved once by g): what PostgreSQL gives when creations in
 * flight together are written together (group commit), the ceiling of a
 * creation path that grouped its writes. Written with g as the group size.
 */
static void naive_grouped(char *out, size_t cap, int g)
{
        snprintf(out, cap,
                 "\\set c random(1, %d)\n"
                 "BEGIN;\n"
                 "SELECT id FROM bench_billing_naive.customers WHERE id BETWEEN :c AND :c + %d"
                 " ORDER BY id FOR UPDATE;\n"
                 "INSERT INTO bench_billing_naive.subscriptions SELECT gen_random_uuid(), g, 1, 1,"
                 " 0, 1, 0 FROM generate_series(:c, :c + %d) g;\n"
                 "INSERT INTO bench_billing_naive.history SELECT gen_random_uuid(), 1, 'create', 0"
                 " FROM generate_series(1, %d);\n"
                 "INSERT INTO bench_billing_naive.invoices SELECT gen_random_uuid(), NULL, NULL,"
                 " 1999, 200, 2199, 0, 0, 0 FROM generate_series(1, %d);\n"
                 "INSERT INTO bench_billing_naive.lines SELECT gen_random_uuid(), 1, 1999, 200"
                 " FROM generate_series(1, %d);\n"
                 "INSERT INTO bench_billing_naive.payments SELECT gen_random_uuid(), NULL, 2199"
                 " FROM generate_series(1, %d);\n"
                 "INSERT INTO bench_billing_naive.postings (source, transfers) SELECT"
                 " gen_random_uuid(), '\\x00' FROM generate_series(1, %d);\n"
                 "INSERT INTO bench_billing_naive.outbox (topic, payload) SELECT 'a', '\\x00'"
                 " FROM generate_series(1, %d);\n"
                 "UPDATE bench_billing_naive.counters SET last = last + %d WHERE id = 1;\n"
                 "END;\n",
                 1001 - g, g - 1, g - 1, g, g, g, g, 2 * g, 3 * g, g);
}

static const char naive_list[] =
    "SELECT id, email, name, created FROM bench_billing_naive.customers"
    " ORDER BY created DESC LIMIT 51;\n";

/*
 * The Lua script of a wrk run: ListCustomers' one body, or CreateSubscription's
 * body for each request, each of wrk's threads cycling through its own share
 * of the customers (a thread's connections in flight never name one twice,
 * as this tool's own clients each have theirs). malloc'd; NULL when out of
 * memory.
 */
static char *wrk_script(bool list, int threads)
{
        size_t n = (size_t)g_opt.clients * (size_t)g_opt.per_client;
        size_t cap = 2048 + n * (sizeof(g_customers[0]) + 4), len = 0;
        char *t = malloc(cap);

        if (t == NULL) {
                return NULL;
        }
#define ADD(...) (len += (size_t)snprintf(t + len, cap - len, __VA_ARGS__))
        ADD("wrk.method = \"POST\"\n"
            "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
            "wrk.headers[\"Authorization\"] = \"Bearer %s\"\n",
            g_token);
        if (list) {
                ADD("wrk.body = '{\"pageSize\":50}'\n");
        } else {
                ADD("local ids = {");
                for (size_t i = 0; i < n; i++) {
                        ADD("%s\"%s\"", i ? "," : "", g_customers[i]);
                }
                ADD("}\n"
                    "local started = 0\n"
                    "setup = function(thread)\n"
                    "  thread:set(\"first\", started)\n"
                    "  started = started + 1\n"
                    "end\n"
                    "local k, share = 0, math.floor(#ids / %d)\n"
                    "request = function()\n"
                    "  local id = ids[first * share + k %% share + 1]\n"
                    "  k = k + 1\n"
                    "  return wrk.format(nil, nil, nil,\n"
                    "    '{\"customerId\":\"' .. id .. '\",\"planCode\":\"bench\"}')\n"
                    "end\n",
                    threads);
        }
        ADD("done = function(s, latency, requests)\n"
            "  local e = s.errors\n"
            "  io.write(string.format(\"BENCH %%d %%d %%d %%d %%d %%d\\n\", s.requests,\n"
            "    e.connect + e.read + e.write + e.status + e.timeout, s.duration,\n"
            "    latency:percentile(50), latency:percentile(95), latency:percentile(99)))\n"
            "end\n");
#undef ADD
        if (len >= cap) {
                free(t);
                return NULL;
        }
        return t;
}

/*
 * A phase driven by wrk (two threads, one event loop each, as
 * tools/bench_gateway_read.sh drives WhoAmI; `clients` connections) when it
 * is installed: the thread-per-connection client costs about 50 µs of CPU a
 * page and 80 a creation on the two cores it shares with the stack, wrk a
 * fraction of that. Its Lua done() prints the count, the failures and the
 * percentiles. 1 when wrk is not there (or --wrk none: the thread client
 * runs instead), -1 on a failure.
 */
static int run_wrk(bool list, int clients, int seconds, phase *out)
{
        char script[] = "/tmp/bench_billing_XXXXXX";
        char cmd[1400], line[512];
        long done = -1, failed = 0;
        double dur_us = 0, p50 = 0, p95 = 0, p99 = 0;
        int threads = clients < 2 ? 1 : 2;
        const char *what = list ? "ListCustomers" : "CreateSubscription";

        if (strcmp(g_opt.wrk, "none") == 0 ||
            (snprintf(cmd, sizeof(cmd), "command -v '%s' >/dev/null 2>&1", g_opt.wrk),
             system(cmd) != 0)) {
                return 1;
        }
        char *text = wrk_script(list, threads);
        int fd = mkstemp(script);
        if (fd < 0 || text == NULL) {
                free(text);
                return -1;
        }
        size_t n = strlen(text);
        bool written = write(fd, text, n) == (ssize_t)n;
        close(fd);
        free(text);
        if (!written) {
                unlink(script);
                return -1;
        }
        snprintf(cmd, sizeof(cmd), "'%s' -t%d -c%d -d%ds -s %s '%s%s%s' 2>&1", g_opt.wrk, threads,
                 clients, seconds, script, g_opt.gateway, PATH_BILLING, what);
        FILE *p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
                long r, f;
                double d, a, b, c;
                if (sscanf(line, "BENCH %ld %ld %lf %lf %lf %lf", &r, &f, &d, &a, &b, &c) == 6) {
                        done = r, failed = f, dur_us = d, p50 = a, p95 = b, p99 = c;
                }
        }
        if (p != NULL) {
                pclose(p);
        }
        unlink(script);
        if (done < 0 || dur_us <= 0) {
                fprintf(stderr, "bench_billing: wrk gave no figures\n");
                return -1;
        }
        /* wrk counts a non-2xx reply among its requests and its errors. */
        *out = (phase){.done = done - failed,
                       .failed = failed,
                       .per_s = (double)(done - failed) / (dur_us / 1e6),
                       .p50_ms = p50 / 1000,
                       .p95_ms = p95 / 1000,
                       .p99_ms = p99 / 1000};
        if (failed > 0) {
                fprintf(stderr, "bench_billing: %s: %ld failed under wrk\n", what, failed);
        }
        return 0;
}

static double run_pgbench(const char *script_text, int clients, int seconds)
{
        char script[] = "/tmp/bench_billing_XXXXXX";
        char cmd[1400], line[512];
        double tps = -1;
        int fd = mkstemp(script);

        if (fd < 0 || write(fd, script_text, strlen(script_text)) < 0) {
                return -1;
        }
        close(fd);
        snprintf(cmd, sizeof(cmd), "%s -n -M prepared -c %d -j 2 -T %d -f %s '%s' 2>&1",
                 g_opt.pgbench, clients, seconds, script, g_opt.pg_dsn);
        FILE *p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
                sscanf(line, "tps = %lf", &tps);
        }
        if (p != NULL) {
                pclose(p);
        }
        unlink(script);
        return tps;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int usage(void)
{
        fprintf(stderr, "usage: bench_billing --stack DIR [--clients N] [--seconds S]"
                        " [--list-clients N] [--list-seconds S] [--customers-per-client N]"
                        " [--pgbench PATH] [--wrk PATH|none] [--create-by threads|wrk]\n");
        return 2;
}

static int parse(int argc, char **argv)
{
        const char *dir = NULL;

        g_opt = (options){.clients = 20,
                          .seconds = 30,
                          .list_clients = 50,
                          .list_seconds = 15,
                          .per_client = 25,
                          .pgbench = "pgbench",
                          .wrk = "wrk"};
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *f = argv[i], *v = argv[i + 1];
                if (strcmp(f, "--stack") == 0) {
                        dir = v;
                } else if (strcmp(f, "--clients") == 0) {
                        g_opt.clients = atoi(v);
                } else if (strcmp(f, "--seconds") == 0) {
                        g_opt.seconds = atoi(v);
                } else if (strcmp(f, "--list-clients") == 0) {
                        g_opt.list_clients = atoi(v);
                } else if (strcmp(f, "--list-seconds") == 0) {
                        g_opt.list_seconds = atoi(v);
                } else if (strcmp(f, "--customers-per-client") == 0) {
                        g_opt.per_client = atoi(v);
                } else if (strcmp(f, "--pgbench") == 0) {
                        g_opt.pgbench = v;
                } else if (strcmp(f, "--wrk") == 0) {
                        g_opt.wrk = v;
                } else if (strcmp(f, "--create-by") == 0 &&
                           (strcmp(v, "wrk") == 0 || strcmp(v, "threads") == 0)) {
                        g_opt.create_wrk = strcmp(v, "wrk") == 0;
                } else {
                        return -1;
                }
        }
        if (dir != NULL) {
                snprintf(g_dir, sizeof(g_dir), "%s", dir);
        }
        if (dir == NULL || g_opt.clients < 1 || g_opt.clients > CLIENTS_MAX ||
            g_opt.list_clients < 1 || g_opt.list_clients > CLIENTS_MAX || g_opt.seconds < 1 ||
            g_opt.list_seconds < 1 || g_opt.per_client < 1 || g_opt.per_client > 1000 ||
            bench_stack_env(dir, "KEELSON_IT_GATEWAY_URL", g_opt.gateway, sizeof(g_opt.gateway)) !=
                0 ||
            bench_stack_env(dir, "KEELSON_IT_PG_DSN", g_opt.pg_dsn, sizeof(g_opt.pg_dsn)) != 0) {
                return -1;
        }
        return 0;
}

static void print_phase(const char *what, const phase *p, double base, const char *base_what)
{
        printf("%s: %.0f req/s, p50 %.2f ms, p95 %.2f ms, p99 %.2f ms (%ld done, %ld failed);"
               " baseline %s %.0f/s, ratio %.2f\n",
               what, p->per_s, p->p50_ms, p->p95_ms, p->p99_ms, p->done, p->failed, base_what, base,
               base > 0 ? p->per_s / base : 0);
}

int main(int argc, char **argv)
{
        char durability[256];
        phase create, list;
        PGconn *pg;
        CURL *c;
        int rc = 0;

        if (parse(argc, argv) != 0) {
                return usage();
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        c = curl_easy_init();
        pg = PQconnectdb(g_opt.pg_dsn);
        if (c == NULL || PQstatus(pg) != CONNECTION_OK || sign_up(c) != 0 ||
            make_plan_and_customers(c) != 0) {
                fprintf(stderr, "bench_billing: set-up failed\n");
                return 1;
        }
        bench_pg_durability(g_opt.pg_dsn, durability, sizeof(durability));
        printf("bench_billing: %d clients × %d s CreateSubscription, %d clients × %d s"
               " ListCustomers; %s\n",
               g_opt.clients, g_opt.seconds, g_opt.list_clients, g_opt.list_seconds, durability);
        long long c0[G_ALL], c1[G_ALL], l0[G_ALL], l1[G_ALL];
        cpu_snapshot(c0);
        long long load_from_ms = bench_wall_ms();
        int create_by_wrk =
            g_opt.create_wrk ? run_wrk(false, g_opt.clients, g_opt.seconds, &create) : 1;
        if (create_by_wrk < 0 ||
            (create_by_wrk == 1 && run_phase(false, g_opt.clients, g_opt.seconds, &create) != 0)) {
                return 1;
        }
        long long load_to_ms = bench_wall_ms();
        double lag = drain(pg);
        cpu_snapshot(c1); /* the relay's postings and the ledger's work included */
        printf("ledger relay: every posting sent %.2f s after the load ended\n", lag);
        if (lag < 0 || reconcile(c, pg, load_from_ms, load_to_ms) != 0) {
                rc = 1;
        }
        cpu_snapshot(l0);
        int by_wrk = run_wrk(true, g_opt.list_clients, g_opt.list_seconds, &list);
        if (by_wrk < 0 ||
            (by_wrk == 1 && run_phase(true, g_opt.list_clients, g_opt.list_seconds, &list) != 0)) {
                return 1;
        }
        cpu_snapshot(l1);
        printf("CreateSubscription driven by %s; ListCustomers by %s\n",
               create_by_wrk == 0 ? "wrk (2 threads)" : "this tool's threads (one a connection)",
               by_wrk == 0 ? "wrk (2 threads)" : "this tool's threads (one a connection)");
        PQclear(PQexec(pg, naive_schema));
        double base_create = run_pgbench(naive_create, g_opt.clients, g_opt.seconds);
        /* The clients' creations in flight, written g at a time (g at most 10). */
        char grouped[2048];
        int g = g_opt.clients < GROUP_MAX ? g_opt.clients : GROUP_MAX;
        naive_grouped(grouped, sizeof(grouped), g);
        double grouped_tps = run_pgbench(grouped, (g_opt.clients + g - 1) / g, g_opt.seconds);
        double base_grouped = grouped_tps > 0 ? g * grouped_tps : grouped_tps; /* -1: failed */
        double base_list = run_pgbench(naive_list, g_opt.list_clients, g_opt.list_seconds);
        PQclear(PQexec(pg, "DROP SCHEMA IF EXISTS bench_billing_naive CASCADE"));
        print_phase("CreateSubscription", &create, base_create, "pgbench same rows");
        printf("pgbench same rows, %d creations a transaction (group commit's ceiling):"
               " %.0f/s; CreateSubscription over it %.2f\n",
               g, base_grouped, base_grouped > 0 ? create.per_s / base_grouped : 0);
        print_phase("ListCustomers (50)", &list, base_list, "pgbench page select");
        print_cpu("CreateSubscription", c0, c1, create.done);
        print_cpu("ListCustomers", l0, l1, list.done);
        printf("Recurso (10-core M2 Pro): CreateSubscription 578/s p99 67 ms; list 7,814/s p99"
               " 27 ms\n");
        PQfinish(pg);
        curl_easy_cleanup(c);
        curl_global_cleanup();
        return rc;
}
