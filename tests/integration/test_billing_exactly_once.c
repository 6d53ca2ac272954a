/*
 * Billing's hardest promise, under SIGKILL: a billing or a ledger replica
 * killed at any moment never loses or doubles a posting, and a client that
 * retries under its Idempotency-Key gets one effect per key.
 *
 * The test runs a stack of its own on the stack's database, so that what it
 * kills serves nobody else: a broker (a process), and behind it one auth
 * replica (outbox relay off: its events would reach nobody there), one
 * ledger replica, one billing replica (outbox relay and scheduler off, its
 * ledger relay polling every 10 ms, its ledger calls' deadline 1 s) and a
 * gateway in front. The stack's own billing replicas still run their relays
 * on the same queue (billing.postings is shared by every replica on the
 * database) and post part of the test's chains through the stack's ledger:
 * the production shape (any relay may post any row). Between two ledger
 * kills the test waits for its own relay to post through its ledger.
 *
 * Client threads, each a payments API client, create subscriptions (each
 * makes, finalizes and, with a card, charges an invoice, and queues its
 * postings) and one-off invoices (CreateInvoice, then FinalizeInvoice,
 * charged or not; some with a negative total, which makes customer credit
 * that later invoices apply) in one tenant, through the test's gateway,
 * every write under an Idempotency-Key of its own, sent again with the same
 * key after a failure (a 504 when the replica died under the call, a 409
 * while the dead replica's transaction still holds the key).
 *
 *   a. Meanwhile the billing replica is killed (SIGKILL) and started again,
 *      six times, in turn: inside a call's write transaction; while its
 *      relay holds claimed postings (it waits for the ledger); at a call's
 *      COMMIT (committed, its reply perhaps not sent: the retry is then
 *      answered by a replay, when the kill beat the reply).
 *   b. The same with the ledger replica killed instead, in turn: while the
 *      test's relay waits for it; inside a batch's transaction; between a
 *      batch's reads and its write. The ledger sends a batch's write with
 *      its COMMIT, so a kill after that still commits the batch (the
 *      relay's resend meets exists) and one before rolls it back (the resend
 *      is then ok): both happen.
 *
 * A kill point is found in pg_stat_activity among the backends of the
 * watched replica (their client ports: its TCP connections to PostgreSQL,
 * from /proc); when none shows within a bounded wait the replica is killed
 * anyway and the test says so. At the end, with the last replicas up: every
 * posting is sent and none failed; the ledger holds exactly one chain per
 * finalized invoice (the count of transfers whose user_data_128 is the
 * invoice is the number of non-zero parts of its chain, postings.c) and per
 * payment, no (fact, code) twice, every amount as billing's rows say; every
 * operation answered 200 made exactly one object (as many invoices and
 * subscriptions in the tenant as operations, each operation's invoice a
 * distinct, finalized one; one stored outcome per key); and
 * GetReconciliation, through the test's gateway and its last billing
 * replica, finds nothing wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "billing_it.h"
#include "ks_clock.h"

#define THREADS            6
#define CUSTOMERS          4
#define OPS_MAX            1000  /* per client thread: more than a run makes */
#define ATTEMPTS_MAX       80    /* of one call under one key */
#define OP_WAIT_MS         30000 /* one operation, every attempt of its calls */
#define CALL_TIMEOUT_MS    "1500"
#define BILLING_KILLS      6
#define LEDGER_KILLS       6
#define PROGRESS           8 /* operations completed between two kills */
#define PROGRESS_WAIT_MS   30000
#define RELAY_PROGRESS     10 /* postings the test's relay posts between two ledger kills */
#define LEDGER_PACE_MS     50 /* a client's pause between operations while the ledger is killed */
#define KILL_POINT_WAIT_MS 3000
#define PORTS_MAX          64
#define INODES_MAX         1024
#define POSTED_WAIT_MS     30000

/* ---- the test's own stack ------------------------------------------------------------ */

static struct {
        int broker_pid;
        char base[64];
        char env_broker[96];
        char env_auth_login[900], env_billing_login[900], env_ledger_login[900];
        it_service auth, billing, ledger;
        it_gateway gateway;
        int pg_port;
} g;

static int start_billing(void)
{
        const char *env[] = {g.env_broker,
                             g.env_billing_login,
                             "KEELSON_BILLING_OUTBOX_RELAY=false",
                             "KEELSON_BILLING_SCHEDULER=false",
                             "KEELSON_BILLING_RELAY_POLL_MS=10",
                             "KEELSON_BILLING_LEDGER_TIMEOUT_MS=1000",
                             NULL};

        return it_service_start(&ait_stack, "keelson-billing", "KEELSON_BILLING", env, &g.billing);
}

static int start_ledger(void)
{
        const char *env[] = {g.env_broker, g.env_ledger_login,
                             "KEELSON_LEDGER_EXPIRY_INTERVAL_MS=60000", NULL};

        return it_service_start(&ait_stack, "keelson-ledger", "KEELSON_LEDGER", env, &g.ledger);
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g.gateway);
        it_service_stop(&g.billing);
        it_service_stop(&g.ledger);
        it_service_stop(&g.auth);
        it_pid_stop(&g.broker_pid, SIGTERM);
        return 0;
}

static int setup(void **state)
{
        if (bit_setup(state) != 0 ||
            it_stack_env_as("KEELSON_IT_AUTH_LOGIN_DSN", "KEELSON_AUTH_PG_LOGIN_DSN",
                            g.env_auth_login, sizeof(g.env_auth_login)) != 0 ||
            it_stack_env_as("KEELSON_IT_BILLING_LOGIN_DSN", "KEELSON_BILLING_PG_LOGIN_DSN",
                            g.env_billing_login, sizeof(g.env_billing_login)) != 0 ||
            it_stack_env_as("KEELSON_IT_LEDGER_LOGIN_DSN", "KEELSON_LEDGER_PG_LOGIN_DSN",
                            g.env_ledger_login, sizeof(g.env_ledger_login)) != 0) {
                return -1;
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        if ((g.broker_pid = it_broker_start(&ait_stack, g.base, sizeof(g.base))) <= 0) {
                g.broker_pid = 0;
                return -1;
        }
        snprintf(g.env_broker, sizeof(g.env_broker), "KEELSON_BROKER_URL=%s", g.base);
        const char *auth_env[] = {g.env_broker, g.env_auth_login, "KEELSON_AUTH_OUTBOX_RELAY=false",
                                  NULL};
        const char *gateway_env[] = {g.env_broker, "KEELSON_GATEWAY_RATE_AUTH=100000:100000/1s",
                                     "KEELSON_GATEWAY_RATE_API=100000:100000/1s",
                                     "KEELSON_GATEWAY_RATE_RESOLVE=100000:100000/1s", NULL};
        if (it_service_start(&ait_stack, "keelson-auth", "KEELSON_AUTH", auth_env, &g.auth) != 0 ||
            start_ledger() != 0 || start_billing() != 0 ||
            it_gateway_start(&ait_stack, gateway_env, 1, &g.gateway) != 0) {
                teardown(state); /* cmocka runs no teardown after a failed setup */
                return -1;
        }
        g.pg_port = (int)ait_sql_long("SELECT inet_server_port()", 0, NULL);
        return 0;
}

/* ---- kill points: the killed process's backends in pg_stat_activity ---------------------- */

/* The inodes of pid's sockets; their count. */
static int socket_inodes(int pid, unsigned long *inodes, int max)
{
        char dir[64], link[320], target[64];
        struct dirent *e;
        DIR *d;
        int n = 0;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
        if ((d = opendir(dir)) == NULL) {
                return 0;
        }
        while ((e = readdir(d)) != NULL && n < max) {
                snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
                ssize_t k = readlink(link, target, sizeof(target) - 1);
                if (k <= 0) {
                        continue;
                }
                target[k] = '\0';
                if (sscanf(target, "socket:[%lu]", &inodes[n]) == 1) {
                        n++;
                }
        }
        closedir(d);
        return n;
}

/*
 * As a PostgreSQL array literal, the local ports of pid's TCP connections to
 * PostgreSQL: the client_port of its backends in pg_stat_activity.
 */
static void backend_ports(int pid, char *out, size_t len)
{
        static const char *const tables[] = {"/proc/%d/net/tcp", "/proc/%d/net/tcp6"};
        unsigned long inodes[INODES_MAX];
        int n_inodes = socket_inodes(pid, inodes, INODES_MAX), n = 0;
        size_t used = (size_t)snprintf(out, len, "{");

        for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]) && n < PORTS_MAX; t++) {
                char path[64], line[512];
                snprintf(path, sizeof(path), tables[t], pid);
                FILE *f = fopen(path, "r");
                if (f == NULL) {
                        continue;
                }
                while (fgets(line, sizeof(line), f) != NULL && n < PORTS_MAX) {
                        unsigned local = 0, remote = 0;
                        unsigned long inode = 0;
                        if (sscanf(line,
                                   " %*s %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %*s %*s %*s %*s %*s"
                                   " %*s %lu",
                                   &local, &remote, &inode) != 3 ||
                            (int)remote != g.pg_port) {
                                continue;
                        }
                        for (int i = 0; i < n_inodes; i++) {
                                if (inodes[i] == inode && used + 8 < len) {
                                        used += (size_t)snprintf(out + used, len - used, "%s%u",
                                                                 n > 0 ? "," : "", local);
                                        n++;
                                }
                        }
                }
                fclose(f);
        }
        snprintf(out + used, len - used, "}");
}

/* Where to kill: when a backend of the watched replica matches a condition. */
typedef struct kill_point {
        const char *name;
        it_service *watched;
        const char *where; /* a condition on pg_stat_activity */
} kill_point;

/* The relay's claim, holding rows (a lock takes a transaction id) while it calls the ledger. */
#define RELAY_WAITS "backend_xid IS NOT NULL AND query LIKE '%billing.postings%SKIP LOCKED%'"

static const kill_point billing_points[3] = {
    {"inside a call's write transaction", &g.billing,
     "backend_xid IS NOT NULL AND query NOT LIKE '%FROM billing.postings%'"
     " AND query NOT LIKE 'UPDATE billing.postings%'"},
    {"while its relay holds claimed postings", &g.billing, RELAY_WAITS},
    /* Committed, the reply perhaps not sent yet: the client's retry is then a replay. */
    {"at a call's COMMIT", &g.billing,
     "query = 'COMMIT' AND (state = 'active' OR (state = 'idle'"
     " AND clock_timestamp() - state_change < interval '2 milliseconds'))"},
};

/*
 * The ledger sends a batch's write with its COMMIT (architecture.md), so a
 * kill once the write is sent still commits it (the relay's resend then
 * meets exists), and a kill before it rolls the batch back (the resend is
 * then ok): the first and last points reach both.
 */
static const kill_point ledger_points[3] = {
    {"while the relay waits for it", &g.billing, RELAY_WAITS},
    {"inside a batch's transaction", &g.ledger, "backend_xid IS NOT NULL"},
    {"between a batch's reads and its write", &g.ledger,
     "backend_xid IS NOT NULL AND state = 'idle in transaction'"},
};

/* Waits (bounded) until a backend of kp's watched replica matches; whether one did. */
static bool wait_kill_point(PGconn *pg, const kill_point *kp)
{
        char ports[PORTS_MAX * 8 + 4] = "{}", sql[512];
        const char *p[1] = {ports};

        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY($1::int[])"
                 " AND pid <> pg_backend_pid() AND %s",
                 kp->where);
        int64_t until = ks_now_ms() + KILL_POINT_WAIT_MS;
        for (int i = 0; ks_now_ms() < until; i++) {
                if (i % 50 == 0) { /* a pool may open connections as it goes */
                        backend_ports(kp->watched->pid, ports, sizeof(ports));
                }
                if (strcmp(ports, "{}") != 0 && it_sql_long(pg, sql, 1, p) > 0) {
                        return true;
                }
        }
        return false;
}

/* ---- clients -------------------------------------------------------------------------- */

typedef struct op {
        bool subscription; /* else a one-off invoice */
        char invoice_id[BIT_ID_MAX];
} op;

typedef struct client {
        int n;
        const bit_tenant *t;
        char (*customers)[BIT_ID_MAX];
        op ops[OPS_MAX];
        int n_ops;
        long calls, retries, replays, keys;
        long by_status[6]; /* retried: 409, 429, 500, 503, 504, other */
        char error[600];
        char unexpected[300]; /* the first retried reply no kill explains: a 500, or another */
} client;

static int64_t g_t0;  /* when the clients started: times in messages are from it */
static int g_pace_ms; /* a client's pause between two operations */
static atomic_int g_completed;
static atomic_int g_active;
static atomic_bool g_stop;

/*
 * Counts a retried reply by status. A kill explains a 504 (the replica died
 * under the call), a 503 (no replica yet), a 409 (the dead replica's
 * transaction still holds the key) and a 429; a 500 or no reply at all it
 * does not: the first such is kept.
 */
static void count_retry(client *c, long status, const it_http_response *r)
{
        static const long statuses[5] = {409, 429, 500, 503, 504};
        int k = 5;

        for (int i = 0; i < 5; i++) {
                if (statuses[i] == status) {
                        k = i;
                }
        }
        c->by_status[k]++;
        c->retries++;
        if ((k == 2 || k == 5) && c->unexpected[0] == '\0') {
                snprintf(c->unexpected, sizeof(c->unexpected), "HTTP %ld: %.200s", status,
                         r != NULL && r->body != NULL ? r->body : "(no reply)");
        }
}

/* A status after which the same request under the same key may succeed. */
static bool retryable(long status)
{
        return status == 0 || status == 409 || status == 429 || status >= 500;
}

/*
 * One write under key, sent again with the same key until it answers 200 (a
 * payments client's retry), within ATTEMPTS_MAX and OP_WAIT_MS. *out: the
 * reply, parsed. Returns 0, or -1 with c->error set.
 */
static int keyed(client *c, const char *method, const char *key, const char *json, json_t **out)
{
        char idem[300];
        const char *headers[3] = {idem, "Connect-Timeout-Ms: " CALL_TIMEOUT_MS, NULL};
        int64_t until = ks_now_ms() + OP_WAIT_MS;
        it_http_response r;

        snprintf(idem, sizeof(idem), "Idempotency-Key: %s", key);
        c->keys++;
        for (int attempt = 0; attempt < ATTEMPTS_MAX && ks_now_ms() < until; attempt++) {
                c->calls++;
                int rc = bit_post(g.gateway.url, c->t->owner.token, headers, method, json, &r);
                long status = rc == 0 ? r.status : 0;
                if (status == 200) {
                        char v[16];
                        *out = json_loadb(r.body, r.body_len, 0, NULL);
                        if (it_http_header(&r, "Idempotent-Replayed", v, sizeof(v)) == 0 &&
                            strcmp(v, "true") == 0) {
                                c->replays++;
                        }
                        it_http_response_free(&r);
                        if (*out == NULL) {
                                snprintf(c->error, sizeof(c->error), "%s: a 200 not in JSON",
                                         method);
                                return -1;
                        }
                        return 0;
                }
                if (!retryable(status)) {
                        snprintf(c->error, sizeof(c->error), "%s (%s): HTTP %ld: %.400s", method,
                                 key, status, r.body);
                        it_http_response_free(&r);
                        return -1;
                }
                count_retry(c, status, rc == 0 ? &r : NULL);
                if (rc == 0) {
                        it_http_response_free(&r);
                }
                it_sleep_ms(10 + 10 * (attempt < 10 ? attempt : 10));
        }
        snprintf(c->error, sizeof(c->error), "%s (%s): no 200 within %d attempts or %d ms", method,
                 key, ATTEMPTS_MAX, OP_WAIT_MS);
        return -1;
}

/* The invoice of a reply (at path), which must be finalized: its id into o. */
static int take_invoice(client *c, json_t *j, const char *path, op *o)
{
        json_t *inv = bit_at(j, path);
        const char *state = bit_str(inv, "state");

        snprintf(o->invoice_id, sizeof(o->invoice_id), "%s", bit_str(inv, "id"));
        if (strlen(o->invoice_id) != 36 || strcmp(state, "draft") == 0 ||
            bit_str(inv, "number")[0] == '\0') {
                char *s = json_dumps(j, JSON_COMPACT);
                snprintf(c->error, sizeof(c->error), "not a finalized invoice: %.500s", s);
                free(s);
                return -1;
        }
        return 0;
}

static int subscribe(client *c, int i, const char *customer, op *o)
{
        char key[64], json[256];
        json_t *j = NULL;

        o->subscription = true;
        snprintf(key, sizeof(key), "sub-%d-%d", c->n, i);
        snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", customer);
        if (keyed(c, "CreateSubscription", key, json, &j) != 0) {
                return -1;
        }
        int rc = take_invoice(c, j, "latestInvoice", o);
        json_decref(j);
        return rc;
}

/*
 * A one-off invoice: every fourth one (the second first) a credit (a negative total), the others
 * a fee and a discount; charged at once when finalized, every other time,
 * for a customer with a card (auto_charge refuses a customer without one).
 */
static int invoice(client *c, int i, const char *customer, bool has_card, op *o)
{
        char key[64], json[512];
        bool credit = (i / 3) % 4 == 1, charge = has_card && (i / 3) % 2 == 0;
        json_t *j = NULL;
        int rc;

        o->subscription = false;
        snprintf(key, sizeof(key), "inv-%d-%d", c->n, i);
        snprintf(json, sizeof(json),
                 "{\"customerId\":\"%s\",\"description\":\"one-off %d/%d\",\"lines\":[%s]}",
                 customer, c->n, i,
                 credit ? "{\"description\":\"Goodwill credit\",\"unitAmount\":\"-900\"}"
                        : "{\"description\":\"Setup fee\",\"quantity\":\"2\",\"unitAmount\":"
                          "\"1500\"},{\"description\":\"Loyalty discount\",\"unitAmount\":"
                          "\"-700\",\"taxExempt\":true}");
        if (keyed(c, "CreateInvoice", key, json, &j) != 0) {
                return -1;
        }
        snprintf(o->invoice_id, sizeof(o->invoice_id), "%s", bit_str(j, "invoice.id"));
        json_decref(j);
        snprintf(key, sizeof(key), "fin-%d-%d", c->n, i);
        snprintf(json, sizeof(json), "{\"id\":\"%s\",\"autoCharge\":%s}", o->invoice_id,
                 charge ? "true" : "false");
        if (keyed(c, "FinalizeInvoice", key, json, &j) != 0) {
                return -1;
        }
        char made[BIT_ID_MAX];
        snprintf(made, sizeof(made), "%s", o->invoice_id);
        rc = take_invoice(c, j, "invoice", o);
        json_decref(j);
        if (rc == 0 && strcmp(made, o->invoice_id) != 0) {
                snprintf(c->error, sizeof(c->error), "FinalizeInvoice of %s answered %s", made,
                         o->invoice_id);
                return -1;
        }
        return rc;
}

static void *client_main(void *arg)
{
        client *c = arg;

        for (int i = 0; i < OPS_MAX && !atomic_load(&g_stop); i++) {
                int k = (c->n + i) % CUSTOMERS;
                op *o = &c->ops[i];
                int rc = i % 3 == 2 ? invoice(c, i, c->customers[k], k % 2 == 0, o)
                                    : subscribe(c, i, c->customers[k], o);
                if (rc != 0) {
                        break;
                }
                c->n_ops++;
                atomic_fetch_add(&g_completed, 1);
                if (g_pace_ms > 0) {
                        it_sleep_ms(g_pace_ms);
                }
        }
        atomic_fetch_sub(&g_active, 1);
        return NULL;
}

/* ---- the workload and its checks ------------------------------------------------------- */

typedef struct run {
        bit_tenant t;
        char customers[CUSTOMERS][BIT_ID_MAX];
        client clients[THREADS];
        pthread_t threads[THREADS];
} run;

/* The run whose client threads are running, if any: a failed test's are joined by its teardown. */
/* The run whose client threads are running, if any (a failed test's teardown joins them). */
static run *g_running;
static const char *join_clients(void);

static void start_clients(run *r, const char *prefix, int pace_ms)
{
        /* Even customers have a card (client_main relies on it). */
        static const char *const pms[CUSTOMERS] = {"pm_card_visa", "", "pm_card_visa", ""};
        static const int taxes[CUSTOMERS] = {0, 825, 1000, 0};

        bit_tenant_new(prefix, &r->t);
        bit_plan(&r->t, "pro", "USD", "FLAT", 1200, "MONTH", 1, 0);
        for (int i = 0; i < CUSTOMERS; i++) {
                bit_customer(&r->t, "USD", taxes[i], pms[i], "", r->customers[i]);
        }
        g_pace_ms = pace_ms;
        g_t0 = ks_now_ms();
        atomic_store(&g_completed, 0);
        atomic_store(&g_active, THREADS);
        atomic_store(&g_stop, false);
        for (int i = 0; i < THREADS; i++) {
                r->clients[i] = (client){.n = i, .t = &r->t, .customers = r->customers};
        }
        for (int i = 0; i < THREADS; i++) {
                if (pthread_create(&r->threads[i], NULL, client_main, &r->clients[i]) != 0) {
                        atomic_store(&g_stop, true);
                        while (i-- > 0) {
                                pthread_join(r->threads[i], NULL);
                        }
                        fail_msg("no client thread");
                }
        }
        g_running = r;
}

/* Waits (bounded) until the clients have completed `more` operations past *mark. */
static void wait_progress(int *mark, int more)
{
        int64_t until = ks_now_ms() + PROGRESS_WAIT_MS;

        while (atomic_load(&g_completed) < *mark + more && atomic_load(&g_active) > 0 &&
               ks_now_ms() < until) {
                it_sleep_ms(5);
        }
        if (atomic_load(&g_completed) < *mark + more) {
                int done = atomic_load(&g_completed) - *mark, running = atomic_load(&g_active);
                fail_msg("the clients made %d operations of %d in %d ms (%d running): %s", done,
                         more, PROGRESS_WAIT_MS, running, join_clients());
        }
        *mark = atomic_load(&g_completed);
}

/* Stops and joins the running clients, if any; the first one's error, or "". */
static const char *join_clients(void)
{
        run *r = g_running;

        if (r == NULL) {
                return "";
        }
        atomic_store(&g_stop, true);
        for (int i = 0; i < THREADS; i++) {
                pthread_join(r->threads[i], NULL);
        }
        g_running = NULL;
        for (int i = 0; i < THREADS; i++) {
                if (r->clients[i].error[0] != '\0') {
                        return r->clients[i].error;
                }
        }
        return "";
}

static void stop_clients(run *r)
{
        long ops = 0, calls = 0, retries = 0, replays = 0;
        long st[6] = {0};

        assert_ptr_equal(g_running, r);
        (void)join_clients(); /* every client's error is reported below */
        for (int i = 0; i < THREADS; i++) {
                const client *c = &r->clients[i];
                if (c->error[0] != '\0') {
                        fail_msg("client %d: %s", i, c->error);
                }
                if (c->unexpected[0] != '\0') {
                        fail_msg("client %d: a reply no kill explains: %s", i, c->unexpected);
                }
                ops += c->n_ops;
                calls += c->calls;
                retries += c->retries;
                replays += c->replays;
                for (int k = 0; k < 6; k++) {
                        st[k] += c->by_status[k];
                }
        }
        print_message("%.1f s: %ld operations, %ld calls, %ld retried (409 %ld, 429 %ld, 500 %ld,"
                      " 503 %ld, 504 %ld, other %ld), %ld answered by a replay\n",
                      (double)(ks_now_ms() - g_t0) / 1000, ops, calls, retries, st[0], st[1], st[2],
                      st[3], st[4], st[5], replays);
}

static int uuid_cmp(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every operation made one invoice, its own, finalized; one stored outcome per key. */
static void check_outcomes(const run *r)
{
        const char *tenant = r->t.owner.tenant_id;
        const char *p[2] = {tenant, NULL};
        const char *ids[THREADS * OPS_MAX];
        long n = 0, subs = 0, keys = 0;

        for (int i = 0; i < THREADS; i++) {
                const client *c = &r->clients[i];
                keys += c->keys;
                for (int k = 0; k < c->n_ops; k++) {
                        ids[n++] = c->ops[k].invoice_id;
                        subs += c->ops[k].subscription;
                }
        }
        assert_true(n >= (long)PROGRESS);
        qsort(ids, (size_t)n, sizeof(ids[0]), uuid_cmp);
        for (long i = 1; i < n; i++) {
                if (strcmp(ids[i - 1], ids[i]) == 0) {
                        fail_msg("two operations answered the same invoice %s", ids[i]);
                }
        }
        /* Exactly the invoices the operations were answered: none made twice, none lost. */
        long stored =
            ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id = $1::uuid", 1, p);
        if (stored != n) {
                fail_msg("%ld invoices in the tenant for %ld operations answered", stored, n);
        }
        stored = ait_sql_long(
            "SELECT count(*) FROM billing.subscriptions WHERE tenant_id = $1::uuid", 1, p);
        if (stored != subs) {
                fail_msg("%ld subscriptions in the tenant for %ld CreateSubscription answered",
                         stored, subs);
        }
        /* Each one finalized (numbered, not a draft). */
        char *list = malloc((size_t)n * (BIT_ID_MAX + 1) + 3);
        size_t used = 1;
        assert_non_null(list);
        list[0] = '{';
        for (long i = 0; i < n; i++) {
                used += (size_t)sprintf(list + used, "%s%s", i > 0 ? "," : "", ids[i]);
        }
        memcpy(list + used, "}", 2);
        p[1] = list;
        stored = ait_sql_long("SELECT count(*) FROM billing.invoices WHERE tenant_id = $1::uuid"
                              " AND id = ANY($2::uuid[]) AND state <> 0 AND number IS NOT NULL",
                              2, p);
        free(list);
        if (stored != n) {
                fail_msg("%ld of the %ld invoices answered are finalized", stored, n);
        }
        /* One stored outcome per key, a success. */
        stored = ait_sql_long("SELECT count(*) FROM billing.idempotency_keys"
                              " WHERE tenant_id = $1::uuid AND code = 0",
                              1, p);
        if (stored != keys) {
                fail_msg("%ld successful outcomes stored for %ld keys", stored, keys);
        }
}

/* The parts of an invoice's chain that are not zero (postings.c): 101, 102, 103, 104. */
static const char sql_chain_count_wrong[] =
    "SELECT count(*) FROM billing.invoices i WHERE i.tenant_id = $1::uuid AND i.state <> 0"
    " AND (SELECT count(*) FROM ledger.transfers t WHERE t.tenant_id = i.tenant_id"
    "      AND t.user_data_128 = i.id)"
    "  <> (i.subtotal <> 0)::int + (i.tax <> 0)::int + (i.balance_applied <> 0)::int"
    "     + (i.total < 0)::int";

static const char sql_payment_count_wrong[] =
    "SELECT count(*) FROM billing.payments p WHERE p.tenant_id = $1::uuid AND p.status = 1"
    " AND (SELECT count(*) FROM ledger.transfers t WHERE t.tenant_id = p.tenant_id"
    "      AND t.user_data_128 = p.id) <> 1";

static const char sql_twice[] =
    "SELECT count(*) FROM (SELECT user_data_128, code FROM ledger.transfers"
    " WHERE tenant_id = $1::uuid GROUP BY 1, 2 HAVING count(*) > 1) d";

static void expect_none(const char *tenant, const char *sql, const char *what)
{
        const char *p[1] = {tenant};
        long n = ait_sql_long(sql, 1, p);

        if (n != 0) {
                fail_msg("%ld %s", n, what);
        }
}

/* Drained, then exactly one chain per fact in the ledger, and a clean reconciliation. */
static void check_ledger(const run *r)
{
        const char *tenant = r->t.owner.tenant_id, *p[1] = {tenant};

        bit_wait_posted(tenant, POSTED_WAIT_MS);
        print_message("%.1f s: every posting sent\n", (double)(ks_now_ms() - g_t0) / 1000);
        expect_none(tenant,
                    "SELECT count(*) FROM billing.postings WHERE tenant_id = $1::uuid AND failed",
                    "postings failed");
        expect_none(tenant, sql_chain_count_wrong,
                    "finalized invoices whose transfers in the ledger are not one chain");
        expect_none(tenant, sql_payment_count_wrong,
                    "succeeded payments whose transfers in the ledger are not one");
        expect_none(tenant, sql_twice, "(fact, code) pairs held twice in the ledger");
        long wrong = bit_ledger_mismatches(tenant);
        if (wrong != 0) {
                fail_msg("%ld transfers missing from the ledger or there too often", wrong);
        }
        /* Not vacuous: revenue, tax and payments at least (credit depends on the order run). */
        PGconn *pg = ait_pg();
        PGresult *res = it_sql(pg,
                               "SELECT code, count(*) FROM ledger.transfers"
                               " WHERE tenant_id = $1::uuid GROUP BY 1 ORDER BY 1",
                               1, p);
        int have = 0;
        print_message("transfers by code:");
        for (int i = 0; i < PQntuples(res); i++) {
                int code = atoi(PQgetvalue(res, i, 0));
                have += code == 101 || code == 102 || code == 111;
                print_message(" %d: %s", code, PQgetvalue(res, i, 1));
        }
        print_message("\n");
        PQclear(res);
        PQfinish(pg);
        assert_int_equal(have, 3);
        json_t *j = bit_reconcile_clean_at(g.gateway.url, &r->t);
        print_message(
            "%.1f s: reconciliation: %lld invoices, %lld payments, %lld transfers found\n",
            (double)(ks_now_ms() - g_t0) / 1000, (long long)bit_int(j, "invoices"),
            (long long)bit_int(j, "payments"), (long long)bit_int(j, "transfersFound"));
        assert_int_equal(bit_int(j, "transfersFound"), bit_int(j, "transfersExpected"));
        json_decref(j);
}

/* ---- the tests ---------------------------------------------------------------------------- */

static void kill_and_restart(PGconn *pg, it_service *svc, const kill_point *kp, int k)
{
        int64_t t0 = ks_now_ms();
        bool seen = wait_kill_point(pg, kp);
        int64_t t1 = ks_now_ms();

        it_pid_stop(&svc->pid, SIGKILL);
        assert_int_equal(svc == &g.billing ? start_billing() : start_ledger(), 0);
        print_message("%.1f s: kill %d: %s (found in %lld ms, up again in %lld ms)\n",
                      (double)(t1 - g_t0) / 1000, k + 1,
                      seen ? kp->name : "no kill point seen: at random", (long long)(t1 - t0),
                      (long long)(ks_now_ms() - t1));
}

static void test_billing_killed(void **state)
{
        (void)state;
        static run r;
        PGconn *pg = ait_pg();
        int mark = 0;

        start_clients(&r, "bl-eo-billing", 0);
        for (int k = 0; k < BILLING_KILLS; k++) {
                wait_progress(&mark, PROGRESS);
                kill_and_restart(pg, &g.billing, &billing_points[k % 3], k);
        }
        wait_progress(&mark, PROGRESS); /* the last replica serves */
        stop_clients(&r);
        PQfinish(pg);
        check_outcomes(&r);
        check_ledger(&r);
}

/* Postings the test's billing replica's relay has posted (acknowledged by the ledger). */
static double relay_posted(void)
{
        return it_metric_sum_at(g.billing.health_port, "keelson_billing_postings_posted_total",
                                NULL);
}

/*
 * Waits (bounded) until the test's relay has posted `more` postings past
 * *mark: it posts through the (new) ledger replica. The stack's relays
 * share the queue, so this is what makes the kills hit the relay at work.
 */
static void wait_relay_progress(double *mark, int more)
{
        int64_t until = ks_now_ms() + PROGRESS_WAIT_MS;
        double now;

        while ((now = relay_posted()) < *mark + more && atomic_load(&g_active) > 0 &&
               ks_now_ms() < until) {
                it_sleep_ms(20);
        }
        if (now < *mark + more) {
                fail_msg(
                    "the test's relay posted %.0f postings of %d in %d ms (%d clients running)",
                    now - *mark, more, PROGRESS_WAIT_MS, atomic_load(&g_active));
        }
        *mark = now;
}

static void test_ledger_killed(void **state)
{
        (void)state;
        static run r;
        PGconn *pg = ait_pg();
        int mark = 0;
        const char *errors = "keelson_billing_relay_errors_total";
        double errors_before = it_metric_sum_at(g.billing.health_port, errors, "kind=\"ledger\"");
        double posted_before = relay_posted(), posted_mark = posted_before;

        /* Paced: what is killed is the ledger; the relay needs a steady flow, not a flood. */
        start_clients(&r, "bl-eo-ledger", LEDGER_PACE_MS);
        for (int k = 0; k < LEDGER_KILLS; k++) {
                wait_progress(&mark, PROGRESS);
                wait_relay_progress(&posted_mark, RELAY_PROGRESS);
                kill_and_restart(pg, &g.ledger, &ledger_points[k % 3], k);
        }
        /* The relay keeps retrying: it posts again through the last replica. */
        wait_progress(&mark, PROGRESS);
        wait_relay_progress(&posted_mark, RELAY_PROGRESS);
        stop_clients(&r);
        PQfinish(pg);
        check_outcomes(&r);
        check_ledger(&r);
        const char *p[1] = {r.t.owner.tenant_id};
        print_message(
            "the test's relay: %.0f rounds failed against the ledger, %.0f postings"
            " posted of the tenant's %ld\n",
            it_metric_sum_at(g.billing.health_port, errors, "kind=\"ledger\"") - errors_before,
            relay_posted() - posted_before,
            ait_sql_long("SELECT count(*) FROM billing.postings WHERE tenant_id = $1::uuid", 1, p));
}

/* After a test, failed or not: its clients joined, and a replica it killed up again. */
static int test_teardown(void **state)
{
        (void)state;
        (void)join_clients();
        if (g.billing.pid <= 0 && start_billing() != 0) {
                return -1;
        }
        if (g.ledger.pid <= 0 && start_ledger() != 0) {
                return -1;
        }
        return 0;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_teardown(test_billing_killed, test_teardown),
            cmocka_unit_test_teardown(test_ledger_killed, test_teardown),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
