/*
 * Tenants, memberships and roles through the gateway: the permission table,
 * ListMembers, SetRole, RemoveMember, the last-owner rule, SwitchTenant,
 * ListTenants, Logout and RevokeAllSessions, request-id deduplication, and
 * the events each write publishes (read back from auth.outbox): exactly one
 * users.admin_summary per committed admin write, none for a refused or
 * repeated one, none for logins; ListAudit's filters (each, combined,
 * paged, per tenant) and their refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"
#include "ks_crypto.h"
#include "ks_code.h"
#include "ks_events.h"
#include "ks_topology.h"

static void set_role(const ait_user *caller, const char *user_id, const char *role,
                     it_http_response *out)
{
        char body[512];

        AIT_BODY(body, "{s:s, s:s}", "userId", user_id, "role", role);
        ait_call("SetRole", body, caller->token, out);
}

static void assert_code(it_http_response *r, long status, const char *code)
{
        json_t *j = ait_json(r);

        if (r->status != status || strcmp(ait_str_or(j, "code"), code) != 0) {
                fail_msg("expected HTTP %ld %s, got %ld: %.300s", status, code, r->status, r->body);
        }
        json_decref(j);
        it_http_response_free(r);
}

/* ---- sign-up, login, who-am-i ---------------------------------------------- */

static void test_signup_publishes_one_summary_and_login_none(void **state)
{
        ait_user u;
        char token[AIT_TOKEN_MAX];
        long mark = ait_outbox_mark(), after;
        json_t *j, *perms;

        (void)state;
        ait_signup("it-ten-signup", "Signup Tenant", &u);
        ait_assert_one_summary(mark, u.tenant_id, "SignUp");
        after = ait_outbox_mark();
        ait_login(&u, NULL, token);
        ait_login(&u, u.tenant_id, token);
        /* Logins publish nothing at all: no outbox row of any topic after the mark. */
        assert_int_equal(ait_outbox_mark(), after);

        j = ait_ok("WhoAmI", "{}", token);
        assert_string_equal(ait_str(j, "role"), "owner");
        perms = json_object_get(j, "permissions");
        assert_true(json_is_array(perms));
        assert_int_equal(json_array_size(perms), 12); /* every permission (ks_perms.c) */
        json_decref(j);
}

static void test_member_permissions(void **state)
{
        ait_user owner, member, viewer;
        json_t *j, *perms;
        char body[512];
        long mark;

        (void)state;
        ait_tenant_of_two("it-ten-perm", "Perm Tenant", "member", &owner, &member);
        ait_new_member(&owner, "it-ten-perm-v", "viewer", &viewer);

        j = ait_ok("WhoAmI", "{}", member.token);
        perms = json_object_get(j, "permissions");
        assert_int_equal(json_array_size(perms), 2); /* org.read, members.read */
        json_decref(j);

        /* Reads that every role may do. */
        j = ait_ok("ListMembers", "{}", viewer.token);
        assert_int_equal(json_array_size(json_object_get(j, "members")), 3);
        json_decref(j);

        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s, s:s}", "userId", viewer.user_id, "role", "member");
        ait_fails_with("SetRole", body, member.token, "permission_denied",
                       "your role (member) lacks members.set_role");
        AIT_BODY(body, "{s:s}", "userId", viewer.user_id);
        ait_fails_with("RemoveMember", body, member.token, "permission_denied",
                       "your role (member) lacks members.remove");
        ait_fails_with("Invite", "{\"emails\":[\"x@example.test\"],\"role\":\"viewer\"}",
                       member.token, "permission_denied",
                       "your role (member) lacks members.invite");
        ait_fails_with("ListInvitations", "{}", viewer.token, "permission_denied",
                       "your role (viewer) lacks members.invite");
        ait_fails_with("ListAudit", "{}", member.token, "permission_denied",
                       "your role (member) lacks audit.read");
        ait_fails_with("CreateApiKey", "{\"name\":\"k\",\"role\":\"viewer\"}", member.token,
                       "permission_denied", "your role (member) lacks api_keys.manage");
        ait_fails_with("ListApiKeys", "{}", viewer.token, "permission_denied",
                       "your role (viewer) lacks api_keys.manage");
        /* Refused writes publish nothing. */
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
}

/* ---- SetRole ---------------------------------------------------------------- */

static void test_set_role_publishes_and_audits(void **state)
{
        ait_user owner, m;
        it_http_response r;
        char reason[64] = "";
        const char *params[2];
        long mark;
        json_t *j;

        (void)state;
        ait_tenant_of_two("it-ten-role", "Role Tenant", "member", &owner, &m);
        mark = ait_outbox_mark();
        set_role(&owner, m.user_id, "admin", &r);
        assert_int_equal(r.status, 200);
        j = ait_json(&r);
        assert_string_equal(ait_str(json_object_get(j, "member"), "role"), "admin");
        assert_string_equal(ait_str(json_object_get(j, "member"), "email"), m.email);
        json_decref(j);
        it_http_response_free(&r);

        assert_int_equal(ait_memberships(owner.tenant_id, m.user_id, "admin"), 1);
        params[0] = owner.tenant_id;
        params[1] = m.user_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.audit_log WHERE tenant_id ="
                                      " $1::uuid AND target_id = $2 AND action = 'member.role_set'",
                                      2, params),
                         1);
        ait_assert_one_summary(mark, owner.tenant_id, "SetRole");
        /* The member's live session is named, so that caches drop its old role. */
        assert_int_equal(ait_revoked_has(mark, m.token, reason), 1);
        assert_string_equal(reason, "role_changed");
        j = ait_ok("WhoAmI", "{}", m.token);
        assert_string_equal(ait_str(j, "role"), "admin");
        json_decref(j);

        /* The same role again: no change, no event. */
        mark = ait_outbox_mark();
        set_role(&owner, m.user_id, "admin", &r);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
}

static void test_rank_rules(void **state)
{
        ait_user owner, admin, admin2;
        it_http_response r;
        long mark;

        (void)state;
        ait_tenant_of_two("it-ten-rank", "Rank Tenant", "admin", &owner, &admin);
        ait_new_member(&owner, "it-ten-rank-b", "admin", &admin2);
        mark = ait_outbox_mark();
        /* An admin grants no role above their own, and touches no owner. */
        set_role(&admin, admin2.user_id, "owner", &r);
        assert_code(&r, 403, "permission_denied");
        set_role(&admin, owner.user_id, "member", &r);
        assert_code(&r, 403, "permission_denied");
        ait_fails_with("Invite", "{\"emails\":[\"y@example.test\"],\"role\":\"owner\"}",
                       admin.token, "permission_denied",
                       "cannot invite with a role above your own (admin)");
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
        /* Within their rank they may. */
        set_role(&admin, admin2.user_id, "viewer", &r);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        ait_assert_one_summary(mark, owner.tenant_id, "SetRole");
}

static void test_last_owner_is_kept(void **state)
{
        ait_user owner, other;
        it_http_response r;
        char body[512];
        long mark;

        (void)state;
        ait_tenant_of_two("it-ten-last", "Last Owner Tenant", "owner", &owner, &other);
        mark = ait_outbox_mark();
        /* Two owners: one may step down. */
        set_role(&owner, owner.user_id, "admin", &r);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        /* Now other is the last owner: neither demoted nor removed, and nothing published. */
        long before = ait_outbox_mark();
        set_role(&other, other.user_id, "member", &r);
        assert_code(&r, 400, "failed_precondition");
        AIT_BODY(body, "{s:s}", "userId", other.user_id);
        ait_fails_with("RemoveMember", body, other.token, "failed_precondition",
                       "the last owner of a tenant can be neither demoted nor removed");
        assert_int_equal(ait_events(before, "users.admin_summary", owner.tenant_id), 0);
        assert_int_equal(ait_events(before, "auth.context_revoked", owner.tenant_id), 0);
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 1);
}

/* ---- RemoveMember ------------------------------------------------------------ */

static void test_remove_member(void **state)
{
        ait_user owner, m;
        char body[512], reason[64] = "";
        long mark;
        json_t *j;

        (void)state;
        ait_tenant_of_two("it-ten-rm", "Remove Tenant", "member", &owner, &m);
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s}", "userId", m.user_id);
        j = ait_ok("RemoveMember", body, owner.token);
        json_decref(j);
        ait_wait_unauthenticated(m.token);
        ait_assert_one_summary(mark, owner.tenant_id, "RemoveMember");
        assert_int_equal(ait_revoked_has(mark, m.token, reason), 1);
        assert_string_equal(reason, "member_removed");
        assert_int_equal(ait_memberships(owner.tenant_id, m.user_id, ""), 0);
        /* Gone is gone: a second removal is not_found. */
        ait_fails_with("RemoveMember", body, owner.token, "not_found", "no such member");
        j = ait_ok("ListMembers", "{}", owner.token);
        assert_int_equal(json_array_size(json_object_get(j, "members")), 1);
        json_decref(j);
}

/* ---- deduplication by request id --------------------------------------------- */

static void test_repeated_request_id_changes_nothing(void **state)
{
        ait_user owner, m;
        it_http_response first, second, other;
        char body[512], rid[96], body2[512];
        long mark;

        (void)state;
        ait_tenant_of_two("it-ten-dup", "Dedupe Tenant", "member", &owner, &m);
        snprintf(rid, sizeof(rid), "it-dup-%s", m.user_id);
        AIT_BODY(body, "{s:s, s:s}", "userId", m.user_id, "role", "viewer");
        mark = ait_outbox_mark();
        ait_call_rid("SetRole", body, owner.token, rid, &first);
        ait_call_rid("SetRole", body, owner.token, rid, &second);
        assert_int_equal(first.status, 200);
        assert_int_equal(second.status, 200);
        assert_int_equal(first.body_len, second.body_len);
        assert_memory_equal(first.body, second.body, first.body_len);
        ait_assert_one_summary(mark, owner.tenant_id, "SetRole");
        /* The same id for another request is refused, and changes nothing. */
        AIT_BODY(body2, "{s:s, s:s}", "userId", m.user_id, "role", "admin");
        ait_call_rid("SetRole", body2, owner.token, rid, &other);
        assert_code(&other, 400, "invalid_argument");
        it_http_response_free(&first);
        it_http_response_free(&second);
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 1);
}

/* ---- ListMembers paging --------------------------------------------------------- */

static void test_list_members_pages(void **state)
{
        ait_user owner, a, b;
        char body[256], seen[3][AIT_ID_MAX];
        int n = 0;
        json_t *j;
        char token[256] = "";

        (void)state;
        ait_tenant_of_two("it-ten-page", "Page Tenant", "member", &owner, &a);
        ait_new_member(&owner, "it-ten-page-b", "member", &b);
        for (int page = 0; page < 4; page++) {
                json_t *ms;

                AIT_BODY(body, "{s:i, s:s}", "pageSize", 2, "pageToken", token);
                j = ait_ok("ListMembers", body, owner.token);
                ms = json_object_get(j, "members");
                for (size_t i = 0; i < json_array_size(ms); i++) {
                        assert_true(n < 3);
                        snprintf(seen[n++], AIT_ID_MAX, "%s",
                                 ait_str(json_array_get(ms, i), "userId"));
                }
                snprintf(token, sizeof(token), "%s", ait_str_or(j, "nextPageToken"));
                json_decref(j);
                if (token[0] == '\0') {
                        break;
                }
        }
        assert_int_equal(n, 3);
        /* Oldest membership first: the owner, then a, then b. */
        assert_string_equal(seen[0], owner.user_id);
        assert_string_equal(seen[1], a.user_id);
        assert_string_equal(seen[2], b.user_id);
        ait_fails_with("ListMembers", "{\"pageToken\":\"nonsense\"}", owner.token,
                       "invalid_argument", "page_token: not from this list");
}

/* Pages through a list with pageSize 2; returns the ids seen (in order) and the page count. */
static int page_ids(const char *method, const char *field, const char *id_key, const char *token,
                    char ids[][AIT_ID_MAX], int max, int *pages)
{
        char body[512], next[256] = "";
        int n = 0;

        *pages = 0;
        do {
                json_t *j, *items;

                AIT_BODY(body, "{s:i, s:s}", "pageSize", 2, "pageToken", next);
                j = ait_ok(method, body, token);
                items = json_object_get(j, field);
                assert_true(json_array_size(items) <= 2);
                for (size_t i = 0; i < json_array_size(items); i++) {
                        assert_true(n < max);
                        snprintf(ids[n++], AIT_ID_MAX, "%s",
                                 ait_str(json_array_get(items, i), id_key));
                }
                snprintf(next, sizeof(next), "%s", ait_str_or(j, "nextPageToken"));
                json_decref(j);
                assert_true(++*pages <= max);
        } while (next[0] != '\0');
        return n;
}

/* ---- page tokens: every list pages, and a token works in its own list only ------ */

static void test_list_tokens_stay_in_their_list(void **state)
{
        static const char *const lists[] = {"ListMembers", "ListInvitations", "ListApiKeys",
                                            "ListAudit"};
        ait_user owner, other, member;
        char body[512], ids[8][AIT_ID_MAX], token[4][256], key_ids[3][AIT_ID_MAX];
        int pages, n;
        json_t *j;

        (void)state;
        ait_signup("it-ten-tok", "Token Tenant", &owner);
        ait_signup("it-ten-tok-other", "Other Token Tenant", &other);
        ait_new_member(&owner, "it-ten-tok-m", "member", &member); /* two members: two pages */
        for (int i = 0; i < 3; i++) {
                char email[AIT_EMAIL_MAX], name[16];

                it_unique_email("it-ten-tok-inv", email, sizeof(email));
                AIT_BODY(body, "{s:[s], s:s}", "emails", email, "role", "member");
                json_decref(ait_ok("Invite", body, owner.token));
                snprintf(name, sizeof(name), "key-%d", i);
                AIT_BODY(body, "{s:s, s:s}", "name", name, "role", "viewer");
                j = ait_ok("CreateApiKey", body, owner.token);
                snprintf(key_ids[i], AIT_ID_MAX, "%s", ait_str(json_object_get(j, "apiKey"), "id"));
                json_decref(j);
        }
        /* Three of each, two a page: two pages, every row once, newest first. */
        n = page_ids("ListInvitations", "invitations", "id", owner.token, ids, 8, &pages);
        assert_int_equal(n, 3);
        assert_int_equal(pages, 2);
        n = page_ids("ListApiKeys", "apiKeys", "id", owner.token, ids, 8, &pages);
        assert_int_equal(n, 3);
        assert_int_equal(pages, 2);
        for (int i = 0; i < 3; i++) {
                assert_string_equal(ids[i], key_ids[2 - i]);
        }

        /* A first-page token of each list. */
        for (int i = 0; i < 4; i++) {
                j = ait_ok(lists[i], "{\"pageSize\":1}", owner.token);
                snprintf(token[i], sizeof(token[i]), "%s", ait_str(j, "nextPageToken"));
                json_decref(j);
        }
        for (int i = 0; i < 4; i++) {
                for (int k = 0; k < 4; k++) {
                        AIT_BODY(body, "{s:s}", "pageToken", token[k]);
                        if (i == k) {
                                json_decref(ait_ok(lists[i], body, owner.token));
                        } else {
                                ait_fails_with(lists[i], body, owner.token, "invalid_argument",
                                               "page_token: not from this list");
                        }
                }
                /* The same list in another tenant, and an altered token. */
                AIT_BODY(body, "{s:s}", "pageToken", token[i]);
                ait_fails_with(lists[i], body, other.token, "invalid_argument",
                               "page_token: not from this list");
                token[i][3] = token[i][3] == 'A' ? 'B' : 'A';
                AIT_BODY(body, "{s:s}", "pageToken", token[i]);
                ait_fails_with(lists[i], body, owner.token, "invalid_argument",
                               "page_token: not from this list");
                ait_fails_with(lists[i], "{\"pageSize\":-1}", owner.token, "invalid_argument",
                               "page_size: must not be negative");
        }
        /* Once a past-int8 audit id reached the database and came back as internal. */
        ait_fails_with("ListAudit", "{\"pageToken\":\"9999999999999999999\"}", owner.token,
                       "invalid_argument", "page_token: not from this list");
}

/* ---- sessions across tenants ------------------------------------------------------ */

static void test_switch_tenant(void **state)
{
        ait_user a, b, member_of_b;
        char body[512], reason[64] = "", token_b[AIT_TOKEN_MAX];
        long mark;
        json_t *j;

        (void)state;
        ait_signup("it-ten-sw-a", "Switch A", &a);
        ait_signup("it-ten-sw-b", "Switch B", &b);
        /* a joins B too, with an existing account: the invitation asks for its password. */
        ait_invite(&b, a.email, "viewer", token_b);
        json_decref(ait_accept(token_b, AIT_PASSWORD));

        j = ait_ok("ListTenants", "{}", a.token);
        assert_int_equal(json_array_size(json_object_get(j, "tenants")), 2);
        assert_string_equal(ait_str(json_array_get(json_object_get(j, "tenants"), 0), "tenantId"),
                            a.tenant_id);
        json_decref(j);

        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s}", "tenantId", b.tenant_id);
        j = ait_ok("SwitchTenant", body, a.token);
        assert_string_equal(ait_str(j, "tenantId"), b.tenant_id);
        assert_string_equal(ait_str(j, "role"), "viewer");
        snprintf(member_of_b.token, sizeof(member_of_b.token), "%s", ait_str(j, "sessionToken"));
        json_decref(j);
        j = ait_ok("WhoAmI", "{}", member_of_b.token);
        assert_string_equal(ait_str(j, "tenantId"), b.tenant_id);
        assert_string_equal(ait_str(j, "tenantName"), "Switch B");
        json_decref(j);
        /* The old token stopped working, and caches were told. */
        ait_wait_unauthenticated(a.token);
        assert_int_equal(ait_revoked_has(mark, a.token, reason), 1);
        assert_string_equal(reason, "tenant_switched");
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);

        /* A tenant the user is no member of: not_found, like one that does not exist. */
        AIT_BODY(body, "{s:s}", "tenantId", "00000000-0000-4000-8000-000000000000");
        ait_fails_with("SwitchTenant", body, b.token, "not_found", "no such tenant");
        AIT_BODY(body, "{s:s}", "tenantId", a.tenant_id);
        ait_fails_with("SwitchTenant", body, b.token, "not_found", "no such tenant");
}

static void test_logout_and_revoke_all_sessions(void **state)
{
        ait_user u;
        char t2[AIT_TOKEN_MAX], t3[AIT_TOKEN_MAX], reason[64] = "";
        long mark;
        json_t *j;

        (void)state;
        ait_signup("it-ten-revoke", "Revoke Tenant", &u);
        ait_login(&u, NULL, t2);
        ait_login(&u, NULL, t3);

        mark = ait_outbox_mark();
        json_decref(ait_ok("Logout", "{}", t3));
        ait_wait_unauthenticated(t3);
        assert_int_equal(ait_revoked_has(mark, t3, reason), 1);
        assert_string_equal(reason, "logout");
        /* A second logout of the same session succeeds (idempotent) and publishes nothing. */
        mark = ait_outbox_mark();
        json_decref(ait_ok("Logout", "{}", t3));
        ait_wait_unauthenticated(t3);
        assert_int_equal(ait_events(mark, "auth.context_revoked", NULL), 0);

        mark = ait_outbox_mark();
        j = ait_ok("RevokeAllSessions", "{\"keepCurrent\":true}", u.token);
        assert_int_equal(json_integer_value(json_object_get(j, "revokedSessions")), 1);
        json_decref(j);
        ait_wait_unauthenticated(t2);
        json_decref(ait_ok("WhoAmI", "{}", u.token));
        assert_int_equal(ait_revoked_has(mark, t2, reason), 1);
        assert_string_equal(reason, "sessions_revoked");
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);

        j = ait_ok("RevokeAllSessions", "{}", u.token);
        assert_int_equal(json_integer_value(json_object_get(j, "revokedSessions")), 1);
        json_decref(j);
        ait_wait_unauthenticated(u.token);
}

/* ---- ListAudit ------------------------------------------------------------------ */

static void test_audit_newest_first(void **state)
{
        ait_user owner, m;
        char body[256], next[128];
        json_t *j, *e;

        (void)state;
        ait_tenant_of_two("it-ten-audit", "Audit Tenant", "member", &owner, &m);
        AIT_BODY(body, "{s:s}", "userId", m.user_id);
        json_decref(ait_ok("RemoveMember", body, owner.token));

        j = ait_ok("ListAudit", "{\"pageSize\":2}", owner.token);
        e = json_object_get(j, "entries");
        assert_int_equal(json_array_size(e), 2);
        assert_string_equal(ait_str(json_array_get(e, 0), "action"), "member.removed");
        assert_string_equal(ait_str(json_array_get(e, 0), "targetId"), m.user_id);
        assert_string_equal(ait_str(json_array_get(e, 0), "actorUserId"), owner.user_id);
        assert_string_equal(ait_str(json_array_get(e, 1), "action"), "invitation.accepted");
        snprintf(next, sizeof(next), "%s", ait_str(j, "nextPageToken"));
        json_decref(j);
        AIT_BODY(body, "{s:i, s:s}", "pageSize", 2, "pageToken", next);
        j = ait_ok("ListAudit", body, owner.token);
        e = json_object_get(j, "entries");
        assert_int_equal(json_array_size(e), 2);
        assert_string_equal(ait_str(json_array_get(e, 0), "action"), "invitation.created");
        assert_string_equal(ait_str(json_array_get(e, 1), "action"), "tenant.created");
        assert_string_equal(ait_str_or(j, "nextPageToken"), "");
        json_decref(j);
}

/* ---- ListAudit's filters -------------------------------------------------------- */

#define AUDIT_ROWS_MAX 32

/* One row of the log as the test compares them. */
typedef struct audit_row {
        char id[AIT_ID_MAX];
        char action[AIT_ID_MAX];
        char actor_user_id[AIT_ID_MAX];
        char target_id[AIT_ID_MAX];
        long long at_ms;
} audit_row;

/*
 * Every row ListAudit shows for filters (a JSON object's members, "" for
 * none), two a page, into rows; the number of rows. Every page but the last
 * is full and carries a token, which the next request sends with the same
 * filters.
 */
static int audit_pages(const char *token, const char *filters, audit_row *rows, int *pages)
{
        char body[1024], next[256] = "";
        int n = 0;

        *pages = 0;
        do {
                json_t *j, *e;

                snprintf(body, sizeof(body), "{\"pageSize\":2,\"pageToken\":\"%s\"%s%s}", next,
                         filters[0] != '\0' ? "," : "", filters);
                j = ait_ok("ListAudit", body, token);
                e = json_object_get(j, "entries");
                snprintf(next, sizeof(next), "%s", ait_str_or(j, "nextPageToken"));
                assert_true(json_array_size(e) == 2 || (next[0] == '\0' && json_array_size(e) < 2));
                for (size_t i = 0; i < json_array_size(e); i++) {
                        json_t *row = json_array_get(e, i);
                        const char *at = ait_str(row, "occurredAtUnixMs");

                        assert_true(n < AUDIT_ROWS_MAX);
                        snprintf(rows[n].id, AIT_ID_MAX, "%s", ait_str(row, "id"));
                        snprintf(rows[n].action, AIT_ID_MAX, "%s", ait_str(row, "action"));
                        snprintf(rows[n].actor_user_id, AIT_ID_MAX, "%s",
                                 ait_str_or(row, "actorUserId"));
                        snprintf(rows[n].target_id, AIT_ID_MAX, "%s", ait_str(row, "targetId"));
                        rows[n].at_ms = strtoll(at, NULL, 10);
                        n++;
                }
                json_decref(j);
                assert_true(++*pages <= AUDIT_ROWS_MAX);
        } while (next[0] != '\0');
        return n;
}

/* What a filter should show: the rows of all that match, in the same order. */
typedef struct audit_filter {
        const char *action;        /* NULL: any */
        const char *actor_user_id; /* NULL: any */
        long long since_ms, until_ms;
} audit_filter;

static bool audit_matches(const audit_row *r, const audit_filter *f)
{
        return (f->action == NULL || strcmp(r->action, f->action) == 0) &&
               (f->actor_user_id == NULL || strcmp(r->actor_user_id, f->actor_user_id) == 0) &&
               (f->since_ms == 0 || r->at_ms >= f->since_ms) &&
               (f->until_ms == 0 || r->at_ms < f->until_ms);
}

/* The filter as ListAudit's JSON members. */
static void audit_filter_json(const audit_filter *f, char *out, size_t len)
{
        json_t *o = json_object();
        char *text;

        if (f->action != NULL) {
                json_object_set_new(o, "action", json_string(f->action));
        }
        if (f->actor_user_id != NULL) {
                json_object_set_new(o, "actorUserId", json_string(f->actor_user_id));
        }
        if (f->since_ms != 0) {
                json_object_set_new(o, "sinceUnixMs", json_integer(f->since_ms));
        }
        if (f->until_ms != 0) {
                json_object_set_new(o, "untilUnixMs", json_integer(f->until_ms));
        }
        text = json_dumps(o, JSON_COMPACT);
        assert_non_null(text);
        /* The members without the braces, to go after pageSize and pageToken. */
        snprintf(out, len, "%.*s", (int)strlen(text) - 2, text + 1);
        free(text);
        json_decref(o);
}

/* ListAudit under f shows exactly the rows of all that match f, paged; returns how many. */
static int assert_audit_filter(const char *token, const audit_row *all, int n_all,
                               const audit_filter *f)
{
        audit_row got[AUDIT_ROWS_MAX];
        char filters[512];
        int n, pages, k = 0;

        audit_filter_json(f, filters, sizeof(filters));
        n = audit_pages(token, filters, got, &pages);
        for (int i = 0; i < n_all; i++) {
                if (!audit_matches(&all[i], f)) {
                        continue;
                }
                if (k >= n || strcmp(got[k].id, all[i].id) != 0) {
                        fail_msg("filter {%s}: row %d should be %s (%s), got %s", filters, k,
                                 all[i].id, all[i].action, k < n ? got[k].id : "none");
                }
                k++;
        }
        if (k != n) {
                fail_msg("filter {%s}: %d rows, expected %d", filters, n, k);
        }
        assert_int_equal(pages, n == 0 ? 1 : (n + 1) / 2);
        return n;
}

/* Writes with a few milliseconds between them, so that a time window can part them. */
static void audit_write(const char *method, const char *body, const char *token, char *key_id)
{
        json_t *j;

        it_sleep_ms(5);
        j = ait_ok(method, body, token);
        if (key_id != NULL) {
                snprintf(key_id, AIT_ID_MAX, "%s", ait_str(json_object_get(j, "apiKey"), "id"));
        }
        json_decref(j);
        it_sleep_ms(5);
}

/*
 * Several kinds of rows, by two users and an API key, and another tenant's
 * rows of the same kinds: each filter, and all of them at once, shows the
 * rows of the tenant's whole log that match (as the test filters it), paged
 * two at a time; never another tenant's.
 */
static void test_audit_filters(void **state)
{
        ait_user owner, admin, other;
        audit_row all[AUDIT_ROWS_MAX], theirs[AUDIT_ROWS_MAX];
        char body[512], key[AIT_TOKEN_MAX], key_ids[4][AIT_ID_MAX];
        int n_all, n_theirs, pages, n;

        (void)state;
        ait_tenant_of_two("it-ten-audf", "Audit Filter Tenant", "admin", &owner, &admin);
        ait_signup("it-ten-audf-other", "Audit Filter Other", &other);
        for (int i = 0; i < 3; i++) {
                AIT_BODY(body, "{s:s, s:s}", "name", "owner-key", "role", "viewer");
                audit_write("CreateApiKey", body, owner.token, key_ids[i]);
                AIT_BODY(body, "{s:s, s:s}", "name", "other-key", "role", "viewer");
                audit_write("CreateApiKey", body, other.token, NULL);
        }
        AIT_BODY(body, "{s:s, s:s}", "name", "admin-key", "role", "viewer");
        audit_write("CreateApiKey", body, admin.token, NULL);
        AIT_BODY(body, "{s:s}", "apiKeyId", key_ids[0]);
        audit_write("RevokeApiKey", body, owner.token, NULL);
        /* A row written with an API key: no actor user. */
        ait_create_key(owner.token, "writer", "admin", key, key_ids[3]);
        AIT_BODY(body, "{s:s, s:s}", "name", "by-key", "role", "viewer");
        audit_write("CreateApiKey", body, key, NULL);
        AIT_BODY(body, "{s:s}", "apiKeyId", key_ids[1]);
        audit_write("RevokeApiKey", body, admin.token, NULL);

        /* The whole log, unfiltered: what every filter is checked against. */
        n_all = audit_pages(owner.token, "", all, &pages);
        assert_int_equal(n_all, 11);
        n_theirs = audit_pages(other.token, "", theirs, &pages);
        assert_int_equal(n_theirs, 4);

        /* One filter at a time. */
        audit_filter f = {.action = "api_key.created"};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 6);
        f = (audit_filter){.action = "api_key.revoked"};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 2);
        f = (audit_filter){.action = "member.removed"};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 0);
        f = (audit_filter){.actor_user_id = admin.user_id};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 3);
        f = (audit_filter){.actor_user_id = owner.user_id};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 7);
        /* A window from the fourth-newest row to the newest (which it leaves out). */
        f = (audit_filter){.since_ms = all[3].at_ms, .until_ms = all[0].at_ms};
        n = assert_audit_filter(owner.token, all, n_all, &f);
        assert_true(n >= 3 && n < n_all);
        f = (audit_filter){.since_ms = all[5].at_ms};
        assert_true(assert_audit_filter(owner.token, all, n_all, &f) >= 6);
        f = (audit_filter){.until_ms = all[5].at_ms};
        assert_true(assert_audit_filter(owner.token, all, n_all, &f) <= 5);

        /* All at once, and action with actor. */
        f = (audit_filter){.action = "api_key.created",
                           .actor_user_id = owner.user_id,
                           .since_ms = all[n_all - 1].at_ms + 1,
                           .until_ms = all[0].at_ms};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 4);
        f = (audit_filter){.action = "api_key.revoked", .actor_user_id = admin.user_id};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 1);

        /* Another tenant: its own rows only, whatever names another's. */
        f = (audit_filter){.action = "api_key.created"};
        assert_int_equal(assert_audit_filter(other.token, theirs, n_theirs, &f), 3);
        f = (audit_filter){.actor_user_id = owner.user_id};
        assert_int_equal(assert_audit_filter(other.token, theirs, n_theirs, &f), 0);
        f = (audit_filter){.actor_user_id = other.user_id};
        assert_int_equal(assert_audit_filter(owner.token, all, n_all, &f), 0);
        f = (audit_filter){.since_ms = all[n_all - 1].at_ms};
        assert_int_equal(assert_audit_filter(other.token, theirs, n_theirs, &f), n_theirs);
}

/* A token resumes the list of the filters it was issued under, and no other. */
static void test_audit_filter_tokens(void **state)
{
        ait_user owner, other;
        char body[512], token[256], plain[256], key[AIT_TOKEN_MAX];
        json_t *j;

        (void)state;
        ait_signup("it-ten-audtok", "Audit Token Tenant", &owner);
        ait_signup("it-ten-audtok-other", "Audit Token Other", &other);
        for (int i = 0; i < 3; i++) {
                ait_create_key(owner.token, "k", "viewer", key, NULL);
                ait_create_key(other.token, "k", "viewer", key, NULL);
        }
        j = ait_ok("ListAudit", "{\"pageSize\":1,\"action\":\"api_key.created\"}", owner.token);
        snprintf(token, sizeof(token), "%s", ait_str(j, "nextPageToken"));
        json_decref(j);
        j = ait_ok("ListAudit", "{\"pageSize\":1}", owner.token);
        snprintf(plain, sizeof(plain), "%s", ait_str(j, "nextPageToken"));
        json_decref(j);

        AIT_BODY(body, "{s:i, s:s, s:s}", "pageSize", 1, "pageToken", token, "action",
                 "api_key.created");
        j = ait_ok("ListAudit", body, owner.token);
        assert_string_equal(ait_str(json_array_get(json_object_get(j, "entries"), 0), "action"),
                            "api_key.created");
        json_decref(j);
        /* The same token under other filters, under none, in another tenant. */
        AIT_BODY(body, "{s:s, s:s}", "pageToken", token, "action", "tenant.created");
        ait_fails_with("ListAudit", body, owner.token, "invalid_argument",
                       "page_token: not from this list");
        AIT_BODY(body, "{s:s, s:s, s:s}", "pageToken", token, "action", "api_key.created",
                 "actorUserId", owner.user_id);
        ait_fails_with("ListAudit", body, owner.token, "invalid_argument",
                       "page_token: not from this list");
        AIT_BODY(body, "{s:s}", "pageToken", token);
        ait_fails_with("ListAudit", body, owner.token, "invalid_argument",
                       "page_token: not from this list");
        AIT_BODY(body, "{s:s, s:s}", "pageToken", token, "action", "api_key.created");
        ait_fails_with("ListAudit", body, other.token, "invalid_argument",
                       "page_token: not from this list");
        /* An unfiltered token under a filter; still good without one. */
        AIT_BODY(body, "{s:s, s:I}", "pageToken", plain, "sinceUnixMs", (json_int_t)1);
        ait_fails_with("ListAudit", body, owner.token, "invalid_argument",
                       "page_token: not from this list");
        AIT_BODY(body, "{s:s}", "pageToken", plain);
        json_decref(ait_ok("ListAudit", body, owner.token));
}

/* What a filter cannot be: refused, each with its own message. */
static void test_audit_filter_refusals(void **state)
{
        ait_user owner;
        char body[256];

        (void)state;
        ait_signup("it-ten-audbad", "Audit Refusals Tenant", &owner);
        ait_fails_with("ListAudit", "{\"action\":\"member.invited\"}", owner.token,
                       "invalid_argument",
                       "action: not an audited action (one of tenant.created, invitation.created,"
                       " invitation.accepted, invitation.revoked, member.role_set, member.removed,"
                       " api_key.created, api_key.revoked)");
        ait_fails_with("ListAudit", "{\"action\":\"API_KEY.CREATED\"}", owner.token,
                       "invalid_argument",
                       "action: not an audited action (one of tenant.created, invitation.created, "
                       "invitation.accepted, invitation.revoked, member.role_set, member.removed, "
                       "api_key.created, api_key.revoked)");
        ait_fails_with("ListAudit", "{\"actorUserId\":\"not-a-uuid\"}", owner.token,
                       "invalid_argument", "actor_user_id: not a valid uuid");
        ait_fails_with("ListAudit", "{\"sinceUnixMs\":\"2000\",\"untilUnixMs\":\"1000\"}",
                       owner.token, "invalid_argument", "until_unix_ms: before since_unix_ms");
        ait_fails_with("ListAudit", "{\"sinceUnixMs\":\"-1\"}", owner.token, "invalid_argument",
                       "since_unix_ms: must be 0..253402300799999");
        AIT_BODY(body, "{s:I}", "untilUnixMs", (json_int_t)INT64_MAX);
        ait_fails_with("ListAudit", body, owner.token, "invalid_argument",
                       "until_unix_ms: must be 0..253402300799999");
        /* An open end on either side is no bound at all; an empty window shows nothing. */
        json_decref(ait_ok("ListAudit", "{\"untilUnixMs\":\"253402300799999\"}", owner.token));
        json_t *j =
            ait_ok("ListAudit", "{\"sinceUnixMs\":\"1000\",\"untilUnixMs\":\"1000\"}", owner.token);
        assert_int_equal(json_array_size(json_object_get(j, "entries")), 0);
        json_decref(j);
}

/* ---- a write that fails after its outbox insert publishes nothing -------------- */

static int restore_audit_grant(void **state)
{
        (void)state;
        ait_exec("GRANT INSERT ON auth.audit_log TO keelson_auth_rt", 0, NULL);
        return 0;
}

static void test_rolled_back_write_publishes_nothing(void **state)
{
        ait_user owner, m;
        char body[512];
        long mark;

        (void)state;
        ait_tenant_of_two("it-ten-rollback", "Rollback Tenant", "member", &owner, &m);
        /*
         * Fault injection: the audit insert, the last statement of RemoveMember
         * before its users.admin_summary, fails. The membership delete, the
         * session revocation and the auth.context_revoked outbox row that came
         * before it must all roll back.
         */
        ait_exec("REVOKE INSERT ON auth.audit_log FROM keelson_auth_rt", 0, NULL);
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s}", "userId", m.user_id);
        ait_fails_with("RemoveMember", body, owner.token, "internal", "internal error");
        restore_audit_grant(NULL);

        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);
        assert_int_equal(ait_events(mark, "auth.context_revoked", NULL), 0);
        assert_int_equal(ait_memberships(owner.tenant_id, m.user_id, ""), 1);
        json_decref(ait_ok("WhoAmI", "{}", m.token));
        /* The same call, with the database well again, goes through once. */
        json_decref(ait_ok("RemoveMember", body, owner.token));
        ait_assert_one_summary(mark, owner.tenant_id, "RemoveMember");
}

/* ---- housekeeping ---------------------------------------------------------------- */

/* What every replica runs every KEELSON_AUTH_HOUSEKEEPING_S, called here directly. */
static void test_housekeeping_deletes_only_stale_sessions(void **state)
{
        ait_user u;
        char old[AIT_TOKEN_MAX];
        const char *params[1];
        PGconn *pg;

        (void)state;
        ait_signup("it-ten-house", "House Tenant", &u);
        ait_login(&u, NULL, old);
        params[0] = old;
        pg = ait_pg();
        PQclear(it_sql(pg,
                       "UPDATE auth.sessions SET created_at = now() - interval '10 days',"
                       " expires_at = now() - interval '9 days'"
                       " WHERE token_sha256 = sha256(convert_to($1, 'UTF8'))",
                       1, params));
        PQclear(it_sql(pg, "SET ROLE keelson_auth_rt", 0, NULL));
        PQclear(it_sql(pg, "SELECT auth.housekeeping(86400, 86400, 1000)", 0, NULL));
        PQfinish(pg);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.sessions"
                                      " WHERE token_sha256 = sha256(convert_to($1, 'UTF8'))",
                                      1, params),
                         0);
        json_decref(ait_ok("WhoAmI", "{}", u.token)); /* a live session stays */
}

/* ---- events on the broker's bus ---------------------------------------------------- */

static ks_subscriber *subscribe(const char *prefix)
{
        const char *bases[1] = {ait_stack.broker_url};
        const char *prefixes[1] = {prefix};
        ks_subscriber *sub = NULL;

        assert_int_equal(ks_subscriber_new(&sub, bases, 1, prefixes, 1), KS_OK);
        /* A subscriber hears only what is published after its dial completed. */
        it_sleep_ms(300);
        return sub;
}

/* Waits for an event of topic with this tenant (or this event id); fails after 10 s. */
static void expect_event(ks_subscriber *sub, const char *topic, const char *tenant_id,
                         const char *event_id)
{
        for (int i = 0; i < 1000; i++) {
                Keelson__Events__V1__Event *ev = NULL;
                int rc = ks_subscriber_next(sub, 10000, &ev);
                bool match;

                if (rc != KS_OK) {
                        fail_msg("no %s event for tenant %s on the bus (code %d)", topic, tenant_id,
                                 rc);
                }
                match = strcmp(ev->topic, topic) == 0 &&
                        (tenant_id == NULL || strcmp(ev->tenant_id, tenant_id) == 0) &&
                        (event_id == NULL || strcmp(ev->event_id, event_id) == 0);
                keelson__events__v1__event__free_unpacked(ev, NULL);
                if (match) {
                        return;
                }
        }
        fail_msg("no %s event for tenant %s among the next 1000 events", topic, tenant_id);
}

static void test_events_reach_subscribers(void **state)
{
        ks_subscriber *sub = subscribe("users.admin_summary");
        ait_user u;

        (void)state;
        ait_signup("it-ten-bus", "Bus Tenant", &u);
        expect_event(sub, "users.admin_summary", u.tenant_id, NULL);
        ks_subscriber_free(sub);
}

/*
 * A committed outbox row that its writer never published (the process died
 * between its commit and its relay's next pass) is published by a relay that
 * is alive, and taken off the queue only then. It is inserted alone, as a
 * writer of the release before the queue inserted it: the outbox's trigger
 * (migration 010) queues it.
 */
static void test_relay_publishes_rows_left_behind(void **state)
{
        ks_subscriber *sub = subscribe("users.admin_summary");
        char event_id[37], tenant_id[37];
        const char *params[2] = {event_id, tenant_id};
        PGconn *pg = ait_pg();

        (void)state;
        assert_int_equal(ks_uuid_v4(event_id), 0);
        assert_int_equal(ks_uuid_v4(tenant_id), 0);
        PQclear(it_sql(pg,
                       "INSERT INTO auth.outbox (event_id, topic, tenant_id, payload)"
                       " VALUES ($1::uuid, 'users.admin_summary', $2::uuid, '\\x')",
                       2, params));
        PQfinish(pg);
        expect_event(sub, "users.admin_summary", tenant_id, event_id);
        ks_subscriber_free(sub);
        for (int i = 0; i < 100; i++) {
                if (ait_sql_long("SELECT count(*) FROM auth.outbox o WHERE event_id = $1::uuid"
                                 " AND NOT EXISTS (SELECT 1 FROM auth.outbox_queue q"
                                 " WHERE q.id = o.id)",
                                 1, params) == 1) {
                        return;
                }
                it_sleep_ms(50);
        }
        fail_msg("the published row was not marked");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_signup_publishes_one_summary_and_login_none),
            cmocka_unit_test(test_member_permissions),
            cmocka_unit_test(test_set_role_publishes_and_audits),
            cmocka_unit_test(test_rank_rules),
            cmocka_unit_test(test_last_owner_is_kept),
            cmocka_unit_test(test_remove_member),
            cmocka_unit_test(test_repeated_request_id_changes_nothing),
            cmocka_unit_test(test_list_members_pages),
            cmocka_unit_test(test_list_tokens_stay_in_their_list),
            cmocka_unit_test(test_switch_tenant),
            cmocka_unit_test(test_logout_and_revoke_all_sessions),
            cmocka_unit_test(test_audit_newest_first),
            cmocka_unit_test(test_audit_filters),
            cmocka_unit_test(test_audit_filter_tokens),
            cmocka_unit_test(test_audit_filter_refusals),
            cmocka_unit_test_teardown(test_rolled_back_write_publishes_nothing,
                                      restore_audit_grant),
            cmocka_unit_test(test_housekeeping_deletes_only_stale_sessions),
            cmocka_unit_test(test_events_reach_subscribers),
            cmocka_unit_test(test_relay_publishes_rows_left_behind),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
