/* cors.c: the origin list and which origins are answered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cors.h"

static void test_empty_allows_none(void **state)
{
        (void)state;
        gw_cors c;
        char why[256];
        assert_int_equal(gw_cors_parse("", &c, why, sizeof(why)), 0);
        assert_false(gw_cors_allowed(&c, "https://app.example.com"));
        assert_false(gw_cors_allowed(&c, NULL));
}

static void test_list(void **state)
{
        (void)state;
        gw_cors c;
        char why[256];
        assert_int_equal(
            gw_cors_parse("https://app.example.com, http://localhost:5173", &c, why, sizeof(why)),
            0);
        assert_int_equal(c.n, 2);
        assert_true(gw_cors_allowed(&c, "https://app.example.com"));
        assert_true(gw_cors_allowed(&c, "HTTPS://APP.EXAMPLE.COM"));
        assert_true(gw_cors_allowed(&c, "http://localhost:5173"));
        assert_false(gw_cors_allowed(&c, "http://localhost:5174"));
        assert_false(gw_cors_allowed(&c, "https://app.example.com.evil.test"));
        assert_false(gw_cors_allowed(&c, "http://app.example.com")); /* another scheme */
        assert_false(gw_cors_allowed(&c, "null"));
        assert_false(gw_cors_allowed(&c, NULL));
}

static void test_any(void **state)
{
        (void)state;
        gw_cors c;
        char why[256];
        assert_int_equal(gw_cors_parse("*", &c, why, sizeof(why)), 0);
        assert_true(c.any);
        assert_true(gw_cors_allowed(&c, "https://whoever.example"));
        assert_false(gw_cors_allowed(&c, "null")); /* not an origin a page of a site has */
        assert_false(gw_cors_allowed(&c, "https://a.example/path"));
}

static void test_rejects(void **state)
{
        (void)state;
        gw_cors c;
        char why[256];
        const char *bad[] = {
            "app.example.com",     "https://app.example.com/", "https://",
            "ftp://files.example", "https://a.example,,",      "https://a.example, *",
            "https://a b.example", "https://a.example/x"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                why[0] = '\0';
                assert_int_equal(gw_cors_parse(bad[i], &c, why, sizeof(why)), -1);
                assert_true(why[0] != '\0');
        }
        char many[GW_CORS_ORIGINS_MAX * 32] = "";
        for (int i = 0; i <= GW_CORS_ORIGINS_MAX; i++) {
                strcat(many, i == 0 ? "https://a.example" : ",https://a.example");
        }
        assert_int_equal(gw_cors_parse(many, &c, why, sizeof(why)), -1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_empty_allows_none),
            cmocka_unit_test(test_list),
            cmocka_unit_test(test_any),
            cmocka_unit_test(test_rejects),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
