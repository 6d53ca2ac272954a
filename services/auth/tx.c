/*
 * The frame of every tenant method (auth_tenant_tx): who calls, in which
 * tenant, with which role and permission, at most once per request id, in
 * one transaction.
 *
 * The role is read again inside the transaction rather than taken from the
 * caller context: the context was resolved by the gateway (and may come from
 * its cache), and an admin demoted a moment ago must not invite with the
 * role they had. For an API key, its row must still be live.
 *
 * Deduplication (AUTH_TX_DEDUPE, tenant admin writes): the request id, a
 * fingerprint of the method and request, and the packed reply are stored in
 * auth.requests inside the write's transaction. The same request arriving
 * again (nng may deliver a request twice; a client may retry with the same
 * X-Request-Id) waits on the first one's row lock, then gets the stored reply
 * and changes nothing, publishes nothing. The same id with another request
 * is invalid_argument. A reply holding a secret (an API key) is not stored:
 * its repeat is already_exists.
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"

static const char sql_member_role[] = "SELECT role FROM auth.memberships"
                                      " WHERE tenant_id = auth.ctx_tenant() AND user_id = $1::uuid";

static const char sql_key_role[] =
    "SELECT role FROM auth.api_keys WHERE tenant_id = auth.ctx_tenant() AND id = $1::uuid"
    " AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())";

static const char sql_request_claim[] =
    "INSERT INTO auth.requests (tenant_id, request_id, method, fingerprint)"
    " VALUES (auth.ctx_tenant(), $1, $2, $3::bytea) ON CONFLICT DO NOTHING RETURNING 1";

static const char sql_request_get[] = "SELECT method, fingerprint, reply FROM auth.requests"
                                      " WHERE tenant_id = auth.ctx_tenant() AND request_id = $1";

static const char sql_request_reply[] = "UPDATE auth.requests SET reply = $2::bytea"
                                        " WHERE tenant_id = auth.ctx_tenant() AND request_id = $1";

/* Copies and checks the caller context: a user session or an API key, in a tenant. */
static int actor_from_call(ks_call *call, auth_actor *a)
{
        const ks_caller *c = call->caller;
        bool user = c->user_id != NULL && c->user_id[0] != '\0';
        bool key = c->api_key_id != NULL && c->api_key_id[0] != '\0';

        memset(a, 0, sizeof(*a));
        if (!c->authenticated) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        /* From the gateway over the internal network; still, nothing malformed reaches SQL. */
        if (!auth_uuid_valid(c->tenant_id) || user == key ||
            (user && !auth_uuid_valid(c->user_id)) || (key && !auth_uuid_valid(c->api_key_id))) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        snprintf(a->tenant_id, sizeof(a->tenant_id), "%s", c->tenant_id);
        if (user) {
                snprintf(a->user_id, sizeof(a->user_id), "%s", c->user_id);
                if (auth_uuid_valid(c->session_id)) {
                        snprintf(a->session_id, sizeof(a->session_id), "%s", c->session_id);
                }
        } else {
                snprintf(a->api_key_id, sizeof(a->api_key_id), "%s", c->api_key_id);
        }
        return KS_OK;
}

int auth_require_user(ks_call *call, auth_actor *out)
{
        int rc;

        if ((rc = actor_from_call(call, out)) != KS_OK) {
                return rc;
        }
        if (out->user_id[0] == '\0') {
                return ks_call_fail(call, KS_PERMISSION_DENIED, "this method needs a user session");
        }
        snprintf(out->role, sizeof(out->role), "%s", call->caller->role ? call->caller->role : "");
        out->rank = ks_role_rank(out->role);
        return KS_OK;
}

/* The statement that reads a's role in its tenant: a member's, or a live API key's. */
static ks_pg_stmt role_stmt(const auth_actor *a, const char *params[1], PGresult **out)
{
        params[0] = a->user_id[0] != '\0' ? a->user_id : a->api_key_id;
        return (ks_pg_stmt){.sql = a->user_id[0] != '\0' ? sql_member_role : sql_key_role,
                            .n_params = 1,
                            .params = params,
                            .out = out};
}

/* The role role_stmt read, into a (res cleared); UNAUTHENTICATED when the role is gone. */
static int take_role(ks_call *call, auth_actor *a, PGresult *res)
{
        if (PQntuples(res) != 1) {
                PQclear(res);
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        auth_copy_field(res, 0, 0, a->role, sizeof(a->role));
        a->rank = ks_role_rank(a->role);
        PQclear(res);
        return KS_OK;
}

/* Opens the transaction and reads the caller's role as of it, in one round trip. */
static int open_with_role(auth_tx *tx)
{
        auth_actor *a = &tx->actor;
        const char *params[1];
        PGresult *res = NULL;
        const ks_pg_stmt role = role_stmt(a, params, &res);
        int rc = auth_tx_open(tx->conn, tx->call->request_id, a->tenant_id, a->user_id, &role, 1);

        if (rc != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return take_role(tx->call, a, res);
}

/* SHA-256 of the method name, a NUL, and the request as packed (protobuf-c packs canonically). */
static int fingerprint(ks_call *call, char out[AUTH_SHA256_PARAM_LEN])
{
        size_t name_len = strlen(call->method->name);
        size_t len = protobuf_c_message_get_packed_size(call->in);
        uint8_t *buf = malloc(name_len + 1 + len);

        if (buf == NULL) {
                return KS_INTERNAL;
        }
        memcpy(buf, call->method->name, name_len + 1);
        protobuf_c_message_pack(call->in, buf + name_len + 1);
        out[0] = '\\';
        out[1] = 'x';
        ks_sha256_hex(buf, name_len + 1 + len, out + 2);
        free(buf);
        return KS_OK;
}

/* A repeat: the stored reply (copied into the call), or the code that refuses it. */
static int replay(auth_tx *tx, const char *fp, unsigned flags)
{
        const char *params[1] = {tx->call->request_id};
        PGresult *res = NULL;
        long n;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_request_get, 1, params, &res)) !=
            KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), tx->call->method->name) != 0 ||
            strcmp(PQgetvalue(res, 0, 1), fp) != 0) {
                PQclear(res);
                return ks_call_fail(tx->call, KS_INVALID_ARGUMENT,
                                    "request id already used for another request");
        }
        if ((flags & AUTH_TX_SECRET) != 0 || PQgetisnull(res, 0, 2)) {
                PQclear(res);
                return ks_call_fail(tx->call, KS_ALREADY_EXISTS,
                                    "this request was already processed");
        }
        free(tx->call->out_payload);
        tx->call->out_len = 0;
        n = (long)(PQgetlength(res, 0, 2) / 2);
        tx->call->out_payload = malloc(n > 0 ? (size_t)n : 1);
        if (tx->call->out_payload == NULL ||
            (n = ks_pg_bytea_decode(PQgetvalue(res, 0, 2), tx->call->out_payload, (size_t)n)) < 0) {
                PQclear(res);
                return ks_call_fail(tx->call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        tx->call->out_len = (size_t)n;
        PQclear(res);
        ks_log_info(tx->call->request_id, "repeated request answered from its first reply", NULL);
        return KS_OK;
}

/*
 * Claims the request id. *first is true when this is the first time; else
 * the call already holds the reply (KS_OK) or a refusal (a code).
 */
static int dedupe_claim(auth_tx *tx, unsigned flags, char fp[AUTH_SHA256_PARAM_LEN], bool *first)
{
        const char *params[3] = {tx->call->request_id, tx->call->method->name, fp};
        PGresult *res = NULL;
        int rc;

        *first = false;
        if (strlen(tx->call->request_id) > AUTH_REQUEST_ID_MAX) {
                *first = true; /* no id worth remembering: the write is not deduplicated */
                fp[0] = '\0';
                return KS_OK;
        }
        if (fingerprint(tx->call, fp) != KS_OK) {
                return ks_call_fail(tx->call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_request_claim, 3, params, &res)) !=
            KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        *first = PQntuples(res) == 1;
        PQclear(res);
        return *first ? KS_OK : replay(tx, fp, flags);
}

static int dedupe_store(auth_tx *tx, unsigned flags, const char *fp)
{
        const char *params[2] = {tx->call->request_id, NULL};
        char *reply;
        int rc;

        if (fp[0] == '\0' || (flags & AUTH_TX_SECRET) != 0) {
                return KS_OK;
        }
        if ((reply = ks_pg_bytea_text(tx->call->out_payload, tx->call->out_len)) == NULL) {
                return ks_call_fail(tx->call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        params[1] = reply;
        rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_request_reply, 2, params, NULL);
        free(reply);
        return rc == KS_OK ? KS_OK : auth_db_fail(tx->call, rc);
}

/* Everything between BEGIN and COMMIT. *replayed: the reply came from auth.requests. */
static int run_in_tx(auth_tx *tx, unsigned flags, auth_tx_fn fn, void *arg, bool *replayed)
{
        unsigned perm = tx->call->method->permission; /* its methods.def row */
        char fp[AUTH_SHA256_PARAM_LEN] = "";
        bool first = true;
        int rc;

        *replayed = false;
        if ((rc = open_with_role(tx)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_role_admits(tx->actor.role, perm, tx->call->message,
                                 sizeof(tx->call->message))) != KS_OK) {
                return rc;
        }
        if ((flags & AUTH_TX_DEDUPE) != 0 &&
            ((rc = dedupe_claim(tx, flags, fp, &first)) != KS_OK || !first)) {
                *replayed = !first && rc == KS_OK;
                return rc;
        }
        if ((rc = fn(tx, arg)) != KS_OK) {
                return rc;
        }
        if ((flags & AUTH_TX_DEDUPE) != 0 && (rc = dedupe_store(tx, flags, fp)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_commit(tx->conn, tx->call->request_id)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

int auth_tenant_read(ks_call *call, const ks_pg_stmt *reads, int n_reads)
{
        auth_service *svc = call->service;
        ks_pg_stmt s[KS_PG_PIPELINE_MAX - 1];
        const char *params[1];
        PGresult *res = NULL;
        auth_actor a;
        PGconn *conn;
        int rc;

        KS_ASSERT(n_reads >= 1 && n_reads < KS_PG_PIPELINE_MAX - 1);
        if ((rc = actor_from_call(call, &a)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        s[0] = role_stmt(&a, params, &res);
        memcpy(&s[1], reads, (size_t)n_reads * sizeof(*reads));
        rc = auth_tx_read(conn, call->request_id, a.tenant_id, a.user_id, s, 1 + n_reads);
        ks_pg_release(svc->pool, conn);
        if (rc != KS_OK) {
                return auth_db_fail(call, rc); /* KS_PG_DEFERRED: recorded for the loop's batch */
        }
        if ((rc = take_role(call, &a, res)) == KS_OK) {
                rc = ks_role_admits(a.role, call->method->permission, call->message,
                                    sizeof(call->message));
        }
        for (int i = 0; rc != KS_OK && i < n_reads; i++) {
                if (reads[i].out != NULL) {
                        PQclear(*reads[i].out); /* read for a caller it was not for: dropped */
                        *reads[i].out = NULL;
                }
        }
        return rc;
}

int auth_tenant_tx(ks_call *call, unsigned flags, auth_tx_fn fn, void *arg)
{
        auth_tx tx;
        bool replayed = false;
        int rc;

        memset(&tx, 0, sizeof(tx));
        tx.call = call;
        tx.svc = call->service;
        if ((rc = actor_from_call(call, &tx.actor)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_acquire(tx.svc->pool, &tx.conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = run_in_tx(&tx, flags, fn, arg, &replayed);
        if (rc != KS_OK || replayed) {
                ks_pg_rollback(tx.conn);
        }
        ks_pg_release(tx.svc->pool, tx.conn);
        if (rc != KS_OK) {
                /* A reply packed before a later failure is not sent (the server drops it). */
                return rc;
        }
        return KS_OK;
}
