/*
 * The webhook integration tests' shared helpers (webhook_it.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "webhook_it.h"

static it_stack st;

int wit_setup(void)
{
        return it_stack_load(&st);
}

const it_stack *wit_stack(void)
{
        return &st;
}

/* ---- calls --------------------------------------------------------------------------- */

json_t *wit_call_ok(const char *token, const char *method, const char *json)
{
        it_http_response r;
        char path[128];
        json_error_t err;

        snprintf(path, sizeof(path), WIT_PATH "%s", method);
        it_post_json(st.gateway_url, path, json, token, &r);
        if (r.status != 200) {
                fail_msg("%s: HTTP %ld %s", method, r.status, r.body);
        }
        json_t *j = json_loads(r.body, 0, &err);
        it_http_response_free(&r);
        assert_non_null(j);
        return j;
}

void wit_call_fails_with(const char *token, const char *method, const char *json, const char *code,
                         const char *message)
{
        it_http_response r;
        char path[128];

        snprintf(path, sizeof(path), WIT_PATH "%s", method);
        it_post_json(st.gateway_url, path, json, token, &r);
        it_assert_refused(&r, method, code, message);
        it_http_response_free(&r);
}

const char *wit_str(json_t *j, const char *a, const char *b)
{
        json_t *v = json_object_get(j, a);
        v = b != NULL ? json_object_get(v, b) : v;
        return json_is_string(v) ? json_string_value(v) : "";
}

/* An intake endpoint of the owner's tenant; its path into path. */
void wit_endpoint(const char *token, const char *provider, const char *secret, char path[128],
                  char id[64])
{
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"provider\":\"%s\",\"secret\":\"%s\",\"description\":\"t\"}", provider, secret);
        json_t *j = wit_call_ok(token, "CreateIntakeEndpoint", body);
        snprintf(path, 128, "%s", wit_str(j, "endpoint", "path"));
        snprintf(id, 64, "%s", wit_str(j, "endpoint", "id"));
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
void wit_stripe_sign(const char *secret, long t, const char *body, char out[160])
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
void wit_standard_sign(const char *secret, const char *id, long t, const char *body, char out[64])
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
long wit_deliver(const char *path, const char *body, const char *const *headers,
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

long wit_stripe_deliver(const char *path, const char *secret, long t, const char *body,
                        it_http_response *keep)
{
        char sig[160], h[200];
        wit_stripe_sign(secret, t, body, sig);
        snprintf(h, sizeof(h), "Stripe-Signature: %s", sig);
        const char *headers[] = {h, NULL};
        return wit_deliver(path, body, headers, keep);
}

long wit_rows_of(const char *endpoint_id, const char *event_id)
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

long wit_status_of(const char *endpoint_id, const char *event_id)
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
