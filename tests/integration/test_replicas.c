/*
 * Several replicas of a service behind the broker: requests reach every
 * replica, and when one dies the others carry on with no failed call.
 * This test kills a replica, so CTest runs it after every other test of the
 * stack (tests/CMakeLists.txt).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <signal.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "it_support.h"

#define PASSWORD         "correct horse battery staple"
#define TOKEN_MAX        512
#define SPREAD_CALLS     40
#define AFTER_KILL_CALLS 20
#define DEATH_WAIT_MS    10000
#define METRIC           "keelson_rpc_requests_total"

static it_stack g_stack;

/* Sums every series of METRIC in a Prometheus text exposition. */
static uint64_t sum_metric(const char *text)
{
        size_t name_len = strlen(METRIC), len;
        const char *line = text, *eol, *v;
        uint64_t sum = 0;

        while (line != NULL && *line != '\0') {
                eol = strchr(line, '\n');
                len = eol != NULL ? (size_t)(eol - line) : strlen(line);
                if (len > name_len && strncmp(line, METRIC, name_len) == 0 &&
                    (line[name_len] == '{' || line[name_len] == ' ')) {
                        /* The value is the last field of the line. */
                        for (v = line + len; v > line && v[-1] != ' '; v--) {
                        }
                        sum += strtoull(v, NULL, 10);
                }
                line = eol != NULL ? eol + 1 : NULL;
        }
        return sum;
}

static uint64_t replica_requests(int i)
{
        char base[64];
        it_http_response r;
        uint64_t v;

        snprintf(base, sizeof(base), "http://127.0.0.1:%d", g_stack.auth_health_ports[i]);
        assert_int_equal(it_http_get(base, "/metrics", &r), 0);
        assert_int_equal(r.status, 200);
        v = sum_metric(r.body);
        it_http_response_free(&r);
        return v;
}

static void post_json(const char *method, const char *json, const char *token,
                      it_http_response *out)
{
        char path[128], auth[TOKEN_MAX + 32];
        const char *headers[2] = {NULL, NULL};

        snprintf(path, sizeof(path), "/keelson.auth.v1.AuthService/%s", method);
        if (token != NULL) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
                headers[0] = auth;
        }
        assert_int_equal(it_http_post(g_stack.gateway_url, path, "application/json", json,
                                      strlen(json), headers, out),
                         0);
}

static void expect_ok(const it_http_response *r, const char *what, int i)
{
        if (r->status != 200) {
                fail_msg("%s #%d: expected HTTP 200, got %ld: %.300s", what, i, r->status, r->body);
        }
}

/* Signs a fresh user up and logs in; the token goes to token. */
static void new_session(char token[TOKEN_MAX])
{
        char email[128], body[512];
        it_http_response r;
        json_error_t err;
        json_t *j;

        it_unique_email("it-replicas", email, sizeof(email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"Replicas\"}",
                 email);
        post_json("SignUp", body, NULL, &r);
        expect_ok(&r, "SignUp", 0);
        it_http_response_free(&r);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);
        post_json("Login", body, NULL, &r);
        expect_ok(&r, "Login", 0);
        j = json_loadb(r.body, r.body_len, 0, &err);
        assert_non_null(j);
        assert_true(json_is_string(json_object_get(j, "sessionToken")));
        snprintf(token, TOKEN_MAX, "%s", json_string_value(json_object_get(j, "sessionToken")));
        json_decref(j);
        it_http_response_free(&r);
}

static void whoami_ok(const char *token, int i)
{
        it_http_response r;

        post_json("WhoAmI", "{}", token, &r);
        expect_ok(&r, "WhoAmI", i);
        it_http_response_free(&r);
}

/* True once pid is gone or a zombie: it holds no socket any more. */
static int process_dead(int pid)
{
        char path[64], stat[512], *rp;
        FILE *f;
        size_t n;

        if (kill(pid, 0) != 0 && errno == ESRCH) {
                return 1;
        }
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        f = fopen(path, "r");
        if (f == NULL) {
                return 1;
        }
        n = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[n] = '\0';
        rp = strrchr(stat, ')');
        return rp != NULL && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static void kill_replica(int pid)
{
        struct timespec tick = {0, 10 * 1000 * 1000};
        int waited_ms = 0;

        assert_false(process_dead(pid));
        assert_int_equal(kill(pid, SIGKILL), 0);
        while (!process_dead(pid) && waited_ms < DEATH_WAIT_MS) {
                nanosleep(&tick, NULL);
                waited_ms += 10;
        }
        assert_true(process_dead(pid));
}

static void test_requests_reach_every_replica(void **state)
{
        uint64_t before[IT_REPLICAS_MAX], after;
        char token[TOKEN_MAX];
        int i;

        (void)state;
        assert_true(g_stack.n_auth >= 2);
        new_session(token);
        for (i = 0; i < g_stack.n_auth; i++) {
                before[i] = replica_requests(i);
        }
        for (i = 0; i < SPREAD_CALLS; i++) {
                whoami_ok(token, i);
        }
        for (i = 0; i < g_stack.n_auth; i++) {
                after = replica_requests(i);
                if (after <= before[i]) {
                        fail_msg("auth replica %d (health port %d) served nothing: %s %llu -> %llu",
                                 i + 1, g_stack.auth_health_ports[i], METRIC,
                                 (unsigned long long)before[i], (unsigned long long)after);
                }
        }
}

static void test_survivors_serve_after_a_replica_dies(void **state)
{
        uint64_t before[IT_REPLICAS_MAX], served = 0;
        char token[TOKEN_MAX];
        int i;

        (void)state;
        assert_true(g_stack.n_auth >= 2);
        new_session(token);
        whoami_ok(token, 0);
        for (i = 1; i < g_stack.n_auth; i++) {
                before[i] = replica_requests(i);
        }
        /* Between two calls: no request of ours is in flight at the kill. */
        kill_replica(g_stack.auth_pids[0]);
        for (i = 0; i < AFTER_KILL_CALLS; i++) {
                whoami_ok(token, i);
        }
        /* Every call after the kill was served by the replicas still alive. */
        for (i = 1; i < g_stack.n_auth; i++) {
                served += replica_requests(i) - before[i];
        }
        assert_true(served >= AFTER_KILL_CALLS);
}

static int group_setup(void **state)
{
        (void)state;
        return it_stack_load(&g_stack);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_requests_reach_every_replica),
            cmocka_unit_test(test_survivors_serve_after_a_replica_dies),
        };

        return cmocka_run_group_tests(tests, group_setup, NULL);
}
