/*
 * The auth acceptance tests, driving the gateway over HTTP as any Connect
 * client would: sign up, log in, who-am-i, log out, in JSON and in binary
 * protobuf, and the error paths a client can hit (each followed by a normal
 * call, to show the gateway and the service are still well).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "auth_it.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_rpc.h" /* ks_now_ms */

#define BODY_LIMIT (1024 * 1024) /* the gateway's documented body limit */

static char g_email[AIT_EMAIL_MAX]; /* a user every "normal call" logs in as */

/* ---- helpers ------------------------------------------------------------ */

/*
 * A Connect error as a client sees it: the HTTP status, a JSON body with a
 * string "code" (the expected one, unless code is NULL) and a string
 * "message".
 */
static void assert_connect_error(const it_http_response *r, long status, const char *code)
{
        json_t *j;

        if (r->status != status) {
                fail_msg("expected HTTP %ld, got %ld: %.300s", status, r->status, r->body);
        }
        assert_non_null(strstr(r->content_type, "application/json"));
        j = ait_json(r);
        if (code != NULL) {
                assert_string_equal(ait_str(j, "code"), code);
        } else {
                assert_true(ait_str(j, "code")[0] != '\0');
        }
        assert_non_null(ait_str(j, "message")); /* fails the test when absent */
        json_decref(j);
}

static void assert_ok_json(const it_http_response *r)
{
        if (r->status != 200) {
                fail_msg("expected HTTP 200, got %ld: %.300s", r->status, r->body);
        }
        assert_non_null(strstr(r->content_type, "application/json"));
}

static void signup_json(const char *email, const char *password, it_http_response *out)
{
        char body[1024];

        AIT_BODY(body, "{s:s, s:s, s:s, s:s}", "email", email, "password", password, "tenantName",
                 "Analytical Engines", "displayName", "Ada");
        ait_call("SignUp", body, NULL, out);
}

static void signup_ok(const char *email)
{
        it_http_response r;

        signup_json(email, AIT_PASSWORD, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
}

/* Logs in and copies the session token into token. */
static void login_ok(const char *email, char token[AIT_TOKEN_MAX])
{
        it_http_response r;
        json_t *j;

        ait_login_with(email, AIT_PASSWORD, &r);
        assert_ok_json(&r);
        j = ait_json(&r);
        assert_true(strlen(ait_str(j, "sessionToken")) > 0);
        assert_true(strlen(ait_str(j, "sessionToken")) < AIT_TOKEN_MAX);
        snprintf(token, AIT_TOKEN_MAX, "%s", ait_str(j, "sessionToken"));
        json_decref(j);
        it_http_response_free(&r);
}

/* The call every error-path test makes afterwards: a plain, valid Login. */
static void assert_normal_call_ok(void)
{
        char token[AIT_TOKEN_MAX];

        login_ok(g_email, token);
}

static void assert_whoami_unauthenticated(const char *token)
{
        it_http_response r;

        ait_call("WhoAmI", "{}", token, &r);
        assert_connect_error(&r, 401, "unauthenticated");
        it_http_response_free(&r);
}

static int group_setup(void **state)
{
        if (ait_setup(state) != 0) {
                return -1;
        }
        it_unique_email("it-normal", g_email, sizeof(g_email));
        signup_ok(g_email);
        return 0;
}

/* ---- the flow, in JSON and in protobuf ---------------------------------- */

static void test_flow_json(void **state)
{
        char email[AIT_EMAIL_MAX], shouted[AIT_EMAIL_MAX + 8], token[AIT_TOKEN_MAX], user_id[64],
            tenant_id[64];
        it_http_response r;
        json_t *j;

        (void)state;
        it_unique_email("it-flow-json", email, sizeof(email));
        signup_json(email, AIT_PASSWORD, &r);
        assert_ok_json(&r);
        j = ait_json(&r);
        snprintf(user_id, sizeof(user_id), "%s", ait_str(j, "userId"));
        snprintf(tenant_id, sizeof(tenant_id), "%s", ait_str(j, "tenantId"));
        assert_true(user_id[0] != '\0' && tenant_id[0] != '\0');
        json_decref(j);
        it_http_response_free(&r);

        /* Emails are matched case- and space-insensitively at login too. */
        snprintf(shouted, sizeof(shouted), " %s ", email);
        for (char *p = shouted; *p != '\0'; p++) {
                *p = (*p >= 'a' && *p <= 'z') ? (char)(*p - 'a' + 'A') : *p;
        }
        ait_login_with(shouted, AIT_PASSWORD, &r);
        assert_ok_json(&r);
        j = ait_json(&r);
        snprintf(token, sizeof(token), "%s", ait_str(j, "sessionToken"));
        assert_true(token[0] != '\0');
        assert_string_equal(ait_str(j, "userId"), user_id);
        assert_string_equal(ait_str(j, "tenantId"), tenant_id);
        assert_string_equal(ait_str(j, "role"), "owner");
        json_decref(j);
        it_http_response_free(&r);

        ait_call("WhoAmI", "{}", token, &r);
        assert_ok_json(&r);
        j = ait_json(&r);
        assert_string_equal(ait_str(j, "userId"), user_id);
        assert_string_equal(ait_str(j, "email"), email);
        assert_string_equal(ait_str(j, "displayName"), "Ada");
        assert_string_equal(ait_str(j, "tenantId"), tenant_id);
        assert_string_equal(ait_str(j, "tenantName"), "Analytical Engines");
        assert_string_equal(ait_str(j, "role"), "owner");
        json_decref(j);
        it_http_response_free(&r);

        ait_call("Logout", "{}", token, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);

        assert_whoami_unauthenticated(token);
}

/* One number from the stack's database (a count, a max id); param may be NULL. */
static long sql_long(const char *sql, const char *param)
{
        const char *params[1] = {param};

        return ait_sql_long(sql, param != NULL ? 1 : 0, params);
}

/*
 * Logout is idempotent for the client too: the same token again is "already
 * logged out", 200 {}, even though the gateway no longer resolves it; the
 * token still authenticates nothing. The user's other session and an
 * unknown token are left as they were.
 */
static void test_logout_twice_is_ok(void **state)
{
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX], other[AIT_TOKEN_MAX], mark_s[24];
        it_http_response r;
        long mark;

        (void)state;
        it_unique_email("it-logout-twice", email, sizeof(email));
        signup_ok(email);
        login_ok(email, token);
        login_ok(email, other);

        ait_call("Logout", "{}", token, &r);
        assert_ok_json(&r);
        assert_string_equal(r.body, "{}");
        it_http_response_free(&r);
        ait_call("Logout", "{}", token, &r);
        assert_ok_json(&r);
        assert_string_equal(r.body, "{}");
        it_http_response_free(&r);
        mark = sql_long("SELECT coalesce(max(id), 0) FROM auth.outbox", NULL);
        ait_call("Logout", "{}", token, &r);
        assert_ok_json(&r);
        assert_string_equal(r.body, "{}");
        it_http_response_free(&r);
        assert_whoami_unauthenticated(token);
        /* The repeat revoked nothing, so it told nobody anything. */
        snprintf(mark_s, sizeof(mark_s), "%ld", mark);
        assert_int_equal(sql_long("SELECT count(*) FROM auth.outbox WHERE id > $1::int8"
                                  " AND topic = 'auth.context_revoked'",
                                  mark_s),
                         0);

        /* A token auth never issued: nothing to log out, nothing changed. */
        ait_call("Logout", "{}", "bm90LWEtcmVhbC10b2tlbi1hdC1hbGwtMDEyMzQ1Njc4OQ", &r);
        assert_ok_json(&r);
        assert_string_equal(r.body, "{}");
        it_http_response_free(&r);

        ait_call("WhoAmI", "{}", other, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);

        /* No token at all is still the client's mistake. */
        ait_call("Logout", "{}", NULL, &r);
        assert_connect_error(&r, 401, "unauthenticated");
        it_http_response_free(&r);
}

/* An API key is not a session: Logout with one is refused and leaves it working. */
static void test_logout_with_api_key_changes_nothing(void **state)
{
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX], key[AIT_TOKEN_MAX];
        it_http_response r;
        json_t *j;

        (void)state;
        it_unique_email("it-logout-key", email, sizeof(email));
        signup_ok(email);
        login_ok(email, token);
        ait_call("CreateApiKey", "{\"name\":\"logout probe\",\"role\":\"member\"}", token, &r);
        assert_ok_json(&r);
        j = ait_json(&r);
        snprintf(key, sizeof(key), "%s", ait_str(j, "key"));
        json_decref(j);
        it_http_response_free(&r);

        ait_call("Logout", "{}", key, &r);
        assert_connect_error(&r, 403, "permission_denied");
        it_http_response_free(&r);
        ait_call("ListMembers", "{}", key, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
        ait_call("WhoAmI", "{}", token, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
}

static void call_proto(const char *method, const ProtobufCMessage *m, const char *token,
                       it_http_response *out)
{
        size_t len;
        uint8_t *buf = it_pack(m, &len);

        ait_post(method, "application/proto", buf, len, token, NULL, out);
        free(buf);
}

static void assert_ok_proto(const it_http_response *r)
{
        if (r->status != 200) {
                fail_msg("expected HTTP 200, got %ld: %.300s", r->status, r->body);
        }
        assert_non_null(strstr(r->content_type, "application/proto"));
}

/* SignUp in protobuf; returns the unpacked reply (the caller frees it). */
static Keelson__Auth__V1__SignUpResponse *signup_proto(const char *email)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        Keelson__Auth__V1__SignUpResponse *resp;
        it_http_response r;

        req.email = (char *)email;
        req.password = AIT_PASSWORD;
        req.tenant_name = "Difference Engines";
        req.display_name = "Charles";
        call_proto("SignUp", &req.base, NULL, &r);
        assert_ok_proto(&r);
        resp = keelson__auth__v1__sign_up_response__unpack(NULL, r.body_len, (uint8_t *)r.body);
        it_http_response_free(&r);
        assert_non_null(resp);
        assert_true(resp->user_id[0] != '\0' && resp->tenant_id[0] != '\0');
        return resp;
}

static Keelson__Auth__V1__LoginResponse *login_proto(const char *email)
{
        Keelson__Auth__V1__LoginRequest req = KEELSON__AUTH__V1__LOGIN_REQUEST__INIT;
        Keelson__Auth__V1__LoginResponse *resp;
        it_http_response r;

        req.email = (char *)email;
        req.password = AIT_PASSWORD;
        call_proto("Login", &req.base, NULL, &r);
        assert_ok_proto(&r);
        resp = keelson__auth__v1__login_response__unpack(NULL, r.body_len, (uint8_t *)r.body);
        it_http_response_free(&r);
        assert_non_null(resp);
        assert_true(resp->session_token[0] != '\0');
        assert_true(strlen(resp->session_token) < AIT_TOKEN_MAX);
        return resp;
}

static void whoami_proto_ok(const char *token, const Keelson__Auth__V1__SignUpResponse *who,
                            const char *email)
{
        Keelson__Auth__V1__WhoAmIRequest req = KEELSON__AUTH__V1__WHO_AM_IREQUEST__INIT;
        Keelson__Auth__V1__WhoAmIResponse *resp;
        it_http_response r;

        call_proto("WhoAmI", &req.base, token, &r);
        assert_ok_proto(&r);
        resp = keelson__auth__v1__who_am_iresponse__unpack(NULL, r.body_len, (uint8_t *)r.body);
        it_http_response_free(&r);
        assert_non_null(resp);
        assert_string_equal(resp->user_id, who->user_id);
        assert_string_equal(resp->tenant_id, who->tenant_id);
        assert_string_equal(resp->email, email);
        assert_string_equal(resp->display_name, "Charles");
        assert_string_equal(resp->tenant_name, "Difference Engines");
        assert_string_equal(resp->role, "owner");
        keelson__auth__v1__who_am_iresponse__free_unpacked(resp, NULL);
}

static void test_flow_proto(void **state)
{
        Keelson__Auth__V1__LogoutRequest logout = KEELSON__AUTH__V1__LOGOUT_REQUEST__INIT;
        Keelson__Auth__V1__WhoAmIRequest whoami = KEELSON__AUTH__V1__WHO_AM_IREQUEST__INIT;
        Keelson__Auth__V1__SignUpResponse *su;
        Keelson__Auth__V1__LoginResponse *li;
        char email[AIT_EMAIL_MAX];
        it_http_response r;

        (void)state;
        it_unique_email("it-flow-proto", email, sizeof(email));
        su = signup_proto(email);
        li = login_proto(email);
        assert_string_equal(li->user_id, su->user_id);
        assert_string_equal(li->tenant_id, su->tenant_id);
        assert_string_equal(li->role, "owner");
        whoami_proto_ok(li->session_token, su, email);

        call_proto("Logout", &logout.base, li->session_token, &r);
        assert_ok_proto(&r);
        assert_int_equal(r.body_len, 0); /* an empty LogoutResponse packs to nothing */
        it_http_response_free(&r);

        /* Connect errors are JSON whatever the request's codec. */
        call_proto("WhoAmI", &whoami.base, li->session_token, &r);
        assert_connect_error(&r, 401, "unauthenticated");
        it_http_response_free(&r);

        keelson__auth__v1__login_response__free_unpacked(li, NULL);
        keelson__auth__v1__sign_up_response__free_unpacked(su, NULL);
}

/* ---- sign-up and login rules -------------------------------------------- */

static void test_duplicate_signup_is_already_exists(void **state)
{
        char email[AIT_EMAIL_MAX], variant[AIT_EMAIL_MAX + 8];
        it_http_response r;
        size_t i;

        (void)state;
        it_unique_email("it-dup", email, sizeof(email));
        signup_ok(email);
        /* The same address with another case and surrounding spaces. */
        snprintf(variant, sizeof(variant), "  %s\t", email);
        for (i = 0; variant[i] != '\0'; i++) {
                if (variant[i] >= 'a' && variant[i] <= 'z' && i % 2 == 0) {
                        variant[i] = (char)(variant[i] - 'a' + 'A');
                }
        }
        signup_json(variant, AIT_PASSWORD, &r);
        assert_connect_error(&r, 409, "already_exists");
        it_http_response_free(&r);
        assert_normal_call_ok();
}

static void test_short_password_is_invalid_argument(void **state)
{
        char email[AIT_EMAIL_MAX];
        it_http_response r;

        (void)state;
        it_unique_email("it-short", email, sizeof(email));
        signup_json(email, "seven77", &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        /* Nothing was created: the address is still free. */
        signup_ok(email);
}

static void test_expired_session_is_refused(void **state)
{
        const char *params[1];
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        PGconn *pg;
        PGresult *res;

        (void)state;
        it_unique_email("it-expired", email, sizeof(email));
        signup_ok(email);
        login_ok(email, token);
        pg = it_pg_connect(&ait_stack);
        assert_non_null(pg);
        /* Only the token's SHA-256 is stored; the CHECK wants created < expires. */
        params[0] = token;
        res = PQexecParams(pg,
                           "UPDATE auth.sessions SET created_at = now() - interval '1 hour', "
                           "expires_at = now() - interval '1 second' "
                           "WHERE token_sha256 = sha256(convert_to($1, 'UTF8'))",
                           1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                fail_msg("UPDATE failed: %s", PQresultErrorMessage(res));
        }
        assert_string_equal(PQcmdTuples(res), "1");
        PQclear(res);
        PQfinish(pg);
        assert_whoami_unauthenticated(token);
}

/* A series of the gateway's /metrics (0 when it is not rendered yet). */
static double gateway_metric(const char *series)
{
        double v = 0;

        return it_metric(ait_stack.gateway_admin_urls[0], series, &v) == 0 ? v : 0;
}

/*
 * The test above expires a token the gateway has never resolved. A cached
 * one must stop at the same moment: the context cache keeps an entry for
 * at most its TTL (30 s for a session) and never past the expiry auth
 * returned with it (services/gateway/cache.c). Here the session has 3 s
 * left when the gateway first resolves it, so it is cached for 3 s, then
 * refused at once, long before the TTL would have ended it. Nothing is
 * published (the row is changed behind auth's back), so only the expiry
 * can end the cached entry.
 */
static void test_cached_session_stops_at_expiry(void **state)
{
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        long long expires_ms;
        double hits, expired;
        it_http_response r;

        (void)state;
        it_unique_email("it-expiry-cached", email, sizeof(email));
        signup_ok(email);
        login_ok(email, token);
        /* Exactly one row changes; its new expires_at, in ms since the epoch. */
        expires_ms = sql_long("UPDATE auth.sessions SET expires_at = now() + interval '3 seconds' "
                              "WHERE token_sha256 = sha256(convert_to($1, 'UTF8')) "
                              "RETURNING floor(extract(epoch FROM expires_at) * 1000)::int8",
                              token);

        ait_call("WhoAmI", "{}", token, &r); /* resolved by auth, then cached */
        assert_ok_json(&r);
        it_http_response_free(&r);
        hits = gateway_metric("keelson_gateway_context_cache_hits_total");
        ait_call("WhoAmI", "{}", token, &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
        assert_true(gateway_metric("keelson_gateway_context_cache_hits_total") > hits);

        expired =
            gateway_metric("keelson_gateway_context_cache_evictions_total{reason=\"expired\"}");
        while (ks_now_ms() < expires_ms + 200) {
                it_sleep_ms(50);
        }
        assert_whoami_unauthenticated(token);
        assert_true(
            gateway_metric("keelson_gateway_context_cache_evictions_total{reason=\"expired\"}") >
            expired);
}

/* A wrong password and an unknown email must not be told apart by a client. */
static void test_wrong_password_equals_unknown_email(void **state)
{
        char email[AIT_EMAIL_MAX], nobody[AIT_EMAIL_MAX];
        it_http_response wrong, unknown;

        (void)state;
        it_unique_email("it-enum", email, sizeof(email));
        it_unique_email("it-nobody", nobody, sizeof(nobody));
        signup_ok(email);
        ait_login_with(email, "not the password at all", &wrong);
        ait_login_with(nobody, "not the password at all", &unknown);
        assert_connect_error(&wrong, 401, "unauthenticated");
        assert_int_equal(unknown.status, wrong.status);
        assert_string_equal(unknown.content_type, wrong.content_type);
        assert_int_equal(unknown.body_len, wrong.body_len);
        assert_memory_equal(unknown.body, wrong.body, wrong.body_len);
        it_http_response_free(&wrong);
        it_http_response_free(&unknown);
        assert_normal_call_ok();
}

/* ---- protocol errors: each leaves the gateway serving ------------------- */

static void test_malformed_json_is_invalid_argument(void **state)
{
        it_http_response r;

        (void)state;
        ait_call("Login", "{\"email\": \"a@example.test\", ", NULL, &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        ait_call("Login", "[1, 2, 3]", NULL, &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        assert_normal_call_ok();
}

static void test_wrong_content_type_is_415(void **state)
{
        static const char body[] = "{\"email\":\"a@example.test\",\"password\":\"x\"}";
        it_http_response r;

        (void)state;
        ait_post("Login", "text/plain", body, sizeof(body) - 1, NULL, NULL, &r);
        /* Connect fixes the status, not the code, of an unsupported codec. */
        assert_connect_error(&r, 415, NULL);
        it_http_response_free(&r);
        assert_normal_call_ok();
}

static void test_body_over_limit_is_resource_exhausted(void **state)
{
        size_t len = BODY_LIMIT + 1024;
        char *body = malloc(len);
        it_http_response r;

        (void)state;
        assert_non_null(body);
        /* A syntactically fine JSON string, only too long. */
        memset(body, 'a', len);
        memcpy(body, "{\"email\":\"", 10);
        memcpy(body + len - 2, "\"}", 2);
        ait_post("Login", "application/json", body, len, NULL, NULL, &r);
        free(body);
        assert_connect_error(&r, 413, "resource_exhausted");
        it_http_response_free(&r);
        assert_normal_call_ok();
}

static void test_unknown_method_is_unimplemented(void **state)
{
        it_http_response r;

        (void)state;
        ait_call("NoSuchMethod", "{}", NULL, &r);
        assert_connect_error(&r, 404, "unimplemented");
        it_http_response_free(&r);
        assert_int_equal(it_http_post(ait_stack.gateway_url, "/keelson.nothing.v1.Nope/Login",
                                      "application/json", "{}", 2, NULL, &r),
                         0);
        assert_connect_error(&r, 404, "unimplemented");
        it_http_response_free(&r);
        assert_normal_call_ok();
}

/* A valid Login of the normal user in JSON, with one more "Name: value" header. */
static void login_with_header(const char *header, it_http_response *out)
{
        const char *headers[2] = {header, NULL};
        it_request req = {.headers = headers};
        char body[1024];

        AIT_BODY(body, "{s:s, s:s}", "email", g_email, "password", AIT_PASSWORD);
        assert_int_equal(
            it_connect(ait_stack.gateway_url, AIT_PATH "Login", body, strlen(body), &req, out), 0);
}

/*
 * Connect-Timeout-Ms 0 is already expired; 1 ms ends long before a Login's
 * scrypt does (tens of ms). Either way the client gets the protocol's 504.
 */
static void test_connect_timeout_expired_is_deadline_exceeded(void **state)
{
        static const char *const values[] = {"Connect-Timeout-Ms: 0", "Connect-Timeout-Ms: 1"};
        it_http_response r;

        (void)state;
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
                login_with_header(values[i], &r);
                assert_connect_error(&r, 504, "deadline_exceeded");
                it_http_response_free(&r);
                assert_normal_call_ok();
        }
        /* A generous client deadline changes nothing. */
        login_with_header("Connect-Timeout-Ms: 60000", &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
}

static void test_connect_timeout_invalid_is_invalid_argument(void **state)
{
        static const char *const values[] = {
            "Connect-Timeout-Ms: abc",  "Connect-Timeout-Ms: -1",
            "Connect-Timeout-Ms: 1.5",  "Connect-Timeout-Ms: 12345678901",
            "Connect-Timeout-Ms: 0x10", "Connect-Timeout-Ms: 100ms",
        };
        it_http_response r;

        (void)state;
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
                login_with_header(values[i], &r);
                if (r.status != 400) {
                        fail_msg("%s: expected HTTP 400, got %ld", values[i], r.status);
                }
                assert_connect_error(&r, 400, "invalid_argument");
                it_http_response_free(&r);
        }
        assert_normal_call_ok();
}

static void test_connect_protocol_version_2_is_invalid_argument(void **state)
{
        it_http_response r;

        (void)state;
        login_with_header("Connect-Protocol-Version: 2", &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        login_with_header("Connect-Protocol-Version: 1", &r);
        assert_ok_json(&r);
        it_http_response_free(&r);
        assert_normal_call_ok();
}

/* Bytes that are no LoginRequest: the error is Connect JSON, not protobuf. */
static void test_malformed_proto_is_invalid_argument(void **state)
{
        /* field 1 (email), length 100, but only 3 bytes follow */
        static const uint8_t truncated[] = {0x0a, 0x64, 'a', 'd', 'a'};
        /* wire type 7 does not exist */
        static const uint8_t bad_wire_type[] = {0x0f, 0x01};
        it_http_response r;

        (void)state;
        ait_post("Login", "application/proto", truncated, sizeof(truncated), NULL, NULL, &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        ait_post("Login", "application/proto", bad_wire_type, sizeof(bad_wire_type), NULL, NULL,
                 &r);
        assert_connect_error(&r, 400, "invalid_argument");
        it_http_response_free(&r);
        assert_normal_call_ok();
}

/* ResolveContext is the gateway's own call to auth: from outside it does not exist. */
static void test_resolve_context_is_not_reachable(void **state)
{
        char token[AIT_TOKEN_MAX], body[AIT_TOKEN_MAX + 32];
        it_http_response r;

        (void)state;
        login_ok(g_email, token);
        snprintf(body, sizeof(body), "{\"token\":\"%s\"}", token);
        ait_call("ResolveContext", body, token, &r);
        assert_connect_error(&r, 404, "unimplemented");
        assert_null(strstr(r.body, token));
        it_http_response_free(&r);
        assert_normal_call_ok();
}

/* ---- request ids -------------------------------------------------------- */

static void assert_request_id(const it_http_response *r, const char *want)
{
        char got[128];

        assert_int_equal(it_http_header(r, "X-Request-Id", got, sizeof(got)), 0);
        assert_string_equal(got, want);
}

static void test_request_id_echoed_or_made(void **state)
{
        static const char ok_body[] = "{}";
        char token[AIT_TOKEN_MAX], first[128], second[128];
        it_http_response r;

        (void)state;
        login_ok(g_email, token);
        ait_post("WhoAmI", "application/json", ok_body, 2, token, "it-req-0123456789", &r);
        assert_ok_json(&r);
        assert_request_id(&r, "it-req-0123456789");
        it_http_response_free(&r);

        /* Errors carry it too. */
        ait_post("WhoAmI", "application/json", ok_body, 2, NULL, "it-req-unauth", &r);
        assert_connect_error(&r, 401, "unauthenticated");
        assert_request_id(&r, "it-req-unauth");
        it_http_response_free(&r);

        /* None given: the gateway makes one, different for each request. */
        ait_post("WhoAmI", "application/json", ok_body, 2, token, NULL, &r);
        assert_ok_json(&r);
        assert_int_equal(it_http_header(&r, "X-Request-Id", first, sizeof(first)), 0);
        assert_true(first[0] != '\0');
        it_http_response_free(&r);
        ait_post("WhoAmI", "application/json", ok_body, 2, token, NULL, &r);
        assert_ok_json(&r);
        assert_int_equal(it_http_header(&r, "X-Request-Id", second, sizeof(second)), 0);
        assert_string_not_equal(first, second);
        it_http_response_free(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_flow_json),
            cmocka_unit_test(test_flow_proto),
            cmocka_unit_test(test_logout_twice_is_ok),
            cmocka_unit_test(test_logout_with_api_key_changes_nothing),
            cmocka_unit_test(test_duplicate_signup_is_already_exists),
            cmocka_unit_test(test_short_password_is_invalid_argument),
            cmocka_unit_test(test_expired_session_is_refused),
            cmocka_unit_test(test_cached_session_stops_at_expiry),
            cmocka_unit_test(test_wrong_password_equals_unknown_email),
            cmocka_unit_test(test_malformed_json_is_invalid_argument),
            cmocka_unit_test(test_wrong_content_type_is_415),
            cmocka_unit_test(test_body_over_limit_is_resource_exhausted),
            cmocka_unit_test(test_unknown_method_is_unimplemented),
            cmocka_unit_test(test_connect_timeout_expired_is_deadline_exceeded),
            cmocka_unit_test(test_connect_timeout_invalid_is_invalid_argument),
            cmocka_unit_test(test_connect_protocol_version_2_is_invalid_argument),
            cmocka_unit_test(test_malformed_proto_is_invalid_argument),
            cmocka_unit_test(test_resolve_context_is_not_reachable),
            cmocka_unit_test(test_request_id_echoed_or_made),
        };

        return cmocka_run_group_tests(tests, group_setup, NULL);
}
