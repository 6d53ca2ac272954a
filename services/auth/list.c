/*
 * The list methods (ListMembers, ListInvitations, ListApiKeys, ListAudit)
 * run on core's frame (ks_list_reply: page, token, reply); what is auth's
 * is the read their page query runs in: the caller's tenant, role and the
 * method's permission, the page with them in one round trip
 * (auth_tenant_read).
 *
 * A token is bound to its list and to the tenant it was issued in: a token
 * of another list, or of the same list in another tenant, is refused
 * ("page_token: not from this list") rather than read as a position there.
 * ListAudit's tokens are bound to its filters too (auth_list_reply_bound):
 * one issued under other filters is refused the same way.
 */
#include "auth.h"

/* The one call of the tenant frame for every list method: the page is one read. */
static int list_in_tenant(ks_call *call, const ks_pg_stmt *query, void *run_arg)
{
        (void)run_arg;
        return auth_tenant_read(call, query, 1);
}

static const ks_list_runner in_tenant = {
    .run = list_in_tenant,
    .run_arg = NULL,
    .internal_msg = AUTH_INTERNAL_MSG,
};

int auth_list_reply(ks_call *call, const ks_list_method *m, int32_t page_size,
                    const char *page_token, const char *const *filters, int n_filters)
{
        return ks_list_reply(call, m, page_size, page_token, filters, n_filters, &in_tenant);
}

int auth_list_reply_bound(ks_call *call, const ks_list_method *m, int32_t page_size,
                          const char *page_token, const char *const *filters, int n_filters,
                          const char *binding)
{
        return ks_list_reply_bound(call, m, page_size, page_token, filters, n_filters, binding,
                                   &in_tenant);
}
