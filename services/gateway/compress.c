/*
 * Response compression: gzip for JSON replies over
 * KEELSON_GATEWAY_GZIP_MIN_BYTES when the client's Accept-Encoding allows it
 * (Connect's unary rules: the reply says Content-Encoding: gzip). Request
 * bodies stay identity-only (connect.c). Small replies are sent as they are:
 * below a kilobyte gzip's header and the CPU cost outweigh the bytes saved.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "compress.h"

#define GZIP_WINDOW_BITS (15 + 16) /* 32 KiB window, gzip wrapper */
#define GZIP_MEM_LEVEL   8
#define CODING_MAX       64

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

/* q from ";q=0.5" parameters (RFC 9110 §12.4.2); absent is 1. */
static bool q_is_zero(const char *params, size_t len)
{
        const char *p = params;
        const char *end = params + len;
        while (p < end) {
                while (p < end && (is_space(*p) || *p == ';')) {
                        p++;
                }
                if (end - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
                        p += 2;
                        bool zero = p < end && *p == '0';
                        for (p++; zero && p < end && !is_space(*p) && *p != ';'; p++) {
                                zero = *p == '.' || *p == '0';
                        }
                        return zero;
                }
                while (p < end && *p != ';') {
                        p++;
                }
        }
        return false;
}

bool gw_accepts_gzip(const char *value)
{
        int gzip = -1, star = -1; /* -1 unsaid, 0 refused, 1 accepted */
        if (value == NULL) {
                return false;
        }
        for (const char *p = value; *p != '\0';) {
                size_t len = strcspn(p, ",");
                const char *item = p;
                while (len > 0 && is_space(*item)) {
                        item++;
                        len--;
                }
                size_t name_len = strcspn(item, ";, \t");
                if (name_len > len) {
                        name_len = len;
                }
                int ok = q_is_zero(item + name_len, len - name_len) ? 0 : 1;
                if ((name_len == 4 && strncasecmp(item, "gzip", 4) == 0) ||
                    (name_len == 6 && strncasecmp(item, "x-gzip", 6) == 0)) {
                        gzip = ok;
                } else if (name_len == 1 && item[0] == '*') {
                        star = ok;
                }
                p = item + len;
                if (*p == ',') {
                        p++;
                }
        }
        return gzip == 1 || (gzip == -1 && star == 1);
}

int gw_gzip(const void *in, size_t len, int level, uint8_t **out, size_t *out_len)
{
        z_stream z;
        memset(&z, 0, sizeof(z));
        *out = NULL;
        *out_len = 0;
        if (len > UINT32_MAX || deflateInit2(&z, level, Z_DEFLATED, GZIP_WINDOW_BITS,
                                             GZIP_MEM_LEVEL, Z_DEFAULT_STRATEGY) != Z_OK) {
                return -1;
        }
        uLong bound = deflateBound(&z, (uLong)len);
        uint8_t *buf = malloc(bound);
        if (buf == NULL) {
                deflateEnd(&z);
                return -1;
        }
        z.next_in = (Bytef *)(uintptr_t)in; /* zlib's API is not const, it does not write */
        z.avail_in = (uInt)len;
        z.next_out = buf;
        z.avail_out = (uInt)bound;
        int rc = deflate(&z, Z_FINISH);
        size_t n = z.total_out;
        deflateEnd(&z);
        if (rc != Z_STREAM_END) {
                free(buf);
                return -1;
        }
        *out = buf;
        *out_len = n;
        return 0;
}
