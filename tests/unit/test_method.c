/*
 * Unit tests of ks_method: a methods.def table checked against its
 * protobuf-c descriptor (a row the .proto lacks, a method without a row, a
 * row twice, a public method with a bearer are all refused), what a whole
 * method carries, and the caller checks the RPC server makes before a
 * handler (bearer kind, unauthenticated callers, caller-optional methods).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "keelson/summary/v1/summary.pb-c.h"
#include "ks_code.h"
#include "ks_method.h"

static int handler(ks_call *call)
{
        (void)call;
        return KS_OK;
}

#define SUMMARY (&keelson__summary__v1__admin_summary_service__descriptor)

static void test_resolve_fills_from_the_descriptor(void **state)
{
        static const ks_method_row rows[] = {KS_METHOD_ROW(
            GetSummary, handler, KS_M_IDEMPOTENT, KS_BEARER_ANY, 1u << 3, KS_REVOKES_USER)};
        const ks_method_table t = {SUMMARY, rows, 1};
        ks_method *v = NULL;
        size_t n = 0;
        char err[256] = "";

        (void)state;
        assert_int_equal(ks_method_resolve(&t, &v, &n, err, sizeof(err)), 0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].name, "keelson.summary.v1.AdminSummaryService/GetSummary");
        assert_ptr_equal(v[0].input, &keelson__summary__v1__get_summary_request__descriptor);
        assert_ptr_equal(v[0].output, &keelson__summary__v1__get_summary_response__descriptor);
        assert_ptr_equal(v[0].handler, handler);
        assert_int_equal(v[0].flags, KS_M_IDEMPOTENT);
        assert_int_equal(v[0].bearer, KS_BEARER_ANY);
        assert_int_equal(v[0].permission, 1u << 3);
        assert_int_equal(v[0].revokes, KS_REVOKES_USER);
        assert_ptr_equal(ks_method_find(v, n, "keelson.summary.v1.AdminSummaryService/GetSummary"),
                         &v[0]);
        assert_null(ks_method_find(v, n, "keelson.summary.v1.AdminSummaryService/getsummary"));
        ks_method_free(v, n);
}

/* Resolves rows[0..n) and expects a refusal whose message holds want. */
static void expect_refused(const ks_method_row *rows, size_t n_rows, const char *want)
{
        const ks_method_table t = {SUMMARY, rows, n_rows};
        ks_method *v = (ks_method *)1;
        size_t n = 99;
        char err[256] = "";

        assert_int_equal(ks_method_resolve(&t, &v, &n, err, sizeof(err)), -1);
        assert_null(v);
        assert_int_equal(n, 0);
        if (strstr(err, want) == NULL) {
                fail_msg("expected \"%s\" in \"%s\"", want, err);
        }
}

static void test_a_method_without_a_row_is_refused(void **state)
{
        (void)state;
        expect_refused(NULL, 0, "no row for GetSummary");
}

static void test_a_row_the_proto_lacks_is_refused(void **state)
{
        static const ks_method_row rows[] = {
            KS_METHOD_ROW(GetSummary, handler, 0, KS_BEARER_ANY, 0, KS_REVOKES_NONE)
                KS_METHOD_ROW(GetSumary, handler, 0, KS_BEARER_ANY, 0, KS_REVOKES_NONE)};

        (void)state;
        expect_refused(rows, 2, "a row for GetSumary, which the .proto does not have");
}

static void test_a_row_twice_is_refused(void **state)
{
        static const ks_method_row rows[] = {
            KS_METHOD_ROW(GetSummary, handler, 0, KS_BEARER_ANY, 0, KS_REVOKES_NONE) KS_METHOD_ROW(
                GetSummary, handler, KS_M_IDEMPOTENT, KS_BEARER_ANY, 0, KS_REVOKES_NONE)};

        (void)state;
        expect_refused(rows, 2, "two rows for GetSummary");
}

static void test_public_and_bearer_must_agree(void **state)
{
        static const ks_method_row public_with_bearer[] = {
            KS_METHOD_ROW(GetSummary, handler, KS_M_PUBLIC, KS_BEARER_ANY, 0, KS_REVOKES_NONE)};
        static const ks_method_row private_without[] = {
            KS_METHOD_ROW(GetSummary, handler, 0, KS_BEARER_NONE, 0, KS_REVOKES_NONE)};

        (void)state;
        expect_refused(public_with_bearer, 1, "public methods, and only they, need no bearer");
        expect_refused(private_without, 1, "public methods, and only they, need no bearer");
}

static int admits(unsigned flags, ks_bearer bearer, const ks_caller *c, char *msg)
{
        const ks_method m = {.name = "x/Y", .flags = flags, .bearer = bearer};

        msg[0] = '\0';
        return ks_method_admits(&m, c, msg, 128);
}

static void test_admits_by_bearer(void **state)
{
        ks_caller anonymous = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        ks_caller session = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        ks_caller key = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        char msg[128];

        (void)state;
        session.authenticated = 1;
        session.user_id = "u";
        key.authenticated = 1;
        key.api_key_id = "k";
        /* public: anyone */
        assert_int_equal(admits(KS_M_PUBLIC, KS_BEARER_NONE, &anonymous, msg), KS_OK);
        /* any bearer: a session or a key, never nobody */
        assert_int_equal(admits(0, KS_BEARER_ANY, &session, msg), KS_OK);
        assert_int_equal(admits(0, KS_BEARER_ANY, &key, msg), KS_OK);
        assert_int_equal(admits(0, KS_BEARER_ANY, &anonymous, msg), KS_UNAUTHENTICATED);
        assert_string_equal(msg, "authentication required");
        /* a user's session only */
        assert_int_equal(admits(0, KS_BEARER_USER, &session, msg), KS_OK);
        assert_int_equal(admits(0, KS_BEARER_USER, &key, msg), KS_PERMISSION_DENIED);
        assert_string_equal(msg, "this method needs a user session");
        /* caller optional: a token that did not resolve reaches the handler */
        assert_int_equal(admits(KS_M_CALLER_OPTIONAL, KS_BEARER_USER, &anonymous, msg), KS_OK);
        assert_int_equal(admits(KS_M_CALLER_OPTIONAL, KS_BEARER_USER, &key, msg),
                         KS_PERMISSION_DENIED);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_resolve_fills_from_the_descriptor),
            cmocka_unit_test(test_a_method_without_a_row_is_refused),
            cmocka_unit_test(test_a_row_the_proto_lacks_is_refused),
            cmocka_unit_test(test_a_row_twice_is_refused),
            cmocka_unit_test(test_public_and_bearer_must_agree),
            cmocka_unit_test(test_admits_by_bearer),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
