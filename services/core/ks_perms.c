/*
 * Roles and the permission table: which role may do what, in one place.
 *
 * Roles are ranked owner > admin > member > viewer. The rank also bounds
 * what a caller may hand out or touch: nobody grants a role above their own
 * (an invitation, an API key, a role change), and nobody changes or removes
 * a member ranked above themselves (rules applied by auth's members.c and
 * api_keys.c). Other services read the role from the caller context and use
 * the same table (docs/api.md), e.g. billing.read / billing.manage.
 *
 * Pure: no I/O, no allocation, unit-tested in tests/unit/test_perms.c.
 */
#include "ks_perms.h"

#include <stdio.h>

#include "ks_code.h"

#include <string.h>

#define P_VIEWER (KS_PERM_ORG_READ | KS_PERM_MEMBERS_READ)
#define P_MEMBER (P_VIEWER)
#define P_ADMIN                                                                                    \
        (P_MEMBER | KS_PERM_MEMBERS_INVITE | KS_PERM_MEMBERS_REMOVE | KS_PERM_MEMBERS_SET_ROLE |   \
         KS_PERM_BILLING_READ | KS_PERM_AUDIT_READ | KS_PERM_API_KEYS_MANAGE |                     \
         KS_PERM_WEBHOOKS_READ | KS_PERM_WEBHOOKS_MANAGE)
#define P_OWNER (P_ADMIN | KS_PERM_ORG_MANAGE | KS_PERM_BILLING_MANAGE)

static const struct {
        const char *name;
        int rank;
        unsigned perms;
} roles[] = {
    {"owner", 4, P_OWNER},
    {"admin", 3, P_ADMIN},
    {"member", 2, P_MEMBER},
    {"viewer", 1, P_VIEWER},
};
_Static_assert(sizeof(roles) / sizeof(roles[0]) == KS_ROLES_N, "KS_ROLES_N");

/* In bit order: perm_names[i] names 1u << i. */
static const char *const perm_names[KS_PERM_COUNT] = {
    "org.read",       "org.manage",       "members.read",  "members.invite",
    "members.remove", "members.set_role", "billing.read",  "billing.manage",
    "audit.read",     "api_keys.manage",  "webhooks.read", "webhooks.manage",
};

const char *ks_role_name(int i)
{
        return i >= 0 && i < KS_ROLES_N ? roles[i].name : NULL;
}

static int role_index(const char *role)
{
        if (role == NULL) {
                return -1;
        }
        for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
                if (strcmp(roles[i].name, role) == 0) {
                        return (int)i;
                }
        }
        return -1;
}

int ks_role_rank(const char *role)
{
        int i = role_index(role);

        return i < 0 ? 0 : roles[i].rank;
}

unsigned ks_role_perms(const char *role)
{
        int i = role_index(role);

        return i < 0 ? 0u : roles[i].perms;
}

const char *ks_perm_name(unsigned perm)
{
        for (unsigned i = 0; i < KS_PERM_COUNT; i++) {
                if (perm == 1u << i) {
                        return perm_names[i];
                }
        }
        return "";
}

size_t ks_role_perm_names(const char *role, const char *out[KS_PERM_COUNT])
{
        unsigned perms = ks_role_perms(role);
        size_t n = 0;

        for (unsigned i = 0; i < KS_PERM_COUNT; i++) {
                if ((perms & (1u << i)) != 0) {
                        out[n++] = perm_names[i];
                }
        }
        return n;
}

int ks_role_admits(const char *role, unsigned perm, char *msg, size_t msg_len)
{
        if (perm == 0 || (ks_role_perms(role) & perm) == perm) {
                return KS_OK;
        }
        snprintf(msg, msg_len, "your role (%s) lacks %s", role != NULL ? role : "",
                 ks_perm_name(perm));
        return KS_PERMISSION_DENIED;
}
