/*
 * gRPC-Web's body framing beyond gRPC's (grpc/grpc doc/PROTOCOL-WEB.md):
 * the trailers travel as the body's last frame, flag 0x80, a block of
 * "name: value\r\n" lines; and application/grpc-web-text is the whole body
 * in base64, which the client may pad at the end of any chunk it sends.
 *
 * The base64 itself is OpenSSL's (EVP_EncodeBlock, EVP_DecodeBlock). What
 * is ours is the streaming: a group of 3 bytes (4 characters) split across
 * calls waits in gw_grpcweb_text. EVP_DecodeBlock reads '=' anywhere as
 * zero bits and forgives whitespace at the ends of its input, so the decoder
 * checks where padding stands itself and that every character counted.
 */
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "grpcweb.h"
#include "ks_assert.h"

/* EVP_*Block take an int length: runs are cut to this many groups' worth. */
#define RUN_GROUPS_MAX (1 << 24)

static bool is_tchar(unsigned char c)
{
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool value_ok(const char *v, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)v[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f) {
                        return false;
                }
        }
        return true;
}

int gw_grpcweb_trailers(const gw_grpcweb_header *h, size_t n, uint8_t **out, size_t *out_len)
{
        size_t len = 0;
        *out = NULL;
        *out_len = 0;
        if (n > GW_GRPCWEB_TRAILERS_MAX) {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                if (h[i].name_len == 0 || !value_ok(h[i].value, h[i].value_len)) {
                        return -1;
                }
                for (size_t j = 0; j < h[i].name_len; j++) {
                        if (!is_tchar((unsigned char)h[i].name[j])) {
                                return -1;
                        }
                }
                len += h[i].name_len + 2 + h[i].value_len + 2;
                if (len > GW_GRPCWEB_TRAILERS_BYTES_MAX) {
                        return -1;
                }
        }
        uint8_t *buf = malloc(GW_GRPC_PREFIX_BYTES + len);
        if (buf == NULL) {
                return -1;
        }
        int rc = gw_grpc_prefix(buf, false, len);
        KS_ASSERT(rc == 0);
        buf[0] = GW_GRPCWEB_FLAG_TRAILERS;
        uint8_t *p = buf + GW_GRPC_PREFIX_BYTES;
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < h[i].name_len; j++) {
                        unsigned char c = (unsigned char)h[i].name[j];
                        *p++ = (uint8_t)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
                }
                *p++ = ':';
                *p++ = ' ';
                if (h[i].value_len > 0) {
                        memcpy(p, h[i].value, h[i].value_len);
                        p += h[i].value_len;
                }
                *p++ = '\r';
                *p++ = '\n';
        }
        KS_ASSERT((size_t)(p - buf) == GW_GRPC_PREFIX_BYTES + len);
        *out = buf;
        *out_len = GW_GRPC_PREFIX_BYTES + len;
        return 0;
}

/* One "name: value" line (no CRLF) into *h; -1 when malformed. */
static int parse_line(const char *line, size_t len, gw_grpcweb_header *h)
{
        const char *colon = memchr(line, ':', len);
        if (colon == NULL || colon == line) {
                return -1;
        }
        h->name = line;
        h->name_len = (size_t)(colon - line);
        for (size_t i = 0; i < h->name_len; i++) {
                if (!is_tchar((unsigned char)line[i])) {
                        return -1;
                }
        }
        const char *v = colon + 1;
        const char *end = line + len;
        while (v < end && (*v == ' ' || *v == '\t')) {
                v++;
        }
        while (end > v && (end[-1] == ' ' || end[-1] == '\t')) {
                end--;
        }
        h->value = v;
        h->value_len = (size_t)(end - v);
        return value_ok(h->value, h->value_len) ? 0 : -1;
}

int gw_grpcweb_trailers_parse(const uint8_t *p, size_t len, gw_grpcweb_header *h, size_t max)
{
        const char *s = (const char *)p;
        size_t count = 0;
        if (len > GW_GRPCWEB_TRAILERS_BYTES_MAX) {
                return -1;
        }
        for (size_t i = 0; i < len;) {
                const char *cr = memchr(s + i, '\r', len - i);
                size_t line_len = cr != NULL ? (size_t)(cr - (s + i)) : len - i;
                if (cr != NULL && (i + line_len + 1 >= len || cr[1] != '\n')) {
                        return -1; /* a CR that does not end a line */
                }
                if (count == max || parse_line(s + i, line_len, &h[count]) != 0) {
                        return -1;
                }
                count++;
                i += line_len + (cr != NULL ? 2 : 0);
        }
        return (int)count;
}

/* Encodes whole groups of 3 from in[0..len) (a multiple of 3) into out; returns the characters. */
static size_t encode_run(const uint8_t *in, size_t len, char *out)
{
        size_t o = 0;
        KS_ASSERT(len % 3 == 0);
        while (len > 0) {
                size_t run = len < (size_t)RUN_GROUPS_MAX * 3 ? len : (size_t)RUN_GROUPS_MAX * 3;
                int n = EVP_EncodeBlock((unsigned char *)out + o, in, (int)run);
                KS_ASSERT(n >= 0 && (size_t)n == run / 3 * 4);
                o += (size_t)n;
                in += run;
                len -= run;
        }
        return o;
}

size_t gw_grpcweb_text_encode(gw_grpcweb_text *s, const uint8_t *in, size_t len, bool flush,
                              char *out, size_t out_len)
{
        size_t o = 0;
        KS_ASSERT(s->n < 3 && out_len >= GW_GRPCWEB_TEXT_ENCODED_MAX(len));
        if (s->n > 0) {
                while (s->n < 3 && len > 0) {
                        s->rest[s->n++] = *in++;
                        len--;
                }
                if (s->n == 3) {
                        o += encode_run(s->rest, 3, out);
                        s->n = 0;
                }
        }
        size_t whole = len / 3 * 3;
        o += encode_run(in, whole, out + o);
        for (size_t i = whole; i < len; i++) {
                s->rest[s->n++] = in[i];
        }
        if (flush && s->n > 0) {
                int n = EVP_EncodeBlock((unsigned char *)out + o, s->rest, (int)s->n);
                KS_ASSERT(n == 4);
                o += 4;
                s->n = 0;
        }
        out[o] = '\0';
        return o;
}

/* Decodes one group of 4 that may hold padding into out; returns the bytes, or -1. */
static long decode_quad(const char q[4], uint8_t *out)
{
        uint8_t tmp[4];
        if (q[0] == '=' || q[1] == '=' || (q[2] == '=' && q[3] != '=')) {
                return -1;
        }
        if (EVP_DecodeBlock(tmp, (const unsigned char *)q, 4) != 3) {
                return -1;
        }
        long n = q[2] == '=' ? 1 : q[3] == '=' ? 2 : 3;
        memcpy(out, tmp, (size_t)n);
        return n;
}

/* Decodes whole groups of 4 without padding; returns the bytes, or -1. */
static long decode_run(const char *in, size_t len, uint8_t *out)
{
        long o = 0;
        KS_ASSERT(len % 4 == 0);
        while (len > 0) {
                size_t run = len < (size_t)RUN_GROUPS_MAX * 4 ? len : (size_t)RUN_GROUPS_MAX * 4;
                int n = EVP_DecodeBlock(out + o, (const unsigned char *)in, (int)run);
                /* Fewer bytes than groups * 3: whitespace at an end went uncounted. */
                if (n < 0 || (size_t)n != run / 4 * 3) {
                        return -1;
                }
                o += n;
                in += run;
                len -= run;
        }
        return o;
}

long gw_grpcweb_text_decode(gw_grpcweb_text *s, const char *in, size_t len, uint8_t *out,
                            size_t out_len)
{
        long o = 0, n;
        KS_ASSERT(s->n < 4 && out_len >= GW_GRPCWEB_TEXT_DECODED_MAX(len));
        while (len > 0) {
                if (s->n > 0 || len < 4) {
                        while (s->n < 4 && len > 0) {
                                s->quad[s->n++] = *in++;
                                len--;
                        }
                        if (s->n < 4) {
                                break;
                        }
                        s->n = 0;
                        if ((n = decode_quad(s->quad, out + o)) < 0) {
                                return -1;
                        }
                        o += n;
                        continue;
                }
                size_t whole = len / 4 * 4;
                const char *eq = memchr(in, '=', whole);
                size_t run = eq != NULL ? (size_t)(eq - in) / 4 * 4 : whole;
                if (run > 0) {
                        n = decode_run(in, run, out + o);
                } else {
                        run = 4; /* the group that holds the padding */
                        n = decode_quad(in, out + o);
                }
                if (n < 0) {
                        return -1;
                }
                o += n;
                in += run;
                len -= run;
        }
        return o;
}

bool gw_grpcweb_text_complete(const gw_grpcweb_text *s)
{
        return s->n == 0;
}
