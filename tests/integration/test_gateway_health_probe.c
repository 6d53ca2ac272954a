/*
 * grpc.health.v1.Health/Check per service answers whether a replica
 * answers (services/gateway/probe.c), not whether the gateway holds a
 * broker connection: on a broker of the test's own, with one ledger
 * replica behind it and a gateway probing every PROBE_MS,
 *
 * - LedgerService is SERVING; BillingService, which has no replica on this
 *   broker (the broker is there, and takes its calls), is NOT_SERVING, and
 *   "" (the gateway) is SERVING;
 * - the replica stopped: LedgerService NOT_SERVING within the documented
 *   two periods (plus SLACK_MS for a loaded machine);
 * - a replica started again: SERVING within a period of its readiness.
 *
 * Check is asked in gRPC-Web over HTTP/1.1 (the reply's first frame is the
 * HealthCheckResponse, its status field 1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_support.h"
#include "ks_clock.h"

#define PROBE_MS 300
#define SLACK_MS 3000
#define LEDGER   "keelson.ledger.v1.LedgerService"
#define BILLING  "keelson.billing.v1.BillingService"
#define SERVING  1
#define NOT_SERV 2
#define STR(x)   #x
#define XSTR(x)  STR(x)

static struct {
        it_stack stack;
        int broker_pid;
        char base[64];
        char env_broker[96];
        char env_ledger_login[900];
        it_service ledger;
        it_gateway gateway;
} g;

static int start_ledger(void)
{
        const char *env[] = {g.env_broker, g.env_ledger_login, NULL};
        return it_service_start(&g.stack, "keelson-ledger", "KEELSON_LEDGER", env, &g.ledger);
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g.gateway);
        it_service_stop(&g.ledger);
        it_pid_stop(&g.broker_pid, SIGTERM);
        return 0;
}

static int setup(void **state)
{
        if (it_stack_load(&g.stack) != 0 ||
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
        const char *gateway_env[] = {g.env_broker,
                                     "KEELSON_GATEWAY_HEALTH_PROBE_MS=" XSTR(PROBE_MS), NULL};
        if (start_ledger() != 0 || it_gateway_start(&g.stack, gateway_env, 1, &g.gateway) != 0) {
                teardown(state);
                return -1;
        }
        return 0;
}

/* Health/Check of service: its ServingStatus, or -1 (no message: an error status). */
static int check(const char *service)
{
        uint8_t body[128];
        size_t n = strlen(service);
        assert_true(n < 100);
        memcpy(body, (uint8_t[]){0, 0, 0, 0, (uint8_t)(n + 2), 0x0a, (uint8_t)n}, 7);
        memcpy(body + 7, service, n);
        it_http_response r;
        assert_int_equal(it_http_post(g.gateway.url, "/grpc.health.v1.Health/Check",
                                      "application/grpc-web+proto", body, 7 + n, NULL, &r),
                         0);
        assert_int_equal(r.status, 200);
        const uint8_t *p = (const uint8_t *)r.body;
        int status = -1;
        if (r.body_len >= 5 && p[0] == 0) {
                size_t len = (size_t)p[3] << 8 | p[4];
                /* SERVING_UNKNOWN (0) is sent as no field at all */
                status = len >= 2 && p[5] == 0x08 ? p[6] : 0;
        }
        it_http_response_free(&r);
        return status;
}

/* Polls Check of service until it answers want: the ms it took, or -1 after within_ms. */
static long long wait_status(const char *service, int want, int within_ms)
{
        int64_t start = ks_mono_ms();
        for (;;) {
                if (check(service) == want) {
                        return (long long)(ks_mono_ms() - start);
                }
                if (ks_mono_ms() - start > within_ms) {
                        return -1;
                }
                usleep(50 * 1000);
        }
}

static void test_serving_is_a_replica_answering(void **state)
{
        (void)state;
        assert_true(wait_status(LEDGER, SERVING, PROBE_MS + SLACK_MS) >= 0);
        assert_int_equal(check(""), SERVING);
        /* The broker holds BillingService's calls for a replica that never comes. */
        assert_true(wait_status(BILLING, NOT_SERV, 2 * PROBE_MS + SLACK_MS) >= 0);
        assert_int_equal(check(BILLING), NOT_SERV);

        it_service_stop(&g.ledger);
        long long down = wait_status(LEDGER, NOT_SERV, 2 * PROBE_MS + SLACK_MS);
        printf("NOT_SERVING %lld ms after the last replica stopped (bound %d + slack)\n", down,
               2 * PROBE_MS);
        assert_true(down >= 0);
        assert_int_equal(check(""), SERVING); /* the gateway itself still takes calls */

        assert_int_equal(start_ledger(), 0);
        long long up = wait_status(LEDGER, SERVING, PROBE_MS + SLACK_MS);
        printf("SERVING %lld ms after a replica was ready again\n", up);
        assert_true(up >= 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_serving_is_a_replica_answering),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
