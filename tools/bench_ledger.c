/*
 * bench_ledger: transfers per second through the ledger, against a naive
 * PostgreSQL ledger measured in the same run.
 *
 *   bench_ledger --stack DIR [--accounts 10000] [--clients 4] [--seconds 10]
 *                [--batch-sizes 1,100,8190] [--zipf 1.1] [--pgbench pgbench]
 *
 * DIR is a stack started by deploy/local/stack.sh (its env file names the
 * gateway and the superuser DSN). The benchmark signs up a tenant, creates
 * the accounts, then for each account choice (uniform, then zipfian) and
 * each batch size runs the clients for the given time, each sending
 * CreateTransfers batches in binary protobuf through the gateway, as a
 * Connect client would, and prints transfers/s and the batch latency p50
 * and p99.
 *
 * The baseline is the usual way to keep a ledger in PostgreSQL: one SQL
 * transaction per transfer that locks both accounts (SELECT ... FOR UPDATE
 * in id order), updates their balances and inserts the transfer, run by
 * pgbench with the same number of clients, the same accounts and the same
 * account choice, prepared statements, in the same database. The ratio is
 * ledger transfers/s over baseline transfers/s.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_support.h"
#include "keelson/ledger/v1/ledger.pb-c.h"

#define CLIENTS_MAX    64
#define BATCH_MAX      8190
#define SIZES_MAX      8
#define LATENCIES_MAX  (1u << 20)
#define BODY_MAX       (8u << 20)
#define PATH_LEDGER    "/keelson.ledger.v1.LedgerService/"
#define BENCH_PASSWORD "correct horse battery staple"

typedef struct options {
        char gateway[256];
        char pg_dsn[512];
        int accounts;
        int clients;
        int seconds;
        int sizes[SIZES_MAX];
        int n_sizes;
        double zipf;
        const char *pgbench;
} options;

typedef struct zipf_table {
        double *cdf; /* cdf[k-1]: probability of a rank <= k */
        int n;
} zipf_table;

typedef struct result {
        double transfers_per_s;
        double p50_ms, p99_ms;
        long batches, failed;
} result;

static options g_opt;
static char g_token[512];
static zipf_table g_zipf;

/* ---- small helpers -------------------------------------------------------------- */

static uint64_t xorshift(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static double uniform01(uint64_t *s)
{
        return (double)(xorshift(s) >> 11) / (double)(1ull << 53);
}

static int zipf_init(zipf_table *z, int n, double s)
{
        double sum = 0;

        z->cdf = calloc((size_t)n, sizeof(*z->cdf));
        if (z->cdf == NULL) {
                return -1;
        }
        for (int k = 1; k <= n; k++) {
                sum += 1.0 / pow(k, s);
                z->cdf[k - 1] = sum;
        }
        for (int k = 0; k < n; k++) {
                z->cdf[k] /= sum;
        }
        z->n = n;
        return 0;
}

/* A rank 1..n: 1 most often, like pgbench's random_zipfian. */
static int zipf_draw(const zipf_table *z, uint64_t *s)
{
        double u = uniform01(s);
        int lo = 0, hi = z->n - 1;

        while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (z->cdf[mid] < u) {
                        lo = mid + 1;
                } else {
                        hi = mid;
                }
        }
        return lo + 1;
}

/* ---- HTTP ------------------------------------------------------------------------ */

typedef struct buf {
        char *data;
        size_t len;
} buf;

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
        buf *b = arg;
        size_t n = size * nmemb;

        if (b->len + n > BODY_MAX) {
                return 0;
        }
        char *d = realloc(b->data, b->len + n + 1);
        if (d == NULL) {
                return 0;
        }
        memcpy(d + b->len, p, n);
        b->data = d;
        b->len += n;
        b->data[b->len] = '\0';
        return n;
}

/* POSTs body; returns the HTTP status (0 on transport error); *out owns the reply body. */
static long post(CURL *c, const char *path, const char *type, const void *body, size_t len,
                 buf *out)
{
        char url[512], ct[64], auth[600];
        struct curl_slist *h = NULL;
        long status = 0;

        snprintf(url, sizeof(url), "%s%s", g_opt.gateway, path);
        snprintf(ct, sizeof(ct), "Content-Type: %s", type);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_token);
        h = curl_slist_append(h, ct);
        if (g_token[0] != '\0') {
                h = curl_slist_append(h, auth);
        }
        out->data = NULL;
        out->len = 0;
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
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

static json_t *auth_call(CURL *c, const char *method, json_t *req)
{
        char path[128];
        char *body = json_dumps(req, JSON_COMPACT);
        buf out;

        snprintf(path, sizeof(path), "/keelson.auth.v1.AuthService/%s", method);
        long status = post(c, path, "application/json", body, strlen(body), &out);
        free(body);
        json_decref(req);
        json_t *j = status == 200 ? json_loadb(out.data, out.len, 0, NULL) : NULL;
        if (j == NULL) {
                fprintf(stderr, "bench_ledger: %s failed: HTTP %ld %.200s\n", method, status,
                        out.data != NULL ? out.data : "");
        }
        free(out.data);
        return j;
}

/* A fresh tenant for this run: sign up, log in. */
static int login(CURL *c)
{
        char email[128];

        snprintf(email, sizeof(email), "bench-%ld-%d@example.test", (long)time(NULL),
                 (int)getpid());
        json_t *j = auth_call(c, "SignUp",
                              json_pack("{s:s, s:s, s:s}", "email", email, "password",
                                        BENCH_PASSWORD, "tenantName", "Ledger benchmark"));
        if (j == NULL) {
                return -1;
        }
        json_decref(j);
        j = auth_call(c, "Login",
                      json_pack("{s:s, s:s}", "email", email, "password", BENCH_PASSWORD));
        if (j == NULL || !json_is_string(json_object_get(j, "sessionToken"))) {
                json_decref(j);
                return -1;
        }
        snprintf(g_token, sizeof(g_token), "%s",
                 json_string_value(json_object_get(j, "sessionToken")));
        json_decref(j);
        return 0;
}

/* ---- the ledger side ---------------------------------------------------------------- */

static int create_accounts(CURL *c)
{
        Keelson__Ledger__V1__Account *a = calloc(BATCH_MAX, sizeof(*a));
        Keelson__Ledger__V1__Account **p = calloc(BATCH_MAX, sizeof(*p));
        uint8_t *body = malloc(BODY_MAX);
        int rc = a != NULL && p != NULL && body != NULL ? 0 : -1;

        for (int first = 1; rc == 0 && first <= g_opt.accounts; first += BATCH_MAX) {
                Keelson__Ledger__V1__CreateAccountsRequest req =
                    KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
                int n =
                    g_opt.accounts - first + 1 < BATCH_MAX ? g_opt.accounts - first + 1 : BATCH_MAX;
                for (int i = 0; i < n; i++) {
                        keelson__ledger__v1__account__init(&a[i]);
                        a[i].id = (uint64_t)(first + i);
                        a[i].ledger = 1;
                        a[i].code = 1;
                        p[i] = &a[i];
                }
                req.n_accounts = (size_t)n;
                req.accounts = p;
                size_t len = protobuf_c_message_pack(&req.base, body);
                buf out;
                long status =
                    post(c, PATH_LEDGER "CreateAccounts", "application/proto", body, len, &out);
                free(out.data);
                rc = status == 200 ? 0 : -1;
        }
        free(body);
        free(p);
        free(a);
        return rc;
}

typedef struct client {
        int index;
        int batch;
        bool zipf;
        int64_t until_ns;
        uint64_t rng;
        uint64_t next_id;
        int64_t *lat_ns;
        long n_lat;
        long failed;
        Keelson__Ledger__V1__Transfer *t;
        Keelson__Ledger__V1__Transfer **p;
        uint8_t *body;
} client;

static int pick(client *c)
{
        return c->zipf ? zipf_draw(&g_zipf, &c->rng)
                       : 1 + (int)(xorshift(&c->rng) % (uint64_t)g_opt.accounts);
}

/* Fills the client's batch with new transfers between two distinct accounts. */
static size_t build_batch(client *c, uint64_t run)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;

        for (int i = 0; i < c->batch; i++) {
                Keelson__Ledger__V1__Transfer *t = &c->t[i];
                int dr = pick(c), cr = pick(c);
                while (cr == dr) {
                        cr = pick(c);
                }
                keelson__ledger__v1__transfer__init(t);
                t->id = ++c->next_id;
                t->id_hi = run; /* unique across configurations and clients */
                t->debit_account_id = (uint64_t)dr;
                t->credit_account_id = (uint64_t)cr;
                t->amount = 1 + xorshift(&c->rng) % 100;
                t->ledger = 1;
                t->code = 1;
                c->p[i] = t;
        }
        req.n_transfers = (size_t)c->batch;
        req.transfers = c->p;
        return protobuf_c_message_pack(&req.base, c->body);
}

static void *client_main(void *arg)
{
        client *c = arg;
        CURL *h = curl_easy_init();
        uint64_t run = ((uint64_t)c->batch << 16) | ((uint64_t)c->zipf << 8) | (uint64_t)c->index;

        while (h != NULL && bench_now_ns() < c->until_ns) {
                size_t len = build_batch(c, run + 1);
                buf out;
                int64_t t0 = bench_now_ns();
                long status =
                    post(h, PATH_LEDGER "CreateTransfers", "application/proto", c->body, len, &out);
                int64_t ns = bench_now_ns() - t0;
                free(out.data);
                if (status != 200) {
                        c->failed++;
                        continue;
                }
                if (c->n_lat < (long)LATENCIES_MAX) {
                        c->lat_ns[c->n_lat++] = ns;
                }
        }
        curl_easy_cleanup(h);
        return NULL;
}

static int client_alloc(client *c)
{
        c->lat_ns = calloc(LATENCIES_MAX, sizeof(*c->lat_ns));
        c->t = calloc(BATCH_MAX, sizeof(*c->t));
        c->p = calloc(BATCH_MAX, sizeof(*c->p));
        c->body = malloc(BODY_MAX);
        return c->lat_ns && c->t && c->p && c->body ? 0 : -1;
}

static void client_free(client *c)
{
        free(c->lat_ns);
        free(c->t);
        free(c->p);
        free(c->body);
}

/* Runs the clients for the configured time; merges their latencies. */
static int run_ledger(int batch, bool zipf, result *r)
{
        static client clients[CLIENTS_MAX];
        pthread_t th[CLIENTS_MAX];
        int64_t start = bench_now_ns(), until = start + (int64_t)g_opt.seconds * 1000000000LL;
        long n = 0;

        memset(r, 0, sizeof(*r));
        for (int i = 0; i < g_opt.clients; i++) {
                client *c = &clients[i];
                client_free(c);
                memset(c, 0, sizeof(*c));
                if (client_alloc(c) != 0) {
                        return -1;
                }
                c->index = i;
                c->batch = batch;
                c->zipf = zipf;
                c->until_ns = until;
                c->rng = (uint64_t)0x9e3779b97f4a7c15 * (uint64_t)(i + 1) + (uint64_t)batch;
                pthread_create(&th[i], NULL, client_main, c);
        }
        for (int i = 0; i < g_opt.clients; i++) {
                pthread_join(th[i], NULL);
                n += clients[i].n_lat;
                r->failed += clients[i].failed;
        }
        double elapsed = (double)(bench_now_ns() - start) / 1e9;
        int64_t *all = calloc((size_t)n + 1, sizeof(*all));
        long k = 0;
        for (int i = 0; i < g_opt.clients && all != NULL; i++) {
                memcpy(all + k, clients[i].lat_ns, (size_t)clients[i].n_lat * sizeof(*all));
                k += clients[i].n_lat;
        }
        if (all != NULL && n > 0) {
                bench_sort_ns(all, (size_t)n);
                r->p50_ms = (double)bench_percentile_ns(all, (size_t)n, 50) / 1e6;
                /* Rank (n - 1) * 0.99, not n * 99 / 100: the p99 this benchmark has always
                 * printed (docs/performance.md), one rank below the other benchmarks' at most. */
                r->p99_ms = (double)all[(long)((double)(n - 1) * 0.99)] / 1e6;
        }
        free(all);
        r->batches = n;
        r->transfers_per_s = (double)n * batch / elapsed;
        return 0;
}

/* ---- the baseline ------------------------------------------------------------------------ */

static const char baseline_schema[] =
    "DROP SCHEMA IF EXISTS bench_naive CASCADE;"
    "CREATE SCHEMA bench_naive;"
    "CREATE TABLE bench_naive.accounts (id int8 PRIMARY KEY,"
    " debits_posted numeric(39,0) NOT NULL DEFAULT 0,"
    " credits_posted numeric(39,0) NOT NULL DEFAULT 0);"
    "CREATE TABLE bench_naive.transfers (id bigserial PRIMARY KEY,"
    " debit_account_id int8 NOT NULL, credit_account_id int8 NOT NULL,"
    " amount numeric(39,0) NOT NULL, created_at timestamptz NOT NULL DEFAULT now());"
    "CREATE INDEX ON bench_naive.transfers (debit_account_id, created_at);"
    "CREATE INDEX ON bench_naive.transfers (credit_account_id, created_at);";

static int baseline_setup(void)
{
        char sql[256];
        PGconn *c = PQconnectdb(g_opt.pg_dsn);
        int rc = -1;

        if (PQstatus(c) == CONNECTION_OK) {
                PQclear(PQexec(c, "SET client_min_messages = warning"));
                PGresult *r = PQexec(c, baseline_schema);
                rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
                PQclear(r);
                snprintf(sql, sizeof(sql),
                         "INSERT INTO bench_naive.accounts (id) SELECT generate_series(1, %d)",
                         g_opt.accounts);
                r = PQexec(c, sql);
                rc = rc == 0 && PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
                PQclear(r);
                r = PQexec(c, "VACUUM ANALYZE bench_naive.accounts");
                rc = rc == 0 && PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
                PQclear(r);
        }
        if (rc != 0) {
                fprintf(stderr, "bench_ledger: baseline setup failed: %s", PQerrorMessage(c));
        }
        PQfinish(c);
        return rc;
}

/* The naive transfer: both accounts locked in id order, both updated, one insert. */
static int write_script(const char *path, bool zipf)
{
        FILE *f = fopen(path, "w");

        if (f == NULL) {
                return -1;
        }
        if (zipf) {
                fprintf(
                    f, "\\set a random_zipfian(1, %d, %.3f)\n\\set b random_zipfian(1, %d, %.3f)\n",
                    g_opt.accounts, g_opt.zipf, g_opt.accounts, g_opt.zipf);
        } else {
                fprintf(f, "\\set a random(1, %d)\n\\set b random(1, %d)\n", g_opt.accounts,
                        g_opt.accounts);
        }
        fprintf(f,
                "\\set amount random(1, 100)\n"
                "BEGIN;\n"
                "SELECT id FROM bench_naive.accounts WHERE id IN (:a, :b) ORDER BY id FOR UPDATE;\n"
                "UPDATE bench_naive.accounts SET debits_posted = debits_posted + :amount"
                " WHERE id = :a;\n"
                "UPDATE bench_naive.accounts SET credits_posted = credits_posted + :amount"
                " WHERE id = :b;\n"
                "INSERT INTO bench_naive.transfers (debit_account_id, credit_account_id, amount)"
                " VALUES (:a, :b, :amount);\n"
                "END;\n");
        return fclose(f);
}

/* pgbench's tps and average latency; -1 when it did not run. */
static double run_pgbench(bool zipf, double *latency_ms)
{
        char script[] = "/tmp/bench_ledger_XXXXXX";
        char cmd[1200], line[512];
        double tps = -1;
        int fd = mkstemp(script);

        if (fd < 0) {
                return -1;
        }
        close(fd);
        if (write_script(script, zipf) != 0) {
                unlink(script);
                return -1;
        }
        snprintf(cmd, sizeof(cmd), "%s -n -M prepared -c %d -j %d -T %d -f %s '%s' 2>&1",
                 g_opt.pgbench, g_opt.clients, g_opt.clients < 2 ? 1 : 2, g_opt.seconds, script,
                 g_opt.pg_dsn);
        FILE *p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
                sscanf(line, "tps = %lf", &tps);
                sscanf(line, "latency average = %lf ms", latency_ms);
        }
        if (p != NULL) {
                pclose(p);
        }
        unlink(script);
        return tps;
}

/* ---- options and main ---------------------------------------------------------------------- */

static int read_stack_env(const char *dir)
{
        int rc =
            bench_stack_env(dir, "KEELSON_IT_GATEWAY_URL", g_opt.gateway, sizeof(g_opt.gateway));

        if (rc == -1) {
                fprintf(stderr, "bench_ledger: cannot read %s/env (start the stack first)\n", dir);
        }
        if (rc != 0 ||
            bench_stack_env(dir, "KEELSON_IT_PG_DSN", g_opt.pg_dsn, sizeof(g_opt.pg_dsn)) != 0) {
                return -1;
        }
        return g_opt.gateway[0] && g_opt.pg_dsn[0] ? 0 : -1;
}

static int parse_sizes(const char *s)
{
        g_opt.n_sizes = 0;
        while (*s != '\0' && g_opt.n_sizes < SIZES_MAX) {
                char *end;
                long v = strtol(s, &end, 10);
                if (end == s || v < 1 || v > BATCH_MAX) {
                        return -1;
                }
                g_opt.sizes[g_opt.n_sizes++] = (int)v;
                s = *end == ',' ? end + 1 : end;
        }
        return g_opt.n_sizes > 0 ? 0 : -1;
}

static int usage(void)
{
        fprintf(stderr, "usage: bench_ledger --stack DIR [--accounts N] [--clients N] [--seconds N]"
                        " [--batch-sizes 1,100,8190] [--zipf S] [--pgbench PATH]\n");
        return 2;
}

static int parse_args(int argc, char **argv)
{
        g_opt = (options){
            .accounts = 10000, .clients = 4, .seconds = 10, .zipf = 1.1, .pgbench = "pgbench"};
        parse_sizes("1,100,8190");
        for (int i = 1; i < argc; i++) {
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (v == NULL) {
                        return -1;
                }
                if (strcmp(argv[i], "--stack") == 0 && read_stack_env(v) == 0) {
                } else if (strcmp(argv[i], "--accounts") == 0) {
                        g_opt.accounts = atoi(v);
                } else if (strcmp(argv[i], "--clients") == 0) {
                        g_opt.clients = atoi(v);
                } else if (strcmp(argv[i], "--seconds") == 0) {
                        g_opt.seconds = atoi(v);
                } else if (strcmp(argv[i], "--batch-sizes") == 0 && parse_sizes(v) == 0) {
                } else if (strcmp(argv[i], "--zipf") == 0) {
                        g_opt.zipf = atof(v);
                } else if (strcmp(argv[i], "--pgbench") == 0) {
                        g_opt.pgbench = v;
                } else {
                        return -1;
                }
                i++;
        }
        if (g_opt.gateway[0] == '\0' || g_opt.accounts < 2 || g_opt.accounts > 10000000 ||
            g_opt.clients < 1 || g_opt.clients > CLIENTS_MAX || g_opt.seconds < 1 ||
            g_opt.zipf <= 1.0) {
                return -1;
        }
        return 0;
}

static void run_distribution(bool zipf)
{
        const char *name = zipf ? "zipfian" : "uniform";
        double lat = 0;

        if (baseline_setup() != 0) {
                return;
        }
        double base = run_pgbench(zipf, &lat);
        printf("%-8s baseline (pgbench, 1 transfer per transaction, FOR UPDATE): %9.0f"
               " transfers/s, latency avg %.2f ms\n",
               name, base, lat);
        for (int i = 0; i < g_opt.n_sizes; i++) {
                result r;
                if (run_ledger(g_opt.sizes[i], zipf, &r) != 0) {
                        fprintf(stderr, "bench_ledger: out of memory\n");
                        return;
                }
                printf("%-8s ledger batch %5d: %9.0f transfers/s  p50 %8.2f ms  p99 %8.2f ms"
                       "  batches %6ld  failed %ld  ratio %.2fx\n",
                       name, g_opt.sizes[i], r.transfers_per_s, r.p50_ms, r.p99_ms, r.batches,
                       r.failed, base > 0 ? r.transfers_per_s / base : 0.0);
                fflush(stdout);
        }
}

int main(int argc, char **argv)
{
        if (parse_args(argc, argv) != 0) {
                return usage();
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        CURL *c = curl_easy_init();
        if (c == NULL || login(c) != 0 || create_accounts(c) != 0 ||
            zipf_init(&g_zipf, g_opt.accounts, g_opt.zipf) != 0) {
                fprintf(stderr, "bench_ledger: setup failed\n");
                return 1;
        }
        curl_easy_cleanup(c);
        char durability[512];
        (void)bench_pg_durability(g_opt.pg_dsn, durability, sizeof(durability));
        printf("bench_ledger: %d accounts, %d clients, %d s per run, zipf s=%.2f, gateway %s\n"
               "bench_ledger: %s\n",
               g_opt.accounts, g_opt.clients, g_opt.seconds, g_opt.zipf, g_opt.gateway, durability);
        run_distribution(false);
        run_distribution(true);
        free(g_zipf.cdf);
        curl_global_cleanup();
        return 0;
}
