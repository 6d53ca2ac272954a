/*
 * The list methods (ListMembers, ListInvitations, ListApiKeys, ListAudit)
 * run on core's frame (ks_list_reply: page, token, reply); what is auth's
 * is the transaction their page query runs in: the caller's tenant
 * transaction (auth_tenant_tx: caller, role, the method's permission).
 *
 * A token is bound to its list and to the tenant it was issued in: a token
 * of another list, or of the same list in another tenant, is refused
 * ("page_token: not from this list") rather than read as a position there.
 * ListAudit's tokens are bound to its filters too (auth_list_reply_bound):
 * one issued under other filters is refused the same way.
 */
#include "auth.h"

typedef struct list_tx_arg {
        ks_list_query_fn query;
        void *query_arg;
} list_tx_arg;

static int list_tx(auth_tx *tx, void *arg)
{
        list_tx_arg *a = arg;
        int rc;

        if ((rc = a->query(tx->conn, a->query_arg)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

/* The one call of the tenant frame for every list method. */
static int list_in_tenant(ks_call *call, ks_list_query_fn query, void *query_arg, void *run_arg)
{
        list_tx_arg a = {.query = query, .query_arg = query_arg};

        (void)run_arg;
        return auth_tenant_tx(call, 0, list_tx, &a);
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
