/* See h2_raw.h. */
#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "h2_raw.h"
#include "raw_http.h"

void h2_frame_send(int fd, int type, int flags, uint32_t stream, const void *p, size_t len)
{
        uint8_t hd[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, (uint8_t)type,
                         (uint8_t)flags};
        uint32_t id = htonl(stream);
        memcpy(hd + 5, &id, 4);
        raw_send(fd, hd, sizeof(hd));
        if (len > 0) {
                raw_send(fd, p, len);
        }
}

static bool read_exact(int fd, uint8_t *p, size_t len, int timeout_ms)
{
        size_t got = 0;
        while (got < len) {
                struct pollfd pfd = {fd, POLLIN, 0};
                if (poll(&pfd, 1, timeout_ms) <= 0) {
                        return false;
                }
                ssize_t n = recv(fd, p + got, len - got, 0);
                if (n <= 0) {
                        return false;
                }
                got += (size_t)n;
        }
        return true;
}

bool h2_frame_read(int fd, h2_frame *f, int timeout_ms)
{
        uint8_t hd[9];
        if (!read_exact(fd, hd, 9, timeout_ms)) {
                return false;
        }
        f->len = (size_t)hd[0] << 16 | (size_t)hd[1] << 8 | hd[2];
        f->type = hd[3];
        f->flags = hd[4];
        f->stream = h2_be32(hd + 5) & 0x7fffffffU;
        if (f->len > H2_FRAME_MAX) {
                return false;
        }
        return f->len == 0 || read_exact(fd, f->payload, f->len, timeout_ms);
}

uint32_t h2_be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

bool h2_frame_wait(int fd, int type, uint32_t stream, h2_frame *f, int timeout_ms)
{
        while (h2_frame_read(fd, f, timeout_ms)) {
                if (f->type == type && (stream == 0 || f->stream == stream)) {
                        return true;
                }
        }
        return false;
}

int h2_dial(int port, const uint32_t *settings, size_t n)
{
        uint8_t payload[6 * 8];
        int fd = raw_dial(NULL, port);
        if (fd < 0 || n > 8) {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                payload[6 * i] = (uint8_t)(settings[2 * i] >> 8);
                payload[6 * i + 1] = (uint8_t)settings[2 * i];
                uint32_t v = htonl(settings[2 * i + 1]);
                memcpy(payload + 6 * i + 2, &v, 4);
        }
        raw_send(fd, H2_PREFACE, strlen(H2_PREFACE));
        h2_frame_send(fd, H2_SETTINGS, 0, 0, payload, 6 * n);
        return fd;
}

/* A literal string of at most 126 bytes, or one whose length takes two bytes (< 255). */
static size_t put_string(uint8_t *out, const char *s)
{
        size_t n = strlen(s), at = 0;
        if (n < 127) {
                out[at++] = (uint8_t)n;
        } else {
                out[at++] = 127;
                out[at++] = (uint8_t)(n - 127);
        }
        memcpy(out + at, s, n);
        return at + n;
}

size_t h2_request_block(uint8_t *out, size_t cap, const char *path, const char *const *names,
                        const char *const *values, size_t n)
{
        size_t at = 0, need = 16 + strlen(path) + 9;
        for (size_t i = 0; i < n; i++) {
                need += 5 + strlen(names[i]) + strlen(values[i]);
        }
        if (need > cap) {
                return 0;
        }
        out[at++] = 0x83; /* :method POST */
        out[at++] = 0x86; /* :scheme http */
        out[at++] = 0x04; /* :path, literal without indexing, static name 4 */
        at += put_string(out + at, path);
        out[at++] = 0x01; /* :authority, static name 1 */
        at += put_string(out + at, "127.0.0.1");
        for (size_t i = 0; i < n; i++) {
                out[at++] = 0x00; /* literal without indexing, new name */
                at += put_string(out + at, names[i]);
                at += put_string(out + at, values[i]);
        }
        return at;
}

struct h2_inflater {
        nghttp2_hd_inflater *hd;
};

h2_inflater *h2_inflater_new(void)
{
        h2_inflater *inf = calloc(1, sizeof(*inf));
        if (inf != NULL && nghttp2_hd_inflate_new(&inf->hd) != 0) {
                free(inf);
                return NULL;
        }
        return inf;
}

void h2_inflater_free(h2_inflater *inf)
{
        if (inf != NULL) {
                nghttp2_hd_inflate_del(inf->hd);
                free(inf);
        }
}

/* Every field of a HEADERS frame, to fn. False when the block does not decode. */
static bool inflate(h2_inflater *inf, const h2_frame *f,
                    void (*fn)(const nghttp2_nv *nv, void *arg), void *arg)
{
        const uint8_t *in = f->payload;
        size_t left = f->len;
        size_t skip = 0;
        if (f->flags & 0x8) { /* PADDED */
                skip = 1;
                left -= (size_t)in[0];
        }
        if (f->flags & 0x20) { /* PRIORITY */
                skip += 5;
        }
        in += skip;
        left -= skip;
        for (;;) {
                nghttp2_nv nv;
                int flags = 0;
                ssize_t n = nghttp2_hd_inflate_hd2(inf->hd, &nv, &flags, in, left, 1);
                if (n < 0) {
                        return false;
                }
                in += n;
                left -= (size_t)n;
                if (fn != NULL && (flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
                        fn(&nv, arg);
                }
                if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
                        nghttp2_hd_inflate_end_headers(inf->hd);
                        return true;
                }
                if (n == 0 && left == 0) {
                        return true;
                }
        }
}

typedef struct lookup {
        const char *name;
        char *out;
        size_t out_len;
} lookup;

static void take_field(const nghttp2_nv *nv, void *arg)
{
        lookup *l = arg;
        if (nv->namelen == strlen(l->name) && memcmp(nv->name, l->name, nv->namelen) == 0) {
                snprintf(l->out, l->out_len, "%.*s", (int)nv->valuelen, (const char *)nv->value);
        }
}

const char *h2_field(h2_inflater *inf, const h2_frame *f, const char *name)
{
        static char value[256];
        lookup l = {name, value, sizeof(value)};
        value[0] = '\0';
        return inflate(inf, f, take_field, &l) ? value : NULL;
}

static void take_answer(const nghttp2_nv *nv, void *arg)
{
        h2_answer *a = arg;
        lookup ls[] = {{":status", a->status, sizeof(a->status)},
                       {"grpc-status", a->grpc_status, sizeof(a->grpc_status)},
                       {"grpc-message", a->grpc_message, sizeof(a->grpc_message)}};
        for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++) {
                take_field(nv, &ls[i]);
        }
}

bool h2_read_answer(int fd, h2_inflater *inf, uint32_t stream, h2_answer *a, int timeout_ms)
{
        static h2_frame f;
        memset(a, 0, sizeof(*a));
        a->rst = -1;
        while (h2_frame_read(fd, &f, timeout_ms)) {
                if (f.type == H2_HEADERS) {
                        if (!inflate(inf, &f, f.stream == stream ? take_answer : NULL, a) &&
                            f.stream == stream) {
                                return false;
                        }
                }
                if (f.stream != stream) {
                        continue;
                }
                if (f.type == H2_DATA) {
                        a->data_len += f.len;
                }
                if (f.type == H2_RST_STREAM) {
                        a->rst = (long)h2_be32(f.payload);
                        return true;
                }
                if ((f.type == H2_HEADERS || f.type == H2_DATA) && (f.flags & H2_END_STREAM) != 0) {
                        return true;
                }
        }
        return false;
}
