/*
 * ks_pg: a bounded PostgreSQL connection pool, and the migration runner.
 *
 * Pool: a fixed number of libpq connections opened lazily; ks_pg_acquire
 * waits up to a timeout for a free one (then KS_UNAVAILABLE), and a
 * connection found broken is reset before it is handed out. Every
 * connection sets application_name and a statement_timeout, turns JIT
 * off, plans generically, and prepares the statements it runs
 * (ks_pg_prepared below).
 *
 * Migrations: each service embeds its ordered SQL files (see
 * cmake/embed_sql.cmake). ks_pg_migrate applies, under a session advisory
 * lock keyed by the schema name (so replicas that start together apply each
 * file once), every file not yet recorded in <schema>.schema_migrations, each
 * in its own transaction together with its record. A recorded file whose
 * SHA-256 differs from the embedded one is a start-up error: applied
 * migrations are never edited, a new file is added instead.
 */
#ifndef KS_PG_H
#define KS_PG_H

#include "ks_code.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ks_pg_pool ks_pg_pool;

typedef struct ks_pg_pool_options {
        const char *dsn;
        const char *application_name; /* "keelson-auth" */
        int size;                     /* connections, >= 1 */
        int acquire_timeout_ms;       /* wait for a free connection */
        int statement_timeout_ms;     /* 0 = server default */
} ks_pg_pool_options;

int ks_pg_pool_new(ks_pg_pool **out, const ks_pg_pool_options *opts) KS_MUST_CHECK;
void ks_pg_pool_free(ks_pg_pool *pool);
/* Whether a connection is free now (ks_pg_acquire would not wait for one). */
bool ks_pg_pool_has_free(ks_pg_pool *pool);

/*
 * Hands out a connection (connected, idle, not in a transaction). Returns
 * KS_OK, or KS_UNAVAILABLE when none is free within the timeout or the
 * database cannot be reached.
 */
int ks_pg_acquire(ks_pg_pool *pool, PGconn **out) KS_MUST_CHECK;
/*
 * While on, the connections this thread acquires are not first polled for
 * a server that spoke unasked or hung up (a system call each): for a caller
 * that will not use them, or whose use fails as any lost connection's would
 * (ks_pg_read's batch steps).
 */
void ks_pg_spare_idle_check(bool on);

/*
 * Gives a connection back. A connection left inside a transaction is rolled
 * back; a broken one is reset before its next use.
 */
void ks_pg_release(ks_pg_pool *pool, PGconn *conn);

/* Readiness: a connection answers SELECT 1. Returns 0 when it does. */
int ks_pg_ping(ks_pg_pool *pool);

/*
 * Runs a statement with text parameters, expecting PGRES_COMMAND_OK or
 * PGRES_TUPLES_OK. On success returns KS_OK and *out (may be NULL if the
 * caller wants no result) owns the PGresult (PQclear it). On failure returns
 * a ks_code (unique violation -> KS_ALREADY_EXISTS, serialization failure or
 * deadlock -> KS_ABORTED, lost connection -> KS_UNAVAILABLE, else
 * KS_INTERNAL), logs the libpq message with request_id, and *out is NULL.
 */
int ks_pg_exec(PGconn *conn, const char *request_id, const char *sql, int n_params,
               const char *const *params, PGresult **out) KS_MUST_CHECK;

/*
 * Prepared statements (ks_pg_prepared.c). Every pool connection caches the
 * statements it runs: ks_pg_exec prepares a statement text the first time
 * the connection sees it (one extra round trip, once) and executes it by
 * name afterwards, so the server parses and plans it once per connection.
 *
 * ks_pg_prepared returns the name under which sql (with these parameter
 * types; NULL lets the server infer them) is prepared on conn, preparing it
 * first if needed. NULL with *failed NULL: run it unprepared (not a pool
 * connection, its cache full, or the connection in pipeline mode). NULL with
 * *failed set: preparing failed, *failed is the statement's own error (the
 * caller reports it and PQclears it). ks_pg_prepared_failed takes a failed
 * result (ks_pg_failure passes every one): true when it was a plan the
 * schema changed under (0A000 from a connection that has prepared
 * statements), and the connection then starts its cache again.
 */
#define KS_PG_PREPARED_MAX 128

/*
 * The session settings a connection that runs prepared statements needs
 * (ks_pg.c says why): JIT off, generic plans from the first execution, and
 * statement_timeout_ms (0: the server's default). The pools send it after
 * every connect; a connection of its own (an outbox relay's) sends it too.
 */
#define KS_PG_SESSION_SQL_MAX 192
void ks_pg_session_sql(char out[KS_PG_SESSION_SQL_MAX], int statement_timeout_ms);

int ks_pg_prepared_attach(PGconn *conn) KS_MUST_CHECK;
const char *ks_pg_prepared(PGconn *conn, const char *sql, int n_params, const Oid *types,
                           PGresult **failed);
bool ks_pg_prepared_failed(const PGconn *conn, const PGresult *res);

/*
 * The code of a failed statement (mapped as ks_pg_exec maps it; res may be
 * NULL for a failure of the connection itself), logged once with its
 * SQLSTATE and primary message, never its parameters. A prepared plan that
 * a schema change invalidated is KS_ABORTED: run again, it is planned anew.
 */
int ks_pg_failure(const PGconn *conn, const char *request_id, const PGresult *res);

/*
 * The same for a failure the caller may have planned for: when res's
 * SQLSTATE is expected_sqlstate (NULL: none is), it is logged at debug
 * level, not error. The caller still gets the code and answers for it.
 */
int ks_pg_failure_expected(const PGconn *conn, const char *request_id, const PGresult *res,
                           const char *expected_sqlstate);

/*
 * Pipelines (ks_pg_pipeline.c): up to KS_PG_PIPELINE_MAX statements sent at
 * once and answered at once, one round trip. A statement takes text
 * parameters (params) or typed ones (args: text or binary, as libpq takes
 * them; type 0 lets the statement's cast decide); out (may be NULL)
 * receives its result. Returns KS_OK with every out filled, or the code of
 * the first failure with every out NULL; the statements after a failure do
 * not run. The statements of one pipeline are one transaction: outside a
 * BEGIN, PostgreSQL commits them together at the pipeline's Sync, or rolls
 * them back together at a failure (a SET LOCAL lasts until the Sync).
 */
typedef struct ks_pg_param {
        const char *value;
        int length;
        int format; /* 0 text, 1 binary */
        Oid type;
} ks_pg_param;

typedef struct ks_pg_stmt {
        const char *sql;
        int n_params;
        const char *const *params; /* text parameters, or */
        const ks_pg_param *args;   /* typed ones */
        PGresult **out;
        /* A failure with this SQLSTATE is one the caller plans for (ks_pg_failure_expected). */
        const char *expected_sqlstate;
        /*
         * Planned at every execution, never prepared: for a statement whose best
         * plan depends on how large its tables are now (a queue's claim), since a
         * prepared plan keeps the statistics of the moment it was made (an empty
         * table's, on a new database) until the next ANALYZE.
         */
        bool unprepared;
} ks_pg_stmt;

#define KS_PG_PIPELINE_MAX 64

/*
 * A read in one round trip and one transaction with no BEGIN or COMMIT:
 * first[] (the statements that say whom the read acts for, SET LOCAL
 * settings), then reads[], as one pipeline, which PostgreSQL runs as one
 * transaction ended by its Sync: the settings hold for the reads and end
 * with them. conn must be outside a transaction, and n_first >= 0,
 * n_reads >= 1, together at most KS_PG_PIPELINE_MAX; KS_INTERNAL otherwise
 * (a setting would outlive the read). Else ks_pg_pipeline's result.
 */
int ks_pg_read(PGconn *conn, const char *request_id, const ks_pg_stmt *first, int n_first,
               const ks_pg_stmt *reads, int n_reads) KS_MUST_CHECK;

int ks_pg_pipeline(PGconn *conn, const char *request_id, const ks_pg_stmt *stmts,
                   int n) KS_MUST_CHECK;

/*
 * Batched reads (ks_pg_read.c): the ks_pg_read of several calls in one
 * round trip on one connection, each still its own transaction (its own
 * Sync) with its own settings. A loop running the calls one pass of it
 * read: ks_pg_batch_plan(b, i) before call i's handler, whose ks_pg_read
 * then records its statements (text parameters only; anything else runs
 * at once) and returns KS_PG_DEFERRED, which the handler returns as it is;
 * ks_pg_batch_run sends every recorded read; ks_pg_batch_replay(b, i)
 * before the handler runs again, whose ks_pg_read then gets the run's
 * results and code if it asks for the same statements with the same
 * parameters, and runs at once otherwise. ks_pg_batch_off ends either step.
 * The steps are the calling thread's.
 */
#define KS_PG_DEFERRED 1000 /* not a ks_code: the read waits for ks_pg_batch_run */
typedef struct ks_pg_batch ks_pg_batch;
int ks_pg_batch_new(ks_pg_batch **out, int n_calls) KS_MUST_CHECK;
void ks_pg_batch_free(ks_pg_batch *b);
void ks_pg_batch_plan(ks_pg_batch *b, int call);
void ks_pg_batch_replay(ks_pg_batch *b, int call);
void ks_pg_batch_off(void);
/* A step is set on this thread. */
bool ks_pg_batch_active(void);
/* Calls whose read was recorded. */
int ks_pg_batch_reads(const ks_pg_batch *b);
/* The recorded reads in one pipeline: KS_OK, or why the batch as a whole failed. */
int ks_pg_batch_run(PGconn *conn, const char *request_id, ks_pg_batch *b) KS_MUST_CHECK;
/*
 * fn(ctx, b, i), called by ks_pg_batch_run for each call whose read is
 * back (its results and its Sync taken), in order, while the server still
 * runs the reads of the calls after it: the caller may replay call i at
 * once (ks_pg_batch_replay, the handler, ks_pg_batch_off), so that its
 * handler's work overlaps the server's instead of following it. fn must
 * not use the run's connection. Not called for the calls of a run that
 * failed as a whole (ks_pg_batch_run then returns that failure).
 */
typedef void (*ks_pg_batch_ready_fn)(void *ctx, ks_pg_batch *b, int call);
void ks_pg_batch_on_ready(ks_pg_batch *b, ks_pg_batch_ready_fn fn, void *ctx);

/* BEGIN / COMMIT / ROLLBACK. ks_pg_rollback is safe outside a transaction. */
int ks_pg_begin(PGconn *conn, const char *request_id) KS_MUST_CHECK;
int ks_pg_commit(PGconn *conn, const char *request_id) KS_MUST_CHECK;
void ks_pg_rollback(PGconn *conn);

/* SQLSTATE of a failed result ("23505"), or "" */
const char *ks_pg_sqlstate(const PGresult *res);

/* A result field as text ("" for NULL), as an int64 (0 for NULL), as a bool (false for NULL). */
const char *ks_pg_text(const PGresult *res, int row, int col);
int64_t ks_pg_int(const PGresult *res, int row, int col);
bool ks_pg_bool(const PGresult *res, int row, int col);

/* An int64 as the text of a parameter: ks_pg_num_of(42).s is "42". */
typedef struct ks_pg_num {
        char s[24];
} ks_pg_num;
ks_pg_num ks_pg_num_of(int64_t v);

/*
 * The form over arrays of a one-row insert (ks_pg_rows.c), for writing many
 * rows of it in one execution: from
 *   INSERT INTO t (cols) VALUES (e1, ..., ek)       (the ei reading $1..$n)
 * it makes
 *   INSERT INTO t (cols) SELECT e1', ..., ek'
 *   FROM unnest($1::text[], ..., $n::text[]) AS r(c1, ..., cn)
 * where each $i of the expressions reads r.ci, a text: parameter i is the
 * array literal of the rows' values of $i. So the one-row form must cast
 * every parameter that is not a text column's value ($2::int8,
 * NULLIF($3, '')::uuid). Malloc'd; NULL when sql is not of that form (one
 * tuple, ending the statement; no RETURNING, no ON CONFLICT) or out of
 * memory.
 */
char *ks_pg_rows_sql(const char *sql, int n_params);

/*
 * bytea in its text form, "\x" + hex: how binary data travels as a text
 * parameter (a $n::bytea) and comes back in a text result.
 * ks_pg_bytea_text: the text of n bytes, malloc'd; NULL when out of memory.
 * ks_pg_bytea_decode: the bytes of such a text into out; their count, or -1
 * for anything else or more than out_len bytes.
 */
char *ks_pg_bytea_text(const uint8_t *data, size_t n);
long ks_pg_bytea_decode(const char *text, uint8_t *out, size_t out_len);

typedef struct ks_migration {
        const char *name; /* "001_init.sql": applied in array order */
        const char *sql;
} ks_migration;

/*
 * Creates the schema if needed and applies pending migrations. Returns 0, or
 * -1 with a message in err (a changed applied file names the file).
 */
int ks_pg_migrate(const char *dsn, const char *schema, const ks_migration *migrations, size_t n,
                  char *err, size_t err_len) KS_MUST_CHECK;

/* Defined in each service binary by the build (cmake/embed_sql.cmake). */
extern const ks_migration ks_service_migrations[];
extern const size_t ks_service_migrations_n;

#endif
