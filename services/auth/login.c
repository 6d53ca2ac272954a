/*
 * Login: email and password for a session token.
 *
 * Every failure answers UNAUTHENTICATED "invalid email or password", and an
 * unknown email still pays for one scrypt verification (against a dummy hash
 * made at start with the configured parameters), so neither the reply nor
 * its time tells whether an account exists. The email is only trimmed and
 * lower-cased, not validated: an address that no longer passes today's rules
 * must still be able to log in, and one that never passed matches no row.
 *
 * No connection is held across scrypt: the lookup releases it before the
 * verification, and the session insert takes one again afterwards.
 */
#include "auth.h"

#include <string.h>

#include "ks_log.h"

static const char sql_user_by_email[] = "SELECT id, password_hash FROM auth.users WHERE email = $1";

/* Compare-and-set: a password changed meanwhile is not overwritten by the rehash. */
static const char sql_rehash[] =
    "UPDATE auth.users SET password_hash = $2 WHERE id = $1::uuid AND password_hash = $3";

typedef struct login_user {
        bool found;
        char id[AUTH_UUID_LEN + 1];
        char hash[KS_PASSWORD_HASH_MAX];
} login_user;

static int lookup_user(auth_service *svc, const char *request_id, const char *email, login_user *u)
{
        const char *params[1] = {email};
        PGresult *res = NULL;
        int rc;

        memset(u, 0, sizeof(*u));
        if ((rc = auth_db_exec_once(svc, request_id, sql_user_by_email, 1, params, &res)) !=
            KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 1 && PQgetlength(res, 0, 1) < KS_PASSWORD_HASH_MAX) {
                u->found = true;
                auth_copy_field(res, 0, 0, u->id, sizeof(u->id));
                auth_copy_field(res, 0, 1, u->hash, sizeof(u->hash));
        }
        PQclear(res);
        return KS_OK;
}

/* Verifies against the user's hash, or the dummy one: the same work either way. */
static bool verify_password(auth_service *svc, const char *request_id, const login_user *u,
                            const char *password, bool *needs_rehash)
{
        bool ok = false;

        *needs_rehash = false;
        if (ks_password_verify(password, u->found ? u->hash : svc->dummy_hash, &svc->scrypt, &ok,
                               needs_rehash) != 0) {
                if (u->found) {
                        ks_log_error(request_id, "stored password hash is unreadable", "{s:s}",
                                     "user_id", u->id);
                }
                return false;
        }
        return ok && u->found;
}

/* Best effort: a failed rehash leaves the old hash, which keeps verifying. */
static void rehash(auth_service *svc, const char *request_id, const login_user *u,
                   const char *password)
{
        char fresh[KS_PASSWORD_HASH_MAX];
        const char *params[3] = {u->id, fresh, u->hash};
        PGresult *res = NULL;

        if (ks_password_hash(password, &svc->scrypt, fresh) != 0) {
                ks_log_warn(request_id, "password rehash failed", "{s:s}", "user_id", u->id);
                return;
        }
        if (auth_db_exec_once(svc, request_id, sql_rehash, 3, params, &res) == KS_OK) {
                ks_log_info(request_id, "password rehashed with the current parameters", "{s:s}",
                            "user_id", u->id);
        }
        PQclear(res);
        explicit_bzero(fresh, sizeof(fresh));
}

static int reply_session(ks_call *call, const char *user_id, const auth_session *s)
{
        Keelson__Auth__V1__LoginResponse resp = KEELSON__AUTH__V1__LOGIN_RESPONSE__INIT;

        resp.session_token = (char *)s->token;
        resp.expires_at_unix_ms = s->expires_at_unix_ms;
        resp.user_id = (char *)user_id;
        resp.tenant_id = (char *)s->tenant_id;
        resp.role = (char *)s->role;
        return ks_call_reply(call, &resp.base);
}

/* Creates the session and replies; NOT_FOUND (no such membership) is a failed login. */
static int open_session(ks_call *call, const login_user *u, const char *tenant_id)
{
        auth_service *svc = call->service;
        auth_session s;
        PGconn *conn = NULL;
        int rc;

        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = auth_session_create(svc, conn, call->request_id, u->id, tenant_id, &s);
        ks_pg_release(svc->pool, conn);
        if (rc == KS_NOT_FOUND) {
                ks_log_info(call->request_id, "login failed", "{s:s, s:s}", "reason",
                            "not_a_member", "user_id", u->id);
                return ks_call_fail(call, KS_UNAUTHENTICATED, AUTH_LOGIN_FAILED_MSG);
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = reply_session(call, u->id, &s);
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "login", "{s:s, s:s, s:s}", "user_id", u->id,
                            "tenant_id", s.tenant_id, "session_id", s.session_id);
        }
        explicit_bzero(s.token, sizeof(s.token));
        return rc;
}

/* Checks the request's shape; nothing here depends on whether the account exists. */
static int check_request(ks_call *call, const Keelson__Auth__V1__LoginRequest *req,
                         char email[AUTH_EMAIL_BYTES_MAX + 1], const char **tenant_id)
{
        const char *t = req->tenant_id ? req->tenant_id : "";

        if (req->password != NULL && strlen(req->password) > AUTH_PASSWORD_BYTES_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "password: at most 1024 bytes");
        }
        if (t[0] != '\0' && !auth_uuid_valid(t)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "tenant_id: not a valid uuid");
        }
        *tenant_id = t[0] != '\0' ? t : NULL;
        /* Too long to be stored: it takes the unknown-email path below. */
        if (auth_email_normalize(req->email ? req->email : "", email, AUTH_EMAIL_BYTES_MAX + 1) !=
            0) {
                email[0] = '\0';
        }
        return KS_OK;
}

static int login(ks_call *call)
{
        const Keelson__Auth__V1__LoginRequest *req =
            (const Keelson__Auth__V1__LoginRequest *)call->in;
        const char *password = req->password ? req->password : "";
        auth_service *svc = call->service;
        char email[AUTH_EMAIL_BYTES_MAX + 1];
        const char *tenant_id = NULL;
        login_user u;
        bool needs_rehash;
        int rc;

        if ((rc = check_request(call, req, email, &tenant_id)) != KS_OK) {
                return rc;
        }
        memset(&u, 0, sizeof(u));
        if (email[0] != '\0' && (rc = lookup_user(svc, call->request_id, email, &u)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if (!verify_password(svc, call->request_id, &u, password, &needs_rehash)) {
                /* The log may tell what the client must not: which of the two was wrong. */
                ks_log_info(call->request_id, "login failed", "{s:s, s:s}", "reason",
                            u.found ? "wrong_password" : "unknown_email", "user_id", u.id);
                return ks_call_fail(call, KS_UNAUTHENTICATED, AUTH_LOGIN_FAILED_MSG);
        }
        if (needs_rehash) {
                rehash(svc, call->request_id, &u, password);
        }
        return open_session(call, &u, tenant_id);
}

int auth_login(ks_call *call)
{
        auth_service *svc = call->service;
        int rc = login(call);

        ks_counter_inc(rc == KS_OK ? svc->logins_ok : svc->logins_failed);
        return rc;
}
