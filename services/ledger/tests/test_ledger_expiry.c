/*
 * The sweeper's scan for tenants with due pending transfers
 * (services/ledger/expiry.c, lg_expiry_due_tenants_sql), against a throwaway
 * PostgreSQL with the ledger's migrations, as the sweeper runs it: prepared,
 * with a generic plan, as keelson_ledger_sweeper. It finds the tenant whose
 * pending transfer is due and no other; and with many pending transfers not
 * yet due it reads a handful of pages, not every one of them (a "now" the
 * index cannot be bounded by read all 100,000 at each pass, 50 ms).
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

#include "ledger.h"
#include "pg_db.h"

#define NOT_DUE   20000
#define PAGES_MAX 20 /* the scan's shared buffers; reading every entry took 287 */
#define DUE       "00000000-0000-4000-8000-00000000d0e0"

static pg_cluster g_pg;
static PGconn *g_conn;

static int setup(void **state)
{
        (void)state;
        return pg_db_start(&g_pg, "ledger", ks_service_migrations, ks_service_migrations_n,
                           &g_conn);
}

static int teardown(void **state)
{
        (void)state;
        pg_db_stop(&g_pg, g_conn);
        return 0;
}

static void test_due_scan_is_bounded(void **state)
{
        char sql[1024], prep[1100];

        (void)state;
        /* Pending transfers due in an hour, of many tenants; one of DUE's, a second ago. */
        snprintf(sql, sizeof(sql),
                 "INSERT INTO ledger.pending_transfers (tenant_id, id, status, expires_at_ns)"
                 " SELECT gen_random_uuid(), gen_random_uuid(), 1,"
                 " (extract(epoch FROM clock_timestamp()) * 1e9)::int8 + 3600000000000 + g"
                 " FROM generate_series(1, %d) g",
                 NOT_DUE);
        pg_db_exec_ok(g_conn, sql);
        pg_db_exec_ok(g_conn,
                      "INSERT INTO ledger.pending_transfers (tenant_id, id, status, expires_at_ns)"
                      " VALUES ('" DUE "', gen_random_uuid(), 1,"
                      " (extract(epoch FROM clock_timestamp()) * 1e9)::int8 - 1000000000)");
        /* The service's session: generic plans, prepared once (ks_pg_prepared.c). */
        pg_db_exec_ok(g_conn, "SET plan_cache_mode = force_generic_plan");
        pg_db_exec_ok(g_conn, "BEGIN READ ONLY");
        pg_db_exec_ok(g_conn, "SET LOCAL ROLE keelson_ledger_sweeper");
        lg_expiry_due_tenants_sql(sql, sizeof(sql), 64);
        snprintf(prep, sizeof(prep), "PREPARE due AS %s", sql);
        pg_db_exec_ok(g_conn, prep);

        PGresult *r = PQexec(g_conn, "EXECUTE due");
        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(r), 1);
        assert_string_equal(PQgetvalue(r, 0, 0), DUE);
        PQclear(r);

        long long pages = pg_db_pages(g_conn, "EXECUTE due");
        if (pages > PAGES_MAX) {
                fail_msg("the due scan read %lld pages beside %d pending transfers not due", pages,
                         NOT_DUE);
        }
        pg_db_exec_ok(g_conn, "COMMIT");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_due_scan_is_bounded),
        };
        return cmocka_run_group_tests_name("ledger_expiry", tests, setup, teardown);
}
