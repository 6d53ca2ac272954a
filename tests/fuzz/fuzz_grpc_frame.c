/*
 * libFuzzer target: the gateway's gRPC message reader (grpc.c), as the
 * HTTP/2 front will drive it: DATA frames of any size. The first byte
 * chooses the stream's grpc-encoding (identity or gzip) and the size of the
 * pieces the rest is fed in. It checks that:
 *
 * - nothing is read outside the input (ASan), and each feed reads at most
 *   what it was given, all of it unless it hands out a message;
 * - the pieces do not matter: the stream fed whole and fed in pieces gives
 *   the same messages and ends with the same status;
 * - on an identity stream the messages are exactly those a small reference
 *   reading of the prefixes finds, and a refusal is the one it expects
 *   (a flag other than 0: INTERNAL; a length over the bound:
 *   RESOURCE_EXHAUSTED);
 * - no message, inflated or not, is over the bound, and every message
 *   framed again by gw_grpc_frame (gzipped when that helps) reads back the
 *   same.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"

#define MAX_BYTES 4096
#define MSGS_MAX  64

static void die(const char *what)
{
        fprintf(stderr, "fuzz_grpc_frame: %s\n", what);
        abort();
}

typedef struct run {
        uint8_t *msg[MSGS_MAX];
        size_t len[MSGS_MAX];
        size_t n;
        int code;
        bool idle;
} run;

static void run_free(run *r)
{
        for (size_t i = 0; i < r->n && i < MSGS_MAX; i++)
                free(r->msg[i]);
}

/* Feeds data in pieces of `step` bytes (0: whole), keeping up to MSGS_MAX messages. */
static void feed(gw_grpc_encoding enc, const uint8_t *data, size_t size, size_t step, run *out)
{
        gw_grpc_reader *r = NULL;
        memset(out, 0, sizeof(*out));
        if (gw_grpc_reader_new(&r, enc, MAX_BYTES) != 0)
                die("reader_new failed");
        for (size_t at = 0; at < size && out->code == KS_OK;) {
                size_t piece = step == 0 || size - at < step ? size - at : step;
                const uint8_t *p = data + at;
                size_t left = piece;
                while (left > 0 && out->code == KS_OK) {
                        size_t used = 0;
                        bool have = false;
                        gw_grpc_msg m;
                        const char *err = NULL;
                        /* Exactly `left` bytes of their own, so ASan sees any overread. */
                        uint8_t *copy = malloc(left);
                        memcpy(copy, p, left);
                        out->code = gw_grpc_reader_feed(r, copy, left, &used, &have, &m, &err);
                        if (out->code != KS_OK && err == NULL)
                                die("a refusal without a reason");
                        if (used > left || (out->code == KS_OK && !have && used != left))
                                die("a feed read more than it had, or kept less than all");
                        if (have) {
                                if (m.len > MAX_BYTES)
                                        die("a message over the bound");
                                if (out->n < MSGS_MAX) {
                                        out->msg[out->n] = malloc(m.len + 1);
                                        if (m.len > 0)
                                                memcpy(out->msg[out->n], m.data, m.len);
                                        out->len[out->n] = m.len;
                                }
                                out->n++;
                        }
                        free(copy);
                        p += used;
                        left -= used;
                }
                at += piece;
        }
        out->idle = out->code == KS_OK && gw_grpc_reader_idle(r);
        gw_grpc_reader_free(r);
}

static void same(const run *a, const run *b)
{
        if (a->code != b->code || a->n != b->n || a->idle != b->idle)
                die("pieces changed the outcome");
        for (size_t i = 0; i < a->n && i < MSGS_MAX; i++)
                if (a->len[i] != b->len[i] || memcmp(a->msg[i], b->msg[i], a->len[i]) != 0)
                        die("pieces changed a message");
}

/* The reference reading of an identity stream. */
static void reference(const uint8_t *d, size_t size, const run *got)
{
        size_t off = 0, n = 0;
        int code = KS_OK;
        while (size - off >= GW_GRPC_PREFIX_BYTES) {
                size_t len = (size_t)d[off + 1] << 24 | (size_t)d[off + 2] << 16 |
                             (size_t)d[off + 3] << 8 | d[off + 4];
                if (d[off] != 0) {
                        code = KS_INTERNAL;
                        break;
                }
                if (len > MAX_BYTES) {
                        code = KS_RESOURCE_EXHAUSTED;
                        break;
                }
                if (size - off - GW_GRPC_PREFIX_BYTES < len)
                        break;
                if (n < MSGS_MAX && n < got->n &&
                    (got->len[n] != len || memcmp(got->msg[n], d + off + 5, len) != 0))
                        die("a message differs from the reference");
                n++;
                off += GW_GRPC_PREFIX_BYTES + len;
        }
        if (code != got->code || n != got->n)
                die("the outcome differs from the reference");
        if (code == KS_OK && got->idle != (off == size))
                die("idle differs from the reference");
}

/* Frames each message again and reads it back. */
static void reframe(gw_grpc_encoding enc, const run *got)
{
        for (size_t i = 0; i < got->n && i < MSGS_MAX; i++) {
                uint8_t *wire = NULL;
                size_t wire_len = 0;
                run back;
                if (gw_grpc_frame(got->msg[i], got->len[i], enc, 16, &wire, &wire_len) != 0)
                        die("gw_grpc_frame failed");
                feed(enc, wire, wire_len, 0, &back);
                if (back.code != KS_OK || back.n != 1 || !back.idle || back.len[0] != got->len[i] ||
                    memcmp(back.msg[0], got->msg[i], got->len[i]) != 0)
                        die("a message framed again does not read back");
                run_free(&back);
                free(wire);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        gw_grpc_encoding enc = (data[0] & 1) ? GW_GRPC_GZIP : GW_GRPC_IDENTITY;
        size_t step = (size_t)(data[0] >> 1) + 1; /* 1..128 */
        data++;
        size--;
        run whole, pieces;
        feed(enc, data, size, 0, &whole);
        feed(enc, data, size, step, &pieces);
        same(&whole, &pieces);
        if (enc == GW_GRPC_IDENTITY)
                reference(data, size, &whole);
        else if (whole.code != KS_OK && whole.code != KS_INTERNAL &&
                 whole.code != KS_RESOURCE_EXHAUSTED)
                die("a refusal of an unexpected status");
        reframe(enc, &whole);
        run_free(&whole);
        run_free(&pieces);
        return 0;
}
