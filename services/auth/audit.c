/*
 * The audit log: one row per admin write, in the write's own transaction
 * (no row for a write that rolled back), readable per tenant with ListAudit,
 * newest first. The runtime role may only INSERT and SELECT it: rows are
 * never changed or deleted by the service. detail carries names, emails and
 * roles, never a token, key or password.
 */
#include "auth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

static const char sql_insert[] =
    "INSERT INTO auth.audit_log (tenant_id, actor_user_id, actor_api_key_id, action,"
    " target_type, target_id, detail, request_id)"
    " VALUES (auth.ctx_tenant(), NULLIF($1, '')::uuid, NULLIF($2, '')::uuid, $3, $4, $5,"
    " $6::jsonb, $7)";

/* Keyset paging on the identity column: newest first, stable under inserts. */
static const char sql_list[] =
    "SELECT id, floor(extract(epoch FROM occurred_at) * 1000)::int8,"
    " coalesce(actor_user_id::text, ''), coalesce(actor_api_key_id::text, ''), action,"
    " target_type, target_id, detail::text, request_id"
    " FROM auth.audit_log WHERE ($1::int8 IS NULL OR id < $1::int8)"
    " ORDER BY id DESC LIMIT $2::int";

int auth_audit(PGconn *conn, const char *request_id, const auth_actor *actor, const char *action,
               const char *target_type, const char *target_id, json_t *detail)
{
        const char *params[7];
        char rid[AUTH_REQUEST_ID_MAX + 1];
        char *detail_text;
        int rc;

        if (detail == NULL) {
                detail = json_object();
        }
        detail_text = detail != NULL ? json_dumps(detail, JSON_COMPACT) : NULL;
        json_decref(detail);
        if (detail_text == NULL) {
                return KS_INTERNAL;
        }
        snprintf(rid, sizeof(rid), "%s", request_id);
        params[0] = actor->user_id;
        params[1] = actor->api_key_id;
        params[2] = action;
        params[3] = target_type;
        params[4] = target_id;
        params[5] = detail_text;
        params[6] = rid;
        rc = ks_pg_exec(conn, request_id, sql_insert, 7, params, NULL);
        free(detail_text);
        return rc;
}

static void entry_item(void *item, const PGresult *res, int row)
{
        Keelson__Auth__V1__AuditEntry *e = item;

        keelson__auth__v1__audit_entry__init(e);
        e->id = PQgetvalue(res, row, 0);
        e->occurred_at_unix_ms = auth_int_field(res, row, 1);
        e->actor_user_id = PQgetvalue(res, row, 2);
        e->actor_api_key_id = PQgetvalue(res, row, 3);
        e->action = PQgetvalue(res, row, 4);
        e->target_type = PQgetvalue(res, row, 5);
        e->target_id = PQgetvalue(res, row, 6);
        e->detail_json = PQgetvalue(res, row, 7);
        e->request_id = PQgetvalue(res, row, 8);
}

/* Newest first; the sort key is the row's id. */
static const ks_list_method list_audit = {
    .page = AUTH_LIST_PAGE("ListAudit", Keelson__Auth__V1__AuditEntry, entry_item,
                           {KS_LIST_KEY_INT64, 0}),
    .sql = sql_list,
    .items_field = "entries",
};

int auth_list_audit(ks_call *call)
{
        const Keelson__Auth__V1__ListAuditRequest *req =
            (const Keelson__Auth__V1__ListAuditRequest *)call->in;

        return auth_list_reply(call, &list_audit, req->page_size, req->page_token, NULL, 0);
}
