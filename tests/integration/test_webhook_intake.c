/*
 * Webhook intake end to end: a provider's POST to the gateway's
 * /webhooks/<provider>/<endpoint id>, signed as Stripe and Standard
 * Webhooks senders sign (computed here with OpenSSL directly, not with the
 * service's own code), answered, and the rows it left in webhook.*.
 *
 * - Stripe: stored once, pending for a type billing acts on, ignored for
 *   another; the same event five more times answers 200 "duplicate" with
 *   the same id and leaves one row.
 * - Refusals (400, nothing stored): a tampered body, a wrong secret, a
 *   stale and a future timestamp, no signature header, a malformed one, a
 *   body without an event id. Unknown, disabled and other-provider
 *   endpoints: 404. Anything but POST: 405.
 * - Rotation: the old and the new secret both verify until the old one's
 *   time, then the old one is refused.
 * - Standard Webhooks: the webhook-* headers, several signatures of which
 *   one matches, deduplicated by webhook-id.
 * - Operators: the events listed newest first with their status, one read
 *   back with its body; another tenant sees none of it.
 */
#include <setjmp.h>
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
#include <openssl/params.h>

#include "webhook_it.h"

static char owner[WIT_TOKEN_MAX], other[WIT_TOKEN_MAX];

static int setup(void **state)
{
        (void)state;
        if (wit_setup() != 0 ||
            it_new_session(wit_stack()->gateway_url, "wh", owner, NULL, NULL) != 0 ||
            it_new_session(wit_stack()->gateway_url, "wh-other", other, NULL, NULL) != 0) {
                return -1;
        }
        return 0;
}

static long attempts_of(const char *endpoint_id, const char *event_id)
{
        PGconn *pg = PQconnectdb(wit_stack()->pg_dsn);
        const char *p[2] = {endpoint_id, event_id};
        long n = it_sql_long(pg,
                             "SELECT attempts FROM webhook.received_events WHERE"
                             " endpoint_id = $1::uuid AND provider_event_id = $2",
                             2, p);
        PQfinish(pg);
        return n;
}

/* Waits (at most 20 s) until the applier has judged the event: no longer pending. */
static void wait_applied(const char *endpoint_id, const char *event_id)
{
        for (int i = 0; i < 200 && wit_status_of(endpoint_id, event_id) == 1; i++) {
                it_sleep_ms(100);
        }
        assert_int_not_equal(wit_status_of(endpoint_id, event_id), 1);
        assert_true(attempts_of(endpoint_id, event_id) >= 1);
}

static void expect_refused(long status, it_http_response *r, const char *reason)
{
        if (status != 400 || strstr(r->body, "invalid_argument") == NULL ||
            strstr(r->body, reason) == NULL) {
                fail_msg("wanted 400 %s, got %ld %s", reason, status, r->body);
        }
        it_http_response_free(r);
}

/* ---- the tests ---------------------------------------------------------------------------- */

static void test_stripe_stored_once(void **state)
{
        (void)state;
        const char *secret = "whsec_stripeTestSecret0123456789abcdef";
        char path[128], id[64], first[64];
        it_http_response r;
        long now = (long)time(NULL);
        const char *body = "{\"id\":\"evt_paid_1\",\"object\":\"event\",\"type\":\"invoice.paid\","
                           "\"created\":1764892800,"
                           "\"data\":{\"object\":{\"id\":\"in_1\",\"amount_paid\":1000}}}";

        wit_endpoint(owner, "PROVIDER_STRIPE", secret, path, id);
        assert_int_equal(wit_stripe_deliver(path, secret, now, body, &r), 200);
        json_t *j = json_loads(r.body, 0, NULL);
        snprintf(first, sizeof(first), "%s", wit_str(j, "eventId", NULL));
        assert_true(strlen(first) == 36);
        assert_null(json_object_get(j, "duplicate")); /* false: left out */
        json_decref(j);
        it_http_response_free(&r);
        for (int i = 0; i < 5; i++) {
                /* a retry signs again, later */
                assert_int_equal(wit_stripe_deliver(path, secret, now + i, body, &r), 200);
                j = json_loads(r.body, 0, NULL);
                assert_string_equal(wit_str(j, "eventId", NULL), first);
                assert_true(json_is_true(json_object_get(j, "duplicate")));
                json_decref(j);
                it_http_response_free(&r);
        }
        assert_int_equal(wit_rows_of(id, "evt_paid_1"), 1);
        /* A type billing acts on goes to the applier (billing then ignores it: it names no
         * keelson invoice); another is ignored as it is stored, never applied. */
        wait_applied(id, "evt_paid_1");
        const char *other_type = "{\"id\":\"evt_misc_1\",\"type\":\"customer.created\"}";
        assert_int_equal(wit_stripe_deliver(path, secret, now, other_type, NULL), 200);
        assert_int_equal(wit_status_of(id, "evt_misc_1"), 3); /* ignored */
        assert_int_equal(attempts_of(id, "evt_misc_1"), 0);

        /* The body is stored byte for byte. */
        PGconn *pg = PQconnectdb(wit_stack()->pg_dsn);
        const char *p[3] = {id, "evt_paid_1", body};
        assert_int_equal(it_sql_long(pg,
                                     "SELECT count(*) FROM webhook.received_events WHERE"
                                     " endpoint_id = $1::uuid AND provider_event_id = $2"
                                     " AND body = convert_to($3, 'UTF8') AND type = 'invoice.paid'",
                                     3, p),
                         1);
        PQfinish(pg);
}

static void test_refusals_store_nothing(void **state)
{
        (void)state;
        const char *secret = "whsec_refusalsSecret0123456789abcdef";
        char path[128], id[64], sig[160], h[220];
        it_http_response r;
        long now = (long)time(NULL);
        const char *body = "{\"id\":\"evt_r\",\"type\":\"invoice.paid\"}";

        wit_endpoint(owner, "PROVIDER_STRIPE", secret, path, id);

        /* tampered: signed one body, sent another */
        wit_stripe_sign(secret, now, body, sig);
        snprintf(h, sizeof(h), "Stripe-Signature: %s", sig);
        const char *tampered_h[] = {h, NULL};
        expect_refused(
            wit_deliver(path, "{\"id\":\"evt_r\",\"type\":\"invoice.paid\" }", tampered_h, &r), &r,
            "signature_mismatch");
        expect_refused(wit_stripe_deliver(path, "whsec_someoneElse0123456789", now, body, &r), &r,
                       "signature_mismatch");
        expect_refused(wit_stripe_deliver(path, secret, (long)time(NULL) - 330, body, &r), &r,
                       "timestamp_too_old");
        expect_refused(wit_stripe_deliver(path, secret, (long)time(NULL) + 330, body, &r), &r,
                       "timestamp_too_new");
        expect_refused(wit_deliver(path, body, NULL, &r), &r, "missing_header");
        const char *malformed[] = {"Stripe-Signature: t=abc,v1=00", NULL};
        expect_refused(wit_deliver(path, body, malformed, &r), &r, "malformed_header");
        const char *no_v1[] = {"Stripe-Signature: t=1700000000,v0=abcd", NULL};
        expect_refused(wit_deliver(path, body, no_v1, &r), &r, "no_signature");
        const char *twice[] = {h, h, NULL};
        expect_refused(wit_deliver(path, body, twice, &r), &r, "sent twice");
        assert_int_equal(wit_rows_of(id, "evt_r"), 0);

        /* a signed body that is no Stripe event */
        expect_refused(wit_stripe_deliver(path, secret, now, "{\"type\":\"x\"}", &r), &r,
                       "no \\\"id\\\"");
        expect_refused(wit_stripe_deliver(path, secret, now, "not json", &r), &r, "no \\\"id\\\"");

        /* Endpoints that do not take it: 404, the same for each. */
        char wrong[160];
        snprintf(wrong, sizeof(wrong), "/webhooks/standard/%s", id);
        assert_int_equal(wit_stripe_deliver(wrong, secret, now, body, NULL), 404);
        assert_int_equal(wit_stripe_deliver("/webhooks/stripe/6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11",
                                            secret, now, body, NULL),
                         404);
        assert_int_equal(wit_stripe_deliver("/webhooks/stripe/not-a-uuid", secret, now, body, NULL),
                         404);
        assert_int_equal(wit_stripe_deliver("/webhooks/paypal/x", secret, now, body, NULL), 404);
        assert_int_equal(it_http_get(wit_stack()->gateway_url, path, &r), 0);
        assert_int_equal(r.status, 405);
        it_http_response_free(&r);

        char upd[256];
        snprintf(upd, sizeof(upd), "{\"id\":\"%s\",\"updateMask\":[\"enabled\"],\"enabled\":false}",
                 id);
        json_decref(wit_call_ok(owner, "UpdateIntakeEndpoint", upd));
        assert_int_equal(wit_stripe_deliver(path, secret, now, body, NULL), 404);
        snprintf(upd, sizeof(upd), "{\"id\":\"%s\",\"updateMask\":[\"enabled\"],\"enabled\":true}",
                 id);
        json_decref(wit_call_ok(owner, "UpdateIntakeEndpoint", upd));
        assert_int_equal(wit_stripe_deliver(path, secret, now, body, NULL), 200);
        assert_int_equal(wit_rows_of(id, "evt_r"), 1);
}

static void test_rotation(void **state)
{
        (void)state;
        const char *old_secret = "whsec_rotateOld0123456789abcdefgh";
        const char *new_secret = "whsec_rotateNew0123456789abcdefgh";
        char path[128], id[64], req[256];
        long now = (long)time(NULL);

        wit_endpoint(owner, "PROVIDER_STRIPE", old_secret, path, id);
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"secret\":\"%s\",\"previousExpiresInS\":\"2\"}",
                 id, new_secret);
        json_t *j = wit_call_ok(owner, "RotateIntakeSecret", req);
        json_t *secrets = json_object_get(json_object_get(j, "endpoint"), "secrets");
        assert_int_equal(json_array_size(secrets), 2);
        assert_string_equal(wit_str(json_array_get(secrets, 0), "hint", NULL), "efgh");
        /* the new one verifies until rotated, the old one until its time */
        assert_null(json_object_get(json_array_get(secrets, 0), "expiresAtUnixMs"));
        assert_non_null(json_object_get(json_array_get(secrets, 1), "expiresAtUnixMs"));
        json_decref(j);
        assert_int_equal(wit_stripe_deliver(path, old_secret, now, "{\"id\":\"evt_old\"}", NULL),
                         200);
        assert_int_equal(wit_stripe_deliver(path, new_secret, now, "{\"id\":\"evt_new\"}", NULL),
                         200);
        it_sleep_ms(2500);
        it_http_response r;
        expect_refused(wit_stripe_deliver(path, old_secret, now, "{\"id\":\"evt_old2\"}", &r), &r,
                       "signature_mismatch");
        assert_int_equal(wit_stripe_deliver(path, new_secret, now, "{\"id\":\"evt_new2\"}", NULL),
                         200);
        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", id);
        j = wit_call_ok(owner, "GetIntakeEndpoint", req);
        assert_int_equal(
            json_array_size(json_object_get(json_object_get(j, "endpoint"), "secrets")), 1);
        json_decref(j);
        /* A secret Stripe's rules refuse is refused when given. */
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"secret\":\"has space\"}", id);
        wit_call_fails_with(owner, "RotateIntakeSecret", req, "invalid_argument",
                            "secret: only printable ASCII without spaces (a stray newline?)");
}

static void test_standard_webhooks(void **state)
{
        (void)state;
        /* 32 bytes of key, base64 */
        const char *secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwYx9ibJr7nW8=";
        char path[128], id[64], sig[64], sigs[200], h_id[100], h_ts[100];
        long now = (long)time(NULL);
        const char *body = "{\"type\":\"invoice.paid\",\"timestamp\":\"2026-12-05T00:00:00Z\","
                           "\"data\":{\"id\":\"x\"}}";

        wit_endpoint(owner, "PROVIDER_STANDARD", secret, path, id);
        wit_standard_sign(secret, "msg_std_1", now, body, sig);
        /* several signatures, one of which matches */
        snprintf(sigs, sizeof(sigs),
                 "webhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= %s v1a,abc",
                 sig);
        snprintf(h_id, sizeof(h_id), "webhook-id: msg_std_1");
        snprintf(h_ts, sizeof(h_ts), "webhook-timestamp: %ld", now);
        const char *headers[] = {h_id, h_ts, sigs, NULL};
        assert_int_equal(wit_deliver(path, body, headers, NULL), 200);
        assert_int_equal(wit_deliver(path, body, headers, NULL), 200);
        assert_int_equal(wit_rows_of(id, "msg_std_1"), 1);
        assert_int_equal(wit_status_of(id, "msg_std_1"), 3);

        /* the id is signed: another id with the same signature is refused */
        const char *other_id[] = {"webhook-id: msg_std_2", h_ts, sigs, NULL};
        it_http_response r;
        expect_refused(wit_deliver(path, body, other_id, &r), &r, "signature_mismatch");
        const char *no_id[] = {h_ts, sigs, NULL};
        expect_refused(wit_deliver(path, body, no_id, &r), &r, "missing_header");
        assert_int_equal(wit_rows_of(id, "msg_std_2"), 0);
}

static void test_operators_read_events(void **state)
{
        (void)state;
        const char *secret = "whsec_operatorsSecret0123456789ab";
        char path[128], id[64], req[256];
        long now = (long)time(NULL);

        wit_endpoint(owner, "PROVIDER_STRIPE", secret, path, id);
        assert_int_equal(
            wit_stripe_deliver(path, secret, now,
                               "{\"id\":\"evt_a\",\"type\":\"invoice.paid\",\"created\":1}", NULL),
            200);
        assert_int_equal(
            wit_stripe_deliver(path, secret, now, "{\"id\":\"evt_b\",\"type\":\"ping\"}", NULL),
            200);

        wait_applied(id, "evt_a");
        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\"}", id);
        json_t *j = wit_call_ok(owner, "ListReceivedEvents", req);
        json_t *events = json_object_get(j, "events");
        assert_int_equal(json_array_size(events), 2);
        assert_string_equal(wit_str(json_array_get(events, 0), "providerEventId", NULL), "evt_b");
        assert_string_equal(wit_str(json_array_get(events, 0), "status", NULL),
                            "RECEIVED_STATUS_IGNORED");
        /* applied, and billing found nothing of keelson's in it */
        assert_string_equal(wit_str(json_array_get(events, 1), "status", NULL),
                            "RECEIVED_STATUS_IGNORED");
        assert_non_null(strstr(wit_str(json_array_get(events, 1), "lastError", NULL), "ignored"));
        char event_id[64];
        snprintf(event_id, sizeof(event_id), "%s", wit_str(json_array_get(events, 1), "id", NULL));
        json_decref(j);

        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\",\"status\":\"RECEIVED_STATUS_IGNORED\"}",
                 id);
        j = wit_call_ok(owner, "ListReceivedEvents", req);
        assert_int_equal(json_array_size(json_object_get(j, "events")), 2);
        json_decref(j);
        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\",\"status\":\"RECEIVED_STATUS_PENDING\"}",
                 id);
        j = wit_call_ok(owner, "ListReceivedEvents", req);
        assert_int_equal(json_array_size(json_object_get(j, "events")), 0);
        json_decref(j);

        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", event_id);
        j = wit_call_ok(owner, "GetReceivedEvent", req);
        /* bytes travel as base64 in JSON */
        const char *b64 = wit_str(j, "event", "body");
        unsigned char raw[256];
        int n = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)strlen(b64));
        assert_true(n > 0);
        raw[n] = '\0';
        assert_non_null(strstr((char *)raw, "\"evt_a\""));
        json_decref(j);

        /* another tenant: not found, and an empty list */
        wit_call_fails_with(other, "GetReceivedEvent", req, "not_found",
                            "received event not found");
        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", id);
        wit_call_fails_with(other, "GetIntakeEndpoint", req, "not_found",
                            "intake endpoint not found");
        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\"}", id);
        j = wit_call_ok(other, "ListReceivedEvents", req);
        assert_int_equal(json_array_size(json_object_get(j, "events")), 0);
        json_decref(j);
        /* no token: 401 */
        wit_call_fails_with(NULL, "ListIntakeEndpoints", "{}", "unauthenticated",
                            "missing bearer token");
        /* the intake is not a Connect method */
        wit_call_fails_with(owner, "ReceiveWebhook", "{}", "unimplemented", "unknown method");
}

static void test_bad_endpoint_requests(void **state)
{
        (void)state;
        wit_call_fails_with(owner, "CreateIntakeEndpoint",
                            "{\"provider\":\"PROVIDER_STRIPE\",\"secret\":\"\"}",
                            "invalid_argument", "secret: empty");
        wit_call_fails_with(owner, "CreateIntakeEndpoint",
                            "{\"provider\":\"PROVIDER_STANDARD\",\"secret\":\"whsec_notbase64!!\"}",
                            "invalid_argument",
                            "secret: not standard padded base64 after \"whsec_\"");
        wit_call_fails_with(owner, "CreateIntakeEndpoint",
                            "{\"secret\":\"whsec_abcdefghijklmnop\"}", "invalid_argument",
                            "provider: PROVIDER_STRIPE or PROVIDER_STANDARD");
        wit_call_fails_with(
            owner, "CreateIntakeEndpoint",
            "{\"provider\":\"PROVIDER_STRIPE\",\"secret\":\"whsec_abcdefghijklmnop\","
            "\"toleranceS\":3601}",
            "invalid_argument", "tolerance_s: 1..3600 seconds (0: 300)");
        wit_call_fails_with(
            owner, "UpdateIntakeEndpoint",
            "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\",\"updateMask\":[\"nope\"]}",
            "invalid_argument", "update_mask: unknown field \"nope\"");
        wit_call_fails_with(owner, "UpdateIntakeEndpoint",
                            "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\",\"updateMask\":[]}",
                            "invalid_argument",
                            "update_mask: name at least one of description, tolerance_s, enabled");
        wit_call_fails_with(owner, "GetIntakeEndpoint",
                            "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\"}", "not_found",
                            "intake endpoint not found");
        json_t *j = wit_call_ok(owner, "ListIntakeEndpoints", "{}");
        assert_true(json_array_size(json_object_get(j, "endpoints")) >= 1);
        json_decref(j);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_stripe_stored_once),
            cmocka_unit_test(test_refusals_store_nothing),
            cmocka_unit_test(test_rotation),
            cmocka_unit_test(test_standard_webhooks),
            cmocka_unit_test(test_operators_read_events),
            cmocka_unit_test(test_bad_endpoint_requests),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
