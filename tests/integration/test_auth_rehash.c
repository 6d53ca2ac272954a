/*
 * Changing the configured scrypt parameters needs no migration: a login
 * through a replica configured otherwise rehashes the stored password with
 * that replica's parameters, and the password keeps verifying everywhere.
 *
 * The extra replica (KEELSON_AUTH_SCRYPT_LOG_N=10, the stack's run with the
 * default 14) shares the stack's database but sits behind a broker of this
 * test's own, in process: the Login this test sends there can only reach
 * that replica, however many run behind the stack's broker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth_it.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_broker.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define STACK_LN   "ln=14," /* KEELSON_AUTH_SCRYPT_LOG_N's default, as the stack runs */
#define REPLICA_LN "ln=10,"
#define HASH_MAX   256
#define CALL_MS    10000

typedef struct fixture {
        ait_replica own;
        ks_rpc_client *client;
} fixture;

static int teardown(void **state)
{
        fixture *f = *state;

        if (f == NULL) {
                return 0;
        }
        ks_rpc_client_free(f->client);
        ait_replica_stop(&f->own);
        return 0;
}

/* The test's broker on random free ports, the replica behind it, a client in front. */
static int setup(void **state)
{
        static fixture f;
        const char *env[] = {"KEELSON_AUTH_SCRYPT_LOG_N=10", "KEELSON_AUTH_HASH_WORKERS=1", NULL};

        memset(&f, 0, sizeof(f));
        *state = &f;
        if (ait_setup(state) != 0 || ait_replica_start(&f.own, env) != 0) {
                return -1;
        }
        if (it_rpc_client(&f.client, f.own.base, KS_SVC_AUTH, CALL_MS, 1) != 0) {
                teardown(state); /* cmocka runs no teardown after a failed setup */
                return -1;
        }
        return 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* The stored hash string of email's account. */
static void stored_hash(const char *email, char out[HASH_MAX])
{
        const char *params[1] = {email};
        PGconn *pg = ait_pg();
        PGresult *res =
            it_sql(pg, "SELECT password_hash FROM auth.users WHERE email = $1", 1, params);

        if (PQntuples(res) != 1) {
                fail_msg("no user row for %s", email);
        }
        snprintf(out, HASH_MAX, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
        PQfinish(pg);
}

/* Login over nng through the test's broker, that is through the extra replica only. */
static int replica_login(fixture *f, const char *email, const char *password, char token[512])
{
        Keelson__Auth__V1__LoginRequest req = KEELSON__AUTH__V1__LOGIN_REQUEST__INIT;
        Keelson__Auth__V1__LoginResponse *resp;
        uint8_t buf[1024];
        ks_rpc_call_args args = {0};
        ks_rpc_result res;
        int code;

        req.email = (char *)email;
        req.password = (char *)password;
        assert_true(keelson__auth__v1__login_request__get_packed_size(&req) <= sizeof(buf));
        args.method = "keelson.auth.v1.AuthService/Login";
        args.request_id = "it-rehash-login";
        args.deadline_unix_ms = ks_now_ms() + CALL_MS;
        args.payload = buf;
        args.payload_len = keelson__auth__v1__login_request__pack(&req, buf);
        code = ks_rpc_call(f->client, &args, &res);
        token[0] = '\0';
        if (code == KS_OK) {
                resp =
                    keelson__auth__v1__login_response__unpack(NULL, res.payload_len, res.payload);
                assert_non_null(resp);
                snprintf(token, 512, "%s", resp->session_token);
                keelson__auth__v1__login_response__free_unpacked(resp, NULL);
        }
        ks_rpc_result_clear(&res);
        return code;
}

/* ---- the test ----------------------------------------------------------- */

static void test_login_rehashes_with_the_replicas_parameters(void **state)
{
        fixture *f = *state;
        char before[HASH_MAX], after[HASH_MAX], back[HASH_MAX], token[512];
        ait_user u;

        ait_signup("it-rehash", "Rehash", &u);
        const char *email = u.email;
        stored_hash(email, before);
        assert_non_null(strstr(before, STACK_LN));

        /* A wrong password through the extra replica changes nothing. */
        assert_int_equal(replica_login(f, email, "not the password", token), KS_UNAUTHENTICATED);
        stored_hash(email, after);
        assert_string_equal(after, before);

        /* The right one verifies against the old hash, then stores a new one. */
        assert_int_equal(replica_login(f, email, AIT_PASSWORD, token), KS_OK);
        assert_true(token[0] != '\0');
        stored_hash(email, after);
        assert_non_null(strstr(after, REPLICA_LN));
        assert_null(strstr(after, STACK_LN));
        assert_string_not_equal(after, before);

        /* Its session is an ordinary one: the gateway accepts it. */
        assert_int_equal(ait_status("WhoAmI", "{}", token), 200);

        /* The new hash verifies on the stack's replicas, which bring back their own. */
        assert_int_equal(ait_login_status(email, "not the password"), 401);
        assert_int_equal(ait_login_status(email, AIT_PASSWORD), 200);
        stored_hash(email, back);
        assert_non_null(strstr(back, STACK_LN));
        assert_string_not_equal(back, after);

        /* And the extra replica verifies that one too. */
        assert_int_equal(replica_login(f, email, AIT_PASSWORD, token), KS_OK);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_login_rehashes_with_the_replicas_parameters, setup,
                                            teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
