/*
 * Unit tests of gRPC-Web's pieces (grpcweb.c): the trailer frame as a
 * client reads it, and application/grpc-web-text's base64 over a stream cut
 * anywhere, with padding in the middle as the spec allows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc.h"
#include "grpcweb.h"

#define H(n, v)                                                                                    \
        {                                                                                          \
                (n), sizeof(n) - 1, (v), sizeof(v) - 1                                             \
        }

static void test_trailers(void **state)
{
        (void)state;
        const gw_grpcweb_header h[] = {H("Grpc-Status", "3"), H("grpc-message", "bad%20field"),
                                       H("x-request-id", "r-1"), H("x-empty", "")};
        uint8_t *out = NULL;
        size_t len = 0;
        assert_int_equal(gw_grpcweb_trailers(h, 4, &out, &len), 0);
        const char want[] = "grpc-status: 3\r\ngrpc-message: bad%20field\r\nx-request-id: r-1\r\n"
                            "x-empty: \r\n";
        assert_int_equal(len, 5 + sizeof(want) - 1);
        assert_int_equal(out[0], 0x80);
        assert_int_equal(out[1] << 24 | out[2] << 16 | out[3] << 8 | out[4], sizeof(want) - 1);
        assert_memory_equal(out + 5, want, sizeof(want) - 1);

        gw_grpcweb_header back[8];
        int n = gw_grpcweb_trailers_parse(out + 5, len - 5, back, 8);
        assert_int_equal(n, 4);
        assert_int_equal(back[0].name_len, 11);
        assert_memory_equal(back[0].name, "grpc-status", 11);
        assert_int_equal(back[0].value_len, 1);
        assert_memory_equal(back[0].value, "3", 1);
        assert_memory_equal(back[1].value, "bad%20field", 11);
        assert_int_equal(back[3].value_len, 0);
        free(out);

        /* No trailers at all (an empty block) is a frame too. */
        assert_int_equal(gw_grpcweb_trailers(NULL, 0, &out, &len), 0);
        assert_int_equal(len, 5);
        assert_int_equal(out[0], 0x80);
        free(out);
}

static void test_trailers_refused(void **state)
{
        (void)state;
        const gw_grpcweb_header bad[][1] = {
            {H("", "x")},         {H("bad name", "x")},
            {H("bad:name", "x")}, {H("x", "line\r\nInjected: 1")},
            {H("x", "nul\0")},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                uint8_t *out = (uint8_t *)"unchanged";
                size_t len = 7;
                assert_int_equal(gw_grpcweb_trailers(bad[i], 1, &out, &len), -1);
                assert_null(out);
                assert_int_equal(len, 0);
        }
        /* Past the bound. */
        static char big[GW_GRPCWEB_TRAILERS_BYTES_MAX];
        memset(big, 'a', sizeof(big));
        const gw_grpcweb_header h = {"x", 1, big, sizeof(big)};
        uint8_t *out = NULL;
        size_t len = 0;
        assert_int_equal(gw_grpcweb_trailers(&h, 1, &out, &len), -1);
}

static void test_trailers_parse(void **state)
{
        (void)state;
        gw_grpcweb_header h[4];
        const char *ok = "grpc-status:0\r\ngrpc-message:  spaced \t\r\nlast: no crlf";
        assert_int_equal(gw_grpcweb_trailers_parse((const uint8_t *)ok, strlen(ok), h, 4), 3);
        assert_int_equal(h[0].value_len, 1);
        assert_int_equal(h[1].value_len, 6);
        assert_memory_equal(h[1].value, "spaced", 6);
        assert_int_equal(h[2].value_len, 7);
        assert_int_equal(gw_grpcweb_trailers_parse((const uint8_t *)"", 0, h, 4), 0);
        const char *bad[] = {"no colon\r\n",
                             ": no name\r\n",
                             "a: b\rc: d\r\n",
                             "a: b\r",
                             "a: b\r\n\r\n",
                             "a b: c\r\n",
                             "a: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(
                    gw_grpcweb_trailers_parse((const uint8_t *)bad[i], strlen(bad[i]), h, 4), -1);
        }
}

/* Encodes in[0..len) in pieces of `step` bytes, flushing at `flush_at` (0: only at the end). */
static size_t encode_pieces(const uint8_t *in, size_t len, size_t step, size_t flush_at, char *out)
{
        gw_grpcweb_text s = {0};
        size_t o = 0;
        for (size_t i = 0; i < len; i += step) {
                size_t n = len - i < step ? len - i : step;
                bool flush = i + n == len || (flush_at != 0 && i + n == flush_at);
                o += gw_grpcweb_text_encode(&s, in + i, n, flush, out + o,
                                            GW_GRPCWEB_TEXT_ENCODED_MAX(n));
        }
        return o;
}

/* Decodes text[0..len) in pieces of `step` characters. Returns the bytes, or -1. */
static long decode_pieces(const char *text, size_t len, size_t step, uint8_t *out)
{
        gw_grpcweb_text s = {0};
        long o = 0;
        for (size_t i = 0; i < len; i += step) {
                size_t n = len - i < step ? len - i : step;
                long got = gw_grpcweb_text_decode(&s, text + i, n, out + o,
                                                  GW_GRPCWEB_TEXT_DECODED_MAX(n));
                if (got < 0) {
                        return -1;
                }
                o += got;
        }
        return gw_grpcweb_text_complete(&s) ? o : -1;
}

static void test_text_roundtrip(void **state)
{
        (void)state;
        uint8_t in[100];
        char text[400];
        uint8_t back[200];
        for (size_t i = 0; i < sizeof(in); i++) {
                in[i] = (uint8_t)(i * 37 + 11);
        }
        /* Every piece size both ways, with and without padding mid-stream. */
        for (size_t flush_at = 0; flush_at < 12; flush_at += 1) {
                for (size_t step = 1; step <= 20; step++) {
                        size_t t = encode_pieces(in, sizeof(in), step, flush_at, text);
                        assert_int_equal(t % 4, 0);
                        for (size_t dstep = 1; dstep <= 13; dstep++) {
                                long n = decode_pieces(text, t, dstep, back);
                                assert_int_equal(n, sizeof(in));
                                assert_memory_equal(back, in, sizeof(in));
                        }
                }
        }
        /* Without flushes the text is plain base64 of the whole. */
        size_t t = encode_pieces((const uint8_t *)"any carnal pleas", 16, 5, 0, text);
        text[t] = '\0';
        assert_string_equal(text, "YW55IGNhcm5hbCBwbGVhcw==");
}

static void test_text_mid_stream_padding(void **state)
{
        (void)state;
        /* Two messages' text, each padded: "a" then "bc" then "def". */
        const char *text = "YQ==YmM=ZGVm";
        uint8_t out[32];
        for (size_t step = 1; step <= 12; step++) {
                long n = decode_pieces(text, strlen(text), step, out);
                assert_int_equal(n, 6);
                assert_memory_equal(out, "abcdef", 6);
        }
        /* A gRPC frame encoded per message, as the front flushes them. */
        uint8_t frame[5 + 2];
        assert_int_equal(gw_grpc_prefix(frame, false, 2), 0);
        frame[5] = 'h';
        frame[6] = 'i';
        gw_grpcweb_text s = {0};
        char t[GW_GRPCWEB_TEXT_ENCODED_MAX(7)];
        size_t n = gw_grpcweb_text_encode(&s, frame, 7, true, t, sizeof(t));
        assert_string_equal(t, "AAAAAAJoaQ==");
        assert_int_equal(n, 12);
}

static void test_text_refused(void **state)
{
        (void)state;
        const char *bad[] = {
            "=AAA",  "A=AA",    "AA=A",  "A===",    "====", "YQ=a",     "YQ==\n",
            " YQ==", "YQ== ",   "YW Jj", "YW-j",    "YW_j", "YWJj    ", "    YWJj",
            "YW\tJ", "YWJ\x80", "YWJjZ", "YWJjZGU", "YQ",   "YWI",
        };
        uint8_t out[64];
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                for (size_t step = 1; step <= 8; step++) {
                        assert_int_equal(decode_pieces(bad[i], strlen(bad[i]), step, out), -1);
                }
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_trailers),
            cmocka_unit_test(test_trailers_refused),
            cmocka_unit_test(test_trailers_parse),
            cmocka_unit_test(test_text_roundtrip),
            cmocka_unit_test(test_text_mid_stream_padding),
            cmocka_unit_test(test_text_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
