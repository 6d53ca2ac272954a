/*
 * The audit log never holds a secret. A tenant goes through the writes that
 * handle one (invitations made, revoked and accepted, a password reset, an
 * API key created and revoked, a password change, logins), and then no row
 * of auth.audit_log, read as a whole (every column, as text), contains any
 * token, key, password or part of a key that those writes saw: not the
 * invitation and reset tokens the mails carried, not the API key nor its
 * 12-character prefix (ListApiKeys shows that prefix; the audit names a key
 * by its id and name), not a session token, not a password. The actions
 * themselves are there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

#define SECRETS_MAX   16
#define INVITEE_PW    "the invitee's own password"
#define RESET_PW      "a password set by a reset"
#define CHANGED_PW    "a password set by a change"
#define KEY_PREFIX_LN 12 /* what ListApiKeys shows of a key */

typedef struct secrets {
        int n;
        char what[SECRETS_MAX][32];
        char value[SECRETS_MAX][AIT_TOKEN_MAX];
} secrets;

static void keep(secrets *s, const char *what, const char *value, size_t len)
{
        assert_true(s->n < SECRETS_MAX);
        assert_true(len > 0 && len < AIT_TOKEN_MAX);
        snprintf(s->what[s->n], sizeof(s->what[0]), "%s", what);
        snprintf(s->value[s->n], sizeof(s->value[0]), "%.*s", (int)len, value);
        s->n++;
}

/* Invites two addresses; keeps both tokens, revokes the second, accepts the first. */
static void invitations(const ait_user *owner, secrets *s)
{
        char a[AIT_EMAIL_MAX], b[AIT_EMAIL_MAX], ta[AIT_TOKEN_MAX], tb[AIT_TOKEN_MAX];
        char body[1024];
        long mark = ait_outbox_mark();
        json_t *j, *list;

        it_unique_email("it-audit-a", a, sizeof(a));
        it_unique_email("it-audit-b", b, sizeof(b));
        AIT_BODY(body, "{s:[s,s], s:s}", "emails", a, b, "role", "member");
        j = ait_ok("Invite", body, owner->token);
        list = json_object_get(j, "invitations");
        AIT_BODY(body, "{s:s}", "invitationId", ait_str(json_array_get(list, 1), "id"));
        json_decref(j);
        assert_int_equal(ait_mail_token(mark, a, "invitation", ta), 1);
        assert_int_equal(ait_mail_token(mark, b, "invitation", tb), 1);
        keep(s, "invitation token", ta, strlen(ta));
        keep(s, "invitation token", tb, strlen(tb));
        json_decref(ait_ok("RevokeInvitation", body, owner->token));

        AIT_BODY(body, "{s:s, s:s, s:s}", "token", ta, "password", INVITEE_PW, "displayName",
                 "Invitee");
        j = ait_ok("AcceptInvitation", body, NULL);
        keep(s, "session token", ait_str(j, "sessionToken"), strlen(ait_str(j, "sessionToken")));
        json_decref(j);
}

/* Creates an admin key and revokes it; keeps the key, its secret part and its shown prefix. */
static void api_key(const ait_user *owner, secrets *s)
{
        char body[512], key[AIT_TOKEN_MAX];
        json_t *j;

        j = ait_ok("CreateApiKey", "{\"name\":\"audit probe\",\"role\":\"admin\"}", owner->token);
        snprintf(key, sizeof(key), "%s", ait_str(j, "key"));
        assert_true(strlen(key) > KEY_PREFIX_LN);
        keep(s, "api key", key, strlen(key));
        keep(s, "api key secret", key + 8, strlen(key) - 8);
        keep(s, "api key prefix", key, KEY_PREFIX_LN);
        assert_memory_equal(ait_str(json_object_get(j, "apiKey"), "prefix"), key, KEY_PREFIX_LN);
        AIT_BODY(body, "{s:s}", "apiKeyId", ait_str(json_object_get(j, "apiKey"), "id"));
        json_decref(j);
        /* The key acts once (an audited write of its own), then is revoked. */
        json_decref(
            ait_ok("CreateApiKey", "{\"name\":\"made by a key\",\"role\":\"viewer\"}", key));
        json_decref(ait_ok("RevokeApiKey", body, owner->token));
}

/* ForgotPassword, ResetPassword, Login, ChangePassword; keeps the token and every password. */
static void passwords(ait_user *owner, secrets *s)
{
        char body[1024], token[AIT_TOKEN_MAX];
        long mark = ait_outbox_mark();
        json_t *j;

        AIT_BODY(body, "{s:s}", "email", owner->email);
        json_decref(ait_ok("ForgotPassword", body, NULL));
        assert_int_equal(ait_mail_token(mark, owner->email, "password_reset", token), 1);
        keep(s, "reset token", token, strlen(token));
        AIT_BODY(body, "{s:s, s:s}", "token", token, "newPassword", RESET_PW);
        json_decref(ait_ok("ResetPassword", body, NULL));
        AIT_BODY(body, "{s:s, s:s}", "email", owner->email, "password", RESET_PW);
        j = ait_ok("Login", body, NULL);
        snprintf(owner->token, sizeof(owner->token), "%s", ait_str(j, "sessionToken"));
        json_decref(j);
        keep(s, "session token", owner->token, strlen(owner->token));
        AIT_BODY(body, "{s:s, s:s}", "currentPassword", RESET_PW, "newPassword", CHANGED_PW);
        json_decref(ait_ok("ChangePassword", body, owner->token));
        keep(s, "password", AIT_PASSWORD, strlen(AIT_PASSWORD));
        keep(s, "password", INVITEE_PW, strlen(INVITEE_PW));
        keep(s, "password", RESET_PW, strlen(RESET_PW));
        keep(s, "password", CHANGED_PW, strlen(CHANGED_PW));
}

static void test_audit_holds_no_secret(void **state)
{
        const char *params[2];
        secrets s;
        ait_user owner;

        (void)state;
        memset(&s, 0, sizeof(s));
        ait_signup("it-audit-owner", "Audit Secrets", &owner);
        keep(&s, "session token", owner.token, strlen(owner.token));
        invitations(&owner, &s);
        api_key(&owner, &s);
        passwords(&owner, &s);

        /* Every row of every tenant, every column, as text. */
        for (int i = 0; i < s.n; i++) {
                params[0] = s.value[i];
                long n = ait_sql_long("SELECT count(*) FROM auth.audit_log a"
                                      " WHERE strpos(a::text, $1) > 0",
                                      1, params);
                if (n != 0) {
                        fail_msg("%ld audit rows hold a secret: the %s", n, s.what[i]);
                }
        }

        /* The writes are audited all the same. */
        static const char *const actions[] = {"tenant.created",     "invitation.created",
                                              "invitation.revoked", "invitation.accepted",
                                              "api_key.created",    "api_key.revoked"};
        params[0] = owner.tenant_id;
        for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
                params[1] = actions[i];
                if (ait_sql_long("SELECT count(*) FROM auth.audit_log WHERE tenant_id = $1::uuid"
                                 " AND action = $2",
                                 2, params) < 1) {
                        fail_msg("no %s audit row", actions[i]);
                }
        }
        /* A created key is named by its id (target) and name; its detail has no key material. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.audit_log WHERE tenant_id ="
                                      " $1::uuid AND action = 'api_key.created' AND target_type ="
                                      " 'api_key' AND detail = jsonb_build_object('name',"
                                      " 'audit probe', 'role', 'admin')",
                                      1, params),
                         1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_audit_holds_no_secret),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
