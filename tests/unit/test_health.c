/* Unit tests of ks_health over a real loopback socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ks_health.h"
#include "ks_metrics.h"

#define RESPONSE_MAX 65536

typedef struct response {
        int status;
        char head[4096];
        char body[RESPONSE_MAX];
} response;

/* One HTTP/1.0 request: the server closes the connection after replying. */
static void http_request(int port, const char *method, const char *path, response *r)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);

        char req[512];
        int n =
            snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
        assert_int_equal(write(fd, req, (size_t)n), n);

        static char raw[RESPONSE_MAX + 4096];
        size_t len = 0;
        ssize_t got;
        while ((got = read(fd, raw + len, sizeof(raw) - 1 - len)) > 0) {
                len += (size_t)got;
        }
        close(fd);
        raw[len] = '\0';

        char *sep = strstr(raw, "\r\n\r\n");
        assert_non_null(sep);
        assert_true((size_t)(sep - raw) < sizeof(r->head));
        memcpy(r->head, raw, (size_t)(sep - raw));
        r->head[sep - raw] = '\0';
        snprintf(r->body, sizeof(r->body), "%s", sep + 4);
        assert_int_equal(sscanf(raw, "HTTP/1.%*d %d", &r->status), 1);
}

static atomic_int db_ok = 1;
static int calls_cache;

static int check_db(void *arg)
{
        (void)arg;
        return atomic_load(&db_ok) ? 0 : -1;
}

static int check_cache(void *arg)
{
        int *calls = arg;
        (*calls)++;
        return -1;
}

static int check_always(void *arg)
{
        (void)arg;
        return 0;
}

static void test_endpoints(void **state)
{
        (void)state;
        ks_health *h = NULL;
        static response r;

        assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
        int port = ks_health_port(h);
        assert_true(port > 0 && port <= 65535);

        http_request(port, "GET", "/healthz", &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "ok\n");

        /* No check registered: ready. */
        http_request(port, "GET", "/readyz", &r);
        assert_int_equal(r.status, 200);

        assert_int_equal(ks_health_add_check(h, "postgres", check_db, NULL), 0);
        assert_int_equal(ks_health_add_check(h, "always", check_always, NULL), 0);
        http_request(port, "GET", "/readyz", &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "ok\n");

        atomic_store(&db_ok, 0);
        http_request(port, "GET", "/readyz?verbose=1", &r);
        assert_int_equal(r.status, 503);
        assert_string_equal(r.body, "not ready: postgres\n");
        atomic_store(&db_ok, 1);
        http_request(port, "GET", "/readyz", &r);
        assert_int_equal(r.status, 200);

        ks_health_stop(h);
}

static void test_readyz_names_first_failure_and_runs_all(void **state)
{
        (void)state;
        ks_health *h = NULL;
        static response r;

        assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
        atomic_store(&db_ok, 0);
        calls_cache = 0;
        assert_int_equal(ks_health_add_check(h, "postgres", check_db, NULL), 0);
        assert_int_equal(ks_health_add_check(h, "redis", check_cache, &calls_cache), 0);
        http_request(ks_health_port(h), "GET", "/readyz", &r);
        assert_int_equal(r.status, 503);
        assert_string_equal(r.body, "not ready: postgres\n");
        /* The second check ran although the first had already failed. */
        assert_int_equal(calls_cache, 1);

        atomic_store(&db_ok, 1);
        http_request(ks_health_port(h), "GET", "/readyz", &r);
        assert_int_equal(r.status, 503);
        assert_string_equal(r.body, "not ready: redis\n");
        ks_health_stop(h);
}

static void test_metrics_and_errors(void **state)
{
        (void)state;
        ks_health *h = NULL;
        static response r;

        ks_counter *c = ks_counter_get(ks_metrics_default(), "test_health_hits_total",
                                       "Hits seen by the health test", "route=\"/x\"");
        assert_non_null(c);
        ks_counter_add(c, 3);

        assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
        int port = ks_health_port(h);

        http_request(port, "GET", "/metrics", &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.head, "Content-Type: text/plain; version=0.0.4"));
        assert_non_null(strstr(r.body, "# TYPE test_health_hits_total counter\n"));
        assert_non_null(strstr(r.body, "test_health_hits_total{route=\"/x\"} 3\n"));

        http_request(port, "GET", "/nope", &r);
        assert_int_equal(r.status, 404);
        http_request(port, "GET", "/healthz/extra", &r);
        assert_int_equal(r.status, 404);

        http_request(port, "POST", "/healthz", &r);
        assert_int_equal(r.status, 405);
        http_request(port, "DELETE", "/metrics", &r);
        assert_int_equal(r.status, 405);

        /* HEAD: same status and headers, no body. */
        http_request(port, "HEAD", "/healthz", &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.head, "Content-Length: 3"));
        assert_string_equal(r.body, "");

        ks_health_stop(h);
}

static void test_start_rejections(void **state)
{
        (void)state;
        ks_health *h = NULL;
        ks_health *other = NULL;

        assert_int_equal(ks_health_start(&h, "127.0.0.1", -1), -1);
        assert_int_equal(ks_health_start(&h, "127.0.0.1", 65536), -1);
        assert_int_equal(ks_health_start(&h, NULL, 0), -1);

        /* A port already taken is an error, not a silent second listener. */
        assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
        assert_int_equal(ks_health_start(&other, "127.0.0.1", ks_health_port(h)), -1);

        for (int i = 0; i < KS_HEALTH_CHECKS_MAX; i++) {
                assert_int_equal(ks_health_add_check(h, "c", check_always, NULL), 0);
        }
        assert_int_equal(ks_health_add_check(h, "one too many", check_always, NULL), -1);
        assert_int_equal(ks_health_add_check(h, "no fn", NULL, NULL), -1);
        ks_health_stop(h);
        ks_health_stop(NULL);
}

/* Whether a TCP connection to 127.0.0.1:port is refused (nothing listens there). */
static bool refused(int port)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int rc;

        assert_true(fd >= 0);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        close(fd);
        return rc != 0 && errno == ECONNREFUSED;
}

/*
 * Stop may land before the loop thread runs; it must still return, and the
 * port is closed once it has, whether the listener had answered or not.
 */
static void test_stop_right_after_start(void **state)
{
        (void)state;
        static response r;

        for (int i = 0; i < 20; i++) {
                ks_health *h = NULL;
                assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
                int port = ks_health_port(h);
                assert_true(port > 0);
                if (i % 2 == 1) { /* every other one serves a request first */
                        http_request(port, "GET", "/healthz", &r);
                        assert_int_equal(r.status, 200);
                }
                ks_health_stop(h);
                assert_true(refused(port));
        }
}

/* Readiness follows its check from one request to the next, and the listener keeps answering. */
static void test_readiness_flips_with_its_check(void **state)
{
        (void)state;
        ks_health *h = NULL;
        static response r;

        assert_int_equal(ks_health_start(&h, "127.0.0.1", 0), 0);
        int port = ks_health_port(h);
        assert_int_equal(ks_health_add_check(h, "postgres", check_db, NULL), 0);
        for (int i = 0; i < 6; i++) {
                bool up = i % 2 == 0;
                atomic_store(&db_ok, up ? 1 : 0);
                http_request(port, "GET", "/readyz", &r);
                assert_int_equal(r.status, up ? 200 : 503);
                assert_string_equal(r.body, up ? "ok\n" : "not ready: postgres\n");
                /* Liveness is not readiness: /healthz answers either way. */
                http_request(port, "GET", "/healthz", &r);
                assert_int_equal(r.status, 200);
        }
        atomic_store(&db_ok, 1);
        ks_health_stop(h);
        assert_true(refused(port));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_endpoints),
            cmocka_unit_test(test_readyz_names_first_failure_and_runs_all),
            cmocka_unit_test(test_metrics_and_errors),
            cmocka_unit_test(test_start_rejections),
            cmocka_unit_test(test_stop_right_after_start),
            cmocka_unit_test(test_readiness_flips_with_its_check),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
