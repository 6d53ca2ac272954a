/*
 * ReceiveWebhook: a provider's event, as the gateway received it at
 * /webhooks/<provider>/<endpoint id> (services/gateway/intake.c): verified,
 * stored with its deduplication key, answered.
 *
 *  1. The endpoint and its active secrets, by id alone (the URL is all the
 *     request says of its tenant), in a read-only transaction as
 *     keelson_webhook_worker. Unknown, disabled, or of another provider than
 *     the path names: not_found (404), the same answer for each.
 *  2. The signature (signature.c) against every active secret, within the
 *     endpoint's tolerance either side of now. Refused: invalid_argument
 *     (400) naming the verdict, and nothing written.
 *  3. The event's id: Stripe's is the body's "id" ("evt_..."), a Standard
 *     Webhooks sender's the webhook-id header. Its type is the body's
 *     "type" (Standard Webhooks' payloads carry one too; "" without).
 *  4. One insert acting for the endpoint's tenant, deduplicated by the
 *     unique key (tenant, endpoint, provider's event id), its id made from
 *     that key, sent with its COMMIT in one round trip: a new event is
 *     stored before the 2xx, with what it carried; the same event again
 *     changes nothing and answers 2xx with duplicate set. A database that
 *     cannot store it answers unavailable (503): the provider sends it again.
 *
 * A new Stripe event of a type billing acts on is stored pending (the
 * applier takes it from there); any other is stored ignored.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "webhook.h"

#define STATUS_PENDING "1"
#define STATUS_IGNORED "3"

/* The Stripe event types that change keelson's invoices and subscriptions. */
static const char *const applied_types[] = {
    "invoice.paid",
    "invoice.payment_failed",
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "charge.refunded",
    "customer.subscription.updated",
    "customer.subscription.deleted",
};

static const char sql_endpoint[] =
    "SELECT e.tenant_id, e.provider, e.tolerance_s, e.enabled, s.secret"
    " FROM webhook.intake_endpoints e LEFT JOIN LATERAL (SELECT secret, created_ms, id"
    " FROM webhook.intake_secrets WHERE endpoint_id = e.id"
    " AND (expires_ms IS NULL OR expires_ms > webhook.now_ms())"
    " ORDER BY created_ms DESC, id DESC LIMIT 2) s ON true WHERE e.id = $1::uuid";

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

/*
 * The event's id is made from its deduplication key (key_id): a duplicate
 * is answered with it without reading the first row back, so it costs one
 * probe of a unique index whatever the planner thinks of the tenant.
 */
static const char sql_store[] =
    "INSERT INTO webhook.received_events (tenant_id, id, endpoint_id, provider, provider_event_id,"
    " type, body, headers, signed_at_ms, received_ms, status, next_attempt_ms)"
    " VALUES (webhook.ctx_tenant(), $9::uuid, $1::uuid, $2::int2, $3, $4, $5::bytea, $6::jsonb,"
    " $7::int8 * 1000, webhook.now_ms(), $8::int2,"
    " CASE WHEN $8::int2 = 1 THEN webhook.now_ms() END)"
    " ON CONFLICT DO NOTHING RETURNING 1";

int wh_secret_check(Keelson__Webhook__V1__Provider p, const char *secret, char *err, size_t err_len)
{
        wh_key *k = NULL;
        int rc = wh_key_new(&k, (wh_provider)p, secret, strlen(secret), err, err_len);

        wh_key_free(k);
        if (rc == KS_INTERNAL) {
                snprintf(err, err_len, "cannot be checked now, retry");
        }
        return rc == KS_OK ? 0 : -1;
}

/* ---- what one request carries ----------------------------------------------------------- */

typedef struct intake {
        ks_call *call;
        wh_service *svc;
        const Keelson__Webhook__V1__ReceiveWebhookRequest *in;
        wh_provider provider;
        /* the endpoint */
        char tenant_id[WH_UUID_LEN + 1];
        int64_t tolerance_s;
        wh_key *keys[WH_KEYS_MAX];
        size_t n_keys;
        /* the event */
        wh_request req;
        int64_t signed_at_s;
        char event_id[WH_EVENT_ID_MAX + 1];
        char type[WH_EVENT_TYPE_MAX + 1];
        const char *status;
        /* the answer */
        char stored_id[WH_UUID_LEN + 1];
        bool duplicate;
} intake;

static void intake_free(intake *t)
{
        for (size_t i = 0; i < t->n_keys; i++) {
                wh_key_free(t->keys[i]);
        }
}

static void count(intake *t, wh_intake_result r)
{
        ks_counter_inc(t->svc->intake[r]);
}

static const char *header(const intake *t, const char *name)
{
        for (size_t i = 0; i < t->in->n_headers; i++) {
                const Keelson__Webhook__V1__Header *h = t->in->headers[i];
                if (h->name != NULL && strcmp(h->name, name) == 0) {
                        return h->value;
                }
        }
        return NULL;
}

/* ---- 1. the endpoint ---------------------------------------------------------------------- */

static int unknown_endpoint(intake *t)
{
        count(t, WH_IN_UNKNOWN_ENDPOINT);
        return ks_call_fail(t->call, KS_NOT_FOUND, "unknown webhook endpoint");
}

static int unavailable(intake *t, int code)
{
        count(t, WH_IN_UNAVAILABLE);
        ks_log_warn(t->call->request_id, "webhook intake could not reach the database", "{s:s}",
                    "code", ks_code_name(code));
        return ks_call_fail(t->call, KS_UNAVAILABLE, "event not stored, send it again later");
}

/* The endpoint's row(s) into t; KS_OK, or a code the call carries. */
static int endpoint_take(intake *t, const PGresult *res)
{
        char err[KS_MESSAGE_MAX];

        if (PQntuples(res) == 0 || ks_pg_int(res, 0, 1) != t->provider || !ks_pg_bool(res, 0, 3)) {
                return unknown_endpoint(t);
        }
        snprintf(t->tenant_id, sizeof(t->tenant_id), "%s", ks_pg_text(res, 0, 0));
        t->tolerance_s = ks_pg_int(res, 0, 2);
        for (int r = 0; r < PQntuples(res) && t->n_keys < WH_KEYS_MAX; r++) {
                if (PQgetisnull(res, r, 4)) {
                        continue; /* every secret expired: nothing verifies */
                }
                const char *secret = PQgetvalue(res, r, 4);
                int rc = wh_key_new(&t->keys[t->n_keys], t->provider, secret, strlen(secret), err,
                                    sizeof(err));
                if (rc == KS_OK) {
                        t->n_keys++;
                } else if (rc == KS_INTERNAL) {
                        return ks_call_oom(t->call);
                }
                /* A stored secret its provider's rules refuse (checked when given): skipped. */
        }
        return KS_OK;
}

static int endpoint_load(intake *t)
{
        PGconn *conn = NULL;
        PGresult *res = NULL;
        const char *p[1] = {t->in->endpoint_id};
        int rc;

        if ((rc = ks_pg_acquire(t->svc->pool, &conn)) != KS_OK) {
                return unavailable(t, rc);
        }
        const ks_pg_stmt s[4] = {{.sql = "BEGIN READ ONLY"},
                                 {.sql = "SET LOCAL ROLE keelson_webhook_worker"},
                                 {.sql = sql_endpoint, .n_params = 1, .params = p, .out = &res},
                                 {.sql = "COMMIT"}};
        rc = ks_pg_pipeline(conn, t->call->request_id, s, 4);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(t->svc->pool, conn);
        if (rc != KS_OK) {
                return unavailable(t, rc);
        }
        rc = endpoint_take(t, res);
        PQclear(res);
        return rc;
}

/* ---- 2. the signature ------------------------------------------------------------------------ */

static int verify(intake *t)
{
        int64_t now_s = ks_now_ms() / 1000;
        wh_verdict v;

        t->req = (wh_request){.body = t->in->body.data, .body_len = t->in->body.len};
        const char *sig =
            header(t, t->provider == WH_PROVIDER_STRIPE ? "stripe-signature" : "webhook-signature");
        if (sig != NULL) {
                t->req.signature = sig;
                t->req.signature_len = strlen(sig);
        }
        if (t->provider == WH_PROVIDER_STANDARD) {
                const char *id = header(t, "webhook-id"), *ts = header(t, "webhook-timestamp");
                t->req.id = id;
                t->req.id_len = id != NULL ? strlen(id) : 0;
                t->req.timestamp = ts;
                t->req.timestamp_len = ts != NULL ? strlen(ts) : 0;
        }
        if (t->n_keys == 0) {
                v = WH_SIGNATURE_MISMATCH; /* every secret of the endpoint has expired */
        } else {
                v = wh_verify(t->provider, &t->req, t->keys, t->n_keys, now_s, t->tolerance_s,
                              &t->signed_at_s);
        }
        if (v == WH_OK) {
                return KS_OK;
        }
        if (v == WH_INTERNAL) {
                return ks_call_oom(t->call);
        }
        count(t, WH_IN_REFUSED);
        ks_counter_inc(t->svc->refused[v]);
        return ks_call_fail(t->call, KS_INVALID_ARGUMENT, "webhook refused: %s",
                            wh_verdict_name((int)v));
}

/* ---- 3. the event's id and type ----------------------------------------------------------------
 */

static int bad_event(intake *t, const char *why)
{
        count(t, WH_IN_BAD_REQUEST);
        return ks_call_fail(t->call, KS_INVALID_ARGUMENT, "%s", why);
}

/* A string member of a JSON object, copied into out when it fits; false when absent or too long. */
static bool json_text(const json_t *o, const char *key, char *out, size_t out_len)
{
        const json_t *v = json_object_get(o, key);

        if (!json_is_string(v) || json_string_length(v) >= out_len ||
            memchr(json_string_value(v), '\0', json_string_length(v)) != NULL) {
                return false;
        }
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
        return true;
}

static bool applied_type(const char *type)
{
        for (size_t i = 0; i < sizeof(applied_types) / sizeof(applied_types[0]); i++) {
                if (strcmp(type, applied_types[i]) == 0) {
                        return true;
                }
        }
        return false;
}

static int event_of(intake *t)
{
        json_t *body = json_loadb((const char *)t->in->body.data, t->in->body.len, 0, NULL);
        bool is_object = json_is_object(body);

        if (!is_object || !json_text(body, "type", t->type, sizeof(t->type))) {
                t->type[0] = '\0';
        }
        if (t->provider == WH_PROVIDER_STRIPE) {
                bool has_id = is_object &&
                              json_text(body, "id", t->event_id, sizeof(t->event_id)) &&
                              t->event_id[0] != '\0';
                json_decref(body);
                if (!has_id) {
                        return bad_event(t, "not a Stripe event: the body has no \"id\"");
                }
                t->status = applied_type(t->type) ? STATUS_PENDING : STATUS_IGNORED;
                return KS_OK;
        }
        json_decref(body);
        /* wh_verify accepted webhook-id: 1..WH_ID_BYTES_MAX bytes without '.' */
        snprintf(t->event_id, sizeof(t->event_id), "%s", t->req.id);
        t->status = STATUS_IGNORED;
        return KS_OK;
}

/* ---- 4. stored once
 * ------------------------------------------------------------------------------ */

/* The headers the signature covered, as a JSON object (malloc'ed); NULL when out of memory. */
static char *headers_json(const intake *t)
{
        json_t *o = json_object();
        char *s = NULL;

        for (size_t i = 0; o != NULL && i < t->in->n_headers; i++) {
                const Keelson__Webhook__V1__Header *h = t->in->headers[i];
                json_t *v = json_string(h->value != NULL ? h->value : "");
                if (v == NULL || json_object_set_new(o, h->name != NULL ? h->name : "", v) != 0) {
                        json_decref(o);
                        return NULL;
                }
        }
        if (o != NULL) {
                s = json_dumps(o, JSON_COMPACT);
                json_decref(o);
        }
        return s;
}

/*
 * The id of the event of (endpoint, provider's event id): the first 16
 * bytes of the SHA-256 of both, as a uuid of version 8 (RFC 9562's custom
 * one). Endpoint ids are unique across tenants, so the pair is the key.
 */
static void key_id(const char *endpoint_id, const char *event_id, char out[WH_UUID_LEN + 1])
{
        uint8_t d[KS_SHA256_BYTES];
        char in[WH_UUID_LEN + 1 + WH_EVENT_ID_MAX + 1];
        int n = snprintf(in, sizeof(in), "%s\n%s", endpoint_id, event_id);

        ks_sha256(in, n > 0 ? (size_t)n : 0, d);
        d[6] = (uint8_t)((d[6] & 0x0f) | 0x80); /* version 8 */
        d[8] = (uint8_t)((d[8] & 0x3f) | 0x80); /* variant 10 */
        snprintf(out, WH_UUID_LEN + 1,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", d[0], d[1],
                 d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14],
                 d[15]);
}

/* One round trip: the tenant, the insert, COMMIT. */
static int store_in(intake *t, PGconn *conn, const char *headers)
{
        ks_pg_num prov = ks_pg_num_of(t->provider), at = ks_pg_num_of(t->signed_at_s);
        PGresult *res = NULL;
        const char *tenant[1] = {t->tenant_id};

        key_id(t->in->endpoint_id, t->event_id, t->stored_id);
        const ks_pg_param args[9] = {
            {.value = t->in->endpoint_id, .length = -1},
            {.value = prov.s, .length = -1},
            {.value = t->event_id, .length = -1},
            {.value = t->type, .length = -1},
            {.value = (const char *)t->in->body.data, .length = (int)t->in->body.len, .format = 1},
            {.value = headers, .length = -1},
            {.value = at.s, .length = -1},
            {.value = t->status, .length = -1},
            {.value = t->stored_id, .length = -1},
        };
        const ks_pg_stmt s[4] = {{.sql = "BEGIN"},
                                 {.sql = sql_act_for, .n_params = 1, .params = tenant},
                                 {.sql = sql_store, .n_params = 9, .args = args, .out = &res},
                                 {.sql = "COMMIT"}};
        int rc = ks_pg_pipeline(conn, t->call->request_id, s, 4);

        /* Nothing inserted: stored before (or by a twin that committed while this one waited). */
        t->duplicate = rc == KS_OK && PQntuples(res) == 0;
        PQclear(res);
        return rc;
}

static int store(intake *t)
{
        PGconn *conn = NULL;
        char *headers = headers_json(t);
        int rc;

        if (headers == NULL) {
                return ks_call_oom(t->call);
        }
        if ((rc = ks_pg_acquire(t->svc->pool, &conn)) == KS_OK) {
                rc = store_in(t, conn, headers);
                if (rc != KS_OK) {
                        ks_pg_rollback(conn);
                }
                ks_pg_release(t->svc->pool, conn);
        }
        free(headers);
        if (rc != KS_OK) {
                return unavailable(t, rc);
        }
        count(t, t->duplicate ? WH_IN_DUPLICATE : WH_IN_STORED);
        if (!t->duplicate && strcmp(t->status, STATUS_PENDING) == 0) {
                wh_applier_wake(t->svc->applier);
        }
        return KS_OK;
}

/* ---- the method -------------------------------------------------------------------------------
 */

static int receive(intake *t)
{
        int rc;

        if ((rc = endpoint_load(t)) != KS_OK || (rc = verify(t)) != KS_OK ||
            (rc = event_of(t)) != KS_OK || (rc = store(t)) != KS_OK) {
                return rc;
        }
        Keelson__Webhook__V1__ReceiveWebhookResponse resp =
            KEELSON__WEBHOOK__V1__RECEIVE_WEBHOOK_RESPONSE__INIT;
        resp.event_id = t->stored_id;
        resp.duplicate = t->duplicate;
        return ks_call_reply(t->call, &resp.base);
}

int wh_receive_webhook(ks_call *call)
{
        intake t = {.call = call, .svc = call->service, .in = (const void *)call->in};
        int64_t start_ns = ks_mono_ns();
        int rc;

        t.provider = (wh_provider)t.in->provider;
        if (t.provider != WH_PROVIDER_STRIPE && t.provider != WH_PROVIDER_STANDARD) {
                return bad_event(&t, "provider: stripe or standard");
        }
        if (!ks_uuid_valid(t.in->endpoint_id)) {
                return unknown_endpoint(&t);
        }
        if (t.in->body.len > (size_t)t.svc->cfg->intake_body_max_bytes) {
                count(&t, WH_IN_BAD_REQUEST);
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "body over %lld bytes",
                                    (long long)t.svc->cfg->intake_body_max_bytes);
        }
        rc = receive(&t);
        intake_free(&t);
        ks_histogram_observe(t.svc->intake_seconds, (double)(ks_mono_ns() - start_ns) / 1e9);
        return rc;
}
