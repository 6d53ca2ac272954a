/* Unit tests of ks_metrics: exposition text, concurrency, bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ks_metrics.h"

static int setup(void **state)
{
        ks_metrics *m = NULL;
        if (ks_metrics_new(&m) != 0) {
                return -1;
        }
        *state = m;
        return 0;
}

static int teardown(void **state)
{
        ks_metrics_free(*state);
        return 0;
}

static char *render(ks_metrics *m)
{
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(ks_metrics_render(m, &text, &len), 0);
        assert_non_null(text);
        assert_int_equal(len, strlen(text));
        return text;
}

static void test_empty_registry(void **state)
{
        char *text = render(*state);
        assert_string_equal(text, "");
        free(text);
}

static void test_counter_and_gauge_text(void **state)
{
        ks_metrics *m = *state;
        ks_counter *ok = ks_counter_get(m, "keelson_rpc_requests_total", "RPCs handled",
                                        "method=\"Login\",code=\"ok\"");
        ks_counter *bad = ks_counter_get(m, "keelson_rpc_requests_total", "ignored later",
                                         "method=\"Login\",code=\"unauthenticated\"");
        ks_gauge *g = ks_gauge_get(m, "keelson_pg_connections", "Open connections", NULL);
        assert_non_null(ok);
        assert_non_null(bad);
        assert_non_null(g);

        ks_counter_inc(ok);
        ks_counter_add(ok, 41);
        ks_counter_inc(bad);
        ks_gauge_set(g, 5);
        ks_gauge_add(g, -7);
        /* The same name and labels give back the same series. */
        assert_ptr_equal(
            ks_counter_get(m, "keelson_rpc_requests_total", NULL, "method=\"Login\",code=\"ok\""),
            ok);
        assert_int_equal(ks_counter_value(ok), 42);
        assert_int_equal(ks_gauge_value(g), -2);

        char *text = render(m);
        assert_string_equal(
            text, "# HELP keelson_rpc_requests_total RPCs handled\n"
                  "# TYPE keelson_rpc_requests_total counter\n"
                  "keelson_rpc_requests_total{method=\"Login\",code=\"ok\"} 42\n"
                  "keelson_rpc_requests_total{method=\"Login\",code=\"unauthenticated\"} 1\n"
                  "# HELP keelson_pg_connections Open connections\n"
                  "# TYPE keelson_pg_connections gauge\n"
                  "keelson_pg_connections -2\n");
        free(text);
}

static void test_histogram_text(void **state)
{
        ks_metrics *m = *state;
        const double buckets[] = {0.005, 0.1, 1};
        ks_histogram *h =
            ks_histogram_get(m, "keelson_rpc_seconds", "RPC latency", "route=\"/x\"", buckets, 3);
        ks_histogram *plain = ks_histogram_get(m, "keelson_rpc_seconds", NULL, "", buckets, 3);
        assert_non_null(h);
        assert_non_null(plain);

        ks_histogram_observe(h, 0.005); /* on a bound: counts in that bucket */
        ks_histogram_observe(h, 0.05);
        ks_histogram_observe(h, 0.25);
        ks_histogram_observe(h, 2.5);
        ks_histogram_observe(h, 30);
        ks_histogram_observe(h, NAN); /* dropped */
        ks_histogram_observe(plain, 0.001);

        char *text = render(m);
        assert_string_equal(text, "# HELP keelson_rpc_seconds RPC latency\n"
                                  "# TYPE keelson_rpc_seconds histogram\n"
                                  "keelson_rpc_seconds_bucket{route=\"/x\",le=\"0.005\"} 1\n"
                                  "keelson_rpc_seconds_bucket{route=\"/x\",le=\"0.1\"} 2\n"
                                  "keelson_rpc_seconds_bucket{route=\"/x\",le=\"1\"} 3\n"
                                  "keelson_rpc_seconds_bucket{route=\"/x\",le=\"+Inf\"} 5\n"
                                  "keelson_rpc_seconds_sum{route=\"/x\"} 32.805\n"
                                  "keelson_rpc_seconds_count{route=\"/x\"} 5\n"
                                  "keelson_rpc_seconds_bucket{le=\"0.005\"} 1\n"
                                  "keelson_rpc_seconds_bucket{le=\"0.1\"} 1\n"
                                  "keelson_rpc_seconds_bucket{le=\"1\"} 1\n"
                                  "keelson_rpc_seconds_bucket{le=\"+Inf\"} 1\n"
                                  "keelson_rpc_seconds_sum 0.001\n"
                                  "keelson_rpc_seconds_count 1\n");
        free(text);
}

static void test_help_escaping(void **state)
{
        ks_metrics *m = *state;
        assert_non_null(ks_counter_get(m, "x_total", "a \\ b\nc \"q\"", NULL));
        char *text = render(m);
        assert_string_equal(text, "# HELP x_total a \\\\ b\\nc \"q\"\n"
                                  "# TYPE x_total counter\n"
                                  "x_total 0\n");
        free(text);
}

static void test_escape_label_value(void **state)
{
        (void)state;
        char out[64];
        assert_string_equal(ks_metrics_escape("a\"b\\c\nd", out, sizeof(out)), "a\\\"b\\\\c\\nd");
        /* Truncation never cuts an escape in half. */
        char small[4];
        assert_string_equal(ks_metrics_escape("ab\"c", small, sizeof(small)), "ab");
        assert_string_equal(ks_metrics_escape("", out, sizeof(out)), "");
}

/*
 * The latency layout every service's histograms use, as /metrics renders it:
 * each bound once, in order, from 0.5 ms to 10 s, counting the latencies at
 * or below it (a latency on a bound counts there; one past the last only in
 * +Inf).
 */
static void test_latency_buckets(void **state)
{
        ks_metrics *m = *state;
        static const double seen_s[] = {0.0001, 0.0005, 0.003, 0.07, 0.3, 4, 60};
        ks_histogram *h = ks_histogram_get(m, "rpc_seconds", "latency", "method=\"Login\"",
                                           KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
        assert_non_null(h);
        for (size_t i = 0; i < sizeof(seen_s) / sizeof(seen_s[0]); i++) {
                ks_histogram_observe(h, seen_s[i]);
        }

        char *text = render(m);
        assert_non_null(strstr(text, "rpc_seconds_bucket{method=\"Login\",le=\"0.0005\"} 2\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.001\"} 2\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.0025\"} 2\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.005\"} 3\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.01\"} 3\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.025\"} 3\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.05\"} 3\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.1\"} 4\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.25\"} 4\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"0.5\"} 5\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"1\"} 5\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"2.5\"} 5\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"5\"} 6\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"10\"} 6\n"
                                     "rpc_seconds_bucket{method=\"Login\",le=\"+Inf\"} 7\n"
                                     "rpc_seconds_sum{method=\"Login\"} "));
        assert_non_null(strstr(text, "rpc_seconds_count{method=\"Login\"} 7\n"));
        free(text);
}

static void test_rejections(void **state)
{
        ks_metrics *m = *state;
        const double asc[] = {1, 2};
        const double desc[] = {2, 1};
        double many[KS_METRICS_BUCKETS_MAX + 1];
        for (size_t i = 0; i < KS_METRICS_BUCKETS_MAX + 1; i++) {
                many[i] = (double)i;
        }

        assert_null(ks_counter_get(m, "", "h", NULL));
        assert_null(ks_counter_get(m, "9lives", "h", NULL));
        assert_null(ks_counter_get(m, "bad-name", "h", NULL));
        assert_null(ks_counter_get(NULL, "ok_total", "h", NULL));
        assert_null(ks_counter_get(m, "ok_total", "h", "a=\"x\ny\""));
        assert_null(ks_histogram_get(m, "h_seconds", "h", NULL, desc, 2));
        assert_null(ks_histogram_get(m, "h_seconds", "h", NULL, many, KS_METRICS_BUCKETS_MAX + 1));
        /* One name has one type, and one bucket layout. */
        assert_non_null(ks_counter_get(m, "twice", "h", NULL));
        assert_null(ks_gauge_get(m, "twice", "h", "a=\"1\""));
        assert_null(ks_gauge_get(m, "twice", "h", NULL));
        assert_non_null(ks_histogram_get(m, "h_seconds", "h", NULL, asc, 2));
        assert_null(ks_histogram_get(m, "h_seconds", "h", "a=\"1\"", asc, 1));

        /* Updates on a NULL handle do nothing. */
        ks_counter_inc(NULL);
        ks_counter_add(NULL, 3);
        ks_gauge_set(NULL, 1);
        ks_gauge_add(NULL, 1);
        ks_histogram_observe(NULL, 1.0);
        assert_int_equal(ks_counter_value(NULL), 0);
        assert_int_equal(ks_gauge_value(NULL), 0);
}

#define THREADS    4
#define PER_THREAD 100000

typedef struct worker_arg {
        ks_metrics *m;
        ks_histogram *h;
} worker_arg;

static void *worker(void *p)
{
        worker_arg *a = p;
        /* Each thread looks the series up itself: lookups race with updates. */
        ks_counter *c = ks_counter_get(a->m, "hits_total", "hits", NULL);
        ks_gauge *g = ks_gauge_get(a->m, "level", "level", NULL);
        for (int i = 0; i < PER_THREAD; i++) {
                ks_counter_inc(c);
                ks_gauge_add(g, 1);
                ks_histogram_observe(a->h, 0.5);
        }
        return NULL;
}

static void test_concurrent_updates(void **state)
{
        ks_metrics *m = *state;
        const double buckets[] = {1};
        worker_arg arg = {.m = m, .h = ks_histogram_get(m, "w_seconds", "w", NULL, buckets, 1)};
        pthread_t t[THREADS];
        assert_non_null(arg.h);
        for (int i = 0; i < THREADS; i++) {
                assert_int_equal(pthread_create(&t[i], NULL, worker, &arg), 0);
        }
        for (int i = 0; i < THREADS; i++) {
                assert_int_equal(pthread_join(t[i], NULL), 0);
        }
        assert_int_equal(ks_counter_value(ks_counter_get(m, "hits_total", NULL, NULL)),
                         THREADS * PER_THREAD);
        assert_int_equal(ks_gauge_value(ks_gauge_get(m, "level", NULL, NULL)),
                         THREADS * PER_THREAD);

        char *text = render(m);
        /* 0.5 is exact in binary, so the sum is exact: 400000 * 0.5. */
        assert_non_null(strstr(text, "w_seconds_sum 200000\n"));
        assert_non_null(strstr(text, "w_seconds_count 400000\n"));
        assert_non_null(strstr(text, "w_seconds_bucket{le=\"1\"} 400000\n"));
        assert_non_null(strstr(text, "hits_total 400000\n"));
        free(text);
}

static void test_series_bound(void **state)
{
        ks_metrics *m = *state;
        char labels[64];
        for (int i = 0; i < KS_METRICS_SERIES_MAX; i++) {
                snprintf(labels, sizeof(labels), "i=\"%d\"", i);
                assert_non_null(ks_counter_get(m, "many_total", "many", labels));
        }
        snprintf(labels, sizeof(labels), "i=\"%d\"", KS_METRICS_SERIES_MAX);
        assert_null(ks_counter_get(m, "many_total", "many", labels));
        assert_null(ks_gauge_get(m, "other", "other", NULL));
        /* Existing series are still found once the bound is reached. */
        ks_counter *c = ks_counter_get(m, "many_total", NULL, "i=\"7\"");
        assert_non_null(c);
        ks_counter_inc(c);
        char *text = render(m);
        assert_non_null(strstr(text, "many_total{i=\"7\"} 1\n"));
        assert_null(strstr(text, "other"));
        free(text);
}

static void test_default_registry(void **state)
{
        (void)state;
        ks_metrics *d = ks_metrics_default();
        assert_non_null(d);
        assert_ptr_equal(ks_metrics_default(), d);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_empty_registry, setup, teardown),
            cmocka_unit_test_setup_teardown(test_counter_and_gauge_text, setup, teardown),
            cmocka_unit_test_setup_teardown(test_histogram_text, setup, teardown),
            cmocka_unit_test_setup_teardown(test_help_escaping, setup, teardown),
            cmocka_unit_test(test_escape_label_value),
            cmocka_unit_test_setup_teardown(test_latency_buckets, setup, teardown),
            cmocka_unit_test_setup_teardown(test_rejections, setup, teardown),
            cmocka_unit_test_setup_teardown(test_concurrent_updates, setup, teardown),
            cmocka_unit_test_setup_teardown(test_series_bound, setup, teardown),
            cmocka_unit_test(test_default_registry),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
