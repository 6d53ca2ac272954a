/*
 * Scale-out: every replica of every service takes work, and a kill -9 of
 * any one process (a broker, a replica of each service, a gateway) under
 * load loses no acknowledged write; the process, restarted as it was
 * started (stack.sh restart), rejoins without configuration.
 *
 * The test starts a stack of its own (build/it-stack-scale: two brokers,
 * three replicas of each service, two gateways; the suite's stack is left
 * alone), signs one tenant up and runs a mixed load from LOAD_THREADS
 * threads through both gateways: WhoAmI, GetSummary,
 * ListWebhookSubscriptions, CreateTransfers batches, CreateCustomer then
 * CreateSubscription under Idempotency-Keys, and now and then a Login.
 * The clients retry as docs/api.md says a client may: a dropped connection
 * (on the other gateway, which the clients then use alone for a second, as a
 * load balancer would), 429, 503, 504 and 409
 * `aborted`; ledger batches are resent whole, billing writes with the same
 * key. Any other failure fails the test.
 *
 * After WARM_S of load every replica's own /metrics must show requests it
 * served. Then, one after the other, each of KILLS is killed with SIGKILL
 * and restarted (stack.sh restart NAME --signal KILL), and the load goes
 * on for SETTLE_MS. The error window of a kill (from the kill to the last
 * failed attempt a client saw before the next kill) is printed, with the
 * failures per code; the only bound on it catches a hang (WINDOW_MAX_MS).
 * Last, with the load stopped: every transfer answered ok or exists is
 * there with its amount, every account's balances are the sums of the
 * acknowledged transfers, billing holds exactly the customers and
 * subscriptions acknowledged and its reconciliation has no discrepancy, and
 * every process killed answered requests again.
 *
 * tools/bench_scale_out.sh runs this program against stacks of its own
 * (KEELSON_SCALE_STACK: use that stack, start and stop none) and reads the
 * "scale_out:" lines it prints: requests per second and CPU per process
 * group over the warm phase.
 */
#include "billing_it.h"
#include "ledger_it.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ks_clock.h"

#define LOAD_THREADS     4
#define WARM_S           10    /* load before the kills (KEELSON_SCALE_WARM_S overrides) */
#define SETTLE_MS        2000  /* load after each restart, before the next kill */
#define WINDOW_MAX_MS    30000 /* a longer error window is a hang */
#define OP_WAIT_MS       60000 /* a request retried longer than this fails the test */
#define ACCOUNTS         16
#define BATCH            32
#define TRANSFERS_MAX    65536 /* per thread; past it the thread sends no more batches */
#define GATEWAY_DOWN_MS  1000  /* a gateway that dropped a connection is left alone this long */
#define CODES_MAX        16
#define KILLS_MAX        16
#define STACK_CMD_MAX    2048
#define CALL_TIMEOUT     "Connect-Timeout-Ms: 5000"
#define STACK_DIR_SUFFIX "-scale"
#define SCALE_PASSWORD   "correct horse battery staple"

/* Killed in this order, one at a time (a broker, one replica of each service, a gateway). */
static const char *const KILLS[] = {"broker-2",  "auth-1",    "billing-2", "ledger-3",
                                    "summary-1", "webhook-2", "gateway-2"};
#define N_KILLS (sizeof(KILLS) / sizeof(KILLS[0]))

enum op {
        OP_WHOAMI,
        OP_SUMMARY,
        OP_WEBHOOKS,
        OP_TRANSFERS,
        OP_CUSTOMER,
        OP_SUBSCRIPTION,
        OP_LOGIN,
        OPS
};
static const char *const OP_NAMES[OPS] = {"WhoAmI",
                                          "GetSummary",
                                          "ListWebhookSubs",
                                          "CreateTransfers",
                                          "CreateCustomer",
                                          "CreateSubscription",
                                          "Login"};

typedef struct worker {
        pthread_t thread;
        int n;
        unsigned next_gateway;
        uint32_t seq;                       /* transfers sent: ids (n + 1, 1..seq) */
        uint32_t amount[TRANSFERS_MAX + 1]; /* by id; 0: never acknowledged */
        long customers, subscriptions;      /* acknowledged */
        char error[600];                    /* the first failure that fails the test */
} worker;

static struct {
        it_stack suite, stack;
        char dir[600];
        bool own_stack, started;
        char email[128], token[LT_TOKEN_MAX], tenant_id[64];
        worker *workers;
        atomic_bool stop;
        atomic_int phase; /* 0 before the first kill, k + 1 from kill k on */
        atomic_long ok[OPS];
        pthread_mutex_t mu;
        struct {
                char code[32];
                long n[KILLS_MAX + 1];
        } codes[CODES_MAX];
        int64_t last_fail_ms[KILLS_MAX + 1], kill_ms[KILLS_MAX + 1];
        char killed[KILLS_MAX][32]; /* what kill k killed (kill_name) */
        /* A gateway that dropped a connection gets no request until then, as a
         * load balancer's passive health check would have it. */
        _Atomic int64_t gateway_down_until_ms[IT_REPLICAS_MAX];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int env_int(const char *name, int def)
{
        const char *v = getenv(name);
        return v != NULL && atoi(v) > 0 ? atoi(v) : def;
}

/* ---- the stack ------------------------------------------------------------------------ */

static int stack_sh(const char *cmd, const char *args)
{
        char line[STACK_CMD_MAX];

        if (strlen(g.suite.stack_sh) + strlen(cmd) + 2 * strlen(g.dir) + strlen(args) + 32 >
            sizeof(line)) {
                return -1;
        }
        snprintf(line, sizeof(line), "'%s' %s --dir '%s' %s >>'%s.log' 2>&1", g.suite.stack_sh, cmd,
                 g.dir, args, g.dir);
        int st = system(line);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- a retrying client ------------------------------------------------------------------ */

/* What docs/api.md lets a client send again: nothing was done, or it may be repeated. */
static bool retryable(long status, const char *code)
{
        return status == 0 || status == 429 || status == 503 || status == 504 ||
               (status == 409 && strcmp(code, "aborted") == 0);
}

static void error_code(long status, const it_http_response *r, char *code, size_t len)
{
        json_t *j = status != 0 ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
        json_t *c = j != NULL ? json_object_get(j, "code") : NULL;

        if (status == 0) {
                snprintf(code, len, "no_reply");
        } else if (json_is_string(c)) {
                snprintf(code, len, "%s", json_string_value(c));
        } else {
                snprintf(code, len, "http_%ld", status);
        }
        json_decref(j);
}

/* A failed attempt: counted by code, and its time for the current kill's window. */
static void record_failure(const char *code)
{
        int phase = atomic_load(&g.phase);
        int64_t now = ks_now_ms();

        pthread_mutex_lock(&g.mu);
        for (int i = 0; i < CODES_MAX; i++) {
                if (g.codes[i].code[0] == '\0') {
                        snprintf(g.codes[i].code, sizeof(g.codes[i].code), "%s", code);
                }
                if (strcmp(g.codes[i].code, code) == 0) {
                        g.codes[i].n[phase]++;
                        break;
                }
        }
        if (now > g.last_fail_ms[phase]) {
                g.last_fail_ms[phase] = now;
        }
        pthread_mutex_unlock(&g.mu);
}

/* The next gateway in turn that is not marked down (any, when all are). */
static int pick_gateway(worker *w)
{
        int64_t now = ks_now_ms();

        for (int i = 0; i < g.stack.n_gateways; i++) {
                int gw = (int)(w->next_gateway++ % (unsigned)g.stack.n_gateways);
                if (atomic_load(&g.gateway_down_until_ms[gw]) <= now) {
                        return gw;
                }
        }
        return (int)(w->next_gateway++ % (unsigned)g.stack.n_gateways);
}

/*
 * POSTs body to path through a gateway (the next one after a dropped
 * connection), again while the answer is retryable, for OP_WAIT_MS at
 * most. Returns 0 with the 200 in *r, or -1 with w->error set.
 */
static int call(worker *w, const char *path, const char *type, const void *body, size_t len,
                const char *const *headers, it_http_response *r)
{
        int64_t until = ks_now_ms() + OP_WAIT_MS;
        char code[32];

        for (int attempt = 0;; attempt++) {
                int gw = pick_gateway(w);
                const char *base = g.stack.gateway_urls[gw];
                int rc = it_http_post(base, path, type, body, len, headers, r);
                long status = rc == 0 ? r->status : 0;
                if (status == 200) {
                        return 0;
                }
                error_code(status, r, code, sizeof(code));
                record_failure(code);
                bool again = retryable(status, code) && ks_now_ms() < until;
                if (!again && w->error[0] == '\0') {
                        snprintf(w->error, sizeof(w->error),
                                 "%s: HTTP %ld (%s) after %d attempts: %.300s", path, status, code,
                                 attempt + 1, rc == 0 ? r->body : "");
                }
                if (rc == 0) {
                        it_http_response_free(r);
                }
                if (!again) {
                        return -1;
                }
                if (status == 0) {
                        atomic_store(&g.gateway_down_until_ms[gw], ks_now_ms() + GATEWAY_DOWN_MS);
                }
                it_sleep_ms(10 + 10 * (attempt < 10 ? attempt : 10));
        }
}

static int call_json(worker *w, const char *path, const char *json, const char *idem_key,
                     it_http_response *r)
{
        char auth[LT_TOKEN_MAX + 32], idem[128];
        const char *headers[4] = {auth, CALL_TIMEOUT, NULL, NULL};

        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g.token);
        if (idem_key != NULL) {
                snprintf(idem, sizeof(idem), "Idempotency-Key: %s", idem_key);
                headers[2] = idem;
        }
        return call(w, path, "application/json", json, strlen(json), headers, r);
}

/* A call whose answer the load needs not read. */
static int simple(worker *w, enum op op, const char *path, const char *json)
{
        it_http_response r;

        if (call_json(w, path, json, NULL, &r) != 0) {
                return -1;
        }
        it_http_response_free(&r);
        atomic_fetch_add(&g.ok[op], 1);
        return 0;
}

static int login(worker *w)
{
        char json[256];
        const char *headers[2] = {CALL_TIMEOUT, NULL};
        it_http_response r;

        snprintf(json, sizeof(json), "{\"email\":\"%s\",\"password\":\"" SCALE_PASSWORD "\"}",
                 g.email);
        if (call(w, AIT_PATH "Login", "application/json", json, strlen(json), headers, &r) != 0) {
                return -1;
        }
        it_http_response_free(&r);
        atomic_fetch_add(&g.ok[OP_LOGIN], 1);
        return 0;
}

/* ---- the ledger ------------------------------------------------------------------------- */

static uint32_t amount_of(uint32_t seq)
{
        return 1 + (seq * 7919u) % 1000u;
}

/* One batch of BATCH new transfers, resent whole until answered; each must be ok or exists. */
static int transfers(worker *w)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        lt_transfer_pb tr[BATCH], *ptrs[BATCH];
        char auth[LT_TOKEN_MAX + 32];
        const char *headers[3] = {auth, CALL_TIMEOUT, NULL};
        uint8_t body[BATCH * 128];
        it_http_response r;
        uint32_t first = w->seq + 1;

        if (w->seq + BATCH > TRANSFERS_MAX) {
                return 0;
        }
        for (int i = 0; i < BATCH; i++) {
                uint32_t seq = first + (uint32_t)i;
                uint32_t d = seq % ACCOUNTS, c = (d + 1 + seq % (ACCOUNTS - 1)) % ACCOUNTS;
                lt_transfer_init(&tr[i], lt_u128((uint64_t)w->n + 1, seq), d + 1, c + 1,
                                 amount_of(seq), 1, 1, 0);
                ptrs[i] = &tr[i];
        }
        w->seq += BATCH;
        req.n_transfers = BATCH;
        req.transfers = ptrs;
        if (protobuf_c_message_get_packed_size(&req.base) > sizeof(body)) {
                snprintf(w->error, sizeof(w->error), "CreateTransfers: a batch over %zu bytes",
                         sizeof(body));
                return -1;
        }
        size_t len = protobuf_c_message_pack(&req.base, body);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g.token);
        if (call(w, LT_PATH "CreateTransfers", "application/proto", body, len, headers, &r) != 0) {
                return -1;
        }
        Keelson__Ledger__V1__CreateTransfersResponse *resp =
            keelson__ledger__v1__create_transfers_response__unpack(NULL, r.body_len,
                                                                   (const uint8_t *)r.body);
        it_http_response_free(&r);
        int rc = resp != NULL && resp->n_results == BATCH ? 0 : -1;
        for (size_t i = 0; rc == 0 && i < BATCH; i++) {
                int res = resp->results[i];
                if (res != TR(ok) && res != TR(exists)) {
                        snprintf(w->error, sizeof(w->error), "transfer %u: %s", first + (uint32_t)i,
                                 lt_tr_name(res));
                        rc = -1;
                }
        }
        if (resp == NULL) {
                snprintf(w->error, sizeof(w->error), "CreateTransfers: a reply not in protobuf");
        }
        keelson__ledger__v1__create_transfers_response__free_unpacked(resp, NULL);
        for (int i = 0; rc == 0 && i < BATCH; i++) {
                w->amount[first + (uint32_t)i] = amount_of(first + (uint32_t)i);
        }
        atomic_fetch_add(&g.ok[OP_TRANSFERS], rc == 0);
        return rc;
}

/* ---- billing ---------------------------------------------------------------------------- */

static int customer_and_subscription(worker *w, long i)
{
        char key[64], json[256], id[BIT_ID_MAX];
        it_http_response r;

        snprintf(key, sizeof(key), "scale-cust-%d-%ld", w->n, i);
        snprintf(json, sizeof(json),
                 "{\"email\":\"c%d-%ld@example.test\",\"name\":\"C\",\"currency\":\"USD\","
                 "\"defaultPaymentMethod\":\"pm_card_visa\"}",
                 w->n, i);
        if (call_json(w, BIT_PATH "CreateCustomer", json, key, &r) != 0) {
                return -1;
        }
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        it_http_response_free(&r);
        snprintf(id, sizeof(id), "%s", bit_str(j, "customer.id"));
        json_decref(j);
        if (strlen(id) != 36) {
                snprintf(w->error, sizeof(w->error), "CreateCustomer: no customer id");
                return -1;
        }
        w->customers++;
        atomic_fetch_add(&g.ok[OP_CUSTOMER], 1);
        snprintf(key, sizeof(key), "scale-sub-%d-%ld", w->n, i);
        snprintf(json, sizeof(json), "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", id);
        if (call_json(w, BIT_PATH "CreateSubscription", json, key, &r) != 0) {
                return -1;
        }
        it_http_response_free(&r);
        w->subscriptions++;
        atomic_fetch_add(&g.ok[OP_SUBSCRIPTION], 1);
        return 0;
}

/* ---- the load --------------------------------------------------------------------------- */

static void *work(void *arg)
{
        worker *w = arg;

        for (long i = 0; !atomic_load(&g.stop); i++) {
                int rc = simple(w, OP_WHOAMI, AIT_PATH "WhoAmI", "{}");
                rc = rc != 0 ? rc
                             : simple(w, OP_SUMMARY,
                                      "/keelson.summary.v1.AdminSummaryService/GetSummary", "{}");
                rc = rc != 0 ? rc
                             : simple(w, OP_WEBHOOKS,
                                      "/keelson.webhook.v1.WebhookService/ListWebhookSubscriptions",
                                      "{}");
                rc = rc != 0 ? rc : transfers(w);
                if (rc == 0 && i % 3 == 0) {
                        rc = customer_and_subscription(w, i);
                }
                if (rc == 0 && i % 10 == 5) {
                        rc = login(w);
                }
                if (rc != 0) {
                        break; /* w->error says why; the test fails on it */
                }
        }
        return NULL;
}

/* ---- metrics and CPU -------------------------------------------------------------------- */

/* The replicas of one kind: its env file's port and pid lists, the metric that counts its work. */
static const struct group {
        const char *name, *ports_key, *pids_key, *metric;
} GROUPS[] = {
    {"auth", "KEELSON_IT_AUTH_HEALTH_PORTS", "KEELSON_IT_AUTH_PIDS",
     "keelson_rpc_duration_seconds_count"},
    {"billing", "KEELSON_IT_BILLING_HEALTH_PORTS", "KEELSON_IT_BILLING_PIDS",
     "keelson_rpc_duration_seconds_count"},
    {"ledger", "KEELSON_IT_LEDGER_HEALTH_PORTS", "KEELSON_IT_LEDGER_PIDS",
     "keelson_rpc_duration_seconds_count"},
    {"summary", "KEELSON_IT_SUMMARY_HEALTH_PORTS", "KEELSON_IT_SUMMARY_PIDS",
     "keelson_rpc_duration_seconds_count"},
    {"webhook", "KEELSON_IT_WEBHOOK_HEALTH_PORTS", "KEELSON_IT_WEBHOOK_PIDS",
     "keelson_rpc_duration_seconds_count"},
    {"broker", "KEELSON_IT_BROKER_HEALTH_PORTS", "KEELSON_IT_BROKER_PIDS",
     "keelson_broker_forwarded_total"},
    {"gateway", "KEELSON_IT_GATEWAY_ADMIN_PORTS", "KEELSON_IT_GATEWAY_PIDS",
     "keelson_gateway_request_duration_seconds_count"},
};
#define N_GROUPS (sizeof(GROUPS) / sizeof(GROUPS[0]))

/* Each replica's own count of the work it did (its /metrics); every one must be above 0. */
static void assert_every_replica_worked(const char *when)
{
        for (size_t k = 0; k < N_GROUPS; k++) {
                int ports[IT_REPLICAS_MAX];
                int n = it_stack_ports(GROUPS[k].ports_key, ports, IT_REPLICAS_MAX);
                assert_true(n > 0);
                print_message("%s: %-8s", when, GROUPS[k].name);
                for (int i = 0; i < n; i++) {
                        double v = it_metric_sum_at(ports[i], GROUPS[k].metric, NULL);
                        print_message(" %s-%d=%.0f", GROUPS[k].name, i + 1, v);
                        if (v <= 0) {
                                fail_msg("%s-%d (port %d) shows no work in %s", GROUPS[k].name,
                                         i + 1, ports[i], GROUPS[k].metric);
                        }
                }
                print_message("\n");
        }
}

/* utime + stime of pid in clock ticks; 0 when it is gone. */
static long long pid_ticks(long pid)
{
        char path[64], buf[1024];
        long long ut = 0, st = 0;

        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
                return 0;
        }
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')');
        if (p == NULL ||
            sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lld %lld", &ut, &st) != 2) {
                return 0;
        }
        return ut + st;
}

static long long group_ticks(const char *pids_key)
{
        char list[256];
        long long sum = 0;

        if (it_stack_env(pids_key, list, sizeof(list)) != 0) {
                return 0;
        }
        for (char *p = list; *p != '\0';) {
                sum += pid_ticks(strtol(p, &p, 10));
                p += *p == ',';
        }
        return sum;
}

/* ---- the checks ------------------------------------------------------------------------- */

/* Every acknowledged transfer exists with its amount; every balance is their sum. */
static void check_ledger(void)
{
        lt_tenant t;
        u128 debits[ACCOUNTS] = {0}, credits[ACCOUNTS] = {0};
        static u128 ids[LT_BATCH_MAX];
        long acked = 0, found = 0;

        memset(&t, 0, sizeof(t));
        snprintf(t.gateway, sizeof(t.gateway), "%s", g.stack.gateway_url);
        snprintf(t.token, sizeof(t.token), "%s", g.token);
        for (int k = 0; k < LOAD_THREADS; k++) {
                worker *w = &g.workers[k];
                size_t n = 0;
                for (uint32_t seq = 1; seq <= w->seq; seq++) {
                        if (w->amount[seq] != 0) {
                                uint32_t d = seq % ACCOUNTS,
                                         c = (d + 1 + seq % (ACCOUNTS - 1)) % ACCOUNTS;
                                debits[d] += w->amount[seq];
                                credits[c] += w->amount[seq];
                                ids[n++] = lt_u128((uint64_t)k + 1, seq);
                                acked++;
                        }
                        if (n == LT_BATCH_MAX || (seq == w->seq && n > 0)) {
                                Keelson__Ledger__V1__LookupTransfersResponse *r =
                                    lt_lookup_transfers(&t, ids, n);
                                for (size_t i = 0; i < r->n_transfers; i++) {
                                        const lt_transfer_pb *x = r->transfers[i];
                                        assert_int_equal(x->id_hi, (uint64_t)k + 1);
                                        assert_true(x->id <= w->seq);
                                        assert_int_equal(x->amount, w->amount[x->id]);
                                }
                                found += (long)r->n_transfers;
                                protobuf_c_message_free_unpacked(&r->base, NULL);
                                n = 0;
                        }
                }
        }
        print_message("ledger: %ld transfers acknowledged, %ld found with their amounts\n", acked,
                      found);
        assert_int_equal(found, acked);
        u128 aids[ACCOUNTS];
        for (int i = 0; i < ACCOUNTS; i++) {
                aids[i] = i + 1;
        }
        Keelson__Ledger__V1__LookupAccountsResponse *a = lt_lookup_accounts(&t, aids, ACCOUNTS);
        assert_int_equal(a->n_accounts, ACCOUNTS);
        for (int i = 0; i < ACCOUNTS; i++) {
                const lt_account_pb *x = a->accounts[i];
                assert_true(lt_u128(x->debits_posted_hi, x->debits_posted) == debits[x->id - 1]);
                assert_true(lt_u128(x->credits_posted_hi, x->credits_posted) == credits[x->id - 1]);
        }
        protobuf_c_message_free_unpacked(&a->base, NULL);
        print_message("ledger: the %d accounts' balances are the sums of the acknowledged "
                      "transfers\n",
                      ACCOUNTS);
}

static void check_billing(void)
{
        bit_tenant t;
        const char *p[1] = {g.tenant_id};
        long customers = 0, subscriptions = 0;

        for (int k = 0; k < LOAD_THREADS; k++) {
                customers += g.workers[k].customers;
                subscriptions += g.workers[k].subscriptions;
        }
        assert_int_equal(
            ait_sql_long("SELECT count(*) FROM billing.customers WHERE tenant_id = $1::uuid", 1, p),
            customers);
        assert_int_equal(
            ait_sql_long("SELECT count(*) FROM billing.subscriptions WHERE tenant_id = $1::uuid", 1,
                         p),
            subscriptions);
        memset(&t, 0, sizeof(t));
        snprintf(t.owner.token, sizeof(t.owner.token), "%s", g.token);
        snprintf(t.owner.tenant_id, sizeof(t.owner.tenant_id), "%s", g.tenant_id);
        json_t *j = bit_reconcile_clean_at(g.stack.gateway_url, &t);
        print_message("billing: %ld customers and %ld subscriptions acknowledged, as many stored; "
                      "reconciliation: 0 discrepancies, %lld invoices, %lld transfers found\n",
                      customers, subscriptions, (long long)bit_int(j, "invoices"),
                      (long long)bit_int(j, "transfersFound"));
        json_decref(j);
}

static void print_failures(void)
{
        print_message("failed attempts per code (before the kills, then per kill):\n");
        for (int i = 0; i < CODES_MAX && g.codes[i].code[0] != '\0'; i++) {
                print_message("  %-20s", g.codes[i].code);
                for (size_t k = 0; k <= N_KILLS; k++) {
                        print_message(" %5ld", g.codes[i].n[k]);
                }
                print_message("\n");
        }
}

/* ---- the test --------------------------------------------------------------------------- */

/*
 * KILLS[k], or the last replica of its kind when the stack has fewer (a
 * benchmark's stack of one replica each: "ledger-3" is then "ledger-1").
 */
static void kill_name(size_t k, char *out, size_t len)
{
        const char *dash = strrchr(KILLS[k], '-');
        size_t plen = (size_t)(dash - KILLS[k]);
        int want = atoi(dash + 1), ports[IT_REPLICAS_MAX], n = 0;

        for (size_t i = 0; i < N_GROUPS; i++) {
                if (strlen(GROUPS[i].name) == plen &&
                    strncmp(KILLS[k], GROUPS[i].name, plen) == 0) {
                        n = it_stack_ports(GROUPS[i].ports_key, ports, IT_REPLICAS_MAX);
                }
        }
        assert_true(n > 0);
        snprintf(out, len, "%.*s-%d", (int)plen, KILLS[k], want <= n ? want : n);
}

static void kill_one(size_t k)
{
        char args[128], name[32];
        int64_t t0 = ks_now_ms();

        kill_name(k, name, sizeof(name));
        snprintf(g.killed[k], sizeof(g.killed[k]), "%s", name);

        pthread_mutex_lock(&g.mu);
        g.kill_ms[k + 1] = t0;
        atomic_store(&g.phase, (int)k + 1);
        pthread_mutex_unlock(&g.mu);
        snprintf(args, sizeof(args), "%s --signal KILL", name);
        int rc = stack_sh("restart", args);
        int64_t ready = ks_now_ms() - t0;
        assert_int_equal(rc, 0); /* restarted and ready again (stack.sh waits for /readyz) */
        it_sleep_ms(SETTLE_MS);
        print_message("kill -9 %-10s restarted and ready in %5lld ms\n", name, (long long)ready);
}

static void test_scale_out_survives_kills(void **state)
{
        (void)state;
        int warm_s = env_int("KEELSON_SCALE_WARM_S", WARM_S);
        long long ticks0[N_GROUPS], ticks1[N_GROUPS];
        long ok0[OPS], ok1[OPS];

        for (size_t k = 0; k < N_GROUPS; k++) {
                ticks0[k] = group_ticks(GROUPS[k].pids_key);
        }
        for (int i = 0; i < OPS; i++) {
                ok0[i] = atomic_load(&g.ok[i]);
        }
        int64_t t0 = ks_now_ms();
        for (int k = 0; k < LOAD_THREADS; k++) {
                g.workers[k].n = k;
                assert_int_equal(pthread_create(&g.workers[k].thread, NULL, work, &g.workers[k]),
                                 0);
        }
        it_sleep_ms(warm_s * 1000L);
        double warm = (double)(ks_now_ms() - t0) / 1000;
        for (size_t k = 0; k < N_GROUPS; k++) {
                ticks1[k] = group_ticks(GROUPS[k].pids_key);
        }
        long total = 0;
        for (int i = 0; i < OPS; i++) {
                ok1[i] = atomic_load(&g.ok[i]) - ok0[i];
                total += ok1[i];
        }
        /* The figures tools/bench_scale_out.sh reads. */
        print_message("scale_out: warm %.1f s, %ld requests, %.1f req/s, %.0f transfers/s\n", warm,
                      total, (double)total / warm, (double)ok1[OP_TRANSFERS] * BATCH / warm);
        for (int i = 0; i < OPS; i++) {
                print_message("scale_out: op %-18s %6ld ok, %.1f/s\n", OP_NAMES[i], ok1[i],
                              (double)ok1[i] / warm);
        }
        double tick_ms = 1000.0 / (double)sysconf(_SC_CLK_TCK);
        for (size_t k = 0; k < N_GROUPS; k++) {
                print_message("scale_out: cpu %-8s %6.0f ms (%.1f %% of a core, %.3f ms/request)\n",
                              GROUPS[k].name, (double)(ticks1[k] - ticks0[k]) * tick_ms,
                              (double)(ticks1[k] - ticks0[k]) * tick_ms / warm / 10,
                              total > 0 ? (double)(ticks1[k] - ticks0[k]) * tick_ms / (double)total
                                        : 0);
        }
        assert_every_replica_worked("before the kills");
        for (size_t k = 0; k < N_KILLS; k++) {
                kill_one(k);
        }
        atomic_store(&g.stop, true);
        for (int k = 0; k < LOAD_THREADS; k++) {
                pthread_join(g.workers[k].thread, NULL);
        }
        print_message("load: %.1f s in all\n", (double)(ks_now_ms() - t0) / 1000);
        print_failures();
        for (size_t k = 0; k < N_KILLS; k++) {
                int64_t last = g.last_fail_ms[k + 1];
                int64_t window = last > 0 ? last - g.kill_ms[k + 1] : 0;
                print_message("scale_out: window %-10s %6lld ms (from the kill to the last failed "
                              "attempt a client saw)\n",
                              g.killed[k], (long long)window);
                assert_true(window < WINDOW_MAX_MS);
        }
        for (int k = 0; k < LOAD_THREADS; k++) {
                if (g.workers[k].error[0] != '\0') {
                        fail_msg("worker %d: %s", k, g.workers[k].error);
                }
        }
        assert_every_replica_worked("after the kills");
        check_ledger();
        check_billing();
}

/* ---- setup ------------------------------------------------------------------------------ */

static int start_stack(void)
{
        char args[1200];
        const char *own = getenv("KEELSON_SCALE_STACK");

        if (own != NULL && own[0] != '\0') {
                snprintf(g.dir, sizeof(g.dir), "%s", own);
                return 0;
        }
        snprintf(g.dir, sizeof(g.dir), "%s" STACK_DIR_SUFFIX, g.suite.dir);
        snprintf(args, sizeof(args), "%s.log", g.dir);
        FILE *log = fopen(args, "w");
        if (log != NULL) {
                fclose(log);
        }
        /* Rate limits far above the load, as the suite's stack has them. */
        setenv("KEELSON_GATEWAY_RATE_AUTH", "100000:100000/1s", 1);
        setenv("KEELSON_GATEWAY_RATE_API", "100000:100000/1s", 1);
        setenv("KEELSON_GATEWAY_RATE_RESOLVE", "100000:100000/1s", 1);
        snprintf(args, sizeof(args),
                 "--bin '%s' --free-ports --unsafe-fast --broker-replicas 2 --auth-replicas 3"
                 " --billing-replicas 3 --ledger-replicas 3 --summary-replicas 3"
                 " --webhook-replicas 3 --gateway-replicas 2",
                 g.suite.bin_dir);
        g.own_stack = g.started = true;
        if (stack_sh("start", args) != 0) {
                fprintf(stderr, "test_scale_out: the stack did not start, see %s.log\n", g.dir);
                return -1;
        }
        return 0;
}

/* The tenant: its owner (a known password, for Login), a plan and the ledger's accounts. */
static int make_tenant(void)
{
        char body[512];
        it_http_response r;

        it_unique_email("scale", g.email, sizeof(g.email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" SCALE_PASSWORD "\",\"tenantName\":\"scale\"}",
                 g.email);
        if (it_auth_call(g.stack.gateway_url, "SignUp", body, NULL, NULL, &r) != 0 ||
            r.status != 200) {
                return -1;
        }
        it_http_response_free(&r);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" SCALE_PASSWORD "\"}",
                 g.email);
        if (it_auth_call(g.stack.gateway_url, "Login", body, NULL, NULL, &r) != 0 ||
            r.status != 200) {
                return -1;
        }
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        it_http_response_free(&r);
        snprintf(g.token, sizeof(g.token), "%s", bit_str(j, "sessionToken"));
        snprintf(g.tenant_id, sizeof(g.tenant_id), "%s", bit_str(j, "tenantId"));
        json_decref(j);
        return strlen(g.tenant_id) == 36 ? 0 : -1;
}

static void test_setup_tenant(void **state)
{
        (void)state;
        bit_tenant t;
        lt_tenant lt;
        lt_account_pb accounts[ACCOUNTS];
        int results[ACCOUNTS];

        assert_int_equal(make_tenant(), 0);
        memset(&t, 0, sizeof(t));
        snprintf(t.owner.token, sizeof(t.owner.token), "%s", g.token);
        bit_plan(&t, "pro", "USD", "FLAT", 1200, "MONTH", 1, 0);
        memset(&lt, 0, sizeof(lt));
        snprintf(lt.gateway, sizeof(lt.gateway), "%s", g.stack.gateway_url);
        snprintf(lt.token, sizeof(lt.token), "%s", g.token);
        for (int i = 0; i < ACCOUNTS; i++) {
                lt_account_init(&accounts[i], (u128)i + 1, 1, 1, 0);
        }
        lt_create_accounts(&lt, accounts, ACCOUNTS, results);
        for (int i = 0; i < ACCOUNTS; i++) {
                assert_int_equal(results[i], AR(ok));
        }
}

static int setup(void **state)
{
        (void)state;

        srand((unsigned)time(NULL) ^ (unsigned)getpid());
        if (it_stack_load(&g.suite) != 0 || start_stack() != 0) {
                return -1;
        }
        /* From here on it_support (and auth_it's ait_stack) reads our stack's env file. */
        if (setenv("KEELSON_IT_STACK", g.dir, 1) != 0 || it_stack_load(&g.stack) != 0 ||
            it_stack_load(&ait_stack) != 0) {
                return -1;
        }
        snprintf(g.suite.stack_sh, sizeof(g.suite.stack_sh), "%s", g.stack.stack_sh);
        g.workers = calloc(LOAD_THREADS, sizeof(worker));
        return g.workers != NULL ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        int rc = 0;

        if (g.own_stack && g.started) {
                rc = stack_sh("stop", "");
        }
        free(g.workers);
        return rc == 0 ? 0 : -1;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_setup_tenant),
            cmocka_unit_test(test_scale_out_survives_kills),
        };
        return cmocka_run_group_tests_name("scale_out", tests, setup, teardown);
}
