/*
 * A connection to a throwaway cluster (pg_cluster.h), with a service's
 * schema applied as the service applies it, and the statements a test runs
 * by hand around the code it tests. A statement that fails fails the test,
 * naming itself and PostgreSQL's message.
 *
 *   static pg_cluster pg;
 *   static PGconn *conn;
 *   static int setup(void **state)
 *   {
 *           return pg_db_start(&pg, "ledger", ks_service_migrations, ks_service_migrations_n,
 *                              &conn);
 *   }
 *   static int teardown(void **state) { pg_db_stop(&pg, conn); return 0; }
 *   ... pg_db_exec_ok(conn, "INSERT ..."); pg_db_value(conn, "SELECT count(*) ...") ...
 */
#ifndef KS_TEST_PG_DB_H
#define KS_TEST_PG_DB_H

#include <libpq-fe.h>
#include <stddef.h>

#include "ks_pg.h"
#include "pg_cluster.h"

/*
 * Starts the cluster, applies the n migrations under schema with
 * ks_pg_migrate (none when n is 0) and connects as the superuser. 0, or -1
 * with the reason on stderr.
 */
int pg_db_start(pg_cluster *c, const char *schema, const ks_migration *migrations, size_t n,
                PGconn **conn);
/* Closes conn and stops the cluster; safe after a failed start. */
void pg_db_stop(pg_cluster *c, PGconn *conn);
/* Runs sql (any number of statements); the test fails unless it succeeds. */
void pg_db_exec_ok(PGconn *conn, const char *sql);
/* The integer sql returns: the test fails unless it is one row. */
long long pg_db_value(PGconn *conn, const char *sql);
/*
 * The shared buffers (hit and read) the statement touched, run under
 * EXPLAIN (ANALYZE, BUFFERS): what a test bounds to show a scan stays
 * small. It runs the statement: wrap a write in a transaction rolled back.
 */
long long pg_db_pages(PGconn *conn, const char *stmt);

#endif
