/*
 * Sessions: creation (for Login), ResolveContext, WhoAmI and Logout.
 *
 * A session token is 32 random bytes in base64url (43 characters). Only its
 * SHA-256 is stored, so a copy of the table does not let anyone in. Expiry
 * and revocation are checked in SQL on every read against the database
 * clock, the one clock every replica shares.
 */
#include "auth.h"

#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

/*
 * The session row is inserted only if the membership exists (the SELECT
 * feeds the INSERT), and the role comes back from the same statement: no
 * window between "is a member" and "has a session".
 */
#define SESSION_INSERT_SQL(membership_filter)                                                      \
        "WITH m AS (SELECT tenant_id, role FROM auth.memberships"                                  \
        " WHERE user_id = $2::uuid" membership_filter " ORDER BY created_at, tenant_id LIMIT 1),"  \
        " s AS (INSERT INTO auth.sessions (token_sha256, user_id, tenant_id, expires_at)"          \
        " SELECT $1::bytea, $2::uuid, m.tenant_id, now() + $3::int8 * interval '1 second'"         \
        " FROM m RETURNING id, tenant_id, expires_at)"                                             \
        " SELECT s.id, s.tenant_id, m.role,"                                                       \
        " floor(extract(epoch FROM s.expires_at) * 1000)::int8"                                    \
        " FROM s JOIN m USING (tenant_id)"

static const char sql_session_oldest[] = SESSION_INSERT_SQL("");
static const char sql_session_in_tenant[] = SESSION_INSERT_SQL(" AND tenant_id = $4::uuid");

/*
 * ResolveContext looks a session up by its token alone: this is where the
 * tenant is learnt, so it is the one query that cannot filter by tenant_id.
 * The membership join makes a removed member's sessions stop working at once.
 */
static const char sql_resolve[] =
    "SELECT s.id, s.user_id, s.tenant_id, m.role,"
    " floor(extract(epoch FROM s.expires_at) * 1000)::int8"
    " FROM auth.sessions s"
    " JOIN auth.memberships m ON m.tenant_id = s.tenant_id AND m.user_id = s.user_id"
    " WHERE s.token_sha256 = $1::bytea AND s.revoked_at IS NULL AND s.expires_at > now()";

static const char sql_whoami[] = "SELECT u.id, u.email, u.display_name, t.id, t.name, m.role"
                                 " FROM auth.memberships m"
                                 " JOIN auth.users u ON u.id = m.user_id"
                                 " JOIN auth.tenants t ON t.id = m.tenant_id"
                                 " WHERE m.tenant_id = $1::uuid AND m.user_id = $2::uuid";

static const char sql_logout[] =
    "UPDATE auth.sessions SET revoked_at = now()"
    " WHERE id = $1::uuid AND tenant_id = $2::uuid AND user_id = $3::uuid"
    " AND revoked_at IS NULL";

void auth_token_hash_param(const char *token, size_t len, char out[AUTH_SHA256_PARAM_LEN])
{
        out[0] = '\\';
        out[1] = 'x';
        ks_sha256_hex(token, len, out + 2);
}

static int new_token(char out[AUTH_TOKEN_LEN + 1])
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
        const char *params[4];
        PGresult *res = NULL;
        int rc;

        memset(out, 0, sizeof(*out));
        if ((rc = new_token(out->token)) != KS_OK) {
                ks_log_error(request_id, "no random bytes for a session token", NULL);
                return rc;
        }
        auth_token_hash_param(out->token, AUTH_TOKEN_LEN, hash);
        snprintf(ttl, sizeof(ttl), "%lld", (long long)svc->session_ttl_s);
        params[0] = hash;
        params[1] = user_id;
        params[2] = ttl;
        params[3] = tenant_id;
        rc = ks_pg_exec(conn, request_id, tenant_id ? sql_session_in_tenant : sql_session_oldest,
                        tenant_id ? 4 : 3, params, &res);
        if (rc != KS_OK) {
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
        out->expires_at_unix_ms = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
        PQclear(res);
        return KS_OK;
}

/* A reply with authenticated = false: the gateway turns it into unauthenticated. */
static int resolve_reply_anonymous(ks_call *call)
{
        Keelson__Auth__V1__ResolveContextResponse resp =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_RESPONSE__INIT;

        return ks_call_reply(call, &resp.base);
}

int auth_resolve_context(ks_call *call)
{
        const Keelson__Auth__V1__ResolveContextRequest *req =
            (const Keelson__Auth__V1__ResolveContextRequest *)call->in;
        Keelson__Auth__V1__ResolveContextResponse resp =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_RESPONSE__INIT;
        char hash[AUTH_SHA256_PARAM_LEN];
        char sid[AUTH_UUID_LEN + 1], uid[AUTH_UUID_LEN + 1], tid[AUTH_UUID_LEN + 1], role[16];
        const char *params[1] = {hash};
        size_t len = req->token ? strlen(req->token) : 0;
        PGresult *res = NULL;
        int rc;

        if (len == 0 || len > AUTH_TOKEN_BYTES_MAX) {
                return resolve_reply_anonymous(call);
        }
        auth_token_hash_param(req->token, len, hash);
        rc = auth_db_exec_once(call->service, call->request_id, sql_resolve, 1, params, &res);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                return resolve_reply_anonymous(call);
        }
        auth_copy_field(res, 0, 0, sid, sizeof(sid));
        auth_copy_field(res, 0, 1, uid, sizeof(uid));
        auth_copy_field(res, 0, 2, tid, sizeof(tid));
        auth_copy_field(res, 0, 3, role, sizeof(role));
        resp.expires_at_unix_ms = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
        PQclear(res);
        resp.authenticated = 1;
        resp.session_id = sid;
        resp.user_id = uid;
        resp.tenant_id = tid;
        resp.role = role;
        return ks_call_reply(call, &resp.base);
}

/*
 * The caller context must name a user in a tenant. It comes from the gateway
 * over the internal network, but a malformed uuid must still not reach SQL.
 */
static int require_user(ks_call *call)
{
        const ks_caller *c = call->caller;

        if (!c->authenticated) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        if (c->user_id == NULL || c->user_id[0] == '\0') {
                return ks_call_fail(call, KS_PERMISSION_DENIED, "this method needs a user session");
        }
        if (!auth_uuid_valid(c->user_id) || !auth_uuid_valid(c->tenant_id)) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        return KS_OK;
}

int auth_whoami(ks_call *call)
{
        Keelson__Auth__V1__WhoAmIResponse resp = KEELSON__AUTH__V1__WHO_AM_IRESPONSE__INIT;
        const char *params[2] = {call->caller->tenant_id, call->caller->user_id};
        PGresult *res = NULL;
        int rc;

        if ((rc = require_user(call)) != KS_OK) {
                return rc;
        }
        rc = auth_db_exec_once(call->service, call->request_id, sql_whoami, 2, params, &res);
        if (rc != KS_OK) {
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
        rc = ks_call_reply(call, &resp.base);
        PQclear(res);
        return rc;
}

int auth_logout(ks_call *call)
{
        Keelson__Auth__V1__LogoutResponse resp = KEELSON__AUTH__V1__LOGOUT_RESPONSE__INIT;
        const ks_caller *c = call->caller;
        const char *params[3] = {c->session_id, c->tenant_id, c->user_id};
        PGresult *res = NULL;
        int rc;

        if ((rc = require_user(call)) != KS_OK) {
                return rc;
        }
        if (!auth_uuid_valid(c->session_id)) {
                return ks_call_fail(call, KS_FAILED_PRECONDITION,
                                    "the caller is not authenticated by a session");
        }
        rc = auth_db_exec_once(call->service, call->request_id, sql_logout, 3, params, &res);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        /* Zero rows is fine: already revoked, or expired and gone. Logout is idempotent. */
        PQclear(res);
        return ks_call_reply(call, &resp.base);
}
