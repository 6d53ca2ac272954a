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

#include "it_support.h"

#define WH_PATH   "/keelson.webhook.v1.WebhookService/"
#define TOKEN_MAX 512

static it_stack st;
static char owner[TOKEN_MAX], other[TOKEN_MAX];

static int setup(void **state)
{
        (void)state;
        if (it_stack_load(&st) != 0 ||
            it_new_session(st.gateway_url, "wh", owner, NULL, NULL) != 0 ||
            it_new_session(st.gateway_url, "wh-other", other, NULL, NULL) != 0) {
                return -1;
        }
        return 0;
}

/* ---- calls --------------------------------------------------------------------------- */

static json_t *call_ok(const char *token, const char *method, const char *json)
{
        it_http_response r;
        char path[128];
        json_error_t err;

        snprintf(path, sizeof(path), WH_PATH "%s", method);
        it_post_json(st.gateway_url, path, json, token, &r);
        if (r.status != 200) {
                fail_msg("%s: HTTP %ld %s", method, r.status, r.body);
        }
        json_t *j = json_loads(r.body, 0, &err);
        it_http_response_free(&r);
        assert_non_null(j);
        return j;
}

static void call_fails(const char *token, const char *method, const char *json, const char *code)
{
        it_http_response r;
        char path[128];

        snprintf(path, sizeof(path), WH_PATH "%s", method);
        it_post_json(st.gateway_url, path, json, token, &r);
        if (strstr(r.body, code) == NULL) {
                fail_msg("%s: wanted %s, got HTTP %ld %s", method, code, r.status, r.body);
        }
        it_http_response_free(&r);
}

static const char *str_at(json_t *j, const char *a, const char *b)
{
        json_t *v = json_object_get(j, a);
        v = b != NULL ? json_object_get(v, b) : v;
        return json_is_string(v) ? json_string_value(v) : "";
}

/* An intake endpoint of the owner's tenant; its path into path. */
static void endpoint_new(const char *provider, const char *secret, char path[128], char id[64])
{
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"provider\":\"%s\",\"secret\":\"%s\",\"description\":\"t\"}", provider, secret);
        json_t *j = call_ok(owner, "CreateIntakeEndpoint", body);
        snprintf(path, 128, "%s", str_at(j, "endpoint", "path"));
        snprintf(id, 64, "%s", str_at(j, "endpoint", "id"));
        assert_true(strlen(id) == 36);
        json_decref(j);
}

/* ---- signing, as the providers do --------------------------------------------------------- */

static void hmac_sha256(const void *key, size_t key_len, const char *a, size_t a_len,
                        uint8_t mac[32])
{
        EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
        EVP_MAC_CTX *c = EVP_MAC_CTX_new(m);
        OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0),
                          OSSL_PARAM_construct_end()};
        size_t out = 0;
        assert_int_equal(EVP_MAC_init(c, key, key_len, p), 1);
        assert_int_equal(EVP_MAC_update(c, (const unsigned char *)a, a_len), 1);
        assert_int_equal(EVP_MAC_final(c, mac, &out, 32), 1);
        assert_int_equal(out, 32);
        EVP_MAC_CTX_free(c);
        EVP_MAC_free(m);
}

/* Stripe-Signature for body at t, keyed with the secret string itself. */
static void stripe_sign(const char *secret, long t, const char *body, char out[160])
{
        char *signed_payload = NULL;
        uint8_t mac[32];
        int n = asprintf(&signed_payload, "%ld.%s", t, body);
        assert_true(n > 0);
        hmac_sha256(secret, strlen(secret), signed_payload, (size_t)n, mac);
        free(signed_payload);
        int k = snprintf(out, 160, "t=%ld,v1=", t);
        for (int i = 0; i < 32; i++) {
                k += snprintf(out + k, (size_t)(160 - k), "%02x", mac[i]);
        }
}

/* "v1,<base64>" for Standard Webhooks: the key is the base64 after "whsec_". */
static void standard_sign(const char *secret, const char *id, long t, const char *body,
                          char out[64])
{
        uint8_t key[96], mac[32];
        const char *b64 = secret + strlen("whsec_");
        int key_len = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)strlen(b64));
        assert_true(key_len > 0);
        key_len -= (b64[strlen(b64) - 1] == '=') + (b64[strlen(b64) - 2] == '=');
        char *content = NULL;
        int n = asprintf(&content, "%s.%ld.%s", id, t, body);
        assert_true(n > 0);
        hmac_sha256(key, (size_t)key_len, content, (size_t)n, mac);
        free(content);
        memcpy(out, "v1,", 3);
        EVP_EncodeBlock((unsigned char *)out + 3, mac, 32);
}

/* POSTs body to path with the given headers (NULL-terminated "Name: value"). */
static long deliver(const char *path, const char *body, const char *const *headers,
                    it_http_response *keep)
{
        it_http_response r;
        assert_int_equal(
            it_http_post(st.gateway_url, path, "application/json", body, strlen(body), headers, &r),
            0);
        long status = r.status;
        if (keep != NULL) {
                *keep = r;
        } else {
                it_http_response_free(&r);
        }
        return status;
}

static long stripe_deliver(const char *path, const char *secret, long t, const char *body,
                           it_http_response *keep)
{
        char sig[160], h[200];
        stripe_sign(secret, t, body, sig);
        snprintf(h, sizeof(h), "Stripe-Signature: %s", sig);
        const char *headers[] = {h, NULL};
        return deliver(path, body, headers, keep);
}

static long rows_of(const char *endpoint_id, const char *event_id)
{
        PGconn *pg = PQconnectdb(st.pg_dsn);
        const char *p[2] = {endpoint_id, event_id};
        long n =
            it_sql_long(pg,
                        "SELECT count(*) FROM webhook.received_events WHERE endpoint_id = $1::uuid"
                        " AND provider_event_id = $2",
                        2, p);
        PQfinish(pg);
        return n;
}

static long status_of(const char *endpoint_id, const char *event_id)
{
        PGconn *pg = PQconnectdb(st.pg_dsn);
        const char *p[2] = {endpoint_id, event_id};
        long n =
            it_sql_long(pg,
                        "SELECT status FROM webhook.received_events WHERE endpoint_id = $1::uuid"
                        " AND provider_event_id = $2",
                        2, p);
        PQfinish(pg);
        return n;
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
                           "\"data\":{\"object\":{\"id\":\"in_1\",\"amount_paid\":1000}}}";

        endpoint_new("PROVIDER_STRIPE", secret, path, id);
        assert_int_equal(stripe_deliver(path, secret, now, body, &r), 200);
        json_t *j = json_loads(r.body, 0, NULL);
        snprintf(first, sizeof(first), "%s", str_at(j, "eventId", NULL));
        assert_true(strlen(first) == 36);
        assert_null(json_object_get(j, "duplicate")); /* false: left out */
        json_decref(j);
        it_http_response_free(&r);
        for (int i = 0; i < 5; i++) {
                /* a retry signs again, later */
                assert_int_equal(stripe_deliver(path, secret, now + i, body, &r), 200);
                j = json_loads(r.body, 0, NULL);
                assert_string_equal(str_at(j, "eventId", NULL), first);
                assert_true(json_is_true(json_object_get(j, "duplicate")));
                json_decref(j);
                it_http_response_free(&r);
        }
        assert_int_equal(rows_of(id, "evt_paid_1"), 1);
        assert_int_equal(status_of(id, "evt_paid_1"), 1); /* pending: billing acts on it */

        const char *other_type = "{\"id\":\"evt_misc_1\",\"type\":\"customer.created\"}";
        assert_int_equal(stripe_deliver(path, secret, now, other_type, NULL), 200);
        assert_int_equal(status_of(id, "evt_misc_1"), 3); /* ignored */

        /* The body is stored byte for byte. */
        PGconn *pg = PQconnectdb(st.pg_dsn);
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

        endpoint_new("PROVIDER_STRIPE", secret, path, id);

        /* tampered: signed one body, sent another */
        stripe_sign(secret, now, body, sig);
        snprintf(h, sizeof(h), "Stripe-Signature: %s", sig);
        const char *tampered_h[] = {h, NULL};
        expect_refused(
            deliver(path, "{\"id\":\"evt_r\",\"type\":\"invoice.paid\" }", tampered_h, &r), &r,
            "signature_mismatch");
        expect_refused(stripe_deliver(path, "whsec_someoneElse0123456789", now, body, &r), &r,
                       "signature_mismatch");
        expect_refused(stripe_deliver(path, secret, now - 301, body, &r), &r, "timestamp_too_old");
        expect_refused(stripe_deliver(path, secret, now + 301, body, &r), &r, "timestamp_too_new");
        expect_refused(deliver(path, body, NULL, &r), &r, "missing_header");
        const char *malformed[] = {"Stripe-Signature: t=abc,v1=00", NULL};
        expect_refused(deliver(path, body, malformed, &r), &r, "malformed_header");
        const char *no_v1[] = {"Stripe-Signature: t=1700000000,v0=abcd", NULL};
        expect_refused(deliver(path, body, no_v1, &r), &r, "no_signature");
        const char *twice[] = {h, h, NULL};
        expect_refused(deliver(path, body, twice, &r), &r, "sent twice");
        assert_int_equal(rows_of(id, "evt_r"), 0);

        /* a signed body that is no Stripe event */
        expect_refused(stripe_deliver(path, secret, now, "{\"type\":\"x\"}", &r), &r,
                       "no \\\"id\\\"");
        expect_refused(stripe_deliver(path, secret, now, "not json", &r), &r, "no \\\"id\\\"");

        /* Endpoints that do not take it: 404, the same for each. */
        char wrong[160];
        snprintf(wrong, sizeof(wrong), "/webhooks/standard/%s", id);
        assert_int_equal(stripe_deliver(wrong, secret, now, body, NULL), 404);
        assert_int_equal(stripe_deliver("/webhooks/stripe/6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11",
                                        secret, now, body, NULL),
                         404);
        assert_int_equal(stripe_deliver("/webhooks/stripe/not-a-uuid", secret, now, body, NULL),
                         404);
        assert_int_equal(stripe_deliver("/webhooks/paypal/x", secret, now, body, NULL), 404);
        assert_int_equal(it_http_get(st.gateway_url, path, &r), 0);
        assert_int_equal(r.status, 405);
        it_http_response_free(&r);

        char upd[256];
        snprintf(upd, sizeof(upd), "{\"id\":\"%s\",\"updateMask\":[\"enabled\"],\"enabled\":false}",
                 id);
        json_decref(call_ok(owner, "UpdateIntakeEndpoint", upd));
        assert_int_equal(stripe_deliver(path, secret, now, body, NULL), 404);
        snprintf(upd, sizeof(upd), "{\"id\":\"%s\",\"updateMask\":[\"enabled\"],\"enabled\":true}",
                 id);
        json_decref(call_ok(owner, "UpdateIntakeEndpoint", upd));
        assert_int_equal(stripe_deliver(path, secret, now, body, NULL), 200);
        assert_int_equal(rows_of(id, "evt_r"), 1);
}

static void test_rotation(void **state)
{
        (void)state;
        const char *old_secret = "whsec_rotateOld0123456789abcdefgh";
        const char *new_secret = "whsec_rotateNew0123456789abcdefgh";
        char path[128], id[64], req[256];
        long now = (long)time(NULL);

        endpoint_new("PROVIDER_STRIPE", old_secret, path, id);
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"secret\":\"%s\",\"previousExpiresInS\":\"2\"}",
                 id, new_secret);
        json_t *j = call_ok(owner, "RotateIntakeSecret", req);
        json_t *secrets = json_object_get(json_object_get(j, "endpoint"), "secrets");
        assert_int_equal(json_array_size(secrets), 2);
        assert_string_equal(str_at(json_array_get(secrets, 0), "hint", NULL), "efgh");
        /* the new one verifies until rotated, the old one until its time */
        assert_null(json_object_get(json_array_get(secrets, 0), "expiresAtUnixMs"));
        assert_non_null(json_object_get(json_array_get(secrets, 1), "expiresAtUnixMs"));
        json_decref(j);
        assert_int_equal(stripe_deliver(path, old_secret, now, "{\"id\":\"evt_old\"}", NULL), 200);
        assert_int_equal(stripe_deliver(path, new_secret, now, "{\"id\":\"evt_new\"}", NULL), 200);
        it_sleep_ms(2500);
        it_http_response r;
        expect_refused(stripe_deliver(path, old_secret, now, "{\"id\":\"evt_old2\"}", &r), &r,
                       "signature_mismatch");
        assert_int_equal(stripe_deliver(path, new_secret, now, "{\"id\":\"evt_new2\"}", NULL), 200);
        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", id);
        j = call_ok(owner, "GetIntakeEndpoint", req);
        assert_int_equal(
            json_array_size(json_object_get(json_object_get(j, "endpoint"), "secrets")), 1);
        json_decref(j);
        /* A secret Stripe's rules refuse is refused when given. */
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"secret\":\"has space\"}", id);
        call_fails(owner, "RotateIntakeSecret", req, "invalid_argument");
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

        endpoint_new("PROVIDER_STANDARD", secret, path, id);
        standard_sign(secret, "msg_std_1", now, body, sig);
        /* several signatures, one of which matches */
        snprintf(sigs, sizeof(sigs),
                 "webhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= %s v1a,abc",
                 sig);
        snprintf(h_id, sizeof(h_id), "webhook-id: msg_std_1");
        snprintf(h_ts, sizeof(h_ts), "webhook-timestamp: %ld", now);
        const char *headers[] = {h_id, h_ts, sigs, NULL};
        assert_int_equal(deliver(path, body, headers, NULL), 200);
        assert_int_equal(deliver(path, body, headers, NULL), 200);
        assert_int_equal(rows_of(id, "msg_std_1"), 1);
        assert_int_equal(status_of(id, "msg_std_1"), 3);

        /* the id is signed: another id with the same signature is refused */
        const char *other_id[] = {"webhook-id: msg_std_2", h_ts, sigs, NULL};
        it_http_response r;
        expect_refused(deliver(path, body, other_id, &r), &r, "signature_mismatch");
        const char *no_id[] = {h_ts, sigs, NULL};
        expect_refused(deliver(path, body, no_id, &r), &r, "missing_header");
        assert_int_equal(rows_of(id, "msg_std_2"), 0);
}

static void test_operators_read_events(void **state)
{
        (void)state;
        const char *secret = "whsec_operatorsSecret0123456789ab";
        char path[128], id[64], req[256];
        long now = (long)time(NULL);

        endpoint_new("PROVIDER_STRIPE", secret, path, id);
        assert_int_equal(
            stripe_deliver(path, secret, now, "{\"id\":\"evt_a\",\"type\":\"invoice.paid\"}", NULL),
            200);
        assert_int_equal(
            stripe_deliver(path, secret, now, "{\"id\":\"evt_b\",\"type\":\"ping\"}", NULL), 200);

        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\"}", id);
        json_t *j = call_ok(owner, "ListReceivedEvents", req);
        json_t *events = json_object_get(j, "events");
        assert_int_equal(json_array_size(events), 2);
        assert_string_equal(str_at(json_array_get(events, 0), "providerEventId", NULL), "evt_b");
        assert_string_equal(str_at(json_array_get(events, 0), "status", NULL),
                            "RECEIVED_STATUS_IGNORED");
        assert_string_equal(str_at(json_array_get(events, 1), "status", NULL),
                            "RECEIVED_STATUS_PENDING");
        char event_id[64];
        snprintf(event_id, sizeof(event_id), "%s", str_at(json_array_get(events, 1), "id", NULL));
        json_decref(j);

        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\",\"status\":\"RECEIVED_STATUS_PENDING\"}",
                 id);
        j = call_ok(owner, "ListReceivedEvents", req);
        assert_int_equal(json_array_size(json_object_get(j, "events")), 1);
        json_decref(j);

        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", event_id);
        j = call_ok(owner, "GetReceivedEvent", req);
        /* bytes travel as base64 in JSON */
        const char *b64 = str_at(j, "event", "body");
        unsigned char raw[256];
        int n = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)strlen(b64));
        assert_true(n > 0);
        raw[n] = '\0';
        assert_non_null(strstr((char *)raw, "\"evt_a\""));
        json_decref(j);

        /* another tenant: not found, and an empty list */
        call_fails(other, "GetReceivedEvent", req, "not_found");
        snprintf(req, sizeof(req), "{\"id\":\"%s\"}", id);
        call_fails(other, "GetIntakeEndpoint", req, "not_found");
        snprintf(req, sizeof(req), "{\"endpointId\":\"%s\"}", id);
        j = call_ok(other, "ListReceivedEvents", req);
        assert_int_equal(json_array_size(json_object_get(j, "events")), 0);
        json_decref(j);
        /* no token: 401 */
        call_fails(NULL, "ListIntakeEndpoints", "{}", "unauthenticated");
        /* the intake is not a Connect method */
        call_fails(owner, "ReceiveWebhook", "{}", "unimplemented");
}

static void test_bad_endpoint_requests(void **state)
{
        (void)state;
        call_fails(owner, "CreateIntakeEndpoint",
                   "{\"provider\":\"PROVIDER_STRIPE\",\"secret\":\"\"}", "invalid_argument");
        call_fails(owner, "CreateIntakeEndpoint",
                   "{\"provider\":\"PROVIDER_STANDARD\",\"secret\":\"whsec_notbase64!!\"}",
                   "invalid_argument");
        call_fails(owner, "CreateIntakeEndpoint", "{\"secret\":\"whsec_abcdefghijklmnop\"}",
                   "invalid_argument");
        call_fails(owner, "CreateIntakeEndpoint",
                   "{\"provider\":\"PROVIDER_STRIPE\",\"secret\":\"whsec_abcdefghijklmnop\","
                   "\"toleranceS\":3601}",
                   "invalid_argument");
        call_fails(owner, "UpdateIntakeEndpoint",
                   "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\",\"updateMask\":[\"nope\"]}",
                   "invalid_argument");
        call_fails(owner, "GetIntakeEndpoint", "{\"id\":\"6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11\"}",
                   "not_found");
        json_t *j = call_ok(owner, "ListIntakeEndpoints", "{}");
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
