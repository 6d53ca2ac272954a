/*
 * Unit tests of the auth service's own input rules (services/auth/validate.c):
 * password rules, the default tenant name, uuids. The shared rules (UTF-8,
 * e-mail addresses, names) are core's: tests/unit/test_text.c.
 *
 * Linked with keelson_auth_lib; the file is pure (no I/O), so nothing else
 * of the service comes with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"

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
        assert_int_equal(ks_utf8_count(out, strlen(out)), 200);
        assert_int_equal(strncmp(out, local, 188), 0);
        assert_string_equal(out + 188, "'s workspace");
        /* ...at a character boundary, never inside a multi-byte character. */
        for (size_t i = 0; i < 190; i++) {
                memcpy(local + 2 * i, "\xc3\xa9", 2); /* U+00E9 */
        }
        local[2 * 190] = '\0';
        snprintf(email, sizeof(email), "%s@x.com", local);
        auth_default_tenant_name(email, out, sizeof(out));
        assert_int_equal(ks_utf8_count(out, strlen(out)), 200);
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

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_password_rules),
            cmocka_unit_test(test_default_tenant_name),
            cmocka_unit_test(test_uuid_valid),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
