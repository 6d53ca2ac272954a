/*
 * Unit tests of the role and permission table every service uses
 * (services/core/ks_perms.c): ranks, what each role may do, the names
 * auth's WhoAmI lists. (Page sizes and page tokens: tests/unit/test_list.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ks_perms.h"

static void test_ranks(void **state)
{
        (void)state;
        assert_true(ks_role_rank("owner") > ks_role_rank("admin"));
        assert_true(ks_role_rank("admin") > ks_role_rank("member"));
        assert_true(ks_role_rank("member") > ks_role_rank("viewer"));
        assert_true(ks_role_rank("viewer") > 0);
        assert_int_equal(ks_role_rank("Owner"), 0);
        assert_int_equal(ks_role_rank(""), 0);
        assert_int_equal(ks_role_rank(NULL), 0);
}

static void test_every_role_reads_the_org_and_members(void **state)
{
        static const char *const all[] = {"owner", "admin", "member", "viewer"};

        (void)state;
        for (size_t i = 0; i < 4; i++) {
                unsigned p = ks_role_perms(all[i]);
                assert_true((p & KS_PERM_ORG_READ) != 0);
                assert_true((p & KS_PERM_MEMBERS_READ) != 0);
        }
        assert_int_equal(ks_role_perms("emperor"), 0);
}

static void test_admin_writes_are_admin_and_owner_only(void **state)
{
        static const unsigned admin_perms[] = {
            KS_PERM_MEMBERS_INVITE, KS_PERM_MEMBERS_REMOVE,  KS_PERM_MEMBERS_SET_ROLE,
            KS_PERM_AUDIT_READ,     KS_PERM_API_KEYS_MANAGE, KS_PERM_BILLING_READ,
            KS_PERM_WEBHOOKS_READ,  KS_PERM_WEBHOOKS_MANAGE,
        };

        (void)state;
        for (size_t i = 0; i < sizeof(admin_perms) / sizeof(admin_perms[0]); i++) {
                assert_true((ks_role_perms("owner") & admin_perms[i]) != 0);
                assert_true((ks_role_perms("admin") & admin_perms[i]) != 0);
                assert_int_equal(ks_role_perms("member") & admin_perms[i], 0);
                assert_int_equal(ks_role_perms("viewer") & admin_perms[i], 0);
        }
        /* The organisation and its money: owners only. */
        assert_true((ks_role_perms("owner") & KS_PERM_ORG_MANAGE) != 0);
        assert_true((ks_role_perms("owner") & KS_PERM_BILLING_MANAGE) != 0);
        assert_int_equal(ks_role_perms("admin") & KS_PERM_ORG_MANAGE, 0);
        assert_int_equal(ks_role_perms("admin") & KS_PERM_BILLING_MANAGE, 0);
}

static void test_higher_roles_hold_every_lower_permission(void **state)
{
        static const char *const order[] = {"viewer", "member", "admin", "owner"};

        (void)state;
        for (size_t i = 1; i < 4; i++) {
                unsigned lower = ks_role_perms(order[i - 1]);
                assert_int_equal(ks_role_perms(order[i]) & lower, lower);
        }
}

static void test_names(void **state)
{
        const char *names[KS_PERM_COUNT];

        (void)state;
        assert_string_equal(ks_perm_name(KS_PERM_MEMBERS_INVITE), "members.invite");
        assert_string_equal(ks_perm_name(KS_PERM_API_KEYS_MANAGE), "api_keys.manage");
        assert_string_equal(ks_perm_name(KS_PERM_WEBHOOKS_MANAGE), "webhooks.manage");
        assert_string_equal(ks_perm_name(KS_PERM_ORG_READ | KS_PERM_ORG_MANAGE), "");
        assert_string_equal(ks_perm_name(0), "");
        assert_int_equal(ks_role_perm_names("owner", names), KS_PERM_COUNT);
        assert_int_equal(ks_role_perm_names("viewer", names), 2);
        assert_string_equal(names[0], "org.read");
        assert_string_equal(names[1], "members.read");
        assert_int_equal(ks_role_perm_names("nobody", names), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_ranks),
            cmocka_unit_test(test_every_role_reads_the_org_and_members),
            cmocka_unit_test(test_admin_writes_are_admin_and_owner_only),
            cmocka_unit_test(test_higher_roles_hold_every_lower_permission),
            cmocka_unit_test(test_names),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
