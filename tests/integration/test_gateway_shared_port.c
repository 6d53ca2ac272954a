/*
 * KEELSON_GATEWAY_REUSE_PORT: several gateway processes of one host on one
 * public port (SO_REUSEPORT), so that all of a host's cores serve, as
 * nginx's workers do. On the stack's broker and Redis:
 *
 * - two gateways with the setting on one port: new connections are spread
 *   over both (each gateway's own /metrics counts its share of 200
 *   requests, each on a connection of its own, and the shares add up);
 * - a third without the setting cannot take the port (it fails to start);
 * - one of the two stopped: the other answers every connection alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "it_support.h"

#define REQUESTS 200
#define PATH     "/keelson.none.v1.None/Nothing" /* answered 404 by the gateway itself */
#define SERIES   "keelson_gateway_requests_total"

static struct {
        it_stack stack;
        it_gateway a, b;
        char port_env[64];
} g;

static int admin_port(const it_gateway *gw)
{
        int port = 0;
        const char *colon = strrchr(gw->admin_url, ':');
        return colon != NULL && sscanf(colon + 1, "%d", &port) == 1 ? port : -1;
}

static double unmatched(const it_gateway *gw)
{
        return it_metric_sum_at(admin_port(gw), SERIES, "unmatched");
}

static int setup(void **state)
{
        (void)state;
        const char *first[] = {"KEELSON_GATEWAY_REUSE_PORT=true", NULL};
        int port = 0;

        if (it_stack_load(&g.stack) != 0 || it_gateway_start(&g.stack, first, 1, &g.a) != 0) {
                return -1;
        }
        const char *colon = strrchr(g.a.url, ':');
        if (colon == NULL || sscanf(colon + 1, "%d", &port) != 1) {
                return -1;
        }
        snprintf(g.port_env, sizeof(g.port_env), "KEELSON_GATEWAY_PORT=%d", port);
        const char *second[] = {"KEELSON_GATEWAY_REUSE_PORT=true", g.port_env, NULL};
        return it_gateway_start(&g.stack, second, 1, &g.b);
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g.a);
        it_gateway_stop(&g.b);
        return 0;
}

/* REQUESTS POSTs to the shared port, each on a new connection; all answered 404. */
static void send_all(void)
{
        for (int i = 0; i < REQUESTS; i++) {
                it_http_response r;
                assert_int_equal(it_http_post(g.a.url, PATH, "application/json", "{}", 2, NULL, &r),
                                 0);
                assert_int_equal(r.status, 404);
                it_http_response_free(&r);
        }
}

static void test_two_gateways_share_the_connections(void **state)
{
        (void)state;
        double a0 = unmatched(&g.a), b0 = unmatched(&g.b);
        assert_string_equal(g.a.url, g.b.url);
        send_all();
        double a = unmatched(&g.a) - a0, b = unmatched(&g.b) - b0;
        printf("of %d connections: %.0f to the first gateway, %.0f to the second\n", REQUESTS, a,
               b);
        assert_true(a + b == REQUESTS);
        /* the kernel hashes each connection's addresses: both get a share */
        assert_true(a >= REQUESTS / 10);
        assert_true(b >= REQUESTS / 10);
}

static void test_the_port_is_refused_without_the_setting(void **state)
{
        (void)state;
        const char *env[] = {g.port_env, NULL};
        it_gateway c;
        assert_int_not_equal(it_gateway_start(&g.stack, env, 0, &c), 0);
}

static void test_the_other_serves_alone(void **state)
{
        (void)state;
        it_gateway_stop(&g.a);
        double b0 = unmatched(&g.b);
        send_all();
        assert_true(unmatched(&g.b) - b0 == REQUESTS);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_two_gateways_share_the_connections),
            cmocka_unit_test(test_the_port_is_refused_without_the_setting),
            cmocka_unit_test(test_the_other_serves_alone),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
