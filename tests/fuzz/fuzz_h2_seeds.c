/*
 * Writes the seeds of fuzz_h2 (tests/fuzz/corpus/fuzz_h2) into a directory:
 * each is fuzz_h2's input header (limits, flow, events, mode bytes, split
 * bytes; see fuzz_h2.c) followed by what a client sends on the connection,
 * its header blocks made by nghttp2's own HPACK encoder (one per
 * connection, in order, as a client's would be). Valid requests of each
 * kind the front serves, and a few that break the protocol on purpose.
 *
 *   fuzz_h2_seeds <dir>
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_MAX 16384
#define PREFACE  "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

/* Frame types and flags (RFC 9113 §6). */
enum {
        DATA,
        HEADERS,
        PRIORITY,
        RST_STREAM,
        SETTINGS,
        PUSH_PROMISE,
        PING,
        GOAWAY,
        WINDOW_UPDATE,
        CONTINUATION
};
#define END_STREAM  0x1
#define ACK         0x1
#define END_HEADERS 0x4

/* The limits byte of fuzz_h2: head_max, body_max, gRPC's body, request_ms, streams. */
#define HEAD_128   0x00
#define HEAD_4096  0x02
#define BODY_16    0x00
#define BODY_4096  0x08
#define GRPC_8192  0x10
#define DEADLINE_0 0x20
#define STREAMS_1  0x00
#define STREAMS_8  0x80
#define LIMITS     (HEAD_4096 | BODY_4096 | GRPC_8192 | STREAMS_8)
/* The flow byte: pieces - 1, the client's close, streams wanted, the preface first, no reading. */
#define PIECES(n)     ((n)-1)
#define EOF_AT_END    0x08
#define STREAMS_ON    0x10
#define PREFACE_FIRST 0x20
#define NO_READ       0x40
/* The events byte: the piece after which the front drains (low) and its timer fires (high). */
#define NO_EVENTS 0xff
/* A mode byte: when, how, an extra field, a big body, the status. */
#define NOW         0x0
#define AFTER_PIECE 0x1
#define AT_END      0x2
#define NEVER       0x3
#define HOW(n)      ((n) << 2)
#define EXTRA       0x10
#define BIG         0x20
#define STATUS_404  0x80

typedef struct seed {
        uint8_t b[SEED_MAX];
        size_t len;
        nghttp2_hd_deflater *hd;
} seed;

static void die(const char *what)
{
        fprintf(stderr, "fuzz_h2_seeds: %s\n", what);
        exit(1);
}

static void put(seed *s, const void *p, size_t n)
{
        if (n == 0) {
                return;
        }
        if (n > SEED_MAX - s->len) {
                die("a seed over SEED_MAX");
        }
        memcpy(s->b + s->len, p, n);
        s->len += n;
}

static void begin(seed *s, uint8_t limits, uint8_t flow, uint8_t events, const uint8_t modes[4],
                  const uint8_t *splits)
{
        s->len = 0;
        if (s->hd != NULL) {
                nghttp2_hd_deflate_del(s->hd);
        }
        if (nghttp2_hd_deflate_new(&s->hd, 4096) != 0) {
                die("no deflater");
        }
        uint8_t head[3] = {limits, flow, events};
        put(s, head, sizeof(head));
        put(s, modes, 4);
        put(s, splits, (size_t)(flow & 7));
}

static void frame(seed *s, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n)
{
        uint8_t h[9] = {
            (uint8_t)(n >> 16),   (uint8_t)(n >> 8),    (uint8_t)n,          type,        flags,
            (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
        put(s, h, sizeof(h));
        put(s, p, n);
}

/* The header block of nv (name, value, ..., NULL), HPACK-encoded. */
static size_t block(seed *s, const char *const *nv, uint8_t *out, size_t cap)
{
        nghttp2_nv fields[128];
        size_t n = 0;
        for (; nv[2 * n] != NULL; n++) {
                fields[n] = (nghttp2_nv){(uint8_t *)(uintptr_t)nv[2 * n],
                                         (uint8_t *)(uintptr_t)nv[2 * n + 1], strlen(nv[2 * n]),
                                         strlen(nv[2 * n + 1]), NGHTTP2_NV_FLAG_NONE};
        }
        ssize_t len = nghttp2_hd_deflate_hd(s->hd, out, cap, fields, n);
        if (len < 0) {
                die("deflate failed");
        }
        return (size_t)len;
}

static void headers(seed *s, uint8_t flags, uint32_t sid, const char *const *nv)
{
        uint8_t b[4096];
        frame(s, HEADERS, (uint8_t)(flags | END_HEADERS), sid, b, block(s, nv, b, sizeof(b)));
}

static void preface(seed *s, const uint8_t *settings, size_t n)
{
        put(s, PREFACE, strlen(PREFACE));
        frame(s, SETTINGS, 0, 0, settings, n);
}

static void save(seed *s, const char *dir, const char *name)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(s->b, 1, s->len, f) != s->len || fclose(f) != 0) {
                die(path);
        }
}

static const char *const grpc_call[] = {":method",
                                        "POST",
                                        ":scheme",
                                        "http",
                                        ":path",
                                        "/keelson.auth.v1.AuthService/WhoAmI",
                                        ":authority",
                                        "localhost",
                                        "content-type",
                                        "application/grpc",
                                        "te",
                                        "trailers",
                                        "grpc-timeout",
                                        "1S",
                                        NULL};
static const char *const stream_call[] = {
    ":method",   "POST",         ":scheme",          "http", ":path",    "/s/Echo", ":authority",
    "localhost", "content-type", "application/grpc", "te",   "trailers", NULL};
static const char *const get[] = {":method", "GET",        ":scheme",   "http", ":path",
                                  "/x?q=1",  ":authority", "localhost", NULL};
static const uint8_t grpc_msg[] = {0, 0, 0, 0, 2, 0x0a, 0x00};

static void grpc_unary(seed *s, const char *dir)
{
        static const uint8_t modes[4] = {NOW | HOW(1), AFTER_PIECE | HOW(2), AT_END, NEVER};
        static const uint8_t splits[7] = {20, 40, 60, 80, 100, 128, 200};
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        headers(s, 0, 1, grpc_call);
        frame(s, DATA, END_STREAM, 1, grpc_msg, sizeof(grpc_msg));
        save(s, dir, "grpc_unary");

        /* four calls in eight pieces, answered at once, later, at the end and never */
        begin(s, LIMITS, PIECES(8), NO_EVENTS, modes, splits);
        preface(s, NULL, 0);
        frame(s, SETTINGS, ACK, 0, NULL, 0);
        for (uint32_t sid = 1; sid <= 7; sid += 2) {
                headers(s, 0, sid, grpc_call);
                frame(s, DATA, END_STREAM, sid, grpc_msg, sizeof(grpc_msg));
        }
        uint8_t window[4] = {0, 1, 0, 0};
        frame(s, WINDOW_UPDATE, 0, 0, window, sizeof(window));
        save(s, dir, "grpc_four_in_pieces");
}

static void streams(seed *s, const char *dir)
{
        static const uint8_t echo[4] = {NOW | HOW(1), AFTER_PIECE | HOW(2) | BIG, NOW | HOW(3),
                                        NEVER | HOW(1)};
        static const uint8_t splits[3] = {90, 128, 160};
        begin(s, LIMITS, PIECES(4) | STREAMS_ON, NO_EVENTS, echo, splits);
        preface(s, NULL, 0);
        for (uint32_t sid = 1; sid <= 7; sid += 2) {
                headers(s, 0, sid, stream_call);
                frame(s, DATA, 0, sid, grpc_msg, sizeof(grpc_msg));
        }
        for (uint32_t sid = 1; sid <= 5; sid += 2) {
                frame(s, DATA, END_STREAM, sid, grpc_msg, sizeof(grpc_msg));
        }
        uint8_t cancel[4] = {0, 0, 0, 8};
        frame(s, RST_STREAM, 0, 7, cancel, sizeof(cancel));
        save(s, dir, "stream_echo_whole_abort");

        /* a stream refused by the handler with a unary reply while its body still comes */
        static const uint8_t refuse[4] = {NOW | HOW(0) | STATUS_404, 0, 0, 0};
        begin(s, LIMITS, PIECES(1) | STREAMS_ON, NO_EVENTS, refuse, NULL);
        preface(s, NULL, 0);
        headers(s, 0, 1, stream_call);
        frame(s, DATA, 0, 1, grpc_msg, sizeof(grpc_msg));
        frame(s, DATA, END_STREAM, 1, grpc_msg, sizeof(grpc_msg));
        save(s, dir, "stream_refused");
}

static void upgrade(seed *s, const char *dir)
{
        static const uint8_t modes[4] = {NOW, AT_END | EXTRA, 0, 0};
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        const char *req = "GET /up HTTP/1.1\r\nHost: localhost\r\n"
                          "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                          "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
        put(s, req, strlen(req));
        preface(s, NULL, 0);
        headers(s, END_STREAM, 3, get);
        save(s, dir, "upgrade_get");

        static const uint8_t post_modes[4] = {AFTER_PIECE | HOW(1), NOW, 0, 0};
        static const uint8_t splits[1] = {100};
        begin(s, LIMITS, PIECES(2), NO_EVENTS, post_modes, splits);
        req = "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
              "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
              "HTTP2-Settings: \r\n\r\nhello";
        put(s, req, strlen(req));
        preface(s, NULL, 0);
        headers(s, END_STREAM, 3, get);
        save(s, dir, "upgrade_post");

        begin(s, LIMITS, PIECES(1), NO_EVENTS, post_modes, NULL);
        req = "POST /up HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
              "Content-Length: 3\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
              "HTTP2-Settings: AAMAAABk\r\n\r\nabc";
        put(s, req, strlen(req));
        preface(s, NULL, 0);
        save(s, dir, "upgrade_expect_continue");

        static const uint8_t h1_modes[4] = {NOW | EXTRA, AFTER_PIECE, NOW | HOW(3), 0};
        static const uint8_t h1_splits[2] = {50, 128};
        begin(s, LIMITS, PIECES(3), NO_EVENTS, h1_modes, h1_splits);
        req = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
              "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              "3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n"
              "HEAD /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        put(s, req, strlen(req));
        save(s, dir, "http1_keepalive");
}

static void limits(seed *s, const char *dir)
{
        static const uint8_t modes[4] = {NOW, NOW, NOW, NOW};
        begin(s, HEAD_128 | BODY_4096 | STREAMS_8, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        const char *big[] = {
            ":method",
            "POST",
            ":scheme",
            "http",
            ":path",
            "/big",
            ":authority",
            "localhost",
            "content-type",
            "application/grpc",
            "x-long",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            NULL};
        headers(s, END_STREAM, 1, big);
        save(s, dir, "headers_too_large");

        /* more fields than a head holds (GW_H1_FIELDS_MAX), each one byte from the HPACK table */
        const char *many[2 * 120 + 1];
        static const char *const pseudo[] = {":method", "GET",   ":scheme",    "http",
                                             ":path",   "/many", ":authority", "localhost"};
        memcpy(many, pseudo, sizeof(pseudo));
        for (size_t i = 4; i < 120; i++) {
                many[2 * i] = "x-f";
                many[2 * i + 1] = "1";
        }
        many[2 * 120] = NULL;
        begin(s, LIMITS, PIECES(1) | PREFACE_FIRST, NO_EVENTS, modes, NULL);
        headers(s, END_STREAM, 1, many);
        save(s, dir, "too_many_fields");

        uint8_t body[100];
        memset(body, 'b', sizeof(body));
        begin(s, HEAD_4096 | BODY_16 | STREAMS_8, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        headers(s, 0, 1, get);
        frame(s, DATA, 0, 1, body, sizeof(body));
        frame(s, DATA, END_STREAM, 1, body, 4);
        save(s, dir, "body_too_large");

        static const uint8_t never[4] = {NEVER, NEVER, NEVER, NEVER};
        begin(s, HEAD_4096 | BODY_4096 | STREAMS_1, PIECES(1), NO_EVENTS, never, NULL);
        preface(s, NULL, 0);
        for (uint32_t sid = 1; sid <= 5; sid += 2) {
                headers(s, END_STREAM, sid, get);
        }
        save(s, dir, "streams_over_max");

        /* the deadline passes between the HEADERS and the DATA: the stream is reset */
        static const uint8_t splits[1] = {200};
        begin(s, LIMITS | DEADLINE_0, PIECES(2), NO_EVENTS, modes, splits);
        preface(s, NULL, 0);
        headers(s, 0, 1, grpc_call);
        frame(s, DATA, END_STREAM, 1, grpc_msg, sizeof(grpc_msg));
        save(s, dir, "deadline");

        /* the front drains after the first piece, its timer fires after the second */
        static const uint8_t later[4] = {AT_END, NEVER, NOW, NOW};
        static const uint8_t thirds[2] = {128, 128};
        begin(s, LIMITS, PIECES(3), 0x10, later, thirds);
        preface(s, NULL, 0);
        headers(s, END_STREAM, 1, get);
        headers(s, 0, 3, grpc_call);
        frame(s, DATA, END_STREAM, 3, grpc_msg, sizeof(grpc_msg));
        headers(s, END_STREAM, 5, get);
        save(s, dir, "drain_then_timer");

        /* the window closed by SETTINGS: a big reply waits for WINDOW_UPDATE */
        static const uint8_t big_modes[4] = {NOW | BIG, NOW | HOW(1) | BIG, 0, 0};
        static const uint8_t half[1] = {128};
        const uint8_t window0[6] = {0, 4, 0, 0, 0, 0};
        begin(s, LIMITS, PIECES(2) | EOF_AT_END, NO_EVENTS, big_modes, half);
        preface(s, window0, sizeof(window0));
        headers(s, END_STREAM, 1, get);
        headers(s, 0, 3, grpc_call);
        frame(s, DATA, END_STREAM, 3, grpc_msg, sizeof(grpc_msg));
        const uint8_t window_big[6] = {0, 4, 0, 1, 0, 0};
        frame(s, SETTINGS, 0, 0, window_big, sizeof(window_big));
        uint8_t inc[4] = {0, 1, 0, 0};
        frame(s, WINDOW_UPDATE, 0, 0, inc, sizeof(inc));
        save(s, dir, "flow_control");

        /* a client that reads nothing until the end, with windows wide open: replies back up */
        static const uint8_t all_big[4] = {NOW | BIG, NOW | BIG, NOW | HOW(1) | BIG, NOW | BIG};
        const uint8_t window_wide[6] = {0, 4, 0, 0x10, 0, 0};
        begin(s, LIMITS, PIECES(1) | PREFACE_FIRST | NO_READ, NO_EVENTS, all_big, NULL);
        frame(s, SETTINGS, 0, 0, window_wide, sizeof(window_wide));
        uint8_t wide[4] = {0, 0x10, 0, 0};
        frame(s, WINDOW_UPDATE, 0, 0, wide, sizeof(wide));
        for (uint32_t sid = 1; sid <= 11; sid += 2) {
                headers(s, END_STREAM, sid, get);
        }
        save(s, dir, "backpressure");

        /* an echoing stream whose client opens no window: its unsent bytes grow, it is aborted */
        static const uint8_t echo[4] = {AT_END | HOW(1), 0, 0, 0};
        uint8_t chunk[1024];
        memset(chunk, 'e', sizeof(chunk));
        begin(s, LIMITS, PIECES(1) | PREFACE_FIRST | STREAMS_ON, NO_EVENTS, echo, NULL);
        frame(s, SETTINGS, 0, 0, window0, sizeof(window0));
        headers(s, 0, 1, stream_call);
        for (int i = 0; i < 6; i++) {
                frame(s, DATA, 0, 1, chunk, sizeof(chunk));
        }
        save(s, dir, "echo_window_closed");
}

static void malformed(seed *s, const char *dir)
{
        static const uint8_t modes[4] = {NOW, NOW, NOW, NOW};
        uint8_t b[4096];

        /* a header block in a HEADERS frame and two CONTINUATIONs */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        size_t n = block(s, grpc_call, b, sizeof(b));
        frame(s, HEADERS, 0, 1, b, 10);
        frame(s, CONTINUATION, 0, 1, b + 10, 10);
        frame(s, CONTINUATION, END_HEADERS, 1, b + 20, n - 20);
        frame(s, DATA, END_STREAM, 1, grpc_msg, sizeof(grpc_msg));
        save(s, dir, "continuation");

        /* trailers in a request, a PRIORITY, a PING */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        headers(s, 0, 1, grpc_call);
        frame(s, DATA, 0, 1, grpc_msg, sizeof(grpc_msg));
        const char *const trailers[] = {"x-checksum", "1", NULL};
        headers(s, END_STREAM, 1, trailers);
        uint8_t prio[5] = {0, 0, 0, 0, 16};
        frame(s, PRIORITY, 0, 3, prio, sizeof(prio));
        uint8_t ping[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        frame(s, PING, 0, 0, ping, sizeof(ping));
        save(s, dir, "request_trailers");

        /* HPACK that does not decode: index 0, then an index past the tables */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        uint8_t bad_hpack[] = {0x82, 0x86, 0x80, 0xff, 0x7f};
        frame(s, HEADERS, END_HEADERS | END_STREAM, 1, bad_hpack, sizeof(bad_hpack));
        save(s, dir, "bad_hpack");

        /* HEADERS on stream 0; then a request without :path */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        frame(s, HEADERS, END_HEADERS | END_STREAM, 0, b, block(s, get, b, sizeof(b)));
        save(s, dir, "headers_stream0");

        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        preface(s, NULL, 0);
        const char *const no_path[] = {":method", "GET", ":scheme", "http", NULL};
        headers(s, END_STREAM, 1, no_path);
        const char *const asterisk[] = {":method", "OPTIONS", ":scheme",   "http", ":path",
                                        "*",       "host",    "localhost", NULL};
        headers(s, END_STREAM, 3, asterisk);
        save(s, dir, "pseudo_headers");

        /* a reset of an open stream, then GOAWAY; and the client's close mid-stream */
        static const uint8_t never[4] = {NEVER, NEVER, NEVER, NEVER};
        begin(s, LIMITS, PIECES(1) | EOF_AT_END, NO_EVENTS, never, NULL);
        preface(s, NULL, 0);
        headers(s, 0, 1, grpc_call);
        headers(s, END_STREAM, 3, get);
        uint8_t cancel[4] = {0, 0, 0, 8};
        frame(s, RST_STREAM, 0, 1, cancel, sizeof(cancel));
        uint8_t goaway[8] = {0, 0, 0, 3, 0, 0, 0, 0};
        frame(s, GOAWAY, 0, 0, goaway, sizeof(goaway));
        headers(s, 0, 5, grpc_call);
        save(s, dir, "rst_goaway_eof");

        /* SETTINGS_ENABLE_PUSH = 2: a connection error */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        const uint8_t bad_push[6] = {0, 2, 0, 0, 0, 2};
        preface(s, bad_push, sizeof(bad_push));
        headers(s, END_STREAM, 1, get);
        save(s, dir, "bad_settings");

        /* the preface cut short, then HTTP/1.1 */
        begin(s, LIMITS, PIECES(1), NO_EVENTS, modes, NULL);
        put(s, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", 24);
        save(s, dir, "bad_preface");
}

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: fuzz_h2_seeds <dir>\n");
                return 2;
        }
        seed *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                die("out of memory");
        }
        grpc_unary(s, argv[1]);
        streams(s, argv[1]);
        upgrade(s, argv[1]);
        limits(s, argv[1]);
        malformed(s, argv[1]);
        nghttp2_hd_deflate_del(s->hd);
        free(s);
        return 0;
}
