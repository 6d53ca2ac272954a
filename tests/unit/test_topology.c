/* Unit tests of ks_topology: names, method routing, broker URL arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>

#include "ks_topology.h"

static void test_service_names(void **state)
{
        (void)state;
        assert_string_equal(ks_service_name(KS_SVC_AUTH), "auth");
        assert_string_equal(ks_service_name(KS_SVC_BILLING), "billing");
        assert_string_equal(ks_service_name(KS_SVC_LEDGER), "ledger");
        assert_string_equal(ks_service_name(KS_SVC_WEBHOOK), "webhook");
        assert_string_equal(ks_service_name(KS_SVC_SUMMARY), "summary");
        assert_string_equal(ks_service_name(KS_SVC_COUNT), "unknown");
}

static void test_service_of_method(void **state)
{
        (void)state;
        assert_int_equal(ks_service_of_method("keelson.auth.v1.AuthService/Login"), KS_SVC_AUTH);
        assert_int_equal(ks_service_of_method("keelson.billing.v1.BillingService/CreatePlan"),
                         KS_SVC_BILLING);
        assert_int_equal(ks_service_of_method("keelson.ledger.v1.LedgerService/CreateTransfers"),
                         KS_SVC_LEDGER);
        assert_int_equal(ks_service_of_method("keelson.webhook.v1.WebhookService/Ingest"),
                         KS_SVC_WEBHOOK);
        assert_int_equal(ks_service_of_method("keelson.summary.v1.SummaryService/Get"),
                         KS_SVC_SUMMARY);
}

static void test_service_of_method_rejects(void **state)
{
        (void)state;
        const char *bad[] = {
            NULL,
            "",
            "keelson.auth.v1.AuthService",        /* no method */
            "keelson.auth.v1.AuthService/",       /* empty method */
            "keelson.auth.v2.AuthService/Login",  /* other version */
            "keelson.rpc.v1.RpcService/Call",     /* unknown area */
            "keelson.authx.v1.AuthService/Login", /* area prefix only */
            "keelson.aut.v1.AuthService/Login",   /* area truncated */
            "other.auth.v1.AuthService/Login",    /* other package */
            "keelson.auth.v1.Auth/Login",         /* not a Service */
            "keelson.auth.v1.Service/Login",      /* empty service name */
            "keelson.auth.v1.AuthService/Log/in", /* extra slash */
            "/keelson.auth.v1.AuthService/Login", /* HTTP path, not a method */
            "keelson.auth.v1.AuthService/Login ", /* trailing space */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(ks_service_of_method(bad[i]), -1);
        }
}

/* The url of a socket of the broker at base is want. */
static void expect_url(const char *base, int service, ks_broker_side side, const char *want)
{
        char out[KS_URL_MAX];
        assert_int_equal(ks_broker_url(out, sizeof(out), base, service, side), 0);
        assert_string_equal(out, want);
}

static void test_broker_url_offsets(void **state)
{
        (void)state;
        const char *base = "tcp://127.0.0.1:7400";

        expect_url(base, KS_SVC_AUTH, KS_SIDE_FRONT, "tcp://127.0.0.1:7400");
        expect_url(base, KS_SVC_AUTH, KS_SIDE_BACK, "tcp://127.0.0.1:7401");
        expect_url(base, KS_SVC_LEDGER, KS_SIDE_FRONT, "tcp://127.0.0.1:7404");
        expect_url(base, KS_SVC_SUMMARY, KS_SIDE_BACK, "tcp://127.0.0.1:7409");
        expect_url(base, 0, KS_SIDE_EVENTS_IN, "tcp://127.0.0.1:7440");
        expect_url(base, 0, KS_SIDE_EVENTS_OUT, "tcp://127.0.0.1:7441");
}

static void test_broker_url_hosts(void **state)
{
        (void)state;
        expect_url("tcp://broker-0.keelson:1000", KS_SVC_BILLING, KS_SIDE_BACK,
                   "tcp://broker-0.keelson:1003");
        expect_url("tcp://[::1]:7400", KS_SVC_AUTH, KS_SIDE_BACK, "tcp://[::1]:7401");
}

static void test_broker_url_port_overflow(void **state)
{
        (void)state;
        char out[KS_URL_MAX];

        /* 65494 + 41 = 65535 is the last valid port; one more overflows. */
        expect_url("tcp://h:65494", 0, KS_SIDE_EVENTS_OUT, "tcp://h:65535");
        assert_int_equal(ks_broker_url(out, sizeof(out), "tcp://h:65495", 0, KS_SIDE_EVENTS_OUT),
                         -1);
        assert_int_equal(
            ks_broker_url(out, sizeof(out), "tcp://h:65535", KS_SVC_AUTH, KS_SIDE_FRONT), 0);
        assert_int_equal(
            ks_broker_url(out, sizeof(out), "tcp://h:65535", KS_SVC_AUTH, KS_SIDE_BACK), -1);
}

static void test_broker_url_rejects(void **state)
{
        (void)state;
        char out[KS_URL_MAX];
        const char *bad[] = {
            NULL,
            "",
            "tcp://",
            "tcp://:7400",
            "tcp://host",
            "tcp://host:",
            "tcp://host:0",
            "tcp://host:65536",
            "tcp://host:99999999999999999999",
            "tcp://host:-1",
            "tcp://host:+80",
            "tcp://host:74a0",
            "tcp://host:7400/",
            "tcp://host:7400 ",
            "tcp://ho st:7400",
            "tcp://a/b:7400",
            "tcp://::1:7400",
            "tcp://[]:7400",
            "ipc://",
            "ipc://tmp/broker",   /* relative: processes may not share a working folder */
            "ipc:///",            /* a folder, not a name */
            "ipc:///tmp/broker/", /* ditto */
            "ipc:///tmp/a,b",
            "ipc:///tmp/a b",
            "IPC:///tmp/broker",
            "unix:///tmp/broker",
            "http://host:7400",
            "TCP://host:7400",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(
                    ks_broker_url(out, sizeof(out), bad[i], KS_SVC_AUTH, KS_SIDE_FRONT), -1);
        }
        /* A service outside the table has no front or back. */
        assert_int_equal(
            ks_broker_url(out, sizeof(out), "tcp://h:7400", KS_SVC_COUNT, KS_SIDE_FRONT), -1);
        assert_int_equal(ks_broker_url(out, sizeof(out), "tcp://h:7400", -1, KS_SIDE_BACK), -1);
        assert_int_equal(ks_broker_url(out, sizeof(out), "tcp://h:7400", 0, (ks_broker_side)99),
                         -1);
}

static void test_broker_url_ipc(void **state)
{
        (void)state;
        char out[KS_URL_MAX];
        const char *base = "ipc:///run/keelson/broker";

        assert_true(ks_broker_url_ipc(base));
        assert_false(ks_broker_url_ipc("tcp://127.0.0.1:7400"));
        assert_false(ks_broker_url_ipc(NULL));
        expect_url(base, KS_SVC_AUTH, KS_SIDE_FRONT, "ipc:///run/keelson/broker-auth-front");
        expect_url(base, KS_SVC_BILLING, KS_SIDE_BACK, "ipc:///run/keelson/broker-billing-back");
        expect_url(base, KS_SVC_WEBHOOK, KS_SIDE_FRONT, "ipc:///run/keelson/broker-webhook-front");
        expect_url(base, 0, KS_SIDE_EVENTS_IN, "ipc:///run/keelson/broker-events-in");
        expect_url(base, 0, KS_SIDE_EVENTS_OUT, "ipc:///run/keelson/broker-events-out");
        /* A path may hold what a host may not (a colon); a service outside the table has no
         * socket. */
        expect_url("ipc:///tmp/x:7400", KS_SVC_AUTH, KS_SIDE_BACK, "ipc:///tmp/x:7400-auth-back");
        assert_int_equal(ks_broker_url(out, sizeof(out), base, KS_SVC_COUNT, KS_SIDE_FRONT), -1);
}

/* The longest socket name of the longest base still fits a unix socket's 108 bytes. */
static void test_broker_url_ipc_length(void **state)
{
        (void)state;
        char base[KS_URL_MAX], out[KS_URL_MAX];
        char path[KS_IPC_BASE_MAX + 2];
        memset(path, 'a', sizeof(path) - 1);
        path[0] = '/';
        path[KS_IPC_BASE_MAX] = '\0';
        snprintf(base, sizeof(base), "ipc://%s", path);
        assert_int_equal(ks_broker_url(out, sizeof(out), base, KS_SVC_WEBHOOK, KS_SIDE_FRONT), 0);
        assert_true(strlen(out) - strlen("ipc://") < sizeof(((struct sockaddr_un *)0)->sun_path));
        path[KS_IPC_BASE_MAX] = 'a';
        path[KS_IPC_BASE_MAX + 1] = '\0';
        snprintf(base, sizeof(base), "ipc://%s", path);
        assert_int_equal(ks_broker_url(out, sizeof(out), base, KS_SVC_AUTH, KS_SIDE_FRONT), -1);
        char urls[2][KS_URL_MAX];
        assert_int_equal(ks_broker_list(base, urls, 2), -1);
}

static void test_broker_url_small_buffer(void **state)
{
        (void)state;
        char out[KS_URL_MAX];
        const char *base = "tcp://127.0.0.1:7400";
        size_t need = strlen(base) + 1;

        assert_int_equal(ks_broker_url(out, need, base, 0, KS_SIDE_FRONT), 0);
        assert_int_equal(ks_broker_url(out, need - 1, base, 0, KS_SIDE_FRONT), -1);
        assert_int_equal(ks_broker_url(out, 0, base, 0, KS_SIDE_FRONT), -1);
        assert_int_equal(ks_broker_url(NULL, sizeof(out), base, 0, KS_SIDE_FRONT), -1);
}

static void test_broker_list(void **state)
{
        (void)state;
        char urls[KS_BROKERS_MAX][KS_URL_MAX];

        assert_int_equal(ks_broker_list("tcp://a:7400", urls, KS_BROKERS_MAX), 1);
        assert_string_equal(urls[0], "tcp://a:7400");
        assert_int_equal(ks_broker_list(" tcp://a:7400 ,\ttcp://b:7500,tcp://[::1]:7600 ", urls, 8),
                         3);
        assert_string_equal(urls[0], "tcp://a:7400");
        assert_string_equal(urls[1], "tcp://b:7500");
        assert_string_equal(urls[2], "tcp://[::1]:7600");
        /* A broker's own pair, and ipc bases as the services of one machine dial them. */
        assert_int_equal(ks_broker_list("tcp://127.0.0.1:7400,ipc:///run/k/broker", urls, 2), 2);
        assert_string_equal(urls[1], "ipc:///run/k/broker");
        assert_int_equal(ks_broker_list("ipc:///run/k/broker, ipc:///run/k/broker-2", urls, 8), 2);
        assert_string_equal(urls[0], "ipc:///run/k/broker");
        assert_string_equal(urls[1], "ipc:///run/k/broker-2");
        assert_int_equal(ks_broker_list("", urls, KS_BROKERS_MAX), 0);
        assert_int_equal(ks_broker_list("   ", urls, KS_BROKERS_MAX), 0);
}

static void test_broker_list_rejects(void **state)
{
        (void)state;
        char urls[KS_BROKERS_MAX + 1][KS_URL_MAX];

        assert_int_equal(ks_broker_list("tcp://a:7400,", urls, KS_BROKERS_MAX), -1);
        assert_int_equal(ks_broker_list("tcp://a:7400,,tcp://b:1", urls, KS_BROKERS_MAX), -1);
        assert_int_equal(ks_broker_list("tcp://a:7400,tcp://b", urls, KS_BROKERS_MAX), -1);
        assert_int_equal(ks_broker_list(",tcp://a:7400", urls, KS_BROKERS_MAX), -1);
        assert_int_equal(ks_broker_list("tcp://a:7400,ipc://rel", urls, KS_BROKERS_MAX), -1);
        assert_int_equal(ks_broker_list(NULL, urls, KS_BROKERS_MAX), -1);
        /* More entries than the caller's max, or than KS_BROKERS_MAX. */
        assert_int_equal(ks_broker_list("tcp://a:1,tcp://b:2", urls, 1), -1);
        char many[KS_URL_MAX * 2] = "";
        for (int i = 0; i <= KS_BROKERS_MAX; i++) {
                strcat(many, i == 0 ? "tcp://h:1" : ",tcp://h:1");
        }
        assert_int_equal(ks_broker_list(many, urls, KS_BROKERS_MAX + 1), -1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_service_names),
            cmocka_unit_test(test_service_of_method),
            cmocka_unit_test(test_service_of_method_rejects),
            cmocka_unit_test(test_broker_url_offsets),
            cmocka_unit_test(test_broker_url_hosts),
            cmocka_unit_test(test_broker_url_port_overflow),
            cmocka_unit_test(test_broker_url_rejects),
            cmocka_unit_test(test_broker_url_ipc),
            cmocka_unit_test(test_broker_url_ipc_length),
            cmocka_unit_test(test_broker_url_small_buffer),
            cmocka_unit_test(test_broker_list),
            cmocka_unit_test(test_broker_list_rejects),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
