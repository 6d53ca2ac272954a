/*
 * Unit tests of ks_pg against a real, throwaway PostgreSQL cluster
 * (support/pg_cluster.h): started on a free loopback port and removed at the
 * end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_pg.h"
#include "ks_pg_login.h"
#include "pg_cluster.h"

/* ---- the throwaway cluster ---------------------------------------------- */

static pg_cluster pg;

static int cluster_start(void **state)
{
        (void)state;
        return pg_cluster_start(&pg);
}

static int cluster_stop(void **state)
{
        (void)state;
        pg_cluster_stop(&pg);
        return 0;
}

/* ---- helpers ------------------------------------------------------------- */

static PGconn *admin(void)
{
        PGconn *c = PQconnectdb(pg.dsn);
        assert_int_equal(PQstatus(c), CONNECTION_OK);
        return c;
}

/* The first column of the first row of a query that must succeed, copied out. */
static void query_value(PGconn *c, const char *sql, char *out, size_t len)
{
        PGresult *res = NULL;
        assert_int_equal(ks_pg_exec(c, "test", sql, 0, NULL, &res), KS_OK);
        assert_int_equal(PQntuples(res), 1);
        snprintf(out, len, "%s", PQgetisnull(res, 0, 0) ? "(null)" : PQgetvalue(res, 0, 0));
        PQclear(res);
}

static ks_pg_pool *pool_new(const char *dsn, int size, int timeout_ms)
{
        ks_pg_pool *pool = NULL;
        ks_pg_pool_options o = {.dsn = dsn,
                                .application_name = "keelson-test",
                                .size = size,
                                .acquire_timeout_ms = timeout_ms,
                                .statement_timeout_ms = 1500};
        assert_int_equal(ks_pg_pool_new(&pool, &o), KS_OK);
        return pool;
}

/* ---- pool ---------------------------------------------------------------- */

static void test_pool_options_rejected(void **state)
{
        (void)state;
        ks_pg_pool *pool = NULL;
        ks_pg_pool_options o = {.dsn = pg.dsn, .size = 0, .acquire_timeout_ms = 10};
        assert_int_equal(ks_pg_pool_new(&pool, &o), KS_INVALID_ARGUMENT);
        o.size = 1;
        o.acquire_timeout_ms = -1;
        assert_int_equal(ks_pg_pool_new(&pool, &o), KS_INVALID_ARGUMENT);
        o.acquire_timeout_ms = 10;
        o.dsn = NULL;
        assert_int_equal(ks_pg_pool_new(&pool, &o), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_pg_pool_new(&pool, NULL), KS_INVALID_ARGUMENT);
        ks_pg_pool_free(NULL);
}

static void test_pool_acquire_release(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.uri, 2, 1000);
        PGconn *a = NULL, *b = NULL;
        char v[128];

        assert_int_equal(ks_pg_acquire(pool, &a), KS_OK);
        assert_int_equal(ks_pg_acquire(pool, &b), KS_OK);
        assert_ptr_not_equal(a, b);
        query_value(a, "SELECT current_setting('application_name')", v, sizeof(v));
        assert_string_equal(v, "keelson-test");
        query_value(b, "SELECT current_setting('statement_timeout')", v, sizeof(v));
        assert_string_equal(v, "1500ms");
        /* JIT compilation is off by default (ks_pg.c says why). */
        query_value(a, "SELECT current_setting('jit')", v, sizeof(v));
        assert_string_equal(v, "off");
        ks_pg_release(pool, a);
        ks_pg_release(pool, b);

        /* A connection released inside a transaction comes back rolled back. */
        assert_int_equal(ks_pg_acquire(pool, &a), KS_OK);
        assert_int_equal(ks_pg_exec(a, "t", "CREATE TABLE pool_rb (x int)", 0, NULL, NULL), KS_OK);
        assert_int_equal(ks_pg_begin(a, "t"), KS_OK);
        assert_int_equal(ks_pg_exec(a, "t", "INSERT INTO pool_rb VALUES (1)", 0, NULL, NULL),
                         KS_OK);
        ks_pg_release(pool, a);
        assert_int_equal(ks_pg_acquire(pool, &a), KS_OK);
        assert_int_equal(PQtransactionStatus(a), PQTRANS_IDLE);
        query_value(a, "SELECT count(*) FROM pool_rb", v, sizeof(v));
        assert_string_equal(v, "0");
        assert_int_equal(ks_pg_exec(a, "t", "DROP TABLE pool_rb", 0, NULL, NULL), KS_OK);
        ks_pg_release(pool, a);

        assert_int_equal(ks_pg_ping(pool), 0);
        ks_pg_pool_free(pool);
}

static void test_acquire_timeout(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 100);
        PGconn *a = NULL, *b = NULL;

        assert_int_equal(ks_pg_acquire(pool, &a), KS_OK);
        assert_int_equal(ks_pg_acquire(pool, &b), KS_UNAVAILABLE);
        assert_null(b);
        assert_int_equal(ks_pg_ping(pool), -1);
        ks_pg_release(pool, a);
        assert_int_equal(ks_pg_acquire(pool, &b), KS_OK);
        assert_ptr_equal(a, b);
        ks_pg_release(pool, b);
        ks_pg_pool_free(pool);
}

typedef struct waiter {
        ks_pg_pool *pool;
        int rv;
} waiter;

static void *acquire_and_release(void *p)
{
        waiter *w = p;
        PGconn *c = NULL;
        w->rv = ks_pg_acquire(w->pool, &c);
        if (w->rv == KS_OK) {
                w->rv = ks_pg_exec(c, "t", "SELECT 1", 0, NULL, NULL);
                ks_pg_release(w->pool, c);
        }
        return NULL;
}

static void test_waiter_gets_released_connection(void **state)
{
        (void)state;
        /* A generous timeout: the waiter must be woken by the release, not time out. */
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 30000);
        PGconn *a = NULL;
        waiter w[3];
        pthread_t t[3];

        assert_int_equal(ks_pg_acquire(pool, &a), KS_OK);
        for (int i = 0; i < 3; i++) {
                w[i] = (waiter){.pool = pool, .rv = -1};
                assert_int_equal(pthread_create(&t[i], NULL, acquire_and_release, &w[i]), 0);
        }
        ks_pg_release(pool, a);
        for (int i = 0; i < 3; i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(w[i].rv, KS_OK);
        }
        ks_pg_pool_free(pool);
}

static void test_unreachable_database(void **state)
{
        (void)state;
        char dsn[128];
        int port = pg_cluster_free_port();
        snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d user=postgres connect_timeout=2", port);
        ks_pg_pool *pool = pool_new(dsn, 1, 100);
        PGconn *c = NULL;
        assert_int_equal(ks_pg_acquire(pool, &c), KS_UNAVAILABLE);
        assert_null(c);
        /* The slot went back: the next try fails the same way, not by timeout only. */
        assert_int_equal(ks_pg_acquire(pool, &c), KS_UNAVAILABLE);
        assert_int_equal(ks_pg_ping(pool), -1);
        ks_pg_pool_free(pool);
}

static void terminate(PGconn *adm, int pid)
{
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d, 10000)", pid);
        PGresult *res = PQexec(adm, sql);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_string_equal(PQgetvalue(res, 0, 0), "t");
        PQclear(res);
}

static void test_killed_idle_backend(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *adm = admin();
        PGconn *c = NULL;

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        int pid = PQbackendPID(c);
        ks_pg_release(pool, c);
        terminate(adm, pid);

        /* Killed while idle in the pool: found out and reset before it is handed out. */
        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "SELECT 1", 0, NULL, NULL), KS_OK);
        assert_int_not_equal(PQbackendPID(c), pid);
        char v[64];
        query_value(c, "SELECT current_setting('statement_timeout')", v, sizeof(v));
        assert_string_equal(v, "1500ms");
        ks_pg_release(pool, c);

        PQfinish(adm);
        ks_pg_pool_free(pool);
}

static void test_killed_backend_in_use(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *adm = admin();
        PGconn *c = NULL;
        PGresult *res = (PGresult *)1;

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        int pid = PQbackendPID(c);
        terminate(adm, pid);
        /* The caller sees "try again", not an internal error. */
        assert_int_equal(ks_pg_exec(c, "t", "SELECT 1", 0, NULL, &res), KS_UNAVAILABLE);
        assert_null(res);
        ks_pg_release(pool, c);

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "SELECT 1", 0, NULL, NULL), KS_OK);
        assert_int_not_equal(PQbackendPID(c), pid);
        ks_pg_release(pool, c);

        PQfinish(adm);
        ks_pg_pool_free(pool);
}

/* ---- prepared statements ------------------------------------------------- */

/* How many of this session's prepared statements have exactly this text. */
static long prepared_count(PGconn *c, const char *sql)
{
        const char *params[1] = {sql};
        PGresult *res =
            PQexecParams(c, "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", 1,
                         NULL, params, NULL, NULL, 0);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return n;
}

static void test_prepared_once_per_connection(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *adm = admin();
        PGconn *c = NULL;
        const char *sql = "SELECT $1::int + 1";
        const char *two[] = {"2"};
        char v[32];

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        for (int i = 0; i < 3; i++) {
                PGresult *res = NULL;
                assert_int_equal(ks_pg_exec(c, "t", sql, 1, two, &res), KS_OK);
                assert_string_equal(PQgetvalue(res, 0, 0), "3");
                PQclear(res);
        }
        /* Prepared the first time, executed by name after: one statement on the server. */
        assert_int_equal(prepared_count(c, sql), 1);
        /* Every pool connection plans generically from the first execution. */
        query_value(c, "SHOW plan_cache_mode", v, sizeof(v));
        assert_string_equal(v, "force_generic_plan");

        /* A new server session knows none of the names: the cache starts again. */
        int pid = PQbackendPID(c);
        ks_pg_release(pool, c);
        terminate(adm, pid);
        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_not_equal(PQbackendPID(c), pid);
        PGresult *res = NULL;
        assert_int_equal(ks_pg_exec(c, "t", sql, 1, two, &res), KS_OK);
        assert_string_equal(PQgetvalue(res, 0, 0), "3");
        PQclear(res);
        assert_int_equal(prepared_count(c, sql), 1);
        ks_pg_release(pool, c);

        PQfinish(adm);
        ks_pg_pool_free(pool);
}

/* Statements are told apart by their text, not by where it lives. */
static void test_prepared_by_text(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *c = NULL;
        char sql[64];

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        for (int round = 0; round < 2; round++) {
                for (int i = 0; i < 5; i++) {
                        char v[16], want[16];
                        snprintf(sql, sizeof(sql), "SELECT %d", i);
                        query_value(c, sql, v, sizeof(v));
                        snprintf(want, sizeof(want), "%d", i);
                        assert_string_equal(v, want);
                }
        }
        /* More distinct statements than a connection caches: the rest run unprepared. */
        for (int i = 0; i < KS_PG_PREPARED_MAX + 20; i++) {
                char v[16], want[16];
                snprintf(sql, sizeof(sql), "SELECT %d + 1000", i);
                query_value(c, sql, v, sizeof(v));
                snprintf(want, sizeof(want), "%d", i + 1000);
                assert_string_equal(v, want);
        }
        char n[16];
        query_value(c, "SELECT count(*) FROM pg_prepared_statements", n, sizeof(n));
        assert_int_equal(strtol(n, NULL, 10), KS_PG_PREPARED_MAX);
        ks_pg_release(pool, c);
        ks_pg_pool_free(pool);
}

/*
 * A table that changes shape under a prepared SELECT *: the execution after
 * the change fails as a conflict (the server refuses a cached plan whose
 * result changed), and the next one is prepared again and sees the new
 * column.
 */
static void test_prepared_schema_change(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *adm = admin();
        PGconn *c = NULL;
        PGresult *res = NULL;
        const char *sql = "SELECT * FROM shape";

        PQclear(PQexec(adm, "DROP TABLE IF EXISTS shape"));
        PQclear(PQexec(adm, "CREATE TABLE shape (a int); INSERT INTO shape VALUES (1)"));
        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", sql, 0, NULL, &res), KS_OK);
        assert_int_equal(PQnfields(res), 1);
        PQclear(res);

        PGresult *alter = PQexec(adm, "ALTER TABLE shape ADD COLUMN b int DEFAULT 7");
        assert_int_equal(PQresultStatus(alter), PGRES_COMMAND_OK);
        PQclear(alter);
        /* Reported as a conflict to retry, which is what the next call does. */
        assert_int_equal(ks_pg_exec(c, "t", sql, 0, NULL, &res), KS_ABORTED);
        assert_null(res);
        assert_int_equal(ks_pg_exec(c, "t", sql, 0, NULL, &res), KS_OK);
        assert_int_equal(PQnfields(res), 2);
        assert_string_equal(PQgetvalue(res, 0, 1), "7");
        PQclear(res);
        ks_pg_release(pool, c);

        PQclear(PQexec(adm, "DROP TABLE shape"));
        PQfinish(adm);
        ks_pg_pool_free(pool);
}

/* A statement that cannot be prepared fails with its own error, inside a transaction too. */
static void test_prepare_failure_reported(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *c = NULL;
        PGresult *res = (PGresult *)1;
        PGresult *failed = NULL;

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_null(ks_pg_prepared(c, "SELECT * FROM no_such_table", 0, NULL, &failed));
        assert_non_null(failed);
        assert_string_equal(ks_pg_sqlstate(failed), "42P01");
        PQclear(failed);
        ks_pg_rollback(c);
        assert_int_equal(ks_pg_exec(c, "t", "SELECT * FROM no_such_table", 0, NULL, &res),
                         KS_INTERNAL);
        assert_null(res);
        /* Not a pool connection: no cache, the statement runs unprepared. */
        PGconn *plain = admin();
        assert_null(ks_pg_prepared(plain, "SELECT 1", 0, NULL, &failed));
        assert_null(failed);
        PQfinish(plain);
        ks_pg_release(pool, c);
        ks_pg_pool_free(pool);
}

/* ---- pipelines ------------------------------------------------------------ */

/* ks_pg_int, ks_pg_text, ks_pg_bool on what the server writes, the limits and NULL included. */
static void test_pg_values(void **state)
{
        (void)state;
        PGconn *c = admin();
        PGresult *res = NULL;

        assert_int_equal(
            ks_pg_exec(c, "test",
                       "SELECT 0::int8, '-1'::int8, 123456789012345678::int8,"
                       " '-999999999999999999'::int8, 9223372036854775807::int8,"
                       " '-9223372036854775808'::int8, NULL::int8, 42::int4, ' 12'::text,"
                       " '12abc'::text, '-'::text, NULL::text, true, NULL::bool",
                       0, NULL, &res),
            KS_OK);
        assert_int_equal(ks_pg_int(res, 0, 0), 0);
        assert_int_equal(ks_pg_int(res, 0, 1), -1);
        assert_int_equal(ks_pg_int(res, 0, 2), 123456789012345678LL);
        assert_int_equal(ks_pg_int(res, 0, 3), -999999999999999999LL);
        assert_int_equal(ks_pg_int(res, 0, 4), INT64_MAX);
        assert_int_equal(ks_pg_int(res, 0, 5), INT64_MIN);
        assert_int_equal(ks_pg_int(res, 0, 6), 0);
        assert_int_equal(ks_pg_int(res, 0, 7), 42);
        assert_int_equal(ks_pg_int(res, 0, 8), 12); /* as strtoll reads it */
        assert_int_equal(ks_pg_int(res, 0, 9), 12);
        assert_int_equal(ks_pg_int(res, 0, 10), 0);
        assert_string_equal(ks_pg_text(res, 0, 11), "");
        assert_true(ks_pg_bool(res, 0, 12));
        assert_false(ks_pg_bool(res, 0, 13));
        PQclear(res);
        PQfinish(c);
}

/* The form over arrays of a one-row insert: its text, what it refuses, and its rows in a table. */
static void test_rows_sql(void **state)
{
        (void)state;
        char *s = ks_pg_rows_sql("INSERT INTO t (a, b) VALUES ($1::int8, NULLIF($2, '')::uuid)", 2);

        assert_non_null(s);
        assert_string_equal(s, "INSERT INTO t (a, b) SELECT r.c1::int8, NULLIF(r.c2, '')::uuid"
                               " FROM unnest($1::text[], $2::text[]) AS r(c1, c2)");
        free(s);
        /* Not a one-row insert ending with its tuple, or a parameter out of range. */
        const char *refused[] = {
            "UPDATE t SET a = $1",
            "INSERT INTO t (a) VALUES ($1) RETURNING a",
            "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING",
            "INSERT INTO t (a) VALUES ($1), ($2)",
            "INSERT INTO t (a) VALUES ($3)",
            "INSERT INTO t (a) VALUES ($0)",
            "INSERT INTO t (a) VALUES ('$1)",
            "INSERT INTO t (a) SELECT $1",
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                assert_null(ks_pg_rows_sql(refused[i], 2));
        }
        assert_null(ks_pg_rows_sql("INSERT INTO t (a) VALUES ($1)", 0));

        /* Three rows through the arrays: NULLs, quotes, backslashes, commas, a literal holding
         * "$1" (not a parameter), a parameter read twice: the same rows as one by one. */
        PGconn *c = admin();
        PGresult *res = NULL;
        const char *one = "INSERT INTO rows_t (k, n, s, b, u, note, m) VALUES ($1::int4, $2::int8,"
                          " $3, $4::bool, NULLIF($5, '')::uuid, 'it''s $1', $2::int8 - 1)";
        assert_int_equal(ks_pg_exec(c, "test",
                                    "CREATE TABLE rows_t (k int4, n int8, s text, b bool, u uuid,"
                                    " note text, m int8)",
                                    0, NULL, NULL),
                         KS_OK);
        const char *rows[3][5] = {{"1", "-5", "plain", "t", ""},
                                  {"2", "9223372036854775807", "a \"quoted\", \\ and {}", "f",
                                   "0190a5c4-1b2c-7d3e-8f40-123456789abc"},
                                  {"3", "0", NULL, "t", ""}};
        for (int i = 0; i < 3; i++) {
                assert_int_equal(ks_pg_exec(c, "test", one, 5, rows[i], NULL), KS_OK);
        }
        char *many = ks_pg_rows_sql(one, 5);
        assert_non_null(many);
        const char *arrays[5] = {"{11,12,13}", "{-5,9223372036854775807,0}",
                                 "{\"plain\",\"a \\\"quoted\\\", \\\\ and {}\",NULL}", "{t,f,t}",
                                 "{\"\",\"0190a5c4-1b2c-7d3e-8f40-123456789abc\",\"\"}"};
        assert_int_equal(ks_pg_exec(c, "test", many, 5, arrays, NULL), KS_OK);
        free(many);
        assert_int_equal(
            ks_pg_exec(c, "test",
                       "SELECT count(*) FROM rows_t a JOIN rows_t b ON b.k = a.k + 10"
                       " WHERE a.n = b.n AND a.s IS NOT DISTINCT FROM b.s AND a.b = b.b"
                       " AND a.u IS NOT DISTINCT FROM b.u AND a.note = b.note AND a.m = b.m"
                       " AND a.note = 'it''s $1' AND a.m = a.n - 1",
                       0, NULL, &res),
            KS_OK);
        assert_int_equal(ks_pg_int(res, 0, 0), 3);
        PQclear(res);
        assert_int_equal(ks_pg_exec(c, "test", "DROP TABLE rows_t", 0, NULL, NULL), KS_OK);
        PQfinish(c);
}

static void test_pipeline(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *c = NULL;
        PGresult *a = NULL, *b = (PGresult *)1;
        const char *one[] = {"1"}, *two[] = {"2"};
        /* A binary int4 parameter, typed: 7 in network order. */
        const char seven[4] = {0, 0, 0, 7};
        const ks_pg_param bin[1] = {{.value = seven, .length = 4, .format = 1, .type = 23}};

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(
            ks_pg_exec(c, "t", "CREATE TABLE piped (id int PRIMARY KEY)", 0, NULL, NULL), KS_OK);

        /* One transaction in one round trip; every result where it was asked for. */
        const ks_pg_stmt ok[5] = {
            {.sql = "BEGIN"},
            {.sql = "INSERT INTO piped VALUES ($1::int)", .n_params = 1, .params = one},
            {.sql = "SELECT count(*) FROM piped", .out = &a},
            {.sql = "SELECT $1 + 1", .n_params = 1, .args = bin, .out = &b},
            {.sql = "COMMIT"},
        };
        assert_int_equal(ks_pg_pipeline(c, "t", ok, 5), KS_OK);
        assert_string_equal(PQgetvalue(a, 0, 0), "1");
        assert_string_equal(PQgetvalue(b, 0, 0), "8");
        PQclear(a);
        PQclear(b);
        assert_int_equal(PQpipelineStatus(c), PQ_PIPELINE_OFF);
        assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);

        /*
         * A failure in the middle: its own code, no result handed out, the
         * statements after it not run, and the transaction's earlier
         * statement undone with it.
         */
        a = (PGresult *)1;
        b = (PGresult *)1;
        const ks_pg_stmt failing[6] = {
            {.sql = "BEGIN"},
            {.sql = "INSERT INTO piped VALUES ($1::int)", .n_params = 1, .params = two},
            {.sql = "SELECT count(*) FROM piped", .out = &a},
            {.sql = "INSERT INTO piped VALUES ($1::int)", .n_params = 1, .params = one},
            {.sql = "SELECT 1", .out = &b},
            {.sql = "COMMIT"},
        };
        assert_int_equal(ks_pg_pipeline(c, "t", failing, 6), KS_ALREADY_EXISTS);
        assert_null(a);
        assert_null(b);
        ks_pg_rollback(c);
        char rows[16];
        query_value(c, "SELECT count(*) FROM piped", rows, sizeof(rows));
        assert_string_equal(rows, "1");

        /*
         * No BEGIN: the statements up to the pipeline's Sync are still one
         * transaction (what auth's reads rely on). A SET LOCAL holds for the
         * statements after it and is gone after the Sync; a failure undoes
         * the statements before it.
         */
        a = NULL;
        const char *tenant[] = {"t-1"};
        const ks_pg_stmt act_for = {.sql = "SELECT set_config('keelson.test_tenant', $1, true)",
                                    .n_params = 1,
                                    .params = tenant};
        const ks_pg_stmt read = {.sql = "SELECT current_setting('keelson.test_tenant')", .out = &a};
        assert_int_equal(ks_pg_read(c, "t", &act_for, 1, &read, 1), KS_OK);
        assert_string_equal(PQgetvalue(a, 0, 0), "t-1");
        PQclear(a);
        /* ks_pg_read refuses what would let the setting outlive the read, or read nothing. */
        assert_int_equal(ks_pg_read(c, "t", &act_for, 1, &read, 0), KS_INTERNAL);
        assert_int_equal(ks_pg_read(c, "t", &act_for, KS_PG_PIPELINE_MAX, &read, 1), KS_INTERNAL);
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_int_equal(ks_pg_read(c, "t", &act_for, 1, &read, 1), KS_INTERNAL);
        ks_pg_rollback(c);
        assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
        char after[16];
        query_value(c, "SELECT current_setting('keelson.test_tenant', true)", after, sizeof(after));
        assert_string_equal(after, "");
        const ks_pg_stmt undone[2] = {
            {.sql = "INSERT INTO piped VALUES ($1::int)", .n_params = 1, .params = two},
            {.sql = "INSERT INTO piped VALUES ($1::int)", .n_params = 1, .params = one},
        };
        assert_int_equal(ks_pg_pipeline(c, "t", undone, 2), KS_ALREADY_EXISTS);
        assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
        query_value(c, "SELECT count(*) FROM piped", rows, sizeof(rows));
        assert_string_equal(rows, "1");

        /* Bad calls are refused before anything is sent. */
        const ks_pg_stmt no_params[1] = {{.sql = "SELECT $1::int", .n_params = 1}};
        assert_int_equal(ks_pg_pipeline(c, "t", no_params, 1), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_pg_pipeline(c, "t", ok, KS_PG_PIPELINE_MAX + 1), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_pg_pipeline(c, "t", ok, 0), KS_OK);

        assert_int_equal(ks_pg_exec(c, "t", "DROP TABLE piped", 0, NULL, NULL), KS_OK);
        ks_pg_release(pool, c);
        ks_pg_pool_free(pool);
}

/* A connection that dies under a pipeline: "try again", and the pool repairs it. */
static void test_pipeline_lost_connection(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 1, 1000);
        PGconn *adm = admin();
        PGconn *c = NULL;
        PGresult *a = (PGresult *)1;

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        const ks_pg_stmt s[2] = {{.sql = "SELECT 1"}, {.sql = "SELECT 2", .out = &a}};
        assert_int_equal(ks_pg_pipeline(c, "t", s, 2), KS_OK); /* both prepared now */
        PQclear(a);
        int pid = PQbackendPID(c);
        terminate(adm, pid);
        assert_int_equal(ks_pg_pipeline(c, "t", s, 2), KS_UNAVAILABLE);
        assert_null(a);
        ks_pg_release(pool, c);

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_not_equal(PQbackendPID(c), pid);
        assert_int_equal(ks_pg_pipeline(c, "t", s, 2), KS_OK);
        assert_string_equal(PQgetvalue(a, 0, 0), "2");
        PQclear(a);
        ks_pg_release(pool, c);
        PQfinish(adm);
        ks_pg_pool_free(pool);
}

/* ---- statements ------------------------------------------------------------ */

static void test_exec_error_mapping(void **state)
{
        (void)state;
        ks_pg_pool *pool = pool_new(pg.dsn, 2, 1000);
        PGconn *c = NULL, *other = NULL;
        PGresult *res = (PGresult *)1;
        const char *one[] = {"1"};

        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        assert_int_equal(
            ks_pg_exec(c, "t", "CREATE TABLE uniq (id int PRIMARY KEY, v int)", 0, NULL, NULL),
            KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "INSERT INTO uniq VALUES ($1::int, 0)", 1, one, NULL),
                         KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "INSERT INTO uniq VALUES ($1::int, 0)", 1, one, &res),
                         KS_ALREADY_EXISTS);
        assert_null(res);

        /* sqlstate of a failed result, as a caller inspecting it would see. */
        PGresult *raw =
            PQexecParams(c, "INSERT INTO uniq VALUES ($1::int, 0)", 1, NULL, one, NULL, NULL, 0);
        assert_string_equal(ks_pg_sqlstate(raw), "23505");
        PQclear(raw);
        assert_string_equal(ks_pg_sqlstate(NULL), "");

        assert_int_equal(ks_pg_exec(c, "t", "SELEC 1", 0, NULL, NULL), KS_INTERNAL);
        assert_int_equal(ks_pg_exec(c, "t", "SELECT pg_sleep(10)", 0, NULL, NULL),
                         KS_DEADLINE_EXCEEDED);

        /* A concurrent update under REPEATABLE READ: a serialization failure. */
        assert_int_equal(ks_pg_acquire(pool, &other), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "BEGIN ISOLATION LEVEL REPEATABLE READ", 0, NULL, NULL),
                         KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "SELECT v FROM uniq WHERE id = 1", 0, NULL, NULL),
                         KS_OK);
        assert_int_equal(
            ks_pg_exec(other, "t", "UPDATE uniq SET v = 1 WHERE id = 1", 0, NULL, NULL), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "UPDATE uniq SET v = 2 WHERE id = 1", 0, NULL, NULL),
                         KS_ABORTED);
        /* COMMIT of a failed transaction is a rollback, reported as such. */
        assert_int_equal(ks_pg_commit(c, "t"), KS_ABORTED);
        assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
        ks_pg_release(pool, other);

        /* commit after begin keeps the row; rollback outside a transaction is harmless. */
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", "INSERT INTO uniq VALUES (2, 0)", 0, NULL, NULL),
                         KS_OK);
        assert_int_equal(ks_pg_commit(c, "t"), KS_OK);
        ks_pg_rollback(c);
        char v[32];
        query_value(c, "SELECT count(*) FROM uniq", v, sizeof(v));
        assert_string_equal(v, "2");
        assert_int_equal(ks_pg_exec(c, "t", "DROP TABLE uniq", 0, NULL, NULL), KS_OK);
        ks_pg_release(pool, c);
        ks_pg_pool_free(pool);
}

/* ---- migrations ------------------------------------------------------------ */

static const ks_migration two[] = {
    {"001_init.sql", "CREATE TABLE things (id serial PRIMARY KEY, name text NOT NULL);\n"
                     "CREATE INDEX things_name ON things (name);\n"},
    {"002_seed.sql", "INSERT INTO things (name) VALUES ('a');\n"
                     "INSERT INTO things (name) VALUES ('b');\n"},
};

static void count_rows(PGconn *c, const char *sql, const char *expect)
{
        char v[256];
        query_value(c, sql, v, sizeof(v));
        assert_string_equal(v, expect);
}

static void test_migrate_apply_and_rerun(void **state)
{
        (void)state;
        char err[256] = "x";
        PGconn *c = admin();
        char sha1[65], sha2[65], before[512], after[512];

        assert_int_equal(ks_pg_migrate(pg.uri, "mig_a", two, 2, err, sizeof(err)), 0);
        assert_string_equal(err, "");
        count_rows(c, "SELECT count(*) FROM mig_a.things", "2");
        count_rows(c, "SELECT string_agg(name, ',' ORDER BY name) FROM mig_a.schema_migrations",
                   "001_init.sql,002_seed.sql");
        ks_sha256_hex(two[0].sql, strlen(two[0].sql), sha1);
        ks_sha256_hex(two[1].sql, strlen(two[1].sql), sha2);
        char expect[200];
        snprintf(expect, sizeof(expect), "%s,%s", sha1, sha2);
        count_rows(c, "SELECT string_agg(sha256, ',' ORDER BY name) FROM mig_a.schema_migrations",
                   expect);
        const char *snapshot = "SELECT string_agg(name || sha256 || applied_at::text, ';' "
                               "ORDER BY name) FROM mig_a.schema_migrations";
        query_value(c, snapshot, before, sizeof(before));

        /* Re-running changes nothing: no second seed, same records. */
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_a", two, 2, err, sizeof(err)), 0);
        count_rows(c, "SELECT count(*) FROM mig_a.things", "2");
        query_value(c, snapshot, after, sizeof(after));
        assert_string_equal(before, after);

        /* A new third file is applied alone. */
        ks_migration three[3] = {two[0], two[1], {"003_more.sql", "ALTER TABLE things ADD x int;"}};
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_a", three, 3, err, sizeof(err)), 0);
        count_rows(c, "SELECT count(*) FROM mig_a.schema_migrations", "3");
        count_rows(c, "SELECT count(*) FROM mig_a.things", "2");
        PQfinish(c);
}

static void test_migrate_changed_file(void **state)
{
        (void)state;
        char err[256];
        ks_migration edited[2] = {two[0],
                                  {"002_seed.sql", "INSERT INTO things (name) VALUES ('c');"}};

        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_b", two, 2, err, sizeof(err)), 0);
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_b", edited, 2, err, sizeof(err)), -1);
        assert_string_equal(err, "migration 002_seed.sql was changed after it was applied");
        PGconn *c = admin();
        count_rows(c, "SELECT string_agg(name, ',' ORDER BY name) FROM mig_b.things", "a,b");
        /* The lock was released: another run gets through. */
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_b", two, 2, err, sizeof(err)), 0);
        PQfinish(c);
}

static void test_migrate_failure_is_transactional(void **state)
{
        (void)state;
        char err[256];
        ks_migration bad[2] = {two[0],
                               {"002_broken.sql", "CREATE TABLE partial (x int);\n"
                                                  "INSERT INTO things (name) VALUES ('z');\n"
                                                  "SELECT 1/0;\n"}};

        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_c", bad, 2, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "002_broken.sql"));
        assert_non_null(strstr(err, "division by zero"));

        PGconn *c = admin();
        count_rows(c, "SELECT string_agg(name, ',') FROM mig_c.schema_migrations", "001_init.sql");
        count_rows(c, "SELECT to_regclass('mig_c.partial') IS NULL", "t");
        count_rows(c, "SELECT count(*) FROM mig_c.things", "0");

        /* Fixed (a new, unapplied file may still change), it applies cleanly. */
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_c", two, 2, err, sizeof(err)), 0);
        count_rows(c, "SELECT count(*) FROM mig_c.things", "2");
        PQfinish(c);
}

static void test_migrate_rejects_bad_input(void **state)
{
        (void)state;
        char err[256];
        const char *bad_schemas[] = {
            "",
            "Auth",
            "1x",
            "a-b",
            "a;drop table x",
            "\"q\"",
            "a234567890123456789012345678901234567890123456789012345678901234"};
        for (size_t i = 0; i < sizeof(bad_schemas) / sizeof(bad_schemas[0]); i++) {
                assert_int_equal(ks_pg_migrate(pg.dsn, bad_schemas[i], two, 2, err, sizeof(err)),
                                 -1);
                assert_non_null(strstr(err, "schema name"));
        }
        assert_int_equal(ks_pg_migrate(pg.dsn, NULL, two, 2, err, sizeof(err)), -1);
        ks_migration nameless[1] = {{NULL, "SELECT 1"}};
        assert_int_equal(ks_pg_migrate(pg.dsn, "mig_x", nameless, 1, err, sizeof(err)), -1);

        char dsn[128];
        snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d user=postgres connect_timeout=2",
                 pg_cluster_free_port());
        assert_int_equal(ks_pg_migrate(dsn, "mig_x", two, 2, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "cannot connect"));

        /* Nothing to apply still creates the schema and its record table. */
        assert_int_equal(ks_pg_migrate(pg.dsn, "_empty", NULL, 0, NULL, 0), 0);
        PGconn *c = admin();
        count_rows(c, "SELECT count(*) FROM _empty.schema_migrations", "0");
        PQfinish(c);
}

typedef struct migrate_arg {
        int rv;
        char err[256];
} migrate_arg;

static void *migrate_thread(void *p)
{
        migrate_arg *a = p;
        a->rv = ks_pg_migrate(pg.dsn, "mig_d", two, 2, a->err, sizeof(a->err));
        return NULL;
}

static void test_migrate_concurrent(void **state)
{
        (void)state;
        migrate_arg args[4];
        pthread_t t[4];

        for (int i = 0; i < 4; i++) {
                args[i].rv = -2;
                assert_int_equal(pthread_create(&t[i], NULL, migrate_thread, &args[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(args[i].rv, 0);
        }
        PGconn *c = admin();
        /* The seed ran exactly once (no unique key would stop a second run). */
        count_rows(c, "SELECT string_agg(name, ',' ORDER BY id) FROM mig_d.things", "a,b");
        count_rows(c, "SELECT count(*) FROM mig_d.schema_migrations", "2");
        PQfinish(c);
}

/* ---- the pool's login role (ks_pg_login) ------------------------------------- */

static void exec_ok(PGconn *c, const char *sql)
{
        assert_int_equal(ks_pg_exec(c, "test", sql, 0, NULL, NULL), KS_OK);
}

static void test_role_conninfo(void **state)
{
        char err[256], *ci = NULL;
        (void)state;

        /* The dsn's options stay first; the role follows; a password is quoted, not lost. */
        assert_int_equal(ks_pg_role_conninfo("host=h user=u password='p\\'q' options='-c a=b'",
                                             "DSN_VAR", "some_rt", "ROLE_VAR", &ci, err,
                                             sizeof(err)),
                         0);
        assert_non_null(strstr(ci, "options='-c a=b -c role=some_rt'"));
        assert_non_null(strstr(ci, "password='p\\'q'"));
        PQconninfoOption *o = PQconninfoParse(ci, NULL);
        assert_non_null(o);
        for (PQconninfoOption *x = o; x->keyword != NULL; x++) {
                if (strcmp(x->keyword, "password") == 0) {
                        assert_string_equal(x->val, "p'q");
                }
        }
        PQconninfoFree(o);
        free(ci);

        /* Bad input names the variable and never quotes the dsn. */
        assert_int_equal(
            ks_pg_role_conninfo("host=h", "DSN_VAR", "Bad-Role", "ROLE_VAR", &ci, err, sizeof(err)),
            -1);
        assert_null(ci);
        assert_string_equal(err, "ROLE_VAR: expected [a-z0-9_]{1,63}");
        assert_int_equal(ks_pg_role_conninfo("host=h password=sekrit 'x", "DSN_VAR", "r",
                                             "ROLE_VAR", &ci, err, sizeof(err)),
                         -1);
        assert_string_equal(err, "DSN_VAR: not a valid connection string");
}

/*
 * A pool logged in as a role that owns nothing acts as the runtime role from
 * its first statement, keeps the session settings (JIT off) whatever options
 * its dsn has, cannot leave the runtime role for more, and is found not
 * privileged; a pool logged in as a superuser is found privileged.
 */
static void test_login_role(void **state)
{
        char dsn[512], err[256], v[128], *ci = NULL;
        bool privileged = false;
        PGconn *a = admin(), *c = NULL;
        (void)state;

        exec_ok(a, "CREATE ROLE login_rt NOLOGIN");
        exec_ok(a, "CREATE ROLE login_app LOGIN NOINHERIT");
        exec_ok(a, "GRANT login_rt TO login_app");
        exec_ok(a, "CREATE SCHEMA login_s");
        exec_ok(a, "CREATE TABLE login_s.t (x int)");
        exec_ok(a, "GRANT USAGE ON SCHEMA login_s TO login_rt");
        exec_ok(a, "GRANT SELECT ON login_s.t TO login_rt");

        snprintf(dsn, sizeof(dsn),
                 "host=127.0.0.1 port=%d dbname=postgres user=login_app"
                 " options='-c work_mem=8MB'",
                 pg.port);
        assert_int_equal(ks_pg_role_conninfo(dsn, "DSN", "login_rt", "ROLE", &ci, err, sizeof(err)),
                         0);
        ks_pg_pool *pool = pool_new(ci, 1, 1000);
        free(ci);
        assert_int_equal(ks_pg_acquire(pool, &c), KS_OK);
        query_value(c, "SELECT current_user || ' ' || session_user", v, sizeof(v));
        assert_string_equal(v, "login_rt login_app");
        query_value(c, "SELECT current_setting('jit') || ' ' || current_setting('work_mem')", v,
                    sizeof(v));
        assert_string_equal(v, "off 8MB");
        query_value(c, "SELECT count(*) FROM login_s.t", v, sizeof(v));
        assert_string_equal(v, "0");
        /* RESET ROLE returns to the runtime role; out of it, the login role holds nothing. */
        exec_ok(c, "RESET ROLE");
        query_value(c, "SELECT current_user", v, sizeof(v));
        assert_string_equal(v, "login_rt");
        exec_ok(c, "SET ROLE NONE");
        assert_int_equal(ks_pg_exec(c, "test", "SELECT count(*) FROM login_s.t", 0, NULL, NULL),
                         KS_INTERNAL);
        ks_pg_release(pool, c);
        assert_int_equal(ks_pg_login_privileged(pool, "login_s", &privileged), KS_OK);
        assert_false(privileged);
        assert_int_equal(ks_pg_login_check(pool, "login_s", true, "LOGIN_VAR"), 0);
        ks_pg_pool_free(pool);

        /* The owner of a table of the schema, or a superuser, could bypass row-level security. */
        exec_ok(a, "ALTER TABLE login_s.t OWNER TO login_app");
        pool = pool_new(dsn, 1, 1000);
        assert_int_equal(ks_pg_login_privileged(pool, "login_s", &privileged), KS_OK);
        assert_true(privileged);
        assert_int_equal(ks_pg_login_check(pool, "login_s", true, "LOGIN_VAR"), -1);
        assert_int_equal(ks_pg_login_check(pool, "login_s", false, "LOGIN_VAR"), 0); /* a warning */
        ks_pg_pool_free(pool);
        pool = pool_new(pg.uri, 1, 1000);
        assert_int_equal(ks_pg_login_privileged(pool, "public", &privileged), KS_OK);
        assert_true(privileged);
        ks_pg_pool_free(pool);

        exec_ok(a, "DROP SCHEMA login_s CASCADE");
        exec_ok(a, "DROP ROLE login_app");
        exec_ok(a, "DROP ROLE login_rt");
        PQfinish(a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_pool_options_rejected),
            cmocka_unit_test(test_pool_acquire_release),
            cmocka_unit_test(test_acquire_timeout),
            cmocka_unit_test(test_waiter_gets_released_connection),
            cmocka_unit_test(test_unreachable_database),
            cmocka_unit_test(test_killed_idle_backend),
            cmocka_unit_test(test_killed_backend_in_use),
            cmocka_unit_test(test_prepared_once_per_connection),
            cmocka_unit_test(test_prepared_by_text),
            cmocka_unit_test(test_prepared_schema_change),
            cmocka_unit_test(test_prepare_failure_reported),
            cmocka_unit_test(test_pg_values),
            cmocka_unit_test(test_rows_sql),
            cmocka_unit_test(test_pipeline),
            cmocka_unit_test(test_pipeline_lost_connection),
            cmocka_unit_test(test_exec_error_mapping),
            cmocka_unit_test(test_migrate_apply_and_rerun),
            cmocka_unit_test(test_migrate_changed_file),
            cmocka_unit_test(test_migrate_failure_is_transactional),
            cmocka_unit_test(test_migrate_rejects_bad_input),
            cmocka_unit_test(test_migrate_concurrent),
            cmocka_unit_test(test_role_conninfo),
            cmocka_unit_test(test_login_role),
        };
        return cmocka_run_group_tests(tests, cluster_start, cluster_stop);
}
