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

#define TOKEN_MAX        512
#define SPREAD_CALLS     40
#define AFTER_KILL_CALLS 20
#define DEATH_WAIT_MS    10000
#define METRIC           "keelson_rpc_requests_total"

static it_stack g_stack;

static uint64_t replica_requests(int i)
{
        return (uint64_t)it_metric_sum_at(g_stack.auth_health_ports[i], METRIC, NULL);
}

static void new_session(char token[TOKEN_MAX])
{
        assert_int_equal(it_new_session(g_stack.gateway_url, "it-replicas", token, NULL, NULL), 0);
}

static void whoami_ok(const char *token, int i)
{
        it_http_response r;

        it_post_json(g_stack.gateway_url, "/keelson.auth.v1.AuthService/WhoAmI", "{}", token, &r);
        if (r.status != 200) {
                fail_msg("WhoAmI #%d: expected HTTP 200, got %ld: %.300s", i, r.status, r.body);
        }
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
        int waited_ms = 0;

        assert_false(process_dead(pid));
        assert_int_equal(kill(pid, SIGKILL), 0);
        while (!process_dead(pid) && waited_ms < DEATH_WAIT_MS) {
                it_sleep_ms(10);
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
