/*
 * Deliveries as tenants read them: ListDeliveries (newest first; of one
 * subscription, of one status) and GetDelivery (with the body POSTed and
 * the log of its attempts); and Redeliver, which makes one due again at
 * once with a fresh retry schedule and wakes this replica's worker
 * (deliver.c). The worker writes deliveries and their attempts; this file
 * only reads them, but for Redeliver's status, tries and next_attempt_ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_crypto.h"
#include "webhook.h"

#define NOT_FOUND_MSG "delivery not found"
/*
 * Attempts GetDelivery shows, the newest: a delivery has at most
 * WH_RETRY_MAX + 1 per schedule, but every Redeliver starts another.
 */
#define ATTEMPT_LOG_MAX 100

/* next_attempt_ms is a lease while an attempt runs, and means nothing once the delivery ended. */
#define DELIVERY_COLUMNS                                                                           \
        "d.id, d.subscription_id, d.event_id, e.topic, d.status, d.attempts, d.created_ms,"        \
        " CASE WHEN d.status = 1 THEN COALESCE(d.next_attempt_ms, 0) ELSE 0 END,"                  \
        " COALESCE(d.delivered_ms, 0), d.last_http_status, d.last_error"
#define DELIVERY_FROM                                                                              \
        " FROM webhook.deliveries d JOIN webhook.events e"                                         \
        " ON e.tenant_id = d.tenant_id AND e.id = d.event_id"

/* A delivery row (DELIVERY_COLUMNS) into d; its strings point into r. */
static void delivery_of(Keelson__Webhook__V1__Delivery *d, const PGresult *r, int i)
{
        keelson__webhook__v1__delivery__init(d);
        d->id = (char *)ks_pg_text(r, i, 0);
        d->subscription_id = (char *)ks_pg_text(r, i, 1);
        d->event_id = (char *)ks_pg_text(r, i, 2);
        d->topic = (char *)ks_pg_text(r, i, 3);
        d->status = (Keelson__Webhook__V1__DeliveryStatus)ks_pg_int(r, i, 4);
        d->attempts = (int32_t)ks_pg_int(r, i, 5);
        d->created_at_unix_ms = ks_pg_int(r, i, 6);
        d->next_attempt_at_unix_ms = ks_pg_int(r, i, 7);
        d->delivered_at_unix_ms = ks_pg_int(r, i, 8);
        d->last_http_status = (int32_t)ks_pg_int(r, i, 9);
        d->last_error = (char *)ks_pg_text(r, i, 10);
}

/* ---- ListDeliveries --------------------------------------------------------------------- */

static void list_item(void *item, const PGresult *r, int i)
{
        delivery_of(item, r, i);
}

#define LIST_AFTER  KS_LIST_BEFORE("d.created_ms", "d.id")
#define LIST_STATUS " AND ($4::int2 = 0 OR d.status = $4::int2)"
#define LIST_ORDER  " ORDER BY d.created_ms DESC, d.id DESC LIMIT $3::int4"
#define LIST_PAGE                                                                                  \
        KS_LIST_PAGE("keelson.webhook.v1.WebhookService/ListDeliveries",                           \
                     Keelson__Webhook__V1__Delivery, list_item, KS_LIST_DESC_INT64(6),             \
                     KS_LIST_DESC_UUID(0))

static const ks_list_method list_all = {
    .page = LIST_PAGE,
    .sql = "SELECT " DELIVERY_COLUMNS DELIVERY_FROM
           " WHERE d.tenant_id = webhook.ctx_tenant()" LIST_AFTER LIST_STATUS LIST_ORDER,
    .items_field = "deliveries",
};

/* Of one subscription: its own statement, so that its plan is the subscription's index. */
static const ks_list_method list_by_subscription = {
    .page = LIST_PAGE,
    .sql = "SELECT " DELIVERY_COLUMNS DELIVERY_FROM " WHERE d.tenant_id = webhook.ctx_tenant()"
           " AND d.subscription_id = $5::uuid" LIST_AFTER LIST_STATUS LIST_ORDER,
    .items_field = "deliveries",
};

int wh_list_deliveries(ks_call *call)
{
        const Keelson__Webhook__V1__ListDeliveriesRequest *in = (const void *)call->in;
        bool by_subscription = in->subscription_id[0] != '\0';
        ks_pg_num status = ks_pg_num_of(in->status);

        if (in->status < 0 ||
            in->status > KEELSON__WEBHOOK__V1__DELIVERY_STATUS__DELIVERY_STATUS_FAILED) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "status: unknown value %d",
                                    (int)in->status);
        }
        if (by_subscription && !ks_uuid_valid(in->subscription_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "subscription_id: not a uuid");
        }
        const char *filters[2] = {status.s, in->subscription_id};
        return ks_list_reply(call, by_subscription ? &list_by_subscription : &list_all,
                             in->page_size, in->page_token, filters, by_subscription ? 2 : 1,
                             &wh_list_runner);
}

/* ---- GetDelivery ------------------------------------------------------------------------- */

static const char sql_get[] = "SELECT " DELIVERY_COLUMNS ", e.body" DELIVERY_FROM
                              " WHERE d.tenant_id = webhook.ctx_tenant() AND d.id = $1::uuid";

/* The newest ATTEMPT_LOG_MAX attempts, oldest first. */
static const char sql_attempts[] =
    "SELECT * FROM (SELECT n, at_ms, outcome, http_status, latency_ms, excerpt, detail"
    " FROM webhook.delivery_attempts WHERE tenant_id = webhook.ctx_tenant()"
    " AND delivery_id = $1::uuid ORDER BY n DESC LIMIT $2::int4) a ORDER BY n";

/* The attempts of r into log (n of them, the rows'); pointers into r. */
static void attempts_of(const PGresult *r, Keelson__Webhook__V1__DeliveryAttempt *log,
                        Keelson__Webhook__V1__DeliveryAttempt **ps, size_t n)
{
        for (size_t k = 0; k < n; k++) {
                Keelson__Webhook__V1__DeliveryAttempt *a = &log[k];
                int i = (int)k;

                keelson__webhook__v1__delivery_attempt__init(a);
                a->number = (int32_t)ks_pg_int(r, i, 0);
                a->at_unix_ms = ks_pg_int(r, i, 1);
                a->outcome = (char *)ks_pg_text(r, i, 2);
                a->http_status = (int32_t)ks_pg_int(r, i, 3);
                a->latency_ms = ks_pg_int(r, i, 4);
                a->response_excerpt = (char *)ks_pg_text(r, i, 5);
                a->detail = (char *)ks_pg_text(r, i, 6);
                ps[k] = a;
        }
}

/* Replies {delivery} of id, with its body and attempts; not_found when the tenant has none such. */
static int reply_delivery(wh_tx *tx, const char *id)
{
        Keelson__Webhook__V1__DeliveryResponse resp = KEELSON__WEBHOOK__V1__DELIVERY_RESPONSE__INIT;
        Keelson__Webhook__V1__Delivery d;
        ks_pg_num limit = ks_pg_num_of(ATTEMPT_LOG_MAX);
        const char *p[2] = {id, limit.s};
        PGresult *dr = NULL, *ar = NULL;
        const ks_pg_stmt s[2] = {{.sql = sql_get, .n_params = 1, .params = p, .out = &dr},
                                 {.sql = sql_attempts, .n_params = 2, .params = p, .out = &ar}};
        int rc = wh_pipeline(tx, s, 2);

        if (rc != KS_OK) {
                return rc;
        }
        size_t n =
            (size_t)PQntuples(ar) < ATTEMPT_LOG_MAX ? (size_t)PQntuples(ar) : ATTEMPT_LOG_MAX;
        Keelson__Webhook__V1__DeliveryAttempt *log = calloc(n + 1, sizeof(*log));
        Keelson__Webhook__V1__DeliveryAttempt **ps = calloc(n + 1, sizeof(*ps));
        if (PQntuples(dr) == 0) {
                rc = ks_call_fail(tx->call, KS_NOT_FOUND, NOT_FOUND_MSG);
        } else if (log == NULL || ps == NULL) {
                rc = ks_call_oom(tx->call);
        } else {
                delivery_of(&d, dr, 0);
                d.body = (char *)ks_pg_text(dr, 0, 11);
                attempts_of(ar, log, ps, n);
                d.attempt_log = ps;
                d.n_attempt_log = n;
                resp.delivery = &d;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        free(ps);
        free(log);
        PQclear(dr);
        PQclear(ar);
        return rc;
}

static int get_tx(wh_tx *tx, void *arg)
{
        return reply_delivery(tx, arg);
}

int wh_get_delivery(ks_call *call)
{
        const Keelson__Webhook__V1__GetDeliveryRequest *in = (const void *)call->in;

        if (!ks_uuid_valid(in->id)) {
                return ks_call_fail(call, KS_NOT_FOUND, NOT_FOUND_MSG);
        }
        return wh_tx_run_reads(call, get_tx, (void *)in->id);
}

/* ---- Redeliver ------------------------------------------------------------------------------ */

/* Due now, from the start of the retry schedule; attempts keeps counting. */
static const char sql_redeliver[] =
    "UPDATE webhook.deliveries SET status = 1, tries = 0, next_attempt_ms = webhook.now_ms()"
    " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid RETURNING id";

static int redeliver_tx(wh_tx *tx, void *arg)
{
        const char *p[1] = {arg};
        PGresult *res = NULL;
        int rc;

        if ((rc = wh_exec(tx, sql_redeliver, 1, p, &res)) != KS_OK) {
                return rc;
        }
        int n = PQntuples(res);
        PQclear(res);
        return n == 0 ? ks_call_fail(tx->call, KS_NOT_FOUND, NOT_FOUND_MSG)
                      : reply_delivery(tx, arg);
}

int wh_redeliver(ks_call *call)
{
        const Keelson__Webhook__V1__RedeliverRequest *in = (const void *)call->in;
        int rc;

        if (!ks_uuid_valid(in->id)) {
                return ks_call_fail(call, KS_NOT_FOUND, NOT_FOUND_MSG);
        }
        if ((rc = wh_tx_run(call, redeliver_tx, (void *)in->id)) == KS_OK) {
                wh_deliverer_wake(((wh_service *)call->service)->deliverer);
        }
        return rc;
}
