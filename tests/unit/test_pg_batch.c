/*
 * ks_pg_batch against a real PostgreSQL: the reads of several calls
 * recorded, sent in one pipeline and answered each from its own
 * transaction with its own setting; a failure that stays one call's; a
 * replay that asks for something else, or reads with typed parameters,
 * running alone as without a batch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"
#include "ks_pg.h"
#include "pg_db.h"

static pg_cluster g_pg;
static PGconn *g_conn;

/* Whom a read acts for: a transaction-local setting, as the services' tenant. */
static const char sql_act_for[] = "SELECT set_config('test.tenant', $1, true)";
/* What only that tenant sees, and the setting as the read found it. */
static const char sql_rows[] =
    "SELECT string_agg(v::text, ',' ORDER BY v), current_setting('test.tenant')"
    " FROM batch_rows WHERE tenant = current_setting('test.tenant') AND v >= $1::int";

static int setup(void **state)
{
        (void)state;
        if (pg_db_start(&g_pg, "public", NULL, 0, &g_conn) != 0) {
                return -1;
        }
        pg_db_exec_ok(g_conn, "CREATE TABLE batch_rows (tenant text, v int);"
                              " INSERT INTO batch_rows VALUES ('a', 1), ('a', 2), ('b', 3),"
                              " ('c', 4), ('c', 5), ('c', 6)");
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        pg_db_stop(&g_pg, g_conn);
        return 0;
}

/* One call's read: the tenant, then its rows from min up; *out gets the rows' result. */
typedef struct call {
        const char *tenant;
        const char *min;
        PGresult *out;
} call;

static int read_on(PGconn *conn, call *c)
{
        const char *act[1] = {c->tenant};
        const char *rows[1] = {c->min};
        const ks_pg_stmt first = {.sql = sql_act_for, .n_params = 1, .params = act};
        const ks_pg_stmt read = {.sql = sql_rows, .n_params = 1, .params = rows, .out = &c->out};
        return ks_pg_read(conn, "test", &first, 1, &read, 1);
}

static int read_as(call *c)
{
        return read_on(g_conn, c);
}

static void assert_rows(call *c, const char *rows)
{
        assert_non_null(c->out);
        assert_string_equal(PQgetvalue(c->out, 0, 0), rows);
        assert_string_equal(PQgetvalue(c->out, 0, 1), c->tenant);
        PQclear(c->out);
        c->out = NULL;
}

/* A batch of n calls, each call's read planned (deferred, no result yet). */
static ks_pg_batch *plan_all(call *calls, int n)
{
        ks_pg_batch *b = NULL;

        assert_int_equal(ks_pg_batch_new(&b, n), KS_OK);
        for (int i = 0; i < n; i++) {
                ks_pg_batch_plan(b, i);
                assert_true(ks_pg_batch_active());
                assert_int_equal(read_as(&calls[i]), KS_PG_DEFERRED);
                assert_null(calls[i].out);
                ks_pg_batch_off();
        }
        assert_false(ks_pg_batch_active());
        assert_int_equal(ks_pg_batch_reads(b), n);
        return b;
}

/* The same, and the batch run: each read is now answered. */
static ks_pg_batch *plan_and_run(call *calls, int n)
{
        ks_pg_batch *b = plan_all(calls, n);

        assert_int_equal(ks_pg_batch_run(g_conn, "test", b), KS_OK);
        return b;
}

static void test_each_call_its_own_tenant(void **state)
{
        (void)state;
        call calls[3] = {{"a", "0", NULL}, {"b", "0", NULL}, {"c", "5", NULL}};
        ks_pg_batch *b = plan_and_run(calls, 3);

        const char *want[3] = {"1,2", "3", "5,6"};
        for (int i = 2; i >= 0; i--) { /* in any order */
                ks_pg_batch_replay(b, i);
                assert_int_equal(read_as(&calls[i]), KS_OK);
                ks_pg_batch_off();
                assert_rows(&calls[i], want[i]);
        }
        ks_pg_batch_free(b);
        /* Each setting ended with its call's transaction: nothing is left on the connection. */
        assert_int_equal(PQtransactionStatus(g_conn), PQTRANS_IDLE);
        PGresult *r = PQexec(g_conn, "SELECT coalesce(current_setting('test.tenant', true), '')");
        assert_string_equal(PQgetvalue(r, 0, 0), "");
        PQclear(r);
}

/* What the ready callback saw: the calls in the order they came back, each answered there. */
typedef struct ready_log {
        PGconn *conn; /* the handlers' own: the run holds g_conn */
        call *calls;
        int order[8];
        int codes[8];
        int n;
} ready_log;

static void on_ready(void *ctx, ks_pg_batch *b, int i)
{
        ready_log *log = ctx;

        assert_true(log->n < 8);
        log->order[log->n] = i;
        ks_pg_batch_replay(b, i);
        log->codes[log->n++] = read_on(log->conn, &log->calls[i]);
        ks_pg_batch_off();
}

/* Each call is handed back as soon as its read is, in order, a failed one with its failure. */
static void test_each_call_ready_in_order(void **state)
{
        (void)state;
        call calls[4] = {
            {"a", "0", NULL}, {"b", "not a number", NULL}, {"c", "5", NULL}, {"a", "2", NULL}};
        char conninfo[512];
        snprintf(conninfo, sizeof(conninfo), "host=%s port=%s user=%s dbname=%s", PQhost(g_conn),
                 PQport(g_conn), PQuser(g_conn), PQdb(g_conn));
        ready_log log = {.conn = PQconnectdb(conninfo), .calls = calls};
        assert_int_equal(PQstatus(log.conn), CONNECTION_OK);
        ks_pg_batch *b = plan_all(calls, 4);

        ks_pg_batch_on_ready(b, on_ready, &log);
        assert_int_equal(ks_pg_batch_run(g_conn, "test", b), KS_OK);
        assert_int_equal(log.n, 4);
        for (int i = 0; i < 4; i++) {
                assert_int_equal(log.order[i], i);
        }
        assert_int_equal(log.codes[0], KS_OK);
        assert_rows(&calls[0], "1,2");
        assert_int_not_equal(log.codes[1], KS_OK);
        assert_int_not_equal(log.codes[1], KS_PG_DEFERRED);
        assert_null(calls[1].out);
        assert_int_equal(log.codes[2], KS_OK);
        assert_rows(&calls[2], "5,6");
        assert_int_equal(log.codes[3], KS_OK);
        assert_rows(&calls[3], "2");
        ks_pg_batch_free(b);
        PQfinish(log.conn);
        assert_int_equal(PQtransactionStatus(g_conn), PQTRANS_IDLE);
}

static void test_a_failure_is_one_calls(void **state)
{
        (void)state;
        call calls[3] = {{"a", "0", NULL}, {"b", "not a number", NULL}, {"c", "6", NULL}};
        ks_pg_batch *b = plan_and_run(calls, 3);

        ks_pg_batch_replay(b, 1);
        int code = read_as(&calls[1]);
        ks_pg_batch_off();
        assert_int_not_equal(code, KS_OK);
        assert_int_not_equal(code, KS_PG_DEFERRED);
        assert_null(calls[1].out);
        ks_pg_batch_replay(b, 0);
        assert_int_equal(read_as(&calls[0]), KS_OK);
        assert_rows(&calls[0], "1,2");
        ks_pg_batch_replay(b, 2);
        assert_int_equal(read_as(&calls[2]), KS_OK);
        assert_rows(&calls[2], "6");
        ks_pg_batch_off();
        ks_pg_batch_free(b);
        assert_int_equal(PQtransactionStatus(g_conn), PQTRANS_IDLE);
}

/*
 * A replay that asks for another tenant than planned is not answered from
 * the batch: it runs alone and gets what it asked. A second read of the
 * same call runs alone too.
 */
static void test_replay_of_another_read_runs_alone(void **state)
{
        (void)state;
        call planned = {"a", "0", NULL};
        ks_pg_batch *b = plan_and_run(&planned, 1);

        call asked = {"b", "0", NULL};
        ks_pg_batch_replay(b, 0);
        assert_int_equal(read_as(&asked), KS_OK);
        assert_rows(&asked, "3");
        assert_int_equal(read_as(&planned), KS_OK); /* still there: not taken by the other */
        assert_rows(&planned, "1,2");
        assert_int_equal(read_as(&planned), KS_OK); /* taken: a second read runs alone */
        assert_rows(&planned, "1,2");
        ks_pg_batch_off();
        ks_pg_batch_free(b);
}

/* A read with typed parameters is not recorded: it runs at once, even while planning. */
static void test_typed_read_runs_at_once(void **state)
{
        (void)state;
        ks_pg_batch *b = NULL;
        PGresult *out = NULL;
        const char *act[1] = {"c"};
        const ks_pg_param min = {.value = "5", .length = 1, .format = 0, .type = 23 /* int4 */};
        const ks_pg_stmt first = {.sql = sql_act_for, .n_params = 1, .params = act};
        const ks_pg_stmt read = {.sql = sql_rows, .n_params = 1, .args = &min, .out = &out};

        assert_int_equal(ks_pg_batch_new(&b, 1), KS_OK);
        ks_pg_batch_plan(b, 0);
        assert_int_equal(ks_pg_read(g_conn, "test", &first, 1, &read, 1), KS_OK);
        ks_pg_batch_off();
        assert_int_equal(ks_pg_batch_reads(b), 0);
        assert_non_null(out);
        assert_string_equal(PQgetvalue(out, 0, 0), "5,6");
        PQclear(out);
        ks_pg_batch_free(b);
}

/* A connection that is gone fails the batch as a whole; the calls then read alone. */
static void test_no_connection_fails_the_run(void **state)
{
        (void)state;
        call calls[2] = {{"a", "0", NULL}, {"b", "0", NULL}};
        ks_pg_batch *b = plan_all(calls, 2);

        assert_int_equal(ks_pg_batch_run(NULL, "test", b), KS_UNAVAILABLE);
        ks_pg_batch_free(b);
        assert_int_equal(read_as(&calls[0]), KS_OK); /* no step set: as ever */
        assert_rows(&calls[0], "1,2");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_each_call_its_own_tenant),
            cmocka_unit_test(test_a_failure_is_one_calls),
            cmocka_unit_test(test_each_call_ready_in_order),
            cmocka_unit_test(test_replay_of_another_read_runs_alone),
            cmocka_unit_test(test_typed_read_runs_at_once),
            cmocka_unit_test(test_no_connection_fails_the_run),
        };
        return cmocka_run_group_tests_name("pg_batch", tests, setup, teardown);
}
