/*
 * The figures from PostgreSQL, through the one door auth owns for them:
 * auth.tenant_summary(tenant) (services/auth/migrations/007_summary_contract.sql,
 * documented in docs/architecture.md). Every connection runs as
 * keelson_summary_rt, which may execute that function and read no table of
 * auth's; the function's row-level security policies match only the tenant
 * named by the transaction's set_config('keelson.tenant_id', ..., true), and
 * it filters by its argument too: the policy is the second wall.
 *
 * One call, whatever the number of users or roles. A fill is SM_SQL_PER_FILL
 * statements, each counted.
 */
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

/*
 * Auth's contract (services/auth/migrations/007_summary_contract.sql): one
 * row of counts for the tenant, whatever auth's tables look like inside.
 */
static const char sql_counts[] =
    "SELECT active, locked, owners, admins, members, viewers, pending_invitations,"
    " active_api_keys FROM auth.tenant_summary($1::uuid)";

static int64_t field(const PGresult *res, int col)
{
        return (int64_t)strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

static void read_counts(const PGresult *res, sm_counts *out)
{
        memset(out, 0, sizeof(*out));
        out->active = field(res, 0);
        out->locked = field(res, 1);
        out->owner = field(res, 2);
        out->admin = field(res, 3);
        out->member = field(res, 4);
        out->viewer = field(res, 5);
        out->pending_invitations = field(res, 6);
        out->active_api_keys = field(res, 7);
        /*
         * The states are what auth's schema has (services/auth/migrations):
         * a member's only state is the login lock (auth.users.locked_until),
         * so every member is active or locked. An invited user is an address
         * with an open invitation; auth keeps at most one per address and
         * tenant (invitations_open_idx) and refuses to invite a member, so
         * that is exactly the pending-invitation count. Auth has no way to
         * disable an account: no column says so, and none is made up here.
         */
        out->invited = out->pending_invitations;
        out->disabled = 0;
        out->computed_ms = ks_now_ms();
}

static int run(sm_service *svc, PGconn *conn, const char *rid, const char *sql, int n,
               const char *const *params, PGresult **res)
{
        ks_counter_inc(svc->m.sql);
        return ks_pg_exec(conn, rid, sql, n, params, res);
}

int sm_db_counts(sm_service *svc, const char *request_id, const char *tenant, sm_counts *out)
{
        const char *params[1] = {tenant};
        PGconn *conn = NULL;
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        ks_counter_inc(svc->m.sql);
        rc = ks_pg_begin(conn, request_id);
        if (rc == KS_OK) {
                rc = run(svc, conn, request_id, sql_act_for, 1, params, &res);
                PQclear(res);
                res = NULL;
        }
        if (rc == KS_OK) {
                rc = run(svc, conn, request_id, sql_counts, 1, params, &res);
        }
        if (rc == KS_OK && PQntuples(res) != 1) {
                rc = KS_INTERNAL;
        }
        if (rc == KS_OK) {
                read_counts(res, out);
                ks_counter_inc(svc->m.sql);
                rc = ks_pg_commit(conn, request_id);
        }
        PQclear(res);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        return rc;
}
