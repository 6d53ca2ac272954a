/*
 * Unit tests of the auth service's input rules (services/auth/validate.c):
 * email normalisation and validation, password rules, names, the default
 * tenant name, uuids, UTF-8.
 *
 * Linked with keelson_auth_lib; the file is pure (no I/O, no core calls), so
 * nothing else of the service comes with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"

/* Runs the validator and returns its message ("" when it accepted). */
static const char *email_error(const char *email)
{
        static char err[AUTH_ERR_MAX];

        err[0] = '\0';
        if (auth_email_validate(email, err, sizeof(err)) == KS_OK) {
                return "";
        }
        return err;
}

static void test_email_normalize_trims_and_lowercases(void **state)
{
        char out[AUTH_EMAIL_BYTES_MAX + 1];

        (void)state;
        assert_int_equal(auth_email_normalize("  Alice.Smith@Example.COM \t\r\n", out, sizeof(out)),
                         0);
        assert_string_equal(out, "alice.smith@example.com");
        /* Non-ASCII bytes are kept as they are; ASCII around them is lower-cased. */
        assert_int_equal(auth_email_normalize("\xc3\x89MILE@X.FR", out, sizeof(out)), 0);
        assert_string_equal(out, "\xc3\x89mile@x.fr");
        assert_int_equal(auth_email_normalize(" \t ", out, sizeof(out)), 0);
        assert_string_equal(out, "");
}

static void test_email_normalize_bounds(void **state)
{
        char in[300], out[AUTH_EMAIL_BYTES_MAX + 1];

        (void)state;
        /* 254 bytes fit, surrounding spaces do not count. */
        memset(in, 'a', sizeof(in));
        in[0] = ' ';
        memcpy(in + 1 + 254 - 6, "@x.com", 6);
        in[1 + 254] = ' ';
        in[1 + 254 + 1] = '\0';
        assert_int_equal(auth_email_normalize(in, out, sizeof(out)), 0);
        assert_int_equal(strlen(out), 254);
        assert_string_equal(email_error(out), "");
        /* 255 bytes do not. */
        memset(in, 'a', sizeof(in));
        memcpy(in + 255 - 6, "@x.com", 6);
        in[255] = '\0';
        assert_int_equal(auth_email_normalize(in, out, sizeof(out)), -1);
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

static void test_password_rules(void **state)
{
        char err[AUTH_ERR_MAX], big[AUTH_PASSWORD_BYTES_MAX + 2];

        (void)state;
        assert_int_equal(auth_password_validate("12345678", err, sizeof(err)), KS_OK);
        assert_int_equal(auth_password_validate("1234567", err, sizeof(err)), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "password: at least 8 characters");
        assert_int_equal(auth_password_validate(NULL, err, sizeof(err)), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "password: at least 8 characters");
        /* Characters, not bytes: 8 two-byte characters pass, 7 three-byte ones do not. */
        assert_int_equal(auth_password_validate("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                                                "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
                                                err, sizeof(err)),
                         KS_OK);
        assert_int_equal(auth_password_validate("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82"
                                                "\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac",
                                                err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "password: at least 8 characters");
        assert_int_equal(auth_password_validate("abcdefg\xff", err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "password: not valid UTF-8");
        /* 1024 bytes pass, 1025 do not. */
        memset(big, 'x', sizeof(big));
        big[AUTH_PASSWORD_BYTES_MAX] = '\0';
        assert_int_equal(auth_password_validate(big, err, sizeof(err)), KS_OK);
        big[AUTH_PASSWORD_BYTES_MAX] = 'x';
        big[AUTH_PASSWORD_BYTES_MAX + 1] = '\0';
        assert_int_equal(auth_password_validate(big, err, sizeof(err)), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "password: at most 1024 bytes");
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
        char in[2 * 201 + 8], out[AUTH_NAME_BYTES_MAX + 1], err[AUTH_ERR_MAX];

        (void)state;
        assert_int_equal(
            auth_name_normalize("tenant_name", "  Acme Inc.\n", out, sizeof(out), err, sizeof(err)),
            KS_OK);
        assert_string_equal(out, "Acme Inc.");
        assert_int_equal(
            auth_name_normalize("tenant_name", NULL, out, sizeof(out), err, sizeof(err)), KS_OK);
        assert_string_equal(out, "");
        repeat_e_acute(in, 200);
        assert_int_equal(
            auth_name_normalize("display_name", in, out, sizeof(out), err, sizeof(err)), KS_OK);
        assert_string_equal(out, in);
        repeat_e_acute(in, 201);
        assert_int_equal(
            auth_name_normalize("display_name", in, out, sizeof(out), err, sizeof(err)),
            KS_INVALID_ARGUMENT);
        assert_string_equal(err, "display_name: at most 200 characters");
        assert_int_equal(
            auth_name_normalize("tenant_name", "Acme\tInc", out, sizeof(out), err, sizeof(err)),
            KS_INVALID_ARGUMENT);
        assert_string_equal(err, "tenant_name: must not contain control characters");
        assert_int_equal(auth_name_normalize("tenant_name", "Acme\xed\xa0\x80", out, sizeof(out),
                                             err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "tenant_name: not valid UTF-8");
}

static void test_default_tenant_name(void **state)
{
        char local[2 * 250 + 16], email[2 * 250 + 32], out[AUTH_NAME_BYTES_MAX + 1];

        (void)state;
        auth_default_tenant_name("alice@example.com", out, sizeof(out));
        assert_string_equal(out, "alice's workspace");
        /* A long local part is cut so that the name keeps to 200 characters. */
        memset(local, 'a', 250);
        local[250] = '\0';
        snprintf(email, sizeof(email), "%s@x.com", local);
        auth_default_tenant_name(email, out, sizeof(out));
        assert_int_equal(auth_utf8_count(out, strlen(out)), 200);
        assert_int_equal(strncmp(out, local, 188), 0);
        assert_string_equal(out + 188, "'s workspace");
        /* ...at a character boundary, never inside a multi-byte character. */
        repeat_e_acute(local, 190);
        snprintf(email, sizeof(email), "%s@x.com", local);
        auth_default_tenant_name(email, out, sizeof(out));
        assert_int_equal(auth_utf8_count(out, strlen(out)), 200);
        assert_string_equal(out + 2 * 188, "'s workspace");
}

static void test_uuid_valid(void **state)
{
        (void)state;
        assert_true(auth_uuid_valid("0b7e4c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b"));
        assert_true(auth_uuid_valid("0B7E4C1A-2F3D-4E5F-8A9B-0C1D2E3F4A5B"));
        assert_false(auth_uuid_valid(NULL));
        assert_false(auth_uuid_valid(""));
        assert_false(auth_uuid_valid("0b7e4c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5"));
        assert_false(auth_uuid_valid("0b7e4c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b0"));
        assert_false(auth_uuid_valid("0b7e4c1a2f3d-4e5f-8a9b-0c1d2e3f4a5b-"));
        assert_false(auth_uuid_valid("0b7e4c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5g"));
        assert_false(auth_uuid_valid("'; select 1; --xxxxxxxxxxxxxxxxxxxxx"));
}

static void test_utf8_count(void **state)
{
        (void)state;
        assert_int_equal(auth_utf8_count("", 0), 0);
        assert_int_equal(auth_utf8_count("abc", 3), 3);
        assert_int_equal(auth_utf8_count("\xf0\x9f\x94\x91", 4), 1);  /* U+1F511 */
        assert_int_equal(auth_utf8_count("\xed\xa0\x80", 3), -1);     /* surrogate */
        assert_int_equal(auth_utf8_count("\xf4\x90\x80\x80", 4), -1); /* above U+10FFFF */
        assert_int_equal(auth_utf8_count("\xe0\x80\xaf", 3), -1);     /* overlong */
        assert_int_equal(auth_utf8_count("\xe2\x82", 2), -1);         /* truncated */
        assert_int_equal(auth_utf8_count("\x80", 1), -1);             /* stray continuation */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_email_normalize_trims_and_lowercases),
            cmocka_unit_test(test_email_normalize_bounds),
            cmocka_unit_test(test_email_valid_addresses),
            cmocka_unit_test(test_email_rejects_shape),
            cmocka_unit_test(test_email_rejects_spaces_and_controls),
            cmocka_unit_test(test_email_rejects_bad_utf8),
            cmocka_unit_test(test_password_rules),
            cmocka_unit_test(test_name_rules),
            cmocka_unit_test(test_default_tenant_name),
            cmocka_unit_test(test_uuid_valid),
            cmocka_unit_test(test_utf8_count),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
