/*
 * Login: email and password for a session token.
 *
 * Every failure answers UNAUTHENTICATED "invalid email or password": an
 * unknown email, a wrong password, a locked account and a tenant the user is
 * no member of all look the same, and all cost one scrypt verification
 * (passwords.c). The email is only trimmed and lower-cased, not validated:
 * an address that no longer passes today's rules must still be able to log
 * in, and one that never passed matches no row.
 *
 * No connection is held across scrypt: the lookup releases it before the
 * verification (which runs on the hash pool), and the session is created in
 * a transaction of its own afterwards. A full hash queue answers
 * resource_exhausted: the client retries later, nothing queues without bound.
 */
#include "auth.h"

#include <string.h>

#include "ks_log.h"

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
static int open_session(ks_call *call, const auth_login_user *u, const char *tenant_id)
{
        auth_session s;
        int rc;

        rc = auth_session_open(call->service, call->request_id, u->id, tenant_id, &s);
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
                         char email[KS_EMAIL_BYTES_MAX + 1], const char **tenant_id)
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
        if (ks_email_normalize(req->email ? req->email : "", email, KS_EMAIL_BYTES_MAX + 1) != 0) {
                email[0] = '\0';
        }
        return KS_OK;
}

static int login(ks_call *call)
{
        const Keelson__Auth__V1__LoginRequest *req =
            (const Keelson__Auth__V1__LoginRequest *)call->in;
        char email[KS_EMAIL_BYTES_MAX + 1];
        const char *tenant_id = NULL;
        auth_login_user u;
        bool ok = false;
        int rc;

        if ((rc = check_request(call, req, email, &tenant_id)) != KS_OK ||
            (rc = auth_hash_admit(call)) != KS_OK) {
                return rc;
        }
        if ((rc = auth_login_lookup(call->service, call->request_id, email, &u)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if ((rc = auth_password_check(call, &u, req->password ? req->password : "", &ok)) !=
            KS_OK) {
                return rc;
        }
        if (!ok) {
                /* The log may tell what the client must not: which of them it was. */
                ks_log_info(call->request_id, "login failed", "{s:s, s:s}", "reason",
                            !u.found   ? "unknown_email"
                            : u.locked ? "locked"
                                       : "wrong_password",
                            "user_id", u.id);
                return ks_call_fail(call, KS_UNAUTHENTICATED, AUTH_LOGIN_FAILED_MSG);
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
