/*
 * cors.c: which browser origins may call the gateway from their pages
 * (KEELSON_GATEWAY_CORS_ORIGINS), and the headers of the answer (Fetch
 * standard, "CORS protocol"). Pure: no I/O.
 *
 * Tokens travel in the Authorization header, never in cookies the browser
 * adds by itself, so no answer allows credentials: allowing an origin lets
 * its scripts send requests with a token they already hold, nothing more.
 */
#ifndef GW_CORS_H
#define GW_CORS_H

#include <stdbool.h>
#include <stddef.h>

#define GW_CORS_ORIGINS_MAX 32
#define GW_CORS_ORIGIN_MAX  256 /* "scheme://host[:port]" */

typedef struct gw_cors {
        bool any; /* "*": every origin */
        size_t n;
        char origins[GW_CORS_ORIGINS_MAX][GW_CORS_ORIGIN_MAX];
} gw_cors;

/*
 * The list: "" (no origin: the default), "*" alone (any), or comma-separated
 * origins "http[s]://host[:port]" (no path, no trailing '/', compared
 * case-insensitively as browsers send them lower-case). Returns 0, or -1
 * with why.
 */
int gw_cors_parse(const char *list, gw_cors *out, char *why, size_t why_len);

/* Whether a request's Origin (NULL: none) may be answered with CORS headers. */
bool gw_cors_allowed(const gw_cors *c, const char *origin);

/* The request headers a preflight allows: Connect's, gRPC-Web's, keelson's own. */
extern const char gw_cors_allow_headers[];
/* The response headers a page may read: statuses, ids, rate limits. */
extern const char gw_cors_expose_headers[];
#define GW_CORS_MAX_AGE_S "7200"

#endif
