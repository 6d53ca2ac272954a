/*
 * Unit tests of the gateway's HTTP/1.1 front (front.c over http1.c), over
 * real loopback sockets: a front on a free port runs its loop on a thread
 * of its own, and the tests talk to it as clients do, with raw bytes.
 *
 * What a client observes is asserted: the status line, the body, whether the
 * connection was closed, whether a request hidden after a body was served
 * (request smuggling), and the front's counters.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "front.h"
#include "http1.h"
#include "ks_metrics.h"

#define HEAD_MAX     4096
#define BODY_MAX     65536
#define REQUEST_MS   400
#define IDLE_MS      5000
#define CONNS_MAX    12
#define PER_IP_MAX   4
#define READ_WAIT_MS 3000
#define REPLY_MAX    16384

typedef struct fixture {
        struct event_base *base;
        gw_front *front;
        pthread_t thread;
        int port;
        gw_req *waiting; /* a /wait request, held on the loop thread */
        atomic_int canceled;
} fixture;

static fixture fx;

static void on_cancel(void *arg)
{
        (void)arg;
        fx.waiting = NULL;
        atomic_fetch_add(&fx.canceled, 1);
}

/* Replies 200 "METHOD PATH body=N auth=N" at once; holds /wait requests. */
static void on_request(gw_req *r, void *arg)
{
        (void)arg;
        if (strcmp(gw_req_path(r), "/wait") == 0) {
                fx.waiting = r;
                gw_req_on_cancel(r, on_cancel, NULL);
                return;
        }
        size_t len = 0;
        gw_req_body(r, &len);
        char body[256];
        int n = snprintf(body, sizeof(body), "%s %s body=%zu auth=%zu", gw_req_method(r),
                         gw_req_path(r), len, gw_req_header_count(r, "authorization"));
        gw_req_add_header(r, "X-Test", "1");
        gw_req_reply(r, 200, "text/plain", body, (size_t)n);
}

static void *loop_main(void *arg)
{
        (void)arg;
        event_base_loop(fx.base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

static int start_front(const gw_front_limits *lim)
{
        memset(&fx, 0, sizeof(fx));
        if (evthread_use_pthreads() != 0 || (fx.base = event_base_new()) == NULL ||
            gw_front_new(&fx.front, fx.base, "127.0.0.1", 0, lim, on_request, NULL) != 0) {
                return -1;
        }
        fx.port = gw_front_port(fx.front);
        return pthread_create(&fx.thread, NULL, loop_main, NULL);
}

static const gw_front_limits default_limits = {
    .head_max = HEAD_MAX,
    .body_max = BODY_MAX,
    .request_ms = REQUEST_MS,
    .idle_ms = IDLE_MS,
    .conns_max = CONNS_MAX,
    .conns_per_ip_max = PER_IP_MAX,
    .proxies = NULL,
};

static int setup(void **state)
{
        (void)state;
        return start_front(&default_limits);
}

static void stop_front_cb(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        gw_front_free(fx.front); /* on the loop thread, as the gateway does */
        fx.front = NULL;
        event_base_loopbreak(fx.base);
}

static int teardown(void **state)
{
        (void)state;
        event_base_once(fx.base, -1, EV_TIMEOUT, stop_front_cb, NULL, NULL);
        pthread_join(fx.thread, NULL);
        event_base_free(fx.base);
        return 0;
}

/* ---- a client ----------------------------------------------------------------------- */

/* A connection to the front from source address src ("127.0.0.x"). */
static int dial_from(const char *src)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
                return -1;
        }
        struct sockaddr_in a = {.sin_family = AF_INET};
        if (src != NULL) {
                inet_pton(AF_INET, src, &a.sin_addr);
                if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                        close(fd);
                        return -1;
                }
        }
        a.sin_port = htons((uint16_t)fx.port);
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static int dial(void)
{
        return dial_from(NULL);
}

static void send_all(int fd, const char *data, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
                if (n <= 0) {
                        return; /* the front closed: what it answered is still readable */
                }
                data += n;
                len -= (size_t)n;
        }
}

typedef struct reply {
        char text[REPLY_MAX];
        size_t len;
        bool closed; /* the front closed the connection */
} reply;

/* Final replies in text, walked by their Content-Length (100 Continue skipped). */
static int status_lines(const char *text)
{
        int n = 0;
        const char *p = text;
        while (strncmp(p, "HTTP/1.1 ", 9) == 0) {
                const char *end = strstr(p, "\r\n\r\n");
                if (end == NULL) {
                        break;
                }
                const char *cl = strstr(p, "Content-Length: ");
                size_t body = cl != NULL && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
                n += strncmp(p + 9, "100 ", 4) != 0;
                p = end + 4 + body;
                if (p > text + strlen(text)) {
                        break;
                }
        }
        return n;
}

/*
 * Reads until the connection closes, or until want status lines have come
 * and nothing more follows for a moment; want 0: what comes within 200 ms.
 */
static void read_reply(int fd, int want, reply *r)
{
        memset(r, 0, sizeof(*r));
        for (;;) {
                int wait_ms = want == 0 || status_lines(r->text) >= want ? 200 : READ_WAIT_MS;
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, wait_ms) <= 0) {
                        return;
                }
                ssize_t n = recv(fd, r->text + r->len, sizeof(r->text) - 1 - r->len, 0);
                if (n <= 0) {
                        r->closed = true;
                        return;
                }
                r->len += (size_t)n;
        }
}

/* Sends raw bytes on a new connection and reads what comes back. */
static void exchange(const char *raw, int want, reply *r)
{
        int fd = dial();
        assert_true(fd >= 0);
        send_all(fd, raw, strlen(raw));
        read_reply(fd, want, r);
        close(fd);
}

static int status_of(const reply *r)
{
        int status = 0;
        return sscanf(r->text, "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

static int count_of(const char *haystack, const char *needle)
{
        int n = 0;
        for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
                n++;
        }
        return n;
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_valid_requests_keep_the_connection(void **state)
{
        (void)state;
        int fd = dial();
        assert_true(fd >= 0);
        const char *get = "GET /a?q=1 HTTP/1.1\r\nHost: x\r\n\r\n";
        reply r;
        send_all(fd, get, strlen(get));
        read_reply(fd, 1, &r);
        assert_int_equal(status_of(&r), 200);
        assert_non_null(strstr(r.text, "GET /a body=0 auth=0"));
        assert_non_null(strstr(r.text, "X-Test: 1\r\n"));
        assert_non_null(strstr(r.text, "Date: "));
        assert_false(r.closed);
        const char *post = "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        send_all(fd, post, strlen(post));
        read_reply(fd, 1, &r);
        assert_int_equal(status_of(&r), 200);
        assert_non_null(strstr(r.text, "POST /b body=5"));
        assert_false(r.closed);
        close(fd);
}

static void test_chunked_body_and_pipelining(void **state)
{
        (void)state;
        reply r;
        exchange("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nTrailer-A: 1\r\n\r\n"
                 "GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 2, &r);
        if (status_lines(r.text) != 2) {
                fail_msg("pipelined: %s", r.text);
        }
        assert_int_equal(count_of(r.text, "HTTP/1.1 200"), 2);
        assert_non_null(strstr(r.text, "POST /c body=7"));
        assert_non_null(strstr(r.text, "GET /second body=0"));
        assert_true(strstr(r.text, "POST /c") < strstr(r.text, "GET /second"));
        assert_true(r.closed); /* the second asked to close */
}

/* Each hides "GET /smuggled" where a lax parser would see a second request. */
static const struct {
        const char *name;
        const char *raw;
        int status;
} framing_cases[] = {
    {"two different Content-Length",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 32\r\n\r\n"
     "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
     400},
    {"space before the colon",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length : 32\r\n\r\n"
     "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
     400},
    {"Content-Length: +N", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\nxx", 400},
    {"Transfer-Encoding: xchunked",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n"
     "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
     400},
    {"chunk size 0x2",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nxx\r\n0\r\n\r\n"
     "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
     400},
    {"chunk size 2zz",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2zz\r\nxx\r\n0\r\n\r\n", 400},
    {"Transfer-Encoding with Content-Length",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
     400},
    {"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400},
    {"obs-fold on Transfer-Encoding",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400},
    {"bare LF", "GET / HTTP/1.1\nHost: x\n\n", 400},
    {"bare CR in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
    {"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
    {"two Host", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
    {"gzip then chunked",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
    {"Transfer-Encoding on HTTP/1.0",
     "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    {"bad version", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 400},
    {"target without a path", "GET example.com HTTP/1.1\r\nHost: x\r\n\r\n", 400},
    {"Expect other than 100-continue",
     "POST / HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 1\r\n\r\nx", 417},
    {"Content-Length over the limit", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n",
     413},
    {"chunk over the limit",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n", 413},
};

static void test_framing_errors_answer_and_close(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(framing_cases) / sizeof(framing_cases[0]); i++) {
                reply r;
                exchange(framing_cases[i].raw, 1, &r);
                int bad = (status_of(&r) != framing_cases[i].status) | (!r.closed) << 1 |
                          (strstr(r.text, "/smuggled") != NULL) << 2 |
                          (status_lines(r.text) != 1) << 3 |
                          (strstr(r.text, "Connection: close\r\n") == NULL) << 4 |
                          (strstr(r.text, "{\"code\":\"") == NULL) << 5;
                if (bad != 0) {
                        fail_msg("%s (%#x): expected %d and a close, got (%s, %d lines) %s",
                                 framing_cases[i].name, bad, framing_cases[i].status,
                                 r.closed ? "closed" : "open", status_lines(r.text), r.text);
                }
        }
}

static void test_head_limit(void **state)
{
        (void)state;
        char *raw = malloc(HEAD_MAX + 256);
        assert_non_null(raw);
        int n = snprintf(raw, 64, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
        memset(raw + n, 'a', HEAD_MAX);
        strcpy(raw + n + HEAD_MAX, "\r\n\r\n");
        reply r;
        exchange(raw, 1, &r);
        free(raw);
        assert_int_equal(status_of(&r), 431);
        assert_true(r.closed);
}

static void test_expect_continue_and_head(void **state)
{
        (void)state;
        int fd = dial();
        assert_true(fd >= 0);
        const char *head = "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                           "Content-Length: 3\r\n\r\n";
        send_all(fd, head, strlen(head));
        reply r;
        read_reply(fd, 0, &r); /* only the interim reply can come before the body */
        assert_non_null(strstr(r.text, "HTTP/1.1 100 Continue\r\n\r\n"));
        send_all(fd, "abc", 3);
        read_reply(fd, 1, &r);
        assert_non_null(strstr(r.text, "POST /e body=3"));
        const char *h = "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n";
        send_all(fd, h, strlen(h));
        read_reply(fd, 1, &r);
        assert_int_equal(status_of(&r), 200);
        assert_non_null(strstr(r.text, "Content-Length: 21\r\n")); /* "HEAD /h body=0 auth=0" */
        assert_null(strstr(r.text, "HEAD /h body"));               /* but no body */
        close(fd);
}

static void test_duplicate_authorization_counted(void **state)
{
        (void)state;
        reply r;
        exchange("GET /x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
                 "authorization: Bearer b\r\nConnection: close\r\n\r\n",
                 1, &r);
        assert_non_null(strstr(r.text, "auth=2"));
}

/* A request trickled a line at a time never outlives the whole-request deadline. */
static void test_slow_request_gets_408(void **state)
{
        (void)state;
        int fd = dial();
        assert_true(fd >= 0);
        send_all(fd, "GET / HTTP/1.1\r\n", 16);
        reply r = {0};
        for (int i = 0; i < 40 && !r.closed; i++) {
                struct timespec ts = {0, 50 * 1000 * 1000};
                nanosleep(&ts, NULL);
                send_all(fd, "X-Slow: 1\r\n", 11); /* never silent for long */
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, 0) > 0) {
                        read_reply(fd, 1, &r);
                }
        }
        assert_int_equal(status_of(&r), 408);
        assert_true(r.closed);
        close(fd);
}

static double counter(const char *name, const char *labels)
{
        return (double)ks_counter_value(ks_counter_get(ks_metrics_default(), name, "", labels));
}

static void test_connection_caps(void **state)
{
        (void)state;
        double per_address_before =
            counter("keelson_gateway_connections_refused_total", "reason=\"per_address\"");
        double limit_before =
            counter("keelson_gateway_connections_refused_total", "reason=\"limit\"");
        int fds[CONNS_MAX + 2];
        int n = 0;
        /* PER_IP_MAX from each of three addresses: CONNS_MAX in all */
        const char *srcs[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};
        for (int s = 0; s < 3; s++) {
                for (int i = 0; i < PER_IP_MAX; i++) {
                        fds[n] = dial_from(srcs[s]);
                        assert_true(fds[n] >= 0);
                        n++;
                }
        }
        /* each answers: all are open on the server's side */
        for (int i = 0; i < n; i++) {
                const char *get = "GET /open HTTP/1.1\r\nHost: x\r\n\r\n";
                send_all(fds[i], get, strlen(get));
                reply r;
                read_reply(fds[i], 1, &r);
                assert_int_equal(status_of(&r), 200);
        }
        reply r;
        int over = dial_from("127.0.0.5"); /* a new address, but the front is full */
        assert_true(over >= 0);
        read_reply(over, 1, &r);
        assert_int_equal(status_of(&r), 503);
        assert_true(r.closed);
        close(over);
        assert_true(counter("keelson_gateway_connections_refused_total", "reason=\"limit\"") ==
                    limit_before + 1);
        close(fds[--n]); /* room for one: 127.0.0.4 has PER_IP_MAX - 1 now */
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int again = dial_from("127.0.0.2"); /* at its cap already */
        assert_true(again >= 0);
        read_reply(again, 1, &r);
        assert_int_equal(status_of(&r), 503);
        close(again);
        assert_true(counter("keelson_gateway_connections_refused_total",
                            "reason=\"per_address\"") == per_address_before + 1);
        int ok = dial_from("127.0.0.6");
        assert_true(ok >= 0);
        const char *get = "GET /in HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        send_all(ok, get, strlen(get));
        read_reply(ok, 1, &r);
        assert_int_equal(status_of(&r), 200);
        close(ok);
        while (n > 0) {
                close(fds[--n]);
        }
}

/* A client that leaves while its request waits: the request's cancel runs. */
static void test_cancel_when_client_leaves(void **state)
{
        (void)state;
        int fd = dial();
        assert_true(fd >= 0);
        const char *get = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
        send_all(fd, get, strlen(get));
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        close(fd);
        for (int i = 0; i < 50 && atomic_load(&fx.canceled) == 0; i++) {
                nanosleep(&ts, NULL);
        }
        assert_int_equal(atomic_load(&fx.canceled), 1);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_valid_requests_keep_the_connection, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_chunked_body_and_pipelining, setup, teardown),
            cmocka_unit_test_setup_teardown(test_framing_errors_answer_and_close, setup, teardown),
            cmocka_unit_test_setup_teardown(test_head_limit, setup, teardown),
            cmocka_unit_test_setup_teardown(test_expect_continue_and_head, setup, teardown),
            cmocka_unit_test_setup_teardown(test_duplicate_authorization_counted, setup, teardown),
            cmocka_unit_test_setup_teardown(test_slow_request_gets_408, setup, teardown),
            cmocka_unit_test_setup_teardown(test_connection_caps, setup, teardown),
            cmocka_unit_test_setup_teardown(test_cancel_when_client_leaves, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
