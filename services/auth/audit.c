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

typedef struct list_audit {
        int page_size;
        char cursor[AUTH_CURSOR_MAX];
        PGresult *res; /* owned; the reply points into it */
} list_audit;

static bool cursor_ok(const char *s)
{
        size_t n = strlen(s);

        return n == 0 || (n <= 19 && strspn(s, "0123456789") == n);
}

static int list_audit_tx(auth_tx *tx, void *arg)
{
        list_audit *a = arg;
        char limit[16];
        const char *params[2] = {a->cursor[0] != '\0' ? a->cursor : NULL, limit};
        int rc;

        /* One row more than the page: its presence says there is a next page. */
        snprintf(limit, sizeof(limit), "%d", a->page_size + 1);
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_list, 2, params, &a->res)) !=
            KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

static int reply_audit(ks_call *call, list_audit *a)
{
        Keelson__Auth__V1__ListAuditResponse resp = KEELSON__AUTH__V1__LIST_AUDIT_RESPONSE__INIT;
        int rows = PQntuples(a->res), n = rows > a->page_size ? a->page_size : rows, rc;
        Keelson__Auth__V1__AuditEntry *e = calloc((size_t)n + 1, sizeof(*e));
        Keelson__Auth__V1__AuditEntry **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));

        if (e == NULL || ptrs == NULL) {
                free(e);
                free(ptrs);
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        for (int i = 0; i < n; i++) {
                keelson__auth__v1__audit_entry__init(&e[i]);
                e[i].id = PQgetvalue(a->res, i, 0);
                e[i].occurred_at_unix_ms = auth_int_field(a->res, i, 1);
                e[i].actor_user_id = PQgetvalue(a->res, i, 2);
                e[i].actor_api_key_id = PQgetvalue(a->res, i, 3);
                e[i].action = PQgetvalue(a->res, i, 4);
                e[i].target_type = PQgetvalue(a->res, i, 5);
                e[i].target_id = PQgetvalue(a->res, i, 6);
                e[i].detail_json = PQgetvalue(a->res, i, 7);
                e[i].request_id = PQgetvalue(a->res, i, 8);
                ptrs[i] = &e[i];
        }
        resp.n_entries = (size_t)n;
        resp.entries = ptrs;
        resp.next_page_token = rows > n ? PQgetvalue(a->res, n - 1, 0) : "";
        rc = ks_call_reply(call, &resp.base);
        free(ptrs);
        free(e);
        return rc;
}

int auth_list_audit(ks_call *call)
{
        const Keelson__Auth__V1__ListAuditRequest *req =
            (const Keelson__Auth__V1__ListAuditRequest *)call->in;
        list_audit a;
        int rc;

        memset(&a, 0, sizeof(a));
        if ((a.page_size = auth_page_size(req->page_size, AUTH_PAGE_SIZE_MAX)) < 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "page_size: must not be negative");
        }
        if (req->page_token != NULL && !cursor_ok(req->page_token)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "page_token: not from this list");
        }
        snprintf(a.cursor, sizeof(a.cursor), "%s", req->page_token ? req->page_token : "");
        rc = auth_tenant_tx(call, 0, list_audit_tx, &a);
        if (rc == KS_OK) {
                rc = reply_audit(call, &a);
        }
        PQclear(a.res);
        return rc;
}
