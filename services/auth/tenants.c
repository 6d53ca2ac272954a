/*
 * A user across tenants: ListTenants, SwitchTenant, RevokeAllSessions.
 *
 * SwitchTenant issues a new session bound to the other tenant and revokes
 * the caller's current one, in one transaction that acts first for the
 * target tenant (the membership check and the insert) and then for the
 * current one (the revocation). The old token stops working at once, and
 * auth.context_revoked tells caches so.
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

static const char sql_tenants[] =
    "SELECT tenant_id, tenant_name, role, joined_at_ms FROM auth.user_tenants($1::uuid)";

static const char sql_revoke_session[] =
    "UPDATE auth.sessions SET revoked_at = now()"
    " WHERE id = $1::uuid AND user_id = $2::uuid AND revoked_at IS NULL"
    " RETURNING token_sha256";

static const char sql_revoke_user[] =
    "SELECT * FROM auth.revoke_user_sessions($1::uuid, NULLIF($2, '')::uuid)";

int auth_list_tenants(ks_call *call)
{
        Keelson__Auth__V1__ListTenantsResponse resp =
            KEELSON__AUTH__V1__LIST_TENANTS_RESPONSE__INIT;
        Keelson__Auth__V1__TenantMembership *t = NULL, **ptrs = NULL;
        auth_actor a;
        const char *params[1] = {a.user_id};
        PGresult *res = NULL;
        int rc, n;

        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if ((rc = auth_db_exec_once(call->service, call->request_id, sql_tenants, 1, params,
                                    &res)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        n = PQntuples(res);
        t = calloc((size_t)n + 1, sizeof(*t));
        ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
        if (t == NULL || ptrs == NULL) {
                rc = ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        } else {
                for (int i = 0; i < n; i++) {
                        keelson__auth__v1__tenant_membership__init(&t[i]);
                        t[i].tenant_id = PQgetvalue(res, i, 0);
                        t[i].tenant_name = PQgetvalue(res, i, 1);
                        t[i].role = PQgetvalue(res, i, 2);
                        t[i].joined_at_unix_ms = auth_int_field(res, i, 3);
                        ptrs[i] = &t[i];
                }
                resp.n_tenants = (size_t)n;
                resp.tenants = ptrs;
                rc = ks_call_reply(call, &resp.base);
        }
        free(ptrs);
        free(t);
        PQclear(res);
        return rc;
}

/* Revokes the caller's session (acting for its tenant) and queues the event. */
static int revoke_current(PGconn *conn, const char *request_id, const auth_actor *a,
                          const char *reason)
{
        const char *params[2] = {a->session_id, a->user_id};
        auth_revocation r = {a->tenant_id, a->user_id, NULL, reason};
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_tx_act_for(conn, request_id, a->tenant_id, a->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, request_id, sql_revoke_session, 2, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 0) {
                /* Revoked meanwhile (a repeat of this call): the switch must not happen twice. */
                PQclear(res);
                return KS_FAILED_PRECONDITION;
        }
        rc = auth_emit_context_revoked(conn, request_id, &r, res, 0);
        PQclear(res);
        return rc;
}

static int switch_tx(auth_service *svc, PGconn *conn, const char *request_id, const auth_actor *a,
                     const char *target, auth_session *s)
{
        int rc;

        if ((rc = auth_tx_begin(conn, request_id, target, a->user_id)) != KS_OK ||
            (rc = auth_session_create(svc, conn, request_id, a->user_id, target, s)) != KS_OK ||
            (rc = revoke_current(conn, request_id, a, "tenant_switched")) != KS_OK) {
                return rc;
        }
        return ks_pg_commit(conn, request_id);
}

static int reply_switch(ks_call *call, const char *user_id, const auth_session *s)
{
        Keelson__Auth__V1__SwitchTenantResponse resp =
            KEELSON__AUTH__V1__SWITCH_TENANT_RESPONSE__INIT;

        resp.session_token = (char *)s->token;
        resp.expires_at_unix_ms = s->expires_at_unix_ms;
        resp.user_id = (char *)user_id;
        resp.tenant_id = (char *)s->tenant_id;
        resp.role = (char *)s->role;
        return ks_call_reply(call, &resp.base);
}

int auth_switch_tenant(ks_call *call)
{
        const Keelson__Auth__V1__SwitchTenantRequest *req =
            (const Keelson__Auth__V1__SwitchTenantRequest *)call->in;
        auth_service *svc = call->service;
        PGconn *conn = NULL;
        auth_session s;
        auth_actor a;
        int rc;

        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if (a.session_id[0] == '\0') {
                return ks_call_fail(call, KS_FAILED_PRECONDITION,
                                    "the caller is not authenticated by a session");
        }
        if (!auth_uuid_valid(req->tenant_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "tenant_id: not a valid uuid");
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = switch_tx(svc, conn, call->request_id, &a, req->tenant_id, &s);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        if (rc == KS_NOT_FOUND) {
                /* Unknown and foreign tenants alike: nothing tells them apart. */
                return ks_call_fail(call, KS_NOT_FOUND, "no such tenant");
        }
        if (rc == KS_FAILED_PRECONDITION) {
                return ks_call_fail(call, rc, "this session was revoked meanwhile");
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "tenant switched", "{s:s, s:s, s:s}", "user_id", a.user_id,
                    "from_tenant_id", a.tenant_id, "tenant_id", s.tenant_id);
        rc = reply_switch(call, a.user_id, &s);
        explicit_bzero(s.token, sizeof(s.token));
        return rc;
}

/*
 * Inside an open transaction: revokes every session of the user (but
 * keep_session_id) in every tenant and queues the events. *n is how many.
 */
int auth_revoke_user_sessions(PGconn *conn, const char *request_id, const char *user_id,
                              const char *keep_session_id, const char *reason, int *n)
{
        const char *params[2] = {user_id, keep_session_id ? keep_session_id : ""};
        auth_revocation r = {NULL, user_id, NULL, reason};
        PGresult *res = NULL;
        int rc;

        *n = 0;
        if ((rc = ks_pg_exec(conn, request_id, sql_revoke_user, 2, params, &res)) != KS_OK) {
                return rc;
        }
        *n = PQntuples(res);
        rc = *n > 0 ? auth_emit_context_revoked(conn, request_id, &r, res, 0) : KS_OK;
        PQclear(res);
        return rc;
}

int auth_revoke_all_sessions(ks_call *call)
{
        const Keelson__Auth__V1__RevokeAllSessionsRequest *req =
            (const Keelson__Auth__V1__RevokeAllSessionsRequest *)call->in;
        Keelson__Auth__V1__RevokeAllSessionsResponse resp =
            KEELSON__AUTH__V1__REVOKE_ALL_SESSIONS_RESPONSE__INIT;
        auth_service *svc = call->service;
        PGconn *conn = NULL;
        auth_actor a;
        int rc, n = 0;

        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if ((rc = auth_tx_begin(conn, call->request_id, a.tenant_id, a.user_id)) == KS_OK &&
            (rc = auth_revoke_user_sessions(conn, call->request_id, a.user_id,
                                            req->keep_current ? a.session_id : NULL,
                                            "sessions_revoked", &n)) == KS_OK) {
                rc = ks_pg_commit(conn, call->request_id);
        }
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "sessions revoked", "{s:s, s:i}", "user_id", a.user_id,
                    "sessions", n);
        resp.revoked_sessions = n;
        return ks_call_reply(call, &resp.base);
}
