/*
 * The permission table of docs/api.md, method by method and bearer by
 * bearer, through the gateway: every AuthService method that needs a caller,
 * called with no bearer, as the owner, an admin, a member and a viewer of
 * one tenant, and with an admin and a viewer API key of that tenant. Each
 * call answers what the docs say: 200; 403 permission_denied naming the
 * permission the method needs ("your role (member) lacks members.invite"),
 * or "this method needs a user session" for a key on a user method; 401
 * without a bearer. Calls whose permission passes but whose target does not
 * exist (a random id) answer 404: the permission is checked first.
 *
 * Calls that end or replace the session they use (Logout, SwitchTenant,
 * RevokeAllSessions, ChangePassword) run on a fresh session, and the user
 * logs in again afterwards, so that every row starts from the same state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

enum { NONE, OWNER, ADMIN, MEMBER, VIEWER, KEY_ADMIN, KEY_VIEWER, BEARERS };

static const char *const bearer_names[BEARERS] = {"no bearer", "owner",     "admin",     "member",
                                                  "viewer",    "admin key", "viewer key"};
/* The role each bearer acts with, as the refusal names it. */
static const char *const bearer_roles[BEARERS] = {"",       "owner", "admin", "member",
                                                  "viewer", "admin", "viewer"};

#define OK   "ok"
#define DENY "permission_denied"
#define NOPE "not_found"
#define AUTH "unauthenticated"

#define FRESH 1u /* ends or replaces its session: run on a new one, log in again after */

typedef struct row {
        const char *method;
        const char *body;
        const char *perm; /* what a refusal names; NULL: a user method */
        unsigned flags;
        const char *expect[BEARERS];
} row;

static struct {
        ait_user users[BEARERS]; /* OWNER..VIEWER */
        char keys[BEARERS][AIT_TOKEN_MAX];
        char tenant_body[256];
        char set_role_body[256];
        char invite_body[512];
} g;

#define RANDOM_ID "7b1f7c4e-0a3d-4f6b-9d2e-5c8a1b0f3e6d" /* no row of any table has it */

static int setup(void **state)
{
        ait_user target;

        if (ait_setup(state) != 0) {
                return -1;
        }
        ait_signup("it-perm-owner", "Permission Table", &g.users[OWNER]);
        ait_new_member(&g.users[OWNER], "it-perm-admin", "admin", &g.users[ADMIN]);
        ait_new_member(&g.users[OWNER], "it-perm-member", "member", &g.users[MEMBER]);
        ait_new_member(&g.users[OWNER], "it-perm-viewer", "viewer", &g.users[VIEWER]);
        /* SetRole's target: a viewer made viewer again (a change of nothing, answered 200). */
        ait_new_member(&g.users[OWNER], "it-perm-target", "viewer", &target);
        for (int b = KEY_ADMIN; b <= KEY_VIEWER; b++) {
                ait_create_key(g.users[OWNER].token, bearer_names[b], bearer_roles[b], g.keys[b],
                               NULL);
        }
        AIT_BODY(g.tenant_body, "{s:s}", "tenantId", g.users[OWNER].tenant_id);
        AIT_BODY(g.set_role_body, "{s:s, s:s}", "userId", target.user_id, "role", "viewer");
        char invitee[AIT_EMAIL_MAX];
        it_unique_email("it-perm-invitee", invitee, sizeof(invitee));
        AIT_BODY(g.invite_body, "{s:[s], s:s}", "emails", invitee, "role", "viewer");
        return 0;
}

/* The bearer a row's call uses; fresh: a new session of that user (keys are never fresh). */
static const char *bearer(int b, bool fresh, char token[AIT_TOKEN_MAX])
{
        if (b == NONE) {
                return NULL;
        }
        if (b >= KEY_ADMIN) {
                return g.keys[b];
        }
        if (!fresh) {
                return g.users[b].token;
        }
        ait_login(&g.users[b], g.users[b].tenant_id, token);
        return token;
}

static long status_of(const char *code)
{
        return strcmp(code, OK) == 0     ? 200
               : strcmp(code, DENY) == 0 ? 403
               : strcmp(code, NOPE) == 0 ? 404
                                         : 401;
}

/* One call of the table: its status, its code, and for a refusal its message. */
static void check(const row *r, int b)
{
        char token[AIT_TOKEN_MAX], want_msg[160];
        const char *want = r->expect[b];
        bool fresh = (r->flags & FRESH) != 0 && b >= OWNER && b <= VIEWER;
        it_http_response res;
        json_t *j;

        ait_call(r->method, r->body, bearer(b, fresh, token), &res);
        j = ait_json(&res);
        if (res.status != status_of(want) ||
            (strcmp(want, OK) != 0 && strcmp(ait_str_or(j, "code"), want) != 0)) {
                fail_msg("%s as %s: expected %s (HTTP %ld), got HTTP %ld: %.300s", r->method,
                         bearer_names[b], want, status_of(want), res.status, res.body);
        }
        if (strcmp(want, DENY) == 0) {
                if (r->perm != NULL) {
                        snprintf(want_msg, sizeof(want_msg), "your role (%s) lacks %s",
                                 bearer_roles[b], r->perm);
                } else {
                        snprintf(want_msg, sizeof(want_msg), "this method needs a user session");
                }
                if (strcmp(ait_str_or(j, "message"), want_msg) != 0) {
                        fail_msg("%s as %s: expected \"%s\", got %.300s", r->method,
                                 bearer_names[b], want_msg, res.body);
                }
        }
        json_decref(j);
        it_http_response_free(&res);
        if (fresh && strcmp(want, OK) == 0) {
                /* It may have revoked the user's other sessions: the user's own token is renewed.
                 */
                ait_login(&g.users[b], g.users[b].tenant_id, g.users[b].token);
        }
}

static void run(const row *rows, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                for (int b = 0; b < BEARERS; b++) {
                        check(&rows[i], b);
                }
        }
}

/*                                        none  owner admin member viewer key:admin key:viewer */
#define USER_METHOD                                                                                \
        {                                                                                          \
                AUTH, OK, OK, OK, OK, DENY, DENY                                                   \
        }
#define EVERY_ROLE                                                                                 \
        {                                                                                          \
                AUTH, OK, OK, OK, OK, OK, OK                                                       \
        }
#define ADMINS                                                                                     \
        {                                                                                          \
                AUTH, OK, OK, DENY, DENY, OK, DENY                                                 \
        }
#define ADMINS_404                                                                                 \
        {                                                                                          \
                AUTH, NOPE, NOPE, DENY, DENY, NOPE, DENY                                           \
        }

static void test_user_methods(void **state)
{
        const row rows[] = {
            {"WhoAmI", "{}", NULL, 0, USER_METHOD},
            {"ListTenants", "{}", NULL, 0, USER_METHOD},
            {"SwitchTenant", g.tenant_body, NULL, FRESH, USER_METHOD},
            {"RevokeAllSessions", "{\"keepCurrent\":true}", NULL, FRESH, USER_METHOD},
            {"ChangePassword",
             "{\"currentPassword\":\"" AIT_PASSWORD "\",\"newPassword\":\"" AIT_PASSWORD "\"}",
             NULL, FRESH, USER_METHOD},
            {"Logout", "{}", NULL, FRESH, USER_METHOD},
        };

        (void)state;
        run(rows, sizeof(rows) / sizeof(rows[0]));
}

static void test_tenant_methods(void **state)
{
        const row rows[] = {
            {"ListMembers", "{}", "members.read", 0, EVERY_ROLE},
            {"SetRole", g.set_role_body, "members.set_role", 0, ADMINS},
            {"RemoveMember", "{\"userId\":\"" RANDOM_ID "\"}", "members.remove", 0, ADMINS_404},
            {"Invite", g.invite_body, "members.invite", 0, ADMINS},
            {"ListInvitations", "{}", "members.invite", 0, ADMINS},
            {"RevokeInvitation", "{\"invitationId\":\"" RANDOM_ID "\"}", "members.invite", 0,
             ADMINS_404},
            {"CreateApiKey", "{\"name\":\"made in the table\",\"role\":\"viewer\"}",
             "api_keys.manage", 0, ADMINS},
            {"ListApiKeys", "{}", "api_keys.manage", 0, ADMINS},
            {"RevokeApiKey", "{\"apiKeyId\":\"" RANDOM_ID "\"}", "api_keys.manage", 0, ADMINS_404},
            {"ListAudit", "{}", "audit.read", 0, ADMINS},
        };

        (void)state;
        run(rows, sizeof(rows) / sizeof(rows[0]));
}

/* WhoAmI's permissions are the role table of docs/api.md, in its order. */
static void test_whoami_lists_the_table(void **state)
{
        static const char *const want[][13] = {
            {"owner", "org.read", "org.manage", "members.read", "members.invite", "members.remove",
             "members.set_role", "billing.read", "billing.manage", "audit.read", "api_keys.manage",
             "webhooks.read", "webhooks.manage"},
            {"admin", "org.read", "members.read", "members.invite", "members.remove",
             "members.set_role", "billing.read", "audit.read", "api_keys.manage", "webhooks.read",
             "webhooks.manage", NULL},
            {"member", "org.read", "members.read", NULL},
            {"viewer", "org.read", "members.read", NULL},
        };

        (void)state;
        for (int b = OWNER; b <= VIEWER; b++) {
                const char *const *w = want[b - OWNER];
                json_t *j = ait_ok("WhoAmI", "{}", g.users[b].token), *perms;
                size_t n = 0;

                assert_string_equal(ait_str(j, "role"), w[0]);
                perms = json_object_get(j, "permissions");
                while (n < 12 && w[n + 1] != NULL) {
                        n++;
                }
                assert_int_equal(json_array_size(perms), n);
                for (size_t i = 0; i < n; i++) {
                        assert_string_equal(json_string_value(json_array_get(perms, i)), w[i + 1]);
                }
                json_decref(j);
        }
}

/*
 * WhoAmI with an API key of every role, on every gateway of the stack, each
 * twice (the key resolved by auth, then from that gateway's context cache):
 * always 403 "this method needs a user session", never the 401 of a token
 * that does not resolve.
 */
static void test_whoami_with_a_key_of_every_role(void **state)
{
        static const char *const roles[] = {"owner", "admin", "member", "viewer"};
        char body[128], key[AIT_TOKEN_MAX];
        it_http_response r;

        (void)state;
        for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
                AIT_BODY(body, "{s:s, s:s}", "name", "whoami", "role", roles[i]);
                json_t *j = ait_ok("CreateApiKey", body, g.users[OWNER].token);
                snprintf(key, sizeof(key), "%s", ait_str(j, "key"));
                json_decref(j);
                for (int gw = 0; gw < ait_stack.n_gateways; gw++) {
                        for (int again = 0; again < 2; again++) {
                                assert_int_equal(it_auth_call(ait_stack.gateway_urls[gw], "WhoAmI",
                                                              "{}", key, NULL, &r),
                                                 0);
                                j = ait_json(&r);
                                if (r.status != 403 ||
                                    strcmp(ait_str_or(j, "message"),
                                           "this method needs a user session") != 0) {
                                        fail_msg("WhoAmI with a %s key on gateway %d (call %d): "
                                                 "HTTP %ld %.300s",
                                                 roles[i], gw, again + 1, r.status, r.body);
                                }
                                json_decref(j);
                                it_http_response_free(&r);
                        }
                }
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_user_methods),
            cmocka_unit_test(test_tenant_methods),
            cmocka_unit_test(test_whoami_lists_the_table),
            cmocka_unit_test(test_whoami_with_a_key_of_every_role),
        };

        return cmocka_run_group_tests(tests, setup, NULL);
}
