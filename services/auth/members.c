/*
 * Members of the caller's tenant: ListMembers, SetRole, RemoveMember.
 *
 * Rules, besides the permission (tx.c): a caller changes or removes only
 * members ranked at most as high as themselves, and grants at most their own
 * role; the last owner can be neither demoted nor removed
 * (failed_precondition). Every change locks the tenant row first, so two
 * owners demoting each other at once are serialised and the second one sees
 * that it would leave no owner.
 *
 * An unknown user id and a user of another tenant are both not_found:
 * row-level security shows this tenant's memberships only.
 */
#include "auth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

static const char sql_list[] =
    "SELECT m.user_id, u.email, u.display_name, m.role,"
    " floor(extract(epoch FROM m.created_at) * 1000)::int8,"
    " (extract(epoch FROM m.created_at) * 1000000)::int8"
    " FROM auth.memberships m JOIN auth.users u ON u.id = m.user_id"
    " WHERE (m.created_at, m.user_id) >"
    " (timestamptz 'epoch' + $1::int8 * interval '1 microsecond', $2::uuid)"
    " ORDER BY m.created_at, m.user_id LIMIT $3::int";

static const char sql_lock_tenant[] = "SELECT id FROM auth.tenants WHERE id = auth.ctx_tenant()"
                                      " FOR UPDATE";

static const char sql_member[] =
    "SELECT m.role, u.email, u.display_name, floor(extract(epoch FROM m.created_at) * 1000)::int8"
    " FROM auth.memberships m JOIN auth.users u ON u.id = m.user_id"
    " WHERE m.tenant_id = auth.ctx_tenant() AND m.user_id = $1::uuid FOR UPDATE OF m";

static const char sql_owners[] = "SELECT count(*) FROM auth.memberships"
                                 " WHERE tenant_id = auth.ctx_tenant() AND role = 'owner'";

static const char sql_set_role[] = "UPDATE auth.memberships SET role = $2"
                                   " WHERE tenant_id = auth.ctx_tenant() AND user_id = $1::uuid";

static const char sql_remove[] = "DELETE FROM auth.memberships"
                                 " WHERE tenant_id = auth.ctx_tenant() AND user_id = $1::uuid";

/* The member's live sessions in this tenant: revoked on removal, listed on a role change. */
static const char sql_sessions_live[] =
    "SELECT token_sha256 FROM auth.sessions WHERE tenant_id = auth.ctx_tenant()"
    " AND user_id = $1::uuid AND revoked_at IS NULL AND expires_at > now()";

static const char sql_sessions_revoke[] =
    "UPDATE auth.sessions SET revoked_at = now() WHERE tenant_id = auth.ctx_tenant()"
    " AND user_id = $1::uuid AND revoked_at IS NULL AND expires_at > now()"
    " RETURNING token_sha256";

/* ---- ListMembers -------------------------------------------------------- */

static void member_item(void *item, const PGresult *res, int row)
{
        Keelson__Auth__V1__Member *m = item;

        keelson__auth__v1__member__init(m);
        m->user_id = PQgetvalue(res, row, 0);
        m->email = PQgetvalue(res, row, 1);
        m->display_name = PQgetvalue(res, row, 2);
        m->role = PQgetvalue(res, row, 3);
        m->joined_at_unix_ms = auth_int_field(res, row, 4);
}

/* Oldest membership first; the sort key is (created_at in micros, user_id). */
static const ks_list_method list_members = {
    .page = AUTH_LIST_PAGE("ListMembers", Keelson__Auth__V1__Member, member_item,
                           KS_LIST_ASC_MICROS(5), KS_LIST_ASC_UUID(0)),
    .sql = sql_list,
    .items_field = "members",
};

int auth_list_members(ks_call *call)
{
        const Keelson__Auth__V1__ListMembersRequest *req =
            (const Keelson__Auth__V1__ListMembersRequest *)call->in;

        return auth_list_reply(call, &list_members, req->page_size, req->page_token, NULL, 0);
}

/* ---- shared by SetRole and RemoveMember --------------------------------- */

typedef struct member_change {
        const char *user_id;
        const char *role; /* SetRole: the new role */
        PGresult *member; /* the target's row, locked */
        char old_role[AUTH_ROLE_MAX];
} member_change;

/*
 * Locks the tenant, then the target's membership, and applies the rank
 * rules. Returns KS_OK, or a code the call already carries.
 */
static int lock_target(auth_tx *tx, member_change *c)
{
        const char *params[1] = {c->user_id};
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_lock_tenant, 0, NULL, NULL)) !=
                KS_OK ||
            (rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_member, 1, params, &c->member)) !=
                KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(c->member) != 1) {
                return ks_call_fail(tx->call, KS_NOT_FOUND, "no such member");
        }
        auth_copy_field(c->member, 0, 0, c->old_role, sizeof(c->old_role));
        if (ks_role_rank(c->old_role) > tx->actor.rank) {
                return ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                    "this member's role (%s) is above yours (%s)", c->old_role,
                                    tx->actor.role);
        }
        return KS_OK;
}

/* FAILED_PRECONDITION when the target is the tenant's only owner. */
static int check_not_last_owner(auth_tx *tx, const member_change *c)
{
        PGresult *res = NULL;
        long owners;
        int rc;

        if (strcmp(c->old_role, "owner") != 0) {
                return KS_OK;
        }
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_owners, 0, NULL, &res)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        owners = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        if (owners <= 1) {
                return ks_call_fail(
                    tx->call, KS_FAILED_PRECONDITION,
                    "the last owner of a tenant can be neither demoted nor removed");
        }
        return KS_OK;
}

/* The member's sessions: revoked (removal) or only listed (role change), and the event. */
static int tell_caches(auth_tx *tx, const char *user_id, bool revoke, const char *reason)
{
        const char *params[1] = {user_id};
        auth_revocation r = {tx->actor.tenant_id, user_id, NULL, reason};
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id,
                             revoke ? sql_sessions_revoke : sql_sessions_live, 1, params, &res)) ==
            KS_OK) {
                rc = auth_emit_context_revoked(tx->conn, tx->call->request_id, &r, res, 0);
        }
        PQclear(res);
        return rc;
}

/* ---- SetRole ------------------------------------------------------------ */

static int set_role_changes(auth_tx *tx, member_change *c)
{
        const char *params[2] = {c->user_id, c->role};
        const char *rid = tx->call->request_id;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, rid, sql_set_role, 2, params, NULL)) != KS_OK ||
            (rc = tell_caches(tx, c->user_id, false, "role_changed")) != KS_OK ||
            (rc = auth_audit(tx->conn, rid, &tx->actor, "member.role_set", "user", c->user_id,
                             json_pack("{s:s, s:s, s:s}", "email", PQgetvalue(c->member, 0, 1),
                                       "from", c->old_role, "to", c->role))) != KS_OK ||
            (rc = auth_emit_admin_summary(tx->conn, rid, tx->actor.tenant_id, "SetRole")) !=
                KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

static int set_role_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__SetRoleResponse resp = KEELSON__AUTH__V1__SET_ROLE_RESPONSE__INIT;
        Keelson__Auth__V1__Member m;
        member_change *c = arg;
        int rc;

        if ((rc = lock_target(tx, c)) != KS_OK) {
                return rc;
        }
        if (ks_role_rank(c->role) > tx->actor.rank) {
                return ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                    "cannot grant a role above your own (%s)", tx->actor.role);
        }
        /* The same role again changes nothing: no audit row, no event. */
        if (strcmp(c->old_role, c->role) != 0) {
                if (strcmp(c->role, "owner") != 0 && (rc = check_not_last_owner(tx, c)) != KS_OK) {
                        return rc;
                }
                if ((rc = set_role_changes(tx, c)) != KS_OK) {
                        return rc;
                }
        }
        keelson__auth__v1__member__init(&m);
        m.user_id = (char *)c->user_id;
        m.email = PQgetvalue(c->member, 0, 1);
        m.display_name = PQgetvalue(c->member, 0, 2);
        m.role = (char *)c->role;
        m.joined_at_unix_ms = auth_int_field(c->member, 0, 3);
        resp.member = &m;
        return ks_call_reply(tx->call, &resp.base);
}

int auth_set_role(ks_call *call)
{
        const Keelson__Auth__V1__SetRoleRequest *req =
            (const Keelson__Auth__V1__SetRoleRequest *)call->in;
        member_change c;
        int rc;

        memset(&c, 0, sizeof(c));
        if (!auth_uuid_valid(req->user_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "user_id: not a valid uuid");
        }
        if (ks_role_rank(req->role) == 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "role: one of owner, admin, member, viewer");
        }
        c.user_id = req->user_id;
        c.role = req->role;
        rc = auth_tenant_tx(call, AUTH_TX_DEDUPE, set_role_tx, &c);
        PQclear(c.member);
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "role set", "{s:s, s:s}", "user_id", req->user_id,
                            "role", req->role);
        }
        return rc;
}

/* ---- RemoveMember ------------------------------------------------------- */

static int remove_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__RemoveMemberResponse resp =
            KEELSON__AUTH__V1__REMOVE_MEMBER_RESPONSE__INIT;
        member_change *c = arg;
        const char *params[1] = {c->user_id};
        const char *rid = tx->call->request_id;
        int rc;

        if ((rc = lock_target(tx, c)) != KS_OK || (rc = check_not_last_owner(tx, c)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_exec(tx->conn, rid, sql_remove, 1, params, NULL)) != KS_OK ||
            (rc = tell_caches(tx, c->user_id, true, "member_removed")) != KS_OK ||
            (rc = auth_audit(tx->conn, rid, &tx->actor, "member.removed", "user", c->user_id,
                             json_pack("{s:s, s:s}", "email", PQgetvalue(c->member, 0, 1), "role",
                                       c->old_role))) != KS_OK ||
            (rc = auth_emit_admin_summary(tx->conn, rid, tx->actor.tenant_id, "RemoveMember")) !=
                KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return ks_call_reply(tx->call, &resp.base);
}

int auth_remove_member(ks_call *call)
{
        const Keelson__Auth__V1__RemoveMemberRequest *req =
            (const Keelson__Auth__V1__RemoveMemberRequest *)call->in;
        member_change c;
        int rc;

        memset(&c, 0, sizeof(c));
        if (!auth_uuid_valid(req->user_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "user_id: not a valid uuid");
        }
        c.user_id = req->user_id;
        rc = auth_tenant_tx(call, AUTH_TX_DEDUPE, remove_tx, &c);
        PQclear(c.member);
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "member removed", "{s:s}", "user_id", req->user_id);
        }
        return rc;
}
