/*
 * The gateway against hostile clients, as an attacker without credentials
 * would try it, on a gateway of the test's own (short request deadline,
 * small per-address cap): smuggled requests, two Authorization headers,
 * requests trickled a line at a time, a flood of connections from one
 * address, bodies that are expensive to decode sent without a token. After
 * each, a legitimate client (another source address) is still served.
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
#include <unistd.h>

#include <cmocka.h>

#include "it_support.h"
#include "raw_http.h"

#define READ_TIMEOUT_MS  "600"
#define PER_ADDRESS_MAX  16
#define SLOW_CLIENTS     12
#define WHOAMI           "/keelson.auth.v1.AuthService/WhoAmI"
#define CREATE_TRANSFERS "/keelson.ledger.v1.LedgerService/CreateTransfers"
#define TOKEN_MAX        512

static it_stack g_stack;
static it_gateway g_gw;
static int g_port;
static char g_token[TOKEN_MAX];

static int setup(void **state)
{
        (void)state;
        const char *env[] = {"KEELSON_GATEWAY_READ_TIMEOUT_MS=" READ_TIMEOUT_MS,
                             "KEELSON_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS=16",
                             "KEELSON_GATEWAY_RATE_API=100000:100000/1s",
                             "KEELSON_GATEWAY_RATE_RESOLVE=100000:100000/1s", NULL};
        if (it_stack_load(&g_stack) != 0 || it_gateway_start(&g_stack, env, 1, &g_gw) != 0 ||
            it_new_session(g_stack.gateway_url, "hostile", g_token, NULL, NULL) != 0) {
                return -1;
        }
        const char *colon = strrchr(g_gw.url, ':');
        g_port = colon != NULL ? atoi(colon + 1) : 0;
        return g_port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g_gw);
        return 0;
}

/* WhoAmI from another source address than the attacker's, on a raw connection. */
static void assert_still_serves(void)
{
        int fd = raw_dial("127.0.0.9", g_port);
        assert_true(fd >= 0);
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Authorization: Bearer %s\r\nContent-Length: 2\r\nConnection: close\r\n"
                         "\r\n{}",
                         g_token);
        raw_send(fd, req, (size_t)n);
        raw_reply r;
        raw_read(fd, 1, &r);
        close(fd);
        if (raw_status(&r) != 200 || strstr(r.text, "\"userId\"") == NULL) {
                fail_msg("WhoAmI was not served: %s", r.text);
        }
}

/* Each hides a second request that a lax parser would serve. */
static void test_smuggling_is_refused(void **state)
{
        (void)state;
        static const char *const cases[] = {
            "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}GET /smuggled HTTP/1.1\r\nHost: "
            "x\r\n\r\n",
            "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n{}"
            "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n"
            "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            "0x2\r\n{}\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                raw_reply r;
                raw_exchange(g_port, cases[i], 1, &r);
                if (raw_status(&r) != 400 || !r.closed || raw_replies(r.text) != 1 ||
                    strstr(r.text, "\"code\":\"invalid_argument\"") == NULL) {
                        fail_msg("case %zu: expected one 400 and a close, got %s", i, r.text);
                }
        }
        assert_still_serves();
}

static void test_two_authorization_headers(void **state)
{
        (void)state;
        char req[1400];
        int n = snprintf(req, sizeof(req),
                         "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Authorization: Bearer %s\r\nAuthorization: Bearer other\r\n"
                         "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
                         g_token);
        assert_true(n > 0 && (size_t)n < sizeof(req));
        raw_reply r;
        raw_exchange(g_port, req, 1, &r);
        assert_int_equal(raw_status(&r), 400);
        assert_non_null(strstr(r.text, "more than one Authorization header"));
        assert_still_serves();
}

/* Clients that send a header line every 100 ms are cut off at the deadline. */
static void test_trickled_requests_are_cut_off(void **state)
{
        (void)state;
        int fds[SLOW_CLIENTS];
        for (int i = 0; i < SLOW_CLIENTS; i++) {
                fds[i] = raw_dial("127.0.0.2", g_port);
                assert_true(fds[i] >= 0);
                static const char start[] = "POST " WHOAMI " HTTP/1.1\r\nHost: x\r\n";
                raw_send(fds[i], start, sizeof(start) - 1);
        }
        /* well past the deadline, and never silent for long */
        for (int round = 0; round < 15; round++) {
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
                for (int i = 0; i < SLOW_CLIENTS; i++) {
                        raw_send(fds[i], "X-Slow: 1\r\n", 11);
                }
        }
        for (int i = 0; i < SLOW_CLIENTS; i++) {
                raw_reply r;
                raw_read(fds[i], 1, &r);
                if (raw_status(&r) != 408 || !r.closed) {
                        fail_msg("slow client %d: expected 408 and a close, got %s", i, r.text);
                }
                close(fds[i]);
        }
        assert_still_serves();
}

/* Over the per-address cap, one address is refused; the others are not. */
static void test_connection_flood_from_one_address(void **state)
{
        (void)state;
        int fds[PER_ADDRESS_MAX];
        for (int i = 0; i < PER_ADDRESS_MAX; i++) {
                fds[i] = raw_dial("127.0.0.3", g_port);
                assert_true(fds[i] >= 0);
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL); /* every one accepted */
        int over = raw_dial("127.0.0.3", g_port);
        assert_true(over >= 0);
        raw_reply r;
        raw_read(over, 1, &r);
        close(over);
        assert_int_equal(raw_status(&r), 503);
        assert_true(r.closed);
        assert_non_null(strstr(r.text, "too many connections"));
        assert_still_serves();
        for (int i = 0; i < PER_ADDRESS_MAX; i++) {
                close(fds[i]);
        }
}

/*
 * 520,000 empty repeated sub-messages in 1,040,000 bytes, without a token:
 * answered 401 (the body is never decoded), and the gateway goes on.
 */
static void test_expensive_body_without_token(void **state)
{
        (void)state;
        size_t n = 520000, len = 2 * n;
        char *body = malloc(len);
        assert_non_null(body);
        for (size_t i = 0; i < n; i++) {
                body[2 * i] = 0x0a; /* field 1, length-delimited: transfers */
                body[2 * i + 1] = 0x00;
        }
        char head[512];
        int h = snprintf(head, sizeof(head),
                         "POST " CREATE_TRANSFERS " HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/proto\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         len);
        int fd = raw_dial("127.0.0.4", g_port);
        assert_true(fd >= 0);
        raw_send(fd, head, (size_t)h);
        raw_send(fd, body, len);
        free(body);
        raw_reply r;
        raw_read(fd, 1, &r);
        close(fd);
        if (raw_status(&r) != 401 || strstr(r.text, "\"code\":\"unauthenticated\"") == NULL) {
                fail_msg("expected 401 unauthenticated, got %s", r.text);
        }
        assert_still_serves();
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_smuggling_is_refused),
            cmocka_unit_test(test_two_authorization_headers),
            cmocka_unit_test(test_trickled_requests_are_cut_off),
            cmocka_unit_test(test_connection_flood_from_one_address),
            cmocka_unit_test(test_expensive_body_without_token),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
