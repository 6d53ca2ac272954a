/*
 * A ledger replica killed with SIGKILL in the middle of a batch of 8,190
 * transfers leaves the batch whole or absent, never in part, and a replica
 * started after it answers the client's resend consistently: every event ok
 * when nothing had committed, every event exists when the batch had.
 *
 * The test runs a broker of its own and one ledger replica behind it, on
 * the stack's database, and calls it over nng as the gateway would (the
 * caller context in the envelope). Each round sends a batch from a thread,
 * waits until a ledger backend is inside a transaction that has written
 * (it holds a transaction id) or running the write, kills the replica,
 * waits until PostgreSQL has finished whatever the dead replica had sent,
 * and counts the batch's rows.
 * Afterwards the tenant's balances are the sums of its stored transfers.
 */
#include "ledger_it.h"

#include <pthread.h>
#include <signal.h>

#include "ks_crypto.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define ACCOUNTS   200
#define ROUNDS     4
#define BATCH      LT_BATCH_MAX
#define CALL_MS    15000
#define WAIT_MS    10000
#define START_WAIT 30000
#define KILLED_MS  3000 /* the deadline of the call whose replica is killed */
#define RPC_PATH   "keelson.ledger.v1.LedgerService/"

static it_stack g_stack;
static int g_broker;
static it_service g_ledger;
static char g_base[64], g_env_broker[128], g_env_login[900];
static char g_tenant[40], g_user[40];

static void start_ledger(void)
{
        const char *env[] = {g_env_broker, g_env_login, "KEELSON_LEDGER_EXPIRY_INTERVAL_MS=60000",
                             NULL};
        assert_int_equal(
            it_service_start(&g_stack, "keelson-ledger", "KEELSON_LEDGER", env, &g_ledger), 0);
}

static void kill_ledger(void)
{
        it_pid_stop(&g_ledger.pid, SIGKILL);
}

/* ---- calls ------------------------------------------------------------------------ */

typedef struct call_job {
        ks_rpc_client *client;
        const char *method;
        int timeout_ms;
        uint8_t *body;
        size_t len;
        int code;
        int results[BATCH];
        size_t n_results;
} call_job;

static void *run_call(void *arg)
{
        call_job *j = arg;
        ks_caller caller = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        caller.authenticated = 1;
        caller.tenant_id = g_tenant;
        caller.user_id = g_user;
        caller.role = "owner";
        ks_rpc_call_args a = {.method = j->method,
                              .request_id = "ledger-crash",
                              .caller = &caller,
                              .deadline_unix_ms = ks_now_ms() + j->timeout_ms,
                              .payload = j->body,
                              .payload_len = j->len};
        ks_rpc_result res;

        j->code = ks_rpc_call(j->client, &a, &res);
        j->n_results = 0;
        if (j->code == KS_OK && strcmp(j->method, RPC_PATH "CreateTransfers") == 0) {
                Keelson__Ledger__V1__CreateTransfersResponse *out =
                    keelson__ledger__v1__create_transfers_response__unpack(NULL, res.payload_len,
                                                                           res.payload);
                if (out != NULL) {
                        for (size_t i = 0; i < out->n_results && i < BATCH; i++) {
                                j->results[i] = out->results[i];
                        }
                        j->n_results = out->n_results;
                        keelson__ledger__v1__create_transfers_response__free_unpacked(out, NULL);
                }
        }
        ks_rpc_result_clear(&res);
        return NULL;
}

/* Calls until the replica, just started, answers (or the wait is over). */
static void call_until_answered(call_job *j)
{
        int64_t until = ks_now_ms() + START_WAIT;
        do {
                run_call(j);
                if (j->code == KS_OK) {
                        return;
                }
                it_sleep_ms(100);
        } while (ks_now_ms() < until);
        fail_msg("%s: %s after %d ms", j->method, ks_code_name(j->code), START_WAIT);
}

/*
 * The CreateAccounts of accounts 1..ACCOUNTS (r < 0), or round r's
 * CreateTransfers batch: new ids, code r + 1, between the tenant's
 * accounts, amounts 1 to 100. Packed into *out (the caller frees it).
 */
static size_t pack_batch(int r, uint8_t **out)
{
        static lt_account_pb a[ACCOUNTS], *a_ptrs[ACCOUNTS];
        static lt_transfer_pb t[BATCH], *t_ptrs[BATCH];
        Keelson__Ledger__V1__CreateAccountsRequest accounts =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        Keelson__Ledger__V1__CreateTransfersRequest transfers =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        size_t len;

        for (int i = 0; r < 0 && i < ACCOUNTS; i++) {
                lt_account_init(&a[i], (u128)i + 1, 1, 1, 0);
                a_ptrs[i] = &a[i];
        }
        for (int i = 0; r >= 0 && i < BATCH; i++) {
                u128 dr = 1 + (u128)(rand() % ACCOUNTS), cr = 1 + (u128)(rand() % ACCOUNTS);
                if (cr == dr) {
                        cr = 1 + dr % ACCOUNTS;
                }
                lt_transfer_init(&t[i], lt_u128((uint64_t)r + 1, (uint64_t)i + 1), dr, cr,
                                 1 + (u128)(rand() % 100), 1, (uint32_t)r + 1, 0);
                t_ptrs[i] = &t[i];
        }
        accounts.n_accounts = ACCOUNTS;
        accounts.accounts = a_ptrs;
        transfers.n_transfers = BATCH;
        transfers.transfers = t_ptrs;
        *out = it_pack(r < 0 ? &accounts.base : &transfers.base, &len);
        return len;
}

/* ---- the database's side ---------------------------------------------------------- */

/*
 * Where a round kills the replica. Even rounds: as soon as a ledger backend
 * is inside a transaction that has written (the clock, its first
 * statement), while the batch's rows are read. Odd rounds: once the write
 * statement runs, which travels with its COMMIT.
 */
static const char *const sql_kill_point[2] = {
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'keelson-ledger'"
    " AND backend_xid IS NOT NULL",
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'keelson-ledger'"
    " AND state = 'active' AND query LIKE 'WITH w0 AS%'",
};

/* Ledger backends still running a statement of the transfers path. */
static const char sql_busy[] =
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'keelson-ledger'"
    " AND state = 'active' AND query LIKE '%ledger.%' AND query NOT LIKE '%pg_stat_activity%'";

/* Round r's transfers carry code r + 1: how many of them are stored. */
static long stored(PGconn *c, int r)
{
        char sql[192];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM ledger.transfers WHERE tenant_id = '%s' AND code = %d",
                 g_tenant, r + 1);
        return it_sql_long(c, sql, 0, NULL);
}

static void wait_quiet(PGconn *c)
{
        for (int waited = 0; waited < WAIT_MS; waited += 20) {
                if (it_sql_long(c, sql_busy, 0, NULL) == 0) {
                        return;
                }
                it_sleep_ms(20);
        }
        fail_msg("PostgreSQL still runs the dead replica's statements after %d ms", WAIT_MS);
}

static void assert_balances(PGconn *c)
{
        char sql[1024];
        snprintf(sql, sizeof(sql),
                 "WITH d AS (SELECT debit_account_id AS id, sum(amount) AS s FROM ledger.transfers"
                 "  WHERE tenant_id = '%s' GROUP BY 1),"
                 " c AS (SELECT credit_account_id AS id, sum(amount) AS s FROM ledger.transfers"
                 "  WHERE tenant_id = '%s' GROUP BY 1)"
                 " SELECT count(*) FROM ledger.accounts a LEFT JOIN d ON d.id = a.id"
                 " LEFT JOIN c ON c.id = a.id WHERE a.tenant_id = '%s'"
                 " AND (a.debits_posted <> coalesce(d.s, 0) OR a.credits_posted <> coalesce(c.s, 0)"
                 " OR a.debits_pending <> 0 OR a.credits_pending <> 0)",
                 g_tenant, g_tenant, g_tenant);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        assert_int_equal(it_sql_long(c, lt_sql_ledger_sums, 0, NULL), 0);
}

/* ---- the test ---------------------------------------------------------------------- */

static void test_killed_mid_batch(void **state)
{
        (void)state;
        ks_rpc_client *client = NULL;
        assert_int_equal(it_rpc_client(&client, g_base, KS_SVC_LEDGER, CALL_MS, 0), 0);
        PGconn *pg = it_pg_connect(&g_stack);
        assert_non_null(pg);

        static call_job accounts, batch, resend;
        start_ledger();
        accounts = (call_job){
            .client = client, .method = RPC_PATH "CreateAccounts", .timeout_ms = CALL_MS};
        accounts.len = pack_batch(-1, &accounts.body);
        call_until_answered(&accounts);

        int whole = 0, absent = 0;
        for (int r = 0; r < ROUNDS; r++) {
                batch = (call_job){.client = client,
                                   .method = RPC_PATH "CreateTransfers",
                                   .timeout_ms = KILLED_MS};
                batch.len = pack_batch(r, &batch.body);
                pthread_t th;
                assert_int_equal(pthread_create(&th, NULL, run_call, &batch), 0);
                /* Inside the batch's transaction, after its first write. */
                bool inside = false;
                for (int waited = 0; waited < WAIT_MS && !inside; waited++) {
                        inside = it_sql_long(pg, sql_kill_point[r % 2], 0, NULL) > 0;
                        if (!inside) {
                                it_sleep_ms(1);
                        }
                }
                kill_ledger();
                pthread_join(th, NULL);
                wait_quiet(pg);
                long n = stored(pg, r);
                print_message("round %d: killed %s, call %s, %ld of %d stored\n", r,
                              !inside      ? "before the kill point was seen"
                              : r % 2 == 0 ? "while the batch was read"
                                           : "while the batch was written",
                              ks_code_name(batch.code), n, BATCH);
                if (n != 0 && n != BATCH) {
                        fail_msg("round %d: %ld of %d transfers stored: a batch in part", r, n,
                                 BATCH);
                }
                n == BATCH ? whole++ : absent++;
                /* A replica again, and the client's resend: all ok, or all exists. */
                start_ledger();
                resend = (call_job){.client = client,
                                    .method = RPC_PATH "CreateTransfers",
                                    .timeout_ms = CALL_MS,
                                    .body = batch.body,
                                    .len = batch.len};
                call_until_answered(&resend);
                assert_int_equal(resend.n_results, BATCH);
                int want = n == BATCH ? TR(exists) : TR(ok);
                for (int i = 0; i < BATCH; i++) {
                        if (resend.results[i] != want) {
                                fail_msg("round %d, event %d: %s after %ld stored", r, i,
                                         lt_tr_name(resend.results[i]), n);
                        }
                }
                assert_int_equal(stored(pg, r), BATCH);
                free(batch.body);
        }
        print_message("%d batches whole at the kill, %d absent\n", whole, absent);
        assert_balances(pg);
        free(accounts.body);
        PQfinish(pg);
        ks_rpc_client_free(client);
}

static int setup(void **state)
{
        (void)state;
        char login[800];
        if (it_stack_load(&g_stack) != 0 ||
            it_stack_env("KEELSON_IT_LEDGER_LOGIN_DSN", login, sizeof(login)) != 0) {
                return -1;
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        if (ks_uuid_v4(g_tenant) != 0 || ks_uuid_v4(g_user) != 0) {
                return -1;
        }
        snprintf(g_env_login, sizeof(g_env_login), "KEELSON_LEDGER_PG_LOGIN_DSN=%s", login);
        if ((g_broker = it_broker_start(&g_stack, g_base, sizeof(g_base))) <= 0) {
                g_broker = 0;
                return -1;
        }
        snprintf(g_env_broker, sizeof(g_env_broker), "KEELSON_BROKER_URL=%s", g_base);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        kill_ledger();
        it_pid_stop(&g_broker, SIGTERM);
        return 0;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_killed_mid_batch),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
