/*
 * Unit tests of the gateway's Connect rules (connect.c) and route table
 * (routes.c, from the services' methods.def rows in catalog.c): what a
 * client sends, what it is told, and which calls survive a replica's death.
 *
 * Built from services/gateway/connect.c and routes.c plus keelson_core; it
 * lives in its own folder because every .c directly under services/gateway/
 * goes into the gateway binary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "catalog.h"
#include "connect.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_topology.h"
#include "routes.h"

static void test_codec(void **state)
{
        (void)state;
        gw_codec c = GW_CODEC_PROTO;
        assert_int_equal(gw_connect_codec("application/json", &c), 0);
        assert_int_equal(c, GW_CODEC_JSON);
        assert_int_equal(gw_connect_codec("application/json; charset=utf-8", &c), 0);
        assert_int_equal(c, GW_CODEC_JSON);
        assert_int_equal(gw_connect_codec(" Application/JSON ;charset=utf-8", &c), 0);
        assert_int_equal(c, GW_CODEC_JSON);
        assert_int_equal(gw_connect_codec("application/proto", &c), 0);
        assert_int_equal(c, GW_CODEC_PROTO);
        assert_string_equal(gw_codec_content_type(GW_CODEC_PROTO), "application/proto");
        assert_string_equal(gw_codec_content_type(GW_CODEC_JSON), "application/json");
}

static void test_codec_rejects(void **state)
{
        (void)state;
        const char *bad[] = {NULL,
                             "",
                             "text/plain",
                             "application/jsonx",
                             "application/protobuf",
                             "application/connect+json",
                             "application/grpc",
                             "json"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gw_codec c;
                assert_int_equal(gw_connect_codec(bad[i], &c), -1);
        }
}

static void test_version(void **state)
{
        (void)state;
        assert_true(gw_connect_version_ok(NULL));
        assert_true(gw_connect_version_ok("1"));
        assert_false(gw_connect_version_ok("2"));
        assert_false(gw_connect_version_ok("1.0"));
        assert_false(gw_connect_version_ok(""));
}

static void test_timeout(void **state)
{
        (void)state;
        int64_t ms = -1;
        bool has = true;
        assert_int_equal(gw_connect_timeout(NULL, &ms, &has), 0);
        assert_false(has);
        assert_int_equal(gw_connect_timeout("250", &ms, &has), 0);
        assert_true(has);
        assert_int_equal(ms, 250);
        assert_int_equal(gw_connect_timeout("0", &ms, &has), 0);
        assert_int_equal(ms, 0);
        assert_int_equal(gw_connect_timeout("9999999999", &ms, &has), 0);
        assert_int_equal(ms, 9999999999LL);
        const char *bad[] = {"", "12345678901", "-5", "+5", "1.5", "10s", " 10", "abc"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(gw_connect_timeout(bad[i], &ms, &has), -1);
        }
}

static void test_idempotency_key(void **state)
{
        (void)state;
        char out[GW_IDEMPOTENCY_KEY_MAX + 1];
        char longest[GW_IDEMPOTENCY_KEY_MAX + 2];

        assert_int_equal(gw_idempotency_key(NULL, out), 0);
        assert_string_equal(out, "");
        assert_int_equal(gw_idempotency_key("order-42 retry#1", out), 0);
        assert_string_equal(out, "order-42 retry#1");
        memset(longest, 'k', GW_IDEMPOTENCY_KEY_MAX);
        longest[GW_IDEMPOTENCY_KEY_MAX] = '\0';
        assert_int_equal(gw_idempotency_key(longest, out), 0);
        assert_int_equal(strlen(out), GW_IDEMPOTENCY_KEY_MAX);
        longest[GW_IDEMPOTENCY_KEY_MAX] = 'k';
        longest[GW_IDEMPOTENCY_KEY_MAX + 1] = '\0';
        assert_int_equal(gw_idempotency_key(longest, out), -1);
        const char *bad[] = {"", "tab\there", "nl\n", "caf\xc3\xa9", "del\x7f"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(gw_idempotency_key(bad[i], out), -1);
        }
}

static void test_encoding(void **state)
{
        (void)state;
        assert_true(gw_identity_encoding(NULL));
        assert_true(gw_identity_encoding("identity"));
        assert_true(gw_identity_encoding("Identity"));
        assert_false(gw_identity_encoding("gzip"));
        assert_false(gw_identity_encoding("br"));
        assert_false(gw_identity_encoding(""));
}

static void test_request_id(void **state)
{
        (void)state;
        char max[GW_REQUEST_ID_MAX + 2];
        memset(max, 'a', sizeof(max));
        max[GW_REQUEST_ID_MAX] = '\0';
        assert_true(gw_request_id_valid("abc-123_X.y"));
        assert_true(gw_request_id_valid(max));
        max[GW_REQUEST_ID_MAX] = 'a';
        max[GW_REQUEST_ID_MAX + 1] = '\0';
        assert_false(gw_request_id_valid(max));
        assert_false(gw_request_id_valid(NULL));
        assert_false(gw_request_id_valid(""));
        assert_false(gw_request_id_valid("has space"));
        assert_false(gw_request_id_valid("a\"b"));
        assert_false(gw_request_id_valid("a\nb"));
}

static void test_bearer(void **state)
{
        (void)state;
        const char *tok = NULL;
        size_t len = 0;
        assert_int_equal(gw_bearer_token("Bearer abc.DEF-_~+/==", &tok, &len), 0);
        assert_int_equal(len, strlen("abc.DEF-_~+/=="));
        assert_memory_equal(tok, "abc.DEF-_~+/==", len);
        assert_int_equal(gw_bearer_token("bearer   tok  ", &tok, &len), 0);
        assert_int_equal(len, 3);
        assert_memory_equal(tok, "tok", 3);
}

static void test_bearer_rejects(void **state)
{
        (void)state;
        char long_tok[GW_TOKEN_MAX + 16];
        snprintf(long_tok, sizeof(long_tok), "Bearer ");
        memset(long_tok + 7, 'a', GW_TOKEN_MAX + 1);
        long_tok[7 + GW_TOKEN_MAX + 1] = '\0';
        const char *bad[] = {NULL,        "",           "Bearer",      "Bearer ",    "Basic abc",
                             "Bearerabc", "Bearer a b", "Bearer =abc", "Bearer a=b", "Bearer a\"b",
                             long_tok};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                const char *tok = NULL;
                size_t len = 0;
                assert_int_equal(gw_bearer_token(bad[i], &tok, &len), -1);
        }
}

static void test_error_json(void **state)
{
        (void)state;
        char *out = NULL;
        size_t len = 0;
        assert_int_equal(gw_error_json(KS_UNAUTHENTICATED, "say \"hi\"\n", &out, &len), 0);
        json_error_t err;
        json_t *obj = json_loadb(out, len, 0, &err);
        assert_non_null(obj);
        assert_string_equal(json_string_value(json_object_get(obj, "code")), "unauthenticated");
        assert_string_equal(json_string_value(json_object_get(obj, "message")), "say \"hi\"\n");
        json_decref(obj);
        free(out);
        /* Not UTF-8: the code still arrives, in valid JSON. */
        assert_int_equal(gw_error_json(KS_INTERNAL, "\xff\xfe", &out, &len), 0);
        obj = json_loadb(out, len, 0, &err);
        assert_non_null(obj);
        assert_string_equal(json_string_value(json_object_get(obj, "code")), "internal");
        json_decref(obj);
        free(out);
}

static void test_routes(void **state)
{
        (void)state;
        gw_routes *r = NULL;
        assert_int_equal(gw_routes_new(&r), 0);
        gw_route *login = gw_routes_find(r, "/keelson.auth.v1.AuthService/Login");
        assert_non_null(login);
        assert_string_equal(login->method, "keelson.auth.v1.AuthService/Login");
        assert_int_equal(login->service, KS_SVC_AUTH);
        assert_true((login->flags & KS_M_PUBLIC) != 0);
        assert_string_equal(login->input->name, "keelson.auth.v1.LoginRequest");
        assert_string_equal(login->output->name, "keelson.auth.v1.LoginResponse");
        gw_route *signup = gw_routes_find(r, "/keelson.auth.v1.AuthService/SignUp");
        assert_non_null(signup);
        assert_true((signup->flags & KS_M_PUBLIC) != 0);
        gw_route *whoami = gw_routes_find(r, "/keelson.auth.v1.AuthService/WhoAmI");
        assert_non_null(whoami);
        assert_int_equal(whoami->flags & KS_M_PUBLIC, 0); /* needs a caller */
        assert_non_null(gw_routes_find(r, "/keelson.auth.v1.AuthService/Logout"));
        /* Internal: never routed, exactly like an unknown method. */
        assert_null(gw_routes_find(r, "/keelson.auth.v1.AuthService/ResolveContext"));
        assert_null(gw_routes_find(r, "/keelson.auth.v1.AuthService/login"));
        assert_null(gw_routes_find(r, "keelson.auth.v1.AuthService/Login"));
        assert_null(gw_routes_find(r, "/keelson.auth.v1.AuthService/Login/"));
        assert_null(gw_routes_find(r, NULL));
        /* Every method of AuthService but ResolveContext, its one internal method. */
        size_t n_auth = 0;
        for (size_t i = 0; i < gw_routes_count(r); i++) {
                n_auth +=
                    strncmp(gw_routes_at(r, i)->path, "/keelson.auth.v1.AuthService/", 29) == 0;
        }
        assert_int_equal(n_auth, keelson__auth__v1__auth_service__descriptor.n_methods - 1);
        assert_string_equal(gw_routes_unmatched(r)->path, "unmatched");
        gw_routes_free(r);
}

/* The route of one method, which must exist. */
static const gw_route *route(gw_routes *r, const char *method)
{
        char path[GW_PATH_MAX];
        snprintf(path, sizeof(path), "/%s", method);
        const gw_route *found = gw_routes_find(r, path);
        if (found == NULL) {
                fail_msg("no route for %s", method);
        }
        return found;
}

/*
 * Every method of every catalog table is routed with exactly its row's
 * flags and revocation, or (internal) not routed at all; the one resolver
 * is auth's ResolveContext.
 */
static void test_routes_are_the_rows(void **state)
{
        (void)state;
        gw_routes *r = NULL;
        size_t routed = 0;
        assert_int_equal(gw_routes_new(&r), 0);
        for (size_t t = 0; t < gw_catalog_n; t++) {
                ks_method *v = NULL;
                size_t n = 0;
                char err[256];
                assert_int_equal(ks_method_resolve(&gw_catalog[t], &v, &n, err, sizeof(err)), 0);
                for (size_t i = 0; i < n; i++) {
                        if ((v[i].flags & (KS_M_INTERNAL | KS_M_INTAKE)) != 0) {
                                char path[GW_PATH_MAX];
                                snprintf(path, sizeof(path), "/%s", v[i].name);
                                assert_null(gw_routes_find(r, path));
                                if ((v[i].flags & KS_M_INTAKE) != 0) {
                                        /* served at /webhooks/... (intake.h), not at its path */
                                        assert_ptr_equal(gw_routes_intake(r)->input, v[i].input);
                                        routed++;
                                }
                                continue;
                        }
                        const gw_route *g = route(r, v[i].name);
                        assert_int_equal(g->flags, v[i].flags);
                        assert_int_equal(g->revokes, v[i].revokes);
                        assert_ptr_equal(g->input, v[i].input);
                        routed++;
                }
                ks_method_free(v, n);
        }
        assert_int_equal(gw_routes_count(r), routed);
        assert_string_equal(gw_routes_resolver(r)->method,
                            "keelson.auth.v1.AuthService/ResolveContext");
        assert_int_equal(gw_routes_resolver(r)->service, KS_SVC_AUTH);
        assert_true((gw_routes_resolver(r)->flags & KS_M_IDEMPOTENT) != 0);
        gw_routes_free(r);
}

/* What a replica's death does to a call: reads are resent, batch writes are not. */
static void test_resendable_methods(void **state)
{
        static const char *const resent[] = {
            "keelson.ledger.v1.LedgerService/LookupAccounts",
            "keelson.ledger.v1.LedgerService/LookupTransfers",
            "keelson.ledger.v1.LedgerService/GetAccountTransfers",
            "keelson.ledger.v1.LedgerService/GetAccountBalances",
            "keelson.ledger.v1.LedgerService/GetTrialBalance",
            "keelson.summary.v1.AdminSummaryService/GetSummary",
            "keelson.auth.v1.AuthService/WhoAmI",
            "keelson.auth.v1.AuthService/ListMembers",
        };
        static const char *const not_resent[] = {
            "keelson.ledger.v1.LedgerService/CreateAccounts",
            "keelson.ledger.v1.LedgerService/CreateTransfers",
            "keelson.auth.v1.AuthService/Login",
            "keelson.auth.v1.AuthService/CreateApiKey",
            "keelson.auth.v1.AuthService/SwitchTenant",
        };
        (void)state;
        gw_routes *r = NULL;
        assert_int_equal(gw_routes_new(&r), 0);
        for (size_t i = 0; i < sizeof(resent) / sizeof(resent[0]); i++) {
                assert_true((route(r, resent[i])->flags & KS_M_IDEMPOTENT) != 0);
        }
        for (size_t i = 0; i < sizeof(not_resent) / sizeof(not_resent[0]); i++) {
                assert_int_equal(route(r, not_resent[i])->flags & KS_M_IDEMPOTENT, 0);
        }
        assert_int_equal(route(r, "keelson.auth.v1.AuthService/Logout")->revokes, KS_REVOKES_TOKEN);
        assert_int_equal(route(r, "keelson.auth.v1.AuthService/ChangePassword")->revokes,
                         KS_REVOKES_USER);
        assert_true(gw_method_routed("keelson.ledger.v1.LedgerService/GetTrialBalance"));
        assert_false(gw_method_routed("keelson.auth.v1.AuthService/ResolveContext"));
        assert_false(gw_method_routed("keelson.auth.v1.AuthService/Nothing"));
        gw_routes_free(r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_codec),
            cmocka_unit_test(test_codec_rejects),
            cmocka_unit_test(test_version),
            cmocka_unit_test(test_timeout),
            cmocka_unit_test(test_idempotency_key),
            cmocka_unit_test(test_encoding),
            cmocka_unit_test(test_request_id),
            cmocka_unit_test(test_bearer),
            cmocka_unit_test(test_bearer_rejects),
            cmocka_unit_test(test_error_json),
            cmocka_unit_test(test_routes),
            cmocka_unit_test(test_routes_are_the_rows),
            cmocka_unit_test(test_resendable_methods),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
