/*
 * Unit tests of wire.c: how each protocol of the gRPC family and the
 * Connect protocol's streaming frame a message and end a body, read back
 * as their clients read them.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc.h"
#include "grpcweb.h"
#include "keelson/events/v1/event_service.pb-c.h"
#include "wire.h"

static uint32_t length_of(const uint8_t *p)
{
        return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
}

static void test_parse(void **state)
{
        (void)state;
        static const struct {
                const char *type;
                int rc;
                gw_wire wire;
        } cases[] = {
            {"application/grpc", 0, GW_WIRE_GRPC},
            {"application/grpc+proto", 0, GW_WIRE_GRPC},
            {"application/grpc-web", 0, GW_WIRE_GRPC_WEB},
            {"Application/GRPC-Web+Proto", 0, GW_WIRE_GRPC_WEB},
            {"application/grpc-web-text", 0, GW_WIRE_GRPC_WEB_TEXT},
            {"application/connect+proto", 0, GW_WIRE_CONNECT_PROTO},
            {"application/connect+json; charset=utf-8", 0, GW_WIRE_CONNECT_JSON},
            {"application/connect+json ;x=y", 0, GW_WIRE_CONNECT_JSON},
            {"application/proto", -1, GW_WIRE_GRPC},
            {"application/json", -1, GW_WIRE_GRPC},
            {"application/connect+xml", -1, GW_WIRE_GRPC},
            {"application/connect+protox", -1, GW_WIRE_GRPC},
            {"application/grpc+json", -1, GW_WIRE_GRPC},
            {"", -1, GW_WIRE_GRPC},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                gw_wire w = GW_WIRE_GRPC;
                assert_int_equal(gw_wire_parse(cases[i].type, &w), cases[i].rc);
                if (cases[i].rc == 0) {
                        assert_int_equal(w, cases[i].wire);
                }
        }
        gw_wire w;
        assert_int_equal(gw_wire_parse(NULL, &w), -1);
        assert_string_equal(gw_wire_content_type(GW_WIRE_CONNECT_PROTO),
                            "application/connect+proto");
        assert_string_equal(gw_wire_content_type(GW_WIRE_GRPC_WEB_TEXT),
                            "application/grpc-web-text+proto");
        assert_true(gw_wire_trailers(GW_WIRE_GRPC));
        assert_false(gw_wire_trailers(GW_WIRE_GRPC_WEB));
        assert_true(gw_wire_connect(GW_WIRE_CONNECT_JSON));
        assert_false(gw_wire_connect(GW_WIRE_GRPC_WEB));
}

static void test_frame(void **state)
{
        (void)state;
        uint8_t *out = NULL;
        size_t len = 0;
        assert_int_equal(
            gw_wire_frame(GW_WIRE_CONNECT_PROTO, (const uint8_t *)"abc", 3, &out, &len), 0);
        assert_int_equal(len, 8);
        assert_int_equal(out[0], 0);
        assert_int_equal(length_of(out), 3);
        assert_memory_equal(out + 5, "abc", 3);
        free(out);

        /* An empty message is a frame of its own. */
        assert_int_equal(gw_wire_frame(GW_WIRE_GRPC, NULL, 0, &out, &len), 0);
        assert_int_equal(len, 5);
        assert_int_equal(length_of(out), 0);
        free(out);

        /* grpc-web-text: the frame in padded base64 (8 bytes: "AAAAAANhYmM=" ). */
        assert_int_equal(
            gw_wire_frame(GW_WIRE_GRPC_WEB_TEXT, (const uint8_t *)"abc", 3, &out, &len), 0);
        assert_int_equal(len, 12);
        assert_memory_equal(out, "AAAAAANhYmM=", 12);
        free(out);
}

/* A SubscribeResponse as each wire writes it: packed, or JSON for connect+json. */
static void test_message(void **state)
{
        (void)state;
        Keelson__Events__V1__SubscribeResponse r = KEELSON__EVENTS__V1__SUBSCRIBE_RESPONSE__INIT;
        r.cursor = "v1.c";
        r.heartbeat = true;
        uint8_t *out = NULL;
        size_t len = 0;
        assert_int_equal(gw_wire_message(GW_WIRE_GRPC_WEB, &r.base, &out, &len), 0);
        Keelson__Events__V1__SubscribeResponse *back =
            keelson__events__v1__subscribe_response__unpack(NULL, len - 5, out + 5);
        assert_non_null(back);
        assert_string_equal(back->cursor, "v1.c");
        assert_true(back->heartbeat);
        keelson__events__v1__subscribe_response__free_unpacked(back, NULL);
        free(out);

        assert_int_equal(gw_wire_message(GW_WIRE_CONNECT_JSON, &r.base, &out, &len), 0);
        assert_int_equal(out[0], 0);
        assert_int_equal(length_of(out), len - 5);
        json_error_t e;
        json_t *j = json_loadb((const char *)out + 5, len - 5, 0, &e);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "cursor")), "v1.c");
        assert_true(json_is_true(json_object_get(j, "heartbeat")));
        json_decref(j);
        free(out);
}

static void test_end_grpc_and_web(void **state)
{
        (void)state;
        uint8_t *out = (uint8_t *)"x";
        size_t len = 1;
        /* gRPC: the status is in trailers, the body has nothing more. */
        assert_int_equal(gw_wire_end(GW_WIRE_GRPC, KS_NOT_FOUND, "no such thing", &out, &len), 0);
        assert_null(out);
        assert_int_equal(len, 0);

        assert_int_equal(
            gw_wire_end(GW_WIRE_GRPC_WEB, KS_NOT_FOUND, "no such thing: \xc3\xbc", &out, &len), 0);
        assert_int_equal(out[0], GW_GRPCWEB_FLAG_TRAILERS);
        const char want[] = "grpc-status: 5\r\ngrpc-message: no such thing: %C3%BC\r\n";
        assert_int_equal(length_of(out), sizeof(want) - 1);
        assert_memory_equal(out + 5, want, sizeof(want) - 1);
        free(out);

        /* Success: grpc-status 0 alone. */
        assert_int_equal(gw_wire_end(GW_WIRE_GRPC_WEB, KS_OK, NULL, &out, &len), 0);
        assert_int_equal(len, 5 + strlen("grpc-status: 0\r\n"));
        assert_memory_equal(out + 5, "grpc-status: 0\r\n", len - 5);
        free(out);

        /* grpc-web-text: the same frame, in base64 that decodes back to it. */
        assert_int_equal(gw_wire_end(GW_WIRE_GRPC_WEB_TEXT, KS_OK, NULL, &out, &len), 0);
        gw_grpcweb_text st = {0};
        uint8_t dec[64];
        long n = gw_grpcweb_text_decode(&st, (const char *)out, len, dec, sizeof(dec));
        assert_int_equal(n, 5 + (long)strlen("grpc-status: 0\r\n"));
        assert_true(gw_grpcweb_text_complete(&st));
        assert_int_equal(dec[0], GW_GRPCWEB_FLAG_TRAILERS);
        free(out);
}

/* Connect: the end-of-stream message, {} or the error as Connect's JSON. */
static void test_end_connect(void **state)
{
        (void)state;
        uint8_t *out = NULL;
        size_t len = 0;
        assert_int_equal(gw_wire_end(GW_WIRE_CONNECT_PROTO, KS_OK, NULL, &out, &len), 0);
        assert_int_equal(len, 7);
        assert_int_equal(out[0], GW_WIRE_FLAG_CONNECT_END);
        assert_memory_equal(out + 5, "{}", 2);
        free(out);

        assert_int_equal(gw_wire_end(GW_WIRE_CONNECT_JSON, KS_PERMISSION_DENIED,
                                     "needs \"billing.read\" – ask an admin", &out, &len),
                         0);
        assert_int_equal(out[0], GW_WIRE_FLAG_CONNECT_END);
        assert_int_equal(length_of(out), len - 5);
        json_error_t e;
        json_t *j = json_loadb((const char *)out + 5, len - 5, 0, &e);
        assert_non_null(j);
        json_t *err = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(err, "code")), "permission_denied");
        /* Plain text in JSON, not percent-encoded as grpc-message is. */
        assert_string_equal(json_string_value(json_object_get(err, "message")),
                            "needs \"billing.read\" – ask an admin");
        json_decref(j);
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_parse),       cmocka_unit_test(test_frame),
            cmocka_unit_test(test_message),     cmocka_unit_test(test_end_grpc_and_web),
            cmocka_unit_test(test_end_connect),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
