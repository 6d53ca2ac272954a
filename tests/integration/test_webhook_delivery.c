/*
 * Outbound webhooks end to end: billing's events delivered to tenants'
 * URLs as Standard Webhooks requests, as a tenant's server sees them (a
 * scripted sink on 127.0.0.1, webhook_sink.h) and as the tenant reads them
 * back (ListDeliveries, GetDelivery). Signatures are checked here with
 * OpenSSL's HMAC directly, not with the service's code.
 *
 * The stack's webhook replicas run with the fixture's delivery settings
 * (tests/CMakeLists.txt): 127.0.0.1/32 allowed, retries after 1 s, 1 s, 1 s,
 * 1 s (5 attempts), 2 s per attempt.
 *
 * - Retries, then delivered: two 500s, then 200: three requests with one
 *   webhook-id and one body, each signed with the subscription's secret;
 *   the body is the invoice's event; the delivery log shows 500, 500, 200.
 *   A topic not subscribed to is not delivered; another tenant's
 *   subscription gets nothing of this tenant's.
 * - The schedule runs out: five 500s, failed, listed as failed; Redeliver
 *   to a sink that now answers 200: delivered, same webhook-id, 6 attempts.
 * - 410 Gone: failed after one attempt, the subscription disabled ("gone"),
 *   and later events make no delivery for it.
 * - Addresses: private, link-local and loopback literals outside the
 *   allow-list are refused at creation; localhost (127.0.0.1, allowed) is
 *   delivered to; a replica whose allow-list lacks 127.0.0.1 refuses to
 *   connect to it (refused_address), and the sink sees nothing from it.
 * - A sink that hangs past the timeout holds up no other: a second sink of
 *   the same tenant gets ten events within seconds while the first one's
 *   attempts time out.
 * - kill -9 of the only delivering replica with a backlog of 20 events:
 *   once replicas run again, every event reached the sink (at least once),
 *   and there is exactly one delivery per event, each delivered.
 * - A transaction still open when later ones commit (it took its xid
 *   first): while it is open, the feed's cursor stays below its xid and the
 *   events committed after it are not delivered; once it commits with an
 *   event (a larger outbox id than theirs), that event is delivered too,
 *   and every event of the subscription has exactly one delivery.
 *
 * Tests that stop the stack's webhook replicas (SIGSTOP) resume them in
 * their teardown, whatever happened.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "billing_it.h"
#include "webhook_it.h"
#include "webhook_sink.h"

#define PAID         "billing.invoice_paid"
#define FINALIZED    "billing.invoice_finalized"
#define ALL_TOPICS   "\"" PAID "\",\"" FINALIZED "\",\"billing.subscription_changed\""
#define ST_PENDING   "DELIVERY_STATUS_PENDING"
#define ST_DELIVERED "DELIVERY_STATUS_DELIVERED"
#define ST_FAILED    "DELIVERY_STATUS_FAILED"
#define WAIT_MS      30000 /* generous: "arrives", never "arrives within" */
#define SINKS_MAX    16
#define ID_MAX       64
#define BACKLOG_N    20   /* events of the kill test */
#define SLOW_N       10   /* events of the slow sink test */
#define FAST_MS      5000 /* the slow sink test: the other sink has them all this soon */
/* attempts by outcome, as the sender (sender.c) counts them */
#define ATTEMPTS_METRIC "keelson_webhook_attempts_total"

/*
 * The stack's webhook replicas' delivery settings (tests/CMakeLists.txt),
 * for replicas of the test's own; allow_kv comes first, so that a test can
 * set another allow-list.
 */
static char allow_kv[128], login_kv[700];
static const char *replica_env[] = {
    allow_kv,
    "KEELSON_WEBHOOK_DELIVERY_RETRY_SCHEDULE=1s,1s,1s,1s",
    "KEELSON_WEBHOOK_DELIVERY_TIMEOUT_MS=2000",
    "KEELSON_WEBHOOK_DELIVERY_CONNECT_TIMEOUT_MS=1000",
    "KEELSON_WEBHOOK_DELIVERY_POLL_MS=100",
    login_kv, /* the stack's replicas log in as keelson_webhook_login too (else a no-op entry) */
    NULL,
};

static wsink *sinks[SINKS_MAX];
static int n_sinks;
static it_service mine[2];
static int paused;

typedef struct sub {
        char id[ID_MAX];
        char secret[128];
} sub;

static int setup(void **state)
{
        char login[600];

        if (bit_setup(state) != 0 || wit_setup() != 0) {
                return -1;
        }
        if (it_stack_env("KEELSON_IT_WEBHOOK_LOGIN_DSN", login, sizeof(login)) == 0) {
                snprintf(login_kv, sizeof(login_kv), "KEELSON_WEBHOOK_PG_LOGIN_DSN=%s", login);
        } else {
                snprintf(login_kv, sizeof(login_kv), "KEELSON_IT_UNUSED=1");
        }
        srand((unsigned)time(NULL));
        return 0;
}

/* Every sink lives until the end: a delivery still retrying finds its own, never another's. */
static int teardown(void **state)
{
        (void)state;
        for (int i = 0; i < n_sinks; i++) {
                wsink_stop(sinks[i]);
        }
        n_sinks = 0;
        return 0;
}

/* A sink answering status after delay_ms unless scripted otherwise. */
static wsink *new_sink(int status, int delay_ms)
{
        wsink *s = NULL;
        assert_true(n_sinks < SINKS_MAX);
        assert_int_equal(wsink_start(&s), 0);
        assert_int_equal(wsink_default(s, status, delay_ms), 0);
        sinks[n_sinks++] = s;
        return s;
}

/* ---- the stack's webhook replicas, and replicas of the test's own ---------------------------- */

static void signal_stack_webhooks(int sig)
{
        char v[256];
        int n = 0;

        assert_int_equal(it_stack_env("KEELSON_IT_WEBHOOK_PIDS", v, sizeof(v)), 0);
        for (char *s = strtok(v, ","); s != NULL; s = strtok(NULL, ",")) {
                assert_int_equal(kill(atoi(s), sig), 0);
                n++;
        }
        assert_true(n > 0);
}

/*
 * SIGSTOPs the stack's webhook replicas at a moment when none of their
 * connections is inside a statement or a transaction: one stopped there
 * would hold the feed's advisory lock, or the xmin the feed reads below,
 * for as long as it stays stopped, and no replica of ours could feed.
 */
static void pause_stack_webhooks(void)
{
        PGconn *pg = it_pg_connect(wit_stack());
        static const char busy[] = "SELECT count(*) FROM pg_stat_activity"
                                   " WHERE application_name LIKE 'keelson-webhook%'"
                                   " AND state IS DISTINCT FROM 'idle'";

        for (int i = 0; i < 50; i++) {
                signal_stack_webhooks(SIGSTOP);
                paused = 1;
                it_sleep_ms(200);
                if (it_sql_long(pg, busy, 0, NULL) == 0) {
                        PQfinish(pg);
                        return;
                }
                signal_stack_webhooks(SIGCONT);
                paused = 0;
                it_sleep_ms(20 + rand() % 200);
        }
        PQfinish(pg);
        fail_msg("the stack's webhook replicas were never all outside a transaction");
}

static void resume_stack_webhooks(void)
{
        if (paused) {
                signal_stack_webhooks(SIGCONT);
                paused = 0;
        }
}

/* A webhook replica of the test's own with the stack's settings but the allow-list given. */
static void start_mine(int i, const char *allow)
{
        snprintf(allow_kv, sizeof(allow_kv), "KEELSON_WEBHOOK_DELIVERY_ALLOW=%s", allow);
        assert_int_equal(it_service_start(wit_stack(), "keelson-webhook", "KEELSON_WEBHOOK",
                                          replica_env, &mine[i]),
                         0);
}

/* Whatever a test did: our replicas stopped, the stack's running again. */
static int teardown_replicas(void **state)
{
        (void)state;
        for (int i = 0; i < 2; i++) {
                it_service_stop(&mine[i]);
        }
        resume_stack_webhooks();
        return 0;
}

/* ---- subscriptions, events, deliveries -------------------------------------------------- */

/* A subscription of t to url for topics (a JSON array's inside); its id and secret. */
static void subscribe(const bit_tenant *t, const char *url, const char *topics, sub *out)
{
        char body[1024];

        snprintf(body, sizeof(body), "{\"url\":\"%s\",\"topics\":[%s],\"description\":\"it\"}", url,
                 topics);
        json_t *j = wit_call_ok(t->owner.token, "CreateWebhookSubscription", body);
        snprintf(out->id, sizeof(out->id), "%s", wit_str(j, "subscription", "id"));
        snprintf(out->secret, sizeof(out->secret), "%s", wit_str(j, "secret", NULL));
        assert_int_equal(strlen(out->id), 36);
        assert_string_equal(wit_str(j, "subscription", "url"), url);
        assert_true(json_is_true(json_object_get(json_object_get(j, "subscription"), "enabled")));
        /* "whsec_" and the base64 of 32 bytes */
        assert_int_equal(strlen(out->secret), 6 + 44);
        assert_memory_equal(out->secret, "whsec_", 6);
        json_decref(j);
}

static void sink_subscribe(const bit_tenant *t, const wsink *s, const char *topics, sub *out)
{
        char url[128];
        wsink_url(s, "127.0.0.1", url, sizeof(url));
        subscribe(t, url, topics, out);
}

/* An invoice of cust (who pays by card) finalized and charged: billing.invoice_finalized and
 * billing.invoice_paid. Its id. */
static void paid_invoice(const bit_tenant *t, const char *cust, char id[BIT_ID_MAX])
{
        json_t *j = bit_ok(t->owner.token, "CreateInvoice",
                           "{\"customerId\":\"%s\",\"lines\":[{\"description\":\"Work\","
                           "\"unitAmount\":\"4000\"}]}",
                           cust);
        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "invoice.id"));
        json_decref(j);
        j = bit_ok(t->owner.token, "FinalizeInvoice", "{\"id\":\"%s\",\"autoCharge\":true}", id);
        assert_string_equal(bit_str(j, "invoice.state"), "paid");
        json_decref(j);
}

/* ListDeliveries (sub_id and status may be NULL): the reply, json_decref it. */
static json_t *list_deliveries(const char *token, const char *sub_id, const char *status)
{
        char body[256], sub_field[96] = "", status_field[96] = "";

        if (sub_id != NULL) {
                snprintf(sub_field, sizeof(sub_field), ",\"subscriptionId\":\"%s\"", sub_id);
        }
        if (status != NULL) {
                snprintf(status_field, sizeof(status_field), ",\"status\":\"%s\"", status);
        }
        snprintf(body, sizeof(body), "{\"pageSize\":200%s%s}", sub_field, status_field);
        return wit_call_ok(token, "ListDeliveries", body);
}

static size_t n_deliveries(const char *token, const char *sub_id, const char *status)
{
        json_t *j = list_deliveries(token, sub_id, status);
        size_t n = json_array_size(json_object_get(j, "deliveries"));
        json_decref(j);
        return n;
}

/* Whether the list holds the delivery id. */
static int lists(const char *token, const char *sub_id, const char *status, const char *id)
{
        json_t *j = list_deliveries(token, sub_id, status), *d;
        size_t i;
        int found = 0;
        json_array_foreach(json_object_get(j, "deliveries"), i, d)
        {
                found |= strcmp(wit_str(d, "id", NULL), id) == 0;
        }
        json_decref(j);
        return found;
}

/* The id of the subscription's delivery of the event (its webhook-id); fails when none. */
static void delivery_of(const char *token, const char *sub_id, const char *event_id,
                        char id[ID_MAX])
{
        json_t *j = list_deliveries(token, sub_id, NULL), *d;
        size_t i;
        id[0] = '\0';
        json_array_foreach(json_object_get(j, "deliveries"), i, d)
        {
                if (strcmp(wit_str(d, "eventId", NULL), event_id) == 0) {
                        snprintf(id, ID_MAX, "%s", wit_str(d, "id", NULL));
                }
        }
        json_decref(j);
        if (id[0] == '\0') {
                fail_msg("no delivery of event %s to subscription %s", event_id, sub_id);
        }
}

/* GetDelivery: the delivery (json_decref it). */
static json_t *get_delivery(const char *token, const char *id)
{
        char body[128];
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}", id);
        json_t *j = wit_call_ok(token, "GetDelivery", body);
        json_t *d = json_incref(json_object_get(j, "delivery"));
        json_decref(j);
        assert_non_null(d);
        return d;
}

/* Waits (at most timeout_ms) until the delivery's status is want: the delivery. */
static json_t *wait_delivery(const char *token, const char *id, const char *want, long timeout_ms)
{
        for (long waited = 0;; waited += 200) {
                json_t *d = get_delivery(token, id);
                if (strcmp(wit_str(d, "status", NULL), want) == 0) {
                        return d;
                }
                if (waited >= timeout_ms) {
                        fail_msg(
                            "delivery %s: %s after %lld attempts (last error \"%s\"), wanted %s",
                            id, wit_str(d, "status", NULL), (long long)bit_int(d, "attempts"),
                            wit_str(d, "lastError", NULL), want);
                }
                json_decref(d);
                it_sleep_ms(200);
        }
}

/* The attempt log's entry i (from 0). */
static json_t *attempt(json_t *d, size_t i)
{
        json_t *a = json_array_get(json_object_get(d, "attemptLog"), i);
        if (a == NULL) {
                fail_msg("no attempt %zu in the log of %s", i + 1, wit_str(d, "id", NULL));
        }
        return a;
}

static json_t *get_subscription(const char *token, const char *id)
{
        char body[128];
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}", id);
        json_t *j = wit_call_ok(token, "GetWebhookSubscription", body);
        json_t *s = json_incref(json_object_get(j, "subscription"));
        json_decref(j);
        assert_non_null(s);
        return s;
}

/* ---- what a tenant's server checks ------------------------------------------------------ */

/* The webhook-signature header holds "v1,<HMAC-SHA256 of id.timestamp.body>" keyed by the
 * secret's bytes (the base64 after "whsec_"), among others separated by spaces. */
static void assert_signed(const wsink_request *r, const char *secret)
{
        const char *b64 = secret + strlen("whsec_");
        size_t b64_len = strlen(b64);
        unsigned char key[64], mac[EVP_MAX_MD_SIZE], want[64] = "v1,";
        unsigned int mac_len = 0;
        char *content = NULL, *save = NULL, sigs[WSINK_VALUE_MAX];
        int found = 0;

        int key_len = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)b64_len);
        key_len -= (b64[b64_len - 1] == '=') + (b64[b64_len - 2] == '=');
        assert_int_equal(key_len, 32);
        int n = asprintf(&content, "%s.%s.", r->webhook_id, r->webhook_timestamp);
        assert_true(n > 0);
        content = realloc(content, (size_t)n + r->body_len);
        assert_non_null(content);
        memcpy(content + n, r->body, r->body_len);
        assert_non_null(HMAC(EVP_sha256(), key, key_len, (unsigned char *)content,
                             (size_t)n + r->body_len, mac, &mac_len));
        free(content);
        assert_int_equal(mac_len, 32);
        EVP_EncodeBlock(want + 3, mac, 32);
        snprintf(sigs, sizeof(sigs), "%s", r->webhook_signature);
        for (char *s = strtok_r(sigs, " ", &save); s != NULL; s = strtok_r(NULL, " ", &save)) {
                found |= strcmp(s, (const char *)want) == 0;
        }
        if (!found) {
                fail_msg("request %d: webhook-signature \"%s\" lacks %s", r->n,
                         r->webhook_signature, (const char *)want);
        }
}

/* The Standard Webhooks headers of one attempt: an id, a timestamp of the attempt's time. */
static void assert_headers(const wsink_request *r)
{
        assert_string_equal(r->method, "POST");
        assert_string_equal(r->target, "/hook");
        assert_int_equal(strlen(r->webhook_id), 36);
        assert_memory_equal(r->content_type, "application/json", 16);
        long ts = atol(r->webhook_timestamp);
        if (labs(ts - (long)(r->at_ms / 1000)) > 5) {
                fail_msg("request %d: webhook-timestamp %s, received at %lld ms", r->n,
                         r->webhook_timestamp, (long long)r->at_ms);
        }
}

/* n requests of the sink whose body holds needle, copied (wsink_request_free each). */
static void take_requests(wsink *s, const char *needle, wsink_request *r, int n)
{
        int got = wsink_wait(s, NULL, needle, n, WAIT_MS);
        if (got < n) {
                fail_msg("the sink received %d requests about %s, wanted %d", got, needle, n);
        }
        for (int i = 0; i < n; i++) {
                assert_int_equal(wsink_get(s, NULL, needle, i, &r[i]), 0);
        }
}

/* The sum of a series over the stack's webhook replicas (their health ports). */
static double metric_sum(const char *name, const char *needle)
{
        int ports[IT_REPLICAS_MAX];
        int n = it_stack_ports("KEELSON_IT_WEBHOOK_HEALTH_PORTS", ports, IT_REPLICAS_MAX);
        double sum = 0;

        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
                sum += it_metric_sum_at(ports[i], name, needle);
        }
        return sum;
}

/* The series grew by at least by since it was before. */
static void assert_grew(const char *name, const char *needle, double before, double by)
{
        double now = metric_sum(name, needle);
        if (now < before + by) {
                fail_msg("%s (%s): %g, was %g, wanted at least %g more", name,
                         needle != NULL ? needle : "any", now, before, by);
        }
}

/* ---- the tests ---------------------------------------------------------------------------- */

/* The body of an invoice_paid event: its type, time and the invoice in proto3 JSON. */
static void assert_paid_body(const char *body, const bit_tenant *t, const char *inv)
{
        json_error_t err;
        json_t *b = json_loads(body, 0, &err);
        if (b == NULL) {
                fail_msg("not JSON (%s): %s", err.text, body);
        }
        assert_string_equal(wit_str(b, "type", NULL), PAID);
        const char *ts = wit_str(b, "timestamp", NULL);
        assert_int_equal(strlen(ts), strlen("2026-12-05T10:00:00.000Z"));
        assert_int_equal(ts[23], 'Z');
        assert_string_equal(wit_str(b, "data", "invoiceId"), inv);
        assert_string_equal(wit_str(b, "data", "tenantId"), t->owner.tenant_id);
        assert_string_equal(wit_str(b, "data", "currency"), "USD");
        assert_string_equal(wit_str(b, "data", "amountPaid"), "4000"); /* int64: a string */
        json_decref(b);
}

/* The delivery as GetDelivery shows it after 500, 500, 200. */
static void assert_retried_log(json_t *d, const sub *s1, const wsink_request *r)
{
        static const int statuses[3] = {500, 500, 200};
        static const char *const outcomes[3] = {"http_error", "http_error", "delivered"};

        assert_string_equal(wit_str(d, "subscriptionId", NULL), s1->id);
        assert_string_equal(wit_str(d, "eventId", NULL), r->webhook_id);
        assert_string_equal(wit_str(d, "topic", NULL), PAID);
        assert_int_equal(bit_int(d, "attempts"), 3);
        assert_int_equal(bit_int(d, "lastHttpStatus"), 200);
        assert_true(bit_int(d, "deliveredAtUnixMs") >= r[2].at_ms - 5000);
        assert_string_equal(wit_str(d, "body", NULL), r->body);
        assert_int_equal(json_array_size(json_object_get(d, "attemptLog")), 3);
        for (size_t i = 0; i < 3; i++) {
                json_t *a = attempt(d, i);
                assert_int_equal(bit_int(a, "number"), (int64_t)i + 1);
                assert_int_equal(bit_int(a, "httpStatus"), statuses[i]);
                assert_string_equal(wit_str(a, "outcome", NULL), outcomes[i]);
        }
}

static void test_retries_then_delivered(void **state)
{
        (void)state;
        bit_tenant t, other;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], did[ID_MAX], body[128];
        sub s1, s2;
        wsink_request r[3];
        wsink *sink = new_sink(200, 0), *sink2 = new_sink(200, 0);

        assert_int_equal(wsink_answer(sink, 2, 500, 0), 0);
        bit_tenant_new("wh-dlv", &t);
        bit_tenant_new("wh-dlv-other", &other);
        sink_subscribe(&t, sink, "\"" PAID "\"", &s1);
        sink_subscribe(&other, sink2, ALL_TOPICS, &s2);
        double delivered0 = metric_sum("keelson_webhook_deliveries_total", "\"delivered\"");
        double errors0 = metric_sum(ATTEMPTS_METRIC, "\"http_error\"");
        double fed0 = metric_sum("keelson_webhook_feed_events_total", NULL);

        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        paid_invoice(&t, cust, inv);
        take_requests(sink, inv, r, 3);
        for (int i = 0; i < 3; i++) {
                assert_headers(&r[i]);
                assert_signed(&r[i], s1.secret);
                assert_string_equal(r[i].webhook_id, r[0].webhook_id); /* one id, every attempt */
                assert_string_equal(r[i].body, r[0].body);             /* the same bytes */
        }
        /* retried after the schedule's wait (1 s, less 20 % jitter, less a margin) */
        assert_true(r[1].at_ms - r[0].at_ms >= 700);
        assert_true(r[2].at_ms - r[1].at_ms >= 700);
        assert_paid_body(r[0].body, &t, inv);

        delivery_of(t.owner.token, s1.id, r[0].webhook_id, did);
        json_t *d = wait_delivery(t.owner.token, did, ST_DELIVERED, WAIT_MS);
        assert_retried_log(d, &s1, r);
        json_decref(d);

        /* billing.invoice_finalized came too, unsubscribed: neither sent nor a delivery */
        assert_int_equal(wsink_count(sink, NULL, FINALIZED), 0);
        assert_int_equal(wsink_count(sink, NULL, NULL), 3);
        assert_int_equal(n_deliveries(t.owner.token, s1.id, NULL), 1);
        /* the other tenant's subscription to everything: nothing of this tenant's */
        assert_int_equal(n_deliveries(other.owner.token, NULL, NULL), 0);
        assert_int_equal(wsink_count(sink2, NULL, NULL), 0);
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}", did);
        wit_call_fails_with(other.owner.token, "GetDelivery", body, "not_found",
                            "delivery not found");

        assert_grew("keelson_webhook_deliveries_total", "\"delivered\"", delivered0, 1);
        assert_grew(ATTEMPTS_METRIC, "\"http_error\"", errors0, 2);
        assert_grew("keelson_webhook_feed_events_total", NULL, fed0, 2);
        for (int i = 0; i < 3; i++) {
                wsink_request_free(&r[i]);
        }
}

static void test_schedule_runs_out_then_redeliver(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], did[ID_MAX], body[128];
        sub s;
        wsink_request r[6];
        wsink *sink = new_sink(500, 0);

        bit_tenant_new("wh-dlv-fail", &t);
        sink_subscribe(&t, sink, "\"" PAID "\"", &s);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        paid_invoice(&t, cust, inv);
        take_requests(sink, inv, r, 5);
        delivery_of(t.owner.token, s.id, r[0].webhook_id, did);
        json_t *d = wait_delivery(t.owner.token, did, ST_FAILED, WAIT_MS);
        assert_int_equal(bit_int(d, "attempts"), 5); /* the first, and one after each wait */
        assert_int_equal(bit_int(d, "lastHttpStatus"), 500);
        assert_int_equal(json_array_size(json_object_get(d, "attemptLog")), 5);
        for (size_t i = 0; i < 5; i++) {
                assert_int_equal(bit_int(attempt(d, i), "httpStatus"), 500);
        }
        json_decref(d);
        it_sleep_ms(2500); /* longer than a wait: no sixth attempt comes */
        assert_int_equal(wsink_count(sink, r[0].webhook_id, NULL), 5);
        assert_true(lists(t.owner.token, s.id, ST_FAILED, did));
        assert_false(lists(t.owner.token, s.id, ST_PENDING, did));
        assert_false(lists(t.owner.token, s.id, ST_DELIVERED, did));
        assert_true(lists(t.owner.token, NULL, ST_FAILED, did));
        json_t *sj = get_subscription(t.owner.token, s.id); /* 500s disable nothing */
        assert_true(json_is_true(json_object_get(sj, "enabled")));
        json_decref(sj);

        /* the tenant fixed its server: Redeliver, at once, the same event */
        assert_int_equal(wsink_default(sink, 200, 0), 0);
        snprintf(body, sizeof(body), "{\"id\":\"%s\"}", did);
        json_t *j = wit_call_ok(t.owner.token, "Redeliver", body);
        assert_string_equal(wit_str(j, "delivery", "id"), did);
        json_decref(j);
        d = wait_delivery(t.owner.token, did, ST_DELIVERED, WAIT_MS);
        assert_int_equal(bit_int(d, "attempts"), 6);
        assert_int_equal(bit_int(attempt(d, 5), "httpStatus"), 200);
        assert_string_equal(wit_str(attempt(d, 5), "outcome", NULL), "delivered");
        json_decref(d);
        assert_int_equal(wsink_wait(sink, NULL, inv, 6, WAIT_MS), 6);
        assert_int_equal(wsink_get(sink, NULL, inv, 5, &r[5]), 0);
        assert_string_equal(r[5].webhook_id, r[0].webhook_id);
        assert_string_equal(r[5].body, r[0].body);
        assert_signed(&r[5], s.secret);
        for (int i = 0; i < 6; i++) {
                wsink_request_free(&r[i]);
        }
}

static void test_gone_disables(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], inv2[BIT_ID_MAX], did[ID_MAX];
        sub g, c;
        wsink_request r;
        wsink *gone = new_sink(410, 0), *ctl = new_sink(200, 0);

        bit_tenant_new("wh-dlv-gone", &t);
        sink_subscribe(&t, gone, "\"" PAID "\"", &g);
        sink_subscribe(&t, ctl, "\"" PAID "\"", &c);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        paid_invoice(&t, cust, inv);
        take_requests(gone, inv, &r, 1);
        delivery_of(t.owner.token, g.id, r.webhook_id, did);
        json_t *d = wait_delivery(t.owner.token, did, ST_FAILED, WAIT_MS);
        assert_int_equal(bit_int(d, "attempts"), 1); /* no retry after a 410 */
        assert_int_equal(bit_int(attempt(d, 0), "httpStatus"), 410);
        json_decref(d);
        json_t *s = get_subscription(t.owner.token, g.id);
        assert_false(json_is_true(json_object_get(s, "enabled")));
        assert_string_equal(wit_str(s, "disabledReason", NULL), "gone");
        json_decref(s);
        s = get_subscription(t.owner.token, c.id); /* the tenant's other subscription: as it was */
        assert_true(json_is_true(json_object_get(s, "enabled")));
        assert_string_equal(wit_str(s, "disabledReason", NULL), "");
        json_decref(s);

        /* a later event: delivered to the other subscription, nothing for the disabled one */
        paid_invoice(&t, cust, inv2);
        assert_int_equal(wsink_wait(ctl, NULL, inv2, 1, WAIT_MS), 1);
        assert_int_equal(n_deliveries(t.owner.token, g.id, NULL), 1);
        assert_int_equal(wsink_count(gone, NULL, NULL), 1);
        wsink_request_free(&r);
}

/* The subscription's update, as UpdateWebhookSubscription's reply and the deliveries show it. */
static json_t *update_subscription(const char *token, const char *body)
{
        json_t *j = wit_call_ok(token, "UpdateWebhookSubscription", body);
        json_t *s = json_incref(json_object_get(j, "subscription"));
        json_decref(j);
        assert_non_null(s);
        return s;
}

/* Enables or disables subscription id by hand: disabled, its reason is "manual"; enabled, none. */
static void set_enabled(const char *token, const char *id, bool enabled)
{
        char body[160];

        snprintf(body, sizeof(body), "{\"id\":\"%s\",\"updateMask\":[\"enabled\"],\"enabled\":%s}",
                 id, enabled ? "true" : "false");
        json_t *u = update_subscription(token, body);
        assert_int_equal(json_is_true(json_object_get(u, "enabled")), enabled);
        assert_string_equal(wit_str(u, "disabledReason", NULL), enabled ? "" : "manual");
        json_decref(u);
}

static void test_update_subscription(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], inv2[BIT_ID_MAX], url[128], body[512];
        sub s, c;
        wsink *a = new_sink(200, 0), *b = new_sink(200, 0), *ctl = new_sink(200, 0);

        bit_tenant_new("wh-dlv-update", &t);
        sink_subscribe(&t, a, "\"" PAID "\"", &s);
        sink_subscribe(&t, ctl, "\"" PAID "\"", &c);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);

        /* A new address and description; the topics stay. */
        wsink_url(b, "127.0.0.1", url, sizeof(url));
        snprintf(body, sizeof(body),
                 "{\"id\":\"%s\",\"updateMask\":[\"url\",\"description\"],\"url\":\"%s\","
                 "\"description\":\"moved\",\"topics\":[\"" FINALIZED "\"]}",
                 s.id, url);
        json_t *u = update_subscription(t.owner.token, body);
        assert_string_equal(wit_str(u, "url", NULL), url);
        assert_string_equal(wit_str(u, "description", NULL), "moved");
        json_t *topics = json_object_get(u, "topics");
        assert_int_equal(json_array_size(topics), 1);
        assert_string_equal(json_string_value(json_array_get(topics, 0)), PAID);
        assert_true(json_is_true(json_object_get(u, "enabled")));
        json_decref(u);

        /* Disabled by hand: an event fanned out meanwhile makes no delivery for it. */
        set_enabled(t.owner.token, s.id, false);
        paid_invoice(&t, cust, inv);
        assert_int_equal(wsink_wait(ctl, NULL, inv, 1, WAIT_MS), 1); /* the event was fanned out */

        /* Enabled again: the next event goes to the new address, the old one hears nothing. */
        set_enabled(t.owner.token, s.id, true);
        paid_invoice(&t, cust, inv2);
        assert_int_equal(wsink_wait(b, NULL, inv2, 1, WAIT_MS), 1);
        assert_int_equal(n_deliveries(t.owner.token, s.id, NULL), 1);
        assert_int_equal(wsink_count(b, NULL, inv), 0);
        assert_int_equal(wsink_count(a, NULL, NULL), 0);

        /* Refused, with docs/api.md's messages, and nothing changed. */
        static const char *const refused[][2] = {
            {"\"updateMask\":[]",
             "update_mask: name at least one of url, topics, description, enabled"},
            {"\"updateMask\":[\"secret\"]", "update_mask: unknown field \"secret\""},
            {"\"updateMask\":[\"enabled\",\"enabled\"],\"enabled\":false",
             "update_mask: \"enabled\" named twice"},
            {"\"updateMask\":[\"url\"],\"url\":\"ftp://example.test/hook\"",
             "url: the scheme is not http or https"},
            {"\"updateMask\":[\"topics\"],\"topics\":[\"no.such_topic\"]",
             "topics: unknown topic 'no.such_topic'"},
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                snprintf(body, sizeof(body), "{\"id\":\"%s\",%s}", s.id, refused[i][0]);
                wit_call_fails_with(t.owner.token, "UpdateWebhookSubscription", body,
                                    "invalid_argument", refused[i][1]);
        }
        wit_call_fails_with(t.owner.token, "UpdateWebhookSubscription",
                            "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\","
                            "\"updateMask\":[\"description\"],\"description\":\"x\"}",
                            "not_found", "webhook subscription not found");
        u = get_subscription(t.owner.token, s.id);
        assert_string_equal(wit_str(u, "url", NULL), url);
        assert_string_equal(wit_str(u, "description", NULL), "moved");
        assert_true(json_is_true(json_object_get(u, "enabled")));
        json_decref(u);
}

static void test_addresses(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], did[ID_MAX], url[128], body[700], host[64];
        sub s;
        wsink_request r;
        wsink *sink = new_sink(200, 0);
        char refused[4][128] = {"http://10.0.0.1/hook", "http://169.254.169.254/"};

        /* loopback, but not the allow-list's 127.0.0.1/32 */
        snprintf(refused[2], sizeof(refused[2]), "http://127.0.0.2:%d/hook", wsink_port(sink));
        snprintf(refused[3], sizeof(refused[3]), "http://[::1]:%d/hook", wsink_port(sink));
        bit_tenant_new("wh-dlv-addr", &t);
        /* each refused with the address and the reason (docs/api.md) */
        static const char *const address[4] = {"10.0.0.1", "169.254.169.254", "127.0.0.2", "::1"};
        static const char *const reason[4] = {"private", "link_local", "loopback", "loopback"};
        for (int i = 0; i < 4; i++) {
                char message[128];
                snprintf(body, sizeof(body), "{\"url\":\"%s\",\"topics\":[\"" PAID "\"]}",
                         refused[i]);
                snprintf(message, sizeof(message),
                         "url: %s is a %s address; deliveries may not reach it", address[i],
                         reason[i]);
                wit_call_fails_with(t.owner.token, "CreateWebhookSubscription", body,
                                    "invalid_argument", message);
        }
        json_t *j = wit_call_ok(t.owner.token, "ListWebhookSubscriptions", "{}");
        assert_int_equal(json_array_size(json_object_get(j, "subscriptions")), 0);
        json_decref(j);

        /* a name that resolves to 127.0.0.1, which the fixture allows */
        snprintf(url, sizeof(url), "http://localhost:%d/hook", wsink_port(sink));
        subscribe(&t, url, "\"" PAID "\"", &s);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        paid_invoice(&t, cust, inv);
        take_requests(sink, inv, &r, 1);
        snprintf(host, sizeof(host), "localhost:%d", wsink_port(sink));
        assert_string_equal(r.host, host);
        assert_signed(&r, s.secret);
        delivery_of(t.owner.token, s.id, r.webhook_id, did);
        json_decref(wait_delivery(t.owner.token, did, ST_DELIVERED, WAIT_MS));
        wsink_request_free(&r);
}

/* The outcome of the first attempt of the subscription's first delivery; "" while none. */
static void first_outcome(PGconn *pg, const char *sub_id, char *out, size_t len)
{
        const char *p[1] = {sub_id};
        PGresult *res = it_sql(pg,
                               "SELECT a.outcome FROM webhook.delivery_attempts a"
                               " JOIN webhook.deliveries d ON d.tenant_id = a.tenant_id"
                               " AND d.id = a.delivery_id WHERE d.subscription_id = $1::uuid"
                               " ORDER BY a.at_ms, a.n LIMIT 1",
                               1, p);
        snprintf(out, len, "%s", PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
        PQclear(res);
}

/*
 * The allow-list is checked where the connection is made: the stack's
 * replicas stopped, one of ours whose list lacks 127.0.0.1 refuses to
 * connect to a sink there (refused_address) although the URL was accepted
 * at creation; once the stack's replicas (which allow it) run again, the
 * retry is delivered.
 */
static void test_refused_at_connect(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BIT_ID_MAX], outcome[64] = "";
        sub s;
        wsink *sink = new_sink(200, 0);

        bit_tenant_new("wh-dlv-refuse", &t);
        sink_subscribe(&t, sink, "\"" PAID "\"", &s);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        pause_stack_webhooks();
        start_mine(0, "127.0.0.2/32");
        paid_invoice(&t, cust, inv);
        PGconn *pg = it_pg_connect(wit_stack());
        for (int waited = 0; outcome[0] == '\0' && waited < WAIT_MS; waited += 100) {
                it_sleep_ms(100);
                first_outcome(pg, s.id, outcome, sizeof(outcome));
        }
        PQfinish(pg);
        assert_string_equal(outcome, "refused_address");
        it_service_stop(&mine[0]);
        assert_int_equal(wsink_count(sink, NULL, NULL), 0); /* not a byte reached it */
        resume_stack_webhooks();

        json_t *l = list_deliveries(t.owner.token, s.id, NULL);
        assert_int_equal(json_array_size(json_object_get(l, "deliveries")), 1);
        char did[ID_MAX];
        snprintf(did, sizeof(did), "%s",
                 wit_str(json_array_get(json_object_get(l, "deliveries"), 0), "id", NULL));
        json_decref(l);
        json_t *d = wait_delivery(t.owner.token, did, ST_DELIVERED, WAIT_MS);
        json_t *a = attempt(d, 0);
        assert_string_equal(wit_str(a, "outcome", NULL), "refused_address");
        assert_int_equal(bit_int(a, "httpStatus"), 0);
        assert_string_not_equal(wit_str(a, "detail", NULL), "");
        json_decref(d);
        assert_int_equal(wsink_wait(sink, NULL, inv, 1, WAIT_MS), 1);
}

/* Waits until fast has every one of the n invoices; returns when it had them (Unix ms). */
static int64_t wait_all(wsink *fast, char inv[][BIT_ID_MAX], int n, long timeout_ms)
{
        int64_t until = wsink_now_ms() + timeout_ms;
        for (int i = 0; i < n; i++) {
                long left = (long)(until - wsink_now_ms());
                if (wsink_wait(fast, NULL, inv[i], 1, left > 0 ? left : 0) < 1) {
                        fail_msg("invoice %d of %d never reached the sink", i + 1, n);
                }
        }
        return wsink_now_ms();
}

/* Waits (at most WAIT_MS) until the subscription has n deliveries of the status. */
static void wait_n_deliveries(const char *token, const char *sub_id, const char *status, size_t n)
{
        size_t got = 0;
        for (int waited = 0; waited < WAIT_MS; waited += 200) {
                if ((got = n_deliveries(token, sub_id, status)) == n) {
                        return;
                }
                it_sleep_ms(200);
        }
        fail_msg("subscription %s: %zu deliveries %s, wanted %zu", sub_id, got, status, n);
}

/* The first attempt of one of the subscription's deliveries that timed out; fails without. */
static json_t *a_timed_out_attempt(const char *token, const char *sub_id)
{
        for (int waited = 0; waited < WAIT_MS; waited += 500) {
                json_t *l = list_deliveries(token, sub_id, NULL), *item;
                size_t i;
                json_array_foreach(json_object_get(l, "deliveries"), i, item)
                {
                        json_t *d = get_delivery(token, wit_str(item, "id", NULL));
                        json_t *a = json_array_get(json_object_get(d, "attemptLog"), 0);
                        if (a != NULL && strcmp(wit_str(a, "outcome", NULL), "timeout") == 0) {
                                json_incref(a);
                                json_decref(d);
                                json_decref(l);
                                return a;
                        }
                        json_decref(d);
                }
                json_decref(l);
                it_sleep_ms(500);
        }
        fail_msg("no attempt of subscription %s timed out", sub_id);
        return NULL;
}

static void test_slow_sink_holds_up_no_other(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[SLOW_N][BIT_ID_MAX];
        sub a, b;
        wsink *slow = new_sink(200, 5000), *fast = new_sink(200, 0); /* 5 s: past the 2 s timeout */

        bit_tenant_new("wh-dlv-slow", &t);
        sink_subscribe(&t, slow, "\"" PAID "\"", &a);
        sink_subscribe(&t, fast, "\"" PAID "\"", &b);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        double timeouts0 = metric_sum(ATTEMPTS_METRIC, "\"timeout\"");
        for (int i = 0; i < SLOW_N; i++) {
                paid_invoice(&t, cust, inv[i]);
        }
        int64_t last = wsink_now_ms();
        int64_t all = wait_all(fast, inv, SLOW_N, WAIT_MS);
        print_message("the other sink had all %d events %lld ms after the last was made\n", SLOW_N,
                      (long long)(all - last));
        if (all - last > FAST_MS) {
                fail_msg("the other sink had all %d events %lld ms after the last, wanted %d",
                         SLOW_N, (long long)(all - last), FAST_MS);
        }
        wait_n_deliveries(t.owner.token, b.id, ST_DELIVERED, SLOW_N); /* recorded after the 200 */
        assert_true(wsink_count(slow, NULL, NULL) >= 1);              /* it was tried, meanwhile */

        /* the slow sink's attempts end at the timeout, not at its answer 5 s later */
        json_t *at = a_timed_out_attempt(t.owner.token, a.id);
        assert_int_equal(bit_int(at, "httpStatus"), 0);
        assert_true(bit_int(at, "latencyMs") >= 1500);
        assert_true(bit_int(at, "latencyMs") < 4500);
        json_decref(at);
        assert_int_equal(n_deliveries(t.owner.token, a.id, ST_DELIVERED), 0);
        assert_grew(ATTEMPTS_METRIC, "\"timeout\"", timeouts0, 1);
}

/* Exactly n deliveries for the subscription, all delivered (waits for the last ones). */
static void assert_all_delivered(PGconn *pg, const char *sub_id, long n)
{
        const char *p[1] = {sub_id};
        long done = -1;

        assert_int_equal(
            it_sql_long(pg, "SELECT count(*) FROM webhook.deliveries WHERE subscription_id = $1", 1,
                        p),
            n);
        for (int waited = 0; waited < WAIT_MS; waited += 200) {
                done = it_sql_long(pg,
                                   "SELECT count(*) FROM webhook.deliveries"
                                   " WHERE subscription_id = $1 AND status = 2",
                                   1, p);
                if (done == n) {
                        return;
                }
                it_sleep_ms(200);
        }
        fail_msg("%ld of %ld deliveries delivered", done, n);
}

/* Every id the sink received is an event id of a delivery of the subscription; how many. */
static long ids_are_deliveries(PGconn *pg, wsink *sink, const char *sub_id)
{
        static char ids[BACKLOG_N * 2][WSINK_VALUE_MAX];
        char list[BACKLOG_N * 2 * 40 + 4] = "{";
        int n = wsink_ids(sink, NULL, ids, BACKLOG_N * 2);

        for (int i = 0; i < n; i++) {
                strcat(list, ids[i]);
                strcat(list, i + 1 < n ? "," : "");
        }
        strcat(list, "}");
        const char *p[2] = {sub_id, list};
        assert_int_equal(it_sql_long(pg,
                                     "SELECT count(*) FROM webhook.deliveries"
                                     " WHERE subscription_id = $1 AND event_id = ANY ($2::uuid[])",
                                     2, p),
                         n);
        return n;
}

static void test_killed_during_backlog(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[BACKLOG_N][BIT_ID_MAX];
        static char ids[BACKLOG_N * 2][WSINK_VALUE_MAX];
        sub s;
        wsink *sink = new_sink(200, 300); /* slow enough that the kill comes mid-backlog */

        bit_tenant_new("wh-dlv-kill", &t);
        sink_subscribe(&t, sink, "\"" PAID "\"", &s);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        pause_stack_webhooks();
        for (int i = 0; i < BACKLOG_N; i++) {
                paid_invoice(&t, cust, inv[i]); /* billing's outbox keeps them */
        }
        start_mine(0, "127.0.0.1/32");
        assert_true(wsink_wait(sink, NULL, NULL, 3, WAIT_MS) >= 3);
        it_pid_stop(&mine[0].pid, SIGKILL);
        int before = wsink_ids(sink, NULL, ids, BACKLOG_N * 2);
        if (before >= BACKLOG_N) {
                fail_msg("all %d events had reached the sink before the kill", BACKLOG_N);
        }
        start_mine(1, "127.0.0.1/32");
        wait_all(sink, inv, BACKLOG_N, 60000);
        it_service_stop(&mine[1]);
        resume_stack_webhooks();

        PGconn *pg = it_pg_connect(wit_stack());
        assert_all_delivered(pg, s.id, BACKLOG_N);
        assert_int_equal(ids_are_deliveries(pg, sink, s.id), BACKLOG_N);
        PQfinish(pg);
        print_message("killed after %d of %d events had reached the sink\n", before, BACKLOG_N);
}

/*
 * The feed reads below the xmin of its snapshot: an event whose transaction
 * took its xid before others committed is neither skipped nor doubled when
 * it commits after them, with an outbox id above theirs.
 */
static void test_late_commit_not_skipped(void **state)
{
        (void)state;
        bit_tenant t;
        char cust[BIT_ID_MAX], inv[2][BIT_ID_MAX], xid[32], late_id[40];
        sub s;
        wsink *sink = new_sink(200, 0);

        bit_tenant_new("wh-dlv-late", &t);
        sink_subscribe(&t, sink, "\"" PAID "\"", &s);
        bit_customer(&t, "USD", 0, "pm_card_visa", "", cust);
        paid_invoice(&t, cust, inv[0]);
        wait_all(sink, inv, 1, WAIT_MS);

        PGconn *late = it_pg_connect(wit_stack());
        PGconn *pg = it_pg_connect(wit_stack());
        PQclear(it_sql(late, "BEGIN", 0, NULL));
        PGresult *r = it_sql(late, "SELECT pg_current_xact_id()::text", 0, NULL);
        snprintf(xid, sizeof(xid), "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        paid_invoice(&t, cust, inv[1]); /* commits after late took its xid */
        it_sleep_ms(1000);              /* the feed polls every 100 ms meanwhile */
        const char *xp[1] = {xid};
        assert_int_equal(it_sql_long(pg,
                                     "SELECT count(*) FROM webhook.feed_cursors"
                                     " WHERE source = 'billing' AND xid >= $1::xid8",
                                     1, xp),
                         0);
        assert_int_equal(wsink_count(sink, NULL, inv[1]), 0);

        /* A copy of the first invoice_paid under a new event id, in late: its id is the largest. */
        const char *tp[1] = {t.owner.tenant_id};
        r = it_sql(late,
                   "INSERT INTO billing.outbox (event_id, topic, tenant_id, payload)"
                   " SELECT gen_random_uuid(), topic, tenant_id, payload FROM billing.outbox"
                   " WHERE tenant_id = $1::uuid AND topic = '" PAID "' ORDER BY id LIMIT 1"
                   " RETURNING event_id::text",
                   1, tp);
        assert_int_equal(PQntuples(r), 1);
        snprintf(late_id, sizeof(late_id), "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        PQclear(it_sql(late, "COMMIT", 0, NULL));
        PQfinish(late);

        wait_all(sink, inv, 2, WAIT_MS);
        assert_int_equal(wsink_wait(sink, late_id, NULL, 1, WAIT_MS), 1);
        assert_all_delivered(pg, s.id, 3);
        const char *ep[2] = {s.id, late_id};
        assert_int_equal(it_sql_long(pg,
                                     "SELECT count(*) FROM webhook.deliveries"
                                     " WHERE subscription_id = $1 AND event_id = $2::uuid",
                                     2, ep),
                         1);
        PQfinish(pg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_retries_then_delivered),
            cmocka_unit_test(test_schedule_runs_out_then_redeliver),
            cmocka_unit_test(test_gone_disables),
            cmocka_unit_test(test_update_subscription),
            cmocka_unit_test(test_addresses),
            cmocka_unit_test_teardown(test_refused_at_connect, teardown_replicas),
            cmocka_unit_test(test_slow_sink_holds_up_no_other),
            cmocka_unit_test_teardown(test_killed_during_backlog, teardown_replicas),
            cmocka_unit_test(test_late_commit_not_skipped),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
