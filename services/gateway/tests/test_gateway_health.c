/*
 * Unit tests of grpc.health.v1.Health/Check (health.c): what a Kubernetes
 * probe and a client asking for one service are answered, from a probe the
 * test sets, the requests and responses as protobuf-c encodes them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/health/v1/health.pb-c.h"
#include "health.h"
#include "ks_topology.h"

typedef struct world {
        bool ready;
        bool answers[KS_SVC_COUNT];
        int asked; /* the last service asked about, -1 none */
} world;

static bool ready(void *arg)
{
        return ((world *)arg)->ready;
}

static bool answers(void *arg, int service)
{
        world *w = arg;
        assert_true(service >= 0 && service < KS_SVC_COUNT);
        w->asked = service;
        return w->answers[service];
}

/* Check(name) through the wire: returns the call's code; *status when OK. */
static int check(world *w, const char *name, int *status)
{
        gw_health_probe p = {ready, answers, w};
        Grpc__Health__V1__HealthCheckRequest q = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        q.service = (char *)name;
        uint8_t buf[1024];
        assert_true(grpc__health__v1__health_check_request__get_packed_size(&q) <= sizeof(buf));
        size_t len = grpc__health__v1__health_check_request__pack(&q, buf);
        uint8_t *out = NULL;
        size_t out_len = 0;
        w->asked = -1;
        int code = gw_health_check(&p, buf, len, &out, &out_len);
        if (code != KS_OK) {
                assert_null(out);
                return code;
        }
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, out_len, out);
        assert_non_null(r);
        *status = r->status;
        grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        free(out);
        return code;
}

static void test_overall(void **state)
{
        (void)state;
        world w = {.ready = true};
        int status = -1;
        /* "" is the gateway alone: no replica of anything is asked about. */
        assert_int_equal(check(&w, "", &status), KS_OK);
        assert_int_equal(status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
        assert_int_equal(w.asked, -1);
        w.ready = false;
        assert_int_equal(check(&w, "", &status), KS_OK);
        assert_int_equal(status,
                         GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
}

static void test_services(void **state)
{
        (void)state;
        world w = {.ready = true};
        int status = -1;
        struct {
                const char *name;
                int service;
        } cases[] = {
            {"keelson.auth.v1.AuthService", KS_SVC_AUTH},
            {"keelson.billing.v1.BillingService", KS_SVC_BILLING},
            {"keelson.ledger.v1.LedgerService", KS_SVC_LEDGER},
            {"keelson.webhook.v1.WebhookService", KS_SVC_WEBHOOK},
            {"keelson.summary.v1.AdminSummaryService", KS_SVC_SUMMARY},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                w.ready = true;
                w.answers[cases[i].service] = false;
                assert_int_equal(check(&w, cases[i].name, &status), KS_OK);
                assert_int_equal(w.asked, cases[i].service);
                assert_int_equal(
                    status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
                w.answers[cases[i].service] = true;
                assert_int_equal(check(&w, cases[i].name, &status), KS_OK);
                assert_int_equal(status,
                                 GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
                /* A draining gateway serves nothing, whatever is behind it. */
                w.ready = false;
                assert_int_equal(check(&w, cases[i].name, &status), KS_OK);
                assert_int_equal(
                    status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
        }
        /* The gateway's own services are the gateway's readiness. */
        const char *own[] = {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                             "grpc.reflection.v1alpha.ServerReflection"};
        for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
                w.ready = true;
                assert_int_equal(check(&w, own[i], &status), KS_OK);
                assert_int_equal(status,
                                 GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
                assert_int_equal(w.asked, -1);
        }
}

static void test_unknown(void **state)
{
        (void)state;
        world w = {.ready = true};
        int status = -1;
        const char *unknown[] = {"keelson.auth.v1.Nothing",
                                 "keelson.auth.v1.AuthService/Login",
                                 "keelson.rpc.v1.Envelope",
                                 "keelson.auth.v1.authservice",
                                 "AuthService",
                                 "grpc.health.v1.Health.Check",
                                 " "};
        for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
                assert_int_equal(check(&w, unknown[i], &status), KS_NOT_FOUND);
        }
        char long_name[600];
        memset(long_name, 'a', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = '\0';
        assert_int_equal(check(&w, long_name, &status), KS_NOT_FOUND);

        gw_serving s = GW_SERVING;
        gw_health_probe p = {ready, answers, &w};
        assert_int_equal(gw_health_status(&p, "keelson.auth.v1.Nothing", &s), KS_NOT_FOUND);
        assert_int_equal(s, GW_SERVICE_UNKNOWN); /* what Watch sends for it */
        assert_int_equal(gw_health_status(&p, NULL, &s), KS_NOT_FOUND);
}

static void test_malformed(void **state)
{
        (void)state;
        world w = {.ready = true};
        gw_health_probe p = {ready, answers, &w};
        const uint8_t junk[] = {0x0a, 0x09, 'x'};
        uint8_t *out = NULL;
        size_t out_len = 0;
        assert_int_equal(gw_health_check(&p, junk, sizeof(junk), &out, &out_len),
                         KS_INVALID_ARGUMENT);
        assert_null(out);
        /* An empty message is Check(""). */
        assert_int_equal(gw_health_check(&p, NULL, 0, &out, &out_len), KS_OK);
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, out_len, out);
        assert_int_equal(r->status,
                         GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
        grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_overall),
            cmocka_unit_test(test_services),
            cmocka_unit_test(test_unknown),
            cmocka_unit_test(test_malformed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
