/*
 * bench_webhook_deliver: keelson's events delivered to tenants' URLs by a
 * running stack (billing's outbox -> the webhook feed -> deliveries -> the
 * worker's POSTs), per second and with their lag, against libcurl's multi
 * interface alone POSTing as many requests of the same size at the same
 * receiver with the same concurrency, in the same run.
 *
 *   bench_webhook_deliver --stack DIR [-n events] [-s subscriptions] [-r rounds]
 *                         [-t seconds per round] [--shared-port]
 *
 * DIR is a stack started by deploy/local/stack.sh (its DIR/env); the
 * webhook replicas must be allowed to reach 127.0.0.1, as the local stack
 * allows by default (KEELSON_WEBHOOK_DELIVERY_ALLOW). As PostgreSQL's
 * superuser it makes a tenant (a random uuid) with S subscriptions to
 * billing.invoice_paid, each with a signing secret, whose URLs point at
 * sinks in this process (tools/bench_sink.c: 200 once a request is read
 * whole). Each round then runs two phases:
 *
 *   curl-multi  the baseline: N x S POSTs of the body the service renders
 *               for these events (same size, same bytes but the ids), with
 *               Standard Webhooks headers, to the same sinks, from one
 *               thread driving libcurl's multi interface with K in flight,
 *               K = replicas x min(destinations x destination concurrency,
 *               concurrency): as many as the stack's senders may run at once
 *               (sender.h: at most the destination concurrency to one host
 *               and port, at most the concurrency overall, per replica).
 *   stack       N events inserted into billing.outbox as billing writes
 *               them (topic, tenant, a packed keelson.billing.v1.InvoicePaid,
 *               a fresh event id; 500 a transaction, as fast as one
 *               connection goes), from the first insert until the sinks have
 *               seen every (event, subscription) pair at least once (by
 *               webhook-id and path). Then, outside the figures, it waits
 *               for the stack to have recorded every outcome and deletes the
 *               round's rows.
 *
 * Figures: deliveries/s (N x S over the phase's time); the lag of each
 * pair's first arrival after the event's creation (the body's "timestamp",
 * the outbox row's created_at: the inserting transaction's start), p50 and
 * p99; repeated arrivals (duplicates); CPU per delivery of the webhook
 * replicas and of PostgreSQL (every backend of the stack's cluster, less
 * this program's own connection, which makes the events), from /proc,
 * sampled at the first insert and once every outcome is recorded: all the
 * work a delivery causes (feed, claim, signing, POST, outcome), a figure
 * that other load on the machine disturbs less than deliveries/s. For the
 * baseline: POSTs/s, their latency (start to answer, not a lag) and the
 * CPU of its thread per POST.
 *
 * What it does not measure: billing's own cost (the rows are inserted
 * already marked published, so billing's relay leaves them to the feed
 * alone and no other subscriber of the broker sees them); TLS; receivers
 * that are slow, failing or far away (retries, per-destination queueing);
 * the broker, which delivery does not use. Each subscription has its own
 * sink port by default, so the S subscriptions are S destinations, as
 * tenants' URLs usually are; --shared-port puts them all on one port, and
 * then the per-destination limit (4 per replica by default) is what is
 * measured, as it should be. The sinks, this program and the stack share
 * the machine's CPUs: on a small machine the ratio understates the
 * service's own cost, which the CPU figures show.
 *
 * Settings the stack runs with are not in DIR/env: KEELSON_WEBHOOK_DELIVERY_
 * CONCURRENCY (default 64) and ..._DESTINATION_CONCURRENCY (default 4) are
 * taken from DIR/env if there, else from this program's environment (the
 * stack's replicas inherit the environment stack.sh was started in), else
 * the defaults; what is assumed is printed. Phases alternate within each
 * round; the summary takes each phase's median round.
 *
 * At the end (and on a missed deadline, SIGINT or SIGTERM) it deletes the
 * tenant's outbox rows, events, deliveries, attempts, secrets and
 * subscriptions, so that the stack is left as found (the feed's cursor has
 * moved past the events, as it would for any). Exit status: 0; 1 set-up
 * failed, or a round missed its deadline (-t, what arrived is printed);
 * 2 usage.
 */
#include <curl/curl.h>
#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_sink.h"
#include "bench_support.h"
#include "keelson/billing/v1/events.pb-c.h"
#include "ks_crypto.h"
#include "webhook.h"

#define EVENTS_MAX     200000
#define SUBS_MAX       64
#define PAIRS_MAX      2000000 /* events x subscriptions */
#define ROUNDS_MAX     9
#define SECONDS_MAX    3600
#define TX_ROWS        500 /* events per inserting transaction */
#define SINK_BODY_MAX  65536
#define POLL_NS        2000000LL /* the wait for arrivals */
#define RECORD_POLL_MS 50        /* the wait for the outcomes to be recorded */
#define CLEAN_TRIES    20
#define CLEAN_PAUSE_MS 500
#define TOPIC          "billing.invoice_paid"
#define SQL_MAX        1024
#define NS             1000000000LL

typedef struct options {
        char dir[512];
        long n, s, rounds, seconds;
        bool shared_port;
} options;

static options g_opt;
static char g_dsn[512];
static char g_tenant[WH_UUID_LEN + 1];
static volatile sig_atomic_t g_stop;

/* ---- the stack's settings -------------------------------------------------------------------- */

typedef struct setting {
        const char *key;
        long value;
        const char *from; /* where value came from */
} setting;

enum { S_CONCURRENCY, S_DESTINATION, S_POLL, S_BATCH, S_FEED_BATCH, S_N };

static setting g_set[S_N] = {
    [S_CONCURRENCY] = {"KEELSON_WEBHOOK_DELIVERY_CONCURRENCY", 64, "default"},
    [S_DESTINATION] = {"KEELSON_WEBHOOK_DELIVERY_DESTINATION_CONCURRENCY", 4, "default"},
    [S_POLL] = {"KEELSON_WEBHOOK_DELIVERY_POLL_MS", 200, "default"},
    [S_BATCH] = {"KEELSON_WEBHOOK_DELIVERY_BATCH_MAX", 100, "default"},
    [S_FEED_BATCH] = {"KEELSON_WEBHOOK_FEED_BATCH_MAX", 500, "default"},
};

static void read_settings(void)
{
        for (int i = 0; i < S_N; i++) {
                char v[64];
                const char *e = getenv(g_set[i].key);
                if (bench_stack_env(g_opt.dir, g_set[i].key, v, sizeof(v)) == 0 && atol(v) > 0) {
                        g_set[i].value = atol(v);
                        g_set[i].from = "DIR/env";
                } else if (e != NULL && atol(e) > 0) {
                        g_set[i].value = atol(e);
                        g_set[i].from = "environment";
                }
        }
}

/* How many pids DIR/env's comma-separated list key names. */
static int replicas(const char *key)
{
        char v[512];
        int n = 1;

        if (bench_stack_env(g_opt.dir, key, v, sizeof(v)) != 0 || v[0] == '\0') {
                return 0;
        }
        for (const char *p = v; *p != '\0'; p++) {
                n += *p == ',';
        }
        return n;
}

/* ---- what the sinks saw ---------------------------------------------------------------------- */

typedef struct pair {
        uint64_t hi, lo; /* the webhook-id, a uuid */
        uint32_t sub;    /* the path's /s<i> */
        uint32_t used;
} pair;

static struct {
        pthread_mutex_t mu;
        bool recording; /* a stack phase: pairs are counted; else requests only */
        pair *slots;
        size_t cap;      /* a power of two, over twice the pairs */
        int64_t *lag_ns; /* per pair seen, its first arrival */
        long unique;
        long requests;       /* in this phase */
        long unparsed;       /* no uuid webhook-id, no /s<i> path, or no timestamp */
        int64_t last_new_ns; /* bench_now_ns of the last new pair */
} g_seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool parse_uuid(const char *s, size_t len, uint64_t *hi, uint64_t *lo)
{
        uint64_t v[2] = {0, 0};
        int k = 0;

        if (len != WH_UUID_LEN) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                if (i == 8 || i == 13 || i == 18 || i == 23) {
                        if (s[i] != '-') {
                                return false;
                        }
                        continue;
                }
                int d = ks_hex_digit(s[i]);
                if (d < 0) {
                        return false;
                }
                v[k / 16] = v[k / 16] << 4 | (uint64_t)d;
                k++;
        }
        *hi = v[0];
        *lo = v[1];
        return true;
}

/* The body's "timestamp" (RFC 3339, ms, Z) in Unix ns, or -1. */
static int64_t body_timestamp_ns(const char *body, size_t len)
{
        static const char key[] = "\"timestamp\":\"";
        const char *p = memmem(body, len, key, sizeof(key) - 1);
        struct tm tm = {0};
        int ms = 0;
        char stamp[32];

        if (p == NULL || (size_t)(body + len - p) < sizeof(key) - 1 + 24) {
                return -1;
        }
        memcpy(stamp, p + sizeof(key) - 1, 24);
        stamp[24] = '\0';
        if (sscanf(stamp, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
                return -1;
        }
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        return (int64_t)timegm(&tm) * NS + (int64_t)ms * 1000000LL;
}

static int64_t real_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

/* Whether the pair is new (and now in the table). Under mu. */
static bool pair_add(uint64_t hi, uint64_t lo, uint32_t sub)
{
        uint64_t h = (hi ^ (lo * 0x9e3779b97f4a7c15ULL) ^ sub) * 0xff51afd7ed558ccdULL;
        size_t i = (size_t)(h >> 17) & (g_seen.cap - 1);

        while (g_seen.slots[i].used) {
                pair *p = &g_seen.slots[i];
                if (p->hi == hi && p->lo == lo && p->sub == sub) {
                        return false;
                }
                i = (i + 1) & (g_seen.cap - 1);
        }
        g_seen.slots[i] = (pair){hi, lo, sub, 1};
        return true;
}

/* The sinks' hook: every request, on its connection's thread. */
static void on_request(const bench_sink_request *r, void *arg)
{
        int64_t now_real = real_now_ns();
        const char *id = NULL, *path = NULL;
        size_t id_len = bench_sink_header(r, "webhook-id", &id);
        size_t path_len = bench_sink_path(r, &path);
        uint64_t hi = 0, lo = 0;
        char *end = NULL;
        long sub =
            path_len > 2 && path[0] == '/' && path[1] == 's' ? strtol(path + 2, &end, 10) : -1;
        int64_t at = body_timestamp_ns(r->body, r->body_len);
        bool ok = parse_uuid(id, id_len, &hi, &lo) && sub >= 0 && sub < SUBS_MAX &&
                  end == path + path_len && at >= 0;

        (void)arg;
        pthread_mutex_lock(&g_seen.mu);
        g_seen.requests++;
        if (g_seen.recording) {
                if (!ok) {
                        g_seen.unparsed++;
                } else if ((size_t)g_seen.unique < g_seen.cap / 2 &&
                           pair_add(hi, lo, (uint32_t)sub)) {
                        g_seen.lag_ns[g_seen.unique++] = now_real - at;
                        g_seen.last_new_ns = r->arrival_ns;
                }
        }
        pthread_mutex_unlock(&g_seen.mu);
}

static int seen_init(long pairs)
{
        g_seen.cap = 1;
        while (g_seen.cap < (size_t)pairs * 2 + 2) {
                g_seen.cap <<= 1;
        }
        g_seen.slots = calloc(g_seen.cap, sizeof(pair));
        g_seen.lag_ns = malloc((size_t)pairs * sizeof(int64_t));
        return g_seen.slots != NULL && g_seen.lag_ns != NULL ? 0 : -1;
}

/* Starts a phase's counts; recording: count pairs (a stack phase). */
static void seen_reset(bool recording)
{
        pthread_mutex_lock(&g_seen.mu);
        memset(g_seen.slots, 0, g_seen.cap * sizeof(pair));
        g_seen.unique = g_seen.requests = g_seen.unparsed = 0;
        g_seen.last_new_ns = 0;
        g_seen.recording = recording;
        pthread_mutex_unlock(&g_seen.mu);
}

static long seen_unique(void)
{
        pthread_mutex_lock(&g_seen.mu);
        long n = g_seen.unique;
        pthread_mutex_unlock(&g_seen.mu);
        return n;
}

/* ---- SQL ------------------------------------------------------------------------------------- */

/* A statement that returns nothing the caller keeps; 0, or -1 with a line on stderr. */
static int exec_ok(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(r);
        int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;

        if (rc != 0) {
                fprintf(stderr, "bench_webhook_deliver: %.60s...: %s", sql, PQerrorMessage(pg));
        }
        PQclear(r);
        return rc;
}

/* The first column of the first row as a number, or -1. */
static long long query_num(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
        long long v = -1;

        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) {
                v = atoll(PQgetvalue(r, 0, 0));
        } else if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                fprintf(stderr, "bench_webhook_deliver: %.60s...: %s", sql, PQerrorMessage(pg));
        }
        PQclear(r);
        return v;
}

/*
 * Deletes the tenant's rows in one transaction, children first; with
 * everything, its secrets and subscriptions too. A worker's outcome or the
 * feed's fan-out committing meanwhile can make it fail on a foreign key: it
 * tries again.
 */
static int clean(PGconn *pg, bool everything)
{
        static const char *const tables[] = {
            "billing.outbox", "webhook.delivery_attempts",    "webhook.deliveries",
            "webhook.events", "webhook.subscription_secrets", "webhook.subscriptions"};
        char full[SQL_MAX];
        size_t n = everything ? 6 : 4;
        int w = snprintf(full, sizeof(full), "BEGIN;");

        for (size_t i = 0; i < n; i++) {
                w += snprintf(full + w, sizeof(full) - (size_t)w,
                              " DELETE FROM %s WHERE tenant_id = '%s';", tables[i], g_tenant);
        }
        snprintf(full + w, sizeof(full) - (size_t)w, " COMMIT");
        for (int i = 0; i < CLEAN_TRIES; i++) {
                PGresult *r = PQexec(pg, full);
                bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
                PQclear(r);
                if (ok) {
                        return 0;
                }
                PQclear(PQexec(pg, "ROLLBACK"));
                usleep(CLEAN_PAUSE_MS * 1000);
        }
        fprintf(stderr,
                "bench_webhook_deliver: the bench's rows (tenant %s) could not be"
                " deleted: %s",
                g_tenant, PQerrorMessage(pg));
        return -1;
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* One subscription to TOPIC at url, with a fresh signing secret (kept in secret). */
static int subscribe(PGconn *pg, const char *url, char secret[WH_SECRET_BYTES])
{
        static const char sql[] =
            "WITH s AS (INSERT INTO webhook.subscriptions (tenant_id, url, topics, description,"
            " created_ms, updated_ms) SELECT $1::uuid, $2, '{" TOPIC "}', 'bench_webhook_deliver',"
            " m, m FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8 AS m) t"
            " RETURNING tenant_id, id, created_ms)"
            " INSERT INTO webhook.subscription_secrets (tenant_id, subscription_id, secret,"
            " created_ms) SELECT tenant_id, id, $3, created_ms FROM s";

        if (wh_secret_generate(secret, WH_SECRET_BYTES) != KS_OK) {
                return -1;
        }
        const char *p[3] = {g_tenant, url, secret};
        return exec_ok(pg, sql, 3, p);
}

/* An InvoicePaid as billing publishes it, packed into *out (malloc'd). */
static int invoice_paid(uint8_t **out, size_t *len)
{
        char invoice[37], customer[37], sub[37];
        Keelson__Billing__V1__InvoicePaid m = KEELSON__BILLING__V1__INVOICE_PAID__INIT;

        if (ks_uuid_v4(invoice) != 0 || ks_uuid_v4(customer) != 0 || ks_uuid_v4(sub) != 0) {
                return -1;
        }
        m.tenant_id = g_tenant;
        m.invoice_id = invoice;
        m.number = "INV-000042";
        m.customer_id = customer;
        m.subscription_id = sub;
        m.currency = "usd";
        m.amount_paid = 2199;
        m.paid_at_unix_ms = real_now_ns() / 1000000;
        *len = keelson__billing__v1__invoice_paid__get_packed_size(&m);
        if ((*out = malloc(*len)) == NULL) {
                return -1;
        }
        keelson__billing__v1__invoice_paid__pack(&m, *out);
        return 0;
}

/* ---- the stack phase ------------------------------------------------------------------------- */

typedef struct result {
        long pairs, requests, unparsed;
        double seconds, insert_s;
        double per_s;
        double p50_ms, p99_ms;
        double cpu_us;    /* the stack: webhook replicas per delivery; the baseline: its thread */
        double pg_us;     /* the stack: PostgreSQL per delivery, less the inserts' backend */
        double insert_us; /* the stack: the inserts' backend per event */
        bool complete;
} result;

/* Inserts the round's events, TX_ROWS a transaction; 0 or -1. */
static int insert_events(PGconn *pg, const uint8_t *payload, size_t len)
{
        static const char sql[] = "INSERT INTO billing.outbox (event_id, topic, tenant_id, payload)"
                                  " SELECT gen_random_uuid(), '" TOPIC "', $1::uuid, $2::bytea"
                                  " FROM generate_series(1, $3::int4)";

        for (long done = 0; done < g_opt.n && !g_stop;) {
                long k = g_opt.n - done < TX_ROWS ? g_opt.n - done : TX_ROWS;
                char rows[24];
                snprintf(rows, sizeof(rows), "%ld", k);
                const char *p[3] = {g_tenant, (const char *)payload, rows};
                const int lens[3] = {0, (int)len, 0}, formats[3] = {0, 1, 0};
                PGresult *r = PQexecParams(pg, sql, 3, NULL, p, lens, formats, 0);
                bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
                PQclear(r);
                if (!ok) {
                        fprintf(stderr, "bench_webhook_deliver: insert: %s", PQerrorMessage(pg));
                        return -1;
                }
                done += k;
        }
        return 0;
}

/* Waits until every pair has arrived or the deadline; true when every one has. */
static bool wait_arrivals(long pairs, int64_t deadline_ns)
{
        struct timespec pause = {0, POLL_NS};

        while (!g_stop && seen_unique() < pairs && bench_now_ns() < deadline_ns) {
                nanosleep(&pause, NULL);
        }
        return seen_unique() >= pairs;
}

/* Waits until the stack has recorded every outcome of the tenant (none pending); true then. */
static bool wait_recorded(PGconn *pg, int64_t deadline_ns)
{
        static const char sql[] =
            "SELECT count(*) FROM webhook.deliveries WHERE tenant_id = $1::uuid AND status = 1";
        const char *p[1] = {g_tenant};

        while (!g_stop && bench_now_ns() < deadline_ns) {
                if (query_num(pg, sql, 1, p) == 0) {
                        return true;
                }
                usleep(RECORD_POLL_MS * 1000);
        }
        return false;
}

/* What the stack made of the round, for a round that missed its deadline. */
static void print_missing(PGconn *pg, long pairs)
{
        static const char sql[] =
            "SELECT status, attempts, last_error, count(*) FROM webhook.deliveries"
            " WHERE tenant_id = $1::uuid GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 8";
        const char *p[1] = {g_tenant};
        PGresult *r = PQexecParams(pg, sql, 1, NULL, p, NULL, NULL, 0);

        pthread_mutex_lock(&g_seen.mu);
        long unique = g_seen.unique, requests = g_seen.requests;
        pthread_mutex_unlock(&g_seen.mu);
        printf("  missed: %ld of %ld pairs arrived (%ld requests); the tenant's deliveries by"
               " status (1 pending, 2 delivered, 3 failed), attempts, last error:\n",
               unique, pairs, requests);
        for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
                printf("    %s  %s  %6s  \"%s\"\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                       PQgetvalue(r, i, 3), PQgetvalue(r, i, 2));
        }
        PQclear(r);
}

typedef struct ticks {
        long long webhook, postgres, mine;
} ticks;

static void ticks_now(ticks *t, long my_backend)
{
        t->webhook = bench_env_pids_ticks(g_opt.dir, "KEELSON_IT_WEBHOOK_PIDS");
        t->postgres = bench_postgres_ticks(g_opt.dir);
        t->mine = bench_pid_ticks(my_backend);
}

static void lag_figures(result *out)
{
        pthread_mutex_lock(&g_seen.mu);
        long n = g_seen.unique;
        out->pairs = n;
        out->requests = g_seen.requests;
        out->unparsed = g_seen.unparsed;
        if (n > 0) {
                bench_sort_ns(g_seen.lag_ns, (size_t)n);
                out->p50_ms = (double)bench_percentile_ns(g_seen.lag_ns, (size_t)n, 50) / 1e6;
                out->p99_ms = (double)bench_percentile_ns(g_seen.lag_ns, (size_t)n, 99) / 1e6;
        }
        pthread_mutex_unlock(&g_seen.mu);
}

/* One stack phase. 0; 1 when it missed its deadline; -1 on a failure. */
static int run_stack(PGconn *pg, long my_backend, const uint8_t *payload, size_t len, result *out)
{
        long pairs = g_opt.n * g_opt.s;
        ticks t0, t1;

        memset(out, 0, sizeof(*out));
        seen_reset(true);
        ticks_now(&t0, my_backend);
        int64_t start = bench_now_ns(), deadline = start + g_opt.seconds * NS;
        if (insert_events(pg, payload, len) != 0) {
                return -1;
        }
        int64_t inserted = bench_now_ns();
        ticks_now(&t1, my_backend);
        long long insert_ticks = t1.mine - t0.mine;
        out->complete = wait_arrivals(pairs, deadline);
        pthread_mutex_lock(&g_seen.mu);
        int64_t end = g_seen.last_new_ns > 0 ? g_seen.last_new_ns : bench_now_ns();
        pthread_mutex_unlock(&g_seen.mu);
        bool recorded = out->complete && wait_recorded(pg, deadline);
        ticks_now(&t1, my_backend);
        lag_figures(out);
        out->insert_s = (double)(inserted - start) / 1e9;
        out->seconds = (double)(end - start) / 1e9;
        out->per_s = out->seconds > 0 ? (double)out->pairs / out->seconds : 0;
        double tick = bench_tick_us(), d = out->pairs > 0 ? (double)out->pairs : 1;
        out->cpu_us = (double)(t1.webhook - t0.webhook) * tick / d;
        out->pg_us = (double)(t1.postgres - t0.postgres - (t1.mine - t0.mine)) * tick / d;
        out->insert_us = (double)insert_ticks * tick / (double)g_opt.n;
        if (!recorded) {
                out->complete = false;
                print_missing(pg, pairs);
        }
        return out->complete ? 0 : 1;
}

/* ---- the baseline phase ---------------------------------------------------------------------- */

typedef struct baseline {
        char **urls;
        size_t urls_n;
        char *body;
        size_t body_len;
        char lines[4][160];
        const char *headers[4];
        long concurrency;
        int64_t *lat_ns;
} baseline;

/* The body the service renders for these events, and its headers, signed as it signs. */
static int baseline_make(baseline *b, const uint8_t *payload, size_t len, const char *secret)
{
        const wh_topic *t = wh_topic_find(TOPIC);
        int64_t now_ms = real_now_ns() / 1000000;
        char id[37], sig[WH_STANDARD_SIGNATURE_BYTES];
        wh_key *key = NULL;

        if (t == NULL || wh_event_body(t, now_ms, payload, len, &b->body, &b->body_len) != KS_OK ||
            ks_uuid_v4(id) != 0 ||
            wh_key_new(&key, WH_PROVIDER_STANDARD, secret, strlen(secret), NULL, 0) != KS_OK ||
            wh_sign_standard(key, id, strlen(id), now_ms / 1000, b->body, b->body_len, sig,
                             sizeof(sig)) != KS_OK) {
                wh_key_free(key);
                return -1;
        }
        wh_key_free(key);
        snprintf(b->lines[0], sizeof(b->lines[0]), "webhook-id: %s", id);
        snprintf(b->lines[1], sizeof(b->lines[1]), "webhook-timestamp: %lld",
                 (long long)(now_ms / 1000));
        snprintf(b->lines[2], sizeof(b->lines[2]), "webhook-signature: %s", sig);
        snprintf(b->lines[3], sizeof(b->lines[3]), "content-type: application/json");
        for (int i = 0; i < 4; i++) {
                b->headers[i] = b->lines[i];
        }
        b->lat_ns = malloc((size_t)(g_opt.n * g_opt.s) * sizeof(int64_t));
        return b->lat_ns != NULL ? 0 : -1;
}

static int run_baseline(const baseline *b, result *out)
{
        const bench_posts load = {.urls = (const char *const *)b->urls,
                                  .urls_n = b->urls_n,
                                  .body = b->body,
                                  .body_len = b->body_len,
                                  .headers = b->headers,
                                  .headers_n = 4,
                                  .n = g_opt.n * g_opt.s,
                                  .concurrency = b->concurrency,
                                  .deadline_ns = bench_now_ns() + g_opt.seconds * NS,
                                  .lat_ns = b->lat_ns};
        bench_posts_result r;

        memset(out, 0, sizeof(*out));
        seen_reset(false);
        int rc = bench_curl_posts(&load, &r);
        out->pairs = r.done;
        out->requests = r.done + r.failed;
        out->complete = rc == 0 && r.done == load.n;
        out->seconds = (double)r.wall_ns / 1e9;
        out->per_s = r.wall_ns > 0 ? (double)r.done / out->seconds : 0;
        if (r.done > 0) {
                bench_sort_ns(b->lat_ns, (size_t)r.done);
                out->p50_ms = (double)bench_percentile_ns(b->lat_ns, (size_t)r.done, 50) / 1e6;
                out->p99_ms = (double)bench_percentile_ns(b->lat_ns, (size_t)r.done, 99) / 1e6;
                out->cpu_us = (double)r.cpu_ns / 1e3 / (double)r.done;
        }
        return out->complete ? 0 : 1;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_header(int reps, const baseline *b, bench_sink *const *sinks, int n_sinks)
{
        char durability[256];
        double load[3] = {0, 0, 0};

        bench_pg_durability(g_dsn, durability, sizeof(durability));
        getloadavg(load, 3);
        printf("bench_webhook_deliver: %ld events x %ld subscriptions = %ld deliveries a round,"
               " %ld rounds, events inserted %d a transaction; deadline %ld s a round\n",
               g_opt.n, g_opt.s, g_opt.n * g_opt.s, g_opt.rounds, TX_ROWS, g_opt.seconds);
        printf("machine: %ld CPUs, load average %.2f %.2f %.2f; libcurl %s; %s\n",
               sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2],
               curl_version_info(CURLVERSION_NOW)->version, durability);
        printf("stack %s: %d webhook replicas (KEELSON_IT_WEBHOOK_PIDS); assumed:", g_opt.dir,
               reps);
        for (int i = 0; i < S_N; i++) {
                printf(" %s=%ld (%s)", g_set[i].key + strlen("KEELSON_WEBHOOK_"), g_set[i].value,
                       g_set[i].from);
        }
        printf("\nsinks: %d on 127.0.0.1 (%s), ports", n_sinks,
               n_sinks > 1 ? "one per subscription: each its own destination"
                           : "shared: one destination for all subscriptions");
        for (int i = 0; i < n_sinks; i++) {
                printf("%s%d", i > 0 ? "," : " ", bench_sink_port(sinks[i]));
        }
        printf("; tenant %s; bodies %zu B\n", g_tenant, b->body_len);
        printf("baseline: %ld POSTs, %ld in flight = %d replicas x min(%d destinations x %ld,"
               " %ld)\n",
               g_opt.n * g_opt.s, b->concurrency, reps, n_sinks, g_set[S_DESTINATION].value,
               g_set[S_CONCURRENCY].value);
        printf("%-5s %-10s %8s %6s %8s %9s %10s %9s %9s %11s %11s\n", "round", "phase", "pairs",
               "dups", "insert s", "seconds", "per s", "p50 ms", "p99 ms", "CPU us/del",
               "PG us/del");
}

static void print_round(long round, const char *phase, const result *r, bool stack)
{
        if (stack) {
                printf("%-5ld %-10s %8ld %6ld %8.2f %9.2f %10.0f %9.1f %9.1f %11.1f %11.1f%s\n",
                       round, phase, r->pairs, r->requests - r->pairs - r->unparsed, r->insert_s,
                       r->seconds, r->per_s, r->p50_ms, r->p99_ms, r->cpu_us, r->pg_us,
                       r->complete ? "" : "  INCOMPLETE");
        } else {
                printf("%-5ld %-10s %8ld %6s %8s %9.2f %10.0f %9.2f %9.2f %11.1f %11s%s\n", round,
                       phase, r->pairs, "-", "-", r->seconds, r->per_s, r->p50_ms, r->p99_ms,
                       r->cpu_us, "-", r->complete ? "" : "  INCOMPLETE");
        }
        fflush(stdout);
}

static int by_rate(const void *a, const void *b)
{
        double x = ((const result *)a)->per_s, y = ((const result *)b)->per_s;
        return (x > y) - (x < y);
}

static void print_summary(result *st, result *bl, long rounds)
{
        long dups = 0, unparsed = 0;
        for (long i = 0; i < rounds; i++) {
                dups += st[i].requests - st[i].pairs - st[i].unparsed;
                unparsed += st[i].unparsed;
        }
        qsort(st, (size_t)rounds, sizeof(*st), by_rate);
        qsort(bl, (size_t)rounds, sizeof(*bl), by_rate);
        const result *s = &st[rounds / 2], *b = &bl[rounds / 2];
        printf("median round: stack %.0f deliveries/s (lag p50 %.1f ms, p99 %.1f ms), curl-multi"
               " %.0f POSTs/s (latency p50 %.2f ms, p99 %.2f ms); delivered/s / baseline/s:"
               " %.3f\n",
               s->per_s, s->p50_ms, s->p99_ms, b->per_s, b->p50_ms, b->p99_ms,
               b->per_s > 0 ? s->per_s / b->per_s : 0);
        printf("CPU per delivery (median round): webhook replicas %.1f us, PostgreSQL %.1f us"
               " (less %.1f us per event inserted); curl-multi's thread %.1f us per POST;"
               " duplicates %ld, unparsed requests %ld over %ld rounds\n",
               s->cpu_us, s->pg_us, s->insert_us, b->cpu_us, dups, unparsed, rounds);
}

/* ---- main ------------------------------------------------------------------------------------ */

static int parse(int argc, char **argv)
{
        g_opt = (options){.n = 20000, .s = 4, .rounds = 3, .seconds = 300};
        for (int i = 1; i < argc; i++) {
                const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                long *num = strcmp(f, "-n") == 0   ? &g_opt.n
                            : strcmp(f, "-s") == 0 ? &g_opt.s
                            : strcmp(f, "-r") == 0 ? &g_opt.rounds
                            : strcmp(f, "-t") == 0 ? &g_opt.seconds
                                                   : NULL;
                if (strcmp(f, "--shared-port") == 0) {
                        g_opt.shared_port = true;
                } else if (strcmp(f, "--stack") == 0 && v != NULL) {
                        snprintf(g_opt.dir, sizeof(g_opt.dir), "%s", v);
                        i++;
                } else if (num != NULL && v != NULL) {
                        *num = atol(v);
                        i++;
                } else {
                        return -1;
                }
        }
        if (g_opt.dir[0] == '\0' || g_opt.n < 1 || g_opt.n > EVENTS_MAX || g_opt.s < 1 ||
            g_opt.s > SUBS_MAX || g_opt.n * g_opt.s > PAIRS_MAX || g_opt.rounds < 1 ||
            g_opt.rounds > ROUNDS_MAX || g_opt.seconds < 1 || g_opt.seconds > SECONDS_MAX) {
                return -1;
        }
        return 0;
}

static void on_signal(int sig)
{
        (void)sig;
        g_stop = 1;
}

/* The sinks and the subscriptions' URLs; 0 or -1. */
static int make_sinks(PGconn *pg, bench_sink **sinks, int *n_sinks, baseline *b,
                      char secret[WH_SECRET_BYTES])
{
        const bench_sink_options so = {.body_bytes_max = SINK_BODY_MAX, .hook = on_request};

        *n_sinks = g_opt.shared_port ? 1 : (int)g_opt.s;
        b->urls_n = (size_t)g_opt.s;
        b->urls = calloc((size_t)g_opt.s, sizeof(char *));
        for (int i = 0; i < *n_sinks; i++) {
                if (bench_sink_start(&sinks[i], &so) != 0) {
                        fprintf(stderr, "bench_webhook_deliver: no sink: %s\n", strerror(errno));
                        return -1;
                }
        }
        for (long i = 0; b->urls != NULL && i < g_opt.s; i++) {
                if ((b->urls[i] = malloc(64)) == NULL) {
                        return -1;
                }
                snprintf(b->urls[i], 64, "http://127.0.0.1:%d/s%ld",
                         bench_sink_port(sinks[g_opt.shared_port ? 0 : i]), i);
                if (subscribe(pg, b->urls[i], secret) != 0) {
                        return -1;
                }
        }
        return b->urls != NULL ? 0 : -1;
}

static int run_rounds(PGconn *pg, long my_backend, const baseline *b, const uint8_t *payload,
                      size_t len)
{
        result st[ROUNDS_MAX], bl[ROUNDS_MAX];
        int rc = 0;
        long r;

        for (r = 0; r < g_opt.rounds && rc == 0 && !g_stop; r++) {
                rc = run_baseline(b, &bl[r]);
                print_round(r + 1, "curl-multi", &bl[r], false);
                if (rc != 0) {
                        break;
                }
                rc = run_stack(pg, my_backend, payload, len, &st[r]);
                print_round(r + 1, "stack", &st[r], true);
                if (rc == 0 && clean(pg, false) != 0) {
                        rc = -1;
                }
        }
        if (rc == 0 && !g_stop) {
                print_summary(st, bl, r);
        }
        return rc == 0 && !g_stop ? 0 : 1;
}

int main(int argc, char **argv)
{
        bench_sink *sinks[SUBS_MAX] = {0};
        baseline b = {0};
        char secret[WH_SECRET_BYTES];
        uint8_t *payload = NULL;
        size_t len = 0;
        int n_sinks = 0, rc = 1;

        if (parse(argc, argv) != 0) {
                fprintf(stderr,
                        "usage: bench_webhook_deliver --stack DIR [-n events 1..%d]"
                        " [-s subscriptions 1..%d] [-r rounds 1..%d] [-t seconds a"
                        " round 1..%d] [--shared-port]\n",
                        EVENTS_MAX, SUBS_MAX, ROUNDS_MAX, SECONDS_MAX);
                return 2;
        }
        if (bench_stack_env(g_opt.dir, "KEELSON_IT_PG_DSN", g_dsn, sizeof(g_dsn)) != 0) {
                fprintf(stderr,
                        "bench_webhook_deliver: no KEELSON_IT_PG_DSN in %s/env (a stack"
                        " from deploy/local/stack.sh start --dir %s)\n",
                        g_opt.dir, g_opt.dir);
                return 1;
        }
        read_settings();
        int reps = replicas("KEELSON_IT_WEBHOOK_PIDS");
        PGconn *pg = PQconnectdb(g_dsn);
        if (PQstatus(pg) != CONNECTION_OK || reps < 1 || ks_uuid_v4(g_tenant) != 0 ||
            seen_init(g_opt.n * g_opt.s) != 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
                fprintf(stderr, "bench_webhook_deliver: set-up failed (%d webhook replicas): %s",
                        reps, PQerrorMessage(pg));
                PQfinish(pg);
                return 1;
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        long my_backend = (long)query_num(pg, "SELECT pg_backend_pid()", 0, NULL);
        if (make_sinks(pg, sinks, &n_sinks, &b, secret) == 0 && invoice_paid(&payload, &len) == 0 &&
            baseline_make(&b, payload, len, secret) == 0) {
                long per_replica = (long)n_sinks * g_set[S_DESTINATION].value;
                if (per_replica > g_set[S_CONCURRENCY].value) {
                        per_replica = g_set[S_CONCURRENCY].value;
                }
                b.concurrency = reps * per_replica;
                print_header(reps, &b, sinks, n_sinks);
                rc = run_rounds(pg, my_backend, &b, payload, len);
        } else {
                fprintf(stderr, "bench_webhook_deliver: set-up failed\n");
        }
        if (clean(pg, true) != 0) {
                rc = 1;
        }
        for (int i = 0; i < n_sinks; i++) {
                bench_sink_stop(sinks[i]);
        }
        for (size_t i = 0; b.urls != NULL && i < b.urls_n; i++) {
                free(b.urls[i]);
        }
        free(b.urls);
        free(b.body);
        free(b.lat_ns);
        free(payload);
        free(g_seen.slots);
        free(g_seen.lag_ns);
        PQfinish(pg);
        curl_global_cleanup();
        return rc;
}
