/*
 * Password checks with lockout, shared by Login, AcceptInvitation (an
 * existing account) and ChangePassword.
 *
 * Every check runs scrypt on the hash pool, also for an unknown address
 * (against a dummy hash made at start with the configured parameters) and
 * for a locked account (against its real hash): the reply and its time say
 * nothing about which case it was. A wrong password counts towards the
 * lockout (KEELSON_AUTH_LOCKOUT_*: 5 failures within 15 minutes lock for 15
 * minutes by default); a right one clears the count; a locked account is
 * refused whatever the password, and its failures do not stretch the lock.
 * These writes go through lookup functions (the tenant is unknown at login)
 * and publish no event: they are not admin writes.
 */
#include "auth.h"

#include <stdio.h>
#include <string.h>

#include "ks_log.h"

static const char sql_lookup[] = "SELECT user_id, password_hash, locked FROM auth.login_lookup($1)";
static const char sql_failed[] = "SELECT auth.login_failed($1::uuid, $2::int, $3::int, $4::int)";
static const char sql_succeeded[] = "SELECT auth.login_succeeded($1::uuid)";

/* Compare-and-set: a password changed meanwhile is not overwritten by the rehash. */
static const char sql_rehash[] = "UPDATE auth.users SET password_hash = $2"
                                 " WHERE id = $1::uuid AND password_hash = $3";

int auth_login_lookup(auth_service *svc, const char *request_id, const char *email,
                      auth_login_user *u)
{
        const char *params[1] = {email};
        PGresult *res = NULL;
        int rc;

        memset(u, 0, sizeof(*u));
        if (email[0] == '\0') {
                return KS_OK;
        }
        if ((rc = auth_db_exec_once(svc, request_id, sql_lookup, 1, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 1 && PQgetlength(res, 0, 1) < KS_PASSWORD_HASH_MAX) {
                u->found = true;
                auth_copy_field(res, 0, 0, u->id, sizeof(u->id));
                auth_copy_field(res, 0, 1, u->hash, sizeof(u->hash));
                u->locked = PQgetvalue(res, 0, 2)[0] == 't';
        }
        PQclear(res);
        return KS_OK;
}

static void record_failure(ks_call *call, const auth_login_user *u)
{
        auth_service *svc = call->service;
        char max[16], window[16], lock[16];
        const char *params[4] = {u->id, max, window, lock};
        PGresult *res = NULL;

        snprintf(max, sizeof(max), "%d", svc->lockout_max_failures);
        snprintf(window, sizeof(window), "%d", svc->lockout_window_s);
        snprintf(lock, sizeof(lock), "%d", svc->lockout_duration_s);
        /* Best effort: a failed count must not turn a wrong password into an internal error. */
        if (auth_db_exec_once(svc, call->request_id, sql_failed, 4, params, &res) == KS_OK &&
            PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't') {
                ks_counter_inc(svc->lockouts);
                ks_log_warn(call->request_id, "account locked after repeated failed logins",
                            "{s:s, s:i}", "user_id", u->id, "lock_s", svc->lockout_duration_s);
        }
        PQclear(res);
}

static void record_success(ks_call *call, const auth_login_user *u)
{
        const char *params[1] = {u->id};
        PGresult *res = NULL;

        (void)auth_db_exec_once(call->service, call->request_id, sql_succeeded, 1, params, &res);
        PQclear(res);
}

/* Best effort: a failed rehash leaves the old hash, which keeps verifying. */
static void rehash(ks_call *call, const auth_login_user *u, const char *password)
{
        auth_service *svc = call->service;
        char fresh[KS_PASSWORD_HASH_MAX];
        const char *params[3] = {u->id, fresh, u->hash};
        PGconn *conn = NULL;
        int rc;

        if (auth_hash_password(svc->hash, password, &svc->scrypt, fresh, call->deadline_unix_ms) !=
            KS_OK) {
                ks_log_warn(call->request_id, "password rehash skipped", "{s:s}", "user_id", u->id);
                return;
        }
        /* The users row is visible to its own user only: a transaction acting for u. */
        if ((rc = ks_pg_acquire(svc->pool, &conn)) == KS_OK) {
                if ((rc = auth_tx_begin(conn, call->request_id, NULL, u->id)) == KS_OK &&
                    (rc = ks_pg_exec(conn, call->request_id, sql_rehash, 3, params, NULL)) ==
                        KS_OK) {
                        rc = ks_pg_commit(conn, call->request_id);
                }
                ks_pg_rollback(conn);
                ks_pg_release(svc->pool, conn);
        }
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "password rehashed with the current parameters",
                            "{s:s}", "user_id", u->id);
        }
        explicit_bzero(fresh, sizeof(fresh));
}

static int pool_fail(ks_call *call, int rc)
{
        if (rc == KS_RESOURCE_EXHAUSTED) {
                return ks_call_fail(call, rc, AUTH_HASH_BUSY_MSG);
        }
        if (rc == KS_DEADLINE_EXCEEDED) {
                return ks_call_fail(call, rc, "deadline exceeded waiting for a password check");
        }
        ks_log_error(call->request_id, "password hashing failed", NULL);
        return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
}

int auth_hash_admit(ks_call *call)
{
        auth_service *svc = call->service;

        if (auth_hash_pool_full(svc->hash)) {
                return pool_fail(call, KS_RESOURCE_EXHAUSTED);
        }
        return KS_OK;
}

int auth_password_check(ks_call *call, const auth_login_user *u, const char *password, bool *ok)
{
        auth_service *svc = call->service;
        bool match = false, needs_rehash = false;
        int rc;

        *ok = false;
        rc = auth_verify_password(svc->hash, password, u->found ? u->hash : svc->dummy_hash,
                                  &svc->scrypt, &match, &needs_rehash, call->deadline_unix_ms);
        if (rc == KS_INTERNAL && u->found) {
                ks_log_error(call->request_id, "stored password hash is unreadable", "{s:s}",
                             "user_id", u->id);
                return KS_OK; /* a failed check, like a wrong password */
        }
        if (rc != KS_OK && rc != KS_INTERNAL) {
                return pool_fail(call, rc);
        }
        if (!u->found) {
                return KS_OK;
        }
        if (u->locked) {
                ks_log_info(call->request_id, "password check refused", "{s:s, s:s}", "reason",
                            "locked", "user_id", u->id);
                return KS_OK;
        }
        if (!match) {
                record_failure(call, u);
                return KS_OK;
        }
        record_success(call, u);
        if (needs_rehash) {
                rehash(call, u, password);
        }
        *ok = true;
        return KS_OK;
}

int auth_password_new_hash(ks_call *call, const char *password, char out[KS_PASSWORD_HASH_MAX])
{
        auth_service *svc = call->service;
        int rc = auth_hash_password(svc->hash, password, &svc->scrypt, out, call->deadline_unix_ms);

        return rc == KS_OK ? KS_OK : pool_fail(call, rc);
}
