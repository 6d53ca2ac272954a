/*
 * Auth's contract with the admin summary: auth.tenant_summary(tenant)
 * (services/auth/migrations/007_summary_contract.sql, docs/architecture.md).
 *
 * keelson-summary reads no table of auth's: it calls this one function, and
 * auth keeps its columns and meaning whatever its tables become. This test
 * is auth's: a migration that changes a column's name, type or order, a
 * count's meaning, or who may call it, fails here before the summary sees
 * it. Checked against a tenant seeded through the public API (members of
 * every role, one of them locked, open and closed invitations, live and
 * revoked keys), and as the summary's runtime role: it may call the
 * function, only for the tenant its transaction names, and may read none
 * of auth's tables directly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

#define READER   "keelson_summary_rt"
#define CONTRACT "auth.tenant_summary"
#define INT8OID  20

static const char *const columns[] = {
    "active",         "locked", "owners", "admins", "members", "viewers", "pending_invitations",
    "active_api_keys"};
#define N_COLUMNS (sizeof(columns) / sizeof(columns[0]))

static ait_user g_owner, g_other;

/*
 * Tenant A: owner, two admins, one member (locked), one viewer (each of the
 * four invited and accepted); three more invitations, one of them revoked;
 * three keys, one revoked.
 */
static long expected[N_COLUMNS] = {4, 1, 1, 2, 1, 1, 2, 2};

static void revoke_first(const char *list, const char *field, const char *method,
                         const char *id_field)
{
        char body[256];
        json_t *j = ait_ok(list, "{}", g_owner.token);
        json_t *first = json_array_get(json_object_get(j, field), 0);

        AIT_BODY(body, "{s:s}", id_field, ait_str(first, "id"));
        json_decref(ait_ok(method, body, g_owner.token));
        json_decref(j);
}

static int setup(void **state)
{
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX], body[256];
        ait_user admin1, admin2, member, viewer;
        const char *params[1];

        if (ait_setup(state) != 0) {
                return -1;
        }
        ait_signup("it-contract-a", "Contract A", &g_owner);
        ait_signup("it-contract-b", "Contract B", &g_other);
        ait_new_member(&g_owner, "it-contract-adm1", "admin", &admin1);
        ait_new_member(&g_owner, "it-contract-adm2", "admin", &admin2);
        ait_new_member(&g_owner, "it-contract-mem", "member", &member);
        ait_new_member(&g_owner, "it-contract-view", "viewer", &viewer);
        for (int i = 0; i < 3; i++) {
                it_unique_email("it-contract-inv", email, sizeof(email));
                ait_invite(&g_owner, email, "viewer", token);
        }
        revoke_first("ListInvitations", "invitations", "RevokeInvitation", "invitationId");
        for (int i = 0; i < 3; i++) {
                AIT_BODY(body, "{s:s, s:s}", "name", "contract", "role", "viewer");
                json_decref(ait_ok("CreateApiKey", body, g_owner.token));
        }
        revoke_first("ListApiKeys", "apiKeys", "RevokeApiKey", "apiKeyId");
        /* Locked the way auth locks a login after failures. */
        params[0] = member.user_id;
        PGconn *pg = ait_pg();
        PQclear(it_sql(pg,
                       "UPDATE auth.users SET locked_until = now() + interval '1 hour'"
                       " WHERE id = $1::uuid",
                       1, params));
        PQfinish(pg);
        return 0;
}

/* A connection acting as the summary's runtime role, in a transaction for tenant (or none). */
static PGconn *as_reader(const char *tenant)
{
        PGconn *pg = ait_pg();
        const char *params[1] = {tenant};

        PQclear(it_sql(pg, "SET ROLE " READER, 0, NULL));
        PQclear(it_sql(pg, "BEGIN", 0, NULL));
        if (tenant != NULL) {
                PQclear(it_sql(pg, "SELECT set_config('keelson.tenant_id', $1, true)", 1, params));
        }
        return pg;
}

static PGresult *summary_of(PGconn *pg, const char *tenant)
{
        const char *params[1] = {tenant};
        PGresult *res = it_sql(pg, "SELECT * FROM " CONTRACT "($1::uuid)", 1, params);

        assert_int_equal(PQntuples(res), 1);
        return res;
}

static void test_the_columns_are_the_contract(void **state)
{
        PGconn *pg = as_reader(g_owner.tenant_id);
        PGresult *res = summary_of(pg, g_owner.tenant_id);

        (void)state;
        assert_int_equal(PQnfields(res), (int)N_COLUMNS);
        for (size_t i = 0; i < N_COLUMNS; i++) {
                assert_string_equal(PQfname(res, (int)i), columns[i]);
                assert_int_equal(PQftype(res, (int)i), INT8OID);
        }
        PQclear(res);
        PQfinish(pg);
}

static void test_the_counts_of_a_seeded_tenant(void **state)
{
        PGconn *pg = as_reader(g_owner.tenant_id);
        PGresult *res = summary_of(pg, g_owner.tenant_id);

        (void)state;
        for (size_t i = 0; i < N_COLUMNS; i++) {
                long got = strtol(PQgetvalue(res, 0, (int)i), NULL, 10);
                if (got != expected[i]) {
                        fail_msg("%s: %ld, expected %ld", columns[i], got, expected[i]);
                }
        }
        PQclear(res);
        PQfinish(pg);
}

/* Only the tenant the transaction names: another tenant, or none, counts nothing. */
static void test_the_reader_sees_only_the_tenant_it_acts_for(void **state)
{
        const char *cases[][2] = {{g_other.tenant_id, g_owner.tenant_id}, /* acting for B, asks A */
                                  {NULL, g_owner.tenant_id}};             /* acting for none */
        (void)state;

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                PGconn *pg = as_reader(cases[c][0]);
                PGresult *res = summary_of(pg, cases[c][1]);
                for (size_t i = 0; i < N_COLUMNS; i++) {
                        assert_string_equal(PQgetvalue(res, 0, (int)i), "0");
                }
                PQclear(res);
                PQfinish(pg);
        }
        /* And B's own figures are B's: its owner alone. */
        PGconn *pg = as_reader(g_other.tenant_id);
        PGresult *res = summary_of(pg, g_other.tenant_id);
        assert_string_equal(PQgetvalue(res, 0, 0), "1"); /* active */
        assert_string_equal(PQgetvalue(res, 0, 2), "1"); /* owners */
        PQclear(res);
        PQfinish(pg);
}

/* The function is the only door: not one of auth's tables answers the reader. */
static void test_the_reader_reads_no_table_of_auths(void **state)
{
        static const char *const tables[] = {"users",   "memberships", "invitations", "api_keys",
                                             "tenants", "sessions",    "audit_log",   "outbox"};
        (void)state;

        for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
                char sql[128];
                PGconn *pg = as_reader(g_owner.tenant_id);
                snprintf(sql, sizeof(sql), "SELECT count(*) FROM auth.%s", tables[i]);
                PGresult *res = PQexec(pg, sql);
                if (PQresultStatus(res) != PGRES_FATAL_ERROR ||
                    strcmp(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42501") != 0) {
                        fail_msg("%s read auth.%s: %s", READER, tables[i],
                                 PQresultErrorMessage(res));
                }
                PQclear(res);
                PQfinish(pg);
        }
}

/* Who may call it, and how it runs: its owner's rights, a fixed search_path. */
static void test_only_the_reader_may_call_it(void **state)
{
        (void)state;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM pg_proc p"
                                      " JOIN pg_namespace n ON n.oid = p.pronamespace"
                                      " WHERE n.nspname = 'auth' AND p.proname = 'tenant_summary'"
                                      " AND p.prosecdef AND p.provolatile = 's'"
                                      " AND 'search_path=pg_catalog, pg_temp' = ANY(p.proconfig)",
                                      0, NULL),
                         1);
        /* Of these, the reader alone. */
        assert_int_equal(ait_sql_long("SELECT count(*) FROM (VALUES ('" READER "'),"
                                      " ('keelson_auth_rt'), ('public')) r(n)"
                                      " WHERE has_function_privilege(n, '" CONTRACT "(uuid)',"
                                      "                              'EXECUTE')",
                                      0, NULL),
                         1);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM (VALUES ('" READER "')) r(n)"
                                      " WHERE has_function_privilege(n, '" CONTRACT "(uuid)',"
                                      "                              'EXECUTE')",
                                      0, NULL),
                         1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_the_columns_are_the_contract),
            cmocka_unit_test(test_the_counts_of_a_seeded_tenant),
            cmocka_unit_test(test_the_reader_sees_only_the_tenant_it_acts_for),
            cmocka_unit_test(test_the_reader_reads_no_table_of_auths),
            cmocka_unit_test(test_only_the_reader_may_call_it),
        };
        return cmocka_run_group_tests_name("auth_summary_contract", tests, setup, NULL);
}
