/*
 * ks_perms: roles and the permission table, which role may do what, in one
 * place for every service.
 *
 * Roles are ranked owner > admin > member > viewer. auth hands roles out and
 * reads a caller's role again inside its transactions; every other service
 * takes the role from the caller context and checks the permission its
 * method's row names (methods.def) against this table: billing.read and
 * billing.manage for the billing service, webhooks.read and webhooks.manage
 * for the webhook service. docs/api.md lists the table.
 *
 * Pure: no I/O, no allocation (tests/unit/test_perms.c).
 */
#ifndef KS_PERMS_H
#define KS_PERMS_H

#include <stddef.h>

typedef enum ks_perm {
        KS_PERM_ORG_READ = 1u << 0,
        KS_PERM_ORG_MANAGE = 1u << 1,
        KS_PERM_MEMBERS_READ = 1u << 2,
        KS_PERM_MEMBERS_INVITE = 1u << 3,
        KS_PERM_MEMBERS_REMOVE = 1u << 4,
        KS_PERM_MEMBERS_SET_ROLE = 1u << 5,
        KS_PERM_BILLING_READ = 1u << 6,
        KS_PERM_BILLING_MANAGE = 1u << 7,
        KS_PERM_AUDIT_READ = 1u << 8,
        KS_PERM_API_KEYS_MANAGE = 1u << 9,
        KS_PERM_WEBHOOKS_READ = 1u << 10,
        KS_PERM_WEBHOOKS_MANAGE = 1u << 11,
} ks_perm;

#define KS_PERM_COUNT 12

#define KS_ROLES_N 4

/* The i-th role, highest rank first: "owner", "admin", "member", "viewer"; NULL past them. */
const char *ks_role_name(int i);
/* owner 4 > admin 3 > member 2 > viewer 1; 0 for anything else. */
int ks_role_rank(const char *role);
/* The permissions of a role (0 for an unknown role). */
unsigned ks_role_perms(const char *role);
/*
 * Whether role holds perm (0: no permission needed): KS_OK, or
 * KS_PERMISSION_DENIED with "your role (<role>) lacks <perm>" in msg.
 */
int ks_role_admits(const char *role, unsigned perm, char *msg, size_t msg_len);
/* "members.invite" for KS_PERM_MEMBERS_INVITE; "" for a value that is not one permission. */
const char *ks_perm_name(unsigned perm);
/* The names of a role's permissions, in table order; returns how many. */
size_t ks_role_perm_names(const char *role, const char *out[KS_PERM_COUNT]);

#endif
