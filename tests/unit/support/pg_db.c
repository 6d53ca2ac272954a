/* pg_db: see pg_db.h. */
#include "pg_db.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

int pg_db_start(pg_cluster *c, const char *schema, const ks_migration *migrations, size_t n,
                PGconn **conn)
{
        char err[512];
        *conn = NULL;
        if (pg_cluster_start(c) != 0) {
                return -1;
        }
        if (n > 0 && ks_pg_migrate(c->dsn, schema, migrations, n, err, sizeof(err)) != 0) {
                fprintf(stderr, "migrations of %s: %s\n", schema, err);
                return -1;
        }
        *conn = PQconnectdb(c->dsn);
        if (PQstatus(*conn) != CONNECTION_OK) {
                fprintf(stderr, "connect: %s", PQerrorMessage(*conn));
                return -1;
        }
        return 0;
}

void pg_db_stop(pg_cluster *c, PGconn *conn)
{
        PQfinish(conn); /* accepts NULL */
        pg_cluster_stop(c);
}

void pg_db_exec_ok(PGconn *conn, const char *sql)
{
        PGresult *r = PQexec(conn, sql);
        ExecStatusType st = PQresultStatus(r);
        PQclear(r);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                fail_msg("%s: %s", sql, PQerrorMessage(conn));
        }
}

long long pg_db_value(PGconn *conn, const char *sql)
{
        PGresult *r = PQexec(conn, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 1) {
                PQclear(r);
                fail_msg("%s: %s (wanted one value)", sql, PQerrorMessage(conn));
        }
        long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        return v;
}

long long pg_db_pages(PGconn *conn, const char *stmt)
{
        size_t len = strlen(stmt) + 64;
        char *sql = malloc(len);
        assert_non_null(sql);
        snprintf(sql, len, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) %s", stmt);
        PGresult *r = PQexec(conn, sql);
        free(sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                PQclear(r);
                fail_msg("EXPLAIN %s: %s", stmt, PQerrorMessage(conn));
        }
        json_t *j = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
        PQclear(r);
        json_t *plan = json_object_get(json_array_get(j, 0), "Plan");
        assert_non_null(plan);
        long long pages = json_integer_value(json_object_get(plan, "Shared Hit Blocks")) +
                          json_integer_value(json_object_get(plan, "Shared Read Blocks"));
        json_decref(j);
        return pages;
}
