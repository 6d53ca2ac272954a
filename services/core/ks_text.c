/*
 * ks_text: UTF-8, trimming, e-mail addresses and names (see ks_text.h).
 */
#include "ks_text.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ks_assert.h"

static const char ws_chars[] = " \t\n\v\f\r";

static bool is_ascii_space(unsigned char c)
{
        return c != 0 && strchr(ws_chars, c) != NULL;
}

int ks_utf8_next(const char *str, size_t len, size_t *i, uint32_t *cp)
{
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        const unsigned char *s = (const unsigned char *)str;
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

long ks_utf8_count(const char *s, size_t len)
{
        size_t i = 0;
        long n = 0;
        uint32_t cp;

        while (i < len) {
                if (ks_utf8_next(s, len, &i, &cp) != 0) {
                        return -1;
                }
                n++;
        }
        return n;
}

/* ---- eight bytes at a time ------------------------------------------------- */

#define BYTES_01 0x0101010101010101ULL
#define BYTES_80 0x8080808080808080ULL

static uint64_t load8(const char *s)
{
        uint64_t w;
        memcpy(&w, s, sizeof(w));
        return w;
}

/* Whether a byte of w is below n (n <= 0x80); bytes of 0x80 and above never are. */
static bool any_below(uint64_t w, uint8_t n)
{
        return ((w - BYTES_01 * n) & ~w & BYTES_80) != 0;
}

/* Whether a byte of w is c. */
static bool any_equal(uint64_t w, uint8_t c)
{
        uint64_t x = w ^ (BYTES_01 * c);
        return ((x - BYTES_01) & ~x & BYTES_80) != 0;
}

/* ASCII eight bytes at a time, the rest by sequence; the same rules as ks_utf8_next. */
bool ks_utf8_valid(const char *s, size_t n)
{
        size_t i = 0;

        while (i < n) {
                size_t len;
                uint32_t v;
                /* ASCII, the common case: eight bytes at a time. */
                while (n - i >= 8 && (load8(s + i) & BYTES_80) == 0)
                        i += 8;
                if (i == n)
                        break;
                unsigned char c = (unsigned char)s[i];
                if (c < 0x80) {
                        i++;
                        continue;
                }
                if (c >= 0xc2 && c <= 0xdf) {
                        len = 2;
                        v = c & 0x1f;
                } else if (c >= 0xe0 && c <= 0xef) {
                        len = 3;
                        v = c & 0x0f;
                } else if (c >= 0xf0 && c <= 0xf4) {
                        len = 4;
                        v = c & 0x07;
                } else {
                        return false;
                }
                if (n - i < len)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        unsigned char cc = (unsigned char)s[i + k];
                        if ((cc & 0xc0) != 0x80)
                                return false;
                        v = (v << 6) | (cc & 0x3f);
                }
                if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10ffff ||
                    (v >= 0xd800 && v <= 0xdfff))
                        return false;
                i += len;
        }
        return true;
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

bool ks_media_type_is(const char *value, const char *want)
{
        if (value == NULL) {
                return false;
        }
        while (*value == ' ' || *value == '\t') {
                value++;
        }
        size_t len = strcspn(value, ";");
        while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t')) {
                len--;
        }
        return len == strlen(want) && strncasecmp(value, want, len) == 0;
}

void ks_trim_bounds(const char *s, size_t *start, size_t *len)
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

int ks_email_normalize(const char *in, char *out, size_t out_len)
{
        size_t b, n, i;

        if (in == NULL || out == NULL || out_len == 0) {
                return -1;
        }
        ks_trim_bounds(in, &b, &n);
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
        size_t i = 0;
        uint32_t cp;

        while (i < len) {
                if (ks_utf8_next(email, len, &i, &cp) != 0 || is_control(cp) || is_space(cp)) {
                        return false;
                }
        }
        return true;
}

int ks_email_validate(const char *email, char *err, size_t err_len)
{
        size_t len = email ? strlen(email) : 0;
        const char *at;

        if (len == 0) {
                return invalid(err, err_len, "email: required");
        }
        if (len > KS_EMAIL_BYTES_MAX) {
                snprintf(err, err_len, "email: at most %d bytes", KS_EMAIL_BYTES_MAX);
                return KS_INVALID_ARGUMENT;
        }
        if (ks_utf8_count(email, len) < 0) {
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

int ks_name_normalize(const char *field, const char *in, int chars_max, char *out, size_t out_len,
                      char *err, size_t err_len)
{
        const char *s = in ? in : "";
        size_t b, n, i = 0;
        long chars = 0;
        uint32_t cp;

        KS_ASSERT(chars_max > 0);
        ks_trim_bounds(s, &b, &n);
        if (n >= out_len || n > (size_t)chars_max * KS_UTF8_CHAR_BYTES_MAX) {
                snprintf(err, err_len, "%s: at most %d characters", field, chars_max);
                return KS_INVALID_ARGUMENT;
        }
        s += b;
        while (i < n) {
                if (ks_utf8_next(s, n, &i, &cp) != 0) {
                        snprintf(err, err_len, "%s: not valid UTF-8", field);
                        return KS_INVALID_ARGUMENT;
                }
                if (is_control(cp)) {
                        snprintf(err, err_len, "%s: must not contain control characters", field);
                        return KS_INVALID_ARGUMENT;
                }
                chars++;
        }
        if (chars > chars_max) {
                snprintf(err, err_len, "%s: at most %d characters", field, chars_max);
                return KS_INVALID_ARGUMENT;
        }
        memcpy(out, s, n);
        out[n] = '\0';
        return KS_OK;
}

bool ks_mask_parse(char *const *names, size_t n, const char *const *allowed, unsigned *mask,
                   char *err, size_t err_len)
{
        *mask = 0;
        for (size_t i = 0; i < n; i++) {
                unsigned bit = 0;
                for (unsigned j = 0; allowed[j] != NULL; j++) {
                        if (strcmp(names[i], allowed[j]) == 0) {
                                bit = 1u << j;
                        }
                }
                if (bit == 0) {
                        snprintf(err, err_len, "update_mask: unknown field \"%.64s\"", names[i]);
                        return false;
                }
                if ((*mask & bit) != 0) {
                        snprintf(err, err_len, "update_mask: \"%.64s\" named twice", names[i]);
                        return false;
                }
                *mask |= bit;
        }
        return true;
}

bool ks_mask_parse_some(char *const *names, size_t n, const char *const *allowed, unsigned *mask,
                        char *err, size_t err_len)
{
        if (!ks_mask_parse(names, n, allowed, mask, err, err_len)) {
                return false;
        }
        if (*mask != 0) {
                return true;
        }
        size_t used = (size_t)snprintf(err, err_len, "update_mask: name at least one of");
        for (unsigned j = 0; allowed[j] != NULL && used < err_len; j++) {
                used += (size_t)snprintf(err + used, err_len - used, "%s %s", j == 0 ? "" : ",",
                                         allowed[j]);
        }
        return false;
}

size_t ks_json_escape(char *out, const char *s, size_t n)
{
        static const char hex[] = "0123456789abcdef";
        char *o = out;

        for (size_t i = 0; i < n; i++) {
                /* Eight bytes with nothing to escape are copied as they are. */
                while (n - i >= 8) {
                        uint64_t w = load8(s + i);
                        if (any_below(w, 0x20) || any_equal(w, '"') || any_equal(w, '\\'))
                                break;
                        memcpy(o, &w, sizeof(w));
                        o += 8;
                        i += 8;
                }
                if (i == n)
                        break;
                unsigned char c = (unsigned char)s[i];
                if (c >= 0x20 && c != '"' && c != '\\') {
                        *o++ = (char)c;
                        continue;
                }
                *o++ = '\\';
                switch (c) {
                case '"':
                case '\\':
                        *o++ = (char)c;
                        break;
                case '\n':
                        *o++ = 'n';
                        break;
                case '\t':
                        *o++ = 't';
                        break;
                case '\r':
                        *o++ = 'r';
                        break;
                default:
                        *o++ = 'u';
                        *o++ = '0';
                        *o++ = '0';
                        *o++ = hex[c >> 4];
                        *o++ = hex[c & 15];
                        break;
                }
        }
        return (size_t)(o - out);
}

size_t ks_fmt_u64(char out[KS_DECIMAL_MAX], uint64_t v)
{
        static const char pairs[] = "00010203040506070809101112131415161718192021222324"
                                    "25262728293031323334353637383940414243444546474849"
                                    "50515253545556575859606162636465666768697071727374"
                                    "75767778798081828384858687888990919293949596979899";
        char digits[KS_DECIMAL_MAX];
        size_t d = sizeof(digits);

        /* Two digits a division: a millisecond timestamp takes seven, not thirteen. */
        while (v >= 100) {
                size_t r = (size_t)(v % 100) * 2;
                v /= 100;
                d -= 2;
                digits[d] = pairs[r];
                digits[d + 1] = pairs[r + 1];
        }
        if (v >= 10) {
                d -= 2;
                digits[d] = pairs[v * 2];
                digits[d + 1] = pairs[v * 2 + 1];
        } else {
                digits[--d] = (char)('0' + v);
        }
        memcpy(out, digits + d, sizeof(digits) - d);
        out[sizeof(digits) - d] = '\0';
        return sizeof(digits) - d;
}

size_t ks_fmt_i64(char out[KS_DECIMAL_MAX], int64_t v)
{
        char mag[KS_DECIMAL_MAX];
        size_t n;

        if (v >= 0) {
                return ks_fmt_u64(out, (uint64_t)v);
        }
        /* -(v + 1) + 1: the magnitude of INT64_MIN too, without overflow. */
        n = ks_fmt_u64(mag, (uint64_t)(-(v + 1)) + 1);
        out[0] = '-';
        memcpy(out + 1, mag, n + 1);
        return n + 1;
}
