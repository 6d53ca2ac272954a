/*
 * The events received through the tenant's intake endpoints, as operators
 * read them: ListReceivedEvents (newest first; of one endpoint, of one
 * status) and GetReceivedEvent (with the body, as it arrived); and
 * ReapplyReceivedEvent, which hands one to the applier again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_crypto.h"
#include "webhook.h"

#define EVENT_COLUMNS                                                                              \
        "id, endpoint_id, provider, provider_event_id, type, status, received_ms, signed_at_ms,"   \
        " attempts, last_error, COALESCE(applied_ms, 0)"

static void event_of(Keelson__Webhook__V1__ReceivedEvent *e, const PGresult *r, int i)
{
        keelson__webhook__v1__received_event__init(e);
        e->id = (char *)ks_pg_text(r, i, 0);
        e->endpoint_id = (char *)ks_pg_text(r, i, 1);
        e->provider = (Keelson__Webhook__V1__Provider)ks_pg_int(r, i, 2);
        e->provider_event_id = (char *)ks_pg_text(r, i, 3);
        e->type = (char *)ks_pg_text(r, i, 4);
        e->status = (Keelson__Webhook__V1__ReceivedStatus)ks_pg_int(r, i, 5);
        e->received_at_unix_ms = ks_pg_int(r, i, 6);
        e->signed_at_unix_ms = ks_pg_int(r, i, 7);
        e->attempts = (int32_t)ks_pg_int(r, i, 8);
        e->last_error = (char *)ks_pg_text(r, i, 9);
        e->applied_at_unix_ms = ks_pg_int(r, i, 10);
}

/* ---- ListReceivedEvents ------------------------------------------------------------------ */

static void list_item(void *item, const PGresult *r, int i)
{
        event_of(item, r, i);
}

#define LIST_AFTER  KS_LIST_BEFORE("received_ms", "id")
#define LIST_STATUS " AND ($4::int2 = 0 OR status = $4::int2)"
#define LIST_PAGE                                                                                  \
        KS_LIST_PAGE("keelson.webhook.v1.WebhookService/ListReceivedEvents",                       \
                     Keelson__Webhook__V1__ReceivedEvent, list_item, KS_LIST_DESC_INT64(6),        \
                     KS_LIST_DESC_UUID(0))

static const ks_list_method list_all = {
    .page = LIST_PAGE,
    .sql = "SELECT " EVENT_COLUMNS " FROM webhook.received_events"
           " WHERE tenant_id = webhook.ctx_tenant()" LIST_AFTER LIST_STATUS
           " ORDER BY received_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "events",
};

/* Of one endpoint: its own statement, so that its plan is the endpoint's index. */
static const ks_list_method list_by_endpoint = {
    .page = LIST_PAGE,
    .sql =
        "SELECT " EVENT_COLUMNS " FROM webhook.received_events"
        " WHERE tenant_id = webhook.ctx_tenant() AND endpoint_id = $5::uuid" LIST_AFTER LIST_STATUS
        " ORDER BY received_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "events",
};

int wh_list_received_events(ks_call *call)
{
        const Keelson__Webhook__V1__ListReceivedEventsRequest *in = (const void *)call->in;
        bool by_endpoint = in->endpoint_id[0] != '\0';
        ks_pg_num status = ks_pg_num_of(in->status);

        if (in->status < 0 ||
            in->status > KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_FAILED) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "status: unknown value %d",
                                    (int)in->status);
        }
        if (by_endpoint && !ks_uuid_valid(in->endpoint_id)) {
                /* No endpoint of the tenant has it: an empty list, as for another tenant's. */
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "endpoint_id: not a uuid");
        }
        const char *filters[2] = {status.s, in->endpoint_id};
        return ks_list_reply(call, by_endpoint ? &list_by_endpoint : &list_all, in->page_size,
                             in->page_token, filters, by_endpoint ? 2 : 1, &wh_list_runner);
}

/* ---- GetReceivedEvent ------------------------------------------------------------------------ */

static const char sql_get[] = "SELECT " EVENT_COLUMNS ", body FROM webhook.received_events"
                              " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid";

static int get_tx(wh_tx *tx, void *arg)
{
        Keelson__Webhook__V1__ReceivedEventResponse resp =
            KEELSON__WEBHOOK__V1__RECEIVED_EVENT_RESPONSE__INIT;
        Keelson__Webhook__V1__ReceivedEvent e;
        const char *p[1] = {arg};
        PGresult *res = NULL;
        int rc;

        if ((rc = wh_exec(tx, sql_get, 1, p, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) == 0) {
                PQclear(res);
                return ks_call_fail(tx->call, KS_NOT_FOUND, "received event not found");
        }
        event_of(&e, res, 0);
        uint8_t *body = NULL;
        size_t len = 0;
        const char *hex = ks_pg_text(res, 0, 11);
        size_t cap = strlen(hex) / 2 + 1;
        if ((body = malloc(cap)) == NULL) {
                PQclear(res);
                return ks_call_oom(tx->call);
        }
        long n = ks_pg_bytea_decode(hex, body, cap);
        len = n > 0 ? (size_t)n : 0;
        e.body.data = body;
        e.body.len = len;
        resp.event = &e;
        rc = ks_call_reply(tx->call, &resp.base);
        free(body);
        PQclear(res);
        return rc;
}

int wh_get_received_event(ks_call *call)
{
        const Keelson__Webhook__V1__GetReceivedEventRequest *in = (const void *)call->in;

        if (!ks_uuid_valid(in->id)) {
                return ks_call_fail(call, KS_NOT_FOUND, "received event not found");
        }
        return wh_tx_run_reads(call, get_tx, (void *)in->id);
}

/* ---- ReapplyReceivedEvent ---------------------------------------------------------------- */

static const char sql_reapply[] =
    "UPDATE webhook.received_events SET status = 1, attempts = 0, last_error = '',"
    " next_attempt_ms = webhook.now_ms() WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid"
    " RETURNING id";

static int reapply_tx(wh_tx *tx, void *arg)
{
        const char *p[1] = {arg};
        PGresult *res = NULL;
        int rc;

        if ((rc = wh_exec(tx, sql_reapply, 1, p, &res)) != KS_OK) {
                return rc;
        }
        int n = PQntuples(res);
        PQclear(res);
        return n == 0 ? ks_call_fail(tx->call, KS_NOT_FOUND, "received event not found")
                      : get_tx(tx, arg);
}

int wh_reapply_received_event(ks_call *call)
{
        const Keelson__Webhook__V1__ReapplyReceivedEventRequest *in = (const void *)call->in;
        int rc;

        if (!ks_uuid_valid(in->id)) {
                return ks_call_fail(call, KS_NOT_FOUND, "received event not found");
        }
        if ((rc = wh_tx_run(call, reapply_tx, (void *)in->id)) == KS_OK) {
                wh_applier_wake(((wh_service *)call->service)->applier);
        }
        return rc;
}
