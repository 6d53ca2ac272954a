/*
 * A quiet connection is not a dead one: the broker's peers (the gateways,
 * the replicas, the publishers and subscribers of events) keep their
 * connections through a pause longer than the handshake's deadline
 * (KS_SP_HANDSHAKE_MS). Over the pause the broker's
 * keelson_broker_connections_total does not move, and the calls after it
 * are answered by every gateway.
 *
 * The deadline once stayed armed after the handshake: every connection
 * quiet for 10 s after a message came in was closed and dialled again, and
 * a call in the redial's 100 ms failed with 503 "the call could not be
 * started".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "it_support.h"
#include "ks_sp.h"

#define TOKEN_MAX   512
#define CONNECTIONS "keelson_broker_connections_total"
#define PAUSE_MS    (KS_SP_HANDSHAKE_MS + 3000)

static it_stack g_stack;

/* WhoAmI through every gateway: each reaches auth through its connections to the broker. */
static void whoami_everywhere(const char *token, const char *when)
{
        for (int g = 0; g < g_stack.n_gateways; g++) {
                it_http_response r;
                it_post_json(g_stack.gateway_urls[g], "/keelson.auth.v1.AuthService/WhoAmI", "{}",
                             token, &r);
                if (r.status != 200) {
                        fail_msg("WhoAmI %s, gateway %d: HTTP %ld: %.300s", when, g, r.status,
                                 r.body);
                }
                it_http_response_free(&r);
        }
}

static void test_quiet_connections_stay(void **state)
{
        (void)state;
        char token[TOKEN_MAX];
        assert_int_equal(it_new_session(g_stack.gateway_url, "it-quiet", token, NULL, NULL), 0);
        whoami_everywhere(token, "before the pause");
        double before = it_metric_sum_at(g_stack.broker_health_port, CONNECTIONS, NULL);
        assert_true(before > 0);

        it_sleep_ms(PAUSE_MS);

        whoami_everywhere(token, "after the pause");
        double after = it_metric_sum_at(g_stack.broker_health_port, CONNECTIONS, NULL);
        if (after != before) {
                fail_msg("%.0f connections to the broker were made during %d ms of quiet",
                         after - before, PAUSE_MS);
        }
}

static int setup(void **state)
{
        (void)state;
        return it_stack_load(&g_stack);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_quiet_connections_stay),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
