/*
 * HTTP/2 in cleartext on the gateway's one port (services/gateway/h2.c),
 * driven by libcurl for single calls, by nghttp2's own client session (the
 * reference implementation) for many calls on one connection (libcurl
 * 7.88.1 fails calls on a reused prior-knowledge connection: curl/curl
 * #10634, fixed in 8.0), and by raw frames where a client must misbehave
 * or a frame must be seen:
 *
 * - prior knowledge: WhoAmI over h2c answers exactly what HTTP/1.1 answers;
 * - `Upgrade: h2c` (curl's --http2 on http://): 101, then the reply on
 *   stream 1; an upgrade with a malformed HTTP2-Settings is served as
 *   HTTP/1.1;
 * - 64 calls multiplexed on one connection all answered, one connection
 *   opened;
 * - limits: a header section over KEELSON_GATEWAY_HEADERS_MAX_BYTES gets
 *   431, a body over KEELSON_GATEWAY_BODY_MAX_BYTES 413, each as Connect
 *   error JSON, and the connection goes on serving;
 * - SETTINGS as configured (KEELSON_GATEWAY_H2_MAX_STREAMS on a gateway of
 *   the test's own), and the stream over the limit refused (RST_STREAM
 *   REFUSED_STREAM);
 * - a stream whose request does not end within the request deadline is
 *   reset (RST_STREAM CANCEL);
 * - the receive windows as configured (KEELSON_GATEWAY_H2_STREAM_WINDOW_BYTES
 *   in SETTINGS_INITIAL_WINDOW_SIZE, ..._CONNECTION_WINDOW_BYTES in a
 *   WINDOW_UPDATE on stream 0) and their defaults on the stack's gateway,
 *   and a 256 KiB message sent at once, trusting them, answered OK;
 * - on SIGTERM the gateway sends GOAWAY (NO_ERROR) on an open connection,
 *   still answers the Login it had taken (200, a session), and closes it;
 * - abuse, each refused and the gateway serving on: a malformed frame
 *   (GOAWAY FRAME_SIZE_ERROR), rapid reset (CVE-2023-44487's pattern), a
 *   CONTINUATION flood, a HEADERS flood of HPACK bombs (each stream 431,
 *   the connection and a client beside it served), and gRPC framing errors
 *   (a prefix over the limit, a message longer than its prefix, two
 *   messages, the compressed flag on identity, an unknown grpc-encoding, a
 *   deadline already past, a malformed grpc-timeout) with their statuses;
 * - clients that give no window or do not read, on a gateway with
 *   KEELSON_GATEWAY_IO_TIMEOUT_S of 2 s: a reply stalled at a window of 0,
 *   and a reflection stream asked for 100 MiB at a window of 0, each ended
 *   within the write bound without the gateway holding the answers; a
 *   client that opens every window and never reads its socket, closed once
 *   writing has stalled for the bound;
 * - slow clients: the preface a byte at a time (closed at the idle limit),
 *   a HEADERS frame or a gRPC message a byte at a time (reset, CANCEL, at
 *   the request deadline), connections that send nothing (closed; GOAWAY
 *   NO_ERROR after a preface), a frame that opens no stream trickled within
 *   the idle limit (closed all the same).
 * Each misbehaving client is watched while another is served, and the
 * gateway serves a new connection afterwards. Time bounds are documented
 * timeouts plus SLACK_MS, never a measure of speed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <nghttp2/nghttp2.h>

#include "it_support.h"
#include "ks_clock.h"
#include "h2_raw.h"
#include "raw_http.h"

#define WHOAMI            "/keelson.auth.v1.AuthService/WhoAmI"
#define TOKEN_MAX         512
#define MULTIPLEXED       64
#define OWN_STREAMS       4
#define OWN_READ_MS       "1500"
#define OWN_IO_S          "2"
#define SLACK_MS          5000    /* beyond a documented timeout, for a loaded machine */
#define OWN_STREAM_WINDOW 300000  /* KEELSON_GATEWAY_H2_STREAM_WINDOW_BYTES of the own gateway */
#define OWN_CONN_WINDOW   1000000 /* KEELSON_GATEWAY_H2_CONNECTION_WINDOW_BYTES */
#define PASSWORD          "correct horse battery staple"
#define STR(x)            #x
#define XSTR(x)           STR(x)

static it_stack g_stack;
static it_gateway g_own;
static int g_own_port;
static char g_token[TOKEN_MAX];
static char g_user_id[64];

static int setup(void **state)
{
        (void)state;
        char streams[64];
        snprintf(streams, sizeof(streams), "KEELSON_GATEWAY_H2_MAX_STREAMS=%d", OWN_STREAMS);
        const char *env[] = {streams,
                             "KEELSON_GATEWAY_READ_TIMEOUT_MS=" OWN_READ_MS,
                             "KEELSON_GATEWAY_IO_TIMEOUT_S=" OWN_IO_S,
                             "KEELSON_GATEWAY_H2_STREAM_WINDOW_BYTES=" XSTR(OWN_STREAM_WINDOW),
                             "KEELSON_GATEWAY_H2_CONNECTION_WINDOW_BYTES=" XSTR(OWN_CONN_WINDOW),
                             NULL};
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || it_stack_load(&g_stack) != 0 ||
            it_new_session(g_stack.gateway_url, "h2", g_token, NULL, g_user_id) != 0 ||
            it_gateway_start(&g_stack, env, 1, &g_own) != 0) {
                return -1;
        }
        const char *colon = strrchr(g_own.url, ':');
        g_own_port = colon != NULL ? atoi(colon + 1) : 0;
        return g_own_port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g_own);
        curl_global_cleanup();
        return 0;
}

/* ---- libcurl -------------------------------------------------------------------- */

typedef struct reply {
        long status;
        long version; /* CURL_HTTP_VERSION_* */
        long connects;
        char body[4096];
        size_t len;
} reply;

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
        reply *r = arg;
        size_t len = size * n, room = sizeof(r->body) - 1 - r->len;
        memcpy(r->body + r->len, p, len < room ? len : room);
        r->len += len < room ? len : room;
        r->body[r->len] = '\0';
        return len;
}

/* An easy handle POSTing body to url + path as Connect JSON, over the given HTTP version. */
static CURL *easy(const char *url, const char *path, const char *body, size_t len, long version,
                  struct curl_slist **headers, reply *out)
{
        char full[512], auth[TOKEN_MAX + 32];
        CURL *h = curl_easy_init();
        assert_non_null(h);
        snprintf(full, sizeof(full), "%s%s", url, path);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_token);
        *headers = curl_slist_append(*headers, "Content-Type: application/json");
        *headers = curl_slist_append(*headers, auth);
        memset(out, 0, sizeof(*out));
        curl_easy_setopt(h, CURLOPT_URL, full);
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, version);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
        return h;
}

static void finish(CURL *h, reply *out)
{
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
        curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &out->version);
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &out->connects);
}

/* One call on handle h (reused: its connection is kept between calls). */
static void perform(CURL *h, reply *out)
{
        memset(out->body, 0, sizeof(out->body));
        out->len = 0;
        assert_int_equal(curl_easy_perform(h), CURLE_OK);
        finish(h, out);
}

static void whoami(const char *url, long version, reply *out)
{
        struct curl_slist *headers = NULL;
        CURL *h = easy(url, WHOAMI, "{}", 2, version, &headers, out);
        perform(h, out);
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
}

/* ---- raw frames ------------------------------------------------------------------- */

/* ---- tests ------------------------------------------------------------------------ */

static void test_prior_knowledge_answers_as_http1(void **state)
{
        (void)state;
        reply one, two;
        whoami(g_stack.gateway_url, CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE, &two);
        whoami(g_stack.gateway_url, CURL_HTTP_VERSION_1_1, &one);
        assert_int_equal(two.status, 200);
        assert_int_equal(two.version, CURL_HTTP_VERSION_2_0);
        assert_int_equal(one.version, CURL_HTTP_VERSION_1_1);
        assert_non_null(strstr(two.body, g_user_id));
        assert_string_equal(two.body, one.body);
}

static void test_upgrade(void **state)
{
        (void)state;
        double before = it_metric_of(g_stack.gateway_admin_urls[0],
                                     "keelson_gateway_http2_connections_total{how=\"upgrade\"}");
        reply r;
        whoami(g_stack.gateway_url, CURL_HTTP_VERSION_2_0, &r); /* http://: Upgrade: h2c */
        assert_int_equal(r.status, 200);
        assert_int_equal(r.version, CURL_HTTP_VERSION_2_0);
        assert_non_null(strstr(r.body, g_user_id));
        assert_true(it_metric_of(g_stack.gateway_admin_urls[0],
                                 "keelson_gateway_http2_connections_total{how=\"upgrade\"}") ==
                    before + 1);

        /* A malformed HTTP2-Settings: the request is served as HTTP/1.1. */
        const char *colon = strrchr(g_stack.gateway_url, ':');
        char raw[1024];
        snprintf(raw, sizeof(raw),
                 "POST " WHOAMI " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Authorization: Bearer %s\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                 "Upgrade: h2c\r\nHTTP2-Settings: !!!!\r\nContent-Length: 2\r\n\r\n{}",
                 g_token);
        raw_reply rr;
        raw_exchange(atoi(colon + 1), raw, 1, &rr);
        assert_int_equal(raw_status(&rr), 200);
        assert_memory_equal(rr.text, "HTTP/1.1 200", 12);
}

/* ---- an nghttp2 client session ----------------------------------------------- */

typedef struct call {
        int status;
        char grpc_status[8]; /* from the trailers, "" if none */
        char body[4096];
        size_t len;
        bool closed;
        uint32_t error; /* RST_STREAM's code, 0 if none */
        const uint8_t *send;
        size_t send_len, sent;
} call;

typedef struct client {
        int fd;
        nghttp2_session *s;
        int open;
} client;

static ssize_t cl_send(nghttp2_session *s, const uint8_t *p, size_t len, int flags, void *user)
{
        (void)s;
        (void)flags;
        client *c = user;
        raw_send(c->fd, p, len);
        return (ssize_t)len;
}

static int cl_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
        (void)flags;
        (void)user;
        call *k = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        if (k != NULL && nlen == 7 && memcmp(name, ":status", 7) == 0) {
                k->status = atoi((const char *)value);
        }
        if (k != NULL && nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
                snprintf(k->grpc_status, sizeof(k->grpc_status), "%.*s", (int)vlen,
                         (const char *)value);
        }
        return 0;
}

static int cl_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *p, size_t len,
                   void *user)
{
        (void)flags;
        (void)user;
        call *k = nghttp2_session_get_stream_user_data(s, id);
        size_t room = k != NULL ? sizeof(k->body) - 1 - k->len : 0;
        if (k != NULL) {
                memcpy(k->body + k->len, p, len < room ? len : room);
                k->len += len < room ? len : room;
                k->body[k->len] = '\0';
        }
        return 0;
}

static int cl_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
        client *c = user;
        call *k = nghttp2_session_get_stream_user_data(s, id);
        if (k != NULL) {
                k->closed = true;
                k->error = code;
                c->open--;
        }
        return 0;
}

static ssize_t cl_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *user)
{
        (void)s;
        (void)id;
        (void)user;
        call *k = src->ptr;
        size_t n = k->send_len - k->sent < len ? k->send_len - k->sent : len;
        memcpy(buf, k->send + k->sent, n);
        k->sent += n;
        if (k->sent == k->send_len) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        }
        return (ssize_t)n;
}

static void client_open(client *c, const char *base_url)
{
        nghttp2_session_callbacks *cbs;
        const char *colon = strrchr(base_url, ':');
        memset(c, 0, sizeof(*c));
        c->fd = raw_dial(NULL, atoi(colon + 1));
        assert_true(c->fd >= 0);
        assert_int_equal(nghttp2_session_callbacks_new(&cbs), 0);
        nghttp2_session_callbacks_set_send_callback(cbs, cl_send);
        nghttp2_session_callbacks_set_on_header_callback(cbs, cl_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cl_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cl_close);
        assert_int_equal(nghttp2_session_client_new(&c->s, cbs, c), 0);
        nghttp2_session_callbacks_del(cbs);
        assert_int_equal(nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0), 0);
}

static void client_close(client *c)
{
        nghttp2_session_del(c->s);
        close(c->fd);
}

#define NV(n, v)                                                                                   \
        {                                                                                          \
                (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE         \
        }

/* Submits a POST of body to path with the session token (and one more field, if any). */
static void client_post(client *c, call *k, const char *path, const void *body, size_t len,
                        const char *extra_name, const char *extra_value)
{
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        nghttp2_nv nva[] = {
            NV(":method", "POST"),
            NV(":scheme", "http"),
            NV(":authority", "127.0.0.1"),
            NV(":path", path),
            NV("content-type", "application/json"),
            NV("authorization", auth),
            NV(extra_name != NULL ? extra_name : "x-none", extra_value != NULL ? extra_value : "")};
        memset(k, 0, sizeof(*k));
        k->send = body;
        k->send_len = len;
        nghttp2_data_provider dp = {.source.ptr = k, .read_callback = cl_body};
        int32_t id = nghttp2_submit_request(c->s, NULL, nva, sizeof(nva) / sizeof(nva[0]), &dp, k);
        assert_true(id > 0);
        c->open++;
}

/* Runs the session until every submitted call is closed (10 s at most). */
static void client_run(client *c)
{
        uint8_t buf[65536];
        for (int idle = 0; c->open > 0 && idle < 100;) {
                assert_int_equal(nghttp2_session_send(c->s), 0);
                struct pollfd pfd = {c->fd, POLLIN, 0};
                if (poll(&pfd, 1, 100) <= 0) {
                        idle++;
                        continue;
                }
                ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
                assert_true(n > 0);
                assert_int_equal(nghttp2_session_mem_recv(c->s, buf, (size_t)n), n);
        }
        assert_int_equal(c->open, 0);
}

static void test_multiplexed_on_one_connection(void **state)
{
        (void)state;
        const char *series = "keelson_gateway_http2_connections_total{how=\"prior_knowledge\"}";
        double before = it_metric_of(g_stack.gateway_admin_urls[0], series);
        static call calls[MULTIPLEXED];
        client c;
        client_open(&c, g_stack.gateway_url);
        for (int i = 0; i < MULTIPLEXED; i++) {
                client_post(&c, &calls[i], WHOAMI, "{}", 2, NULL, NULL);
        }
        client_run(&c);
        for (int i = 0; i < MULTIPLEXED; i++) {
                assert_int_equal(calls[i].status, 200);
                assert_int_equal(calls[i].error, 0);
                assert_non_null(strstr(calls[i].body, g_user_id));
        }
        client_close(&c);
        assert_true(it_metric_of(g_stack.gateway_admin_urls[0], series) == before + 1);
}

static void test_limits_answered_and_connection_kept(void **state)
{
        (void)state;
        client c;
        call k;
        client_open(&c, g_stack.gateway_url);

        /* A header section over 16 KiB (the stack's KEELSON_GATEWAY_HEADERS_MAX_BYTES). */
        static char pad[20000];
        memset(pad, 'a', sizeof(pad) - 1);
        client_post(&c, &k, WHOAMI, "{}", 2, "x-padding", pad);
        client_run(&c);
        assert_int_equal(k.status, 431);
        assert_non_null(strstr(k.body, "\"code\":\"resource_exhausted\""));

        /* A body over 1 MiB (KEELSON_GATEWAY_BODY_MAX_BYTES), on the same connection. */
        size_t big_len = 1100000;
        char *body = malloc(big_len);
        assert_non_null(body);
        memset(body, ' ', big_len);
        body[0] = '{';
        body[big_len - 1] = '}';
        client_post(&c, &k, WHOAMI, body, big_len, NULL, NULL);
        client_run(&c);
        assert_int_equal(k.status, 413);
        assert_non_null(strstr(k.body, "\"code\":\"resource_exhausted\""));

        /* And the connection still serves. */
        client_post(&c, &k, WHOAMI, "{}", 2, NULL, NULL);
        client_run(&c);
        assert_int_equal(k.status, 200);
        assert_non_null(strstr(k.body, g_user_id));
        free(body);
        client_close(&c);
}

static void test_settings_and_refused_stream(void **state)
{
        (void)state;
        static h2_frame f;
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        assert_true(h2_frame_wait(fd, H2_SETTINGS, 0, &f, 3000));
        assert_int_equal(f.flags & 1, 0); /* the server's own, not an ACK */
        uint32_t streams = 0, list = 0;
        for (size_t at = 0; at + 6 <= f.len; at += 6) {
                unsigned id = (unsigned)f.payload[at] << 8 | f.payload[at + 1];
                uint32_t v = h2_be32(f.payload + at + 2);
                streams = id == 0x3 ? v : streams;
                list = id == 0x6 ? v : list;
        }
        assert_int_equal(streams, OWN_STREAMS);
        assert_int_equal(list, 16384);

        /* OWN_STREAMS requests left open (no END_STREAM), then one more: refused. (Sent
         * before the client acknowledges the limit; after, nghttp2 treats a stream over it
         * as a connection error, which RFC 9113 §5.1.2 also allows.) */
        uint8_t block[128];
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, NULL, NULL, 0);
        for (uint32_t i = 0; i <= OWN_STREAMS; i++) {
                h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1 + 2 * i, block, n);
        }
        uint32_t over = 1 + 2 * OWN_STREAMS;
        assert_true(h2_frame_wait(fd, H2_RST_STREAM, over, &f, 3000));
        assert_int_equal(h2_be32(f.payload), 0x7); /* REFUSED_STREAM */
        close(fd);
}

static void test_unfinished_stream_reset_at_deadline(void **state)
{
        (void)state;
        static h2_frame f;
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        uint8_t block[128];
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, NULL, NULL, 0);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1, block, n);
        h2_frame_send(fd, H2_DATA, 0, 1, "{", 1); /* and the rest never comes */
        /* Reset with CANCEL once the request deadline (1.5 s here) has passed. */
        assert_true(h2_frame_wait(fd, H2_RST_STREAM, 1, &f, 5000));
        assert_int_equal(h2_be32(f.payload), 0x8); /* CANCEL */

        /* The connection serves on: a whole request on stream 3. */
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 3, block, n);
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 3, "{}", 2);
        assert_true(h2_frame_wait(fd, H2_HEADERS, 3, &f, 3000));
        close(fd);
}

/*
 * A Login (its password hash takes tens of ms on auth) on stream 1, taken
 * by the gateway before SIGTERM: the PING's ACK comes after the frames
 * before it were read, and the request went upstream on its END_STREAM.
 */
static void test_goaway_on_drain(void **state)
{
        (void)state;
        static h2_frame f;
        char email[128], body[256];
        it_http_response r;
        it_unique_email("h2-drain", email, sizeof(email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"d\"}", email);
        assert_int_equal(it_auth_call(g_stack.gateway_url, "SignUp", body, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);

        it_gateway gw;
        const char *env[] = {"KEELSON_GATEWAY_RATE_AUTH=off", NULL};
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        const char *colon = strrchr(gw.url, ':');
        int fd = h2_dial(atoi(colon + 1), NULL, 0);
        assert_true(fd >= 0);
        assert_true(h2_frame_wait(fd, H2_SETTINGS, 0, &f, 3000));
        const char *names[] = {"content-type"};
        const char *values[] = {"application/json"};
        uint8_t block[256];
        size_t n = h2_request_block(block, sizeof(block), "/keelson.auth.v1.AuthService/Login",
                                    names, values, 1);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1, block, n);
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 1, body, strlen(body));
        h2_frame_send(fd, 0x6 /* PING */, 0, 0, "inflight", 8);
        assert_true(h2_frame_wait(fd, 0x6, 0, &f, 3000));
        kill(gw.pid, SIGTERM);

        /* GOAWAY NO_ERROR naming stream 1, the Login's 200 on it, then the close. */
        h2_inflater *inf = h2_inflater_new();
        bool goaway = false, answered = false;
        h2_answer a = {.rst = -1};
        while (!answered && h2_frame_read(fd, &f, 5000)) {
                if (f.type == H2_GOAWAY) {
                        assert_true(f.len >= 8);
                        assert_int_equal(h2_be32(f.payload) & 0x7fffffffU, 1); /* last stream */
                        assert_int_equal(h2_be32(f.payload + 4), 0);           /* NO_ERROR */
                        goaway = true;
                } else if (f.type == H2_HEADERS && f.stream == 1) {
                        const char *status = h2_field(inf, &f, ":status");
                        assert_non_null(status);
                        snprintf(a.status, sizeof(a.status), "%s", status);
                } else if (f.type == H2_DATA && f.stream == 1) {
                        a.data_len += f.len;
                        answered = (f.flags & H2_END_STREAM) != 0;
                } else if (f.type == H2_RST_STREAM && f.stream == 1) {
                        fail_msg("the Login in flight was reset (%u)", h2_be32(f.payload));
                }
        }
        assert_true(goaway);
        assert_true(answered);
        assert_string_equal(a.status, "200"); /* its session: the call was carried out */
        assert_true(a.data_len > 20);
        assert_false(h2_frame_read(fd, &f, 5000)); /* then closed */
        h2_inflater_free(inf);
        close(fd);
        it_gateway_stop(&gw);
}

/* ---- abuse: each answered, and the gateway goes on serving ------------------------- */

/* WhoAmI on a fresh HTTP/2 connection to port answers 200: the gateway still serves. */
static void still_serving(int port)
{
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        const char *names[] = {"content-type", "authorization"};
        const char *values[] = {"application/json", auth};
        uint8_t block[1024];
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, names, values, 2);
        int fd = h2_dial(port, NULL, 0);
        assert_true(fd >= 0);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1, block, n);
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 1, "{}", 2);
        h2_inflater *inf = h2_inflater_new();
        h2_answer a;
        assert_true(h2_read_answer(fd, inf, 1, &a, 5000));
        assert_string_equal(a.status, "200");
        h2_inflater_free(inf);
        close(fd);
}

/* Reads frames until a GOAWAY (its error code) or the close (-1). */
static long goaway_or_close(int fd, int timeout_ms)
{
        static h2_frame f;
        while (h2_frame_read(fd, &f, timeout_ms)) {
                if (f.type == H2_GOAWAY && f.len >= 8) {
                        return (long)h2_be32(f.payload + 4);
                }
        }
        return -1;
}

static void test_malformed_frame(void **state)
{
        (void)state;
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        static const uint8_t five[5] = {0, 3, 0, 0, 0};
        h2_frame_send(fd, H2_SETTINGS, 0, 0, five, sizeof(five)); /* not a multiple of 6 */
        assert_int_equal(goaway_or_close(fd, 3000), 0x6);         /* FRAME_SIZE_ERROR */
        close(fd);
        still_serving(g_own_port);
}

/* CVE-2023-44487's pattern: requests opened and reset at once, thousands of them. */
static void test_rapid_reset(void **state)
{
        (void)state;
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        uint8_t block[256];
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, NULL, NULL, 0);
        static const uint8_t cancel[4] = {0, 0, 0, 0x8};
        for (uint32_t i = 0; i < 5000; i++) {
                uint32_t id = 1 + 2 * i;
                h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS | H2_END_STREAM, id, block, n);
                h2_frame_send(fd, H2_RST_STREAM, 0, id, cancel, sizeof(cancel));
        }
        /* nghttp2 (Debian's 1.52 carries the fix) ends such a connection with a GOAWAY past
         * its rate of resets; nothing else waited for it. */
        long code = goaway_or_close(fd, 3000);
        printf("rapid reset: GOAWAY %ld\n", code);
        assert_true(code >= 0);
        close(fd);
        still_serving(g_own_port);
}

/* A header block that never ends: CONTINUATION frames, one after another. */
static void test_continuation_flood(void **state)
{
        (void)state;
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        uint8_t block[256];
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, NULL, NULL, 0);
        h2_frame_send(fd, H2_HEADERS, 0, 1, block, n); /* no END_HEADERS */
        /* Each a whole literal field "x-a: <100 bytes>", 105 bytes of HPACK. */
        uint8_t field[128] = {0x00, 3, 'x', '-', 'a', 100};
        memset(field + 6, 'v', 100);
        for (int i = 0; i < 2000; i++) {
                h2_frame_send(fd, 0x9, 0, 1, field, 106);
        }
        static h2_frame f;
        bool answered = false;
        while (!answered && h2_frame_read(fd, &f, 3000)) {
                answered = f.type == H2_GOAWAY || (f.type == H2_RST_STREAM && f.stream == 1) ||
                           (f.type == H2_HEADERS && f.stream == 1);
        }
        /* Refused one way or another (GOAWAY, a reset, 431), or the connection cut. */
        printf("continuation flood: %s\n", answered ? "answered" : "closed or silent");
        close(fd);
        still_serving(g_own_port);
}

static int dial_acked(int port, const uint32_t *settings, size_t n);
static size_t grpc_headers_frame(uint8_t *out, size_t cap, uint32_t id);

/* The value of setting id in a SETTINGS frame (0 when absent). */
static uint32_t setting_of(const h2_frame *f, unsigned id)
{
        uint32_t v = 0;
        for (size_t at = 0; at + 6 <= f->len; at += 6) {
                if (((unsigned)f->payload[at] << 8 | f->payload[at + 1]) == id) {
                        v = h2_be32(f->payload + at + 2);
                }
        }
        return v;
}

/* The windows a gateway gives: SETTINGS_INITIAL_WINDOW_SIZE, and the connection's increment. */
static void windows_of(int port, uint32_t *stream, uint32_t *conn_increment)
{
        static h2_frame f;
        int fd = h2_dial(port, NULL, 0);
        assert_true(fd >= 0);
        assert_true(h2_frame_wait(fd, H2_SETTINGS, 0, &f, 3000));
        assert_int_equal(f.flags & 1, 0);
        *stream = setting_of(&f, 0x4);
        assert_true(h2_frame_wait(fd, H2_WINDOW_UPDATE, 0, &f, 3000));
        *conn_increment = h2_be32(f.payload) & 0x7fffffffU;
        close(fd);
}

/*
 * The receive windows: as configured on the test's gateway, and the
 * defaults (1 MiB a stream, 4 MiB the connection) on the stack's. Then a
 * client that trusts them: a 256 KiB gRPC message sent at once, with no
 * WINDOW_UPDATE awaited, four times nghttp2's default of 65,535 (which
 * would end the connection FLOW_CONTROL_ERROR), is answered OK.
 */
static void test_flow_control_windows(void **state)
{
        (void)state;
        uint32_t stream = 0, conn = 0;
        windows_of(g_own_port, &stream, &conn);
        assert_int_equal(stream, OWN_STREAM_WINDOW);
        assert_int_equal(conn, OWN_CONN_WINDOW - 65535);
        const char *colon = strrchr(g_stack.gateway_url, ':');
        windows_of(atoi(colon + 1), &stream, &conn);
        assert_int_equal(stream, 1048576);
        assert_int_equal(conn, 4194304 - 65535);

        int fd = dial_acked(g_own_port, NULL, 0); /* the ACK puts our window in force */
        static uint8_t hframe[1024];
        size_t hn = grpc_headers_frame(hframe, sizeof(hframe), 1);
        raw_send(fd, hframe, hn);
        /* WhoAmIRequest with an unknown field 15 of field_len bytes: ignored by auth. */
        size_t field_len = 256u << 10, msg_len = 1 + 3 + field_len, len = 5 + msg_len;
        uint8_t *b = malloc(len);
        assert_non_null(b);
        uint8_t prefix[10] = {0,
                              (uint8_t)(msg_len >> 24),
                              (uint8_t)(msg_len >> 16),
                              (uint8_t)(msg_len >> 8),
                              (uint8_t)msg_len,
                              0x7a,
                              (uint8_t)(0x80 | (field_len & 0x7f)),
                              (uint8_t)(0x80 | ((field_len >> 7) & 0x7f)),
                              (uint8_t)((field_len >> 14) & 0x7f)};
        memcpy(b, prefix, 9);
        memset(b + 9, 'x', len - 9);
        assert_true(len > 4 * 65535 && len < OWN_STREAM_WINDOW);
        for (size_t at = 0; at < len; at += H2_FRAME_MAX) {
                size_t k = len - at < H2_FRAME_MAX ? len - at : H2_FRAME_MAX;
                h2_frame_send(fd, H2_DATA, at + k == len ? H2_END_STREAM : 0, 1, b + at, k);
        }
        free(b);
        h2_inflater *inf = h2_inflater_new();
        h2_answer a;
        assert_true(h2_read_answer(fd, inf, 1, &a, 5000));
        assert_int_equal(a.rst, -1);
        assert_string_equal(a.status, "200");
        assert_string_equal(a.grpc_status, "0");
        assert_true(a.data_len > 5);
        h2_inflater_free(inf);
        close(fd);
}

#define BOMB_VALUE  4000 /* fits HPACK's default dynamic table of 4,096 (with its 32 bytes) */
#define BOMB_REFS   8    /* each 1 byte on the wire, BOMB_VALUE decoded: 32 KB a block */
#define BOMB_ROUNDS 10   /* of OWN_STREAMS streams each */

/*
 * A Connect WhoAmI's header block followed, when insert, by the field
 * "x-bomb: <BOMB_VALUE bytes>" entered in the dynamic table, then by
 * BOMB_REFS references to that entry (index 62, the newest). Its length.
 */
static size_t bomb_block(uint8_t *out, size_t cap, bool insert)
{
        const char *names[] = {"content-type"};
        const char *values[] = {"application/json"};
        size_t n = h2_request_block(out, cap, WHOAMI, names, values, 1);
        assert_true(n > 0 && n + 16 + BOMB_VALUE + BOMB_REFS < cap);
        if (insert) {
                /* literal with incremental indexing, new name; value length 4000 = 127 + 3873 */
                static const uint8_t head[] = {
                    0x40, 6, 'x', '-', 'b', 'o', 'm', 'b', 0x7f, 0x80 | (3873 & 0x7f), 3873 >> 7};
                memcpy(out + n, head, sizeof(head));
                n += sizeof(head);
                memset(out + n, 'b', BOMB_VALUE);
                n += BOMB_VALUE;
        }
        for (int i = 0; i < BOMB_REFS; i++) {
                out[n++] = 0x80 | 62;
        }
        return n;
}

/*
 * A HEADERS flood of HPACK bombs: a few KB on the wire, 32 KB decoded per
 * block, past the 16 KiB header list the gateway advertises. Every stream
 * is answered 431 resource_exhausted (what the gateway does with a header
 * section over its limit: on_header stops copying, the stream is answered
 * at its END_STREAM), the connection carries on, and a client next to it
 * is served while and after.
 */
static void test_hpack_bomb_flood(void **state)
{
        (void)state;
        int fd = dial_acked(g_own_port, NULL, 0);
        h2_inflater *inf = h2_inflater_new();
        static uint8_t block[8192];
        uint32_t id = 1;
        for (int round = 0; round < BOMB_ROUNDS; round++) {
                uint32_t first = id;
                for (int i = 0; i < OWN_STREAMS; i++, id += 2) {
                        size_t n = bomb_block(block, sizeof(block), id == 1);
                        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS | H2_END_STREAM, id, block, n);
                }
                /* The round's answers, interleaved: every HEADERS through the one inflater. */
                static h2_frame f;
                int ended = 0, refused = 0;
                while (ended < OWN_STREAMS && h2_frame_read(fd, &f, 5000)) {
                        if (f.stream < first || f.stream >= id) {
                                continue;
                        }
                        if (f.type == H2_HEADERS) {
                                const char *status = h2_field(inf, &f, ":status");
                                assert_non_null(status);
                                refused += strcmp(status, "431") == 0;
                        }
                        assert_int_not_equal(f.type, H2_RST_STREAM);
                        ended += (f.type == H2_HEADERS || f.type == H2_DATA) &&
                                 (f.flags & H2_END_STREAM) != 0;
                }
                assert_int_equal(ended, OWN_STREAMS);
                assert_int_equal(refused, OWN_STREAMS);
                if (round == BOMB_ROUNDS / 2) {
                        still_serving(g_own_port); /* another client, meanwhile */
                }
        }
        /* The connection serves a request of a sane size, the dynamic table as it was. */
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        const char *names[] = {"content-type", "authorization"};
        const char *values[] = {"application/json", auth};
        size_t n = h2_request_block(block, sizeof(block), WHOAMI, names, values, 2);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, id, block, n);
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, id, "{}", 2);
        h2_answer a;
        assert_true(h2_read_answer(fd, inf, id, &a, 5000));
        assert_string_equal(a.status, "200");
        h2_inflater_free(inf);
        close(fd);
        still_serving(g_own_port);
}

/* A gRPC WhoAmI with a body of its own, and one more header when name is not NULL. */
static void grpc_body(const uint8_t *body, size_t len, const char *name, const char *value,
                      h2_answer *a)
{
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        const char *names[] = {"content-type", "te", "authorization", name};
        const char *values[] = {"application/grpc", "trailers", auth, value};
        uint8_t block[1024];
        size_t n =
            h2_request_block(block, sizeof(block), WHOAMI, names, values, name != NULL ? 4 : 3);
        int fd = h2_dial(g_own_port, NULL, 0);
        assert_true(fd >= 0);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1, block, n);
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 1, body, len);
        h2_inflater *inf = h2_inflater_new();
        assert_true(h2_read_answer(fd, inf, 1, a, 5000));
        h2_inflater_free(inf);
        close(fd);
}

static void test_grpc_framing_refused(void **state)
{
        (void)state;
        h2_answer a;
        /* A prefix over the limit: RESOURCE_EXHAUSTED, before 2 GiB are awaited. */
        static const uint8_t huge[5] = {0, 0x7f, 0xff, 0xff, 0xff};
        grpc_body(huge, sizeof(huge), NULL, NULL, &a);
        assert_string_equal(a.grpc_status, "8");
        /* A message longer than its prefix says: INTERNAL. */
        static const uint8_t longer[8] = {0, 0, 0, 0, 1, 0x0a, 0x01, 'x'};
        grpc_body(longer, sizeof(longer), NULL, NULL, &a);
        assert_string_equal(a.grpc_status, "13");
        /* Two whole messages for a unary method: UNIMPLEMENTED. */
        static const uint8_t two[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        grpc_body(two, sizeof(two), NULL, NULL, &a);
        assert_string_equal(a.grpc_status, "12");
        /* The compressed flag on an identity stream: INTERNAL. */
        static const uint8_t flagged[5] = {1, 0, 0, 0, 0};
        grpc_body(flagged, sizeof(flagged), NULL, NULL, &a);
        assert_string_equal(a.grpc_status, "13");
        /* An encoding no one agreed on: UNIMPLEMENTED. */
        static const uint8_t empty[5] = {0, 0, 0, 0, 0};
        grpc_body(empty, sizeof(empty), "grpc-encoding", "br", &a);
        assert_string_equal(a.grpc_status, "12");
        /* A deadline already past (grpc-timeout 0): DEADLINE_EXCEEDED, nothing called. */
        grpc_body(empty, sizeof(empty), "grpc-timeout", "0m", &a);
        assert_string_equal(a.grpc_status, "4");
        /* A malformed grpc-timeout: INVALID_ARGUMENT. */
        grpc_body(empty, sizeof(empty), "grpc-timeout", "123456789S", &a);
        assert_string_equal(a.grpc_status, "3");
        /* And the well-formed one: OK, the gateway serving on. */
        grpc_body(empty, sizeof(empty), "grpc-timeout", "5S", &a);
        assert_string_equal(a.grpc_status, "0");
        assert_true(a.data_len > 5);
}

/*
 * A gRPC WhoAmI whose one message carries an unknown field of field_len
 * bytes (a service ignores it), through nghttp2's client: its flow control
 * carries the megabytes.
 */
static void grpc_big(client *c, call *k, uint8_t **body, size_t field_len)
{
        size_t msg_len = 1 + 4 + field_len; /* tag of field 15, 4-byte varint length, bytes */
        uint8_t *b = malloc(5 + msg_len);
        assert_non_null(b);
        b[0] = 0;
        b[1] = (uint8_t)(msg_len >> 24);
        b[2] = (uint8_t)(msg_len >> 16);
        b[3] = (uint8_t)(msg_len >> 8);
        b[4] = (uint8_t)msg_len;
        b[5] = 0x7a; /* field 15, length-delimited */
        b[6] = (uint8_t)(0x80 | (field_len & 0x7f));
        b[7] = (uint8_t)(0x80 | ((field_len >> 7) & 0x7f));
        b[8] = (uint8_t)(0x80 | ((field_len >> 14) & 0x7f));
        b[9] = (uint8_t)((field_len >> 21) & 0x7f);
        memset(b + 10, 'x', field_len);
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        nghttp2_nv nva[] = {NV(":method", "POST"),
                            NV(":scheme", "http"),
                            NV(":authority", "127.0.0.1"),
                            NV(":path", WHOAMI),
                            NV("content-type", "application/grpc"),
                            NV("te", "trailers"),
                            NV("authorization", auth)};
        memset(k, 0, sizeof(*k));
        k->send = b;
        k->send_len = 5 + msg_len;
        nghttp2_data_provider dp = {.source.ptr = k, .read_callback = cl_body};
        assert_true(nghttp2_submit_request(c->s, NULL, nva, sizeof(nva) / sizeof(nva[0]), &dp, k) >
                    0);
        c->open++;
        *body = b;
}

/* gRPC's message limit (4 MiB), not the HTTP body limit (1 MiB on the stack's gateway). */
static void test_grpc_message_limit(void **state)
{
        (void)state;
        client c;
        call k;
        uint8_t *body = NULL;
        client_open(&c, g_stack.gateway_url);
        grpc_big(&c, &k, &body, 2u << 20); /* 2 MiB: over the body limit, within gRPC's */
        client_run(&c);
        free(body);
        assert_int_equal(k.status, 200);
        assert_string_equal(k.grpc_status, "0");
        grpc_big(&c, &k, &body, (4u << 20) - 4); /* its message 1 byte over 4 MiB */
        client_run(&c);
        free(body);
        assert_string_equal(k.grpc_status, "8"); /* RESOURCE_EXHAUSTED */
        client_close(&c);
}

/* ---- clients that give no window or do not read ------------------------------------ */

#define REFLECTION   "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
#define BIG_SYMBOL   "keelson.billing.v1.BillingService" /* the largest file there is */
#define IO_MS        (atoi(OWN_IO_S) * 1000)
#define READ_MS      atoi(OWN_READ_MS)
#define SETTING_WIN  0x4 /* SETTINGS_INITIAL_WINDOW_SIZE */
#define WINDOW_MAX   0x7fffffffU
#define HELD_MAX_KIB (16 << 10) /* what the gateway may hold for a client that reads nothing */

/* How a client saw its stream or connection end. */
typedef enum end_kind { END_NONE, END_RESET, END_GOAWAY, END_CLOSED } end_kind;

typedef struct ending {
        end_kind kind;
        uint32_t code; /* RST_STREAM's or GOAWAY's */
        int64_t at_ms; /* ks_mono_ms() when it came */
} ending;

/*
 * Reads fd for up to wait_ms: true, with *e, once stream (when not 0) is
 * reset, a GOAWAY comes or the connection closes. Other frames are dropped.
 */
static bool watch_end(int fd, uint32_t stream, int wait_ms, ending *e)
{
        static h2_frame f;
        int64_t until = ks_mono_ms() + wait_ms;
        memset(e, 0, sizeof(*e));
        for (int64_t left; (left = until - ks_mono_ms()) > 0;) {
                struct pollfd pfd = {fd, POLLIN, 0};
                if (poll(&pfd, 1, (int)left) <= 0) {
                        break;
                }
                uint8_t b;
                bool closed = recv(fd, &b, 1, MSG_PEEK) <= 0 || !h2_frame_read(fd, &f, 2000);
                e->at_ms = ks_mono_ms();
                if (closed) {
                        e->kind = END_CLOSED;
                        return true;
                }
                if ((f.type == H2_RST_STREAM && stream != 0 && f.stream == stream) ||
                    (f.type == H2_GOAWAY && f.len >= 8)) {
                        e->kind = f.type == H2_GOAWAY ? END_GOAWAY : END_RESET;
                        e->code = h2_be32(f.payload + (f.type == H2_GOAWAY ? 4 : 0));
                        return true;
                }
        }
        return false;
}

static const char *end_name(const ending *e)
{
        static const char *const names[] = {"nothing", "RST_STREAM", "GOAWAY", "the close"};
        return names[e->kind];
}

/* Milliseconds from since to the end (to now when nothing ended). */
static long long end_after(const ending *e, int64_t since)
{
        return (long long)((e->kind != END_NONE ? e->at_ms : ks_mono_ms()) - since);
}

/* A connection to port that has sent SETTINGS (n pairs) and acknowledged the gateway's. */
static int dial_acked(int port, const uint32_t *settings, size_t n)
{
        static h2_frame f;
        int fd = h2_dial(port, settings, n);
        assert_true(fd >= 0);
        assert_true(h2_frame_wait(fd, H2_SETTINGS, 0, &f, 3000));
        h2_frame_send(fd, H2_SETTINGS, 0x1, 0, NULL, 0); /* ACK */
        return fd;
}

/* The HEADERS of an authenticated gRPC WhoAmI on stream id, as one frame (header and block). */
static size_t grpc_headers_frame(uint8_t *out, size_t cap, uint32_t id)
{
        char auth[TOKEN_MAX + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", g_token);
        const char *names[] = {"content-type", "te", "authorization"};
        const char *values[] = {"application/grpc", "trailers", auth};
        size_t n = h2_request_block(out + 9, cap - 9, WHOAMI, names, values, 3);
        assert_true(n > 0);
        uint8_t hd[9] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, H2_HEADERS,
                         H2_END_HEADERS};
        uint32_t be = htonl(id);
        memcpy(hd + 5, &be, 4);
        memcpy(out, hd, 9);
        return 9 + n;
}

/*
 * Opens a reflection stream on stream 1 and sends it count requests for
 * the file of BIG_SYMBOL (each answered with the whole file), then its end.
 */
static void reflection_flood(int fd, int count)
{
        const char *names[] = {"content-type", "te"};
        const char *values[] = {"application/grpc", "trailers"};
        uint8_t block[256];
        size_t n = h2_request_block(block, sizeof(block), REFLECTION, names, values, 2);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, 1, block, n);
        /* ServerReflectionRequest{file_containing_symbol (4): BIG_SYMBOL}, gRPC-framed. */
        size_t sl = strlen(BIG_SYMBOL), one = 5 + 2 + sl;
        uint8_t msg[64] = {0, 0, 0, 0, (uint8_t)(2 + sl), 0x22, (uint8_t)sl};
        memcpy(msg + 7, BIG_SYMBOL, sl);
        static uint8_t frame[H2_FRAME_MAX];
        size_t per = sizeof(frame) / one;
        for (int sent = 0; sent < count;) {
                size_t k = 0;
                for (; k < per && sent < count; k++, sent++) {
                        memcpy(frame + k * one, msg, one);
                }
                h2_frame_send(fd, H2_DATA, 0, 1, frame, k * one);
        }
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 1, NULL, 0);
}

/* The resident memory of process pid, in KiB (0 if unknown). */
static long rss_kib(int pid)
{
        char path[64], line[128];
        long kib = 0;
        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
                if (strncmp(line, "VmRSS:", 6) == 0) {
                        kib = strtol(line + 6, NULL, 10);
                }
        }
        if (f != NULL) {
                fclose(f);
        }
        return kib;
}

/*
 * A client that gives no window (SETTINGS_INITIAL_WINDOW_SIZE 0) and never
 * opens one: the reply's HEADERS go out (they take no window), its DATA
 * cannot. Writing a reply is bounded by KEELSON_GATEWAY_IO_TIMEOUT_S: by
 * then the stream is reset or the connection ended; others are served
 * meanwhile.
 */
static void test_zero_window_reply_ended(void **state)
{
        (void)state;
        static const uint32_t no_window[] = {SETTING_WIN, 0};
        static h2_frame f;
        static const uint8_t empty[5] = {0, 0, 0, 0, 0};
        uint8_t frame[1024];
        int fd = dial_acked(g_own_port, no_window, 1);
        raw_send(fd, frame, grpc_headers_frame(frame, sizeof(frame), 1));
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, 1, empty, sizeof(empty));
        assert_true(h2_frame_wait(fd, H2_HEADERS, 1, &f, 5000));
        int64_t stalled = ks_mono_ms();
        still_serving(g_own_port);
        ending e;
        bool ended = watch_end(fd, 1, IO_MS + SLACK_MS, &e);
        printf("zero window: %s (code %u) after %lld ms\n", end_name(&e), e.code,
               end_after(&e, stalled));
        assert_true(ended);
        close(fd);
        still_serving(g_own_port);
}

/*
 * The same on a stream whose every request has an answer: reflection,
 * asked 2,000 times for the largest file (about 50 KiB each: 100 MiB of
 * answers for 80 KiB sent), then ended by the client. The gateway holds
 * less than HELD_MAX_KIB more for it, and ends the stream (or the
 * connection) within the write bound.
 */
static void test_zero_window_stream_bounded(void **state)
{
        (void)state;
        static const uint32_t no_window[] = {SETTING_WIN, 0};
        long before = rss_kib(g_own.pid);
        int fd = dial_acked(g_own_port, no_window, 1);
        int64_t sent = ks_mono_ms();
        reflection_flood(fd, 2000);
        still_serving(g_own_port);
        ending e;
        bool ended = watch_end(fd, 1, 500, &e);
        long grown = rss_kib(g_own.pid) - before;
        if (!ended) {
                ended = watch_end(fd, 1, IO_MS + SLACK_MS, &e);
        }
        printf("zero-window reflection: gateway +%ld KiB; %s (code %u) after %lld ms\n", grown,
               end_name(&e), e.code, end_after(&e, sent));
        assert_true(grown < HELD_MAX_KIB);
        assert_true(ended);
        close(fd);
        still_serving(g_own_port);
}

/*
 * A client that opens every window as wide as it goes, asks for megabytes
 * (reflection, 400 times the largest file) and never reads its socket:
 * once the socket is full, writing stalls, and the connection is closed
 * within KEELSON_GATEWAY_IO_TIMEOUT_S (keelson_gateway_connections falls
 * back); the client then reads what was sent, and the close.
 */
static void test_unread_socket_closed(void **state)
{
        (void)state;
        static const uint32_t wide[] = {SETTING_WIN, WINDOW_MAX};
        static const char *const open_series = "keelson_gateway_connections";
        double open_before = it_metric_of(g_own.admin_url, open_series);
        int fd = dial_acked(g_own_port, wide, 1);
        uint8_t more[4];
        uint32_t inc = htonl(WINDOW_MAX - 65535);
        memcpy(more, &inc, 4);
        h2_frame_send(fd, H2_WINDOW_UPDATE, 0, 0, more, sizeof(more));
        int64_t sent = ks_mono_ms();
        reflection_flood(fd, 400);
        still_serving(g_own_port);
        double open = open_before + 1;
        while (open > open_before && ks_mono_ms() - sent < IO_MS + SLACK_MS) {
                it_sleep_ms(100);
                open = it_metric_of(g_own.admin_url, open_series);
        }
        printf("unread socket: closed after %lld ms\n", (long long)(ks_mono_ms() - sent));
        assert_true(open <= open_before);
        size_t data = 0;
        static h2_frame f;
        while (h2_frame_read(fd, &f, 3000)) {
                data += f.type == H2_DATA ? f.len : 0;
        }
        printf("unread socket: %zu bytes of answers read, then the close\n", data);
        uint8_t b;
        assert_true(recv(fd, &b, 1, MSG_DONTWAIT) <= 0); /* the close, not silence */
        close(fd);
        still_serving(g_own_port);
}

/* ---- slow clients ------------------------------------------------------------------ */

#define TRICKLE_MS 200 /* between two bytes of a trickling client */

/*
 * Sends p[0..len) a byte every gap_ms until stream (or the connection)
 * ends or within_ms have passed; another client is served midway. True
 * with *e when it ended.
 */
static bool trickle(int fd, const uint8_t *p, size_t len, uint32_t stream, int gap_ms,
                    int within_ms, ending *e)
{
        int64_t until = ks_mono_ms() + within_ms;
        for (size_t i = 0; ks_mono_ms() < until; i++) {
                if (i < len) {
                        raw_send(fd, p + i, 1);
                }
                if (watch_end(fd, stream, gap_ms, e)) {
                        return true;
                }
                if (i == 4) {
                        still_serving(g_own_port);
                }
        }
        return false;
}

/* The preface a byte at a time: closed at the idle limit, before the preface is whole. */
static void test_trickled_preface_closed(void **state)
{
        (void)state;
        int fd = raw_dial(NULL, g_own_port);
        assert_true(fd >= 0);
        int64_t begun = ks_mono_ms();
        ending e;
        int bound = (IO_MS > READ_MS ? IO_MS : READ_MS) + SLACK_MS;
        /* 400 ms a byte: the bound passes long before the preface is whole. */
        bool ended =
            trickle(fd, (const uint8_t *)H2_PREFACE, strlen(H2_PREFACE), 0, 400, bound, &e);
        printf("trickled preface: %s after %lld ms\n", end_name(&e), end_after(&e, begun));
        assert_true(ended);
        assert_int_equal(e.kind, END_CLOSED);
        close(fd);
        still_serving(g_own_port);
}

/*
 * A HEADERS frame a byte at a time: its stream begins with the frame's
 * 9-byte header and is reset (CANCEL) at the request deadline.
 */
static void test_trickled_headers_reset(void **state)
{
        (void)state;
        uint8_t frame[1024];
        size_t n = grpc_headers_frame(frame, sizeof(frame), 1);
        int fd = dial_acked(g_own_port, NULL, 0);
        int64_t begun = ks_mono_ms();
        ending e;
        bool ended = trickle(fd, frame, n, 1, TRICKLE_MS, 9 * TRICKLE_MS + READ_MS + SLACK_MS, &e);
        printf("trickled HEADERS (%zu bytes): %s (code %u) after %lld ms\n", n, end_name(&e),
               e.code, end_after(&e, begun));
        assert_true(ended);
        assert_int_equal(e.kind, END_RESET);
        assert_int_equal(e.code, 0x8); /* CANCEL */
        close(fd);
        still_serving(g_own_port);
}

/* A gRPC message a byte at a time after whole HEADERS: reset (CANCEL) at the deadline. */
static void test_trickled_body_reset(void **state)
{
        (void)state;
        uint8_t frame[1024];
        int fd = dial_acked(g_own_port, NULL, 0);
        raw_send(fd, frame, grpc_headers_frame(frame, sizeof(frame), 1));
        int64_t begun = ks_mono_ms();
        /* One DATA frame: a WhoAmIRequest with an unknown 64-byte field 15, then END_STREAM. */
        uint8_t data[9 + 5 + 66] = {0, 0, 5 + 66, H2_DATA, H2_END_STREAM, 0, 0, 0, 1, 0,
                                    0, 0, 0,      66,      0x7a,          64};
        memset(data + 16, 'x', 64);
        ending e;
        bool ended = trickle(fd, data, sizeof(data), 1, TRICKLE_MS, READ_MS + SLACK_MS, &e);
        printf("trickled body: %s (code %u) after %lld ms\n", end_name(&e), e.code,
               end_after(&e, begun));
        assert_true(ended);
        assert_int_equal(e.kind, END_RESET);
        assert_int_equal(e.code, 0x8); /* CANCEL */
        close(fd);
        still_serving(g_own_port);
}

/*
 * Connections that send nothing: one not a byte (closed), one nothing after
 * its preface and SETTINGS (GOAWAY NO_ERROR, then closed), each at the idle
 * limit.
 */
static void test_idle_connections_closed(void **state)
{
        (void)state;
        int mute = raw_dial(NULL, g_own_port);
        assert_true(mute >= 0);
        int64_t begun = ks_mono_ms();
        int quiet = dial_acked(g_own_port, NULL, 0);
        still_serving(g_own_port);
        ending e;
        assert_true(watch_end(mute, 0, IO_MS + SLACK_MS, &e));
        printf("silent connection: %s after %lld ms\n", end_name(&e), end_after(&e, begun));
        assert_int_equal(e.kind, END_CLOSED);
        assert_true(watch_end(quiet, 0, IO_MS + SLACK_MS, &e));
        printf("idle HTTP/2 connection: %s (code %u) after %lld ms\n", end_name(&e), e.code,
               end_after(&e, begun));
        assert_int_equal(e.kind, END_GOAWAY);
        assert_int_equal(e.code, 0); /* NO_ERROR */
        assert_true(watch_end(quiet, 0, 3000, &e));
        assert_int_equal(e.kind, END_CLOSED);
        close(mute);
        close(quiet);
        still_serving(g_own_port);
}

/*
 * A frame that opens no stream and never ends (an extension frame, which
 * a server must ignore, of 16,000 bytes) a byte every 400 ms, each within
 * the idle limit of the last: the connection has no request in progress,
 * and is closed once the idle limit (or at most the request deadline
 * after it) has passed.
 */
static void test_trickled_frame_without_stream_closed(void **state)
{
        (void)state;
        static uint8_t frame[9 + 16000] = {0, 16000 >> 8, 16000 & 0xff, 0xfa};
        int fd = dial_acked(g_own_port, NULL, 0);
        int64_t begun = ks_mono_ms();
        ending e;
        bool ended = trickle(fd, frame, sizeof(frame), 0, 400, IO_MS + READ_MS + SLACK_MS, &e);
        printf("trickled frame, no stream: %s (code %u) after %lld ms\n", end_name(&e), e.code,
               end_after(&e, begun));
        assert_true(ended);
        close(fd);
        still_serving(g_own_port);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_prior_knowledge_answers_as_http1),
            cmocka_unit_test(test_upgrade),
            cmocka_unit_test(test_multiplexed_on_one_connection),
            cmocka_unit_test(test_limits_answered_and_connection_kept),
            cmocka_unit_test(test_settings_and_refused_stream),
            cmocka_unit_test(test_unfinished_stream_reset_at_deadline),
            cmocka_unit_test(test_goaway_on_drain),
            cmocka_unit_test(test_malformed_frame),
            cmocka_unit_test(test_rapid_reset),
            cmocka_unit_test(test_continuation_flood),
            cmocka_unit_test(test_hpack_bomb_flood),
            cmocka_unit_test(test_flow_control_windows),
            cmocka_unit_test(test_grpc_framing_refused),
            cmocka_unit_test(test_grpc_message_limit),
            cmocka_unit_test(test_zero_window_reply_ended),
            cmocka_unit_test(test_zero_window_stream_bounded),
            cmocka_unit_test(test_unread_socket_closed),
            cmocka_unit_test(test_trickled_preface_closed),
            cmocka_unit_test(test_trickled_headers_reset),
            cmocka_unit_test(test_trickled_body_reset),
            cmocka_unit_test(test_idle_connections_closed),
            cmocka_unit_test(test_trickled_frame_without_stream_closed),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
