/*
 * Database helpers shared by the handlers.
 *
 * Connections are taken from the pool per statement or per transaction, not
 * pinned to a worker: password hashing takes 25-50 ms, and a connection
 * pinned to a worker would sit idle through every hash. Acquiring per call
 * lets KEELSON_AUTH_PG_POOL_SIZE stay below the worker count (a replica's
 * share of PostgreSQL's max_connections is the pool, whatever the workers),
 * and the pool resets a broken connection before handing it out.
 *
 * Every connection of the pool runs as the runtime role (keelson_auth_rt,
 * KEELSON_AUTH_PG_ROLE): the DSN's role owns the tables and runs the
 * migrations, the runtime role owns nothing, so row-level security binds it.
 * The pool logs in as KEELSON_AUTH_PG_LOGIN_DSN's role, which owns nothing
 * either, and switches to the runtime role with a startup option, from the
 * first statement of every connection (services/core/ks_pg_login.h).
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

int auth_db_fail(ks_call *call, int code)
{
        const char *msg = AUTH_INTERNAL_MSG;

        if (code == KS_PG_DEFERRED) {
                return code; /* a read recorded for the loop's batch: no failure */
        }
        if (code == KS_OK) {
                code = KS_INTERNAL;
        }
        ks_log_warn(call->request_id, "database call failed", "{s:s, s:s}", "method",
                    call->method ? call->method->name : "", "code", ks_code_name(code));
        if (code == KS_UNAVAILABLE) {
                msg = "service temporarily unavailable, retry later";
        } else if (code == KS_ABORTED) {
                msg = "conflicting concurrent update, retry";
        } else if (code == KS_DEADLINE_EXCEEDED) {
                msg = "deadline exceeded";
        } else if (code != KS_INTERNAL) {
                /* Any other code from the database is a bug on our side, not the caller's. */
                code = KS_INTERNAL;
        }
        return ks_call_fail(call, code, "%s", msg);
}

int auth_db_tx(auth_service *svc, const char *request_id, auth_db_tx_fn fn, void *arg)
{
        PGconn *conn = NULL;
        int rc;

        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        if ((rc = fn(svc, conn, request_id, arg)) != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        return rc;
}

int auth_db_exec_once(auth_service *svc, const char *request_id, const char *sql, int n_params,
                      const char *const *params, PGresult **out)
{
        PGconn *conn = NULL;
        int rc;

        *out = NULL;
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        rc = ks_pg_exec(conn, request_id, sql, n_params, params, out);
        ks_pg_release(svc->pool, conn);
        return rc;
}

int auth_db_read_once(auth_service *svc, const char *request_id, const char *sql, int n_params,
                      const char *const *params, PGresult **out)
{
        const ks_pg_stmt read = {.sql = sql, .n_params = n_params, .params = params, .out = out};
        PGconn *conn = NULL;
        int rc;

        *out = NULL;
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        rc = ks_pg_read(conn, request_id, NULL, 0, &read, 1);
        ks_pg_release(svc->pool, conn);
        return rc;
}

void auth_copy_field(const PGresult *res, int row, int col, char *out, size_t out_len)
{
        const char *v = PQgetvalue(res, row, col);
        size_t n = strnlen(v, out_len - 1);

        memcpy(out, v, n);
        out[n] = '\0';
}

int64_t auth_int_field(const PGresult *res, int row, int col)
{
        if (PQgetisnull(res, row, col)) {
                return 0;
        }
        return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* The third argument true: SET LOCAL, gone at COMMIT or ROLLBACK. */
static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true),"
                                  " set_config('keelson.user_id', $2, true)";

/* Only uuids reach SQL: a malformed one would make every policy fail to cast. */
static bool act_for_valid(const char *tenant_id, const char *user_id)
{
        return (tenant_id[0] == '\0' || auth_uuid_valid(tenant_id)) &&
               (user_id[0] == '\0' || auth_uuid_valid(user_id));
}

int auth_tx_act_for(PGconn *conn, const char *request_id, const char *tenant_id,
                    const char *user_id)
{
        const char *params[2] = {tenant_id ? tenant_id : "", user_id ? user_id : ""};

        if (!act_for_valid(params[0], params[1])) {
                return KS_INTERNAL;
        }
        return ks_pg_exec(conn, request_id, sql_act_for, 2, params, NULL);
}

int auth_tx_open(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id,
                 const ks_pg_stmt *then, int n_then)
{
        const char *params[2] = {tenant_id ? tenant_id : "", user_id ? user_id : ""};
        ks_pg_stmt s[KS_PG_PIPELINE_MAX] = {
            {.sql = "BEGIN"},
            {.sql = sql_act_for, .n_params = 2, .params = params},
        };

        if (!act_for_valid(params[0], params[1]) || n_then < 0 || n_then > KS_PG_PIPELINE_MAX - 2) {
                return KS_INTERNAL;
        }
        for (int i = 0; i < n_then; i++) {
                s[2 + i] = then[i];
        }
        return ks_pg_pipeline(conn, request_id, s, 2 + n_then);
}

/*
 * No BEGIN and no COMMIT (ks_pg_read): the SET LOCAL of sql_act_for holds
 * for the reads and is gone after them. Two statements fewer for the server
 * to parse, bind, run and answer than BEGIN ... COMMIT.
 */
int auth_tx_read(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id,
                 const ks_pg_stmt *reads, int n_reads)
{
        const char *params[2] = {tenant_id ? tenant_id : "", user_id ? user_id : ""};
        const ks_pg_stmt act_for = {.sql = sql_act_for, .n_params = 2, .params = params};

        if (!act_for_valid(params[0], params[1])) {
                return KS_INTERNAL;
        }
        return ks_pg_read(conn, request_id, &act_for, 1, reads, n_reads);
}

int auth_tx_begin(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id)
{
        return auth_tx_open(conn, request_id, tenant_id, user_id, NULL, 0);
}
