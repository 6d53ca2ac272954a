/*
 * API keys: CreateApiKey, ListApiKeys, RevokeApiKey (api_keys.manage).
 *
 * A key is "ks_live_" + 32 random bytes in base64url, shown once in the
 * CreateApiKey reply; only its SHA-256 is stored, with its first 12
 * characters for people to tell keys apart in ListApiKeys. Those 12 hold 4
 * characters of the secret: a hint for the key's holders, never written to
 * the audit log, which names a key by its id and name only (the audit log
 * holds no part of any secret). A key belongs to the tenant, has
 * a role at most its creator's, and may expire. The gateway resolves it like
 * a session token (ResolveContext, sessions.c). Revoking one publishes
 * auth.context_revoked with its hash, so caches drop it at once.
 */
#include "auth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

/* Ten years: an expiry further out is a typo, not a plan. */
#define EXPIRY_MAX_MS (10LL * 366 * 24 * 3600 * 1000)

#define KEY_COLUMNS                                                                                \
        "id, name, role, prefix, floor(extract(epoch FROM created_at) * 1000)::int8,"              \
        " coalesce(floor(extract(epoch FROM expires_at) * 1000)::int8, 0),"                        \
        " coalesce(floor(extract(epoch FROM last_used_at) * 1000)::int8, 0),"                      \
        " coalesce(floor(extract(epoch FROM revoked_at) * 1000)::int8, 0),"                        \
        " coalesce(created_by_user_id::text, ''), coalesce(created_by_api_key_id::text, ''),"      \
        " (extract(epoch FROM created_at) * 1000000)::int8"

static const char sql_insert[] =
    "INSERT INTO auth.api_keys (tenant_id, name, role, token_sha256, prefix, created_by_user_id,"
    " created_by_api_key_id, expires_at)"
    " VALUES (auth.ctx_tenant(), $1, $2, $3::bytea, $4, NULLIF($5, '')::uuid,"
    " NULLIF($6, '')::uuid,"
    " CASE WHEN $7::int8 = 0 THEN NULL ELSE timestamptz 'epoch' + $7::int8 * interval '1 ms' END)"
    " RETURNING " KEY_COLUMNS;

/* $1, $2 the cursor (created_at in micros, id), $3 the limit, $4 the filter: list.c. */
static const char sql_list[] =
    "SELECT " KEY_COLUMNS " FROM auth.api_keys"
    " WHERE ($4::bool OR revoked_at IS NULL)"
    " AND (created_at, id) <"
    " (timestamptz 'epoch' + $1::int8 * interval '1 microsecond', $2::uuid)"
    " ORDER BY created_at DESC, id DESC LIMIT $3::int";

static const char sql_get_for_revoke[] =
    "SELECT role, name, revoked_at IS NOT NULL FROM auth.api_keys WHERE id = $1::uuid FOR UPDATE";

static const char sql_revoke[] =
    "UPDATE auth.api_keys SET revoked_at = now() WHERE id = $1::uuid RETURNING token_sha256";

static void key_from_row(Keelson__Auth__V1__ApiKey *k, const PGresult *res, int row)
{
        keelson__auth__v1__api_key__init(k);
        k->id = PQgetvalue(res, row, 0);
        k->name = PQgetvalue(res, row, 1);
        k->role = PQgetvalue(res, row, 2);
        k->prefix = PQgetvalue(res, row, 3);
        k->created_at_unix_ms = auth_int_field(res, row, 4);
        k->expires_at_unix_ms = auth_int_field(res, row, 5);
        k->last_used_at_unix_ms = auth_int_field(res, row, 6);
        k->revoked_at_unix_ms = auth_int_field(res, row, 7);
        k->created_by_user_id = PQgetvalue(res, row, 8);
        k->created_by_api_key_id = PQgetvalue(res, row, 9);
}

/* ---- CreateApiKey ------------------------------------------------------- */

typedef struct create_key {
        char name[AUTH_NAME_BYTES_MAX + 1];
        const char *role;
        char expires_ms[24];
        char key[AUTH_API_KEY_LEN + 1];
} create_key;

static int create_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__CreateApiKeyResponse resp =
            KEELSON__AUTH__V1__CREATE_API_KEY_RESPONSE__INIT;
        Keelson__Auth__V1__ApiKey k;
        create_key *c = arg;
        char hash[AUTH_SHA256_PARAM_LEN], prefix[AUTH_API_KEY_SHOWN + 1];
        const char *params[7] = {
            c->name, c->role, hash, prefix, tx->actor.user_id, tx->actor.api_key_id, c->expires_ms};
        const char *rid = tx->call->request_id;
        PGresult *res = NULL;
        int rc;

        if (ks_role_rank(c->role) > tx->actor.rank) {
                return ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                    "cannot create a key with a role above your own (%s)",
                                    tx->actor.role);
        }
        auth_token_hash_param(c->key, AUTH_API_KEY_LEN, hash);
        snprintf(prefix, sizeof(prefix), "%.*s", AUTH_API_KEY_SHOWN, c->key);
        if ((rc = ks_pg_exec(tx->conn, rid, sql_insert, 7, params, &res)) != KS_OK ||
            (rc = auth_audit(tx->conn, rid, &tx->actor, "api_key.created", "api_key",
                             PQgetvalue(res, 0, 0),
                             json_pack("{s:s, s:s}", "name", c->name, "role", c->role))) != KS_OK ||
            (rc = auth_emit_admin_summary(tx->conn, rid, tx->actor.tenant_id, "CreateApiKey")) !=
                KS_OK) {
                PQclear(res);
                return auth_db_fail(tx->call, rc);
        }
        key_from_row(&k, res, 0);
        resp.api_key = &k;
        resp.key = c->key;
        rc = ks_call_reply(tx->call, &resp.base);
        PQclear(res);
        return rc;
}

/* Name, role and expiry; and the key itself, made before the transaction. */
static int check_create(ks_call *call, const Keelson__Auth__V1__CreateApiKeyRequest *req,
                        create_key *c)
{
        char err[AUTH_ERR_MAX], token[AUTH_TOKEN_LEN + 1];
        int64_t now = ks_now_ms();
        int rc;

        if ((rc = ks_name_normalize("name", req->name, AUTH_NAME_CHARS_MAX, c->name,
                                    sizeof(c->name), err, sizeof(err))) != KS_OK) {
                return ks_call_fail(call, rc, "%s", err);
        }
        if (c->name[0] == '\0') {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "name: required");
        }
        if (ks_role_rank(req->role) == 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "role: one of owner, admin, member, viewer");
        }
        if (req->expires_at_unix_ms != 0 &&
            (req->expires_at_unix_ms <= now || req->expires_at_unix_ms > now + EXPIRY_MAX_MS)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "expires_at_unix_ms: in the future, within ten years");
        }
        c->role = req->role;
        snprintf(c->expires_ms, sizeof(c->expires_ms), "%lld", (long long)req->expires_at_unix_ms);
        if (auth_new_token(token) != KS_OK) {
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        snprintf(c->key, sizeof(c->key), "%s%s", AUTH_API_KEY_PREFIX, token);
        explicit_bzero(token, sizeof(token));
        return KS_OK;
}

int auth_create_api_key(ks_call *call)
{
        const Keelson__Auth__V1__CreateApiKeyRequest *req =
            (const Keelson__Auth__V1__CreateApiKeyRequest *)call->in;
        create_key c;
        int rc;

        memset(&c, 0, sizeof(c));
        if ((rc = check_create(call, req, &c)) == KS_OK) {
                rc = auth_tenant_tx(call, AUTH_TX_DEDUPE | AUTH_TX_SECRET, create_tx, &c);
        }
        explicit_bzero(c.key, sizeof(c.key));
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "api key created", "{s:s}", "role", c.role);
        }
        return rc;
}

/* ---- ListApiKeys -------------------------------------------------------- */

static void key_item(void *item, const PGresult *res, int row)
{
        key_from_row(item, res, row);
}

/* Newest first; the sort key is (created_at in micros, id). */
static const ks_list_method list_keys = {
    .page = AUTH_LIST_PAGE("ListApiKeys", Keelson__Auth__V1__ApiKey, key_item,
                           KS_LIST_DESC_MICROS(10), KS_LIST_DESC_UUID(0)),
    .sql = sql_list,
    .items_field = "api_keys",
};

int auth_list_api_keys(ks_call *call)
{
        const Keelson__Auth__V1__ListApiKeysRequest *req =
            (const Keelson__Auth__V1__ListApiKeysRequest *)call->in;
        const char *filters[1] = {req->include_revoked ? "true" : "false"};

        return auth_list_reply(call, &list_keys, req->page_size, req->page_token, filters, 1);
}

/* ---- RevokeApiKey ------------------------------------------------------- */

static int revoke_changes(auth_tx *tx, const char *id, const PGresult *row)
{
        const char *params[1] = {id};
        const char *rid = tx->call->request_id;
        auth_revocation r = {tx->actor.tenant_id, NULL, id, "api_key_revoked"};
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, rid, sql_revoke, 1, params, &res)) != KS_OK ||
            (rc = auth_emit_context_revoked(tx->conn, rid, &r, res, 0)) != KS_OK ||
            (rc = auth_audit(tx->conn, rid, &tx->actor, "api_key.revoked", "api_key", id,
                             json_pack("{s:s, s:s}", "name", PQgetvalue(row, 0, 1), "role",
                                       PQgetvalue(row, 0, 0)))) != KS_OK ||
            (rc = auth_emit_admin_summary(tx->conn, rid, tx->actor.tenant_id, "RevokeApiKey")) !=
                KS_OK) {
                PQclear(res);
                return auth_db_fail(tx->call, rc);
        }
        PQclear(res);
        return KS_OK;
}

static int revoke_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__RevokeApiKeyResponse resp =
            KEELSON__AUTH__V1__REVOKE_API_KEY_RESPONSE__INIT;
        const char *id = arg;
        const char *params[1] = {id};
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_get_for_revoke, 1, params,
                             &res)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(res) != 1) {
                rc = ks_call_fail(tx->call, KS_NOT_FOUND, "no such API key");
        } else if (ks_role_rank(PQgetvalue(res, 0, 0)) > tx->actor.rank) {
                rc = ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                  "this key's role is above yours (%s)", tx->actor.role);
        } else if (PQgetvalue(res, 0, 2)[0] != 't') {
                rc = revoke_changes(tx, id, res);
        }
        /* Already revoked: nothing changes, nothing is published; the reply is the same. */
        PQclear(res);
        return rc == KS_OK ? ks_call_reply(tx->call, &resp.base) : rc;
}

int auth_revoke_api_key(ks_call *call)
{
        const Keelson__Auth__V1__RevokeApiKeyRequest *req =
            (const Keelson__Auth__V1__RevokeApiKeyRequest *)call->in;

        if (!auth_uuid_valid(req->api_key_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "api_key_id: not a valid uuid");
        }
        return auth_tenant_tx(call, AUTH_TX_DEDUPE, revoke_tx, (void *)req->api_key_id);
}
