/*
 * A committed event survives the death of the process that wrote it. The
 * test runs its own broker and an auth replica of its own with its outbox
 * relay off (KEELSON_AUTH_OUTBOX_RELAY=false), on the stack's database: that
 * replica commits a sign-up (and its users.admin_summary outbox row) and is
 * killed with SIGKILL before anything of its own could publish it. The
 * stack's auth replicas, whose relays share the outbox table, must publish
 * the event on the stack's broker, and mark the row published.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.pb-c.h"
#include "it_support.h"
#include "ks_events.h"
#include "ks_rpc.h"
#include "ks_topology.h"

/* The processes this test started; the teardown stops what a failure left. */
static int broker_pid;
static it_service auth;

static int teardown(void **state)
{
        (void)state;
        it_pid_stop(&auth.pid, SIGKILL);
        it_pid_stop(&broker_pid, SIGKILL);
        return 0;
}

/* SignUp through our own broker, retried until our replica answers. */
static void signup(const char *base, const char *email, char tenant_id[64])
{
        ks_rpc_client *c = NULL;
        assert_int_equal(it_rpc_client(&c, base, KS_SVC_AUTH, 5000, 0), 0);
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        req.email = (char *)email;
        req.password = "correct horse battery";
        req.tenant_name = "Outbox Recovery";
        uint8_t buf[512];
        size_t len = keelson__auth__v1__sign_up_request__pack(&req, buf);
        ks_rpc_call_args a = {.method = "keelson.auth.v1.AuthService/SignUp",
                              .request_id = "outbox-recovery",
                              .payload = buf,
                              .payload_len = len};
        ks_rpc_result res;
        int code = KS_UNAVAILABLE;
        int64_t until = ks_now_ms() + 30000; /* the replica is starting */
        while (code != KS_OK && ks_now_ms() < until) {
                a.deadline_unix_ms = ks_now_ms() + 2000;
                code = ks_rpc_call(c, &a, &res);
                if (code != KS_OK) {
                        ks_rpc_result_clear(&res);
                        it_sleep_ms(100);
                }
        }
        assert_int_equal(code, KS_OK);
        Keelson__Auth__V1__SignUpResponse *out =
            keelson__auth__v1__sign_up_response__unpack(NULL, res.payload_len, res.payload);
        assert_non_null(out);
        snprintf(tenant_id, 64, "%s", out->tenant_id);
        keelson__auth__v1__sign_up_response__free_unpacked(out, NULL);
        ks_rpc_result_clear(&res);
        ks_rpc_client_free(c);
}

static void test_another_replica_publishes_what_a_killed_one_committed(void **state)
{
        (void)state;
        it_stack s;
        assert_int_equal(it_stack_load(&s), 0);

        /* the stack's event bus, where the stack's relays publish */
        const char *bases[] = {s.broker_url};
        const char *prefixes[] = {"users.admin_summary"};
        ks_subscriber *sub = NULL;
        assert_int_equal(ks_subscriber_new(&sub, bases, 1, prefixes, 1), KS_OK);

        /* our own broker and relay-less auth replica, on the stack's database */
        char base[64], env_broker[128];
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        broker_pid = it_broker_start(&s, base, sizeof(base));
        assert_true(broker_pid > 0);
        snprintf(env_broker, sizeof(env_broker), "KEELSON_BROKER_URL=%s", base);
        const char *auth_env[] = {env_broker, "KEELSON_AUTH_OUTBOX_RELAY=false",
                                  "KEELSON_AUTH_HASH_WORKERS=1", NULL};
        assert_int_equal(it_service_start(&s, "keelson-auth", "KEELSON_AUTH", auth_env, &auth), 0);

        char email[128], tenant_id[64];
        it_unique_email("outbox-recovery", email, sizeof(email));
        signup(base, email, tenant_id);
        it_pid_stop(&auth.pid, SIGKILL); /* committed; never published by its writer */
        it_pid_stop(&broker_pid, SIGTERM);

        bool seen = false;
        int64_t until = ks_now_ms() + 20000;
        while (!seen && ks_now_ms() < until) {
                Keelson__Events__V1__Event *ev = NULL;
                if (ks_subscriber_next(sub, 500, &ev) == KS_OK) {
                        seen = strcmp(ev->tenant_id, tenant_id) == 0;
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                }
        }
        ks_subscriber_free(sub);
        assert_true(seen);

        PGconn *pg = it_pg_connect(&s);
        assert_non_null(pg);
        const char *params[] = {tenant_id};
        PGresult *r = it_sql(pg,
                             "SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM"
                             " auth.outbox_queue q WHERE q.id = o.id)), count(*)"
                             " FROM auth.outbox o WHERE topic = 'users.admin_summary'"
                             " AND tenant_id = $1::uuid",
                             1, params);
        assert_string_equal(PQgetvalue(r, 0, 1), "1"); /* exactly one event for the sign-up */
        assert_string_equal(PQgetvalue(r, 0, 0), "1"); /* and it is marked published */
        PQclear(r);
        PQfinish(pg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_teardown(test_another_replica_publishes_what_a_killed_one_committed,
                                      teardown),
        };
        return cmocka_run_group_tests_name("outbox_recovery", tests, NULL, NULL);
}
