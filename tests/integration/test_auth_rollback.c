/*
 * Writes that fail inside their transaction leave nothing: no row of the
 * write, no mail, no audit row, no outbox row of any topic, no remembered
 * request id. Through the gateway:
 *
 *   - an Invite batch with one address that is already a member, refused
 *     inside the transaction after its request id was recorded;
 *   - an Invite batch that fails at its very last statement (the
 *     users.admin_summary outbox row), after every invitation, mail and
 *     audit row of the batch was written;
 *   - a SignUp that fails at its last statement likewise (after the user,
 *     the tenant, the membership and the audit row);
 *   - a SignUp with a taken email: refused by its first insert (ON CONFLICT
 *     DO NOTHING finds the address), before anything is written.
 *
 * The faults come from a trigger on auth.outbox that this test installs as
 * the superuser and drops in its teardown: it raises for the
 * users.admin_summary row of one tenant, or of a tenant with one name, so
 * nothing else in the stack can meet it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

#define FAULT_FN      "public.it_rollback_fault"
#define FAULT_TRIGGER "it_rollback_fault"

static void drop_fault(void)
{
        PGconn *pg = ait_pg();

        PQclear(it_sql(pg, "DROP TRIGGER IF EXISTS " FAULT_TRIGGER " ON auth.outbox", 0, NULL));
        PQclear(it_sql(pg, "DROP FUNCTION IF EXISTS " FAULT_FN "()", 0, NULL));
        PQfinish(pg);
}

static int teardown(void **state)
{
        (void)state;
        drop_fault();
        return 0;
}

/*
 * From now on, the users.admin_summary outbox row of tenant_id (or of any
 * tenant named tenant_name) fails its insert, and with it the transaction.
 * SECURITY DEFINER: it reads the tenant's name whatever role inserts.
 */
static void install_fault(const char *tenant_id, const char *tenant_name)
{
        char sql[2048];
        PGconn *pg = ait_pg();
        char *id = PQescapeLiteral(pg, tenant_id, strlen(tenant_id));
        char *name = PQescapeLiteral(pg, tenant_name, strlen(tenant_name));

        assert_non_null(id);
        assert_non_null(name);
        snprintf(sql, sizeof(sql),
                 "CREATE FUNCTION " FAULT_FN "() RETURNS trigger LANGUAGE plpgsql"
                 " SECURITY DEFINER SET search_path = pg_catalog AS $$ BEGIN"
                 " IF NEW.topic = 'users.admin_summary' AND (NEW.tenant_id::text = %s"
                 " OR EXISTS (SELECT 1 FROM auth.tenants t WHERE t.id = NEW.tenant_id"
                 " AND t.name = %s)) THEN RAISE EXCEPTION 'injected fault'; END IF;"
                 " RETURN NEW; END $$",
                 id, name);
        PQfreemem(id);
        PQfreemem(name);
        PQclear(it_sql(pg, sql, 0, NULL));
        PQclear(it_sql(pg,
                       "CREATE TRIGGER " FAULT_TRIGGER " BEFORE INSERT ON auth.outbox"
                       " FOR EACH ROW EXECUTE FUNCTION " FAULT_FN "()",
                       0, NULL));
        PQfinish(pg);
}

/* Nothing after the marks: no outbox row of any topic, no audit row of any tenant. */
static void assert_nothing_after(long outbox_mark, long audit)
{
        assert_int_equal(ait_outbox_mark(), outbox_mark);
        assert_int_equal(ait_audit_mark(), audit);
}

static long invitations_of(const char *tenant_id, const char *email)
{
        const char *params[2] = {tenant_id, email};

        return ait_sql_long("SELECT count(*) FROM auth.invitations WHERE tenant_id = $1::uuid"
                            " AND email = $2",
                            2, params);
}

/* ---- Invite ------------------------------------------------------------------- */

static void test_invite_with_a_member_leaves_nothing(void **state)
{
        char f1[AIT_EMAIL_MAX], f2[AIT_EMAIL_MAX], body[1024], rid[AIT_ID_MAX + 16];
        const char *params[2];
        it_http_response r;
        ait_user owner, member;
        long mark, audit;

        (void)state;
        ait_tenant_of_two("it-rb-member-o", "Rollback Member", "member", &owner, &member);
        it_unique_email("it-rb-member-x", f1, sizeof(f1));
        it_unique_email("it-rb-member-y", f2, sizeof(f2));
        snprintf(rid, sizeof(rid), "it-rollback-%s", owner.tenant_id);
        mark = ait_outbox_mark();
        audit = ait_audit_mark();
        AIT_BODY(body, "{s:[s,s,s], s:s}", "emails", f1, member.email, f2, "role", "viewer");
        ait_call_rid("Invite", body, owner.token, rid, &r);
        assert_int_equal(r.status, 409);
        it_http_response_free(&r);

        assert_int_equal(invitations_of(owner.tenant_id, f1), 0);
        assert_int_equal(invitations_of(owner.tenant_id, f2), 0);
        assert_nothing_after(mark, audit);
        /* The request id recorded in the transaction went with it. */
        params[0] = owner.tenant_id;
        params[1] = rid;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.requests WHERE tenant_id ="
                                      " $1::uuid AND request_id = $2",
                                      2, params),
                         0);
        /* So the same id may carry another request: it is a first, not a repeat. */
        AIT_BODY(body, "{s:[s,s], s:s}", "emails", f1, f2, "role", "viewer");
        ait_call_rid("Invite", body, owner.token, rid, &r);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        assert_int_equal(invitations_of(owner.tenant_id, f1), 1);
        assert_int_equal(ait_events(mark, "auth.email", NULL), 2);
        ait_assert_one_summary(mark, owner.tenant_id, "Invite");
}

static void test_invite_failing_at_its_end_leaves_nothing(void **state)
{
        char e[3][AIT_EMAIL_MAX], body[1024];
        ait_user owner;
        long mark, audit;

        (void)state;
        ait_signup("it-rb-end-o", "Rollback End", &owner);
        for (int i = 0; i < 3; i++) {
                it_unique_email("it-rb-end-x", e[i], sizeof(e[i]));
        }
        install_fault(owner.tenant_id, "(no tenant has this name)");
        mark = ait_outbox_mark();
        audit = ait_audit_mark();
        AIT_BODY(body, "{s:[s,s,s], s:s}", "emails", e[0], e[1], e[2], "role", "member");
        /* Every invitation, mail and audit row was written before the failing statement. */
        ait_fails_with("Invite", body, owner.token, "internal", "internal error");
        drop_fault();

        for (int i = 0; i < 3; i++) {
                assert_int_equal(invitations_of(owner.tenant_id, e[i]), 0);
        }
        assert_nothing_after(mark, audit);
        /* The same call, once the database is well, goes through: all of it, once. */
        json_decref(ait_ok("Invite", body, owner.token));
        for (int i = 0; i < 3; i++) {
                assert_int_equal(invitations_of(owner.tenant_id, e[i]), 1);
        }
        assert_int_equal(ait_events(mark, "auth.email", NULL), 3);
        ait_assert_one_summary(mark, owner.tenant_id, "Invite");
}

/* ---- SignUp ---------------------------------------------------------------------- */

static void signup_call(const char *email, const char *tenant_name, it_http_response *out)
{
        char body[1024];

        AIT_BODY(body, "{s:s, s:s, s:s}", "email", email, "password", AIT_PASSWORD, "tenantName",
                 tenant_name);
        ait_call("SignUp", body, NULL, out);
}

static long tenants_named(const char *name)
{
        return ait_sql_long("SELECT count(*) FROM auth.tenants WHERE name = $1", 1,
                            (const char *const[]){name});
}

static long users_with(const char *email)
{
        return ait_sql_long("SELECT count(*) FROM auth.users WHERE email = $1", 1,
                            (const char *const[]){email});
}

static void test_signup_failing_at_its_end_leaves_nothing(void **state)
{
        char email[AIT_EMAIL_MAX], name[AIT_EMAIL_MAX + 16];
        it_http_response r;
        long mark, audit;

        (void)state;
        it_unique_email("it-rb-signup", email, sizeof(email));
        snprintf(name, sizeof(name), "doomed %s", email);
        install_fault("00000000-0000-0000-0000-000000000000", name);
        mark = ait_outbox_mark();
        audit = ait_audit_mark();
        signup_call(email, name, &r);
        assert_int_equal(r.status, 500);
        it_http_response_free(&r);
        drop_fault();

        /* The user, the tenant, the membership (no tenant, none) and the audit row: gone. */
        assert_int_equal(users_with(email), 0);
        assert_int_equal(tenants_named(name), 0);
        assert_nothing_after(mark, audit);
        /* The address was not left taken. */
        signup_call(email, name, &r);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        assert_int_equal(users_with(email), 1);
        assert_int_equal(tenants_named(name), 1);
}

static void test_signup_with_a_taken_email_writes_nothing(void **state)
{
        char name[AIT_EMAIL_MAX + 16];
        it_http_response r;
        ait_user u;
        long mark, audit;

        (void)state;
        ait_signup("it-rb-taken", "Taken First", &u);
        snprintf(name, sizeof(name), "second of %s", u.email);
        mark = ait_outbox_mark();
        audit = ait_audit_mark();
        signup_call(u.email, name, &r);
        assert_int_equal(r.status, 409);
        it_http_response_free(&r);
        assert_int_equal(tenants_named(name), 0);
        assert_int_equal(users_with(u.email), 1);
        assert_nothing_after(mark, audit);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_invite_with_a_member_leaves_nothing),
            cmocka_unit_test_teardown(test_invite_failing_at_its_end_leaves_nothing, teardown),
            cmocka_unit_test_teardown(test_signup_failing_at_its_end_leaves_nothing, teardown),
            cmocka_unit_test(test_signup_with_a_taken_email_writes_nothing),
        };

        return cmocka_run_group_tests(tests, ait_setup, teardown);
}
