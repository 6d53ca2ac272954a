/*
 * The frame of every tenant method: one transaction acting for the caller's
 * tenant, as keelson_webhook_rt (the pool's role) with keelson.tenant_id
 * set, so that the row-level security policies of every table match only
 * that tenant's rows, whatever a query forgets.
 *
 * The role is the one the gateway resolved for the caller (session or API
 * key): the RPC server checked it against the method's permission
 * (methods.def, services/core/ks_perms.c) before the handler ran, since the
 * service's spec says role_from_caller (main.c).
 */
#include <stdio.h>
#include <string.h>

#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_text.h"
#include "webhook.h"

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

int wh_db_fail(ks_call *call, int code)
{
        if (code == KS_PG_DEFERRED) {
                return code; /* a read recorded for the loop's batch: no failure */
        }
        ks_log_warn(call->request_id, "webhook database call failed", "{s:s, s:s}", "method",
                    call->method != NULL ? call->method->name : "", "code", ks_code_name(code));
        switch (code) {
        case KS_UNAVAILABLE:
                return ks_call_fail(call, code, "service temporarily unavailable, retry later");
        case KS_ABORTED:
        case KS_ALREADY_EXISTS:
                /* A conflict with a concurrent write that committed first: a retry sees it. */
                return ks_call_fail(call, KS_ABORTED, "conflicting concurrent update, retry");
        case KS_DEADLINE_EXCEEDED:
                return ks_call_fail(call, code, "the database did not answer in time, retry later");
        default:
                return ks_call_fail(call, KS_INTERNAL, WH_INTERNAL_MSG);
        }
}

/*
 * A read of tx's tenant in one round trip: the tenant, then the statements,
 * with no BEGIN or COMMIT; PostgreSQL runs them as one transaction, which
 * the pipeline's Sync ends (ks_pg_read, which may answer it from the loop's
 * batch).
 */
static int read_round(wh_tx *tx, const ks_pg_stmt *reads, int n)
{
        const char *p[1] = {tx->tenant_id};
        const ks_pg_stmt act_for = {.sql = sql_act_for, .n_params = 1, .params = p};
        int rc = ks_pg_read(tx->conn, tx->call->request_id, &act_for, 1, reads, n);

        return rc == KS_OK ? KS_OK : wh_db_fail(tx->call, rc);
}

int wh_exec(wh_tx *tx, const char *sql, int n, const char *const *params, PGresult **out)
{
        if (tx->reads_only) {
                const ks_pg_stmt s = {.sql = sql, .n_params = n, .params = params, .out = out};
                return read_round(tx, &s, 1);
        }
        int rc = ks_pg_exec(tx->conn, tx->call->request_id, sql, n, params, out);

        return rc == KS_OK ? KS_OK : wh_db_fail(tx->call, rc);
}

int wh_pipeline(wh_tx *tx, const ks_pg_stmt *stmts, int n)
{
        if (tx->reads_only) {
                return read_round(tx, stmts, n);
        }
        int rc = ks_pg_pipeline(tx->conn, tx->call->request_id, stmts, n);

        return rc == KS_OK ? KS_OK : wh_db_fail(tx->call, rc);
}

/* The caller's tenant (checked) and a pool connection, before a call's first statement. */
static int call_tx(ks_call *call, wh_tx *tx)
{
        const ks_caller *c = call->caller;
        int rc;

        *tx = (wh_tx){.call = call, .svc = call->service};
        /* From the gateway over the internal network; still, nothing malformed reaches SQL. */
        if (!c->authenticated || c->tenant_id == NULL || !ks_uuid_valid(c->tenant_id)) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        tx->tenant_id = c->tenant_id;
        if ((rc = ks_pg_acquire(tx->svc->pool, &tx->conn)) != KS_OK) {
                return wh_db_fail(call, rc);
        }
        return KS_OK;
}

int wh_tx_run_reads(ks_call *call, wh_tx_fn fn, void *arg)
{
        wh_tx tx;
        int rc;

        if ((rc = call_tx(call, &tx)) != KS_OK) {
                return rc;
        }
        tx.reads_only = true;
        rc = fn(&tx, arg);
        ks_pg_release(tx.svc->pool, tx.conn);
        return rc;
}

int wh_tx_run(ks_call *call, wh_tx_fn fn, void *arg)
{
        wh_tx tx;
        int rc;

        if ((rc = call_tx(call, &tx)) != KS_OK) {
                return rc;
        }
        const char *p[1] = {tx.tenant_id};
        const ks_pg_stmt open[2] = {{.sql = "BEGIN"},
                                    {.sql = sql_act_for, .n_params = 1, .params = p}};
        if ((rc = ks_pg_pipeline(tx.conn, call->request_id, open, 2)) != KS_OK) {
                rc = wh_db_fail(call, rc);
        } else if ((rc = fn(&tx, arg)) == KS_OK &&
                   (rc = ks_pg_commit(tx.conn, call->request_id)) != KS_OK) {
                rc = wh_db_fail(call, rc);
        }
        if (rc != KS_OK) {
                ks_pg_rollback(tx.conn);
        }
        ks_pg_release(tx.svc->pool, tx.conn);
        return rc;
}

/* ---- fields ------------------------------------------------------------------------------ */

int wh_description_of(ks_call *call, const char *in, char *out, size_t len)
{
        char err[KS_MESSAGE_MAX];

        if (ks_name_normalize("description", in, WH_DESCRIPTION_MAX, out, len, err, sizeof(err)) !=
            KS_OK) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return KS_OK;
}

int wh_rotate_window(ks_call *call, int64_t in_s, int64_t *out_s)
{
        if (in_s == 0) {
                *out_s = WH_ROTATE_DEFAULT_S;
                return KS_OK;
        }
        if (in_s < 1 || in_s > WH_ROTATE_MAX_S) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "previous_expires_in_s: 1..%d seconds (0: %d)", WH_ROTATE_MAX_S,
                                    WH_ROTATE_DEFAULT_S);
        }
        *out_s = in_s;
        return KS_OK;
}

/* ---- lists ------------------------------------------------------------------------------ */

/* A page is one read (wh_tx_run_reads): the tenant and the page query in one round trip. */
static int list_page(wh_tx *tx, void *query)
{
        return wh_pipeline(tx, query, 1);
}

static int list_run(ks_call *call, const ks_pg_stmt *query, void *run_arg)
{
        (void)run_arg;
        return wh_tx_run_reads(call, list_page, (void *)query);
}

const ks_list_runner wh_list_runner = {.run = list_run, .internal_msg = WH_INTERNAL_MSG};
