/*
 * The audit log: one row per admin write, in the write's own transaction
 * (no row for a write that rolled back), readable per tenant with ListAudit,
 * newest first. The runtime role may only INSERT and SELECT it: rows are
 * never changed or deleted by the service. detail carries names, emails and
 * roles, never a token, key or password.
 */
#include "auth.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"

static const char sql_insert[] =
    "INSERT INTO auth.audit_log (tenant_id, actor_user_id, actor_api_key_id, action,"
    " target_type, target_id, detail, request_id)"
    " VALUES (auth.ctx_tenant(), NULLIF($1, '')::uuid, NULLIF($2, '')::uuid, $3, $4, $5,"
    " $6::jsonb, $7)";

/*
 * Every action auth writes: auth_audit refuses (asserts) any other, and
 * ListAudit's action filter takes one of these only, so that a misspelt
 * filter is an error rather than an empty log.
 */
static const char *const audit_actions[] = {
    "tenant.created",  "invitation.created", "invitation.accepted", "invitation.revoked",
    "member.role_set", "member.removed",     "api_key.created",     "api_key.revoked",
};
#define AUDIT_ACTIONS_N (sizeof(audit_actions) / sizeof(audit_actions[0]))

static bool action_known(const char *action)
{
        for (size_t i = 0; i < AUDIT_ACTIONS_N; i++) {
                if (strcmp(action, audit_actions[i]) == 0) {
                        return true;
                }
        }
        return false;
}

int auth_audit(PGconn *conn, const char *request_id, const auth_actor *actor, const char *action,
               const char *target_type, const char *target_id, json_t *detail)
{
        const char *params[7];
        char rid[AUTH_REQUEST_ID_MAX + 1];
        char *detail_text;
        int rc;

        KS_ASSERT(action_known(action));
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

/* ---- ListAudit ---------------------------------------------------------- */

/*
 * Newest first: by occurred_at, then id (keyset paging, stable under
 * inserts). The sort key is occurred_at in microseconds (the last result
 * column) and the id. $1, $2 the cursor (NULL on the first page), $3 the
 * limit, then the filters. The time window is always a range, open ends
 * given as 0 and AUDIT_MS_MAX + 1.
 *
 * Plans are generic (ks_pg.c): one statement per filter that leads, on an
 * index that ends in (occurred_at, id), so that the window and the cursor
 * bound one range of it, read in order, and the scan stops at the page's
 * end whatever the values. The action leads (audit_log_action_at_idx), then
 * the actor (audit_log_actor_at_idx), else the tenant's whole log
 * (audit_log_tenant_at_idx). The window's end and the cursor are one row
 * comparison, the lower of the two (no cursor: the window's end, before
 * any id), as btree starts a backward scan at one bound only. The actor
 * beside an action is a plain filter, written "($n = '' OR ...)" so that no
 * plan takes the other index.
 */
#define AUDIT_SELECT                                                                               \
        "SELECT id, floor(extract(epoch FROM occurred_at) * 1000)::int8,"                          \
        " coalesce(actor_user_id::text, ''), coalesce(actor_api_key_id::text, ''), action,"        \
        " target_type, target_id, detail::text, request_id,"                                       \
        " (extract(epoch FROM occurred_at) * 1000000)::int8"                                       \
        " FROM auth.audit_log WHERE tenant_id = auth.ctx_tenant()"
/* Parameter n, unix milliseconds (or microseconds), as a timestamptz. */
#define AUDIT_AT(n, unit) "(timestamptz 'epoch' + $" n "::int8 * interval '1 " unit "')"
#define AUDIT_CURSOR      AUDIT_AT("1", "microsecond")
/* since <= occurred_at, and (occurred_at, id) before the lower of until and the cursor. */
#define AUDIT_WINDOW(since, until)                                                                 \
        " AND occurred_at >= " AUDIT_AT(                                                           \
            since, "millisecond") " AND (occurred_at, id) <"                                       \
                                  " (least(coalesce(" AUDIT_CURSOR ", 'infinity'), " AUDIT_AT(     \
                                      until,                                                       \
                                      "millisecond") "),"                                          \
                                                     " CASE WHEN " AUDIT_CURSOR " < " AUDIT_AT(    \
                                                         until,                                    \
                                                         "millisecond") " THEN $2::int8 ELSE 0"    \
                                                                        " END)"
#define AUDIT_REST " ORDER BY occurred_at DESC, id DESC LIMIT $3::int"

/* The latest time a window may name, 9999-12-31T23:59:59.999Z: what a timestamptz surely holds. */
#define AUDIT_MS_MAX INT64_C(253402300799999)

/* $4 since, $5 until. */
static const char sql_list[] = AUDIT_SELECT AUDIT_WINDOW("4", "5") AUDIT_REST;

/* $4 action, $5 actor ("" = any), $6 since, $7 until. */
static const char sql_list_action[] = AUDIT_SELECT
    " AND action = $4::text"
    " AND ($5::text = '' OR actor_user_id = NULLIF($5::text, '')::uuid)" AUDIT_WINDOW("6", "7")
        AUDIT_REST;

/* $4 actor, $5 since, $6 until. */
static const char sql_list_actor[] =
    AUDIT_SELECT " AND actor_user_id = $4::uuid" AUDIT_WINDOW("5", "6") AUDIT_REST;

/* Tokens are bound to the filters (auth_list_audit). The first page's cursor is NULL:
 * AUDIT_WINDOW takes it as the window's end. */
#define AUDIT_PAGE                                                                                 \
        AUTH_LIST_PAGE("ListAudit", Keelson__Auth__V1__AuditEntry, entry_item,                     \
                       {KS_LIST_KEY_INT64, 9, NULL}, {KS_LIST_KEY_INT64, 0, NULL})

static const ks_list_method list_audit = {
    .page = AUDIT_PAGE, .sql = sql_list, .items_field = "entries"};
static const ks_list_method list_by_action = {
    .page = AUDIT_PAGE, .sql = sql_list_action, .items_field = "entries"};
static const ks_list_method list_by_actor = {
    .page = AUDIT_PAGE, .sql = sql_list_actor, .items_field = "entries"};

/* Refuses an unknown action with the list of known ones. */
static int refuse_action(ks_call *call)
{
        char known[256];
        size_t n = 0;

        known[0] = '\0';
        for (size_t i = 0; i < AUDIT_ACTIONS_N && n < sizeof(known); i++) {
                int w = snprintf(known + n, sizeof(known) - n, "%s%s", i > 0 ? ", " : "",
                                 audit_actions[i]);
                n += w > 0 ? (size_t)w : 0;
        }
        return ks_call_fail(call, KS_INVALID_ARGUMENT, "action: not an audited action (one of %s)",
                            known);
}

static int check_window(ks_call *call, int64_t since_ms, int64_t until_ms)
{
        if (since_ms < 0 || since_ms > AUDIT_MS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "since_unix_ms: must be 0..%" PRId64,
                                    AUDIT_MS_MAX);
        }
        if (until_ms < 0 || until_ms > AUDIT_MS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "until_unix_ms: must be 0..%" PRId64,
                                    AUDIT_MS_MAX);
        }
        if (until_ms != 0 && until_ms < since_ms) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "until_unix_ms: before since_unix_ms");
        }
        return KS_OK;
}

/* The request's filters as the statement of the one that leads takes them. */
typedef struct audit_query {
        const ks_list_method *m;
        const char *filters[4];
        int n_filters;
        ks_pg_num since, until;
        char binding[KS_LIST_BINDING_BYTES_MAX];
} audit_query;

static void audit_query_of(const Keelson__Auth__V1__ListAuditRequest *req, audit_query *q)
{
        const char *action = req->action, *actor = req->actor_user_id;
        const char **f = q->filters;

        q->since = ks_pg_num_of(req->since_unix_ms);
        q->until = ks_pg_num_of(req->until_unix_ms != 0 ? req->until_unix_ms : AUDIT_MS_MAX + 1);
        if (action[0] != '\0') {
                q->m = &list_by_action;
                q->n_filters = 4;
                f[0] = action, f[1] = actor, f[2] = q->since.s, f[3] = q->until.s;
        } else if (actor[0] != '\0') {
                q->m = &list_by_actor;
                q->n_filters = 3;
                f[0] = actor, f[1] = q->since.s, f[2] = q->until.s;
        } else {
                q->m = &list_audit;
                q->n_filters = 2;
                f[0] = q->since.s, f[1] = q->until.s;
        }
        q->binding[0] = '\0';
        if (action[0] != '\0' || actor[0] != '\0' || req->since_unix_ms != 0 ||
            req->until_unix_ms != 0) {
                /* Action and actor were checked: neither holds a newline. */
                snprintf(q->binding, sizeof(q->binding), "%s\n%s\n%s\n%s", action, actor,
                         q->since.s, q->until.s);
        }
}

/*
 * Filters combine with AND. The page token is bound to all four (the
 * binding: the request's filters, one per line), so that a token resumes
 * only the list it was issued for.
 */
int auth_list_audit(ks_call *call)
{
        const Keelson__Auth__V1__ListAuditRequest *req =
            (const Keelson__Auth__V1__ListAuditRequest *)call->in;
        audit_query q;
        int rc;

        if (req->action[0] != '\0' && !action_known(req->action)) {
                return refuse_action(call);
        }
        if (req->actor_user_id[0] != '\0' && !ks_uuid_valid(req->actor_user_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "actor_user_id: not a valid uuid");
        }
        if ((rc = check_window(call, req->since_unix_ms, req->until_unix_ms)) != KS_OK) {
                return rc;
        }
        audit_query_of(req, &q);
        return auth_list_reply_bound(call, q.m, req->page_size, req->page_token, q.filters,
                                     q.n_filters, q.binding);
}
