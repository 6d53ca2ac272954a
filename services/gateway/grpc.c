/*
 * gRPC over HTTP/2, the parts that are rules rather than I/O
 * (grpc/grpc doc/PROTOCOL-HTTP2.md, doc/compression.md,
 * doc/http-grpc-status-mapping.md).
 *
 * The reader keeps a message's bytes only while it is split across DATA
 * frames: a message that arrives whole is handed back pointing into the
 * caller's input. A split one is gathered in a buffer that grows as its
 * bytes come (doubling from 4 KiB, never past the length the prefix gave),
 * so a prefix announcing 4 MiB costs nothing until the bytes are there.
 * A compressed message is inflated into a second buffer, which stops
 * growing one byte past the bound: a decompression bomb costs at most
 * message_bytes_max + 1 bytes before it is refused. Buffers grown past
 * KEEP_BYTES are let go once their message is handed out.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "compress.h"
#include "grpc.h"
#include "ks_assert.h"
#include "ks_crypto.h"
#include "ks_text.h"

#define GROW_FIRST_BYTES 4096
#define KEEP_BYTES       (64 * 1024) /* buffers above this are freed between messages */
#define GZIP_WINDOW_BITS (15 + 16)   /* gzip wrapper only, as grpc-encoding: gzip says */
#define GZIP_LEVEL       6

struct gw_grpc_reader {
        gw_grpc_encoding encoding;
        size_t max;
        uint8_t prefix[GW_GRPC_PREFIX_BYTES];
        size_t prefix_len; /* bytes of the current prefix read so far */
        uint8_t flag;
        size_t body_len; /* from the prefix */
        uint8_t *buf;    /* a split message's bytes so far */
        size_t buf_len, buf_cap;
        uint8_t *out; /* the last message inflated */
        size_t out_cap;
        bool handed; /* a message was handed out: its buffers may be trimmed */
        bool failed;
};

const char *const gw_grpc_own_services[] = {
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    "keelson.events.v1.EventService",
};
const size_t gw_grpc_own_services_n =
    sizeof(gw_grpc_own_services) / sizeof(gw_grpc_own_services[0]);

bool gw_grpc_own_method(const char *method)
{
        for (size_t i = 0; method != NULL && i < gw_grpc_own_services_n; i++) {
                size_t n = strlen(gw_grpc_own_services[i]);
                if (strncmp(method, gw_grpc_own_services[i], n) == 0 && method[n] == '/' &&
                    method[n + 1] != '\0' && strchr(method + n + 1, '/') == NULL) {
                        return true;
                }
        }
        return false;
}

int gw_grpc_protocol_parse(const char *content_type, gw_grpc_protocol *out)
{
        static const struct {
                const char *name;
                gw_grpc_protocol protocol;
        } types[] = {
            {"application/grpc", GW_GRPC},
            {"application/grpc+proto", GW_GRPC},
            {"application/grpc-web", GW_GRPC_WEB},
            {"application/grpc-web+proto", GW_GRPC_WEB},
            {"application/grpc-web-text", GW_GRPC_WEB_TEXT},
            {"application/grpc-web-text+proto", GW_GRPC_WEB_TEXT},
        };
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                if (ks_media_type_is(content_type, types[i].name)) {
                        *out = types[i].protocol;
                        return 0;
                }
        }
        return -1;
}

int gw_grpc_encoding_parse(const char *value, gw_grpc_encoding *out)
{
        if (value == NULL || strcmp(value, "identity") == 0) {
                *out = GW_GRPC_IDENTITY;
                return 0;
        }
        if (strcmp(value, "gzip") == 0) {
                *out = GW_GRPC_GZIP;
                return 0;
        }
        return -1;
}

int gw_grpc_reader_new(gw_grpc_reader **out, gw_grpc_encoding encoding, size_t message_bytes_max)
{
        *out = NULL;
        if (message_bytes_max == 0 || message_bytes_max > UINT32_MAX) {
                return -1;
        }
        gw_grpc_reader *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                return -1;
        }
        r->encoding = encoding;
        r->max = message_bytes_max;
        *out = r;
        return 0;
}

void gw_grpc_reader_free(gw_grpc_reader *r)
{
        if (r == NULL) {
                return;
        }
        free(r->buf);
        free(r->out);
        free(r);
}

bool gw_grpc_reader_idle(const gw_grpc_reader *r)
{
        return !r->failed && r->prefix_len == 0;
}

/* Grows *buf to hold at least need bytes (doubling, from GROW_FIRST_BYTES, at most cap_max). */
static int grow(uint8_t **buf, size_t *cap, size_t need, size_t cap_max)
{
        if (need <= *cap) {
                return 0;
        }
        size_t n = *cap == 0 ? GROW_FIRST_BYTES : *cap;
        while (n < need) {
                n = n > cap_max / 2 ? cap_max : n * 2;
        }
        if (n > cap_max) {
                n = cap_max;
        }
        KS_ASSERT(n >= need);
        uint8_t *p = realloc(*buf, n);
        if (p == NULL) {
                return -1;
        }
        *buf = p;
        *cap = n;
        return 0;
}

static void trim(gw_grpc_reader *r)
{
        if (r->buf_cap > KEEP_BYTES) {
                free(r->buf);
                r->buf = NULL;
                r->buf_cap = 0;
        }
        if (r->out_cap > KEEP_BYTES) {
                free(r->out);
                r->out = NULL;
                r->out_cap = 0;
        }
        r->handed = false;
}

static int fail(gw_grpc_reader *r, int code, const char *why, const char **err)
{
        r->failed = true;
        *err = why;
        return code;
}

/*
 * Inflates in[0..len) (one or more gzip members) into r->out, at most
 * r->max bytes. Returns KS_OK with *out_len, or the status that ends the stream.
 */
static int inflate_message(gw_grpc_reader *r, const uint8_t *in, size_t len, size_t *out_len,
                           const char **err)
{
        z_stream z;
        memset(&z, 0, sizeof(z));
        if (inflateInit2(&z, GZIP_WINDOW_BITS) != Z_OK) {
                return fail(r, KS_INTERNAL, "out of memory", err);
        }
        z.next_in = (Bytef *)(uintptr_t)in; /* zlib's API is not const; it does not write */
        z.avail_in = (uInt)len;
        size_t n = 0;
        int rc = Z_OK, code = KS_OK;
        /* Each turn inflates into fresh room or ends: bounded by the buffer's growth. */
        while (code == KS_OK) {
                if (n == r->out_cap && grow(&r->out, &r->out_cap, n + 1, r->max + 1) != 0) {
                        code = fail(r, KS_INTERNAL, "out of memory", err);
                        break;
                }
                z.next_out = r->out + n;
                z.avail_out = (uInt)(r->out_cap - n);
                rc = inflate(&z, Z_NO_FLUSH);
                n = r->out_cap - z.avail_out;
                if (n > r->max) {
                        code = fail(r, KS_RESOURCE_EXHAUSTED,
                                    "grpc: inflated message larger than max", err);
                } else if (rc == Z_STREAM_END && z.avail_in == 0) {
                        break;
                } else if (rc == Z_STREAM_END) {
                        rc = inflateReset(&z); /* another gzip member follows */
                } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
                        code = fail(r, KS_INTERNAL, "grpc: failed to decompress the message", err);
                } else if (z.avail_out > 0) {
                        /* Room left, so zlib wants input: there is none (a cut stream). */
                        code = fail(r, KS_INTERNAL, "grpc: truncated compressed message", err);
                }
        }
        inflateEnd(&z);
        *out_len = n;
        return code;
}

/* The prefix is whole: checks it. */
static int read_prefix(gw_grpc_reader *r, const char **err)
{
        const uint8_t *p = r->prefix;
        r->flag = p[0];
        r->body_len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        r->buf_len = 0;
        if ((r->flag & ~GW_GRPC_FLAG_COMPRESSED) != 0) {
                return fail(r, KS_INTERNAL, "grpc: unexpected message flag", err);
        }
        if (r->flag != 0 && r->encoding == GW_GRPC_IDENTITY) {
                return fail(r, KS_INTERNAL, "grpc: compressed flag set with identity encoding",
                            err);
        }
        if (r->body_len > r->max) {
                return fail(r, KS_RESOURCE_EXHAUSTED, "grpc: message larger than max", err);
        }
        return KS_OK;
}

/* The message's bytes are whole in data[0..body_len): hands it out. */
static int complete(gw_grpc_reader *r, const uint8_t *data, gw_grpc_msg *msg, bool *have,
                    const char **err)
{
        r->prefix_len = 0;
        r->handed = true;
        msg->compressed = r->flag != 0;
        if (!msg->compressed) {
                msg->data = data;
                msg->len = r->body_len;
        } else {
                size_t n = 0;
                int code = inflate_message(r, data, r->body_len, &n, err);
                if (code != KS_OK) {
                        return code;
                }
                msg->data = r->out;
                msg->len = n;
        }
        *have = true;
        return KS_OK;
}

int gw_grpc_reader_feed(gw_grpc_reader *r, const uint8_t *in, size_t len, size_t *used, bool *have,
                        gw_grpc_msg *msg, const char **err)
{
        KS_ASSERT(!r->failed);
        size_t off = 0;
        int code = KS_OK;
        *used = 0;
        *have = false;
        *err = NULL;
        memset(msg, 0, sizeof(*msg));
        if (r->handed) {
                trim(r);
        }
        if (len == 0) {
                return KS_OK; /* an empty DATA frame (END_STREAM alone) */
        }
        if (r->prefix_len < GW_GRPC_PREFIX_BYTES) {
                size_t take = GW_GRPC_PREFIX_BYTES - r->prefix_len;
                take = take < len ? take : len;
                memcpy(r->prefix + r->prefix_len, in, take);
                r->prefix_len += take;
                off += take;
                if (r->prefix_len < GW_GRPC_PREFIX_BYTES) {
                        *used = off;
                        return KS_OK;
                }
                if ((code = read_prefix(r, err)) != KS_OK) {
                        return code;
                }
        }
        size_t need = r->body_len - r->buf_len;
        size_t avail = len - off;
        if (r->buf_len == 0 && avail >= need) {
                code = complete(r, in + off, msg, have, err);
                *used = off + need;
                return code;
        }
        size_t take = avail < need ? avail : need;
        if (take == 0) {
                *used = off; /* the prefix alone: its body is still to come */
                return KS_OK;
        }
        if (grow(&r->buf, &r->buf_cap, r->buf_len + take, r->body_len) != 0) {
                return fail(r, KS_INTERNAL, "out of memory", err);
        }
        memcpy(r->buf + r->buf_len, in + off, take);
        r->buf_len += take;
        *used = off + take;
        if (r->buf_len < r->body_len) {
                return KS_OK;
        }
        return complete(r, r->buf, msg, have, err);
}

int gw_grpc_prefix(uint8_t out[GW_GRPC_PREFIX_BYTES], bool compressed, size_t len)
{
        if (len > UINT32_MAX) {
                return -1;
        }
        out[0] = compressed ? GW_GRPC_FLAG_COMPRESSED : 0;
        out[1] = (uint8_t)(len >> 24);
        out[2] = (uint8_t)(len >> 16);
        out[3] = (uint8_t)(len >> 8);
        out[4] = (uint8_t)len;
        return 0;
}

int gw_grpc_frame(const uint8_t *msg, size_t len, gw_grpc_encoding encoding, size_t gzip_min_bytes,
                  uint8_t **out, size_t *out_len)
{
        uint8_t *z = NULL;
        size_t z_len = 0;
        *out = NULL;
        *out_len = 0;
        if (len > UINT32_MAX) {
                return -1;
        }
        if (encoding == GW_GRPC_GZIP && len >= gzip_min_bytes &&
            gw_gzip(msg, len, GZIP_LEVEL, &z, &z_len) == 0 && z_len >= len) {
                free(z); /* no smaller: sent as it is */
                z = NULL;
        }
        const uint8_t *body = z != NULL ? z : msg;
        size_t body_len = z != NULL ? z_len : len;
        uint8_t *buf = malloc(GW_GRPC_PREFIX_BYTES + body_len);
        if (buf == NULL) {
                free(z);
                return -1;
        }
        int rc = gw_grpc_prefix(buf, z != NULL, body_len);
        KS_ASSERT(rc == 0);
        if (body_len > 0) {
                memcpy(buf + GW_GRPC_PREFIX_BYTES, body, body_len);
        }
        free(z);
        *out = buf;
        *out_len = GW_GRPC_PREFIX_BYTES + body_len;
        return 0;
}

int gw_grpc_timeout_parse(const char *value, int64_t *ms)
{
        int64_t v = 0;
        size_t n = 0;
        if (value == NULL) {
                return -1;
        }
        for (; value[n] >= '0' && value[n] <= '9'; n++) {
                if (n == GW_GRPC_TIMEOUT_DIGITS_MAX) {
                        return -1;
                }
                v = v * 10 + (value[n] - '0');
        }
        if (n == 0 || value[n] == '\0' || value[n + 1] != '\0') {
                return -1;
        }
        switch (value[n]) {
        case 'H':
                *ms = v * 3600 * 1000;
                return 0;
        case 'M':
                *ms = v * 60 * 1000;
                return 0;
        case 'S':
                *ms = v * 1000;
                return 0;
        case 'm':
                *ms = v;
                return 0;
        case 'u':
                *ms = (v + 999) / 1000;
                return 0;
        case 'n':
                *ms = (v + 999999) / 1000000;
                return 0;
        default:
                return -1;
        }
}

/* Bytes sent as they are in grpc-message; every other byte is %XX. */
static bool message_plain(unsigned char c)
{
        return c >= 0x20 && c <= 0x7e && c != '%';
}

/* The length of the character starting at s[0] (a UTF-8 sequence when well formed, else 1). */
static size_t char_len(const unsigned char *s, size_t n)
{
        size_t want = s[0] >= 0xf0 && s[0] <= 0xf4   ? 4
                      : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                      : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
                                                     : 1;
        if (want > n) {
                return 1;
        }
        for (size_t i = 1; i < want; i++) {
                if ((s[i] & 0xc0) != 0x80) {
                        return 1;
                }
        }
        return want;
}

size_t gw_grpc_message_encode(const char *in, size_t in_len, char *out, size_t out_len)
{
        static const char hex[] = "0123456789ABCDEF";
        const unsigned char *s = (const unsigned char *)in;
        size_t o = 0;
        KS_ASSERT(out_len > 0);
        for (size_t i = 0; i < in_len;) {
                size_t n = char_len(s + i, in_len - i);
                size_t need = 0;
                for (size_t j = 0; j < n; j++) {
                        need += message_plain(s[i + j]) ? 1 : 3;
                }
                if (o + need >= out_len) {
                        break;
                }
                for (size_t j = 0; j < n; j++, i++) {
                        if (message_plain(s[i])) {
                                out[o++] = (char)s[i];
                        } else {
                                out[o++] = '%';
                                out[o++] = hex[s[i] >> 4];
                                out[o++] = hex[s[i] & 0x0f];
                        }
                }
        }
        out[o] = '\0';
        return o;
}

size_t gw_grpc_message_decode(const char *in, size_t in_len, char *out, size_t out_len)
{
        size_t o = 0;
        KS_ASSERT(out_len > 0);
        for (size_t i = 0; i < in_len && o + 1 < out_len; i++) {
                int hi, lo;
                if (in[i] == '%' && i + 2 < in_len && (hi = ks_hex_digit(in[i + 1])) >= 0 &&
                    (lo = ks_hex_digit(in[i + 2])) >= 0) {
                        out[o++] = (char)(hi << 4 | lo);
                        i += 2;
                } else {
                        out[o++] = in[i];
                }
        }
        out[o] = '\0';
        return o;
}

int gw_grpc_status_of_code(int code)
{
        return code >= 0 && code < KS_CODE_COUNT ? code : KS_UNKNOWN;
}

int gw_code_of_grpc_status(long status)
{
        return status >= 0 && status < KS_CODE_COUNT ? (int)status : KS_UNKNOWN;
}

int gw_grpc_status_parse(const char *value, int *code)
{
        long v = 0;
        size_t n = 0;
        *code = KS_UNKNOWN;
        if (value == NULL) {
                return -1;
        }
        for (; isdigit((unsigned char)value[n]); n++) {
                if (n == 9) {
                        return -1;
                }
                v = v * 10 + (value[n] - '0');
        }
        if (n == 0 || value[n] != '\0') {
                return -1;
        }
        *code = gw_code_of_grpc_status(v);
        return 0;
}

int gw_grpc_status_of_http(int http_status)
{
        switch (http_status) {
        case 400:
                return KS_INTERNAL;
        case 401:
                return KS_UNAUTHENTICATED;
        case 403:
                return KS_PERMISSION_DENIED;
        case 404:
                return KS_UNIMPLEMENTED;
        case 429:
        case 502:
        case 503:
        case 504:
                return KS_UNAVAILABLE;
        default:
                return KS_UNKNOWN;
        }
}
