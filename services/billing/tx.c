/*
 * The frame of every billing method: who calls, in which tenant, with which
 * permission, under which Idempotency-Key, in one transaction.
 *
 * The role is the one the gateway resolved for the caller (session or API
 * key), checked against the permission of the method's row (methods.def,
 * services/core/ks_perms.c). Billing keeps no copy of memberships: a role
 * change revokes the contexts the gateways cache (auth.context_revoked),
 * so a demoted caller's next call carries the new role.
 *
 * A transaction runs as keelson_billing_rt (the pool's role) with
 * keelson.tenant_id set for it: the row-level security policies of every
 * table match only that tenant's rows, whatever a query forgets.
 */
#include "billing.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"
#include "ks_perms.h"

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

int bl_require_tenant(ks_call *call)
{
        const ks_caller *c = call->caller;

        /* From the gateway over the internal network; still, nothing malformed reaches SQL. */
        if (!c->authenticated || c->tenant_id == NULL || !bl_uuid_valid(c->tenant_id)) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        return KS_OK;
}

int bl_fail(bl_tx *tx, int code, const char *fmt, ...)
{
        char msg[KS_MESSAGE_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (tx->call != NULL) {
                return ks_call_fail(tx->call, code, "%s", msg);
        }
        ks_log_warn(tx->request_id, "billing step refused", "{s:s, s:s, s:s}", "tenant_id",
                    tx->tenant_id, "code", ks_code_name(code), "message", msg);
        return code;
}

int bl_db_fail(bl_tx *tx, int code)
{
        const char *msg = BL_INTERNAL_MSG;

        ks_log_warn(tx->request_id, "billing database call failed", "{s:s, s:s}", "method",
                    tx->call != NULL && tx->call->method ? tx->call->method->name : "", "code",
                    ks_code_name(code));
        if (code == KS_UNAVAILABLE) {
                msg = "service temporarily unavailable, retry later";
        } else if (code == KS_ABORTED || code == KS_ALREADY_EXISTS) {
                /* A conflict with a concurrent write that committed first: a retry sees it. */
                code = KS_ABORTED;
                msg = "conflicting concurrent update, retry";
        } else if (code == KS_DEADLINE_EXCEEDED) {
                msg = "the database did not answer in time, retry later";
        } else {
                code = KS_INTERNAL;
        }
        return bl_fail(tx, code, "%s", msg);
}

int bl_exec(bl_tx *tx, const char *sql, int n, const char *const *params, PGresult **out)
{
        int rc = ks_pg_exec(tx->conn, tx->request_id, sql, n, params, out);

        return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
}

int bl_pipeline(bl_tx *tx, const ks_pg_stmt *stmts, int n)
{
        int rc = ks_pg_pipeline(tx->conn, tx->request_id, stmts, n);

        return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
}

const char *bl_text(const PGresult *res, int row, int col)
{
        return PQgetisnull(res, row, col) ? "" : PQgetvalue(res, row, col);
}

int64_t bl_int(const PGresult *res, int row, int col)
{
        return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

bool bl_bool(const PGresult *res, int row, int col)
{
        return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

bl_num bl_num_of(int64_t v)
{
        bl_num n;

        snprintf(n.s, sizeof(n.s), "%lld", (long long)v);
        return n;
}

/* BEGIN and the tenant, in one round trip. */
static int open_tx(bl_tx *tx)
{
        const char *params[1] = {tx->tenant_id};
        const ks_pg_stmt s[2] = {{.sql = "BEGIN"},
                                 {.sql = sql_act_for, .n_params = 1, .params = params}};

        return bl_pipeline(tx, s, 2);
}

static int commit(bl_tx *tx)
{
        int rc = ks_pg_commit(tx->conn, tx->request_id);

        return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
}

/* Everything between BEGIN and COMMIT. *replayed: the reply is a stored one. */
static int run_in_tx(bl_tx *tx, bl_tx_fn fn, void *arg, bool *replayed)
{
        bl_idem_state idem = BL_IDEM_NONE;
        int rc, stored = KS_OK;

        *replayed = false;
        if ((rc = open_tx(tx)) != KS_OK) {
                return rc;
        }
        if ((rc = bl_idem_claim(tx, &idem, &stored)) != KS_OK) {
                return rc;
        }
        if (idem == BL_IDEM_REPLAYED) {
                *replayed = true;
                return stored;
        }
        if ((rc = fn(tx, arg)) != KS_OK) {
                return rc;
        }
        if (idem == BL_IDEM_NEW && (rc = bl_idem_store(tx, KS_OK)) != KS_OK) {
                return rc;
        }
        return commit(tx);
}

int bl_tx_run(ks_call *call, bl_tx_fn fn, void *arg)
{
        unsigned perm = call->method->permission; /* its methods.def row */
        bl_tx tx;
        bool replayed = false;
        int rc;

        if ((rc = bl_require_tenant(call)) != KS_OK) {
                return rc;
        }
        if (perm != 0 && (ks_role_perms(call->caller->role) & perm) == 0) {
                return ks_call_fail(call, KS_PERMISSION_DENIED, "your role (%s) lacks %s",
                                    call->caller->role ? call->caller->role : "",
                                    ks_perm_name(perm));
        }
        memset(&tx, 0, sizeof(tx));
        tx.call = call;
        tx.svc = call->service;
        tx.tenant_id = call->caller->tenant_id;
        tx.request_id = call->request_id;
        if ((rc = ks_pg_acquire(tx.svc->pool, &tx.conn)) != KS_OK) {
                return bl_db_fail(&tx, rc);
        }
        rc = run_in_tx(&tx, fn, arg, &replayed);
        if (rc != KS_OK || replayed) {
                ks_pg_rollback(tx.conn);
        }
        ks_pg_release(tx.svc->pool, tx.conn);
        call->replayed = replayed;
        if (rc != KS_OK && !replayed && call->idempotency_key[0] != '\0' && bl_idem_keeps(rc)) {
                /* The request ran and was refused for what it asked: a retry is answered the same.
                 */
                bl_idem_store_failure(call, rc);
        }
        return rc;
}

int bl_tx_run_as(bl_service *svc, const char *request_id, const char *tenant_id, bl_tx_fn fn,
                 void *arg)
{
        bl_tx tx = {.svc = svc, .tenant_id = tenant_id, .request_id = request_id};
        int rc;

        if (!bl_uuid_valid(tenant_id)) {
                return KS_INTERNAL;
        }
        if ((rc = ks_pg_acquire(svc->pool, &tx.conn)) != KS_OK) {
                return rc;
        }
        if ((rc = open_tx(&tx)) == KS_OK && (rc = fn(&tx, arg)) == KS_OK) {
                rc = commit(&tx);
        }
        if (rc != KS_OK) {
                ks_pg_rollback(tx.conn);
        }
        ks_pg_release(svc->pool, tx.conn);
        return rc;
}
