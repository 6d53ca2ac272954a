/*
 * Database helpers shared by the handlers.
 *
 * Connections are taken from the pool per statement or per transaction, not
 * pinned to a worker: SignUp and Login spend 25-50 ms in scrypt, and a
 * connection pinned to a worker would sit idle through every hash. Acquiring
 * per call lets KEELSON_AUTH_PG_POOL_SIZE stay below the worker count (a
 * replica's share of PostgreSQL's max_connections is the pool, whatever the
 * workers), and the pool resets a broken connection before handing it out.
 */
#include "auth.h"

#include <string.h>

#include "ks_log.h"

int auth_db_fail(ks_call *call, int code)
{
        const char *msg = AUTH_INTERNAL_MSG;

        if (code == KS_OK) {
                code = KS_INTERNAL;
        }
        ks_log_warn(call->request_id, "database call failed", "{s:s, s:s}", "method",
                    call->method ? call->method->name : "", "code", ks_code_name(code));
        if (code == KS_UNAVAILABLE) {
                msg = "service temporarily unavailable, retry later";
        } else if (code == KS_ABORTED) {
                msg = "conflicting concurrent update, retry";
        } else if (code != KS_INTERNAL) {
                /* Any other code from the database is a bug on our side, not the caller's. */
                code = KS_INTERNAL;
        }
        return ks_call_fail(call, code, "%s", msg);
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

void auth_copy_field(const PGresult *res, int row, int col, char *out, size_t out_len)
{
        const char *v = PQgetvalue(res, row, col);
        size_t n = strnlen(v, out_len - 1);

        memcpy(out, v, n);
        out[n] = '\0';
}
