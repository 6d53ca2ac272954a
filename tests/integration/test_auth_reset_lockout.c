/*
 * Password reset, password change and lockout through the gateway.
 *
 * ForgotPassword answers the same bytes for an address with and without an
 * account, and queues a mail (auth.email, read back from the outbox) only for
 * the first. A reset token works once, expires, and revokes every session
 * of its user, in every tenant. Lockout: the stack runs auth with
 * KEELSON_AUTH_LOCKOUT_* (tests/CMakeLists.txt) at 5 failures within
 * WINDOW_S locking for LOCK_S, short enough to watch a lock expire; logins
 * and lockout writes publish nothing, of any topic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"
#include "ks_crypto.h"

#define MAX_FAILURES 5
#define WINDOW_S     6 /* KEELSON_AUTH_LOCKOUT_WINDOW_S in deploy/local/stack.sh */
#define LOCK_S       2 /* KEELSON_AUTH_LOCKOUT_DURATION_S in deploy/local/stack.sh */
#define NEW_PASSWORD "another horse, another battery"

static void forgot(const char *email, it_http_response *out)
{
        char body[512];

        AIT_BODY(body, "{s:s}", "email", email);
        ait_call("ForgotPassword", body, NULL, out);
        if (out->status != 200) {
                fail_msg("ForgotPassword: expected 200, got %ld: %.300s", out->status, out->body);
        }
}

/* ForgotPassword for email's account; the token its one mail carries. */
static void reset_token(const char *email, char token[AIT_TOKEN_MAX])
{
        it_http_response r;
        long mark = ait_outbox_mark();

        forgot(email, &r);
        it_http_response_free(&r);
        assert_int_equal(ait_mail_token(mark, email, "password_reset", token), 1);
}

/* ResetPassword to NEW_PASSWORD with token; returns the outbox mark from before it. */
static long reset_password(const char *token)
{
        char body[1024];
        long mark = ait_outbox_mark();

        AIT_BODY(body, "{s:s, s:s}", "token", token, "newPassword", NEW_PASSWORD);
        json_decref(ait_ok("ResetPassword", body, NULL));
        return mark;
}

/* ---- ForgotPassword / ResetPassword ------------------------------------------ */

static void test_forgot_password_tells_nothing(void **state)
{
        ait_user u;
        char nobody[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        it_http_response known, unknown;
        long mark;

        (void)state;
        ait_signup("it-rst-known", "Reset Tenant", &u);
        it_unique_email("it-rst-nobody", nobody, sizeof(nobody));
        mark = ait_outbox_mark();
        forgot(u.email, &known);
        forgot(nobody, &unknown);
        ait_assert_same_reply(&known, &unknown);
        it_http_response_free(&known);
        it_http_response_free(&unknown);
        assert_int_equal(ait_mail_token(mark, u.email, "password_reset", token), 1);
        assert_int_equal(ait_mail_token(mark, nobody, "password_reset", token), 0);
        assert_int_equal(ait_events(mark, "auth.email", NULL), 1);
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);
}

static void test_reset_password(void **state)
{
        ait_user u;
        char second[AIT_TOKEN_MAX], token[AIT_TOKEN_MAX], body[1024], reason[64] = "", hex[65];
        const char *params[2];
        it_http_response r, unknown;
        long mark;

        (void)state;
        ait_signup("it-rst-flow", "Reset Flow", &u);
        ait_login(&u, NULL, second);
        reset_token(u.email, token);
        /* Stored as SHA-256 only, for this user. */
        ks_sha256_hex(token, strlen(token), hex);
        params[0] = hex;
        params[1] = u.user_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.password_resets WHERE"
                                      " encode(token_sha256, 'hex') = $1 AND user_id = $2::uuid"
                                      " AND used_at IS NULL",
                                      2, params),
                         1);

        mark = reset_password(token);
        /* Every session of the user is gone, and caches were told. */
        ait_wait_unauthenticated(u.token);
        ait_wait_unauthenticated(second);
        assert_int_equal(ait_revoked_has(mark, u.token, reason), 1);
        assert_string_equal(reason, "password_changed");
        assert_int_equal(ait_revoked_has(mark, second, NULL), 1);
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);

        assert_int_equal(ait_login_status(u.email, AIT_PASSWORD), 401);
        assert_int_equal(ait_login_status(u.email, NEW_PASSWORD), 200);

        /* Single use: the second attempt is refused like an unknown token. */
        AIT_BODY(body, "{s:s, s:s}", "token", token, "newPassword", NEW_PASSWORD);
        ait_call("ResetPassword", body, NULL, &r);
        AIT_BODY(body, "{s:s, s:s}", "token", "nonexistent-token", "newPassword", NEW_PASSWORD);
        ait_call("ResetPassword", body, NULL, &unknown);
        assert_int_equal(r.status, 404);
        ait_assert_same_reply(&r, &unknown);
        it_http_response_free(&r);
        it_http_response_free(&unknown);
}

/* A user of two tenants with a session in each: a reset ends both. */
static void test_reset_revokes_sessions_in_every_tenant(void **state)
{
        ait_user owner, u;
        char invitation[AIT_TOKEN_MAX], token[AIT_TOKEN_MAX], there[AIT_TOKEN_MAX];
        const char *params[1];
        long mark;
        json_t *j;

        (void)state;
        ait_signup("it-rst-two-owner", "Reset Elsewhere", &owner);
        ait_signup("it-rst-two", "Reset Home", &u);
        ait_invite(&owner, u.email, "member", invitation);
        j = ait_accept(invitation, AIT_PASSWORD);
        snprintf(there, sizeof(there), "%s", ait_str(j, "sessionToken"));
        json_decref(j);
        /* One session in each tenant, both live. */
        j = ait_ok("WhoAmI", "{}", u.token);
        assert_string_equal(ait_str(j, "tenantId"), u.tenant_id);
        json_decref(j);
        j = ait_ok("WhoAmI", "{}", there);
        assert_string_equal(ait_str(j, "tenantId"), owner.tenant_id);
        json_decref(j);

        reset_token(u.email, token);
        mark = reset_password(token);

        /* Both refused, both told to the gateways' caches, none left live in the database. */
        ait_wait_unauthenticated(u.token);
        ait_wait_unauthenticated(there);
        assert_int_equal(ait_revoked_has(mark, u.token, NULL), 1);
        assert_int_equal(ait_revoked_has(mark, there, NULL), 1);
        params[0] = u.user_id;
        assert_int_equal(ait_sql_long("SELECT count(DISTINCT tenant_id) FROM auth.sessions"
                                      " WHERE user_id = $1::uuid AND revoked_at IS NOT NULL",
                                      1, params),
                         2);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.sessions WHERE user_id ="
                                      " $1::uuid AND revoked_at IS NULL",
                                      1, params),
                         0);
        /* The other tenant's owner is untouched. */
        json_decref(ait_ok("WhoAmI", "{}", owner.token));
}

static void test_reset_token_expires_and_checks_the_password(void **state)
{
        ait_user u;
        char token[AIT_TOKEN_MAX], body[1024];
        const char *params[1];

        (void)state;
        ait_signup("it-rst-exp", "Reset Expiry", &u);
        reset_token(u.email, token);

        /* A bad new password is refused before the token is spent. */
        AIT_BODY(body, "{s:s, s:s}", "token", token, "newPassword", "short");
        ait_fails_with("ResetPassword", body, NULL, "invalid_argument",
                       "new_password: at least 8 characters");

        params[0] = u.user_id;
        ait_exec("UPDATE auth.password_resets SET created_at = now() - interval '2 hours',"
                 " expires_at = now() - interval '1 hour' WHERE user_id = $1::uuid",
                 1, params);
        AIT_BODY(body, "{s:s, s:s}", "token", token, "newPassword", NEW_PASSWORD);
        ait_fails_with("ResetPassword", body, NULL, "not_found",
                       "this reset token is invalid, expired or already used");
        json_decref(ait_ok("WhoAmI", "{}", u.token));
}

static void test_reset_mails_are_bounded_per_address(void **state)
{
        ait_user u;
        char token[AIT_TOKEN_MAX];
        it_http_response first, r;
        long mark;

        (void)state;
        ait_signup("it-rst-flood", "Reset Flood", &u);
        mark = ait_outbox_mark();
        forgot(u.email, &first);
        for (int i = 0; i < 7; i++) {
                forgot(u.email, &r);
                ait_assert_same_reply(&first, &r);
                it_http_response_free(&r);
        }
        it_http_response_free(&first);
        /* KEELSON_AUTH_RESET_MAX_PER_WINDOW: 5 by default. */
        assert_int_equal(ait_mail_token(mark, u.email, "password_reset", token), 5);
}

/* ---- ChangePassword ------------------------------------------------------------ */

static void test_change_password(void **state)
{
        ait_user u;
        char other[AIT_TOKEN_MAX], body[1024], reason[64] = "";
        long mark;
        json_t *j;

        (void)state;
        ait_signup("it-rst-change", "Change Tenant", &u);
        ait_login(&u, NULL, other);
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", "wrong wrong wrong", "newPassword",
                 NEW_PASSWORD);
        ait_fails_with("ChangePassword", body, u.token, "permission_denied",
                       "current_password: wrong password");
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", AIT_PASSWORD, "newPassword", "short");
        ait_fails_with("ChangePassword", body, u.token, "invalid_argument",
                       "new_password: at least 8 characters");

        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", AIT_PASSWORD, "newPassword", NEW_PASSWORD);
        j = ait_ok("ChangePassword", body, u.token);
        assert_int_equal(json_integer_value(json_object_get(j, "revokedSessions")), 1);
        json_decref(j);
        ait_wait_unauthenticated(other);
        json_decref(ait_ok("WhoAmI", "{}", u.token)); /* the caller's own session stays */
        assert_int_equal(ait_revoked_has(mark, other, reason), 1);
        assert_string_equal(reason, "password_changed");
        assert_int_equal(ait_revoked_has(mark, u.token, NULL), 0);
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);
        assert_int_equal(ait_login_status(u.email, NEW_PASSWORD), 200);
}

/* ---- lockout ---------------------------------------------------------------------- */

static void fail_logins(const char *email, int n)
{

        for (int i = 0; i < n; i++) {
                assert_int_equal(ait_login_status(email, "definitely not it"), 401);
        }
}

static void test_lockout_locks_then_expires(void **state)
{
        ait_user u;
        it_http_response wrong, locked;
        const char *params[1];
        long mark;

        (void)state;
        ait_signup("it-lock", "Lock Tenant", &u);
        mark = ait_outbox_mark();
        fail_logins(u.email, MAX_FAILURES - 1);
        ait_login_with(u.email, "definitely not it", &wrong);
        /* Locked now: the right password gets exactly the wrong password's reply. */
        ait_login_with(u.email, AIT_PASSWORD, &locked);
        assert_int_equal(locked.status, 401);
        ait_assert_same_reply(&wrong, &locked);
        it_http_response_free(&wrong);
        it_http_response_free(&locked);
        params[0] = u.user_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.users WHERE id = $1::uuid"
                                      " AND locked_until > now()",
                                      1, params),
                         1);
        /* Lockout writes are not admin writes: they publish nothing, of any topic. */
        assert_int_equal(ait_published_after(mark), 0);
        /* A running session is not affected by the lock. */
        json_decref(ait_ok("WhoAmI", "{}", u.token));

        it_sleep_ms(LOCK_S * 1000 + 700);
        assert_int_equal(ait_login_status(u.email, AIT_PASSWORD), 200);
        /* Nor does the login that clears the lock's count. */
        assert_int_equal(ait_published_after(mark), 0);
}

static void test_success_resets_the_count(void **state)
{
        ait_user u;
        long mark;

        (void)state;
        ait_signup("it-lock-reset", "Lock Reset", &u);
        mark = ait_outbox_mark();
        fail_logins(u.email, MAX_FAILURES - 1);
        assert_int_equal(ait_login_status(u.email, AIT_PASSWORD), 200);
        fail_logins(u.email, MAX_FAILURES - 1);
        assert_int_equal(ait_login_status(u.email, AIT_PASSWORD), 200);
        assert_int_equal(ait_published_after(mark), 0);
}

static void test_failures_outside_the_window_do_not_add_up(void **state)
{
        ait_user u;

        (void)state;
        ait_signup("it-lock-window", "Lock Window", &u);
        fail_logins(u.email, MAX_FAILURES - 1);
        it_sleep_ms(WINDOW_S * 1000 + 700);
        fail_logins(u.email, MAX_FAILURES - 1);
        assert_int_equal(ait_login_status(u.email, AIT_PASSWORD), 200);
}

/* A wrong current password counts like a failed login; a locked account cannot change it. */
static void test_change_password_counts_failures(void **state)
{
        ait_user u;
        char body[1024];

        (void)state;
        ait_signup("it-lock-change", "Lock Change", &u);
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", "guess guess guess", "newPassword",
                 NEW_PASSWORD);
        long mark = ait_outbox_mark();
        for (int i = 0; i < MAX_FAILURES; i++) {
                ait_fails_with("ChangePassword", body, u.token, "permission_denied",
                               "current_password: wrong password");
        }
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", AIT_PASSWORD, "newPassword", NEW_PASSWORD);
        ait_fails_with("ChangePassword", body, u.token, "permission_denied",
                       "current_password: wrong password");
        /* Failed checks and the lock they caused: written, never published. */
        assert_int_equal(ait_published_after(mark), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_forgot_password_tells_nothing),
            cmocka_unit_test(test_reset_password),
            cmocka_unit_test(test_reset_revokes_sessions_in_every_tenant),
            cmocka_unit_test(test_reset_token_expires_and_checks_the_password),
            cmocka_unit_test(test_reset_mails_are_bounded_per_address),
            cmocka_unit_test(test_change_password),
            cmocka_unit_test(test_lockout_locks_then_expires),
            cmocka_unit_test(test_success_resets_the_count),
            cmocka_unit_test(test_failures_outside_the_window_do_not_add_up),
            cmocka_unit_test(test_change_password_counts_failures),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
