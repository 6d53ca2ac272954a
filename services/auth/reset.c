/*
 * Passwords: ForgotPassword and ResetPassword (public), ChangePassword (a
 * user session).
 *
 * ForgotPassword answers the same empty reply, in about the same time,
 * whether or not the address has an account: the service runs one and the
 * same statement either way (auth.request_password_reset, see migration
 * 002), which stores the token's hash and queues the mail only for an
 * account, so there is no branch here for a reply or a timing to betray.
 * Per address, at most KEELSON_AUTH_RESET_MAX_PER_WINDOW mails are sent per
 * window (mail bombing); beyond that the reply is still the same.
 *
 * A reset token is single-use and lives 1 hour (KEELSON_AUTH_RESET_TTL_S).
 * ResetPassword checks the token before paying for scrypt (an invalid token
 * must not buy a hash), hashes the new password, then claims the token
 * atomically in the transaction that sets the password: two concurrent uses
 * cannot both win. Every session of the user, in every tenant, is revoked,
 * and the lockout is cleared (the reset proves control of the address).
 *
 * ChangePassword checks the current password (counted towards the lockout
 * like a login) and revokes the caller's other sessions; the one making the
 * call stays.
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

#define INVALID_TOKEN_MSG "this reset token is invalid, expired or already used"

static const char sql_request_reset[] =
    "SELECT auth.request_password_reset($1, $2::bytea, $3::int8, $4::uuid, $5::bytea, $6::int,"
    " $7::int)";

static const char sql_reset_valid[] = "SELECT auth.password_reset_valid($1::bytea)";

static const char sql_reset_claim[] = "SELECT auth.claim_password_reset($1::bytea)";

static const char sql_set_password[] =
    "UPDATE auth.users SET password_hash = $1 WHERE id = auth.ctx_user()";

static const char sql_own_user[] = "SELECT id, password_hash, coalesce(locked_until > now(), false)"
                                   " FROM auth.users WHERE id = auth.ctx_user()";

static const char sql_change_password[] =
    "UPDATE auth.users SET password_hash = $1 WHERE id = auth.ctx_user()";

/* ---- ForgotPassword ----------------------------------------------------- */

/* The statement's parameters: the token's hash, its expiry and the mail to queue. */
typedef struct reset_request {
        char email[KS_EMAIL_BYTES_MAX + 1];
        char token[AUTH_TOKEN_LEN + 1];
        char hash[AUTH_SHA256_PARAM_LEN];
        char expires_ms[24];
        char event_id[AUTH_UUID_LEN + 1];
        char max[16], window[16];
        char *payload; /* bytea text of the EmailRequested */
} reset_request;

static int prepare_request(auth_service *svc, reset_request *r)
{
        auth_email mail = {r->email, "password_reset", r->token, NULL, NULL, NULL, 0};
        uint8_t *buf = NULL;
        size_t len = 0;

        if (auth_new_token(r->token) != KS_OK || ks_uuid_v7(r->event_id) != 0) {
                return KS_INTERNAL;
        }
        auth_token_hash_param(r->token, AUTH_TOKEN_LEN, r->hash);
        mail.expires_at_unix_ms = ks_now_ms() + svc->reset_ttl_s * 1000;
        snprintf(r->expires_ms, sizeof(r->expires_ms), "%lld", (long long)mail.expires_at_unix_ms);
        snprintf(r->max, sizeof(r->max), "%d", svc->reset_max_per_window);
        snprintf(r->window, sizeof(r->window), "%d", svc->reset_window_s);
        if (auth_email_pack(&mail, &buf, &len) != KS_OK) {
                return KS_INTERNAL;
        }
        r->payload = ks_pg_bytea_text(buf, len);
        explicit_bzero(buf, len);
        free(buf);
        return r->payload != NULL ? KS_OK : KS_INTERNAL;
}

int auth_forgot_password(ks_call *call)
{
        const Keelson__Auth__V1__ForgotPasswordRequest *req =
            (const Keelson__Auth__V1__ForgotPasswordRequest *)call->in;
        Keelson__Auth__V1__ForgotPasswordResponse resp =
            KEELSON__AUTH__V1__FORGOT_PASSWORD_RESPONSE__INIT;
        reset_request r;
        PGresult *res = NULL;
        int rc;

        memset(&r, 0, sizeof(r));
        /* An address that cannot be stored cannot have an account: the same reply, at once. */
        if (ks_email_normalize(req->email ? req->email : "", r.email, sizeof(r.email)) != 0 ||
            r.email[0] == '\0') {
                return ks_call_reply(call, &resp.base);
        }
        if ((rc = prepare_request(call->service, &r)) == KS_OK) {
                const char *params[7] = {r.email,   r.hash, r.expires_ms, r.event_id,
                                         r.payload, r.max,  r.window};

                rc = auth_db_exec_once(call->service, call->request_id, sql_request_reset, 7,
                                       params, &res);
                PQclear(res);
        }
        if (r.payload != NULL) {
                explicit_bzero(r.payload, strlen(r.payload));
                free(r.payload);
        }
        explicit_bzero(r.token, sizeof(r.token));
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        return ks_call_reply(call, &resp.base);
}

/* ---- ResetPassword ------------------------------------------------------ */

static int token_valid(ks_call *call, const char *hash, bool *valid)
{
        const char *params[1] = {hash};
        PGresult *res = NULL;
        int rc;

        *valid = false;
        if ((rc = auth_db_exec_once(call->service, call->request_id, sql_reset_valid, 1, params,
                                    &res)) != KS_OK) {
                return rc;
        }
        *valid = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        return KS_OK;
}

typedef struct reset_job {
        const char *hash;          /* of the token */
        const char *password_hash; /* the new password's */
        char user_id[AUTH_UUID_LEN + 1];
        int revoked;
} reset_job;

/* Claims the token, sets the password, revokes every session: one transaction. */
static int reset_tx(auth_service *svc, PGconn *conn, const char *rid, void *arg)
{
        reset_job *j = arg;
        const char *claim_params[1] = {j->hash};
        const char *set_params[1] = {j->password_hash};
        PGresult *res = NULL;
        int rc;

        (void)svc;

        if ((rc = ks_pg_begin(conn, rid)) != KS_OK ||
            (rc = ks_pg_exec(conn, rid, sql_reset_claim, 1, claim_params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
                PQclear(res);
                return KS_NOT_FOUND; /* used or expired since the check */
        }
        auth_copy_field(res, 0, 0, j->user_id, sizeof(j->user_id));
        PQclear(res);
        if ((rc = auth_tx_act_for(conn, rid, NULL, j->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, rid, sql_set_password, 1, set_params, NULL)) != KS_OK ||
            (rc = auth_revoke_user_sessions(conn, rid, j->user_id, NULL, "password_changed",
                                            &j->revoked)) != KS_OK) {
                return rc;
        }
        return ks_pg_commit(conn, rid);
}

static int reset_commit(ks_call *call, const char *hash, const char *password_hash)
{
        Keelson__Auth__V1__ResetPasswordResponse resp =
            KEELSON__AUTH__V1__RESET_PASSWORD_RESPONSE__INIT;
        reset_job j = {.hash = hash, .password_hash = password_hash, .user_id = "", .revoked = 0};
        int rc = auth_db_tx(call->service, call->request_id, reset_tx, &j);

        if (rc == KS_NOT_FOUND) {
                return ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "password reset", "{s:s, s:i}", "user_id", j.user_id,
                    "sessions_revoked", j.revoked);
        return ks_call_reply(call, &resp.base);
}

int auth_reset_password(ks_call *call)
{
        const Keelson__Auth__V1__ResetPasswordRequest *req =
            (const Keelson__Auth__V1__ResetPasswordRequest *)call->in;
        size_t len = req->token ? strlen(req->token) : 0;
        char hash[AUTH_SHA256_PARAM_LEN], err[AUTH_ERR_MAX];
        char password_hash[KS_PASSWORD_HASH_MAX];
        bool valid = false;
        int rc;

        if ((rc = auth_password_validate(req->new_password, err, sizeof(err))) != KS_OK) {
                return ks_call_fail(call, rc, "new_%s", err);
        }
        if (len == 0 || len > AUTH_TOKEN_BYTES_MAX) {
                return ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        }
        auth_token_hash_param(req->token, len, hash);
        if ((rc = token_valid(call, hash, &valid)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if (!valid) {
                return ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        }
        if ((rc = auth_password_new_hash(call, req->new_password, password_hash)) != KS_OK) {
                return rc;
        }
        rc = reset_commit(call, hash, password_hash);
        explicit_bzero(password_hash, sizeof(password_hash));
        return rc;
}

/* ---- ChangePassword ----------------------------------------------------- */

/* The caller's own row: id, hash and lock state, in a short read transaction. */
static int load_own(ks_call *call, const auth_actor *a, auth_login_user *u)
{
        auth_service *svc = call->service;
        PGconn *conn = NULL;
        PGresult *res = NULL;
        int rc;

        memset(u, 0, sizeof(*u));
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        if ((rc = auth_tx_begin(conn, call->request_id, a->tenant_id, a->user_id)) == KS_OK &&
            (rc = ks_pg_exec(conn, call->request_id, sql_own_user, 0, NULL, &res)) == KS_OK &&
            PQntuples(res) == 1 && PQgetlength(res, 0, 1) < KS_PASSWORD_HASH_MAX) {
                u->found = true;
                auth_copy_field(res, 0, 0, u->id, sizeof(u->id));
                auth_copy_field(res, 0, 1, u->hash, sizeof(u->hash));
                u->locked = PQgetvalue(res, 0, 2)[0] == 't';
        }
        PQclear(res);
        ks_pg_rollback(conn);
        ks_pg_release(svc->pool, conn);
        return rc;
}

typedef struct change_job {
        const auth_actor *a; /* the caller */
        const char *new_hash;
        int revoked;
} change_job;

static int change_tx(auth_service *svc, PGconn *conn, const char *rid, void *arg)
{
        change_job *j = arg;
        const auth_actor *a = j->a;
        const char *params[1] = {j->new_hash};
        PGresult *res = NULL;
        int rc;

        (void)svc;

        if ((rc = auth_tx_begin(conn, rid, a->tenant_id, a->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, rid, sql_change_password, 1, params, &res)) != KS_OK) {
                return rc;
        }
        /* The user row is gone (it never is today): nothing to change. */
        rc = strcmp(PQcmdTuples(res), "1") == 0 ? KS_OK : KS_ABORTED;
        PQclear(res);
        if (rc != KS_OK || (rc = auth_revoke_user_sessions(
                                conn, rid, a->user_id, a->session_id[0] ? a->session_id : NULL,
                                "password_changed", &j->revoked)) != KS_OK) {
                return rc;
        }
        return ks_pg_commit(conn, rid);
}

static int change_commit(ks_call *call, const auth_actor *a, const char *new_hash)
{
        Keelson__Auth__V1__ChangePasswordResponse resp =
            KEELSON__AUTH__V1__CHANGE_PASSWORD_RESPONSE__INIT;
        change_job j = {.a = a, .new_hash = new_hash, .revoked = 0};
        int rc = auth_db_tx(call->service, call->request_id, change_tx, &j);

        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "password changed", "{s:s, s:i}", "user_id", a->user_id,
                    "sessions_revoked", j.revoked);
        resp.revoked_sessions = j.revoked;
        return ks_call_reply(call, &resp.base);
}

int auth_change_password(ks_call *call)
{
        const Keelson__Auth__V1__ChangePasswordRequest *req =
            (const Keelson__Auth__V1__ChangePasswordRequest *)call->in;
        const char *current = req->current_password ? req->current_password : "";
        char err[AUTH_ERR_MAX], fresh[KS_PASSWORD_HASH_MAX];
        auth_login_user u;
        auth_actor a;
        bool ok = false;
        int rc;

        if ((rc = auth_require_user(call, &a)) != KS_OK) {
                return rc;
        }
        if ((rc = auth_password_validate(req->new_password, err, sizeof(err))) != KS_OK) {
                return ks_call_fail(call, rc, "new_%s", err);
        }
        if (strlen(current) > AUTH_PASSWORD_BYTES_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "current_password: at most 1024 bytes");
        }
        if ((rc = load_own(call, &a, &u)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if ((rc = auth_password_check(call, &u, current, &ok)) != KS_OK) {
                return rc;
        }
        if (!ok) {
                return ks_call_fail(call, KS_PERMISSION_DENIED, "current_password: wrong password");
        }
        if ((rc = auth_password_new_hash(call, req->new_password, fresh)) != KS_OK) {
                return rc;
        }
        rc = change_commit(call, &a, fresh);
        explicit_bzero(fresh, sizeof(fresh));
        return rc;
}
