/*
 * What an operator sees of the gateway, and what a client gets back:
 * request ids end to end, /metrics (requests by route and code, latency
 * histograms, rate-limit decisions, context cache, upstream errors), the
 * slow-request log (route, status and duration, never a token, an id, a
 * query string or a body), and gzip for large JSON replies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "it_support.h"

#define TOKEN_MAX       512
#define ID_MAX          64
#define WHOAMI_ROUTE    "route=\"/keelson.auth.v1.AuthService/WhoAmI\""
#define PASSWORD        "correct horse battery staple"
#define LOG_WAIT_MS     5000
#define AUTH_PATH       "/keelson.auth.v1.AuthService/"
#define LEDGER_PATH     "/keelson.ledger.v1.LedgerService/"
#define LOOKUP_ACCOUNTS LEDGER_PATH "LookupAccounts"
#define CREATE_ACCOUNTS LEDGER_PATH "CreateAccounts"

static it_stack g_stack;

/* ---- helpers ------------------------------------------------------------------ */

/* A unique, well-formed X-Request-Id. */
static void request_id(const char *prefix, char *out, size_t len)
{
        char email[128];
        it_unique_email(prefix, email, sizeof(email)); /* "<prefix>-<hex>@example.test" */
        *strchr(email, '@') = '\0';
        snprintf(out, len, "%.60s", email);
}

static int setup(void **state)
{
        (void)state;
        return it_stack_load(&g_stack);
}

/* ---- request ids ------------------------------------------------------------------ */

/* A well-formed X-Request-Id comes back and reaches the service's log lines. */
static void test_request_id_end_to_end(void **state)
{
        (void)state;
        char rid[96], header[128], got[96], path[600];
        char body[] = "{\"email\":\"nobody-obs@example.test\",\"password\":\"wrong password\"}";
        it_http_response r;
        request_id("it-rid", rid, sizeof(rid));
        snprintf(header, sizeof(header), "X-Request-Id: %s", rid);
        const char *headers[] = {header, NULL};
        assert_int_equal(it_auth_call(g_stack.gateway_url, "Login", body, NULL, headers, &r), 0);
        assert_int_equal(r.status, 401);
        assert_int_equal(it_http_header(&r, "X-Request-Id", got, sizeof(got)), 0);
        assert_string_equal(got, rid);
        it_http_response_free(&r);
        /* auth logs every login attempt with the request id of the call */
        bool found = false;
        for (int waited = 0; waited < LOG_WAIT_MS && !found; waited += 100) {
                for (int i = 0; i < g_stack.n_auth && !found; i++) {
                        snprintf(path, sizeof(path), "%s/logs/auth-%d.log", g_stack.dir, i + 1);
                        found = it_file_contains(path, rid);
                }
                if (!found) {
                        it_sleep_ms(100);
                }
        }
        assert_true(found);
        /* A malformed one is replaced by a fresh uuid. */
        const char *bad[] = {"X-Request-Id: not ok!", NULL};
        assert_int_equal(it_auth_call(g_stack.gateway_url, "Login", body, NULL, bad, &r), 0);
        assert_int_equal(it_http_header(&r, "X-Request-Id", got, sizeof(got)), 0);
        assert_int_equal(strlen(got), 36);
        assert_int_equal(got[14], '4'); /* uuid version 4 */
        it_http_response_free(&r);
}

/* The ledger's log lines (every replica of the stack) hold needle, within LOG_WAIT_MS. */
static bool ledger_logged(const char *needle)
{
        char path[600];
        for (int waited = 0; waited < LOG_WAIT_MS; waited += 100) {
                for (int i = 1; i <= IT_REPLICAS_MAX; i++) {
                        snprintf(path, sizeof(path), "%s/logs/ledger-%d.log", g_stack.dir, i);
                        if (it_file_contains(path, needle)) {
                                return true;
                        }
                }
                it_sleep_ms(100);
        }
        return false;
}

static void ledger_privilege(const char *verb)
{
        char sql[128];

        /* keelson_ledger_rt: the role the ledger's transactions run as (row-level security) */
        snprintf(sql, sizeof(sql), "%s SELECT ON ledger.accounts %s keelson_ledger_rt", verb,
                 strcmp(verb, "GRANT") == 0 ? "TO" : "FROM");
        it_sql_run(&g_stack, sql, 0, NULL);
}

/*
 * The request id reaches the ledger too. The stack logs at info, where the
 * ledger writes a request's id when its database call fails: the test takes
 * the ledger's right to read its accounts table away for one request (a
 * fault a client can only see as "internal"), then gives it back.
 */
static void test_request_id_reaches_the_ledger(void **state)
{
        (void)state;
        char token[TOKEN_MAX], rid[96], got[96];
        it_http_response r;
        assert_int_equal(it_new_session(g_stack.gateway_url, "obs-ledger", token, NULL, NULL), 0);
        request_id("it-ledger-rid", rid, sizeof(rid));
        it_request req = {.token = token, .request_id = rid};
        static const char body[] = "{\"ids\":[\"1\"]}";
        ledger_privilege("REVOKE");
        int rc = it_connect(g_stack.gateway_url, LOOKUP_ACCOUNTS, body, sizeof(body) - 1, &req, &r);
        ledger_privilege("GRANT"); /* before any assertion: later tests need the ledger */
        assert_int_equal(rc, 0);
        assert_int_equal(r.status, 500);
        assert_non_null(strstr(r.body, "\"code\":\"internal\""));
        assert_int_equal(it_http_header(&r, "X-Request-Id", got, sizeof(got)), 0);
        assert_string_equal(got, rid);
        it_http_response_free(&r);
        char needle[128];
        snprintf(needle, sizeof(needle), "\"request_id\":\"%s\"", rid);
        assert_true(ledger_logged(needle));
        /* and the ledger answers again */
        assert_int_equal(it_post_json_status(g_stack.gateway_url, LOOKUP_ACCOUNTS, body, token),
                         200);
}

/* ---- metrics ------------------------------------------------------------------------ */

/* api-scope requests let through by the bucket Redis holds: decided there, or from a lease. */
static double shared_decisions(const char *admin)
{
        return it_metric_of(admin, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                   "decision=\"allowed\",backend=\"redis\"}") +
               it_metric_of(admin, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                   "decision=\"allowed\",backend=\"lease\"}");
}

static void test_metrics_by_route_code_scope_and_cache(void **state)
{
        (void)state;
        char token[TOKEN_MAX];
        const char *gw = g_stack.gateway_url;
        const char *admin = g_stack.gateway_admin_urls[0]; /* /metrics is not on the public port */
        assert_int_equal(it_new_session(gw, "obs", token, NULL, NULL), 0);
        double ok = 0, count = 0, allowed = 0, hits = 0, misses = 0;
        it_metric(admin, "keelson_gateway_requests_total{" WHOAMI_ROUTE ",code=\"ok\"}", &ok);
        it_metric(admin, "keelson_gateway_request_duration_seconds_count{" WHOAMI_ROUTE "}",
                  &count);
        allowed = shared_decisions(admin);
        hits = it_metric_of(admin, "keelson_gateway_context_cache_hits_total");
        misses = it_metric_of(admin, "keelson_gateway_context_cache_misses_total");
        for (int i = 0; i < 3; i++) {
                it_http_response r;
                assert_int_equal(it_auth_call(gw, "WhoAmI", "{}", token, NULL, &r), 0);
                assert_int_equal(r.status, 200);
                it_http_response_free(&r);
        }
        assert_true(it_metric_of(admin, "keelson_gateway_requests_total{" WHOAMI_ROUTE
                                        ",code=\"ok\"}") >= ok + 3);
        assert_true(it_metric_of(admin,
                                 "keelson_gateway_request_duration_seconds_count{" WHOAMI_ROUTE
                                 "}") >= count + 3);
        assert_true(shared_decisions(admin) >= allowed + 3);
        /* One resolution, then the cache: at least one miss and two hits. */
        assert_true(it_metric_of(admin, "keelson_gateway_context_cache_misses_total") >=
                    misses + 1);
        assert_true(it_metric_of(admin, "keelson_gateway_context_cache_hits_total") >= hits + 2);
        /* The decisions above were the shared bucket's (Redis's or a lease of it, never the
         * in-process fallback's); the token's context is held. */
        assert_true(it_metric_of(admin, "keelson_gateway_redis_up") == 1);
        assert_true(it_metric_of(admin, "keelson_gateway_context_cache_entries") >= 1);
}

/*
 * The gateway's own pages are on its admin listener only: on the public
 * port they are unknown paths like any other.
 */
static void test_pages_only_on_the_admin_listener(void **state)
{
        (void)state;
        static const char *const pages[] = {"/metrics", "/healthz", "/readyz"};
        for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
                it_http_response r;
                assert_int_equal(it_http_get(g_stack.gateway_url, pages[i], &r), 0);
                assert_int_equal(r.status, 404); /* not a page: an unknown method */
                it_http_response_free(&r);
                assert_int_equal(it_http_get(g_stack.gateway_admin_urls[0], pages[i], &r), 0);
                assert_int_equal(r.status, 200);
                if (strcmp(pages[i], "/metrics") == 0) {
                        assert_non_null(strstr(r.body, "keelson_gateway_connections "));
                        assert_non_null(strstr(r.body, "keelson_gateway_requests_total"));
                }
                it_http_response_free(&r);
        }
        it_http_response r;
        assert_int_equal(it_connect(g_stack.gateway_url, "/metrics", "{}", 2, NULL, &r), 0);
        assert_int_equal(r.status, 404);
        assert_non_null(strstr(r.body, "\"code\":\"unimplemented\""));
        it_http_response_free(&r);
}

/* A gateway that reaches no broker counts the failures per service. */
static void test_metrics_upstream_errors(void **state)
{
        (void)state;
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_BROKER_URL=tcp://127.0.0.1:9",
                             "KEELSON_GATEWAY_TIMEOUT_MS=300", NULL};
        assert_int_equal(it_gateway_start(&g_stack, env, 0, &gw), 0);
        assert_int_equal(it_http_get(gw.admin_url, "/readyz", &r), 0);
        assert_int_equal(r.status, 503); /* no broker: not ready, and it says why */
        assert_non_null(strstr(r.body, "broker connection for auth"));
        it_http_response_free(&r);
        int rc = it_auth_call(gw.url, "WhoAmI", "{}", "some-token", NULL, &r);
        long status = r.status;
        if (rc == 0) {
                it_http_response_free(&r);
        }
        double unavailable = 0, deadline = 0;
        it_metric(gw.admin_url,
                  "keelson_gateway_upstream_errors_total{service=\"auth\",code=\"unavailable\"}",
                  &unavailable);
        it_metric(gw.admin_url,
                  "keelson_gateway_upstream_errors_total{service=\"auth\",code=\"deadline_"
                  "exceeded\"}",
                  &deadline);
        it_gateway_stop(&gw);
        assert_int_equal(rc, 0);
        assert_true(status == 503 || status == 504);
        assert_true(unavailable + deadline >= 1);
}

/* ---- the slow-request log --------------------------------------------------------------- */

static void test_slow_log_holds_no_secret(void **state)
{
        (void)state;
        char token[TOKEN_MAX], rid[96], rid_header[128], query[64], path_method[96];
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_GATEWAY_SLOW_MS=0", NULL}; /* every request is slow */
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        assert_int_equal(it_new_session(gw.url, "slowlog", token, NULL, NULL), 0);
        request_id("it-slow", rid, sizeof(rid));
        request_id("qs", query, sizeof(query));
        snprintf(rid_header, sizeof(rid_header), "X-Request-Id: %s", rid);
        snprintf(path_method, sizeof(path_method), "WhoAmI?trace=%s", query);
        const char *headers[] = {rid_header, NULL};
        assert_int_equal(it_auth_call(gw.url, path_method, "{}", token, headers, &r), 0);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        it_gateway_stop(&gw); /* every line is written */

        char *log = it_read_file(gw.log_path);
        assert_non_null(log);
        size_t slow = 0;
        for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
                if (strstr(line, "\"slow request\"") == NULL) {
                        continue;
                }
                slow++;
                assert_non_null(strstr(line, "\"route\":\"/keelson.auth.v1.AuthService/"));
                assert_non_null(strstr(line, "\"status\":200"));
                assert_non_null(strstr(line, "\"duration_ms\":"));
                assert_null(strstr(line, "request_id"));
        }
        free(log);
        assert_true(slow >= 3); /* SignUp, Login, WhoAmI */
        /* Nowhere in the whole log: the token, its request id, the query, the password. */
        assert_false(it_file_contains(gw.log_path, token));
        assert_false(it_file_contains(gw.log_path, rid));
        assert_false(it_file_contains(gw.log_path, query));
        assert_false(it_file_contains(gw.log_path, PASSWORD));
}

/* ---- gzip ------------------------------------------------------------------------------ */

static void long_name_session(char token[TOKEN_MAX], char name[201])
{
        char email[128], body[1024];
        memset(name, 'a', 200);
        name[200] = '\0';
        it_unique_email("gzip", email, sizeof(email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"%s\","
                 "\"displayName\":\"%s\"}",
                 email, name, name);
        assert_int_equal(it_post_json_status(g_stack.gateway_url, AUTH_PATH "SignUp", body, NULL),
                         200);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);
        it_http_response r;
        it_post_json(g_stack.gateway_url, AUTH_PATH "Login", body, NULL, &r);
        assert_int_equal(r.status, 200);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        snprintf(token, TOKEN_MAX, "%s", json_string_value(json_object_get(j, "sessionToken")));
        json_decref(j);
        it_http_response_free(&r);
}

static void whoami_gzip(const char *url, const char *token, int accept, it_http_response *r)
{
        it_request req = {.token = token, .gzip = accept};
        assert_int_equal(it_connect(url, AUTH_PATH "WhoAmI", "{}", 2, &req, r), 0);
        assert_int_equal(r->status, 200);
}

static void test_gzip_large_json_replies(void **state)
{
        (void)state;
        char token[TOKEN_MAX], name[201], enc[32];
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_GATEWAY_GZIP_MIN_BYTES=256", NULL};
        long_name_session(token, name);
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        /* Accepted and large enough: compressed (libcurl decodes it back). */
        whoami_gzip(gw.url, token, 1, &r);
        assert_int_equal(it_http_header(&r, "Content-Encoding", enc, sizeof(enc)), 0);
        assert_string_equal(enc, "gzip");
        assert_int_equal(it_http_header(&r, "Vary", enc, sizeof(enc)), 0);
        assert_non_null(strstr(r.body, name));
        size_t plain_len = r.body_len;
        it_http_response_free(&r);
        /* Not accepted: the same JSON, as it is. */
        whoami_gzip(gw.url, token, 0, &r);
        assert_int_not_equal(it_http_header(&r, "Content-Encoding", enc, sizeof(enc)), 0);
        assert_int_equal(r.body_len, plain_len);
        it_http_response_free(&r);
        it_gateway_stop(&gw);
        /* The default threshold is 1 KiB: at or below it, never compressed. */
        whoami_gzip(g_stack.gateway_url, token, 1, &r);
        bool gzipped = it_http_header(&r, "Content-Encoding", enc, sizeof(enc)) == 0;
        assert_int_equal(gzipped, r.body_len > 1024);
        it_http_response_free(&r);
}

/* The ledger's accounts 1..n of the caller's tenant, made through the stack's gateway. */
static void create_accounts(const char *token, int n)
{
        char body[4096];
        size_t len = (size_t)snprintf(body, sizeof(body), "{\"accounts\":[");
        for (int i = 1; i <= n; i++) {
                len += (size_t)snprintf(body + len, sizeof(body) - len,
                                        "%s{\"id\":\"%d\",\"ledger\":840,\"code\":%d}",
                                        i > 1 ? "," : "", i, i);
        }
        len += (size_t)snprintf(body + len, sizeof(body) - len, "]}");
        assert_true(len < sizeof(body));
        assert_int_equal(it_post_json_status(g_stack.gateway_url, CREATE_ACCOUNTS, body, token),
                         200);
}

/* With the default settings (1 KiB), a JSON reply over 1 KiB goes out gzipped. */
static void test_gzip_default_threshold(void **state)
{
        (void)state;
        char token[TOKEN_MAX], body[512], enc[32], len_header[32];
        const int n = 16; /* about 4 KiB of accounts as JSON */
        it_http_response r;
        assert_int_equal(it_new_session(g_stack.gateway_url, "gzip-default", token, NULL, NULL), 0);
        create_accounts(token, n);
        size_t len = (size_t)snprintf(body, sizeof(body), "{\"ids\":[");
        for (int i = 1; i <= n; i++) {
                len += (size_t)snprintf(body + len, sizeof(body) - len, "%s\"%d\"",
                                        i > 1 ? "," : "", i);
        }
        len += (size_t)snprintf(body + len, sizeof(body) - len, "]}");
        it_request req = {.token = token, .gzip = 1};
        assert_int_equal(it_connect(g_stack.gateway_url, LOOKUP_ACCOUNTS, body, len, &req, &r), 0);
        assert_int_equal(r.status, 200);
        assert_true(r.body_len > 1024);
        assert_int_equal(it_http_header(&r, "Content-Encoding", enc, sizeof(enc)), 0);
        assert_string_equal(enc, "gzip");
        assert_int_equal(it_http_header(&r, "Vary", enc, sizeof(enc)), 0);
        assert_string_equal(enc, "Accept-Encoding");
        /* On the wire: the compressed size, well below the JSON's. */
        assert_int_equal(it_http_header(&r, "Content-Length", len_header, sizeof(len_header)), 0);
        long wire = atol(len_header);
        assert_true(wire > 0 && (size_t)wire < r.body_len / 2);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL); /* libcurl decoded it */
        assert_non_null(j);
        assert_int_equal(json_array_size(json_object_get(j, "accounts")), (size_t)n);
        json_decref(j);
        size_t plain_len = r.body_len;
        it_http_response_free(&r);
        /* A client that does not ask for gzip gets the same JSON as it is. */
        req.gzip = 0;
        assert_int_equal(it_connect(g_stack.gateway_url, LOOKUP_ACCOUNTS, body, len, &req, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_not_equal(it_http_header(&r, "Content-Encoding", enc, sizeof(enc)), 0);
        assert_int_equal(r.body_len, plain_len);
        it_http_response_free(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_request_id_end_to_end),
            cmocka_unit_test(test_request_id_reaches_the_ledger),
            cmocka_unit_test(test_metrics_by_route_code_scope_and_cache),
            cmocka_unit_test(test_pages_only_on_the_admin_listener),
            cmocka_unit_test(test_metrics_upstream_errors),
            cmocka_unit_test(test_slow_log_holds_no_secret),
            cmocka_unit_test(test_gzip_large_json_replies),
            cmocka_unit_test(test_gzip_default_threshold),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
