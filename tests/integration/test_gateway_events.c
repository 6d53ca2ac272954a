/*
 * keelson.events.v1.EventService/Subscribe at the frame level, on a gateway
 * of the test's own with heartbeats every 100 ms and a 1 KiB stream buffer
 * (what a gRPC client sees of it, events, tenants and resumes, is
 * tests/interop/grpc.mjs):
 *
 * - a reader that reads gets heartbeats, one about every 100 ms, each a
 *   framed SubscribeResponse;
 * - a reader that does not (its stream window is 0: flow control holds
 *   every DATA frame back) is reset ENHANCE_YOUR_CALM once 1 KiB waits,
 *   counted in keelson_gateway_event_streams_cut_total, and its connection
 *   goes on serving;
 * - SIGTERM ends the open streams with UNAVAILABLE in their trailers;
 *   grpc.health.v1.Health/Watch, the gateway's other stream, first says
 *   NOT_SERVING.
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
#include <unistd.h>

#include <cmocka.h>

#include "h2_raw.h"
#include "it_support.h"

#define SUBSCRIBE "/keelson.events.v1.EventService/Subscribe"
#define TOKEN_MAX 512

static it_stack g_stack;
static it_gateway g_gw;
static int g_port;
static char g_token[TOKEN_MAX];
static char g_auth[TOKEN_MAX + 16];

static int start(it_gateway *gw, int *port)
{
        const char *env[] = {"KEELSON_GATEWAY_EVENTS_HEARTBEAT_MS=100",
                             "KEELSON_GATEWAY_EVENTS_BUFFER_BYTES=1024", NULL};
        if (it_gateway_start(&g_stack, env, 1, gw) != 0) {
                return -1;
        }
        const char *colon = strrchr(gw->url, ':');
        *port = colon != NULL ? atoi(colon + 1) : 0;
        return *port > 0 ? 0 : -1;
}

static int setup(void **state)
{
        (void)state;
        if (it_stack_load(&g_stack) != 0 ||
            it_new_session(g_stack.gateway_url, "events", g_token, NULL, NULL) != 0) {
                return -1;
        }
        snprintf(g_auth, sizeof(g_auth), "Bearer %s", g_token);
        return start(&g_gw, &g_port);
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g_gw);
        return 0;
}

/* A gRPC call on stream id: HEADERS, then the empty request message and END_STREAM. */
static void call_empty(int fd, uint32_t id, const char *path)
{
        const char *names[] = {"content-type", "te"};
        const char *values[] = {"application/grpc", "trailers"};
        uint8_t block[1024];
        size_t n = h2_request_block(block, sizeof(block), path, names, values, 2);
        assert_true(n > 0);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, id, block, n);
        static const uint8_t empty_message[5] = {0, 0, 0, 0, 0};
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, id, empty_message, sizeof(empty_message));
}

/* Subscribe on stream id: HEADERS, then the empty request message and END_STREAM. */
static void subscribe(int fd, uint32_t id)
{
        const char *names[] = {"content-type", "te", "authorization"};
        const char *values[] = {"application/grpc", "trailers", g_auth};
        uint8_t block[1024];
        size_t n = h2_request_block(block, sizeof(block), SUBSCRIBE, names, values, 3);
        assert_true(n > 0);
        h2_frame_send(fd, H2_HEADERS, H2_END_HEADERS, id, block, n);
        static const uint8_t empty_message[5] = {0, 0, 0, 0, 0};
        h2_frame_send(fd, H2_DATA, H2_END_STREAM, id, empty_message, sizeof(empty_message));
}

static void test_heartbeats(void **state)
{
        (void)state;
        static h2_frame f;
        int fd = h2_dial(g_port, NULL, 0);
        assert_true(fd >= 0);
        subscribe(fd, 1);
        int beats = 0;
        while (beats < 5 && h2_frame_wait(fd, H2_DATA, 1, &f, 3000)) {
                /* One framed message a frame: flag 0, the length, a SubscribeResponse. */
                assert_true(f.len >= 5);
                assert_int_equal(f.payload[0], 0);
                assert_int_equal(h2_be32(f.payload + 1), f.len - 5);
                beats++;
        }
        assert_int_equal(beats, 5);
        close(fd);
}

static void test_slow_reader_reset(void **state)
{
        (void)state;
        static h2_frame f;
        double before = it_metric_of(g_gw.admin_url, "keelson_gateway_event_streams_cut_total");
        /* SETTINGS_INITIAL_WINDOW_SIZE 0: no DATA on any stream until a WINDOW_UPDATE. */
        const uint32_t settings[] = {0x4, 0};
        int fd = h2_dial(g_port, settings, 1);
        assert_true(fd >= 0);
        subscribe(fd, 1);
        assert_true(h2_frame_wait(fd, H2_RST_STREAM, 1, &f, 10000));
        assert_int_equal(h2_be32(f.payload), 0xb); /* ENHANCE_YOUR_CALM */
        assert_true(it_metric_of(g_gw.admin_url, "keelson_gateway_event_streams_cut_total") ==
                    before + 1);

        /* The connection serves on: another stream gets its response headers. */
        subscribe(fd, 3);
        assert_true(h2_frame_wait(fd, H2_HEADERS, 3, &f, 3000));
        close(fd);
}

static void test_drain_ends_streams(void **state)
{
        (void)state;
        static h2_frame f;
        it_gateway gw;
        int port = 0;
        assert_int_equal(start(&gw, &port), 0);
        int fd = h2_dial(port, NULL, 0);
        assert_true(fd >= 0);
        subscribe(fd, 1);
        assert_true(h2_frame_wait(fd, H2_DATA, 1, &f, 3000));
        kill(gw.pid, SIGTERM);
        /* The trailers: a HEADERS frame ending the stream, grpc-status 14 (UNAVAILABLE) in it.
         * Every HEADERS frame is decoded, in order (HPACK's table is the connection's). */
        h2_inflater *inf = h2_inflater_new();
        assert_non_null(inf);
        bool ended = false;
        char status[16] = "";
        while (!ended && h2_frame_read(fd, &f, 5000)) {
                if (f.type != H2_HEADERS) {
                        continue;
                }
                snprintf(status, sizeof(status), "%s", h2_field(inf, &f, "grpc-status"));
                ended = f.stream == 1 && (f.flags & H2_END_STREAM) != 0;
        }
        h2_inflater_free(inf);
        assert_true(ended);
        assert_string_equal(status, "14");
        close(fd);
        it_gateway_stop(&gw);
}

static void test_watch_drain(void **state)
{
        (void)state;
        static h2_frame f;
        it_gateway gw;
        int port = 0;
        assert_int_equal(start(&gw, &port), 0);
        int fd = h2_dial(port, NULL, 0);
        assert_true(fd >= 0);
        call_empty(fd, 1, "/grpc.health.v1.Health/Watch"); /* service "": the gateway */
        /* HealthCheckResponse{status: SERVING}: field 1, varint 1. */
        static const uint8_t serving[] = {0, 0, 0, 0, 2, 0x08, 0x01};
        static const uint8_t not_serving[] = {0, 0, 0, 0, 2, 0x08, 0x02};
        assert_true(h2_frame_wait(fd, H2_DATA, 1, &f, 3000));
        assert_int_equal(f.len, sizeof(serving));
        assert_memory_equal(f.payload, serving, sizeof(serving));
        kill(gw.pid, SIGTERM);
        assert_true(h2_frame_wait(fd, H2_DATA, 1, &f, 5000));
        assert_int_equal(f.len, sizeof(not_serving));
        assert_memory_equal(f.payload, not_serving, sizeof(not_serving));
        bool ended = false;
        while (!ended && h2_frame_read(fd, &f, 5000)) {
                ended = f.type == H2_HEADERS && f.stream == 1 && (f.flags & H2_END_STREAM) != 0;
        }
        assert_true(ended);
        close(fd);
        it_gateway_stop(&gw);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_heartbeats),
            cmocka_unit_test(test_slow_reader_reset),
            cmocka_unit_test(test_drain_ends_streams),
            cmocka_unit_test(test_watch_drain),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
