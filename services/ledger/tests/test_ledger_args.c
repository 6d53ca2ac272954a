/*
 * The ledger's binary array parameters (db.c) against a real PostgreSQL:
 * every value the builder encodes must read back, through the server's own
 * text output, exactly as the text forms of u128.c write it. Covers the
 * numeric edge cases (zero, digit groups with zeros inside and at the end,
 * 2^64, 2^128 - 1), empty arrays, a text scalar beside the arrays, and
 * misuse (an item of the wrong type, an unclosed array) refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <libpq-fe.h>
#include <stdio.h>

#include "ledger.h"
#include "pg_db.h"

static pg_cluster g_pg;
static PGconn *g_conn;

static int setup(void **state)
{
        (void)state;
        return pg_db_start(&g_pg, "ledger", NULL, 0, &g_conn);
}

static int teardown(void **state)
{
        (void)state;
        pg_db_stop(&g_pg, g_conn);
        return 0;
}

/* Runs sql with the built parameters; returns the result (checked TUPLES_OK). */
static PGresult *run(const char *sql, lg_args *a)
{
        lg_param p[LG_PARAMS_MAX];
        int n = lg_args_params(a, p);
        assert_true(n > 0);
        const char *values[LG_PARAMS_MAX];
        int lengths[LG_PARAMS_MAX], formats[LG_PARAMS_MAX];
        Oid types[LG_PARAMS_MAX];
        for (int i = 0; i < n; i++) {
                values[i] = p[i].value;
                lengths[i] = p[i].length;
                formats[i] = p[i].format;
                types[i] = p[i].type;
        }
        PGresult *r = PQexecParams(g_conn, sql, n, types, values, lengths, formats, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                fail_msg("%s", PQresultErrorMessage(r));
        }
        return r;
}

static u128 pow10_u128(int e)
{
        u128 v = 1;
        while (e-- > 0) {
                v *= 10;
        }
        return v;
}

static void test_values_read_back_exactly(void **state)
{
        (void)state;
        const u128 values[] = {
            0,
            1,
            9999,
            10000,
            10001,
            100000000,           /* 10^8: two zero groups at the end */
            100000001,           /* zeros inside */
            12345678900000000ul, /* trailing zero groups */
            ((u128)1 << 64) - 1,
            (u128)1 << 64,
            pow10_u128(38),
            U128_MAX,
            lg_u128(0x0123456789abcdefull, 0xfedcba9876543210ull),
        };
        const size_t n = sizeof(values) / sizeof(values[0]);
        const int64_t ints[] = {0, 1, -1, INT64_MAX, INT64_MIN, 65535};
        lg_args a = {0};

        lg_args_reset(&a);
        lg_args_text(&a, "a scalar beside the arrays");
        lg_args_array_begin(&a, LG_ELEM_UUID);
        for (size_t i = 0; i < n; i++) {
                lg_args_array_uuid(&a, values[i]);
        }
        lg_args_array_end(&a);
        lg_args_array_begin(&a, LG_ELEM_NUMERIC);
        for (size_t i = 0; i < n; i++) {
                lg_args_array_dec(&a, values[i]);
        }
        lg_args_array_end(&a);
        lg_args_array_begin(&a, LG_ELEM_INT8);
        for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
                lg_args_array_i64(&a, ints[i]);
        }
        lg_args_array_end(&a);

        PGresult *r = run("SELECT $1::text, u::text, d::text, NULL FROM unnest($2::uuid[],"
                          " $3::numeric[]) AS x(u, d)"
                          " UNION ALL SELECT NULL, NULL, NULL, i::text FROM unnest($4::int8[]) i",
                          &a);
        assert_int_equal(PQntuples(r), (int)(n + sizeof(ints) / sizeof(ints[0])));
        for (size_t i = 0; i < n; i++) {
                char uuid[LG_UUID_LEN + 1], dec[LG_DEC128_LEN + 1];
                lg_u128_to_uuid(values[i], uuid);
                lg_u128_to_dec(values[i], dec);
                assert_string_equal(PQgetvalue(r, (int)i, 0), "a scalar beside the arrays");
                assert_string_equal(PQgetvalue(r, (int)i, 1), uuid);
                assert_string_equal(PQgetvalue(r, (int)i, 2), dec);
        }
        for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
                char want[32];
                snprintf(want, sizeof(want), "%lld", (long long)ints[i]);
                assert_string_equal(PQgetvalue(r, (int)(n + i), 3), want);
        }
        PQclear(r);
        lg_args_fini(&a);
}

static void test_empty_arrays_and_casts(void **state)
{
        (void)state;
        lg_args a = {0};

        lg_args_reset(&a);
        lg_args_array_begin(&a, LG_ELEM_UUID);
        lg_args_array_end(&a);
        lg_args_array_begin(&a, LG_ELEM_NUMERIC);
        lg_args_array_end(&a);
        /* integers travel as int8[]; a statement may cast them narrower */
        lg_args_array_begin(&a, LG_ELEM_INT8);
        lg_args_array_i64(&a, 7);
        lg_args_array_end(&a);
        PGresult *r = run("SELECT cardinality($1::uuid[]), cardinality($2::numeric[]),"
                          " ($3::int4[])[1] + 1",
                          &a);
        assert_string_equal(PQgetvalue(r, 0, 0), "0");
        assert_string_equal(PQgetvalue(r, 0, 1), "0");
        assert_string_equal(PQgetvalue(r, 0, 2), "8");
        PQclear(r);
        lg_args_fini(&a);
}

static void test_misuse_is_refused(void **state)
{
        (void)state;
        lg_args a = {0};
        lg_param p[LG_PARAMS_MAX];

        lg_args_reset(&a);
        lg_args_array_begin(&a, LG_ELEM_UUID);
        lg_args_array_dec(&a, 1); /* not a uuid */
        lg_args_array_end(&a);
        assert_int_equal(lg_args_params(&a, p), -1);

        lg_args_reset(&a);
        lg_args_array_begin(&a, LG_ELEM_INT8);
        assert_int_equal(lg_args_params(&a, p), -1); /* still open */

        lg_args_reset(&a);
        lg_args_array_i64(&a, 1); /* outside any array */
        assert_int_equal(lg_args_params(&a, p), -1);

        lg_args_reset(&a); /* and the buffer is usable again */
        lg_args_text(&a, "x");
        assert_int_equal(lg_args_params(&a, p), 1);
        assert_int_equal(p[0].format, 0);
        assert_string_equal(p[0].value, "x");
        lg_args_fini(&a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_values_read_back_exactly),
            cmocka_unit_test(test_empty_arrays_and_casts),
            cmocka_unit_test(test_misuse_is_refused),
        };
        return cmocka_run_group_tests_name("ledger_args", tests, setup, teardown);
}
