/*
 * PostgreSQL crashes while writes are in flight, and no write it had
 * acknowledged is lost. The server runs durable (fsync, synchronous_commit
 * and full_page_writes on: deploy/local/stack.sh's default, checked first)
 * and is stopped as a crash would stop it (stack.sh pg-crash: pg_ctl stop
 * -m immediate, nothing flushed or checkpointed) while CreateTransfers
 * batches and sign-ups with their API keys keep coming.
 *
 * The test starts a stack of its own (one replica of each service, next to
 * the suite's stack, whose services it would otherwise take down), and
 * calls the ledger and auth through that stack's broker over nng, as the
 * gateway does. Each round: writer threads send batches of new transfers
 * (two threads) and SignUp then CreateApiKey (one thread), each recording
 * every write that got a success reply; once the round has some of each,
 * the server is crashed with calls in flight, the writers stop, the server
 * starts again (crash recovery from the WAL on disk). Then every write
 * acknowledged so far is looked for: each transfer by id through
 * LookupTransfers, with its amount; each user with its email and tenant,
 * each key in its tenant, in auth's tables. Last, the round's acknowledged
 * batches are sent again, as a client that missed the reply would: every
 * event must answer exists, not ok (ok would mean the batch was written
 * anew, so it had been lost).
 */
#include "ledger_it.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "auth.pb-c.h"
#include "ks_assert.h"
#include "ks_crypto.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define ROUNDS         3
#define LEDGER_WRITERS 2
#define ACCOUNTS       100
#define BATCH          500
/* Acknowledged batches kept, all rounds: the writers idle past it (each may
 * have one more in flight, hence the slots beyond it). */
#define BATCHES_MAX      600
#define BATCH_SLOTS      (BATCHES_MAX + LEDGER_WRITERS)
#define USERS_MAX        120
#define ROUND_BATCHES    8 /* a round crashes once it has this many acknowledged batches */
#define ROUND_KEYS       2 /* and this many acknowledged API keys */
#define LOAD_WAIT_MS     60000
#define CALL_MS          5000
#define ANSWER_WAIT_MS   60000 /* for the services to answer again after the restart */
#define LEDGER_PATH      "keelson.ledger.v1.LedgerService/"
#define AUTH_PATH        "keelson.auth.v1.AuthService/"
#define STACK_CMD_MAX    2048
#define STACK_DIR_SUFFIX "-pg-crash"

static it_stack g_suite; /* the suite's stack: where the script and the binaries are */
static it_stack g_stack; /* ours */
static char g_dir[600], g_ledger_front[KS_URL_MAX], g_auth_front[KS_URL_MAX];
static char g_tenant[40], g_user[40]; /* the ledger's tenant and the caller in it */
static bool g_started;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* ---- what was acknowledged ------------------------------------------------------- */

typedef struct acked_batch {
        int round;
        u128 ids[BATCH];
        uint64_t amounts[BATCH];
        uint8_t *body; /* the request as sent, for the resend */
        size_t len;
} acked_batch;

typedef struct acked_user {
        char email[128];
        char user_id[40];
        char tenant_id[40];
        char key_id[40]; /* "" until CreateApiKey is acknowledged */
} acked_user;

static struct {
        pthread_mutex_t mu;
        acked_batch *batches;
        int n_batches;
        acked_user users[USERS_MAX];
        int n_users;
        int round; /* the writers' round */
        int round_batches, round_users, round_keys;
        int not_ok; /* acknowledged batches with an event not ok: none expected */
        atomic_int in_flight;
        atomic_bool stop;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- calls ------------------------------------------------------------------------- */

static ks_rpc_client *client_new(const char *front)
{
        const char *urls[] = {front};
        ks_rpc_client_options co = {
            .dial_urls = urls, .n_dial_urls = 1, .max_inflight = 8, .default_timeout_ms = CALL_MS};
        ks_rpc_client *c = NULL;
        return ks_rpc_client_new(&c, &co) == KS_OK ? c : NULL;
}

/* One call of a packed request; on KS_OK *out holds the unpacked reply. */
static int call_packed(ks_rpc_client *c, const char *method, const ks_caller *caller,
                       const uint8_t *body, size_t len, const ProtobufCMessageDescriptor *out_desc,
                       ProtobufCMessage **out)
{
        char rid[37];
        ks_rpc_result res;

        *out = NULL;
        if (ks_uuid_v4(rid) != KS_OK) {
                return KS_INTERNAL;
        }
        ks_rpc_call_args a = {.method = method,
                              .request_id = rid,
                              .caller = caller,
                              .deadline_unix_ms = ks_now_ms() + CALL_MS,
                              .payload = body,
                              .payload_len = len};
        atomic_fetch_add(&g.in_flight, 1);
        int rc = ks_rpc_call(c, &a, &res);
        atomic_fetch_sub(&g.in_flight, 1);
        if (rc == KS_OK && (*out = protobuf_c_message_unpack(out_desc, NULL, res.payload_len,
                                                             res.payload)) == NULL) {
                rc = KS_INTERNAL;
        }
        ks_rpc_result_clear(&res);
        return rc;
}

static int call(ks_rpc_client *c, const char *method, const ks_caller *caller,
                const ProtobufCMessage *req, const ProtobufCMessageDescriptor *out_desc,
                ProtobufCMessage **out)
{
        size_t len = protobuf_c_message_get_packed_size(req);
        uint8_t *body = malloc(len + 1);

        if (body == NULL) {
                *out = NULL;
                return KS_RESOURCE_EXHAUSTED;
        }
        protobuf_c_message_pack(req, body);
        int rc = call_packed(c, method, caller, body, len, out_desc, out);
        free(body);
        return rc;
}

static void owner_of(ks_caller *caller, const char *tenant_id, const char *user_id)
{
        keelson__rpc__v1__caller_context__init(caller);
        caller->authenticated = 1;
        caller->tenant_id = (char *)tenant_id;
        caller->user_id = (char *)user_id;
        caller->role = "owner";
}

/* ---- the ledger's writers -------------------------------------------------------------- */

/* Writer w's next batch of new transfers (ids never sent before), packed. */
static uint8_t *pack_batch(int w, uint64_t *seq, unsigned *seed, acked_batch *b)
{
        static __thread lt_transfer_pb t[BATCH];
        static __thread lt_transfer_pb *ptrs[BATCH];
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;

        for (int i = 0; i < BATCH; i++) {
                u128 dr = 1 + (u128)(rand_r(seed) % ACCOUNTS);
                u128 cr = 1 + dr % ACCOUNTS; /* another account */
                b->ids[i] = lt_u128((uint64_t)w + 1, ++*seq);
                b->amounts[i] = 1 + (uint64_t)(rand_r(seed) % 1000);
                lt_transfer_init(&t[i], b->ids[i], dr, cr, b->amounts[i], 1, 1, 0);
                ptrs[i] = &t[i];
        }
        req.n_transfers = BATCH;
        req.transfers = ptrs;
        b->len = protobuf_c_message_get_packed_size(&req.base);
        uint8_t *body = malloc(b->len);
        if (body != NULL) {
                protobuf_c_message_pack(&req.base, body);
        }
        return body;
}

static void record_batch(acked_batch *b, const Keelson__Ledger__V1__CreateTransfersResponse *out)
{
        bool all_ok = out->n_results == BATCH;

        for (size_t i = 0; i < out->n_results && all_ok; i++) {
                all_ok = out->results[i] == TR(ok);
        }
        pthread_mutex_lock(&g.mu);
        KS_ASSERT(g.n_batches < BATCH_SLOTS);
        b->round = g.round;
        g.batches[g.n_batches++] = *b;
        g.round_batches++;
        g.not_ok += all_ok ? 0 : 1;
        pthread_mutex_unlock(&g.mu);
}

static bool batches_full(void)
{
        pthread_mutex_lock(&g.mu);
        bool full = g.n_batches >= BATCHES_MAX;
        pthread_mutex_unlock(&g.mu);
        return full;
}

static void *ledger_writer(void *arg)
{
        static uint64_t seqs[LEDGER_WRITERS]; /* ids stay new across rounds */
        int w = (int)(intptr_t)arg;
        unsigned seed = (unsigned)(w + 1) * 7919u ^ (unsigned)getpid();
        ks_rpc_client *c = client_new(g_ledger_front);
        ks_caller caller;
        acked_batch b;

        owner_of(&caller, g_tenant, g_user);
        while (c != NULL && !atomic_load(&g.stop) && !batches_full()) {
                ProtobufCMessage *out = NULL;
                if ((b.body = pack_batch(w, &seqs[w], &seed, &b)) == NULL) {
                        break;
                }
                if (call_packed(c, LEDGER_PATH "CreateTransfers", &caller, b.body, b.len,
                                &keelson__ledger__v1__create_transfers_response__descriptor,
                                &out) == KS_OK) {
                        record_batch(&b, (void *)out);
                        protobuf_c_message_free_unpacked(out, NULL);
                } else {
                        free(b.body);
                        sleep_ms(20); /* the server is down: do not spin */
                }
        }
        ks_rpc_client_free(c);
        return NULL;
}

/* ---- auth's writer -------------------------------------------------------------------- */

/* SignUp; on success the new user is recorded and its index returned, else -1. */
static int sign_up(ks_rpc_client *c)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        Keelson__Auth__V1__SignUpResponse *out = NULL;
        acked_user u;
        int i = -1;

        memset(&u, 0, sizeof(u));
        it_unique_email("pg-crash", u.email, sizeof(u.email));
        req.email = u.email;
        req.password = LT_PASSWORD;
        req.tenant_name = "PostgreSQL crash";
        if (call(c, AUTH_PATH "SignUp", NULL, &req.base,
                 &keelson__auth__v1__sign_up_response__descriptor,
                 (ProtobufCMessage **)&out) != KS_OK) {
                return -1;
        }
        snprintf(u.user_id, sizeof(u.user_id), "%s", out->user_id);
        snprintf(u.tenant_id, sizeof(u.tenant_id), "%s", out->tenant_id);
        protobuf_c_message_free_unpacked(&out->base, NULL);
        pthread_mutex_lock(&g.mu);
        if (g.n_users < USERS_MAX) {
                i = g.n_users++;
                g.users[i] = u;
                g.round_users++;
        }
        pthread_mutex_unlock(&g.mu);
        return i;
}

static void create_key(ks_rpc_client *c, int i)
{
        Keelson__Auth__V1__CreateApiKeyRequest req =
            KEELSON__AUTH__V1__CREATE_API_KEY_REQUEST__INIT;
        Keelson__Auth__V1__CreateApiKeyResponse *out = NULL;
        ks_caller caller;
        char user_id[40], tenant_id[40];

        pthread_mutex_lock(&g.mu);
        snprintf(user_id, sizeof(user_id), "%s", g.users[i].user_id);
        snprintf(tenant_id, sizeof(tenant_id), "%s", g.users[i].tenant_id);
        pthread_mutex_unlock(&g.mu);
        owner_of(&caller, tenant_id, user_id);
        req.name = "crash test";
        req.role = "member";
        if (call(c, AUTH_PATH "CreateApiKey", &caller, &req.base,
                 &keelson__auth__v1__create_api_key_response__descriptor,
                 (ProtobufCMessage **)&out) != KS_OK) {
                return;
        }
        pthread_mutex_lock(&g.mu);
        snprintf(g.users[i].key_id, sizeof(g.users[i].key_id), "%s", out->api_key->id);
        g.round_keys++;
        pthread_mutex_unlock(&g.mu);
        protobuf_c_message_free_unpacked(&out->base, NULL);
}

static void *auth_writer(void *arg)
{
        (void)arg;
        ks_rpc_client *c = client_new(g_auth_front);

        while (c != NULL && !atomic_load(&g.stop)) {
                int i = sign_up(c);
                if (i >= 0) {
                        create_key(c, i);
                } else {
                        sleep_ms(20);
                }
        }
        ks_rpc_client_free(c);
        return NULL;
}

/* ---- the stack ---------------------------------------------------------------------- */

/* Runs stack.sh CMD --dir ours [ARGS], its output appended to ours.log; its exit status. */
static int stack_sh(const char *cmd, const char *args)
{
        char line[STACK_CMD_MAX];

        if (strlen(g_suite.stack_sh) + strlen(cmd) + 2 * strlen(g_dir) + strlen(args) + 32 >
            sizeof(line)) {
                return -1;
        }
        snprintf(line, sizeof(line), "'%s' %s --dir '%s' %s >>'%s.log' 2>&1", g_suite.stack_sh, cmd,
                 g_dir, args, g_dir);
        int st = system(line);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The server's settings that make a commit survive a crash: all three on. */
static long durable_settings(PGconn *pg)
{
        return it_sql_long(pg,
                           "SELECT count(*) FROM pg_settings WHERE setting = 'on' AND name IN"
                           " ('fsync', 'synchronous_commit', 'full_page_writes')",
                           0, NULL);
}

static void wait_answering(ks_rpc_client *c, const char *method, const ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *out_desc, const ks_caller *caller)
{
        int64_t until = ks_now_ms() + ANSWER_WAIT_MS;
        int rc;

        do {
                ProtobufCMessage *out = NULL;
                if ((rc = call(c, method, caller, req, out_desc, &out)) == KS_OK) {
                        protobuf_c_message_free_unpacked(out, NULL);
                        return;
                }
                sleep_ms(100);
        } while (ks_now_ms() < until);
        fail_msg("%s: %s after %d ms", method, ks_code_name(rc), ANSWER_WAIT_MS);
}

static void create_accounts(ks_rpc_client *c)
{
        static lt_account_pb a[ACCOUNTS];
        static lt_account_pb *ptrs[ACCOUNTS];
        Keelson__Ledger__V1__CreateAccountsRequest req =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        ks_caller caller;

        for (int i = 0; i < ACCOUNTS; i++) {
                lt_account_init(&a[i], (u128)i + 1, 1, 1, 0);
                ptrs[i] = &a[i];
        }
        req.n_accounts = ACCOUNTS;
        req.accounts = ptrs;
        owner_of(&caller, g_tenant, g_user);
        wait_answering(c, LEDGER_PATH "CreateAccounts", &req.base,
                       &keelson__ledger__v1__create_accounts_response__descriptor, &caller);
}

/* ---- the checks -------------------------------------------------------------------- */

/* How many of batch b's transfers LookupTransfers misses, or finds with another amount. */
static int batch_missing(ks_rpc_client *c, const acked_batch *b)
{
        static uint64_t lo[BATCH], hi[BATCH];
        Keelson__Ledger__V1__LookupTransfersRequest req =
            KEELSON__LEDGER__V1__LOOKUP_TRANSFERS_REQUEST__INIT;
        Keelson__Ledger__V1__LookupTransfersResponse *out = NULL;
        ks_caller caller;
        int missing = 0;

        for (size_t i = 0; i < BATCH; i++) {
                lo[i] = lt_lo(b->ids[i]);
                hi[i] = lt_hi(b->ids[i]);
        }
        req.n_ids = req.n_ids_hi = BATCH;
        req.ids = lo;
        req.ids_hi = hi;
        owner_of(&caller, g_tenant, g_user);
        int rc = call(c, LEDGER_PATH "LookupTransfers", &caller, &req.base,
                      &keelson__ledger__v1__lookup_transfers_response__descriptor,
                      (ProtobufCMessage **)&out);
        if (rc != KS_OK) {
                fail_msg("LookupTransfers: %s", ks_code_name(rc));
        }
        /* Those found, in request order. */
        size_t k = 0;
        for (int i = 0; i < BATCH; i++) {
                const lt_transfer_pb *t = k < out->n_transfers ? out->transfers[k] : NULL;
                if (t == NULL || lt_u128(t->id_hi, t->id) != b->ids[i]) {
                        missing++;
                        continue;
                }
                k++;
                missing += t->amount_hi == 0 && t->amount == b->amounts[i] ? 0 : 1;
        }
        protobuf_c_message_free_unpacked(&out->base, NULL);
        return missing;
}

static long sql_count(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);

        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                fail_msg("%s: %s", sql, PQerrorMessage(pg));
        }
        long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        return v;
}

/* Acknowledged users (with email and tenant) and keys that auth's tables lack. */
static int auth_missing(PGconn *pg, int *keys)
{
        int missing = 0;

        *keys = 0;
        for (int i = 0; i < g.n_users; i++) {
                const acked_user *u = &g.users[i];
                const char *p[3] = {u->user_id, u->email, u->tenant_id};
                missing += sql_count(pg,
                                     "SELECT count(*) FROM auth.users u JOIN auth.memberships m"
                                     " ON m.user_id = u.id WHERE u.id = $1::uuid AND u.email = $2"
                                     " AND m.tenant_id = $3::uuid AND m.role = 'owner'",
                                     3, p) == 1
                               ? 0
                               : 1;
                if (u->key_id[0] != '\0') {
                        const char *k[2] = {u->key_id, u->tenant_id};
                        (*keys)++;
                        missing +=
                            sql_count(pg,
                                      "SELECT count(*) FROM auth.api_keys WHERE id = $1::uuid"
                                      " AND tenant_id = $2::uuid AND revoked_at IS NULL",
                                      2, k) == 1
                                ? 0
                                : 1;
                }
        }
        return missing;
}

/* Every acknowledged write so far, after the restart. */
static void check_acknowledged(ks_rpc_client *ledger, PGconn *pg, int r)
{
        int missing = 0, keys = 0;

        for (int i = 0; i < g.n_batches; i++) {
                missing += batch_missing(ledger, &g.batches[i]);
        }
        int auth = auth_missing(pg, &keys);
        print_message("round %d: %d acknowledged batches (%d transfers), %d users, %d keys:"
                      " %d transfers and %d auth writes missing\n",
                      r, g.n_batches, g.n_batches * BATCH, g.n_users, keys, missing, auth);
        assert_int_equal(g.not_ok, 0);
        if (missing != 0 || auth != 0) {
                fail_msg("round %d: %d acknowledged transfers and %d acknowledged users or keys"
                         " lost in the crash",
                         r, missing, auth);
        }
}

/* The round's acknowledged batches again: each event exists, none is created anew. */
static void check_resends(ks_rpc_client *ledger, int r)
{
        ks_caller caller;
        int resent = 0;

        owner_of(&caller, g_tenant, g_user);
        for (int i = 0; i < g.n_batches; i++) {
                const acked_batch *b = &g.batches[i];
                Keelson__Ledger__V1__CreateTransfersResponse *out = NULL;
                if (b->round != r) {
                        continue;
                }
                int rc =
                    call_packed(ledger, LEDGER_PATH "CreateTransfers", &caller, b->body, b->len,
                                &keelson__ledger__v1__create_transfers_response__descriptor,
                                (ProtobufCMessage **)&out);
                if (rc != KS_OK) {
                        fail_msg("round %d: resend: %s", r, ks_code_name(rc));
                }
                assert_int_equal(out->n_results, BATCH);
                for (int k = 0; k < BATCH; k++) {
                        if (out->results[k] != TR(exists)) {
                                fail_msg("round %d, resent batch %d, event %d: %s", r, i, k,
                                         lt_tr_name(out->results[k]));
                        }
                }
                protobuf_c_message_free_unpacked(&out->base, NULL);
                resent++;
        }
        print_message("round %d: %d acknowledged batches resent: every event exists\n", r, resent);
}

/* ---- the test ------------------------------------------------------------------------ */

static bool loaded(void)
{
        pthread_mutex_lock(&g.mu);
        bool enough = g.round_batches >= ROUND_BATCHES && g.round_keys >= ROUND_KEYS;
        pthread_mutex_unlock(&g.mu);
        return enough;
}

/* Writers until the round has its acknowledged writes, then the crash; the writers stop. */
static void crash_under_load(int r)
{
        pthread_t th[LEDGER_WRITERS + 1];

        g.round = r;
        g.round_batches = g.round_users = g.round_keys = 0;
        atomic_store(&g.stop, false);
        for (int w = 0; w < LEDGER_WRITERS; w++) {
                assert_int_equal(pthread_create(&th[w], NULL, ledger_writer, (void *)(intptr_t)w),
                                 0);
        }
        assert_int_equal(pthread_create(&th[LEDGER_WRITERS], NULL, auth_writer, NULL), 0);
        int64_t until = ks_now_ms() + LOAD_WAIT_MS;
        while (!loaded() && ks_now_ms() < until) {
                sleep_ms(10);
        }
        int in_flight = atomic_load(&g.in_flight);
        int crashed = stack_sh("pg-crash", "");
        atomic_store(&g.stop, true);
        for (int w = 0; w <= LEDGER_WRITERS; w++) {
                pthread_join(th[w], NULL);
        }
        assert_int_equal(crashed, 0);
        print_message("round %d: crashed with %d calls in flight, after %d batches, %d users and"
                      " %d keys acknowledged in the round\n",
                      r, in_flight, g.round_batches, g.round_users, g.round_keys);
        if (g.round_batches < ROUND_BATCHES || g.round_keys < ROUND_KEYS) {
                fail_msg("round %d: too few writes acknowledged in %d ms to test anything", r,
                         LOAD_WAIT_MS);
        }
}

static void test_acknowledged_writes_survive_a_crash(void **state)
{
        (void)state;
        ks_rpc_client *ledger = client_new(g_ledger_front);
        assert_non_null(ledger);
        PGconn *pg = it_pg_connect(&g_stack);
        assert_non_null(pg);
        assert_int_equal(durable_settings(pg), 3);
        PQfinish(pg);
        create_accounts(ledger);

        for (int r = 0; r < ROUNDS; r++) {
                crash_under_load(r);
                assert_int_equal(stack_sh("pg-start", ""), 0);
                assert_non_null(pg = it_pg_connect(&g_stack));
                check_acknowledged(ledger, pg, r);
                PQfinish(pg);
                check_resends(ledger, r);
        }
        ks_rpc_client_free(ledger);
}

static int setup(void **state)
{
        (void)state;
        char args[1200];

        if (it_stack_load(&g_suite) != 0 || ks_uuid_v4(g_tenant) != KS_OK ||
            ks_uuid_v4(g_user) != KS_OK ||
            (g.batches = calloc(BATCH_SLOTS, sizeof(acked_batch))) == NULL) {
                return -1;
        }
        snprintf(g_dir, sizeof(g_dir), "%s" STACK_DIR_SUFFIX, g_suite.dir);
        snprintf(args, sizeof(args), "%s.log", g_dir);
        FILE *log = fopen(args, "w"); /* stack_sh appends this run's output */
        if (log != NULL) {
                fclose(log);
        }
        snprintf(args, sizeof(args), "--bin '%s' --free-ports", g_suite.bin_dir);
        g_started = true; /* whatever start left running, the teardown stops */
        if (stack_sh("start", args) != 0) {
                fprintf(stderr, "test_pg_crash: the stack did not start, see %s.log\n", g_dir);
                return -1;
        }
        /* From here on it_support reads our stack's env file. */
        if (setenv("KEELSON_IT_STACK", g_dir, 1) != 0 || it_stack_load(&g_stack) != 0 ||
            ks_broker_url(g_ledger_front, sizeof(g_ledger_front), g_stack.broker_url, KS_SVC_LEDGER,
                          KS_SIDE_FRONT) != 0 ||
            ks_broker_url(g_auth_front, sizeof(g_auth_front), g_stack.broker_url, KS_SVC_AUTH,
                          KS_SIDE_FRONT) != 0) {
                return -1;
        }
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        int rc = 0;

        if (g_started) {
                stack_sh("pg-start", ""); /* a failed round may have left it down */
                rc = stack_sh("stop", "");
        }
        for (int i = 0; i < g.n_batches; i++) {
                free(g.batches[i].body);
        }
        free(g.batches);
        return rc == 0 ? 0 : -1;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_acknowledged_writes_survive_a_crash),
        };
        return cmocka_run_group_tests_name("pg_crash", tests, setup, teardown);
}
