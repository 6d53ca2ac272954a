/*
 * The figures from PostgreSQL, through the tenant-isolated path auth grants
 * (services/auth/migrations/004_summary_reader.sql): every connection runs
 * as keelson_summary_rt, which may SELECT a few columns and whose row-level
 * security policies match only the tenant named by the transaction's
 * set_config('keelson.tenant_id', ..., true). Each query also filters by the
 * tenant itself: the policy is the second wall, not the only one.
 *
 * One statement, one grouped query per table (COUNT(*) FILTER), whatever the
 * number of users or roles. A fill is SM_SQL_PER_FILL statements, each counted.
 */
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

/*
 * One statement, one grouped count per table. Roles come from memberships
 * alone. The locked members are read from the other end: the users with a
 * lock time in the future, through auth's partial index on locked_until,
 * each checked against the tenant's membership key. Every other member is
 * active. Joining every member's user row to read its lock time cost 27 ms
 * for a tenant of 10,000 members; this costs 5.
 */
static const char sql_counts[] =
    "SELECT m.members - l.locked, l.locked, m.owner, m.admin, m.member, m.viewer, i.pending,"
    " k.keys FROM"
    " (SELECT count(*) AS members,"
    "         count(*) FILTER (WHERE role = 'owner') AS owner,"
    "         count(*) FILTER (WHERE role = 'admin') AS admin,"
    "         count(*) FILTER (WHERE role = 'member') AS member,"
    "         count(*) FILTER (WHERE role = 'viewer') AS viewer"
    "    FROM auth.memberships WHERE tenant_id = $1::uuid) m,"
    " (SELECT count(*) AS locked FROM auth.users u"
    "   WHERE u.locked_until > now() AND EXISTS (SELECT 1 FROM auth.memberships mm"
    "     WHERE mm.tenant_id = $1::uuid AND mm.user_id = u.id)) l,"
    " (SELECT count(*) AS pending FROM auth.invitations"
    "   WHERE tenant_id = $1::uuid AND accepted_at IS NULL AND revoked_at IS NULL"
    "     AND expires_at > now()) i,"
    " (SELECT count(*) AS keys FROM auth.api_keys"
    "   WHERE tenant_id = $1::uuid AND revoked_at IS NULL"
    "     AND (expires_at IS NULL OR expires_at > now())) k";

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
