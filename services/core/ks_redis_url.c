/*
 * ks_redis_url: the parser of KEELSON_REDIS_URL and the connection it
 * describes (grammar in ks_redis_url.h).
 *
 * The parser is a left-to-right scan over [start, end) pieces: scheme,
 * credentials (up to the last '@'), host, port, database. Each piece has
 * its own function and its own message.
 */
#include "ks_redis_url.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ks_assert.h"
#include "ks_code.h"
#include "ks_crypto.h"

#define SCHEME       "redis://"
#define SCHEME_TLS   "rediss://"
#define PORT_DIGITS  5
#define DB_DIGITS    5
#define GRAMMAR_HELP "redis://[[user]:password@]host[:port][/db]"

static int fail(ks_redis_url *out, char *err, size_t err_len, const char *why)
{
        ks_redis_url_clear(out);
        if (err != NULL && err_len > 0) {
                snprintf(err, err_len, "%s", why);
        }
        return -1;
}

/* Percent-decodes [s, s + len) into dst (cap bytes with the NUL). 0, or -1 with *why. */
static int decode(const char *s, size_t len, char *dst, size_t cap, const char **why)
{
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == '%') {
                        int hi = -1, lo = -1;
                        if (i + 2 >= len || (hi = ks_hex_digit(s[i + 1])) < 0 ||
                            (lo = ks_hex_digit(s[i + 2])) < 0) {
                                *why =
                                    "a '%' in the credentials must be followed by two hex digits";
                                return -1;
                        }
                        c = (char)(hi << 4 | lo);
                        if (c == '\0') {
                                *why = "the credentials may not hold %00";
                                return -1;
                        }
                        i += 2;
                }
                if (n + 1 >= cap) {
                        *why = "the user or password is too long";
                        return -1;
                }
                dst[n++] = c;
        }
        dst[n] = '\0';
        return 0;
}

/* "[user]:password" or "password", before the last '@'. */
static int parse_credentials(const char *s, size_t len, ks_redis_url *u, const char **why)
{
        const char *colon = memchr(s, ':', len);
        const char *pw = s;
        size_t pw_len = len;
        if (colon != NULL) {
                if (decode(s, (size_t)(colon - s), u->user, sizeof(u->user), why) != 0) {
                        return -1;
                }
                pw = colon + 1;
                pw_len = len - (size_t)(colon - s) - 1;
        }
        if (decode(pw, pw_len, u->password, sizeof(u->password), why) != 0) {
                return -1;
        }
        if (u->password[0] == '\0') {
                *why = u->user[0] != '\0' ? "a user needs a password (user:password@host)"
                                          : "the password before '@' is empty";
                return -1;
        }
        return 0;
}

static bool host_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '.' || c == '_';
}

/* The host at *p (bracketed IPv6 or a name); advances *p past it. */
static int parse_host(const char **p, ks_redis_url *u, const char **why)
{
        const char *s = *p;
        size_t len;
        if (*s == '[') {
                const char *close = strchr(s, ']');
                struct in6_addr addr;
                len = close != NULL ? (size_t)(close - s - 1) : 0;
                if (close == NULL || len == 0 || len > KS_REDIS_HOST_MAX) {
                        *why = "an IPv6 address is written in brackets: [::1]";
                        return -1;
                }
                memcpy(u->host, s + 1, len);
                u->host[len] = '\0';
                if (inet_pton(AF_INET6, u->host, &addr) != 1) {
                        *why = "the address in brackets is not an IPv6 address";
                        return -1;
                }
                *p = close + 1;
                return 0;
        }
        for (len = 0; host_char(s[len]); len++) {
        }
        if (len == 0) {
                *why = "no host";
                return -1;
        }
        if (len > KS_REDIS_HOST_MAX) {
                *why = "the host name is too long";
                return -1;
        }
        memcpy(u->host, s, len);
        u->host[len] = '\0';
        *p = s + len;
        return 0;
}

/* 1..digits_max decimal digits at *p, at most max; advances *p. */
static int parse_number(const char **p, int digits_max, int max, int *out)
{
        int v = 0, n = 0;
        while ((*p)[n] >= '0' && (*p)[n] <= '9') {
                if (++n > digits_max) {
                        return -1;
                }
                v = v * 10 + ((*p)[n - 1] - '0');
        }
        if (n == 0 || v > max) {
                return -1;
        }
        *p += n;
        *out = v;
        return 0;
}

/* ":port", "/db" and the end, from *p on. */
static int parse_tail(const char *p, ks_redis_url *u, const char **why)
{
        u->port = KS_REDIS_DEFAULT_PORT;
        if (*p == ':') {
                p++;
                if (parse_number(&p, PORT_DIGITS, 65535, &u->port) != 0 || u->port == 0) {
                        *why = "the port must be a number from 1 to 65535";
                        return -1;
                }
        }
        if (*p == '/') {
                p++;
                if (*p != '\0' && parse_number(&p, DB_DIGITS, KS_REDIS_DB_MAX, &u->db) != 0) {
                        *why = "the database after '/' must be a number from 0 to 65535";
                        return -1;
                }
        }
        if (*p != '\0') {
                *why = *p == '?' ? "options after '?' are not supported"
                                 : "unexpected characters after the host, port or database";
                return -1;
        }
        return 0;
}

int ks_redis_url_parse(const char *url, ks_redis_url *out, char *err, size_t err_len)
{
        const char *why = NULL;
        KS_ASSERT(url != NULL && out != NULL);
        memset(out, 0, sizeof(*out));
        if (strnlen(url, KS_REDIS_URL_MAX + 1) > KS_REDIS_URL_MAX) {
                return fail(out, err, err_len, "the URL is longer than 1024 bytes");
        }
        if (strncasecmp(url, SCHEME_TLS, sizeof(SCHEME_TLS) - 1) == 0) {
                return fail(out, err, err_len, "rediss:// (TLS) is not supported");
        }
        if (strncasecmp(url, SCHEME, sizeof(SCHEME) - 1) != 0) {
                return fail(out, err, err_len, "expected " GRAMMAR_HELP);
        }
        const char *p = url + sizeof(SCHEME) - 1;
        const char *at = strrchr(p, '@');
        if (at != NULL) {
                if (parse_credentials(p, (size_t)(at - p), out, &why) != 0) {
                        return fail(out, err, err_len, why);
                }
                p = at + 1;
        }
        if (parse_host(&p, out, &why) != 0 || parse_tail(p, out, &why) != 0) {
                return fail(out, err, err_len, why);
        }
        return 0;
}

void ks_redis_url_clear(ks_redis_url *u)
{
        if (u != NULL) {
                explicit_bzero(u, sizeof(*u));
        }
}

static struct timeval tv_of(int ms)
{
        return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* One setup command; anything but +OK fails with Redis's answer in err. */
static int setup_ok(redisContext *c, redisReply *r, const char *what, char *err, size_t err_len)
{
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
        int rc = ok ? KS_OK : r == NULL ? KS_UNAVAILABLE : KS_FAILED_PRECONDITION;
        if (!ok && err != NULL && err_len > 0) {
                snprintf(err, err_len, "%s: %.100s", what,
                         r == NULL                      ? c->errstr
                         : r->type == REDIS_REPLY_ERROR ? r->str
                                                        : "unexpected reply");
        }
        freeReplyObject(r);
        return rc;
}

int ks_redis_url_connect(const ks_redis_url *u, int timeout_ms, redisContext **out, char *err,
                         size_t err_len)
{
        KS_ASSERT(u != NULL && out != NULL && timeout_ms > 0);
        *out = NULL;
        redisContext *c = redisConnectWithTimeout(u->host, u->port, tv_of(timeout_ms));
        if (c == NULL || c->err != 0 || redisSetTimeout(c, tv_of(timeout_ms)) != REDIS_OK) {
                if (err != NULL && err_len > 0) {
                        snprintf(err, err_len, "connect: %.100s",
                                 c != NULL ? c->errstr : "out of memory");
                }
                redisFree(c);
                return KS_UNAVAILABLE;
        }
        int rc = KS_OK;
        if (u->password[0] != '\0') {
                redisReply *r = u->user[0] != '\0'
                                    ? redisCommand(c, "AUTH %s %s", u->user, u->password)
                                    : redisCommand(c, "AUTH %s", u->password);
                rc = setup_ok(c, r, "AUTH", err, err_len);
        }
        if (rc == KS_OK && u->db != 0) {
                rc = setup_ok(c, redisCommand(c, "SELECT %d", u->db), "SELECT", err, err_len);
        }
        if (rc != KS_OK) {
                redisFree(c);
                return rc;
        }
        *out = c;
        return KS_OK;
}
