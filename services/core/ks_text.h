/*
 * ks_text: input rules for the text a client sends, shared by every service:
 * UTF-8 decoding and counting, trimming, e-mail addresses, names. Pure
 * functions (no I/O, no allocation), unit-tested in tests/unit/test_text.c.
 *
 * Everything that ends up in PostgreSQL is checked for UTF-8 by these rules:
 * protobuf-c does not check proto3 strings, and a text column rejects invalid
 * UTF-8 with an error that would otherwise surface as "internal".
 */
#ifndef KS_TEXT_H
#define KS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

#define KS_EMAIL_BYTES_MAX     254 /* RFC 5321 path limit, after trimming */
#define KS_UTF8_CHAR_BYTES_MAX 4   /* bytes of one code point: a name's byte bound */

/*
 * Decodes the code point at s[*i] (len bytes in all, *i < len) into *cp and
 * advances *i past it. Returns 0, or -1 on a malformed sequence: truncated,
 * bad continuation, overlong, a surrogate or above U+10FFFF (*i unchanged).
 */
int ks_utf8_next(const char *s, size_t len, size_t *i, uint32_t *cp);

/* Code points in s when it is valid UTF-8 (no overlongs, no surrogates), else -1. */
long ks_utf8_count(const char *s, size_t len);

/*
 * Whether s is valid UTF-8 as ks_utf8_next reads it (and as jansson accepts
 * it): no overlong forms, no surrogates, nothing above U+10FFFF. The check
 * of every text the JSON writers put out (ks_json, ks_log, the gateway's
 * error bodies).
 */
bool ks_utf8_valid(const char *s, size_t len);

/* Bytes of the longest decimal int64, "-9223372036854775808", with its NUL. */
#define KS_DECIMAL_MAX 21

/* v in decimal into out (NUL-terminated); returns its length. snprintf's job, without its cost. */
size_t ks_fmt_u64(char out[KS_DECIMAL_MAX], uint64_t v);
size_t ks_fmt_i64(char out[KS_DECIMAL_MAX], int64_t v);

/* The most ks_json_escape writes for n bytes: each one a \u00XX. */
#define KS_JSON_ESCAPED_MAX(n) ((n)*6)

/*
 * s (n bytes of valid UTF-8) escaped for a JSON string, without the quotes,
 * into out, which has room for KS_JSON_ESCAPED_MAX(n) bytes; returns the
 * bytes written (no NUL). '"', '\\' and the control characters are
 * escaped, the rest copied byte by byte (so s may be escaped in parts cut
 * anywhere). The one JSON string writer of the tree: the log lines, the
 * gateway's error bodies and the proto3 JSON printer use it.
 */
size_t ks_json_escape(char *out, const char *s, size_t n);

/*
 * Whether an HTTP field value names the media type want, as a client may
 * write it: case-insensitive, white space around it and parameters after
 * ';' allowed ("Application/JSON; charset=utf-8" is application/json).
 * False for NULL.
 */
bool ks_media_type_is(const char *value, const char *want);

/* The bounds of s without its leading and trailing ASCII white space: [*start, *start + *len). */
void ks_trim_bounds(const char *s, size_t *start, size_t *len);

/*
 * Trims ASCII whitespace and lower-cases ASCII letters (non-ASCII bytes are
 * kept as they are: lower-casing them needs Unicode tables, and two spellings
 * of one address outside ASCII are rare enough to leave to a later rule).
 * Returns 0, or -1 when the result does not fit in out (out_len bytes,
 * NUL included).
 */
int ks_email_normalize(const char *in, char *out, size_t out_len);

/*
 * Validates an already normalised address: at most KS_EMAIL_BYTES_MAX
 * bytes, valid UTF-8, no space or control character, exactly one '@', a
 * non-empty local part, and a domain that contains a dot with no empty
 * label. Returns KS_OK, or KS_INVALID_ARGUMENT with a message naming the
 * field ("email: ...") in err.
 */
int ks_email_validate(const char *email, char *err, size_t err_len);

/*
 * A name (a tenant's, a person's, a key's): trimmed of ASCII whitespace into
 * out, valid UTF-8, no control character, at most chars_max code points (and
 * so at most chars_max * KS_UTF8_CHAR_BYTES_MAX bytes; out_len must leave
 * room for that and the NUL, or a longer name is refused as too long).
 * Returns KS_OK, or KS_INVALID_ARGUMENT with a message in err naming field:
 * "<field>: at most <chars_max> characters", "<field>: not valid UTF-8",
 * "<field>: must not contain control characters". Empty is valid (the
 * caller picks a default).
 */
int ks_name_normalize(const char *field, const char *in, int chars_max, char *out, size_t out_len,
                      char *err, size_t err_len);

/*
 * An update mask (a request's update_mask): every name one of allowed (a
 * NULL-terminated list of at most 32), each once; *mask gets bit j for
 * allowed[j]. False with "update_mask: unknown field ..." or "... named
 * twice" in err.
 */
bool ks_mask_parse(char *const *names, size_t n, const char *const *allowed, unsigned *mask,
                   char *err, size_t err_len);

/*
 * The same for a method whose mask must name something: an empty mask is
 * refused with "update_mask: name at least one of a, b, c", the names of
 * allowed in their order.
 */
bool ks_mask_parse_some(char *const *names, size_t n, const char *const *allowed, unsigned *mask,
                        char *err, size_t err_len);

#endif
