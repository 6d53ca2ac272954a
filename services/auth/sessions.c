/*
 * Sessions: creation (Login, SwitchTenant, AcceptInvitation), ResolveContext,
 * WhoAmI and Logout.
 *
 * A session token is 32 random bytes in base64url (43 characters). Only its
 * SHA-256 is stored, so a copy of the table does not let anyone in. Expiry
 * and revocation are checked in SQL on every read against the database
 * clock, the one clock every replica shares. A session is bound to one
 * tenant for its whole life: moving to another tenant issues a new token
 * (tenants.c), so a cached context can be stale only by being revoked.
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

/*
 * The session row is inserted only if the membership exists (the SELECT
 * feeds the INSERT), and the role comes back from the same statement: no
 * window between "is a member" and "has a session". Runs in a transaction
 * acting for the tenant, so row-level security sees that tenant only.
 */
static const char sql_session_insert[] =
    "WITH m AS (SELECT tenant_id, role FROM auth.memberships"
    " WHERE user_id = $2::uuid AND tenant_id = $4::uuid),"
    " s AS (INSERT INTO auth.sessions (token_sha256, user_id, tenant_id, expires_at)"
    " SELECT $1::bytea, $2::uuid, m.tenant_id, now() + $3::int8 * interval '1 second'"
    " FROM m RETURNING id, tenant_id, expires_at)"
    " SELECT s.id, s.tenant_id, m.role, floor(extract(epoch FROM s.expires_at) * 1000)::int8"
    " FROM s JOIN m USING (tenant_id)";

/* Login without a tenant: the oldest membership (see the function's comment). */
static const char sql_first_tenant[] = "SELECT tenant_id FROM auth.user_tenants($1::uuid) LIMIT 1";

static const char sql_resolve_session[] =
    "SELECT session_id, user_id, tenant_id, role, expires_at_ms"
    " FROM auth.resolve_session($1::bytea)";

static const char sql_resolve_key[] =
    "SELECT api_key_id, tenant_id, role, expires_at_ms FROM auth.resolve_api_key($1::bytea)";

static const char sql_whoami[] = "SELECT u.id, u.email, u.display_name, t.id, t.name, m.role"
                                 " FROM auth.memberships m"
                                 " JOIN auth.users u ON u.id = m.user_id"
                                 " JOIN auth.tenants t ON t.id = m.tenant_id"
                                 " WHERE m.tenant_id = $1::uuid AND m.user_id = $2::uuid";

static const char sql_logout[] =
    "UPDATE auth.sessions SET revoked_at = now()"
    " WHERE id = $1::uuid AND tenant_id = $2::uuid AND user_id = $3::uuid"
    " AND revoked_at IS NULL RETURNING token_sha256";

void auth_token_hash_param(const char *token, size_t len, char out[AUTH_SHA256_PARAM_LEN])
{
        out[0] = '\\';
        out[1] = 'x';
        ks_sha256_hex(token, len, out + 2);
}

int auth_new_token(char out[AUTH_TOKEN_LEN + 1])
{
        uint8_t raw[AUTH_TOKEN_BYTES];
        int n;

        if (ks_random_bytes(raw, sizeof(raw)) != 0) {
                return KS_INTERNAL;
        }
        n = ks_base64url_encode(raw, sizeof(raw), out, AUTH_TOKEN_LEN + 1);
        explicit_bzero(raw, sizeof(raw));
        return n == AUTH_TOKEN_LEN ? KS_OK : KS_INTERNAL;
}

int auth_session_create(auth_service *svc, PGconn *conn, const char *request_id,
                        const char *user_id, const char *tenant_id, auth_session *out)
{
        char hash[AUTH_SHA256_PARAM_LEN], ttl[24];
        const char *params[4] = {hash, user_id, ttl, tenant_id};
        PGresult *res = NULL;
        int rc;

        memset(out, 0, sizeof(*out));
        if ((rc = auth_new_token(out->token)) != KS_OK) {
                ks_log_error(request_id, "no random bytes for a session token", NULL);
                return rc;
        }
        auth_token_hash_param(out->token, AUTH_TOKEN_LEN, hash);
        snprintf(ttl, sizeof(ttl), "%lld", (long long)svc->session_ttl_s);
        if ((rc = ks_pg_exec(conn, request_id, sql_session_insert, 4, params, &res)) != KS_OK) {
                /* A duplicate token hash is a 2^-128 event, not the caller's fault. */
                return rc == KS_ALREADY_EXISTS ? KS_INTERNAL : rc;
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_NOT_FOUND;
        }
        auth_copy_field(res, 0, 0, out->session_id, sizeof(out->session_id));
        auth_copy_field(res, 0, 1, out->tenant_id, sizeof(out->tenant_id));
        auth_copy_field(res, 0, 2, out->role, sizeof(out->role));
        out->expires_at_unix_ms = auth_int_field(res, 0, 3);
        PQclear(res);
        return KS_OK;
}

static int first_tenant(PGconn *conn, const char *request_id, const char *user_id,
                        char out[AUTH_UUID_LEN + 1])
{
        const char *params[1] = {user_id};
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(conn, request_id, sql_first_tenant, 1, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_NOT_FOUND;
        }
        auth_copy_field(res, 0, 0, out, AUTH_UUID_LEN + 1);
        PQclear(res);
        return KS_OK;
}

int auth_session_open(auth_service *svc, const char *request_id, const char *user_id,
                      const char *tenant_id, auth_session *out)
{
        char first[AUTH_UUID_LEN + 1];
        PGconn *conn = NULL;
        int rc;

        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        if (tenant_id == NULL && (rc = first_tenant(conn, request_id, user_id, first)) == KS_OK) {
                tenant_id = first;
        }
        if (rc == KS_OK && (rc = auth_tx_begin(conn, request_id, tenant_id, user_id)) == KS_OK &&
            (rc = auth_session_create(svc, conn, request_id, user_id, tenant_id, out)) == KS_OK) {
                rc = ks_pg_commit(conn, request_id);
        }
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
                explicit_bzero(out->token, sizeof(out->token));
        }
        ks_pg_release(svc->pool, conn);
        return rc;
}

/* A reply with authenticated = false: the gateway turns it into unauthenticated. */
static int resolve_reply_anonymous(ks_call *call)
{
        Keelson__Auth__V1__ResolveContextResponse resp =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_RESPONSE__INIT;

        return ks_call_reply(call, &resp.base);
}

static int resolve_reply(ks_call *call, const PGresult *res, bool key)
{
        Keelson__Auth__V1__ResolveContextResponse resp =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_RESPONSE__INIT;

        resp.authenticated = 1;
        if (key) {
                resp.api_key_id = PQgetvalue(res, 0, 0);
                resp.tenant_id = PQgetvalue(res, 0, 1);
                resp.role = PQgetvalue(res, 0, 2);
                resp.expires_at_unix_ms = auth_int_field(res, 0, 3);
        } else {
                resp.session_id = PQgetvalue(res, 0, 0);
                resp.user_id = PQgetvalue(res, 0, 1);
                resp.tenant_id = PQgetvalue(res, 0, 2);
                resp.role = PQgetvalue(res, 0, 3);
                resp.expires_at_unix_ms = auth_int_field(res, 0, 4);
        }
        return ks_call_reply(call, &resp.base);
}

/*
 * A session token or an API key ("ks_live_..."): one statement either way,
 * through a lookup function (the tenant is what this call learns, so no
 * tenant can be set for it). Unknown, revoked and expired all answer
 * authenticated = false.
 */
int auth_resolve_context(ks_call *call)
{
        const Keelson__Auth__V1__ResolveContextRequest *req =
            (const Keelson__Auth__V1__ResolveContextRequest *)call->in;
        char hash[AUTH_SHA256_PARAM_LEN];
        const char *params[1] = {hash};
        size_t len = req->token ? strlen(req->token) : 0;
        bool key;
        PGresult *res = NULL;
        int rc;

        if (len == 0 || len > AUTH_TOKEN_BYTES_MAX) {
                return resolve_reply_anonymous(call);
        }
        key = strncmp(req->token, AUTH_API_KEY_PREFIX, AUTH_API_KEY_PREFIX_LEN) == 0;
        auth_token_hash_param(req->token, len, hash);
        rc = auth_db_read_once(call->service, call->request_id,
                               key ? sql_resolve_key : sql_resolve_session, 1, params, &res);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = PQntuples(res) == 1 ? resolve_reply(call, res, key) : resolve_reply_anonymous(call);
        PQclear(res);
        return rc;
}

int auth_whoami(ks_call *call)
{
        Keelson__Auth__V1__WhoAmIResponse resp = KEELSON__AUTH__V1__WHO_AM_IRESPONSE__INIT;
        const char *perms[KS_PERM_COUNT];
        auth_actor a;
        const char *params[2] = {a.tenant_id, a.user_id};
        PGconn *conn = NULL;
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_acquire(((auth_service *)call->service)->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        /* One round trip, one transaction: the tenant, the read. */
        const ks_pg_stmt read = {.sql = sql_whoami, .n_params = 2, .params = params, .out = &res};
        rc = auth_tx_read(conn, call->request_id, a.tenant_id, a.user_id, &read, 1);
        ks_pg_rollback(conn);
        ks_pg_release(((auth_service *)call->service)->pool, conn);
        if (rc != KS_OK) {
                PQclear(res);
                return auth_db_fail(call, rc);
        }
        if (PQntuples(res) != 1) {
                /* The membership went away after the gateway resolved the context. */
                PQclear(res);
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        /* The strings point into res, which lives until the reply is packed. */
        resp.user_id = PQgetvalue(res, 0, 0);
        resp.email = PQgetvalue(res, 0, 1);
        resp.display_name = PQgetvalue(res, 0, 2);
        resp.tenant_id = PQgetvalue(res, 0, 3);
        resp.tenant_name = PQgetvalue(res, 0, 4);
        resp.role = PQgetvalue(res, 0, 5);
        resp.n_permissions = ks_role_perm_names(resp.role, perms);
        resp.permissions = (char **)perms;
        rc = ks_call_reply(call, &resp.base);
        PQclear(res);
        return rc;
}

/* Revokes the session and queues its auth.context_revoked, in one transaction. */
static int logout_tx(PGconn *conn, const char *request_id, const auth_actor *a)
{
        const char *params[3] = {a->session_id, a->tenant_id, a->user_id};
        auth_revocation r = {a->tenant_id, a->user_id, NULL, "logout"};
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_tx_begin(conn, request_id, a->tenant_id, a->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, request_id, sql_logout, 3, params, &res)) != KS_OK) {
                return rc;
        }
        /* Zero rows: already revoked (a repeat), nothing to tell anyone. */
        if (PQntuples(res) > 0) {
                rc = auth_emit_context_revoked(conn, request_id, &r, res, 0);
        }
        PQclear(res);
        return rc == KS_OK ? ks_pg_commit(conn, request_id) : rc;
}

int auth_logout(ks_call *call)
{
        Keelson__Auth__V1__LogoutResponse resp = KEELSON__AUTH__V1__LOGOUT_RESPONSE__INIT;
        auth_service *svc = call->service;
        PGconn *conn = NULL;
        auth_actor a;
        int rc;

        /*
         * The gateway passes on a Logout whose token no longer resolves
         * (revoked, expired, unknown) without a caller: that session is
         * already over, and with no token there is nothing else to touch.
         */
        if (!call->caller->authenticated) {
                return ks_call_reply(call, &resp.base);
        }
        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if (a.session_id[0] == '\0') {
                return ks_call_fail(call, KS_FAILED_PRECONDITION,
                                    "the caller is not authenticated by a session");
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = logout_tx(conn, call->request_id, &a);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        return ks_call_reply(call, &resp.base);
}
