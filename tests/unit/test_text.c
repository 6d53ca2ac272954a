/*
 * Unit tests of the shared input rules (services/core/ks_text.c): UTF-8,
 * e-mail normalisation and validation, names with a caller's bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ks_text.h"

#define ERR_MAX        128 /* a validation message, as a service's buffer holds it */
#define NAME_CHARS_MAX 200 /* auth's bound, whose messages these are */
#define NAME_BYTES_MAX (NAME_CHARS_MAX * KS_UTF8_CHAR_BYTES_MAX)

/* Runs the validator and returns its message ("" when it accepted). */
static const char *email_error(const char *email)
{
        static char err[ERR_MAX];

        err[0] = '\0';
        if (ks_email_validate(email, err, sizeof(err)) == KS_OK) {
                return "";
        }
        return err;
}

static void test_email_normalize_trims_and_lowercases(void **state)
{
        char out[KS_EMAIL_BYTES_MAX + 1];

        (void)state;
        assert_int_equal(ks_email_normalize("  Alice.Smith@Example.COM \t\r\n", out, sizeof(out)),
                         0);
        assert_string_equal(out, "alice.smith@example.com");
        /* Non-ASCII bytes are kept as they are; ASCII around them is lower-cased. */
        assert_int_equal(ks_email_normalize("\xc3\x89MILE@X.FR", out, sizeof(out)), 0);
        assert_string_equal(out, "\xc3\x89mile@x.fr");
        assert_int_equal(ks_email_normalize(" \t ", out, sizeof(out)), 0);
        assert_string_equal(out, "");
}

static void test_email_normalize_bounds(void **state)
{
        char in[300], out[KS_EMAIL_BYTES_MAX + 1];

        (void)state;
        /* 254 bytes fit, surrounding spaces do not count. */
        memset(in, 'a', sizeof(in));
        in[0] = ' ';
        memcpy(in + 1 + 254 - 6, "@x.com", 6);
        in[1 + 254] = ' ';
        in[1 + 254 + 1] = '\0';
        assert_int_equal(ks_email_normalize(in, out, sizeof(out)), 0);
        assert_int_equal(strlen(out), 254);
        assert_string_equal(email_error(out), "");
        /* 255 bytes do not. */
        memset(in, 'a', sizeof(in));
        memcpy(in + 255 - 6, "@x.com", 6);
        in[255] = '\0';
        assert_int_equal(ks_email_normalize(in, out, sizeof(out)), -1);
        assert_string_equal(email_error(in), "email: at most 254 bytes");
}

static void test_email_valid_addresses(void **state)
{
        (void)state;
        assert_string_equal(email_error("a@b.co"), "");
        assert_string_equal(email_error("first.last+tag@sub.example.test"), "");
        assert_string_equal(email_error("j\xc3\xb6rg@ex\xc3\xa4mple.de"), "");
}

static void test_email_rejects_shape(void **state)
{
        (void)state;
        assert_string_equal(email_error(""), "email: required");
        assert_string_equal(email_error(NULL), "email: required");
        assert_string_equal(email_error("alice.example.com"),
                            "email: must contain exactly one '@'");
        assert_string_equal(email_error("a@@b.com"), "email: must contain exactly one '@'");
        assert_string_equal(email_error("a@b@c.com"), "email: must contain exactly one '@'");
        assert_string_equal(email_error("@b.com"), "email: the part before '@' is empty");
        const char *bad_domains[] = {"a@", "a@localhost", "a@.com", "a@b.", "a@b..com", "a@."};
        for (size_t i = 0; i < sizeof(bad_domains) / sizeof(bad_domains[0]); i++) {
                assert_string_equal(
                    email_error(bad_domains[i]),
                    "email: the part after '@' must be a domain name like example.com");
        }
}

static void test_email_rejects_spaces_and_controls(void **state)
{
        const char *msg = "email: must not contain spaces or control characters";

        (void)state;
        assert_string_equal(email_error("a b@c.com"), msg);
        assert_string_equal(email_error("ab@c.com "), msg);
        assert_string_equal(email_error("a\tb@c.com"), msg);
        assert_string_equal(email_error("a\x01"
                                        "b@c.com"),
                            msg);
        assert_string_equal(email_error("a\x7f"
                                        "b@c.com"),
                            msg);
        assert_string_equal(email_error("a\xc2\x85"
                                        "b@c.com"),
                            msg); /* U+0085 NEL */
        assert_string_equal(email_error("a\xc2\xa0"
                                        "b@c.com"),
                            msg); /* no-break space */
        assert_string_equal(email_error("a\xe2\x80\x8b"
                                        "b@c.com"),
                            msg); /* zero-width space */
        assert_string_equal(email_error("a\xe3\x80\x80"
                                        "b@c.com"),
                            msg); /* ideographic space */
}

static void test_email_rejects_bad_utf8(void **state)
{
        (void)state;
        assert_string_equal(email_error("a\xff@b.com"), "email: not valid UTF-8");
        assert_string_equal(email_error("a\xc0\xaf@b.com"), "email: not valid UTF-8");
        assert_string_equal(email_error("a@b.com\xc3"), "email: not valid UTF-8");
}

/* n copies of the two-byte character U+00E9, NUL-terminated. */
static void repeat_e_acute(char *out, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = '\xc3';
                out[2 * i + 1] = '\xa9';
        }
        out[2 * n] = '\0';
}

static void test_name_rules(void **state)
{
        char in[2 * 201 + 8], out[NAME_BYTES_MAX + 1], err[ERR_MAX];

        (void)state;
        assert_int_equal(ks_name_normalize("tenant_name", "  Acme Inc.\n", NAME_CHARS_MAX, out,
                                           sizeof(out), err, sizeof(err)),
                         KS_OK);
        assert_string_equal(out, "Acme Inc.");
        assert_int_equal(ks_name_normalize("tenant_name", NULL, NAME_CHARS_MAX, out, sizeof(out),
                                           err, sizeof(err)),
                         KS_OK);
        assert_string_equal(out, "");
        repeat_e_acute(in, 200);
        assert_int_equal(ks_name_normalize("display_name", in, NAME_CHARS_MAX, out, sizeof(out),
                                           err, sizeof(err)),
                         KS_OK);
        assert_string_equal(out, in);
        repeat_e_acute(in, 201);
        assert_int_equal(ks_name_normalize("display_name", in, NAME_CHARS_MAX, out, sizeof(out),
                                           err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "display_name: at most 200 characters");
        assert_int_equal(ks_name_normalize("tenant_name", "Acme\tInc", NAME_CHARS_MAX, out,
                                           sizeof(out), err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "tenant_name: must not contain control characters");
        assert_int_equal(ks_name_normalize("tenant_name", "Acme\xed\xa0\x80", NAME_CHARS_MAX, out,
                                           sizeof(out), err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "tenant_name: not valid UTF-8");
}

static void test_utf8_count(void **state)
{
        (void)state;
        assert_int_equal(ks_utf8_count("", 0), 0);
        assert_int_equal(ks_utf8_count("abc", 3), 3);
        assert_int_equal(ks_utf8_count("\xf0\x9f\x94\x91", 4), 1);  /* U+1F511 */
        assert_int_equal(ks_utf8_count("\xed\xa0\x80", 3), -1);     /* surrogate */
        assert_int_equal(ks_utf8_count("\xf4\x90\x80\x80", 4), -1); /* above U+10FFFF */
        assert_int_equal(ks_utf8_count("\xe0\x80\xaf", 3), -1);     /* overlong */
        assert_int_equal(ks_utf8_count("\xe2\x82", 2), -1);         /* truncated */
        assert_int_equal(ks_utf8_count("\x80", 1), -1);             /* stray continuation */
}

/* Another service's bound: the same rules, its own number in the message. */
static void test_name_own_bound(void **state)
{
        char out[10 * KS_UTF8_CHAR_BYTES_MAX + 1], err[ERR_MAX], in[2 * 11 + 1];

        (void)state;
        repeat_e_acute(in, 10);
        assert_int_equal(ks_name_normalize("plan_name", in, 10, out, sizeof(out), err, sizeof(err)),
                         KS_OK);
        assert_string_equal(out, in);
        repeat_e_acute(in, 11);
        assert_int_equal(ks_name_normalize("plan_name", in, 10, out, sizeof(out), err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "plan_name: at most 10 characters");
        /* More bytes than 10 characters can take: refused before decoding. */
        assert_int_equal(ks_name_normalize("plan_name",
                                           "0123456789abcdefghijklmnopqrstuvwxyz0123456", 10, out,
                                           sizeof(out), err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "plan_name: at most 10 characters");
        /* An output too small for the name is refused, not cut. */
        assert_int_equal(ks_name_normalize("plan_name", "abcdef", 10, out, 6, err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "plan_name: at most 10 characters");
}

static void test_utf8_next(void **state)
{
        const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x94\x91";
        size_t i = 0, len = strlen(s);
        uint32_t cp = 0;

        (void)state;
        assert_int_equal(ks_utf8_next(s, len, &i, &cp), 0);
        assert_int_equal(cp, 0x61);
        assert_int_equal(i, 1);
        assert_int_equal(ks_utf8_next(s, len, &i, &cp), 0);
        assert_int_equal(cp, 0xE9);
        assert_int_equal(i, 3);
        assert_int_equal(ks_utf8_next(s, len, &i, &cp), 0);
        assert_int_equal(cp, 0x20AC);
        assert_int_equal(i, 6);
        assert_int_equal(ks_utf8_next(s, len, &i, &cp), 0);
        assert_int_equal(cp, 0x1F511);
        assert_int_equal(i, len);
        /* A sequence cut by len is malformed, and the position stays. */
        i = 3;
        assert_int_equal(ks_utf8_next(s, 5, &i, &cp), -1);
        assert_int_equal(i, 3);
}

static void test_trim_bounds(void **state)
{
        size_t b = 99, n = 99;

        (void)state;
        ks_trim_bounds(" \t a b \r\n", &b, &n);
        assert_int_equal(b, 3);
        assert_int_equal(n, 3);
        ks_trim_bounds("ab", &b, &n);
        assert_int_equal(b, 0);
        assert_int_equal(n, 2);
        ks_trim_bounds(" \v\f ", &b, &n);
        assert_int_equal(n, 0);
        ks_trim_bounds("", &b, &n);
        assert_int_equal(b, 0);
        assert_int_equal(n, 0);
        /* Only ASCII white space: a no-break space stays. */
        ks_trim_bounds("\xc2\xa0x", &b, &n);
        assert_int_equal(b, 0);
        assert_int_equal(n, 3);
}

static void test_media_type_is(void **state)
{
        (void)state;
        assert_true(ks_media_type_is("application/json", "application/json"));
        assert_true(ks_media_type_is("Application/JSON; charset=utf-8", "application/json"));
        assert_true(ks_media_type_is(" application/json ;x=1", "application/json"));
        assert_true(ks_media_type_is("application/grpc+proto\t", "application/grpc+proto"));
        assert_false(ks_media_type_is("application/jsonx", "application/json"));
        assert_false(ks_media_type_is("application/js", "application/json"));
        assert_false(ks_media_type_is("", "application/json"));
        assert_false(ks_media_type_is(NULL, "application/json"));
}

/* The writers' check agrees with the decoder on every case the decoder tests. */
static void test_utf8_valid(void **state)
{
        static const char *const cases[] = {
            "",
            "plain",
            "caf\xc3\xa9",
            "\xe2\x82\xac",
            "\xf0\x9f\x98\x80",
            "\xc0\xaf",
            /* overlong */ "\xe0\x80\xaf",
            "\xed\xa0\x80", /* surrogate */
            "\xf4\x90\x80\x80",
            /* above U+10FFFF */ "\xc3", /* truncated */
            "\x80",
            "\xff",
            "a\xe2\x82",
        };
        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                size_t n = strlen(cases[i]);
                assert_int_equal(ks_utf8_valid(cases[i], n), ks_utf8_count(cases[i], n) >= 0);
        }
        assert_true(ks_utf8_valid("caf\xc3\xa9", 5));
        assert_false(ks_utf8_valid("\xed\xa0\x80", 3));
        assert_false(ks_utf8_valid("\xf4\x90\x80\x80", 4));
        /* A NUL inside is a character like any other. */
        assert_true(ks_utf8_valid("a\0b", 3));
}

/* The one JSON string escaper: what must be escaped is, the rest is copied. */
static void test_json_escape(void **state)
{
        char out[KS_JSON_ESCAPED_MAX(64)];
        size_t n;
        (void)state;

        n = ks_json_escape(out, "plain", 5);
        assert_int_equal(n, 5);
        assert_memory_equal(out, "plain", 5);
        n = ks_json_escape(out, "a\"b\\c", 5);
        assert_int_equal(n, 7);
        assert_memory_equal(out, "a\\\"b\\\\c", 7);
        n = ks_json_escape(out, "\n\t\r\x01\x1f", 5);
        assert_int_equal(n, 18);
        assert_memory_equal(out, "\\n\\t\\r\\u0001\\u001f", 18);
        /* UTF-8 and DEL are copied; a NUL inside is escaped. */
        n = ks_json_escape(out, "caf\xc3\xa9\x7f", 6);
        assert_int_equal(n, 6);
        assert_memory_equal(out, "caf\xc3\xa9\x7f", 6);
        n = ks_json_escape(out, "a\0b", 3);
        assert_int_equal(n, 8);
        assert_memory_equal(out, "a\\u0000b", 8);
        /* The bound holds for the worst case. */
        n = ks_json_escape(out, "\x01\x02\x03", 3);
        assert_int_equal(n, KS_JSON_ESCAPED_MAX(3));
}

/* The escaper one byte at a time, as the JSON grammar says it. */
static size_t escape_reference(char *out, const unsigned char *s, size_t n)
{
        size_t o = 0;

        for (size_t i = 0; i < n; i++) {
                if (s[i] == '"' || s[i] == '\\') {
                        out[o++] = '\\';
                        out[o++] = (char)s[i];
                } else if (s[i] == '\n') {
                        o += (size_t)sprintf(out + o, "\\n");
                } else if (s[i] == '\t') {
                        o += (size_t)sprintf(out + o, "\\t");
                } else if (s[i] == '\r') {
                        o += (size_t)sprintf(out + o, "\\r");
                } else if (s[i] < 0x20) {
                        o += (size_t)sprintf(out + o, "\\u%04x", s[i]);
                } else {
                        out[o++] = (char)s[i];
                }
        }
        return o;
}

/*
 * Eight bytes at a time where nothing is escaped or multi-byte: random
 * strings of every length to 40, each byte at every offset from a set with
 * the escaped bytes, the bounds of the word tests (0x1f, 0x20, 0x7f, 0x80,
 * 0xff) and UTF-8, against one byte at a time; validation against the count.
 */
static void test_word_paths_agree_with_bytes(void **state)
{
        static const unsigned char set[] = {'a',  'Z',  '0',  ' ',  '"',  '\\', '\n', 0x00, 0x1f,
                                            0x20, 0x7f, 0x80, 0xc3, 0xa9, 0xff, 0x21, 0x5b, 0x5d};
        unsigned char in[40];
        char got[KS_JSON_ESCAPED_MAX(40)], want[KS_JSON_ESCAPED_MAX(40) + 8];
        unsigned seed = 12345;
        (void)state;

        for (int round = 0; round < 20000; round++) {
                size_t n = (size_t)(round % 41);
                bool plain = round % 3 == 0; /* mostly ASCII letters: the word paths run */
                for (size_t i = 0; i < n; i++) {
                        seed = seed * 1103515245u + 12345u;
                        unsigned r = (seed >> 16) % (plain ? 40u : sizeof(set));
                        in[i] = plain && r >= sizeof(set) ? (unsigned char)('a' + r % 26)
                                                          : set[r % sizeof(set)];
                }
                size_t g = ks_json_escape(got, (const char *)in, n);
                size_t w = escape_reference(want, in, n);
                assert_int_equal(g, w);
                assert_memory_equal(got, want, w);
                assert_int_equal(ks_utf8_valid((const char *)in, n),
                                 ks_utf8_count((const char *)in, n) >= 0);
        }
        /* A long ASCII run, then one bad byte past the words. */
        char long_bad[] = "abcdefghijklmnopqrstuvwxyz0123456789\xff";
        assert_false(ks_utf8_valid(long_bad, sizeof(long_bad) - 1));
        assert_true(ks_utf8_valid(long_bad, sizeof(long_bad) - 2));
}

static void test_fmt_decimal(void **state)
{
        char out[KS_DECIMAL_MAX];
        (void)state;

        assert_int_equal(ks_fmt_u64(out, 0), 1);
        assert_string_equal(out, "0");
        assert_int_equal(ks_fmt_u64(out, UINT64_MAX), 20);
        assert_string_equal(out, "18446744073709551615");
        assert_int_equal(ks_fmt_i64(out, -1), 2);
        assert_string_equal(out, "-1");
        assert_int_equal(ks_fmt_i64(out, INT64_MAX), 19);
        assert_string_equal(out, "9223372036854775807");
        assert_int_equal(ks_fmt_i64(out, INT64_MIN), 20);
        assert_string_equal(out, "-9223372036854775808");
        assert_int_equal(ks_fmt_i64(out, 1234567890), 10);
        assert_string_equal(out, "1234567890");
        /* Every length, and every two-digit pair, against printf. */
        for (uint64_t v = 1, k = 0; k < 20; k++, v *= 10) {
                const uint64_t near[] = {v - 1, v, v + 1, v * 7 + 3, v + 98};
                for (size_t j = 0; j < sizeof(near) / sizeof(near[0]); j++) {
                        char want[32];
                        snprintf(want, sizeof(want), "%llu", (unsigned long long)near[j]);
                        assert_int_equal(ks_fmt_u64(out, near[j]), strlen(want));
                        assert_string_equal(out, want);
                }
        }
        for (int64_t v = -1000; v <= 1000; v++) {
                char want[32];
                snprintf(want, sizeof(want), "%lld", (long long)v);
                assert_int_equal(ks_fmt_i64(out, v), strlen(want));
                assert_string_equal(out, want);
        }
}

/* Update masks: names to bits in the allowed list's order, and what is refused. */
static void test_mask_parse(void **state)
{
        (void)state;
        static const char *const allowed[] = {"url", "topics", "description", NULL};
        char *both[] = {"description", "url"}, *twice[] = {"url", "url"}, *unknown[] = {"x"};
        char err[128];
        unsigned mask = 99;

        assert_true(ks_mask_parse(both, 2, allowed, &mask, err, sizeof(err)));
        assert_int_equal(mask, 5u);
        assert_true(ks_mask_parse(NULL, 0, allowed, &mask, err, sizeof(err)));
        assert_int_equal(mask, 0u);
        assert_false(ks_mask_parse(twice, 2, allowed, &mask, err, sizeof(err)));
        assert_string_equal(err, "update_mask: \"url\" named twice");
        assert_false(ks_mask_parse(unknown, 1, allowed, &mask, err, sizeof(err)));
        assert_string_equal(err, "update_mask: unknown field \"x\"");

        assert_true(ks_mask_parse_some(both, 2, allowed, &mask, err, sizeof(err)));
        assert_int_equal(mask, 5u);
        assert_false(ks_mask_parse_some(unknown, 1, allowed, &mask, err, sizeof(err)));
        assert_string_equal(err, "update_mask: unknown field \"x\"");
        assert_false(ks_mask_parse_some(NULL, 0, allowed, &mask, err, sizeof(err)));
        assert_string_equal(err, "update_mask: name at least one of url, topics, description");
        /* A short buffer is cut at its size (39 characters here), never overrun. */
        char small[40];
        assert_false(ks_mask_parse_some(NULL, 0, allowed, &mask, small, sizeof(small)));
        assert_string_equal(small, "update_mask: name at least one of url, ");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_media_type_is),
            cmocka_unit_test(test_email_normalize_trims_and_lowercases),
            cmocka_unit_test(test_email_normalize_bounds),
            cmocka_unit_test(test_email_valid_addresses),
            cmocka_unit_test(test_email_rejects_shape),
            cmocka_unit_test(test_email_rejects_spaces_and_controls),
            cmocka_unit_test(test_email_rejects_bad_utf8),
            cmocka_unit_test(test_name_rules),
            cmocka_unit_test(test_name_own_bound),
            cmocka_unit_test(test_utf8_count),
            cmocka_unit_test(test_utf8_next),
            cmocka_unit_test(test_trim_bounds),
            cmocka_unit_test(test_utf8_valid),
            cmocka_unit_test(test_json_escape),
            cmocka_unit_test(test_word_paths_agree_with_bytes),
            cmocka_unit_test(test_fmt_decimal),
            cmocka_unit_test(test_mask_parse),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
