/*
 * SIGTERM while a call is held: what a process holds is finished and
 * answered before it exits 0, and it stops looking ready at once. On a
 * broker of the test's own with one auth and one ledger replica and a
 * gateway of its own, the test holds a lock on the tenant's ledger accounts
 * in a transaction of its own, so that a CreateTransfers sent through the
 * gateway stays in the ledger's open batch (its commit waits for the lock):
 *
 * - the ledger replica signalled: /readyz 503 within a second, the process
 *   still there while the call waits; the lock released, the call answered
 *   200 with the transfer created, the process exits 0 (its log: "stopped",
 *   exit_status 0, nothing dropped at close); the transfer is stored;
 * - the gateway signalled (the same held call, the ledger started again):
 *   it refuses new connections and its /readyz says 503 at once, answers
 *   the request it had read once the lock goes, and exits 0 ("gateway
 *   stopped", exit_status 0).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_support.h"
#include "ks_clock.h"
#include "ledger_it.h"

#define LEDGER_ID   700
#define WAIT_MS     10000 /* for what should take far less */
#define HELD_MS     400   /* the call is seen still held this long after the signal */
#define CALL_BUDGET "20000"

static struct {
        it_stack stack;
        int broker_pid;
        char base[64];
        char env_broker[96];
        char env_auth_login[900], env_ledger_login[900];
        it_service auth, ledger;
        it_gateway gateway;
        lt_tenant tenant;
        PGconn *lock;  /* the test's transaction holding the accounts */
        PGconn *watch; /* pg_stat_activity, read outside that transaction (whose first read
                          of the view would be kept until it ends) */
} g;

static int start_ledger(void)
{
        const char *env[] = {g.env_broker, g.env_ledger_login, NULL};
        return it_service_start(&g.stack, "keelson-ledger", "KEELSON_LEDGER", env, &g.ledger);
}

static int start_gateway(void)
{
        const char *env[] = {g.env_broker, NULL};
        return it_gateway_start(&g.stack, env, 1, &g.gateway);
}

static int teardown(void **state)
{
        (void)state;
        if (g.lock != NULL) {
                PQfinish(g.lock);
                g.lock = NULL;
        }
        if (g.watch != NULL) {
                PQfinish(g.watch);
                g.watch = NULL;
        }
        it_gateway_stop(&g.gateway);
        it_service_stop(&g.ledger);
        it_service_stop(&g.auth);
        it_pid_stop(&g.broker_pid, SIGTERM);
        return 0;
}

static int setup(void **state)
{
        if (it_stack_load(&g.stack) != 0 ||
            it_stack_env_as("KEELSON_IT_AUTH_LOGIN_DSN", "KEELSON_AUTH_PG_LOGIN_DSN",
                            g.env_auth_login, sizeof(g.env_auth_login)) != 0 ||
            it_stack_env_as("KEELSON_IT_LEDGER_LOGIN_DSN", "KEELSON_LEDGER_PG_LOGIN_DSN",
                            g.env_ledger_login, sizeof(g.env_ledger_login)) != 0) {
                return -1;
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        if ((g.broker_pid = it_broker_start(&g.stack, g.base, sizeof(g.base))) <= 0) {
                g.broker_pid = 0;
                return -1;
        }
        snprintf(g.env_broker, sizeof(g.env_broker), "KEELSON_BROKER_URL=%s", g.base);
        const char *auth_env[] = {g.env_broker, g.env_auth_login, "KEELSON_AUTH_OUTBOX_RELAY=false",
                                  NULL};
        if (it_service_start(&g.stack, "keelson-auth", "KEELSON_AUTH", auth_env, &g.auth) != 0 ||
            start_ledger() != 0 || start_gateway() != 0) {
                teardown(state);
                return -1;
        }
        it_stack own = g.stack;
        snprintf(own.gateway_url, sizeof(own.gateway_url), "%s", g.gateway.url);
        lt_tenant_new(&own, "drain", &g.tenant);
        return 0;
}

/* ---- the held call ------------------------------------------------------------ */

typedef struct held_call {
        pthread_t thread;
        uint64_t id;
        long status; /* HTTP status; 0 until answered */
        int result;  /* the transfer's result (ok when no result came back) */
} held_call;

static void *call_main(void *arg)
{
        held_call *c = arg;
        lt_transfer_pb tr;
        lt_transfer_pb *trs[1] = {&tr};
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        ProtobufCMessage *out = NULL;
        char err[64];

        lt_transfer_init(&tr, c->id, 1, 2, 25, LEDGER_ID, 1, 0);
        req.n_transfers = 1;
        req.transfers = trs;
        c->status = lt_call_status(&g.tenant, "CreateTransfers", &req.base,
                                   &keelson__ledger__v1__create_transfers_response__descriptor,
                                   &out, err, sizeof(err));
        c->result = TR(ok);
        if (out != NULL) {
                const Keelson__Ledger__V1__CreateTransfersResponse *r = (const void *)out;
                if (r->n_results > 0) {
                        c->result = (int)r->results[0];
                }
                protobuf_c_message_free_unpacked(out, NULL);
        }
        return NULL;
}

/* The two accounts of the test, once. */
static void accounts(void)
{
        static bool made;
        lt_account_pb a[2];
        int results[2];

        if (made) {
                return;
        }
        lt_account_init(&a[0], 1, LEDGER_ID, 1, 0);
        lt_account_init(&a[1], 2, LEDGER_ID, 1, 0);
        lt_create_accounts(&g.tenant, a, 2, results);
        assert_int_equal(results[0], AR(ok));
        assert_int_equal(results[1], AR(ok));
        made = true;
}

/* Locks the tenant's accounts in a transaction of the test's own. */
static void lock_accounts(void)
{
        const char *params[1] = {g.tenant.tenant_id};
        if (g.watch == NULL) {
                g.watch = PQconnectdb(g.stack.pg_dsn);
                assert_int_equal(PQstatus(g.watch), CONNECTION_OK);
        }
        if (g.lock != NULL) { /* left by a test that failed: its lock goes */
                PQfinish(g.lock);
        }
        g.lock = PQconnectdb(g.stack.pg_dsn);
        assert_int_equal(PQstatus(g.lock), CONNECTION_OK);
        PGresult *r = PQexec(g.lock, "BEGIN");
        assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
        r = PQexecParams(g.lock, "SELECT id FROM ledger.accounts WHERE tenant_id = $1 FOR UPDATE",
                         1, NULL, params, NULL, NULL, 0);
        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(r), 2);
        PQclear(r);
}

static void unlock_accounts(void)
{
        PGresult *r = PQexec(g.lock, "ROLLBACK");
        assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
        PQfinish(g.lock);
        g.lock = NULL;
}

/* Waits until a backend other than the test's waits for a lock: the call is held. */
static void wait_held(const held_call *c)
{
        for (int t = 0; t < WAIT_MS / 20 && c->status == 0; t++) {
                if (it_sql_long(g.watch,
                                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                                "'Lock' AND query ILIKE '%ledger.%'",
                                0, NULL) > 0) {
                        return;
                }
                it_sleep_ms(20);
        }
        PGresult *r = PQexec(g.watch, "SELECT coalesce(wait_event_type, '-') || ' ' || state || ' "
                                      "' || left(query, 120) FROM pg_stat_activity WHERE pid <> "
                                      "pg_backend_pid() AND query ILIKE '%ledger.%'");
        for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
                fprintf(stderr, "backend: %s\n", PQgetvalue(r, i, 0));
        }
        PQclear(r);
        fail_msg("the CreateTransfers never waited for the test's lock (its HTTP status: %ld)",
                 c->status);
}

static held_call *start_held(uint64_t id)
{
        static held_call c;
        memset(&c, 0, sizeof(c));
        c.id = id;
        accounts();
        lock_accounts();
        assert_int_equal(pthread_create(&c.thread, NULL, call_main, &c), 0);
        wait_held(&c);
        return &c;
}

static long readyz(const char *base)
{
        it_http_response r;
        if (it_http_get(base, "/readyz", &r) != 0) {
                return 0;
        }
        long status = r.status;
        it_http_response_free(&r);
        return status;
}

/* Polls /readyz at base until 503: the ms it took, or -1 after WAIT_MS. */
static long long wait_not_ready(const char *base)
{
        int64_t t0 = ks_mono_ms();
        while (ks_mono_ms() - t0 < WAIT_MS) {
                if (readyz(base) == 503) {
                        return (long long)(ks_mono_ms() - t0);
                }
                it_sleep_ms(5);
        }
        return -1;
}

/* Waits for *pid to exit: its exit status, or -1 (killed, or still there after WAIT_MS). */
static int wait_exit(int *pid)
{
        int st = 0;
        for (int t = 0; t < WAIT_MS / 10; t++) {
                pid_t w = waitpid(*pid, &st, WNOHANG);
                if (w == *pid) {
                        *pid = 0;
                        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                }
                it_sleep_ms(10);
        }
        return -1;
}

static void assert_stored(uint64_t id)
{
        u128 ids[1] = {id};
        Keelson__Ledger__V1__LookupTransfersResponse *r = lt_lookup_transfers(&g.tenant, ids, 1);
        assert_int_equal(r->n_transfers, 1);
        assert_int_equal(r->transfers[0]->amount, 25);
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---- the tests --------------------------------------------------------------- */

/*
 * Signals *pid (its /readyz at ready_url) while it holds a CreateTransfers
 * of transfer id: /readyz 503 within a second, the process still there
 * HELD_MS later with the call unanswered; then the lock goes, the call is
 * answered 200 ok, and the process exits 0. at_503 runs once /readyz said
 * 503 (NULL: nothing more to check then).
 */
static void signal_while_held(const char *name, int *pid, const char *ready_url, uint64_t id,
                              void (*at_503)(void))
{
        held_call *c = start_held(id);
        assert_int_equal(kill(*pid, SIGTERM), 0);
        long long ms = wait_not_ready(ready_url);
        printf("%s: /readyz 503 %lld ms after SIGTERM\n", name, ms);
        assert_true(ms >= 0 && ms < 1000);
        if (at_503 != NULL) {
                at_503();
        }
        it_sleep_ms(HELD_MS);
        assert_int_equal(kill(*pid, 0), 0); /* still there: it holds the call */
        assert_int_equal(c->status, 0);
        unlock_accounts();
        pthread_join(c->thread, NULL);
        assert_int_equal(c->status, 200);
        assert_int_equal(c->result, TR(ok));
        assert_int_equal(wait_exit(pid), 0);
}

static void test_service_finishes_the_batch_it_holds(void **state)
{
        (void)state;
        char health[64];
        const char *stopped[] = {"\"msg\":\"stopped\"", "\"exit_status\":0"};
        const char *nothing_dropped[] = {"rpc server stopped", "\"dropped_at_close\":0"};

        snprintf(health, sizeof(health), "http://127.0.0.1:%d", g.ledger.health_port);
        signal_while_held("ledger", &g.ledger.pid, health, 1001, NULL);
        assert_int_equal(it_file_lines_with(g.ledger.log_path, stopped, 2), 1);
        assert_int_equal(it_file_lines_with(g.ledger.log_path, nothing_dropped, 2), 1);
        assert_int_equal(start_ledger(), 0);
        assert_stored(1001);
}

/* A draining gateway takes no new connection. */
static void refuses_connections(void)
{
        it_http_response r;
        assert_int_not_equal(it_http_get(g.gateway.url, "/healthz", &r), 0);
}

static void test_gateway_answers_the_request_it_read(void **state)
{
        (void)state;
        const char *stopped[] = {"\"msg\":\"gateway stopped\"", "\"exit_status\":0"};

        signal_while_held("gateway", &g.gateway.pid, g.gateway.admin_url, 1002,
                          refuses_connections);
        assert_int_equal(it_file_lines_with(g.gateway.log_path, stopped, 2), 1);
        assert_int_equal(start_gateway(), 0);
        snprintf(g.tenant.gateway, sizeof(g.tenant.gateway), "%s", g.gateway.url);
        assert_stored(1002);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_service_finishes_the_batch_it_holds),
            cmocka_unit_test(test_gateway_answers_the_request_it_read),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
