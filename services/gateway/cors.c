/* See cors.h. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cors.h"

const char gw_cors_allow_headers[] =
    "authorization, content-type, connect-protocol-version, connect-timeout-ms, "
    "grpc-timeout, x-grpc-web, x-user-agent, idempotency-key, x-request-id";
const char gw_cors_expose_headers[] =
    "grpc-status, grpc-message, x-request-id, idempotent-replayed, ratelimit-limit, "
    "ratelimit-remaining, ratelimit-reset, retry-after";

/* "http[s]://host[:port]": a scheme, a host of visible characters, no path. */
static bool origin_ok(const char *s, size_t len)
{
        size_t skip = len >= 8 && strncasecmp(s, "https://", 8) == 0  ? 8
                      : len >= 7 && strncasecmp(s, "http://", 7) == 0 ? 7
                                                                      : 0;
        if (skip == 0 || skip == len || len >= GW_CORS_ORIGIN_MAX) {
                return false;
        }
        for (size_t i = skip; i < len; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (ch <= ' ' || ch >= 0x7f || ch == '/' || ch == ',' || ch == '*') {
                        return false;
                }
        }
        return true;
}

int gw_cors_parse(const char *list, gw_cors *out, char *why, size_t why_len)
{
        memset(out, 0, sizeof(*out));
        if (list == NULL || list[0] == '\0') {
                return 0;
        }
        if (strcmp(list, "*") == 0) {
                out->any = true;
                return 0;
        }
        for (const char *p = list;;) {
                const char *comma = strchr(p, ',');
                size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
                while (len > 0 && p[0] == ' ') {
                        p++;
                        len--;
                }
                while (len > 0 && p[len - 1] == ' ') {
                        len--;
                }
                if (!origin_ok(p, len)) {
                        snprintf(why, why_len,
                                 "\"%.*s\" is not an origin (http[s]://host[:port], no path; "
                                 "\"*\" alone for any)",
                                 (int)(len > 64 ? 64 : len), p);
                        return -1;
                }
                if (out->n == GW_CORS_ORIGINS_MAX) {
                        snprintf(why, why_len, "more than %d origins", GW_CORS_ORIGINS_MAX);
                        return -1;
                }
                memcpy(out->origins[out->n], p, len);
                out->origins[out->n][len] = '\0';
                out->n++;
                if (comma == NULL) {
                        return 0;
                }
                p = comma + 1;
        }
}

bool gw_cors_allowed(const gw_cors *c, const char *origin)
{
        if (origin == NULL || !origin_ok(origin, strlen(origin))) {
                return false; /* "null" (a sandboxed page, a file) included */
        }
        if (c->any) {
                return true;
        }
        for (size_t i = 0; i < c->n; i++) {
                if (strcasecmp(c->origins[i], origin) == 0) {
                        return true;
                }
        }
        return false;
}
