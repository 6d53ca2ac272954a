/*
 * auth.housekeeping (migrations 003 and 011) against a throwaway PostgreSQL
 * with auth's migrations: beside 20,000 live sessions it finds the stale ones
 * (expired, or revoked, past the keep period) by index, with no sequential
 * scan of auth.sessions, and deletes exactly those.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "pg_db.h"

#define LIVE   20000
#define TENANT "'00000000-0000-4000-8000-0000000000a1'"
#define USER   "'00000000-0000-4000-8000-0000000000b1'"

static pg_cluster g_pg;
static PGconn *g_conn;

static int setup(void **state)
{
        (void)state;
        return pg_db_start(&g_pg, "auth", ks_service_migrations, ks_service_migrations_n, &g_conn);
}

static int teardown(void **state)
{
        (void)state;
        pg_db_stop(&g_pg, g_conn);
        return 0;
}

static void test_stale_sessions_found_by_index(void **state)
{
        char sql[512];

        (void)state;
        pg_db_exec_ok(g_conn, "INSERT INTO auth.tenants (id, name) VALUES"
                              " (" TENANT ", 'T')");
        pg_db_exec_ok(g_conn, "INSERT INTO auth.users (id, email, password_hash) VALUES"
                              " (" USER ", 'u@example.test', 'x')");
        /* Live sessions, then one expired and one revoked two days ago, one revoked now. */
        snprintf(sql, sizeof(sql),
                 "INSERT INTO auth.sessions (token_sha256, user_id, tenant_id, created_at,"
                 " expires_at, revoked_at) SELECT sha256(g::text::bytea),"
                 " " USER ", " TENANT ","
                 " now() - interval '1 hour', now() + interval '7 days', NULL"
                 " FROM generate_series(1, %d) g",
                 LIVE);
        pg_db_exec_ok(g_conn, sql);
        pg_db_exec_ok(g_conn,
                      "INSERT INTO auth.sessions (token_sha256, user_id, tenant_id, created_at,"
                      " expires_at, revoked_at) VALUES"
                      " (sha256('expired'), " USER ","
                      " " TENANT ", now() - interval '9 days',"
                      " now() - interval '2 days', NULL),"
                      " (sha256('revoked'), " USER ","
                      " " TENANT ", now() - interval '3 days',"
                      " now() + interval '4 days', now() - interval '2 days'),"
                      " (sha256('revoked now'), " USER ","
                      " " TENANT ", now() - interval '1 hour',"
                      " now() + interval '7 days', now())");
        pg_db_exec_ok(g_conn, "ANALYZE auth.sessions");

        /* A day kept; the counts of this transaction's scans are its own. */
        pg_db_exec_ok(g_conn, "BEGIN");
        assert_int_equal(pg_db_value(g_conn, "SELECT auth.housekeeping(86400, 86400, 1000)"), 2);
        assert_int_equal(pg_db_value(g_conn,
                                     "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = "
                                     "'auth.sessions'::regclass"),
                         0);
        pg_db_exec_ok(g_conn, "COMMIT");
        assert_int_equal(pg_db_value(g_conn, "SELECT count(*) FROM auth.sessions"), LIVE + 1);
        assert_int_equal(pg_db_value(g_conn,
                                     "SELECT count(*) FROM auth.sessions WHERE token_sha256 IN"
                                     " (sha256('expired'), sha256('revoked'))"),
                         0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_stale_sessions_found_by_index),
        };
        return cmocka_run_group_tests_name("auth_housekeeping", tests, setup, teardown);
}
