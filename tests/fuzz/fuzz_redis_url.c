/*
 * libFuzzer target: ks_redis_url_parse on the input as a C string (up to
 * its first NUL, as an environment variable would be).
 *
 * Checks, aborting on a violation:
 * - a refusal leaves *out zeroed and a message in err (that the message
 *   never repeats the URL is test_redis_url.c's: the messages are fixed);
 * - an acceptance gives a host of 1..KS_REDIS_HOST_MAX bytes, a port of
 *   1..65535, a database of 0..KS_REDIS_DB_MAX, NUL-terminated strings, and
 *   a password whenever there is a user;
 * - the URL rebuilt from the parts (credentials percent-encoded, an IPv6
 *   host in brackets) parses again to the same parts, when it is no longer
 *   than KS_REDIS_URL_MAX.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_redis_url.h"

#define INPUT_MAX (KS_REDIS_URL_MAX + 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn)) static void die(const char *what, const char *url)
{
        fprintf(stderr, "fuzz_redis_url: %s (url \"%s\")\n", what, url);
        abort();
}

static size_t encode(char *out, size_t cap, const char *s)
{
        size_t n = 0;
        for (; *s != '\0' && n + 3 < cap; s++) { /* room for %XX and the NUL */
                unsigned char c = (unsigned char)*s;
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
                        out[n++] = (char)c;
                } else {
                        n += (size_t)snprintf(out + n, cap - n, "%%%02X", c);
                }
        }
        out[n] = '\0';
        return n;
}

static void check_parts(const ks_redis_url *u, const char *url)
{
        size_t host_len = strnlen(u->host, sizeof(u->host));
        if (host_len == 0 || host_len > KS_REDIS_HOST_MAX) {
                die("accepted without a host, or an unterminated one", url);
        }
        if (u->port < 1 || u->port > 65535 || u->db < 0 || u->db > KS_REDIS_DB_MAX) {
                die("port or database out of range", url);
        }
        if (strnlen(u->user, sizeof(u->user)) == sizeof(u->user) ||
            strnlen(u->password, sizeof(u->password)) == sizeof(u->password)) {
                die("unterminated credentials", url);
        }
        if (u->user[0] != '\0' && u->password[0] == '\0') {
                die("a user without a password", url);
        }
}

static void check_round_trip(const ks_redis_url *u, const char *url)
{
        char again[3 * (KS_REDIS_USER_MAX + KS_REDIS_PASSWORD_MAX) + KS_REDIS_HOST_MAX + 64];
        char user[3 * KS_REDIS_USER_MAX + 1], password[3 * KS_REDIS_PASSWORD_MAX + 1];
        char err[KS_REDIS_ERR_MAX];
        ks_redis_url v;

        encode(user, sizeof(user), u->user);
        encode(password, sizeof(password), u->password);
        bool v6 = strchr(u->host, ':') != NULL;
        int n = snprintf(again, sizeof(again), "redis://%s%s%s%s%s%s%s:%d/%d", user,
                         u->user[0] ? ":" : "", password, u->password[0] ? "@" : "", v6 ? "[" : "",
                         u->host, v6 ? "]" : "", u->port, u->db);
        if (n > KS_REDIS_URL_MAX) {
                return; /* encoding made it longer than a URL may be */
        }
        if (ks_redis_url_parse(again, &v, err, sizeof(err)) != 0) {
                fprintf(stderr, "rebuilt: %s: %s\n", again, err);
                die("the rebuilt URL is refused", url);
        }
        if (memcmp(u, &v, sizeof(v)) != 0) {
                die("the rebuilt URL parses to other parts", url);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char url[INPUT_MAX + 1], err[KS_REDIS_ERR_MAX];
        ks_redis_url u, zero;

        if (size > INPUT_MAX) {
                return 0;
        }
        memcpy(url, data, size);
        url[size] = '\0';
        memset(&zero, 0, sizeof(zero));
        err[0] = '\0';
        if (ks_redis_url_parse(url, &u, err, sizeof(err)) != 0) {
                if (memcmp(&u, &zero, sizeof(u)) != 0 || err[0] == '\0') {
                        die("refused, but *out is not zeroed or err is empty", url);
                }
                return 0;
        }
        check_parts(&u, url);
        check_round_trip(&u, url);
        return 0;
}
