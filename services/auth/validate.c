/*
 * Input rules of the auth service: email normalisation and validation,
 * password rules, names, uuids. Pure functions (no I/O, no allocation) so
 * that services/auth/tests/test_auth_validate.c checks them without a database.
 *
 * Everything that ends up in PostgreSQL is checked for UTF-8 here: protobuf-c
 * does not check proto3 strings, and a text column rejects invalid UTF-8 with
 * an error that would otherwise surface as "internal".
 */
#include "auth.h"

#include <stdio.h>
#include <string.h>

static const char ws_chars[] = " \t\n\v\f\r";

static bool is_ascii_space(unsigned char c)
{
        return c != 0 && strchr(ws_chars, c) != NULL;
}

/*
 * Decodes the code point at s[*i] (len bytes in all) and advances *i.
 * Returns 0, or -1 on a malformed sequence: truncated, bad continuation,
 * overlong, a surrogate or above U+10FFFF.
 */
static int utf8_next(const unsigned char *s, size_t len, size_t *i, uint32_t *cp)
{
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        unsigned char c = s[*i];
        size_t extra, k;
        uint32_t v;

        if (c < 0x80) {
                *cp = c;
                *i += 1;
                return 0;
        }
        if ((c & 0xE0) == 0xC0) {
                extra = 1, v = c & 0x1Fu;
        } else if ((c & 0xF0) == 0xE0) {
                extra = 2, v = c & 0x0Fu;
        } else if ((c & 0xF8) == 0xF0) {
                extra = 3, v = c & 0x07u;
        } else {
                return -1;
        }
        if (len - *i <= extra) {
                return -1;
        }
        for (k = 1; k <= extra; k++) {
                if ((s[*i + k] & 0xC0) != 0x80) {
                        return -1;
                }
                v = (v << 6) | (s[*i + k] & 0x3Fu);
        }
        if (v < min_cp[extra] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                return -1;
        }
        *cp = v;
        *i += extra + 1;
        return 0;
}

long auth_utf8_count(const char *s, size_t len)
{
        const unsigned char *u = (const unsigned char *)s;
        size_t i = 0;
        long n = 0;
        uint32_t cp;

        while (i < len) {
                if (utf8_next(u, len, &i, &cp) != 0) {
                        return -1;
                }
                n++;
        }
        return n;
}

static bool is_control(uint32_t cp)
{
        return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);
}

/* White space anywhere in Unicode, as far as an address is concerned. */
static bool is_space(uint32_t cp)
{
        return cp == 0x20 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200B) ||
               cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 ||
               cp == 0xFEFF;
}

/* Trimmed bounds of s: [*start, *start + *len). */
static void trim_bounds(const char *s, size_t *start, size_t *len)
{
        size_t b = 0, e = strlen(s);

        while (b < e && is_ascii_space((unsigned char)s[b])) {
                b++;
        }
        while (e > b && is_ascii_space((unsigned char)s[e - 1])) {
                e--;
        }
        *start = b;
        *len = e - b;
}

int auth_email_normalize(const char *in, char *out, size_t out_len)
{
        size_t b, n, i;

        if (in == NULL || out == NULL || out_len == 0) {
                return -1;
        }
        trim_bounds(in, &b, &n);
        if (n >= out_len) {
                out[0] = '\0';
                return -1;
        }
        for (i = 0; i < n; i++) {
                unsigned char c = (unsigned char)in[b + i];
                out[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
        }
        out[n] = '\0';
        return 0;
}

static int invalid(char *err, size_t err_len, const char *msg)
{
        snprintf(err, err_len, "%s", msg);
        return KS_INVALID_ARGUMENT;
}

/* The domain is a dotted name: a dot, and no empty label. */
static bool domain_ok(const char *d)
{
        size_t n = strlen(d);

        return n >= 3 && strchr(d, '.') != NULL && d[0] != '.' && d[n - 1] != '.' &&
               strstr(d, "..") == NULL;
}

/* Rejects spaces and control characters; the text is valid UTF-8 here. */
static bool email_chars_ok(const char *email, size_t len)
{
        const unsigned char *u = (const unsigned char *)email;
        size_t i = 0;
        uint32_t cp;

        while (i < len) {
                if (utf8_next(u, len, &i, &cp) != 0 || is_control(cp) || is_space(cp)) {
                        return false;
                }
        }
        return true;
}

int auth_email_validate(const char *email, char *err, size_t err_len)
{
        size_t len = email ? strlen(email) : 0;
        const char *at;

        if (len == 0) {
                return invalid(err, err_len, "email: required");
        }
        if (len > AUTH_EMAIL_BYTES_MAX) {
                return invalid(err, err_len, "email: at most 254 bytes");
        }
        if (auth_utf8_count(email, len) < 0) {
                return invalid(err, err_len, "email: not valid UTF-8");
        }
        if (!email_chars_ok(email, len)) {
                return invalid(err, err_len,
                               "email: must not contain spaces or control characters");
        }
        at = strchr(email, '@');
        if (at == NULL || strchr(at + 1, '@') != NULL) {
                return invalid(err, err_len, "email: must contain exactly one '@'");
        }
        if (at == email) {
                return invalid(err, err_len, "email: the part before '@' is empty");
        }
        if (!domain_ok(at + 1)) {
                return invalid(err, err_len,
                               "email: the part after '@' must be a domain name like example.com");
        }
        return KS_OK;
}

int auth_password_validate(const char *password, char *err, size_t err_len)
{
        size_t len = password ? strlen(password) : 0;
        long chars;

        if (len > AUTH_PASSWORD_BYTES_MAX) {
                return invalid(err, err_len, "password: at most 1024 bytes");
        }
        chars = auth_utf8_count(password ? password : "", len);
        if (chars < 0) {
                return invalid(err, err_len, "password: not valid UTF-8");
        }
        if (chars < AUTH_PASSWORD_CHARS_MIN) {
                return invalid(err, err_len, "password: at least 8 characters");
        }
        return KS_OK;
}

int auth_name_normalize(const char *field, const char *in, char *out, size_t out_len, char *err,
                        size_t err_len)
{
        const char *s = in ? in : "";
        const unsigned char *u;
        size_t b, n, i = 0;
        long chars = 0;
        uint32_t cp;

        trim_bounds(s, &b, &n);
        if (n >= out_len || n > AUTH_NAME_BYTES_MAX) {
                snprintf(err, err_len, "%s: at most %d characters", field, AUTH_NAME_CHARS_MAX);
                return KS_INVALID_ARGUMENT;
        }
        u = (const unsigned char *)s + b;
        while (i < n) {
                if (utf8_next(u, n, &i, &cp) != 0) {
                        snprintf(err, err_len, "%s: not valid UTF-8", field);
                        return KS_INVALID_ARGUMENT;
                }
                if (is_control(cp)) {
                        snprintf(err, err_len, "%s: must not contain control characters", field);
                        return KS_INVALID_ARGUMENT;
                }
                chars++;
        }
        if (chars > AUTH_NAME_CHARS_MAX) {
                snprintf(err, err_len, "%s: at most %d characters", field, AUTH_NAME_CHARS_MAX);
                return KS_INVALID_ARGUMENT;
        }
        memcpy(out, u, n);
        out[n] = '\0';
        return KS_OK;
}

void auth_default_tenant_name(const char *email, char *out, size_t out_len)
{
        static const char suffix[] = "'s workspace";
        const size_t suffix_len = sizeof(suffix) - 1;
        const unsigned char *u = (const unsigned char *)email;
        const char *at = strchr(email, '@');
        size_t local_len = at ? (size_t)(at - email) : strlen(email);
        size_t i = 0, keep = 0;
        long chars = 0;
        uint32_t cp;

        if (out_len <= suffix_len) {
                if (out_len > 0) {
                        out[0] = '\0';
                }
                return;
        }
        /* Whole code points only, within both the byte and the character bound. */
        while (i < local_len && chars < AUTH_NAME_CHARS_MAX - (long)suffix_len) {
                if (utf8_next(u, local_len, &i, &cp) != 0 || i > out_len - 1 - suffix_len) {
                        break;
                }
                keep = i;
                chars++;
        }
        memcpy(out, email, keep);
        memcpy(out + keep, suffix, suffix_len + 1);
}

bool auth_uuid_valid(const char *s)
{
        return ks_uuid_valid(s);
}
