/*
 * Tenant isolation in depth.
 *
 * In the database: connected as the service's runtime role (keelson_auth_rt)
 * and acting for tenant A, a SELECT with no WHERE at all returns A's rows
 * only, from every tenant table; acting for no tenant it returns nothing;
 * writing a row of another tenant is refused; the role owns no table and
 * reads neither the outbox nor reset tokens.
 *
 * Through the gateway: every method given an id of another tenant answers
 * not_found (or, for Login, the generic unauthenticated), changes nothing in
 * that tenant and publishes nothing for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

typedef struct tenant_fixture {
        ait_user owner, member;
        char invitation_id[AIT_ID_MAX];
        char api_key_id[AIT_ID_MAX];
        char api_key[AIT_TOKEN_MAX];
} tenant_fixture;

static tenant_fixture g_a, g_b;

/* A tenant with a second member, an open invitation, an API key and audit rows. */
static void make_tenant(const char *prefix, tenant_fixture *t)
{
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        json_t *j;

        ait_signup(prefix, prefix, &t->owner);
        ait_new_member(&t->owner, prefix, "member", &t->member);
        it_unique_email(prefix, email, sizeof(email));
        ait_invite(&t->owner, email, "viewer", token);
        j = ait_ok("ListInvitations", "{}", t->owner.token);
        snprintf(t->invitation_id, sizeof(t->invitation_id), "%s",
                 ait_str(json_array_get(json_object_get(j, "invitations"), 0), "id"));
        json_decref(j);
        ait_create_key(t->owner.token, prefix, "admin", t->api_key, t->api_key_id);
}

static int setup(void **state)
{
        if (ait_setup(state) != 0) {
                return -1;
        }
        make_tenant("it-iso-a", &g_a);
        make_tenant("it-iso-b", &g_b);
        return 0;
}

/* ---- the database, as the runtime role ------------------------------------------- */

static PGconn *as_runtime_role(void)
{
        PGconn *pg = ait_pg();

        PQclear(it_sql(pg, "SET ROLE keelson_auth_rt", 0, NULL));
        return pg;
}

static void act_for(PGconn *pg, const char *tenant_id)
{
        const char *params[1] = {tenant_id};

        PQclear(it_sql(pg, "BEGIN", 0, NULL));
        PQclear(it_sql(pg, "SELECT set_config('keelson.tenant_id', $1, true)", 1, params));
}

/* SELECT * with no WHERE: every row's tenant column must be tenant_id; returns the count. */
static int select_all(PGconn *pg, const char *table, const char *tenant_col, const char *tenant_id)
{
        char sql[256];
        PGresult *res;
        int col, n;

        snprintf(sql, sizeof(sql), "SELECT * FROM auth.%s", table);
        res = it_sql(pg, sql, 0, NULL);
        n = PQntuples(res);
        col = PQfnumber(res, tenant_col);
        assert_true(col >= 0);
        for (int i = 0; i < n; i++) {
                if (strcmp(PQgetvalue(res, i, col), tenant_id) != 0) {
                        fail_msg("auth.%s leaked a row of tenant %s to tenant %s", table,
                                 PQgetvalue(res, i, col), tenant_id);
                }
        }
        PQclear(res);
        return n;
}

static const struct {
        const char *table;
        const char *tenant_col;
        int min_rows; /* what the fixture made in each tenant */
} tenant_tables[] = {
    {"tenants", "id", 1},         {"memberships", "tenant_id", 2},
    {"sessions", "tenant_id", 2}, {"invitations", "tenant_id", 2},
    {"api_keys", "tenant_id", 1}, {"audit_log", "tenant_id", 5},
    {"requests", "tenant_id", 2},
};

#define N_TABLES (sizeof(tenant_tables) / sizeof(tenant_tables[0]))

static void test_select_without_where_sees_one_tenant(void **state)
{
        PGconn *pg = as_runtime_role();
        const tenant_fixture *t[2] = {&g_a, &g_b};

        (void)state;
        for (int k = 0; k < 2; k++) {
                act_for(pg, t[k]->owner.tenant_id);
                for (size_t i = 0; i < N_TABLES; i++) {
                        int n = select_all(pg, tenant_tables[i].table, tenant_tables[i].tenant_col,
                                           t[k]->owner.tenant_id);
                        if (n < tenant_tables[i].min_rows) {
                                fail_msg("auth.%s: %d rows for the tenant, expected %d or more",
                                         tenant_tables[i].table, n, tenant_tables[i].min_rows);
                        }
                }
                PQclear(it_sql(pg, "ROLLBACK", 0, NULL));
        }
        PQfinish(pg);
}

static void test_users_are_visible_to_their_tenants_only(void **state)
{
        PGconn *pg = as_runtime_role();
        PGresult *res;

        (void)state;
        act_for(pg, g_a.owner.tenant_id);
        res = it_sql(pg, "SELECT id FROM auth.users", 0, NULL);
        /* Exactly A's two members: not B's, not anyone else's. */
        assert_int_equal(PQntuples(res), 2);
        for (int i = 0; i < PQntuples(res); i++) {
                const char *id = PQgetvalue(res, i, 0);
                assert_true(strcmp(id, g_a.owner.user_id) == 0 ||
                            strcmp(id, g_a.member.user_id) == 0);
        }
        PQclear(res);
        PQclear(it_sql(pg, "ROLLBACK", 0, NULL));
        PQfinish(pg);
}

static void test_no_tenant_sees_nothing(void **state)
{
        PGconn *pg = as_runtime_role();
        char sql[256];
        PGresult *res;

        (void)state;
        for (size_t i = 0; i < N_TABLES; i++) {
                snprintf(sql, sizeof(sql), "SELECT count(*) FROM auth.%s", tenant_tables[i].table);
                res = it_sql(pg, sql, 0, NULL);
                if (strcmp(PQgetvalue(res, 0, 0), "0") != 0) {
                        fail_msg("auth.%s shows %s rows without a tenant", tenant_tables[i].table,
                                 PQgetvalue(res, 0, 0));
                }
                PQclear(res);
        }
        res = it_sql(pg, "SELECT count(*) FROM auth.users", 0, NULL);
        assert_string_equal(PQgetvalue(res, 0, 0), "0");
        PQclear(res);
        PQfinish(pg);
}

static void expect_sqlstate(PGconn *pg, const char *sql, int n, const char *const *params,
                            const char *sqlstate)
{
        PGresult *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
        const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        if (got == NULL || strcmp(got, sqlstate) != 0) {
                fail_msg("%s: expected SQLSTATE %s, got %s (%s)", sql, sqlstate,
                         got ? got : "success", PQresultErrorMessage(res));
        }
        PQclear(res);
}

static void test_writes_stay_in_the_tenant(void **state)
{
        PGconn *pg = as_runtime_role();
        const char *params[2] = {g_b.owner.tenant_id, g_a.member.user_id};
        PGresult *res;

        (void)state;
        act_for(pg, g_a.owner.tenant_id);
        /* An UPDATE with no WHERE touches A's two memberships, nothing of B's. */
        res = it_sql(pg, "UPDATE auth.memberships SET role = role", 0, NULL);
        assert_string_equal(PQcmdTuples(res), "2");
        PQclear(res);
        /* A row for B, written while acting for A: refused by the policy. */
        expect_sqlstate(pg,
                        "INSERT INTO auth.memberships (tenant_id, user_id, role)"
                        " VALUES ($1::uuid, $2::uuid, 'owner')",
                        2, params, "42501");
        PQclear(it_sql(pg, "ROLLBACK", 0, NULL));

        /* What the role may never read, whatever the tenant. */
        expect_sqlstate(pg, "SELECT * FROM auth.outbox", 0, NULL, "42501");
        expect_sqlstate(pg, "SELECT * FROM auth.outbox_queue", 0, NULL, "42501");
        expect_sqlstate(pg, "SELECT * FROM auth.password_resets", 0, NULL, "42501");
        expect_sqlstate(pg, "DELETE FROM auth.audit_log", 0, NULL, "42501");
        PQfinish(pg);
}

static void test_schema_shape(void **state)
{
        (void)state;
        /* The runtime role owns nothing, so row-level security binds it. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM pg_tables WHERE schemaname = 'auth'"
                                      " AND tableowner = 'keelson_auth_rt'",
                                      0, NULL),
                         0);
        /* Enabled and forced on every table but the outbox, its queue and the migration record. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM pg_class c"
                                      " WHERE c.relnamespace = 'auth'::regnamespace"
                                      " AND c.relkind = 'r' AND c.relname NOT IN"
                                      " ('outbox', 'outbox_queue', 'schema_migrations')"
                                      " AND NOT (c.relrowsecurity AND c.relforcerowsecurity)",
                                      0, NULL),
                         0);
}

/* ---- the API, with another tenant's ids ---------------------------------------- */

/* method with another tenant's id in field: not_found, with the message a made-up id gets. */
static void id_call(const char *method, const char *field, const char *id, const char *token,
                    const char *message)
{
        char body[512];

        AIT_BODY(body, "{s:s}", field, id);
        ait_fails_with(method, body, token, "not_found", message);
}

static void test_foreign_ids_are_not_found(void **state)
{
        const char *bearers[2] = {g_b.owner.token, g_b.api_key};
        char body[512];
        long mark = ait_outbox_mark();

        (void)state;
        for (int i = 0; i < 2; i++) {
                const char *t = bearers[i];

                AIT_BODY(body, "{s:s, s:s}", "userId", g_a.member.user_id, "role", "viewer");
                ait_fails_with("SetRole", body, t, "not_found", "no such member");
                AIT_BODY(body, "{s:s, s:s}", "userId", g_a.owner.user_id, "role", "viewer");
                ait_fails_with("SetRole", body, t, "not_found", "no such member");
                id_call("RemoveMember", "userId", g_a.member.user_id, t, "no such member");
                id_call("RevokeInvitation", "invitationId", g_a.invitation_id, t,
                        "no such invitation");
                id_call("RevokeApiKey", "apiKeyId", g_a.api_key_id, t, "no such API key");
        }
        id_call("SwitchTenant", "tenantId", g_a.owner.tenant_id, g_b.owner.token, "no such tenant");
        /* Login into a tenant the user is no member of: the generic refusal. */
        AIT_BODY(body, "{s:s, s:s, s:s}", "email", g_b.owner.email, "password", AIT_PASSWORD,
                 "tenantId", g_a.owner.tenant_id);
        ait_fails_with("Login", body, NULL, "unauthenticated", "invalid email or password");

        /* Nothing changed in A, nothing was published for A. */
        assert_int_equal(ait_events(mark, "users.admin_summary", g_a.owner.tenant_id), 0);
        assert_int_equal(ait_events(mark, "auth.context_revoked", g_a.owner.tenant_id), 0);
        assert_int_equal(ait_memberships(g_a.owner.tenant_id, g_a.member.user_id, "member"), 1);
        json_decref(ait_ok("WhoAmI", "{}", g_a.member.token));
        json_decref(ait_ok("ListMembers", "{}", g_a.api_key));
}

static void test_lists_show_one_tenant(void **state)
{
        static const char *const lists[] = {"ListMembers", "ListInvitations", "ListApiKeys",
                                            "ListAudit"};
        const char *a_ids[] = {g_a.owner.user_id, g_a.member.user_id,  g_a.invitation_id,
                               g_a.api_key_id,    g_a.owner.tenant_id, g_a.owner.email};
        it_http_response r;

        (void)state;
        for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
                ait_call(lists[i], "{\"includeClosed\":true}", g_b.owner.token, &r);
                if (r.status == 400) {
                        /* includeClosed belongs to ListInvitations only: ask plainly. */
                        it_http_response_free(&r);
                        ait_call(lists[i], "{}", g_b.owner.token, &r);
                }
                assert_int_equal(r.status, 200);
                for (size_t k = 0; k < sizeof(a_ids) / sizeof(a_ids[0]); k++) {
                        if (strstr(r.body, a_ids[k]) != NULL) {
                                fail_msg("%s of tenant B shows %s of tenant A", lists[i], a_ids[k]);
                        }
                }
                it_http_response_free(&r);
        }
}

/* ---- the pools' login roles ---------------------------------------------------- */

/*
 * Every pool of the stack logs in as a role that owns nothing
 * (keelson_<service>_login, deploy/local/stack.sh) and acts as its runtime
 * role; only the relay, which reads every tenant's outbox, logs in as the
 * owner. So no statement of a pool can act as the owner of a table.
 */
static void test_pools_log_in_as_roles_that_own_nothing(void **state)
{
        static const char *const services[][2] = {{"keelson-auth", "keelson_auth_login"},
                                                  {"keelson-ledger", "keelson_ledger_login"},
                                                  {"keelson-summary", "keelson_summary_login"}};
        PGconn *pg = ait_pg();
        PGresult *res;
        (void)state;

        for (size_t i = 0; i < sizeof(services) / sizeof(services[0]); i++) {
                const char *p2[2] = {services[i][0], services[i][1]};
                res = it_sql(pg,
                             "SELECT count(*), count(*) FILTER (WHERE usename <> $2),"
                             " (SELECT count(*) FROM pg_tables WHERE tableowner = $2),"
                             " (SELECT rolsuper OR rolbypassrls OR rolinherit FROM pg_roles"
                             "  WHERE rolname = $2)"
                             " FROM pg_stat_activity WHERE application_name = $1"
                             " AND datname = current_database()",
                             2, p2);
                if (atoi(PQgetvalue(res, 0, 0)) < 1 || strcmp(PQgetvalue(res, 0, 1), "0") != 0 ||
                    strcmp(PQgetvalue(res, 0, 2), "0") != 0 ||
                    strcmp(PQgetvalue(res, 0, 3), "f") != 0) {
                        fail_msg(
                            "%s: %s connections, %s not as %s; it owns %s tables; privileged %s",
                            services[i][0], PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
                            services[i][1], PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3));
                }
                PQclear(res);
        }
        PQfinish(pg);
}

/* A login DSN whose role owns the tables is refused at start, by name. */
static void test_a_privileged_login_is_refused(void **state)
{
        char login[600], line[2048];
        it_service svc;
        bool named = false;
        (void)state;

        snprintf(login, sizeof(login), "KEELSON_AUTH_PG_LOGIN_DSN=%s", ait_stack.service_pg_dsn);
        const char *env[] = {login, "KEELSON_AUTH_OUTBOX_RELAY=false", NULL};
        assert_int_equal(it_service_start(&ait_stack, "keelson-auth", "KEELSON_AUTH", env, &svc),
                         -1);
        FILE *f = fopen(svc.log_path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f) != NULL) {
                named = named || (strstr(line, "could bypass row-level security") != NULL &&
                                  strstr(line, "KEELSON_AUTH_PG_LOGIN_DSN") != NULL);
                assert_null(strstr(line, ait_stack.service_pg_dsn)); /* never the DSN itself */
        }
        fclose(f);
        assert_true(named);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_select_without_where_sees_one_tenant),
            cmocka_unit_test(test_users_are_visible_to_their_tenants_only),
            cmocka_unit_test(test_no_tenant_sees_nothing),
            cmocka_unit_test(test_writes_stay_in_the_tenant),
            cmocka_unit_test(test_schema_shape),
            cmocka_unit_test(test_foreign_ids_are_not_found),
            cmocka_unit_test(test_lists_show_one_tenant),
            cmocka_unit_test(test_pools_log_in_as_roles_that_own_nothing),
            cmocka_unit_test(test_a_privileged_login_is_refused),
        };

        return cmocka_run_group_tests(tests, setup, NULL);
}
