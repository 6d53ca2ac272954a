/*
 * The frame of the list methods (ListMembers, ListInvitations, ListApiKeys,
 * ListAudit): the page and its token (ks_list), the page query in the
 * caller's tenant transaction, and the reply. What stays with each method
 * is its spec, its SQL, its filters and how a row becomes its reply item.
 *
 * A token is bound to its list and to the tenant it was issued in: a token
 * of another list, or of the same list in another tenant, is refused
 * ("page_token: not from this list") rather than read as a position there.
 */
#include "auth.h"

#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"

typedef struct list_query {
        const auth_list_method *m;
        const char *params[KS_LIST_KEYS_MAX + 1 + AUTH_LIST_FILTERS_MAX];
        int n_params;
        PGresult *res;
} list_query;

static int list_tx(auth_tx *tx, void *arg)
{
        list_query *q = arg;
        int rc;

        PQclear(q->res);
        q->res = NULL;
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, q->m->sql, q->n_params, q->params,
                             &q->res)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

/* The page's items and next_page_token, or a code the call carries (page then cleared). */
static int list_page(ks_call *call, const auth_list_method *m, int32_t page_size,
                     const char *page_token, const char *const *filters, int n_filters,
                     ks_list_page *page)
{
        const char *scope = call->caller->tenant_id != NULL ? call->caller->tenant_id : "";
        list_query q = {.m = m, .res = NULL};
        const char *err = NULL;
        int rc;

        memset(page, 0, sizeof(*page));
        if (n_filters < 0 || n_filters > AUTH_LIST_FILTERS_MAX) {
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        if ((rc = ks_list_page_begin(page, &m->page, page_size, page_token, scope, &err)) !=
            KS_OK) {
                ks_list_page_clear(page);
                return ks_call_fail(call, rc, "%s", rc == KS_INTERNAL ? AUTH_INTERNAL_MSG : err);
        }
        memcpy(q.params, page->params, (size_t)page->n_params * sizeof(q.params[0]));
        for (int i = 0; i < n_filters; i++) {
                q.params[page->n_params + i] = filters[i];
        }
        q.n_params = page->n_params + n_filters;
        /* The one call of the tenant frame for every list method. */
        if ((rc = auth_tenant_tx(call, 0, list_tx, &q)) != KS_OK) {
                PQclear(q.res);
                ks_list_page_clear(page);
                return rc;
        }
        if ((rc = ks_list_page_finish(page, q.res)) != KS_OK) {
                ks_list_page_clear(page);
                if (rc == KS_RESOURCE_EXHAUSTED) {
                        return ks_call_oom(call);
                }
                ks_log_error(call->request_id, "list page: a sort key column holds no key", "{s:s}",
                             "list", m->page.name);
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        return KS_OK;
}

/*
 * The reply of the call's method with the page in it: every list reply has
 * the repeated message field m->items_field and the string next_page_token,
 * set here through the reply's descriptor.
 */
static int reply_page(ks_call *call, const auth_list_method *m, const ks_list_page *page)
{
        const ProtobufCMessageDescriptor *d = call->method->output;
        const ProtobufCFieldDescriptor *items =
            protobuf_c_message_descriptor_get_field_by_name(d, m->items_field);
        const ProtobufCFieldDescriptor *token =
            protobuf_c_message_descriptor_get_field_by_name(d, "next_page_token");
        char *resp;
        int rc;

        KS_ASSERT(items != NULL && items->label == PROTOBUF_C_LABEL_REPEATED &&
                  items->type == PROTOBUF_C_TYPE_MESSAGE);
        KS_ASSERT(token != NULL && token->type == PROTOBUF_C_TYPE_STRING);
        if ((resp = malloc(d->sizeof_message)) == NULL) {
                return ks_call_oom(call);
        }
        protobuf_c_message_init(d, resp);
        *(size_t *)(resp + items->quantifier_offset) = page->n_items;
        *(void ***)(resp + items->offset) = page->items;
        *(const char **)(resp + token->offset) = page->next_page_token;
        rc = ks_call_reply(call, (const ProtobufCMessage *)resp);
        free(resp);
        return rc;
}

int auth_list_reply(ks_call *call, const auth_list_method *m, int32_t page_size,
                    const char *page_token, const char *const *filters, int n_filters)
{
        ks_list_page p;
        int rc;

        if ((rc = list_page(call, m, page_size, page_token, filters, n_filters, &p)) != KS_OK) {
                return rc;
        }
        rc = reply_page(call, m, &p);
        ks_list_page_clear(&p);
        return rc;
}
