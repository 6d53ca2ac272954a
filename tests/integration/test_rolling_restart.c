/*
 * A rolling restart under load: every broker, every replica of every
 * service, then each gateway, is stopped with SIGTERM and started again, one
 * at a time (each ready before the next), through `stack.sh restart`, while a few threads
 * keep calling through the gateways as a real client would: WhoAmI and
 * Login, the ledger's CreateTransfers of one transfer with an id of the
 * client's, billing's CreateCustomer with an Idempotency-Key.
 *
 * The client retries only what docs/api.md says a client retries ("Retrying"
 * of auth, the ledger and billing): 503 unavailable, 429, 504 and a dropped
 * or refused connection (another gateway then), with the same transfer id
 * and the same Idempotency-Key; 409 aborted from billing (a request with
 * the key in progress). Every request must end acknowledged and right (the
 * caller's own user, `ok` for a new transfer or `exists` only after a
 * retry, the customer with the email sent); nothing else. After
 * the load: every acknowledged transfer exists with its amount and the
 * accounts add up to exactly them, and every acknowledged customer exists,
 * once per key. Each restarted process logged a clean stop (its "stopped"
 * line with exit_status 0, nothing about a deadline or drain running out).
 * A replica leaves the brokers' rotation before it stops (ks_broker_ctl.h),
 * so no call reaches it while it drains: a 503 "replica stopping" is a
 * failure, and every broker's log must show the replica's notice. A broker
 * must log a complete drain. Whether /readyz answered 503 while a process
 * drained is printed: the drain under this load lasts milliseconds, too
 * short to observe every time.
 *
 * The group teardown leaves every process of the stack up and ready, also
 * when the test fails. CTest runs it before test_replicas, like every
 * other stack test (tests/CMakeLists.txt).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "it_support.h"

#define AUTH_PATH    "/keelson.auth.v1.AuthService/"
#define LEDGER_PATH  "/keelson.ledger.v1.LedgerService/"
#define BILLING_PATH "/keelson.billing.v1.BillingService/"
#define PASSWORD     "correct horse battery staple"

#define THREADS_PER_KIND 2     /* auth, ledger, billing */
#define ACKED_MAX        20000 /* writes one thread keeps track of */
#define ATTEMPTS_MAX     60    /* a client gives up after this many tries of one request */
#define BACKOFF_MS_MIN   20
#define BACKOFF_MS_MAX   500
#define CALL_TIMEOUT_MS  "3000" /* Connect-Timeout-Ms: a lost call is a 504 in 3 s */
#define LOGIN_EVERY      10     /* one Login per this many auth calls */
#define SETTLE_MS        500    /* load on the restarted process before the next */
#define PROCS_MAX        32
#define NAME_MAX_LEN     32
#define LOOKUP_CHUNK     500
#define DEBIT_ACCOUNT    "1"
#define CREDIT_ACCOUNT   "2"
#define LEDGER_ID        840
#define TOKEN_MAX        512
#define ID_MAX           64

enum kind { K_AUTH, K_LEDGER, K_BILLING, K_COUNT };
static const char *const kind_names[K_COUNT] = {"auth", "ledger", "billing"};

/* Why a client tried again. */
enum retry_reason { R_TRANSPORT, R_503, R_504, R_429, R_ABORTED, R_COUNT };
static const char *const reason_names[R_COUNT] = {"connection", "503", "504", "429", "409 aborted"};

typedef struct loader {
        pthread_t thread;
        int kind;
        int index;
        long ok;
        long retries[R_COUNT];
        long failed; /* a code no client retries, or ATTEMPTS_MAX reached */
        long wrong;  /* answered, but not what was asked */
        char first_problem[600];
        /* ledger: acknowledged transfer ids and amounts; billing: keys and ids */
        int n_acked;
        uint64_t *ids;
        uint64_t *amounts;
        char (*customers)[ID_MAX];
} loader;

typedef struct proc {
        char name[NAME_MAX_LEN]; /* as stack.sh names it: broker, auth-1, gateway, gateway-2 */
        int port;                /* /readyz: health (brokers, services) or admin (gateways) */
        int gateway;
        int broker;
} proc;

static it_stack g_stack;
static char g_email[128];
static char g_token[TOKEN_MAX];
static char g_user_id[ID_MAX];
static char g_tenant_id[ID_MAX];
static char g_run[32]; /* makes this run's Idempotency-Keys unique */
static atomic_bool g_stop;
static atomic_long g_calls;
static loader g_loaders[K_COUNT * THREADS_PER_KIND];
static int g_n_loaders;
static proc g_procs[PROCS_MAX];
static int g_n_procs;

/* ---- a client ------------------------------------------------------------ */

static void note(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(loader *l, const char *fmt, ...)
{
        va_list ap;

        if (l->first_problem[0] != '\0') {
                return;
        }
        va_start(ap, fmt);
        vsnprintf(l->first_problem, sizeof(l->first_problem), fmt, ap);
        va_end(ap);
}

static const char *code_of(const it_http_response *r, char *out, size_t len)
{
        json_t *j = json_loadb(r->body, r->body_len, 0, NULL);
        json_t *c = j != NULL ? json_object_get(j, "code") : NULL;

        snprintf(out, len, "%s", json_is_string(c) ? json_string_value(c) : "?");
        json_decref(j);
        return out;
}

/* The reason to try again, or -1 when a client would not. */
static int retry_reason(int transport_rc, const it_http_response *r)
{
        char code[64];

        if (transport_rc != 0) {
                return R_TRANSPORT;
        }
        switch (r->status) {
        case 503:
                /* a draining replica is told no call: that one reached it is a failure */
                return r->body != NULL && strstr(r->body, "replica stopping") != NULL ? -1 : R_503;
        case 504:
                return R_504;
        case 429:
                return R_429;
        case 409:
                return strcmp(code_of(r, code, sizeof(code)), "aborted") == 0 ? R_ABORTED : -1;
        default:
                return -1;
        }
}

/*
 * One request as a client sends it: through the gateways in turn, the same
 * body, request id and headers on every try, with a growing pause between
 * tries. Returns the number of tries (>= 1) with the final reply in out
 * (status 200 or a code no client retries), or 0 when it gave up (out is
 * empty, counted as failed).
 */
static int call(loader *l, int seq, const char *path, const char *json, const char *token,
                const char *idem_key, it_http_response *out)
{
        char key_hdr[160], rid[64];
        const char *headers[3] = {"Connect-Timeout-Ms: " CALL_TIMEOUT_MS, NULL, NULL};
        int backoff_ms = BACKOFF_MS_MIN;

        if (idem_key != NULL) {
                snprintf(key_hdr, sizeof(key_hdr), "Idempotency-Key: %s", idem_key);
                headers[1] = key_hdr;
        }
        snprintf(rid, sizeof(rid), "rr-%s-%d-%d-%d", g_run, l->kind, l->index, seq);
        for (int attempt = 1; attempt <= ATTEMPTS_MAX; attempt++) {
                const char *gw = g_stack.gateway_urls[(seq + attempt) % g_stack.n_gateways];
                it_request req = {.token = token, .request_id = rid, .headers = headers};
                int rc = it_connect(gw, path, json, strlen(json), &req, out);
                int why = retry_reason(rc, out);

                atomic_fetch_add(&g_calls, 1);
                if (why < 0) {
                        return attempt;
                }
                l->retries[why]++;
                if (rc == 0) {
                        it_http_response_free(out);
                }
                it_sleep_ms(backoff_ms);
                backoff_ms = backoff_ms * 2 > BACKOFF_MS_MAX ? BACKOFF_MS_MAX : backoff_ms * 2;
        }
        memset(out, 0, sizeof(*out));
        l->failed++;
        note(l, "%s #%d: still failing after %d tries", path, seq, ATTEMPTS_MAX);
        return 0;
}

/* A string member of the reply (a path "a.b"), or NULL. */
static const char *str_at(json_t *j, const char *a, const char *b)
{
        json_t *v = json_object_get(j, a);

        if (b != NULL) {
                v = json_object_get(v, b);
        }
        return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Checks an answer that is not a retry: 200 with the field expected; counts it. */
static json_t *answer(loader *l, int seq, const char *what, int tries, it_http_response *r)
{
        json_t *j;

        if (tries == 0) {
                return NULL;
        }
        if (r->status != 200) {
                l->failed++;
                note(l, "%s #%d: HTTP %ld: %.300s", what, seq, r->status, r->body);
                it_http_response_free(r);
                return NULL;
        }
        j = json_loadb(r->body, r->body_len, 0, NULL);
        if (j == NULL) {
                l->wrong++;
                note(l, "%s #%d: not JSON: %.300s", what, seq, r->body);
        }
        it_http_response_free(r);
        return j;
}

static void auth_one(loader *l, int seq)
{
        char body[300];
        it_http_response r;
        bool login = seq % LOGIN_EVERY == 0;
        int tries;
        json_t *j;

        if (login) {
                snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"%s\"}", g_email,
                         PASSWORD);
                tries = call(l, seq, AUTH_PATH "Login", body, NULL, NULL, &r);
        } else {
                tries = call(l, seq, AUTH_PATH "WhoAmI", "{}", g_token, NULL, &r);
        }
        if ((j = answer(l, seq, login ? "Login" : "WhoAmI", tries, &r)) == NULL) {
                return;
        }
        const char *user = str_at(j, "userId", NULL);
        if (user == NULL || strcmp(user, g_user_id) != 0 ||
            (login && str_at(j, "sessionToken", NULL) == NULL)) {
                l->wrong++;
                note(l, "%s #%d: another user or no token: %s", login ? "Login" : "WhoAmI", seq,
                     user != NULL ? user : "(none)");
        } else {
                l->ok++;
        }
        json_decref(j);
}

static void ledger_one(loader *l, int seq)
{
        uint64_t id = (uint64_t)(l->index + 1) * 1000000000ULL + (uint64_t)seq + 1000;
        uint64_t amount = (uint64_t)(seq % 97) + 1;
        char body[400];
        it_http_response r;
        int tries;
        json_t *j;

        snprintf(body, sizeof(body),
                 "{\"transfers\":[{\"id\":\"%llu\",\"debitAccountId\":\"" DEBIT_ACCOUNT
                 "\",\"creditAccountId\":\"" CREDIT_ACCOUNT
                 "\",\"amount\":\"%llu\",\"ledger\":%d,\"code\":1}]}",
                 (unsigned long long)id, (unsigned long long)amount, LEDGER_ID);
        tries = call(l, seq, LEDGER_PATH "CreateTransfers", body, g_token, NULL, &r);
        if ((j = answer(l, seq, "CreateTransfers", tries, &r)) == NULL) {
                return;
        }
        json_t *res = json_array_get(json_object_get(j, "results"), 0);
        const char *result = json_is_string(res) ? json_string_value(res) : "(none)";
        /* "exists": already there exactly as asked, which only a retry may find. */
        if (strcmp(result, "ok") == 0 || (tries > 1 && strcmp(result, "exists") == 0)) {
                l->ids[l->n_acked] = id;
                l->amounts[l->n_acked] = amount;
                l->n_acked++;
                l->ok++;
        } else {
                l->wrong++;
                note(l, "CreateTransfers #%d (id %llu, try %d): %s", seq, (unsigned long long)id,
                     tries, result);
        }
        json_decref(j);
}

static void billing_one(loader *l, int seq)
{
        char body[300], key[96];
        it_http_response r;
        int tries;
        json_t *j;

        snprintf(key, sizeof(key), "rr-%s-%d-%d", g_run, l->index, seq);
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s@example.test\",\"name\":\"Rolling %d\",\"currency\":\"USD\"}",
                 key, seq);
        tries = call(l, seq, BILLING_PATH "CreateCustomer", body, g_token, key, &r);
        if ((j = answer(l, seq, "CreateCustomer", tries, &r)) == NULL) {
                return;
        }
        const char *id = str_at(j, "customer", "id");
        const char *email = str_at(j, "customer", "email");
        if (id == NULL || strlen(id) != 36 || email == NULL ||
            strncmp(email, key, strlen(key)) != 0) {
                l->wrong++;
                note(l, "CreateCustomer #%d: not the customer asked for", seq);
        } else {
                snprintf(l->customers[l->n_acked++], ID_MAX, "%s", id);
                l->ok++;
        }
        json_decref(j);
}

static void *load_main(void *arg)
{
        loader *l = arg;

        for (int seq = 0; !atomic_load(&g_stop) && l->n_acked < ACKED_MAX; seq++) {
                switch (l->kind) {
                case K_AUTH:
                        auth_one(l, seq);
                        break;
                case K_LEDGER:
                        ledger_one(l, seq);
                        break;
                default:
                        billing_one(l, seq);
                        break;
                }
        }
        return NULL;
}

static void load_stop(void)
{
        atomic_store(&g_stop, true);
        for (int i = 0; i < g_n_loaders; i++) {
                pthread_join(g_loaders[i].thread, NULL);
        }
        g_n_loaders = 0;
}

/* ---- the stack's processes ------------------------------------------------- */

static int is_restarted(const char *name)
{
        static const char *const prefixes[] = {"broker",   "auth-",    "billing-", "ledger-",
                                               "summary-", "webhook-", "gateway"};

        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) {
                        return 1;
                }
        }
        return 0;
}

/* DIR/cmd/ready: "name port" per process stack.sh started; the services, then the gateways. */
static int load_procs(void)
{
        char path[600], name[NAME_MAX_LEN];
        int port;
        FILE *f;

        snprintf(path, sizeof(path), "%s/cmd/ready", g_stack.dir);
        if ((f = fopen(path, "r")) == NULL) {
                fprintf(stderr, "no %s: a stack.sh without restart?\n", path);
                return -1;
        }
        g_n_procs = 0;
        while (g_n_procs < PROCS_MAX && fscanf(f, "%31s %d", name, &port) == 2) {
                if (!is_restarted(name)) {
                        continue;
                }
                proc *p = &g_procs[g_n_procs++];
                snprintf(p->name, sizeof(p->name), "%s", name);
                p->port = port;
                p->gateway = strncmp(name, "gateway", 7) == 0;
                p->broker = strncmp(name, "broker", 6) == 0;
        }
        fclose(f);
        return g_n_procs > 0 ? 0 : -1;
}

static long readyz(int port)
{
        char base[64];
        it_http_response r;
        long status;

        snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
        if (it_http_get(base, "/readyz", &r) != 0) {
                return 0;
        }
        status = r.status;
        it_http_response_free(&r);
        return status;
}

static int stack_restart(const char *name)
{
        char cmd[2048];

        snprintf(cmd, sizeof(cmd),
                 "'%s' restart --dir '%s' '%s' >>'%s/logs/rolling-restart.log' 2>&1",
                 g_stack.stack_sh, g_stack.dir, name, g_stack.dir);
        return system(cmd);
}

/* Watches one /readyz while its process restarts: did it say 503 before going away? */
typedef struct watch {
        pthread_t thread;
        int port;
        atomic_bool done;
        int saw_503; /* after a 200, before the first refusal */
} watch;

static void *watch_main(void *arg)
{
        watch *w = arg;
        bool ready_seen = false;

        while (!atomic_load(&w->done)) {
                long st = readyz(w->port);
                if (st == 200 && !ready_seen) {
                        ready_seen = true;
                } else if (st == 503 && ready_seen) {
                        w->saw_503++;
                } else if (st == 0 && ready_seen) {
                        break; /* gone: what came before was the drain */
                }
        }
        return NULL;
}

typedef struct stop_counts {
        int clean;       /* "stopped" lines with exit_status 0 */
        int deadline;    /* the shutdown deadline ran out */
        int drain;       /* a drain ran out of time */
        int unconfirmed; /* a replica's notice that a broker did not confirm */
        int complete;    /* a broker's drain that left nothing held */
        int notices;     /* over every broker's log: replicas that announced their stop */
} stop_counts;

static stop_counts count_stops(const proc *p)
{
        char path[sizeof(g_stack.dir) + 64];
        const char *clean[] = {p->gateway ? "\"msg\":\"gateway stopped\"" : "\"msg\":\"stopped\"",
                               "\"exit_status\":0"};
        const char *deadline[] = {"stop did not finish in time"};
        const char *drain[] = {"drain time is up"};
        const char *unconfirmed[] = {"did not confirm the notice"};
        const char *complete[] = {"\"msg\":\"broker drained\"", "\"complete\":true"};
        const char *notice[] = {"replica draining: no new calls to it"};
        stop_counts c;

        snprintf(path, sizeof(path), "%s/logs/%s.log", g_stack.dir, p->name);
        c = (stop_counts){.clean = it_file_lines_with(path, clean, 2),
                          .deadline = it_file_lines_with(path, deadline, 1),
                          .drain = it_file_lines_with(path, drain, 1),
                          .unconfirmed = it_file_lines_with(path, unconfirmed, 1),
                          .complete = it_file_lines_with(path, complete, 2)};
        for (int i = 0; i < g_n_procs; i++) {
                if (g_procs[i].broker) {
                        snprintf(path, sizeof(path), "%s/logs/%.*s.log", g_stack.dir,
                                 NAME_MAX_LEN - 1, g_procs[i].name);
                        c.notices += it_file_lines_with(path, notice, 1);
                }
        }
        return c;
}

static int brokers(void)
{
        int n = 0;

        for (int i = 0; i < g_n_procs; i++) {
                n += g_procs[i].broker;
        }
        return n;
}

/* ---- setup: a tenant, its two accounts, the load ------------------------- */

static int sign_up(void)
{
        char body[400];
        it_http_response r;
        json_t *j;

        it_unique_email("it-rolling", g_email, sizeof(g_email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"%s\",\"tenantName\":\"Rolling\","
                 "\"displayName\":\"Roller\"}",
                 g_email, PASSWORD);
        if (it_auth_call(g_stack.gateway_url, "SignUp", body, NULL, NULL, &r) != 0 ||
            r.status != 200) {
                return -1;
        }
        it_http_response_free(&r);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"%s\"}", g_email, PASSWORD);
        if (it_auth_call(g_stack.gateway_url, "Login", body, NULL, NULL, &r) != 0 ||
            r.status != 200) {
                return -1;
        }
        j = json_loadb(r.body, r.body_len, 0, NULL);
        it_http_response_free(&r);
        if (j == NULL || str_at(j, "sessionToken", NULL) == NULL) {
                json_decref(j);
                return -1;
        }
        snprintf(g_token, sizeof(g_token), "%s", str_at(j, "sessionToken", NULL));
        snprintf(g_user_id, sizeof(g_user_id), "%s", str_at(j, "userId", NULL));
        snprintf(g_tenant_id, sizeof(g_tenant_id), "%s", str_at(j, "tenantId", NULL));
        json_decref(j);
        return 0;
}

static int create_accounts(void)
{
        char body[300];
        it_http_response r;
        int ok;

        snprintf(body, sizeof(body),
                 "{\"accounts\":[{\"id\":\"" DEBIT_ACCOUNT "\",\"ledger\":%d,\"code\":1},"
                 "{\"id\":\"" CREDIT_ACCOUNT "\",\"ledger\":%d,\"code\":2}]}",
                 LEDGER_ID, LEDGER_ID);
        if (it_post_json_status(g_stack.gateway_url, LEDGER_PATH "CreateAccounts", body, g_token) !=
            200) {
                return -1;
        }
        /* Both created: the reply lists their results. */
        it_post_json(g_stack.gateway_url, LEDGER_PATH "LookupAccounts",
                     "{\"ids\":[\"" DEBIT_ACCOUNT "\",\"" CREDIT_ACCOUNT "\"]}", g_token, &r);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        ok = r.status == 200 && json_array_size(json_object_get(j, "accounts")) == 2;
        json_decref(j);
        it_http_response_free(&r);
        return ok ? 0 : -1;
}

static int group_setup(void **state)
{
        (void)state;
        if (it_stack_load(&g_stack) != 0 || load_procs() != 0 || sign_up() != 0 ||
            create_accounts() != 0) {
                return -1;
        }
        snprintf(g_run, sizeof(g_run), "%lx%x", (unsigned long)time(NULL), (unsigned)rand());
        return 0;
}

/* Every process back up and ready, whatever the test did or where it failed. */
static int group_teardown(void **state)
{
        (void)state;
        load_stop();
        for (int i = 0; i < g_n_procs; i++) {
                if (readyz(g_procs[i].port) != 200) {
                        fprintf(stderr, "teardown: %s not ready: restarting it\n", g_procs[i].name);
                        if (stack_restart(g_procs[i].name) != 0) {
                                fprintf(stderr, "teardown: restart of %s failed\n",
                                        g_procs[i].name);
                        }
                }
        }
        for (int i = 0; i < K_COUNT * THREADS_PER_KIND; i++) {
                free(g_loaders[i].ids);
                free(g_loaders[i].amounts);
                free(g_loaders[i].customers);
        }
        return 0;
}

static void load_start(void)
{
        atomic_store(&g_stop, false);
        for (int k = 0; k < K_COUNT; k++) {
                for (int i = 0; i < THREADS_PER_KIND; i++) {
                        loader *l = &g_loaders[g_n_loaders];
                        memset(l, 0, sizeof(*l));
                        l->kind = k;
                        l->index = i;
                        l->ids = calloc(ACKED_MAX, sizeof(*l->ids));
                        l->amounts = calloc(ACKED_MAX, sizeof(*l->amounts));
                        l->customers = calloc(ACKED_MAX, sizeof(*l->customers));
                        assert_non_null(l->ids);
                        assert_non_null(l->amounts);
                        assert_non_null(l->customers);
                        assert_int_equal(pthread_create(&l->thread, NULL, load_main, l), 0);
                        g_n_loaders++;
                }
        }
}

/* ---- the checks after the load ---------------------------------------------- */

/* Every acknowledged transfer, looked up by id, with its amount; returns their sum. */
static uint64_t check_transfers(void)
{
        uint64_t sum = 0;
        long n = 0;

        for (int li = 0; li < K_COUNT * THREADS_PER_KIND; li++) {
                loader *l = &g_loaders[li];
                for (int at = 0; l->kind == K_LEDGER && at < l->n_acked; at += LOOKUP_CHUNK) {
                        int k = l->n_acked - at < LOOKUP_CHUNK ? l->n_acked - at : LOOKUP_CHUNK;
                        json_t *ids = json_array();
                        for (int i = 0; i < k; i++) {
                                char s[32];
                                snprintf(s, sizeof(s), "%llu", (unsigned long long)l->ids[at + i]);
                                json_array_append_new(ids, json_string(s));
                        }
                        json_t *req = json_pack("{s:o}", "ids", ids);
                        char *body = json_dumps(req, JSON_COMPACT);
                        it_http_response r;
                        it_post_json(g_stack.gateway_url, LEDGER_PATH "LookupTransfers", body,
                                     g_token, &r);
                        assert_int_equal(r.status, 200);
                        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
                        json_t *ts = json_object_get(j, "transfers");
                        if ((int)json_array_size(ts) != k) {
                                fail_msg("LookupTransfers: %zu of %d acknowledged transfers found",
                                         json_array_size(ts), k);
                        }
                        for (int i = 0; i < k; i++) {
                                json_t *t = json_array_get(ts, (size_t)i);
                                uint64_t id = strtoull(str_at(t, "id", NULL), NULL, 10);
                                uint64_t amount = strtoull(str_at(t, "amount", NULL), NULL, 10);
                                if (id != l->ids[at + i] || amount != l->amounts[at + i]) {
                                        fail_msg("transfer %llu: found %llu of %llu",
                                                 (unsigned long long)l->ids[at + i],
                                                 (unsigned long long)id,
                                                 (unsigned long long)amount);
                                }
                                sum += amount;
                                n++;
                        }
                        json_decref(j);
                        it_http_response_free(&r);
                        free(body);
                        json_decref(req);
                }
        }
        printf("ledger: %ld acknowledged transfers found, amounts as sent (sum %llu)\n", n,
               (unsigned long long)sum);
        return sum;
}

/* The accounts hold exactly the acknowledged transfers: none lost, none applied twice. */
static void check_balances(uint64_t sum)
{
        it_http_response r;

        it_post_json(g_stack.gateway_url, LEDGER_PATH "LookupAccounts",
                     "{\"ids\":[\"" DEBIT_ACCOUNT "\",\"" CREDIT_ACCOUNT "\"]}", g_token, &r);
        assert_int_equal(r.status, 200);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        json_t *a = json_object_get(j, "accounts");
        const char *debits = str_at(json_array_get(a, 0), "debitsPosted", NULL);
        const char *credits = str_at(json_array_get(a, 1), "creditsPosted", NULL);
        assert_non_null(debits);
        assert_non_null(credits);
        assert_int_equal(strtoull(debits, NULL, 10), sum);
        assert_int_equal(strtoull(credits, NULL, 10), sum);
        json_decref(j);
        it_http_response_free(&r);
}

/* Every acknowledged customer is stored, and no key made a second one. */
static void check_customers(void)
{
        PGconn *pg = it_pg_connect(&g_stack);
        long acked = 0;
        size_t cap = 16, len;
        char *ids = malloc(cap);

        assert_non_null(ids);
        len = (size_t)snprintf(ids, cap, "{");
        for (int li = 0; li < K_COUNT * THREADS_PER_KIND; li++) {
                const loader *l = &g_loaders[li];
                for (int i = 0; l->kind == K_BILLING && i < l->n_acked; i++) {
                        if (len + ID_MAX + 2 > cap) {
                                cap = cap * 2 + ID_MAX + 2;
                                ids = realloc(ids, cap);
                                assert_non_null(ids);
                        }
                        len += (size_t)snprintf(ids + len, cap - len, "%s%s", acked > 0 ? "," : "",
                                                l->customers[i]);
                        acked++;
                }
        }
        snprintf(ids + len, cap - len, "}");
        const char *params[2] = {g_tenant_id, ids};
        long found = it_sql_long(pg,
                                 "SELECT count(*) FROM billing.customers"
                                 " WHERE tenant_id = $1 AND id = ANY($2::uuid[])",
                                 2, params);
        long stored = it_sql_long(pg, "SELECT count(*) FROM billing.customers WHERE tenant_id = $1",
                                  1, params);
        PQfinish(pg);
        free(ids);
        printf("billing: %ld acknowledged customers, %ld of them stored, %ld stored in all\n",
               acked, found, stored);
        assert_int_equal(found, acked);
        assert_int_equal(stored, acked);
}

static void report_load(void)
{
        long failed = 0, wrong = 0;

        for (int i = 0; i < K_COUNT * THREADS_PER_KIND; i++) {
                const loader *l = &g_loaders[i];
                printf("%s-%d: %ld ok; client retries:", kind_names[l->kind], l->index, l->ok);
                for (int r = 0; r < R_COUNT; r++) {
                        printf(" %s %ld", reason_names[r], l->retries[r]);
                }
                printf("; failed %ld, wrong %ld\n", l->failed, l->wrong);
                if (l->first_problem[0] != '\0') {
                        printf("  first problem: %s\n", l->first_problem);
                }
                failed += l->failed;
                wrong += l->wrong;
        }
        fflush(stdout);
        assert_int_equal(failed, 0);
        assert_int_equal(wrong, 0);
}

/* ---- the test --------------------------------------------------------------- */

static void restart_one(const proc *p)
{
        stop_counts before = count_stops(p), after;
        watch w = {.port = p->port};
        long calls = atomic_load(&g_calls);
        struct timespec t0, t1;

        assert_int_equal(readyz(p->port), 200);
        assert_int_equal(pthread_create(&w.thread, NULL, watch_main, &w), 0);
        it_sleep_ms(20); /* the watcher has seen it ready */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = stack_restart(p->name);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        atomic_store(&w.done, true);
        pthread_join(w.thread, NULL);
        if (rc != 0) {
                fail_msg("stack.sh restart %s failed (%d): see %s/logs/rolling-restart.log",
                         p->name, rc, g_stack.dir);
        }
        after = count_stops(p);
        printf("%-10s restarted in %4ld ms; /readyz 503 while draining: %s; calls meanwhile %ld\n",
               p->name,
               (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000),
               w.saw_503 > 0 ? "seen" : "not seen (too quick)", atomic_load(&g_calls) - calls);
        fflush(stdout);
        if (after.clean != before.clean + 1 || after.deadline != before.deadline ||
            after.drain != before.drain) {
                fail_msg("%s: not one clean stop in its log (stopped with exit_status 0: %d -> %d,"
                         " deadline: %d -> %d, drain ran out: %d -> %d)",
                         p->name, before.clean, after.clean, before.deadline, after.deadline,
                         before.drain, after.drain);
        }
        if (after.unconfirmed != before.unconfirmed) {
                fail_msg("%s: a broker did not confirm its drain notice", p->name);
        }
        if (p->broker && after.complete != before.complete + 1) {
                fail_msg("%s: its drain left calls held (no complete \"broker drained\")", p->name);
        }
        if (!p->broker && !p->gateway && after.notices < before.notices + brokers()) {
                fail_msg("%s: the brokers logged %d drain notices of it, expected %d", p->name,
                         after.notices - before.notices, brokers());
        }
        assert_int_equal(readyz(p->port), 200);
}

static void test_rolling_restart_loses_nothing(void **state)
{
        (void)state;
        load_start();
        it_sleep_ms(SETTLE_MS);
        for (int i = 0; i < g_n_procs; i++) {
                restart_one(&g_procs[i]);
                it_sleep_ms(SETTLE_MS);
        }
        load_stop();
        report_load();
        check_balances(check_transfers());
        check_customers();
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_rolling_restart_loses_nothing),
        };
        srand((unsigned)time(NULL) ^ (unsigned)getpid());
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
