/*
 * Unit tests of the gateway's gRPC rules (grpc.c): the message framing as
 * a stream of DATA frames cut anywhere delivers it, its bounds, gzip and a
 * decompression bomb, grpc-timeout, grpc-message's percent-encoding, the
 * status mappings and the content types.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "compress.h"
#include "grpc.h"

#define MAX_MSGS 8

/* What a stream of frames decoded to. */
typedef struct got {
        uint8_t *msg[MAX_MSGS];
        size_t len[MAX_MSGS];
        bool compressed[MAX_MSGS];
        size_t n;
        int code;
        const char *err;
} got;

static void got_free(got *g)
{
        for (size_t i = 0; i < g->n; i++) {
                free(g->msg[i]);
        }
}

/* Feeds in[0..len) to r in one call, taking every message out. */
static int feed_all(gw_grpc_reader *r, const uint8_t *in, size_t len, got *g)
{
        while (len > 0) {
                size_t used = 0;
                bool have = false;
                gw_grpc_msg m;
                g->code = gw_grpc_reader_feed(r, in, len, &used, &have, &m, &g->err);
                if (g->code != KS_OK) {
                        return -1;
                }
                assert_true(used <= len);
                if (have) {
                        assert_true(g->n < MAX_MSGS);
                        g->msg[g->n] = malloc(m.len + 1);
                        memcpy(g->msg[g->n], m.data, m.len);
                        g->len[g->n] = m.len;
                        g->compressed[g->n] = m.compressed;
                        g->n++;
                } else {
                        assert_int_equal(used, len);
                }
                in += used;
                len -= used;
        }
        return 0;
}

/* A stream of two messages: "hello" and 300 bytes, plus an empty one. */
static size_t three_frames(uint8_t *buf)
{
        size_t o = 0;
        assert_int_equal(gw_grpc_prefix(buf + o, false, 5), 0);
        memcpy(buf + o + 5, "hello", 5);
        o += 10;
        assert_int_equal(gw_grpc_prefix(buf + o, false, 300), 0);
        for (size_t i = 0; i < 300; i++) {
                buf[o + 5 + i] = (uint8_t)i;
        }
        o += 305;
        assert_int_equal(gw_grpc_prefix(buf + o, false, 0), 0);
        return o + 5;
}

static void check_three(const got *g)
{
        assert_int_equal(g->n, 3);
        assert_int_equal(g->len[0], 5);
        assert_memory_equal(g->msg[0], "hello", 5);
        assert_int_equal(g->len[1], 300);
        for (size_t i = 0; i < 300; i++) {
                assert_int_equal(g->msg[1][i], (uint8_t)i);
        }
        assert_int_equal(g->len[2], 0);
        assert_false(g->compressed[0] || g->compressed[1] || g->compressed[2]);
}

static void test_frames_split_everywhere(void **state)
{
        (void)state;
        uint8_t buf[512];
        size_t len = three_frames(buf);
        /* One cut at every offset, then every pair of cuts. */
        for (size_t a = 0; a <= len; a++) {
                for (size_t b = a; b <= len; b += (a % 7 == 0 ? 1 : 53)) {
                        gw_grpc_reader *r = NULL;
                        got g = {0};
                        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 1024), 0);
                        assert_int_equal(feed_all(r, buf, a, &g), 0);
                        assert_int_equal(feed_all(r, buf + a, b - a, &g), 0);
                        assert_int_equal(gw_grpc_reader_idle(r),
                                         b == len || b == 0 || b == 10 || b == 315);
                        assert_int_equal(feed_all(r, buf + b, len - b, &g), 0);
                        assert_true(gw_grpc_reader_idle(r));
                        check_three(&g);
                        got_free(&g);
                        gw_grpc_reader_free(r);
                }
        }
}

static void test_frames_byte_by_byte(void **state)
{
        (void)state;
        uint8_t buf[512];
        size_t len = three_frames(buf);
        gw_grpc_reader *r = NULL;
        got g = {0};
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 1024), 0);
        for (size_t i = 0; i < len; i++) {
                assert_int_equal(feed_all(r, buf + i, 1, &g), 0);
        }
        check_three(&g);
        got_free(&g);
        gw_grpc_reader_free(r);
}

static void test_frames_whole_point_into_input(void **state)
{
        (void)state;
        uint8_t buf[512];
        size_t len = three_frames(buf);
        gw_grpc_reader *r = NULL;
        size_t used = 0;
        bool have = false;
        gw_grpc_msg m;
        const char *err = NULL;
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 1024), 0);
        assert_int_equal(gw_grpc_reader_feed(r, buf, len, &used, &have, &m, &err), KS_OK);
        assert_true(have);
        assert_int_equal(used, 10);
        assert_ptr_equal(m.data, buf + 5); /* no copy of a message that came whole */
        gw_grpc_reader_free(r);
}

static void test_oversize(void **state)
{
        (void)state;
        uint8_t buf[16] = {0};
        gw_grpc_reader *r = NULL;
        got g = {0};
        /* At the bound: fine; one over: refused from the prefix alone. */
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 11), 0);
        assert_int_equal(gw_grpc_prefix(buf, false, 11), 0);
        assert_int_equal(feed_all(r, buf, 16, &g), 0);
        assert_int_equal(g.n, 1);
        got_free(&g);
        memset(&g, 0, sizeof(g));
        assert_int_equal(gw_grpc_prefix(buf, false, 12), 0);
        assert_int_equal(feed_all(r, buf, 5, &g), -1);
        assert_int_equal(g.code, KS_RESOURCE_EXHAUSTED);
        assert_non_null(g.err);
        assert_false(gw_grpc_reader_idle(r));
        gw_grpc_reader_free(r);

        /* A 4 GiB prefix on the default bound. */
        uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, GW_GRPC_MESSAGE_BYTES_DEFAULT),
                         0);
        memset(&g, 0, sizeof(g));
        assert_int_equal(feed_all(r, huge, 5, &g), -1);
        assert_int_equal(g.code, KS_RESOURCE_EXHAUSTED);
        gw_grpc_reader_free(r);

        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 0), -1);
        assert_null(r);
}

static void test_flags(void **state)
{
        (void)state;
        uint8_t frame[6] = {1, 0, 0, 0, 1, 'x'};
        gw_grpc_reader *r = NULL;
        got g = {0};
        /* Compressed flag on an identity stream: INTERNAL, as the spec says. */
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_IDENTITY, 64), 0);
        assert_int_equal(feed_all(r, frame, sizeof(frame), &g), -1);
        assert_int_equal(g.code, KS_INTERNAL);
        assert_string_equal(g.err, "grpc: compressed flag set with identity encoding");
        gw_grpc_reader_free(r);
        /* Any other flag bit (0x80 is gRPC-Web's trailers: never from a client). */
        const uint8_t flags[] = {0x02, 0x80, 0x81, 0xff};
        for (size_t i = 0; i < sizeof(flags); i++) {
                frame[0] = flags[i];
                memset(&g, 0, sizeof(g));
                assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_GZIP, 64), 0);
                assert_int_equal(feed_all(r, frame, sizeof(frame), &g), -1);
                assert_int_equal(g.code, KS_INTERNAL);
                gw_grpc_reader_free(r);
        }
}

static void test_encoding_parse(void **state)
{
        (void)state;
        gw_grpc_encoding e = GW_GRPC_GZIP;
        assert_int_equal(gw_grpc_encoding_parse(NULL, &e), 0);
        assert_int_equal(e, GW_GRPC_IDENTITY);
        assert_int_equal(gw_grpc_encoding_parse("identity", &e), 0);
        assert_int_equal(e, GW_GRPC_IDENTITY);
        assert_int_equal(gw_grpc_encoding_parse("gzip", &e), 0);
        assert_int_equal(e, GW_GRPC_GZIP);
        const char *bad[] = {"", "deflate", "snappy", "GZIP", "gzip ", "gzip,identity"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(gw_grpc_encoding_parse(bad[i], &e), -1);
        }
}

/* A compressible message of n bytes. */
static uint8_t *text(size_t n)
{
        uint8_t *p = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
                p[i] = (uint8_t)("keelson gRPC "[i % 13]);
        }
        return p;
}

static void test_gzip_roundtrip(void **state)
{
        (void)state;
        uint8_t *msg = text(5000);
        uint8_t *wire = NULL;
        size_t wire_len = 0;
        assert_int_equal(gw_grpc_frame(msg, 5000, GW_GRPC_GZIP, 1024, &wire, &wire_len), 0);
        assert_int_equal(wire[0], GW_GRPC_FLAG_COMPRESSED);
        assert_true(wire_len < 5000);
        for (size_t cut = 0; cut <= wire_len; cut += 7) {
                gw_grpc_reader *r = NULL;
                got g = {0};
                assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_GZIP, 5000), 0);
                assert_int_equal(feed_all(r, wire, cut, &g), 0);
                assert_int_equal(feed_all(r, wire + cut, wire_len - cut, &g), 0);
                assert_int_equal(g.n, 1);
                assert_true(g.compressed[0]);
                assert_int_equal(g.len[0], 5000);
                assert_memory_equal(g.msg[0], msg, 5000);
                got_free(&g);
                gw_grpc_reader_free(r);
        }
        free(wire);

        /* Below the threshold, or on identity: sent as it is, flag 0. */
        assert_int_equal(gw_grpc_frame(msg, 100, GW_GRPC_GZIP, 1024, &wire, &wire_len), 0);
        assert_int_equal(wire[0], 0);
        assert_int_equal(wire_len, 105);
        assert_memory_equal(wire + 5, msg, 100);
        free(wire);
        assert_int_equal(gw_grpc_frame(msg, 5000, GW_GRPC_IDENTITY, 0, &wire, &wire_len), 0);
        assert_int_equal(wire[0], 0);
        assert_int_equal(wire_len, 5005);
        free(wire);
        /* Incompressible bytes: gzip would be larger, so not used. */
        uint32_t x = 2463534242u;
        for (size_t i = 0; i < 2000; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                msg[i] = (uint8_t)x;
        }
        assert_int_equal(gw_grpc_frame(msg, 2000, GW_GRPC_GZIP, 0, &wire, &wire_len), 0);
        assert_int_equal(wire[0], 0);
        free(wire);
        free(msg);
}

static void test_gzip_bomb(void **state)
{
        (void)state;
        /* 64 MiB of zeros gzip to ~64 KiB; the bound is 1 MiB once inflated. */
        size_t big = 64u * 1024 * 1024;
        uint8_t *zeros = calloc(1, big);
        uint8_t *z = NULL;
        size_t z_len = 0;
        assert_int_equal(gw_gzip(zeros, big, 9, &z, &z_len), 0);
        free(zeros);
        assert_true(z_len < 1024 * 1024);
        uint8_t *wire = malloc(z_len + 5);
        assert_int_equal(gw_grpc_prefix(wire, true, z_len), 0);
        memcpy(wire + 5, z, z_len);
        gw_grpc_reader *r = NULL;
        got g = {0};
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_GZIP, 1024 * 1024), 0);
        assert_int_equal(feed_all(r, wire, z_len + 5, &g), -1);
        assert_int_equal(g.code, KS_RESOURCE_EXHAUSTED);
        assert_string_equal(g.err, "grpc: inflated message larger than max");
        assert_int_equal(g.n, 0);
        gw_grpc_reader_free(r);
        free(wire);
        free(z);
}

static void test_gzip_broken(void **state)
{
        (void)state;
        uint8_t *msg = text(3000);
        uint8_t *wire = NULL;
        size_t wire_len = 0;
        assert_int_equal(gw_grpc_frame(msg, 3000, GW_GRPC_GZIP, 0, &wire, &wire_len), 0);
        assert_int_equal(wire[0], 1);
        struct {
                const char *what;
                size_t cut;  /* bytes of the gzip stream kept */
                size_t flip; /* a byte to corrupt, 0: none */
        } cases[] = {
            {"truncated", wire_len - 5 - 9, 0},
            {"only a header", 10, 0},
            {"empty", 0, 0},
            {"corrupt", wire_len - 5, 12},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                size_t n = cases[i].cut;
                uint8_t *f = malloc(n + 5);
                assert_int_equal(gw_grpc_prefix(f, true, n), 0);
                memcpy(f + 5, wire + 5, n);
                if (cases[i].flip != 0) {
                        f[5 + cases[i].flip] ^= 0x55;
                }
                gw_grpc_reader *r = NULL;
                got g = {0};
                assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_GZIP, 4096), 0);
                assert_int_equal(feed_all(r, f, n + 5, &g), -1);
                assert_int_equal(g.code, KS_INTERNAL);
                gw_grpc_reader_free(r);
                free(f);
        }
        /* Two gzip members back to back are one message (as gzip readers take them). */
        uint8_t *a = NULL, *b = NULL;
        size_t a_len = 0, b_len = 0;
        assert_int_equal(gw_gzip("abc", 3, 6, &a, &a_len), 0);
        assert_int_equal(gw_gzip("def", 3, 6, &b, &b_len), 0);
        uint8_t *f = malloc(5 + a_len + b_len);
        assert_int_equal(gw_grpc_prefix(f, true, a_len + b_len), 0);
        memcpy(f + 5, a, a_len);
        memcpy(f + 5 + a_len, b, b_len);
        gw_grpc_reader *r = NULL;
        got g = {0};
        assert_int_equal(gw_grpc_reader_new(&r, GW_GRPC_GZIP, 4096), 0);
        assert_int_equal(feed_all(r, f, 5 + a_len + b_len, &g), 0);
        assert_int_equal(g.n, 1);
        assert_int_equal(g.len[0], 6);
        assert_memory_equal(g.msg[0], "abcdef", 6);
        got_free(&g);
        gw_grpc_reader_free(r);
        free(f);
        free(a);
        free(b);
        free(wire);
        free(msg);
}

static void test_timeout(void **state)
{
        (void)state;
        struct {
                const char *value;
                int64_t ms;
        } ok[] = {
            {"1H", 3600000},
            {"2M", 120000},
            {"3S", 3000},
            {"0S", 0},
            {"250m", 250},
            {"99999999m", 99999999},
            {"99999999H", 99999999LL * 3600000},
            {"1u", 1},    /* rounded up: a deadline given is never 0 */
            {"1000u", 1}, /* exact */
            {"1001u", 2},
            {"1n", 1},
            {"1000000n", 1},
            {"0n", 0},
            {"00000001S", 1000}, /* 8 digits, leading zeros included */
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                int64_t ms = -1;
                assert_int_equal(gw_grpc_timeout_parse(ok[i].value, &ms), 0);
                assert_int_equal(ms, ok[i].ms);
        }
        const char *bad[] = {NULL,  "",    "S",    "1",    "123456789S", "1s",   "1h",
                             "1 S", " 1S", "1S ",  "-1S",  "+1S",        "1.5S", "1SS",
                             "1x",  "1MS", "1e3m", "0x1S", "１S"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                int64_t ms = 42;
                assert_int_equal(gw_grpc_timeout_parse(bad[i], &ms), -1);
        }
}

static void test_message_encoding(void **state)
{
        (void)state;
        char out[GW_GRPC_MESSAGE_MAX + 1];
        char back[GW_GRPC_MESSAGE_MAX + 1];
        struct {
                const char *in, *wire;
        } cases[] = {
            {"plain text: ok!", "plain text: ok!"},
            {"100% sure", "100%25 sure"},
            {"caf\xc3\xa9", "caf%C3%A9"},
            {"\xe2\x82\xac 5", "%E2%82%AC 5"},
            {"\xf0\x9f\x98\x80", "%F0%9F%98%80"},
            {"line\nnext\r\t", "line%0Anext%0D%09"},
            {"~ \x7f", "~ %7F"},
            {"", ""},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                size_t n =
                    gw_grpc_message_encode(cases[i].in, strlen(cases[i].in), out, sizeof(out));
                assert_string_equal(out, cases[i].wire);
                assert_int_equal(n, strlen(cases[i].wire));
                n = gw_grpc_message_decode(out, n, back, sizeof(back));
                assert_string_equal(back, cases[i].in);
        }
        /* Every byte value survives the round trip. */
        char all[256];
        for (int i = 0; i < 256; i++) {
                all[i] = (char)(i == 0 ? 1 : i);
        }
        size_t n = gw_grpc_message_encode(all, 256, out, sizeof(out));
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)out[i];
                assert_true(c >= 0x20 && c <= 0x7e);
        }
        assert_int_equal(gw_grpc_message_decode(out, n, back, sizeof(back)), 256);
        assert_memory_equal(back, all, 256);
        /* Decoding never fails: a malformed escape stays as it came. */
        const char *lenient[][2] = {{"50%", "50%"},          {"%4", "%4"},   {"%zz!", "%zz!"},
                                    {"%41%4a", "AJ"},        {"%%41", "%A"}, {"a%2", "a%2"},
                                    {"%C3%A9%", "\xc3\xa9%"}};
        for (size_t i = 0; i < sizeof(lenient) / sizeof(lenient[0]); i++) {
                gw_grpc_message_decode(lenient[i][0], strlen(lenient[i][0]), back, sizeof(back));
                assert_string_equal(back, lenient[i][1]);
        }
}

static void test_message_cut(void **state)
{
        (void)state;
        /* A cut never splits an escape or a UTF-8 character. */
        char out[12];
        size_t n = gw_grpc_message_encode("ab\xc3\xa9\xc3\xa9", 6, out, sizeof(out));
        assert_string_equal(out, "ab%C3%A9"); /* the second é (6 more bytes) does not fit */
        assert_int_equal(n, 8);
        n = gw_grpc_message_encode("abcdefghijklmnop", 16, out, sizeof(out));
        assert_int_equal(n, 11);
        assert_string_equal(out, "abcdefghijk");
        n = gw_grpc_message_encode("abcdefghij%", 11, out, sizeof(out));
        assert_string_equal(out, "abcdefghij");
        /* Bytes that are no UTF-8 are escaped one by one. */
        n = gw_grpc_message_encode("\xc3(", 2, out, sizeof(out));
        assert_string_equal(out, "%C3(");
        char tiny[1];
        assert_int_equal(gw_grpc_message_encode("x", 1, tiny, 1), 0);
        assert_string_equal(tiny, "");
}

static void test_codes(void **state)
{
        (void)state;
        /* keelson's codes are gRPC's numbers, both ways. */
        for (int c = 0; c < KS_CODE_COUNT; c++) {
                assert_int_equal(gw_grpc_status_of_code(c), c);
                assert_int_equal(gw_code_of_grpc_status(c), c);
        }
        assert_int_equal(gw_grpc_status_of_code(KS_UNAUTHENTICATED), 16);
        assert_int_equal(gw_grpc_status_of_code(KS_RESOURCE_EXHAUSTED), 8);
        assert_int_equal(gw_grpc_status_of_code(-1), KS_UNKNOWN);
        assert_int_equal(gw_grpc_status_of_code(17), KS_UNKNOWN);
        assert_int_equal(gw_code_of_grpc_status(99), KS_UNKNOWN);
        assert_int_equal(gw_code_of_grpc_status(-3), KS_UNKNOWN);

        int code = -1;
        assert_int_equal(gw_grpc_status_parse("0", &code), 0);
        assert_int_equal(code, KS_OK);
        assert_int_equal(gw_grpc_status_parse("14", &code), 0);
        assert_int_equal(code, KS_UNAVAILABLE);
        assert_int_equal(gw_grpc_status_parse("17", &code), 0);
        assert_int_equal(code, KS_UNKNOWN);
        const char *bad[] = {NULL, "", "-1", "1 ", " 1", "x", "1234567890"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                code = 0;
                assert_int_equal(gw_grpc_status_parse(bad[i], &code), -1);
                assert_int_equal(code, KS_UNKNOWN);
        }

        /* doc/http-grpc-status-mapping.md */
        struct {
                int http, grpc;
        } http[] = {
            {400, KS_INTERNAL},      {401, KS_UNAUTHENTICATED}, {403, KS_PERMISSION_DENIED},
            {404, KS_UNIMPLEMENTED}, {429, KS_UNAVAILABLE},     {502, KS_UNAVAILABLE},
            {503, KS_UNAVAILABLE},   {504, KS_UNAVAILABLE},     {500, KS_UNKNOWN},
            {409, KS_UNKNOWN},       {415, KS_UNKNOWN},         {301, KS_UNKNOWN},
        };
        for (size_t i = 0; i < sizeof(http) / sizeof(http[0]); i++) {
                assert_int_equal(gw_grpc_status_of_http(http[i].http), http[i].grpc);
        }
}

static void test_protocol(void **state)
{
        (void)state;
        struct {
                const char *ct;
                gw_grpc_protocol p;
        } ok[] = {
            {"application/grpc", GW_GRPC},
            {"application/grpc+proto", GW_GRPC},
            {"Application/GRPC", GW_GRPC},
            {"application/grpc; charset=utf-8", GW_GRPC},
            {"application/grpc-web", GW_GRPC_WEB},
            {"application/grpc-web+proto", GW_GRPC_WEB},
            {"application/grpc-web-text", GW_GRPC_WEB_TEXT},
            {"application/grpc-web-text+proto", GW_GRPC_WEB_TEXT},
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                gw_grpc_protocol p = (gw_grpc_protocol)-1;
                assert_int_equal(gw_grpc_protocol_parse(ok[i].ct, &p), 0);
                assert_int_equal(p, ok[i].p);
        }
        const char *bad[] = {NULL,
                             "",
                             "application/grpc+json",
                             "application/grpc-web+json",
                             "application/grpcx",
                             "application/proto",
                             "application/json"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gw_grpc_protocol p;
                assert_int_equal(gw_grpc_protocol_parse(bad[i], &p), -1);
        }
        assert_true(gw_grpc_own_method("grpc.health.v1.Health/Check"));
        assert_true(gw_grpc_own_method("grpc.reflection.v1alpha.ServerReflection/X"));
        assert_false(gw_grpc_own_method("grpc.health.v1.Health/"));
        assert_false(gw_grpc_own_method("grpc.health.v1.HealthX/Check"));
        assert_false(gw_grpc_own_method("keelson.auth.v1.AuthService/Login"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_frames_split_everywhere),
            cmocka_unit_test(test_frames_byte_by_byte),
            cmocka_unit_test(test_frames_whole_point_into_input),
            cmocka_unit_test(test_oversize),
            cmocka_unit_test(test_flags),
            cmocka_unit_test(test_encoding_parse),
            cmocka_unit_test(test_gzip_roundtrip),
            cmocka_unit_test(test_gzip_bomb),
            cmocka_unit_test(test_gzip_broken),
            cmocka_unit_test(test_timeout),
            cmocka_unit_test(test_message_encoding),
            cmocka_unit_test(test_message_cut),
            cmocka_unit_test(test_codes),
            cmocka_unit_test(test_protocol),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
