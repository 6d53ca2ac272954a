/*
 * Invitations through the gateway: Invite (one address and batches),
 * ListInvitations, RevokeInvitation and AcceptInvitation for a new and an
 * existing account; the token is read from the auth.email event in the
 * outbox, as a mail sender would get it. Used, expired, revoked and unknown
 * tokens all get the same refusal; only the token's SHA-256 is stored; each
 * committed invite or accept publishes one users.admin_summary, a refused
 * one none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "ks_crypto.h"

#define SEVEN_DAYS_MS (7LL * 24 * 3600 * 1000)
#define AUTH_IT_BATCH 100 /* the most addresses one Invite takes */

/* The refusal of a bad token, to compare bodies with. */
static void accept_refused(const char *token, const char *password, it_http_response *out)
{
        char body[1024];

        AIT_BODY(body, "{s:s, s:s}", "token", token, "password", password);
        ait_call("AcceptInvitation", body, NULL, out);
        if (out->status != 404) {
                fail_msg("expected 404, got %ld: %.300s", out->status, out->body);
        }
}

static void test_invite_one_and_accept(void **state)
{
        ait_user owner;
        char email[AIT_EMAIL_MAX], body[1024], token[AIT_TOKEN_MAX], hash[65];
        const char *params[3];
        long mark;
        json_t *j, *inv;
        it_http_response again;

        (void)state;
        ait_signup("it-inv-owner", "Invite Tenant", &owner);
        it_unique_email("it-inv-new", email, sizeof(email));
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:[s], s:s}", "emails", email, "role", "admin");
        j = ait_ok("Invite", body, owner.token);
        inv = json_array_get(json_object_get(j, "invitations"), 0);
        assert_string_equal(ait_str(inv, "email"), email);
        assert_string_equal(ait_str(inv, "role"), "admin");
        assert_string_equal(ait_str(inv, "status"), "pending");
        /* Seven days, give or take the clocks: int64 travels as a JSON string. */
        long long created = atoll(ait_str(inv, "createdAtUnixMs"));
        long long expires = atoll(ait_str(inv, "expiresAtUnixMs"));
        assert_true(expires - created == SEVEN_DAYS_MS);
        json_decref(j);
        ait_assert_one_summary(mark, owner.tenant_id, "Invite");
        assert_int_equal(ait_mail_token(mark, email, "invitation", token), 1);

        /* Only the SHA-256 of the token is stored. */
        ks_sha256_hex(token, strlen(token), hash);
        params[0] = owner.tenant_id;
        params[1] = email;
        params[2] = hash;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.invitations WHERE tenant_id ="
                                      " $1::uuid AND email = $2 AND encode(token_sha256, 'hex') ="
                                      " $3 AND accepted_at IS NULL",
                                      3, params),
                         1);
        /* No column of any invitation holds the token itself. */
        params[0] = token;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.invitations i"
                                      " WHERE strpos(i::text, $1) > 0",
                                      1, params),
                         0);

        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s, s:s, s:s}", "token", token, "password", AIT_PASSWORD, "displayName",
                 "Newcomer");
        j = ait_ok("AcceptInvitation", body, NULL);
        assert_string_equal(ait_str(j, "tenantId"), owner.tenant_id);
        assert_string_equal(ait_str(j, "role"), "admin");
        json_t *who = ait_ok("WhoAmI", "{}", ait_str(j, "sessionToken"));
        assert_string_equal(ait_str(who, "email"), email);
        assert_string_equal(ait_str(who, "displayName"), "Newcomer");
        json_decref(who);
        json_decref(j);
        ait_assert_one_summary(mark, owner.tenant_id, "AcceptInvitation");

        /* Single use: the second accept is refused, with the unknown token's reply. */
        it_http_response unknown;
        accept_refused(token, AIT_PASSWORD, &again);
        accept_refused("no-such-invitation-token", AIT_PASSWORD, &unknown);
        ait_assert_same_reply(&again, &unknown);
        it_http_response_free(&again);
        it_http_response_free(&unknown);
}

static void test_expired_and_revoked_tokens_are_refused_alike(void **state)
{
        ait_user owner;
        char a[AIT_EMAIL_MAX], b[AIT_EMAIL_MAX], ta[AIT_TOKEN_MAX], tb[AIT_TOKEN_MAX];
        char body[512];
        const char *params[2];
        it_http_response expired, revoked, unknown;
        json_t *j, *list;
        long mark;

        (void)state;
        ait_signup("it-inv-exp", "Expiry Tenant", &owner);
        it_unique_email("it-inv-exp-a", a, sizeof(a));
        it_unique_email("it-inv-exp-b", b, sizeof(b));
        ait_invite(&owner, a, "member", ta);
        ait_invite(&owner, b, "member", tb);

        params[0] = owner.tenant_id;
        params[1] = a;
        ait_exec("UPDATE auth.invitations SET created_at = now() - interval '8 days',"
                 " expires_at = now() - interval '1 day'"
                 " WHERE tenant_id = $1::uuid AND email = $2",
                 2, params);

        j = ait_ok("ListInvitations", "{}", owner.token);
        list = json_object_get(j, "invitations");
        assert_int_equal(json_array_size(list), 1); /* pending only: b */
        assert_string_equal(ait_str(json_array_get(list, 0), "email"), b);
        AIT_BODY(body, "{s:s}", "invitationId", ait_str(json_array_get(list, 0), "id"));
        json_decref(j);

        mark = ait_outbox_mark();
        json_decref(ait_ok("RevokeInvitation", body, owner.token));
        ait_assert_one_summary(mark, owner.tenant_id, "RevokeInvitation");
        /* Revoking again changes nothing and publishes nothing. */
        mark = ait_outbox_mark();
        json_decref(ait_ok("RevokeInvitation", body, owner.token));
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);

        j = ait_ok("ListInvitations", "{\"includeClosed\":true}", owner.token);
        list = json_object_get(j, "invitations");
        assert_int_equal(json_array_size(list), 2);
        assert_string_equal(ait_str(json_array_get(list, 0), "status"), "revoked");
        assert_string_equal(ait_str(json_array_get(list, 1), "status"), "expired");
        json_decref(j);

        accept_refused(ta, AIT_PASSWORD, &expired);
        accept_refused(tb, AIT_PASSWORD, &revoked);
        accept_refused("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", AIT_PASSWORD, &unknown);
        ait_assert_same_reply(&expired, &unknown);
        ait_assert_same_reply(&revoked, &unknown);
        it_http_response_free(&expired);
        it_http_response_free(&revoked);
        it_http_response_free(&unknown);
}

static void test_batch_is_all_or_nothing(void **state)
{
        ait_user owner, member;
        char e[3][AIT_EMAIL_MAX], body[2048], token[AIT_TOKEN_MAX];
        long mark;
        json_t *j, *arr;

        (void)state;
        ait_signup("it-inv-batch", "Batch Tenant", &owner);
        for (int i = 0; i < 3; i++) {
                it_unique_email("it-inv-batch-x", e[i], sizeof(e[i]));
        }
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:[s,s,s], s:s}", "emails", e[0], e[1], e[2], "role", "viewer");
        j = ait_ok("Invite", body, owner.token);
        assert_int_equal(json_array_size(json_object_get(j, "invitations")), 3);
        json_decref(j);
        ait_assert_one_summary(mark, owner.tenant_id, "Invite");
        for (int i = 0; i < 3; i++) {
                assert_int_equal(ait_mail_token(mark, e[i], "invitation", token), 1);
        }

        /* One address already a member: already_exists, and nothing of the batch happens. */
        ait_new_member(&owner, "it-inv-batch-m", "member", &member);
        char fresh[AIT_EMAIL_MAX];
        it_unique_email("it-inv-batch-y", fresh, sizeof(fresh));
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:[s,s], s:s}", "emails", fresh, member.email, "role", "viewer");
        char already[AIT_EMAIL_MAX + 32];
        snprintf(already, sizeof(already), "%s is already a member", member.email);
        ait_fails_with("Invite", body, owner.token, "already_exists", already);
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
        assert_int_equal(ait_events(mark, "auth.email", NULL), 0);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.invitations WHERE email = $1", 1,
                                      (const char *const[]){fresh}),
                         0);

        /* Bounds: 1..100 distinct, valid addresses. */
        ait_fails_with("Invite", "{\"emails\":[],\"role\":\"viewer\"}", owner.token,
                       "invalid_argument", "emails: 1..100 addresses");
        AIT_BODY(body, "{s:[s,s], s:s}", "emails", fresh, fresh, "role", "viewer");
        ait_fails_with("Invite", body, owner.token, "invalid_argument",
                       "emails[1]: the same address as emails[0]");
        ait_fails_with("Invite", "{\"emails\":[\"not-an-address\"],\"role\":\"viewer\"}",
                       owner.token, "invalid_argument", "emails[0]: not a valid email address");
        ait_fails_with("Invite", "{\"emails\":[\"a@example.test\"],\"role\":\"emperor\"}",
                       owner.token, "invalid_argument",
                       "role: one of owner, admin, member, viewer");
        arr = json_array();
        for (int i = 0; i < 101; i++) {
                char addr[64];
                snprintf(addr, sizeof(addr), "bulk%d@example.test", i);
                json_array_append_new(arr, json_string(addr));
        }
        j = json_pack("{s:o, s:s}", "emails", arr, "role", "viewer");
        char *big = json_dumps(j, JSON_COMPACT);
        ait_fails_with("Invite", big, owner.token, "invalid_argument", "emails: 1..100 addresses");
        free(big);
        json_decref(j);
}

/* The auth.email rows after mark: one invitation mail per address, each its own token. */
static void assert_one_mail_each(long mark, char (*emails)[AIT_EMAIL_MAX], int n)
{
        PGconn *pg = ait_pg();
        PGresult *res = ait_event_rows(pg, mark, "auth.email");
        static char tokens[AUTH_IT_BATCH][AIT_TOKEN_MAX];
        int seen[AUTH_IT_BATCH] = {0};

        assert_int_equal(PQntuples(res), n);
        for (int i = 0; i < PQntuples(res); i++) {
                size_t len = 0;
                uint8_t *b = ait_unescape(res, i, &len);
                Keelson__Auth__V1__EmailRequested *m =
                    keelson__auth__v1__email_requested__unpack(NULL, len, b);
                int k = 0;

                assert_non_null(m);
                assert_string_equal(m->kind, "invitation");
                while (k < n && strcmp(emails[k], m->to) != 0) {
                        k++;
                }
                if (k == n || seen[k]++ != 0) {
                        fail_msg("a mail to %s: not invited, or mailed twice", m->to);
                }
                snprintf(tokens[k], sizeof(tokens[k]), "%s", m->token);
                for (int j = 0; j < n; j++) {
                        if (j != k && seen[j] && strcmp(tokens[j], tokens[k]) == 0) {
                                fail_msg("two invitations share a token");
                        }
                }
                keelson__auth__v1__email_requested__free_unpacked(m, NULL);
                PQfreemem(b);
        }
        PQclear(res);
        PQfinish(pg);
}

/* The largest batch: 100 invitations, 100 mails, 100 audit rows, one summary event. */
static void test_batch_of_one_hundred(void **state)
{
        static char emails[AUTH_IT_BATCH][AIT_EMAIL_MAX];
        const char *params[1];
        char m[24];
        long mark, audit;
        ait_user owner;
        json_t *arr, *j, *list;

        (void)state;
        ait_signup("it-inv-hundred", "Hundred Tenant", &owner);
        arr = json_array();
        for (int i = 0; i < AUTH_IT_BATCH; i++) {
                it_unique_email("it-inv-hundred-x", emails[i], sizeof(emails[i]));
                json_array_append_new(arr, json_string(emails[i]));
        }
        j = json_pack("{s:o, s:s}", "emails", arr, "role", "member");
        char *body = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        mark = ait_outbox_mark();
        audit = ait_sql_long("SELECT coalesce(max(id), 0) FROM auth.audit_log", 0, NULL);
        j = ait_ok("Invite", body, owner.token);
        free(body);

        /* The reply: every address, in request order, pending. */
        list = json_object_get(j, "invitations");
        assert_int_equal(json_array_size(list), AUTH_IT_BATCH);
        for (int i = 0; i < AUTH_IT_BATCH; i++) {
                assert_string_equal(ait_str(json_array_get(list, (size_t)i), "email"), emails[i]);
                assert_string_equal(ait_str(json_array_get(list, (size_t)i), "status"), "pending");
        }
        json_decref(j);

        params[0] = owner.tenant_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.invitations WHERE tenant_id ="
                                      " $1::uuid AND accepted_at IS NULL AND revoked_at IS NULL",
                                      1, params),
                         AUTH_IT_BATCH);
        assert_one_mail_each(mark, emails, AUTH_IT_BATCH);
        assert_int_equal(ait_audit_rows(audit, owner.tenant_id, "invitation.created"),
                         AUTH_IT_BATCH);
        /* One write, one event: exactly one users.admin_summary, of any tenant. */
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 1);
        ait_assert_one_summary(mark, owner.tenant_id, "Invite");
        /* And nothing else: the mails and the summary are every row after the mark. */
        snprintf(m, sizeof(m), "%ld", mark);
        params[0] = m;
        assert_int_equal(
            ait_sql_long("SELECT count(*) FROM auth.outbox WHERE id > $1::int8", 1, params),
            AUTH_IT_BATCH + 1);
}

static void test_reinvite_replaces_the_token(void **state)
{
        ait_user owner;
        char email[AIT_EMAIL_MAX], first[AIT_TOKEN_MAX], second[AIT_TOKEN_MAX], body[1024];
        it_http_response r;
        json_t *j;

        (void)state;
        ait_signup("it-inv-again", "Again Tenant", &owner);
        it_unique_email("it-inv-again-x", email, sizeof(email));
        ait_invite(&owner, email, "member", first);
        ait_invite(&owner, email, "viewer", second);
        assert_string_not_equal(first, second);
        accept_refused(first, AIT_PASSWORD, &r);
        it_http_response_free(&r);
        j = ait_accept(second, AIT_PASSWORD);
        assert_string_equal(ait_str(j, "role"), "viewer");
        json_decref(j);
        /* Now a member: inviting the address again is already_exists. */
        AIT_BODY(body, "{s:[s], s:s}", "emails", email, "role", "member");
        char again[AIT_EMAIL_MAX + 32];
        snprintf(again, sizeof(again), "%s is already a member", email);
        ait_fails_with("Invite", body, owner.token, "already_exists", again);
}

static void test_existing_account_proves_its_password(void **state)
{
        ait_user owner, other;
        char token[AIT_TOKEN_MAX], body[1024];
        long mark;
        json_t *j;

        (void)state;
        ait_signup("it-inv-exist-o", "Existing Tenant", &owner);
        ait_signup("it-inv-exist-x", "Elsewhere", &other);
        ait_invite(&owner, other.email, "member", token);

        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s, s:s}", "token", token, "password", "not the password");
        ait_fails_with("AcceptInvitation", body, NULL, "unauthenticated",
                       "invalid email or password");
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);

        /* The invitation is still open: the right password joins the tenant. */
        j = ait_accept(token, AIT_PASSWORD);
        assert_string_equal(ait_str(j, "userId"), other.user_id);
        assert_string_equal(ait_str(j, "tenantId"), owner.tenant_id);
        json_decref(j);
        ait_assert_one_summary(mark, owner.tenant_id, "AcceptInvitation");
        assert_int_equal(ait_memberships(owner.tenant_id, other.user_id, "member"), 1);
        /* The account's password is unchanged, and its first tenant is still its own. */
        json_decref(ait_ok("WhoAmI", "{}", other.token));
}

static void test_new_account_password_rules(void **state)
{
        ait_user owner;
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX], body[1024];

        (void)state;
        ait_signup("it-inv-rules", "Rules Tenant", &owner);
        it_unique_email("it-inv-rules-x", email, sizeof(email));
        ait_invite(&owner, email, "member", token);
        AIT_BODY(body, "{s:s, s:s}", "token", token, "password", "short");
        ait_fails_with("AcceptInvitation", body, NULL, "invalid_argument",
                       "password: at least 8 characters");
        /* Still open afterwards. */
        json_decref(ait_accept(token, AIT_PASSWORD));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_invite_one_and_accept),
            cmocka_unit_test(test_expired_and_revoked_tokens_are_refused_alike),
            cmocka_unit_test(test_batch_is_all_or_nothing),
            cmocka_unit_test(test_batch_of_one_hundred),
            cmocka_unit_test(test_reinvite_replaces_the_token),
            cmocka_unit_test(test_existing_account_proves_its_password),
            cmocka_unit_test(test_new_account_password_rules),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
