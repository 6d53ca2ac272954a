/*
 * Several statements in one round trip: libpq's pipeline mode, one Sync at
 * the end. A transaction of a few short statements (BEGIN, the tenant, the
 * query, COMMIT) costs one network wait instead of one per statement.
 *
 * Each statement is prepared first when it is new to the connection
 * (ks_pg_prepared, outside pipeline mode: PQprepare waits for its answer),
 * then sent by name. After the first failure the server skips the rest up to
 * the Sync (PGRES_PIPELINE_ABORTED); only the first failure is logged and
 * returned. libpq keeps reading while it waits to send, so a large result
 * cannot block a large request.
 */
#include "ks_pg.h"

#include "ks_code.h"
#include "ks_pg_pipeline.h"

#include <stdbool.h>
#include <stdio.h>

#define PARAMS_MAX 64

static void stmt_types(const ks_pg_stmt *s, Oid *types)
{
        for (int i = 0; i < s->n_params; i++) {
                types[i] = s->args[i].type;
        }
}

/* The name s runs under (NULL: unprepared), or the failure of preparing it. */
int ks_pg_pipeline_prepare(PGconn *c, const char *request_id, const ks_pg_stmt *s,
                           const char **name)
{
        Oid types[PARAMS_MAX];
        PGresult *failed = NULL;

        if (s->unprepared) {
                *name = NULL;
                return KS_OK;
        }
        if (s->args != NULL) {
                stmt_types(s, types);
        }
        *name = ks_pg_prepared(c, s->sql, s->n_params, s->args != NULL ? types : NULL, &failed);
        if (failed == NULL) {
                return KS_OK;
        }
        int code = ks_pg_failure(c, request_id, failed);
        PQclear(failed);
        return code;
}

int ks_pg_pipeline_send(PGconn *c, const ks_pg_stmt *s, const char *name)
{
        const char *values[PARAMS_MAX];
        int lengths[PARAMS_MAX], formats[PARAMS_MAX];
        Oid types[PARAMS_MAX];

        if (s->args == NULL) {
                return name != NULL
                           ? PQsendQueryPrepared(c, name, s->n_params, s->params, NULL, NULL, 0)
                           : PQsendQueryParams(c, s->sql, s->n_params, NULL, s->params, NULL, NULL,
                                               0);
        }
        for (int i = 0; i < s->n_params; i++) {
                values[i] = s->args[i].value;
                lengths[i] = s->args[i].length;
                formats[i] = s->args[i].format;
        }
        if (name != NULL) {
                return PQsendQueryPrepared(c, name, s->n_params, values, lengths, formats, 0);
        }
        stmt_types(s, types);
        return PQsendQueryParams(c, s->sql, s->n_params, types, values, lengths, formats, 0);
}

/* One statement's result: the first, then up to the NULL that ends it. */
int ks_pg_pipeline_take(PGconn *c, const char *request_id, const ks_pg_stmt *s, int code)
{
        PGresult *r = PQgetResult(c), *extra;
        ExecStatusType st = PQresultStatus(r);

        while ((extra = PQgetResult(c)) != NULL) {
                PQclear(extra);
        }
        if (code == KS_OK && r != NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)) {
                if (s->out != NULL) {
                        *s->out = r;
                } else {
                        PQclear(r);
                }
                return KS_OK;
        }
        if (code == KS_OK) {
                /* The first failure; the statements after it only say "aborted". */
                code = ks_pg_failure_expected(c, request_id, r, s->expected_sqlstate);
        }
        PQclear(r);
        return code;
}

/* The Sync's result, which ends the pipeline's segment. */
void ks_pg_pipeline_sync(PGconn *c)
{
        for (int i = 0; i < 4; i++) {
                PGresult *r = PQgetResult(c);
                bool sync = r != NULL && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
                PQclear(r);
                if (sync) {
                        break;
                }
        }
}

static void clear_outs(const ks_pg_stmt *s, int n)
{
        for (int i = 0; i < n; i++) {
                if (s[i].out != NULL) {
                        PQclear(*s[i].out);
                        *s[i].out = NULL;
                }
        }
}

int ks_pg_pipeline(PGconn *c, const char *request_id, const ks_pg_stmt *s, int n)
{
        const char *names[KS_PG_PIPELINE_MAX];
        int code = KS_OK, sent = 0;

        if (c == NULL || n < 0 || n > KS_PG_PIPELINE_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        for (int i = 0; i < n; i++) {
                if (s[i].out != NULL) {
                        *s[i].out = NULL;
                }
                if (s[i].sql == NULL || s[i].n_params < 0 || s[i].n_params > PARAMS_MAX ||
                    (s[i].n_params > 0 && s[i].params == NULL && s[i].args == NULL)) {
                        return KS_INVALID_ARGUMENT;
                }
        }
        for (int i = 0; i < n; i++) {
                if ((code = ks_pg_pipeline_prepare(c, request_id, &s[i], &names[i])) != KS_OK) {
                        return code;
                }
        }
        if (PQenterPipelineMode(c) != 1) {
                return ks_pg_failure(c, request_id, NULL);
        }
        while (sent < n && ks_pg_pipeline_send(c, &s[sent], names[sent]) == 1) {
                sent++;
        }
        if (sent < n || PQpipelineSync(c) != 1) {
                ks_pg_failure(c, request_id, NULL);
                code = KS_UNAVAILABLE; /* a send that failed: the pool resets the connection */
        }
        for (int i = 0; i < sent; i++) {
                code = ks_pg_pipeline_take(c, request_id, &s[i], code);
        }
        ks_pg_pipeline_sync(c); /* the Sync's result ends the pipeline */
        if (PQexitPipelineMode(c) != 1 && code == KS_OK) {
                code = KS_UNAVAILABLE; /* the pool resets the connection */
        }
        if (code != KS_OK) {
                clear_outs(s, n);
        }
        return code;
}
