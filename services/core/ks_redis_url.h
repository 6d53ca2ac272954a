/*
 * ks_redis_url: KEELSON_REDIS_URL, one grammar for every service.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *
 * - scheme: "redis://", in any case. "rediss://" (TLS) is refused: keelson
 *   reaches Redis over a private network, and silently dropping the TLS a
 *   URL asks for would be worse than refusing it.
 * - credentials, as redis-cli reads them: "user:password@" (a Redis 6 ACL
 *   user), ":password@" or "password@" (the default user). Both parts are
 *   percent-decoded ("%40" is '@', "%3A" ':', "%25" '%'); a '%' not
 *   followed by two hex digits, or one that decodes to NUL, is an error. The
 *   credentials end at the last '@', so a raw '@' in a password also works.
 *   A user needs a password; an empty password is an error.
 * - host: a name or IPv4 address (letters, digits, '-', '.', '_'), or an
 *   IPv6 address in brackets ("[::1]"); at most KS_REDIS_HOST_MAX bytes.
 * - port: 1..65535, default 6379. db: 0..KS_REDIS_DB_MAX, default 0; a
 *   lone trailing '/' is db 0. Nothing may follow (no "?options").
 *
 * An error message names what is wrong and never repeats the URL: it may
 * hold a password.
 */
#ifndef KS_REDIS_URL_H
#define KS_REDIS_URL_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#define KS_REDIS_HOST_MAX     255
#define KS_REDIS_USER_MAX     127
#define KS_REDIS_PASSWORD_MAX 255
#define KS_REDIS_URL_MAX      1024 /* longer is refused before parsing */
#define KS_REDIS_DB_MAX       65535
#define KS_REDIS_DEFAULT_PORT 6379
#define KS_REDIS_ERR_MAX      160 /* a buffer this long holds every message */

typedef struct ks_redis_url {
        char host[KS_REDIS_HOST_MAX + 1]; /* without the brackets of an IPv6 address */
        int port;
        char user[KS_REDIS_USER_MAX + 1];         /* "": the default user */
        char password[KS_REDIS_PASSWORD_MAX + 1]; /* "": no AUTH */
        int db;
} ks_redis_url;

/*
 * 0 with *out filled, or -1 with *out zeroed and a message in err (which
 * may be NULL). url must not be NULL.
 */
int ks_redis_url_parse(const char *url, ks_redis_url *out, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Wipes the password (and everything else) from u. */
void ks_redis_url_clear(ks_redis_url *u);

/*
 * A synchronous connection as u says: connect (at most timeout_ms), the
 * command timeout set to timeout_ms, AUTH when u has a password, SELECT
 * when its db is not 0. KS_OK with *out; else *out is NULL and err says
 * what failed: KS_UNAVAILABLE (no connection, or it broke during setup) or
 * KS_FAILED_PRECONDITION (Redis refused AUTH or SELECT: its own answer,
 * which never holds the password).
 */
int ks_redis_url_connect(const ks_redis_url *u, int timeout_ms, redisContext **out, char *err,
                         size_t err_len) __attribute__((warn_unused_result));

#endif
