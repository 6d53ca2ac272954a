/*
 * Unit tests of the webhook signatures (services/webhook/signature.c).
 *
 * The vectors come from the providers' own libraries, not from keelson:
 * - Standard Webhooks: the test vector of the reference libraries'
 *   tests (libraries/go/webhook_test.go TestWebhookSign,
 *   libraries/javascript/src/webhook.test.ts "sign function works",
 *   libraries/python/tests/test_webhooks.py), and vectors made with the
 *   standardwebhooks npm package (1.3.0) Webhook.sign;
 * - Stripe: vectors made with the stripe npm package (23.2.0)
 *   webhooks.generateTestHeaderString, each accepted by its verifyHeader.
 * tests/vectors/webhook_signatures.mjs prints them, and checks a header
 * made by keelson's signers with those libraries' verify (the vectors under
 * "keelson's signers" below were checked that way).
 *
 * Failure paths: allocation failures injected under OpenSSL
 * (CRYPTO_set_mem_functions, before OpenSSL allocates anything) and a
 * failing random generator (RAND_bytes, defined below, takes the place of
 * OpenSSL's for the whole executable).
 *
 * Linked with keelson_webhook_lib; signature.c is pure, so nothing else of
 * the service comes with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "ks_crypto.h"
#include "signature.h"

#define TOLERANCE_S 300 /* Stripe's and Standard Webhooks' default */
#define HEADER_MAX  (WH_HEADER_BYTES_MAX + 64)

/* ---- fault injection ------------------------------------------------------------ */

static long fi_countdown; /* > 0: the allocation that brings it to 0 fails */
static bool rand_fail;

static bool fi_fails(void)
{
        return fi_countdown > 0 && --fi_countdown == 0;
}

static void *fi_malloc(size_t n, const char *file, int line)
{
        (void)file;
        (void)line;
        return fi_fails() ? NULL : malloc(n);
}

static void *fi_realloc(void *p, size_t n, const char *file, int line)
{
        (void)file;
        (void)line;
        return fi_fails() ? NULL : realloc(p, n);
}

static void fi_free(void *p, const char *file, int line)
{
        (void)file;
        (void)line;
        free(p);
}

/* OpenSSL's RAND_bytes for this executable: fails on demand, else OpenSSL's generator. */
int RAND_bytes(unsigned char *buf, int num)
{
        if (rand_fail) {
                return 0;
        }
        return RAND_bytes_ex(NULL, buf, (size_t)num, 0);
}

/* ---- vectors ----------------------------------------------------------------------- */

#define EVENT                                                                                      \
        "{\"id\":\"evt_1PqW3r2eZvKYlo2C8dJk0aBc\",\"object\":\"event\",\"api_version\":\"2024-"    \
        "06-20\",\"created\":1700000000,\"type\":\"invoice.paid\",\"data\":{\"object\":{\"id\":"   \
        "\"in_1PqW3q2eZvKYlo2C\",\"object\":\"invoice\",\"amount_paid\":4200,\"currency\":"        \
        "\"eur\"}}}"
#define NUL_UTF8 "caf\xc3\xa9\x00tail" /* a NUL byte and a two-byte UTF-8 character */

typedef struct stripe_vector {
        const char *secret;
        int64_t timestamp;
        const char *payload;
        size_t payload_len;
        const char *header;
} stripe_vector;

/* stripe npm 23.2.0, webhooks.generateTestHeaderString({payload, secret, timestamp}). */
static const stripe_vector stripe_vectors[] = {
    /* 0: stripe-go's test secret, an event */
    {"whsec_test_secret", 1700000000, EVENT, 226,
     "t=1700000000,v1=8367e195654aa256485527ecfeb5d0981a0474e964b0f052d4928eb01d2d02cd"},
    /* 1: a realistic secret */
    {"whsec_5Ek3Q9yP7cVnZ0b1LmT8rXw2HdJ4gUaF", 1700000300, EVENT, 226,
     "t=1700000300,v1=0fcba4d6568ef07771810a9e68a139755c9781995f7c7181115849934c4e6af6"},
    /* 2: the secret that replaces 1 in a rotation: same event, same time */
    {"whsec_Rr7mK2pQ9vX4nB8cL1dF6gH3jT0wZ5yE", 1700000300, EVENT, 226,
     "t=1700000300,v1=4404aacab74012020b62849ae53570b863844c99d99134a7aba67d247bc566ae"},
    /* 3: NUL and UTF-8 in the body */
    {"whsec_test_secret", 1700000000, NUL_UTF8, 10,
     "t=1700000000,v1=237888edd3b1e7ad8de2675225f55f65b7e1dc8564ae2cc0a2d8f35822f395fa"},
    /* 4: an empty body (stripe-node refuses to verify one; stripe-go signs and checks it) */
    {"whsec_test_secret", 1700000000, "", 0,
     "t=1700000000,v1=316b9ab98c15bfa039d243f3196acee619cf29749a91a634e6a8154e2f7b6727"},
};

typedef struct standard_vector {
        const char *secret;
        const char *id;
        int64_t timestamp;
        const char *payload;
        size_t payload_len;
        const char *signature;
} standard_vector;

/* standardwebhooks npm 1.3.0, new Webhook(secret).sign(id, new Date(timestamp * 1000), payload). */
static const standard_vector standard_vectors[] = {
    /* 0: the reference libraries' own test vector (a 24-byte key) */
    {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
     "{\"test\": 2432232314}", 20, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
    /* 1: a 32-byte key (bytes 0..31), an event */
    {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
     1674087231, EVENT, 226, "v1,a7xRMDC8uG0LUZDbcstiQ/obSBPxPzNZTCg2DSOWqLM="},
    /* 2: a 64-byte key (bytes 255..192), the largest the spec allows */
    {"whsec_//79/Pv6+fj39vX08/Lx8O/u7ezr6uno5+bl5OPi4eDf3t3c29rZ2NfW1dTT0tHQz87NzMvKycjHxsXEw8LBw"
     "A==",
     "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", 1674087231, EVENT, 226,
     "v1,jZ4XaV1Fzm0zgwovZs9tLAMA9WrwQwdT9bXMo4eyPgY="},
    /* 3: NUL and UTF-8 in the body */
    {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "msg_nul", 1674087231, NUL_UTF8, 10,
     "v1,5I4AimZ7xdmcIk2JniZMJBXxRNGsssQtHI8LJ0XmFzQ="},
    /* 4: an empty body */
    {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "msg_empty", 1674087231, "", 0,
     "v1,Rygs22muPlMj9lKEvbhVCuo7v3+H7OSGgnRocnrQywY="},
};

/*
 * keelson's signers: made by wh_sign_standard / wh_sign_stripe (the
 * secret by wh_secret_generate), then accepted by the npm libraries'
 * verify (standardwebhooks 1.3.0 Webhook.verify, stripe 23.2.0
 * webhooks.signature.verifyHeader, both at t = 1760000000) and refused by
 * them once a space was appended to the payload.
 */
#define C_SIGNED_PAYLOAD                                                                           \
        "{\"type\":\"invoice.paid\",\"timestamp\":\"2025-10-09T07:06:40Z\",\"data\":{"             \
        "\"invoice_id\":\"inv_42\",\"amount\":4200,\"currency\":\"EUR\"}}"
static const standard_vector c_signed_standard = {
    "whsec_WSYW0DKvX5Sem5sHr7co9N/VgJ+R0NP+2cj+7ZWycmM=",
    "msg_2xKlsn0C5s1gJ4bqH8ZQ2b",
    1760000000,
    C_SIGNED_PAYLOAD,
    sizeof(C_SIGNED_PAYLOAD) - 1,
    "v1,NEMZhWSEbDkjCR8qeyJunk2T2uM2WOtN35KCQj71PAg="};
static const stripe_vector c_signed_stripe = {
    "whsec_5Ek3Q9yP7cVnZ0b1LmT8rXw2HdJ4gUaF", 1760000000, C_SIGNED_PAYLOAD,
    sizeof(C_SIGNED_PAYLOAD) - 1,
    "t=1760000000,v1=fd3b5e7c4a08a352dd7bd4975a5e5a5af48b4dec070ebf3809b0fabaf782aac3"};

#define N_STRIPE   (sizeof(stripe_vectors) / sizeof(stripe_vectors[0]))
#define N_STANDARD (sizeof(standard_vectors) / sizeof(standard_vectors[0]))

/* ---- helpers ------------------------------------------------------------------------- */

static wh_key *key_of(wh_provider provider, const char *secret)
{
        wh_key *key = NULL;
        char err[160] = "";

        if (wh_key_new(&key, provider, secret, strlen(secret), err, sizeof(err)) != KS_OK) {
                fail_msg("wh_key_new(%s): %s", wh_provider_name(provider), err);
        }
        assert_non_null(key);
        return key;
}

static wh_request stripe_request(const char *header, size_t header_len, const void *body,
                                 size_t body_len)
{
        wh_request req = {
            .signature = header, .signature_len = header_len, .body = body, .body_len = body_len};
        return req;
}

static wh_request standard_request(const char *id, const char *timestamp, const char *signature,
                                   const void *body, size_t body_len)
{
        wh_request req = {.id = id,
                          .id_len = id != NULL ? strlen(id) : 0,
                          .timestamp = timestamp,
                          .timestamp_len = timestamp != NULL ? strlen(timestamp) : 0,
                          .signature = signature,
                          .signature_len = signature != NULL ? strlen(signature) : 0,
                          .body = body,
                          .body_len = body_len};
        return req;
}

static wh_verdict verify_one(wh_provider provider, const wh_request *req, wh_key *key,
                             int64_t now_s)
{
        wh_key *keys[1] = {key};
        int64_t ts = -1;
        wh_verdict v = wh_verify(provider, req, keys, 1, now_s, TOLERANCE_S, &ts);

        /* The timestamp comes out once the headers parsed, and only then. */
        wh_parsed p;
        if (wh_parse(provider, req, &p) == WH_OK) {
                assert_int_equal(ts, p.timestamp);
        } else {
                assert_int_equal(ts, 0);
        }
        return v;
}

static void assert_verdict(wh_verdict got, wh_verdict want, const char *what)
{
        if (got != want) {
                fail_msg("%s: got %s, want %s", what, wh_verdict_name(got), wh_verdict_name(want));
        }
}

/* shape with each "{sig}" replaced by sig, into out (out_len bytes). */
static void expand(const char *shape, const char *sig, char *out, size_t out_len)
{
        size_t o = 0, sig_len = strlen(sig);

        for (const char *s = shape; *s != '\0';) {
                if (strncmp(s, "{sig}", 5) == 0) {
                        assert_true(o + sig_len < out_len);
                        memcpy(out + o, sig, sig_len);
                        o += sig_len;
                        s += 5;
                } else {
                        assert_true(o + 1 < out_len);
                        out[o++] = *s++;
                }
        }
        out[o] = '\0';
}

static char ts_text[32];

static const char *ts_str(int64_t t)
{
        snprintf(ts_text, sizeof(ts_text), "%lld", (long long)t);
        return ts_text;
}

/* ---- names --------------------------------------------------------------------------- */

static void test_verdict_names(void **state)
{
        static const char *const want[WH_VERDICT_COUNT] = {
            "ok",           "missing_header",    "malformed_header",  "bad_id",
            "no_signature", "timestamp_too_old", "timestamp_too_new", "signature_mismatch",
            "internal"};
        (void)state;
        for (int v = 0; v < WH_VERDICT_COUNT; v++) {
                assert_string_equal(wh_verdict_name(v), want[v]);
        }
        assert_string_equal(wh_verdict_name(-1), "unknown");
        assert_string_equal(wh_verdict_name(WH_VERDICT_COUNT), "unknown");
        assert_string_equal(wh_provider_name(WH_PROVIDER_STRIPE), "stripe");
        assert_string_equal(wh_provider_name(WH_PROVIDER_STANDARD), "standard");
        assert_string_equal(wh_provider_name(0), "unknown");
}

/* ---- the libraries' vectors ----------------------------------------------------------- */

static void check_standard_vector(const standard_vector *tv)
{
        wh_key *key = key_of(WH_PROVIDER_STANDARD, tv->secret);
        char sig[WH_STANDARD_SIGNATURE_BYTES], ts[32], tampered_body[256];
        wh_request req;

        assert_int_equal(wh_sign_standard(key, tv->id, strlen(tv->id), tv->timestamp, tv->payload,
                                          tv->payload_len, sig, sizeof(sig)),
                         KS_OK);
        assert_string_equal(sig, tv->signature);
        snprintf(ts, sizeof(ts), "%lld", (long long)tv->timestamp);
        req = standard_request(tv->id, ts, tv->signature, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp), WH_OK, tv->id);

        /* Each signed part matters: the body (one bit), the id, the timestamp. */
        assert_true(tv->payload_len < sizeof(tampered_body));
        memcpy(tampered_body, tv->payload, tv->payload_len);
        tampered_body[tv->payload_len] = ' ';
        req.body_len = tv->payload_len + 1;
        req.body = tampered_body;
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "body with a byte appended");
        if (tv->payload_len > 0) {
                tampered_body[0] ^= 1;
                req.body_len = tv->payload_len;
                assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                               WH_SIGNATURE_MISMATCH, "body with one bit flipped");
        }
        req = standard_request("msg_other", ts, tv->signature, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "another id");
        req = standard_request(tv->id, ts_str(tv->timestamp + 1), tv->signature, tv->payload,
                               tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "another timestamp");
        wh_key_free(key);
}

static void test_standard_vectors(void **state)
{
        (void)state;
        for (size_t i = 0; i < N_STANDARD; i++) {
                check_standard_vector(&standard_vectors[i]);
        }
        check_standard_vector(&c_signed_standard);
}

static void check_stripe_vector(const stripe_vector *tv)
{
        wh_key *key = key_of(WH_PROVIDER_STRIPE, tv->secret);
        wh_key *wrong = key_of(WH_PROVIDER_STRIPE, "whsec_not_the_endpoint_secret");
        char header[WH_STRIPE_HEADER_BYTES], tampered_body[256];
        wh_request req;

        assert_int_equal(wh_sign_stripe(key, tv->timestamp, tv->payload, tv->payload_len, header,
                                        sizeof(header)),
                         KS_OK);
        assert_string_equal(header, tv->header);
        req = stripe_request(tv->header, strlen(tv->header), tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp), WH_OK, tv->header);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, wrong, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "wrong secret");

        assert_true(tv->payload_len < sizeof(tampered_body));
        memcpy(tampered_body, tv->payload, tv->payload_len);
        tampered_body[tv->payload_len] = '\n';
        req.body = tampered_body;
        req.body_len = tv->payload_len + 1;
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "body with a byte appended");
        if (tv->payload_len > 0) {
                tampered_body[tv->payload_len - 1] ^= 0x20;
                req.body_len = tv->payload_len;
                assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp),
                               WH_SIGNATURE_MISMATCH, "body with its last byte changed");
        }
        wh_key_free(wrong);
        wh_key_free(key);
}

static void test_stripe_vectors(void **state)
{
        (void)state;
        for (size_t i = 0; i < N_STRIPE; i++) {
                check_stripe_vector(&stripe_vectors[i]);
        }
        check_stripe_vector(&c_signed_stripe);
}

/* A body is bytes and a length: a NUL inside is data, and every byte after it counts. */
static void test_nul_bytes_in_body(void **state)
{
        const stripe_vector *sv = &stripe_vectors[3];
        const standard_vector *tv = &standard_vectors[3];
        wh_key *skey = key_of(WH_PROVIDER_STRIPE, sv->secret);
        wh_key *tkey = key_of(WH_PROVIDER_STANDARD, tv->secret);
        wh_request req;
        char ts[32];
        (void)state;

        assert_int_equal(sv->payload[5], '\0');
        req = stripe_request(sv->header, strlen(sv->header), sv->payload, sv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, skey, sv->timestamp), WH_OK, "NUL");
        req.body_len = strlen(sv->payload); /* cut at the NUL, as a C string would be */
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, skey, sv->timestamp),
                       WH_SIGNATURE_MISMATCH, "body cut at its NUL");
        req.body = "caf\xc3\xa9\x00tbil";
        req.body_len = sv->payload_len;
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, skey, sv->timestamp),
                       WH_SIGNATURE_MISMATCH, "a byte after the NUL changed");

        snprintf(ts, sizeof(ts), "%lld", (long long)tv->timestamp);
        req = standard_request(tv->id, ts, tv->signature, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, tkey, tv->timestamp), WH_OK, "NUL");
        req.body_len = strlen(tv->payload);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, tkey, tv->timestamp),
                       WH_SIGNATURE_MISMATCH, "body cut at its NUL");
        wh_key_free(tkey);
        wh_key_free(skey);
}

/* ---- rotation and several signatures ---------------------------------------------------- */

/* Stripe sends one v1 per secret while a rolled secret is still active. */
static void test_stripe_rotation(void **state)
{
        const stripe_vector *old_v = &stripe_vectors[1], *new_v = &stripe_vectors[2];
        wh_key *old_k = key_of(WH_PROVIDER_STRIPE, old_v->secret);
        wh_key *new_k = key_of(WH_PROVIDER_STRIPE, new_v->secret);
        wh_key *other = key_of(WH_PROVIDER_STRIPE, "whsec_test_secret");
        char header[256];
        wh_request req;
        (void)state;

        /* "t=...,v1=<old>,v1=<new>": the new header without its "t=1700000300," */
        snprintf(header, sizeof(header), "%s,%s", old_v->header, new_v->header + 13);
        assert_int_equal(strlen(header), 80 + 1 + 67);
        req = stripe_request(header, strlen(header), EVENT, 226);

        wh_key *both[2] = {old_k, new_k}, *swapped[2] = {new_k, old_k},
               *neither[2] = {other, other};
        wh_key *old_and_other[2] = {other, old_k};
        int64_t now = old_v->timestamp, ts = 0;
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, old_k, now), WH_OK, "old key");
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, new_k, now), WH_OK, "new key");
        assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &req, both, 2, now, TOLERANCE_S, &ts), WH_OK,
                       "both keys");
        assert_int_equal(ts, now);
        assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &req, swapped, 2, now, TOLERANCE_S, NULL),
                       WH_OK, "both keys, other order");
        assert_verdict(
            wh_verify(WH_PROVIDER_STRIPE, &req, old_and_other, 2, now, TOLERANCE_S, NULL), WH_OK,
            "the second key matches");
        assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &req, neither, 2, now, TOLERANCE_S, NULL),
                       WH_SIGNATURE_MISMATCH, "neither key");

        /* A header with only the new signature, checked with both keys (receiver side rotation). */
        req = stripe_request(new_v->header, strlen(new_v->header), EVENT, 226);
        assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &req, both, 2, now, TOLERANCE_S, NULL), WH_OK,
                       "one signature, two keys");
        wh_key_free(other);
        wh_key_free(new_k);
        wh_key_free(old_k);
}

/* The sender signs with the old and the new key; each alone verifies. */
static void test_standard_rotation(void **state)
{
        const standard_vector *a = &standard_vectors[1], *b = &standard_vectors[2];
        wh_key *ka = key_of(WH_PROVIDER_STANDARD, a->secret);
        wh_key *kb = key_of(WH_PROVIDER_STANDARD, b->secret);
        wh_key *kc = key_of(WH_PROVIDER_STANDARD, standard_vectors[0].secret);
        wh_key *both[2] = {kc, kb}, *none[2] = {kc, kc};
        char list[256];
        wh_request req;
        (void)state;

        /* Both vectors sign the same id, timestamp and event. */
        snprintf(list, sizeof(list), "%s %s", a->signature, b->signature);
        req = standard_request(a->id, "1674087231", list, EVENT, 226);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, ka, a->timestamp), WH_OK, "old");
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, kb, a->timestamp), WH_OK, "new");
        assert_verdict(
            wh_verify(WH_PROVIDER_STANDARD, &req, both, 2, a->timestamp, TOLERANCE_S, NULL), WH_OK,
            "second key");
        assert_verdict(
            wh_verify(WH_PROVIDER_STANDARD, &req, none, 2, a->timestamp, TOLERANCE_S, NULL),
            WH_SIGNATURE_MISMATCH, "neither key");
        wh_key_free(kc);
        wh_key_free(kb);
        wh_key_free(ka);
}

/* ---- Stripe-Signature shapes ------------------------------------------------------------ */

typedef struct shape {
        const char *text; /* "{sig}" stands for the valid signature */
        wh_verdict want;
} shape;

/* With stripe_vectors[0] (t = 1700000000, its event), verified at t. */
static const shape stripe_shapes[] = {
    {"t=1700000000,v1={sig}", WH_OK},
    /* stripe-go's own tests: an item without '=', and an empty t */
    {"v1,t=1", WH_MALFORMED_HEADER},
    {"t=", WH_MALFORMED_HEADER},
    /* stripe-go's own test: an unreadable v1 besides a valid one is ignored */
    {"t=1700000000,v1={sig},v1=bad_signature", WH_OK},
    {"t=1700000000,v1=bad_signature,v1={sig}", WH_OK},
    /* stripe-go's own test: only v0 (scheme "v0") is no valid signature */
    {"t=1700000000,v0={sig}", WH_NO_SIGNATURE},
    {"t=1700000000", WH_NO_SIGNATURE},
    {"t=1700000000,v1=", WH_NO_SIGNATURE},
    {"t=1700000000,v1=deadbeef", WH_NO_SIGNATURE},
    {"t=1700000000,v1={sig}0", WH_NO_SIGNATURE},
    {"t=1700000000,V1={sig}", WH_NO_SIGNATURE},
    /* No trimming (stripe-go): " v1" is an unknown key, " 1700000000" no number. */
    {"t=1700000000, v1={sig}", WH_NO_SIGNATURE},
    {"t= 1700000000,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000 ,v1={sig}", WH_MALFORMED_HEADER},
    {"t=abc,v1={sig}", WH_MALFORMED_HEADER},
    {"t=-1700000000,v1={sig}", WH_MALFORMED_HEADER},
    {"t=+1700000000,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000.0,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1234567890123456789,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000,,v1={sig}", WH_MALFORMED_HEADER},
    {",t=1700000000,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000,v1={sig},", WH_MALFORMED_HEADER},
    {"t=1700000000,v1={sig}=", WH_MALFORMED_HEADER},
    {"t=1700000000,v1=={sig}", WH_MALFORMED_HEADER},
    {"t==1700000000,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000,x=a=b,v1={sig}", WH_MALFORMED_HEADER},
    {"t=1700000000,t=1700000000,v1={sig}", WH_MALFORMED_HEADER}, /* stripe-go keeps the last */
    {"v1={sig}", WH_MALFORMED_HEADER},                           /* no timestamp */
    {"T=1700000000,v1={sig}", WH_MALFORMED_HEADER},
    /* Order, unknown items, empty keys: all as stripe-go. */
    {"v1={sig},t=1700000000", WH_OK},
    {"t=1700000000,v1={sig},v0=abc,foo=bar,=x,secret=y", WH_OK},
    {"t=01700000000,v1={sig}", WH_OK}, /* the MAC covers 1700000000, as stripe-go's */
    {"t=1700000001,v1={sig}", WH_SIGNATURE_MISMATCH},
    {"t=1700000000,v1=0000000000000000000000000000000000000000000000000000000000000000",
     WH_SIGNATURE_MISMATCH},
    /* WH_SIGNATURES_MAX v1 items, then one more */
    {"t=1700000000,v1=a,v1=b,v1=c,v1=d,v1=e,v1=f,v1=g,v1={sig}", WH_OK},
    {"t=1700000000,v1=a,v1=b,v1=c,v1=d,v1=e,v1=f,v1=g,v1=h,v1={sig}", WH_MALFORMED_HEADER},
};

static void test_stripe_shapes(void **state)
{
        const stripe_vector *tv = &stripe_vectors[0];
        const char *sig = tv->header + strlen("t=1700000000,v1=");
        wh_key *key = key_of(WH_PROVIDER_STRIPE, tv->secret);
        char header[512];
        (void)state;

        for (size_t i = 0; i < sizeof(stripe_shapes) / sizeof(stripe_shapes[0]); i++) {
                expand(stripe_shapes[i].text, sig, header, sizeof(header));
                wh_request req =
                    stripe_request(header, strlen(header), tv->payload, tv->payload_len);
                assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp),
                               stripe_shapes[i].want, stripe_shapes[i].text);
        }
        wh_key_free(key);
}

/* Hex in either case, as Go's hex.DecodeString; a NUL in a header is just a byte. */
static void test_stripe_odd_bytes(void **state)
{
        const stripe_vector *tv = &stripe_vectors[0];
        wh_key *key = key_of(WH_PROVIDER_STRIPE, tv->secret);
        char header[128];
        wh_request req;
        (void)state;

        snprintf(header, sizeof(header), "%s", tv->header);
        for (char *c = header + 16; *c != '\0'; c++) {
                if (*c >= 'a' && *c <= 'f') {
                        *c = (char)(*c - 'a' + 'A');
                }
        }
        req = stripe_request(header, strlen(header), tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp), WH_OK,
                       "upper-case hex");

        /* "...v1=<sig>\0": the item's value is 65 bytes, not a MAC. */
        snprintf(header, sizeof(header), "%s", tv->header);
        req = stripe_request(header, strlen(header) + 1, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp), WH_NO_SIGNATURE,
                       "NUL after the signature");
        /* "t=17000\0000000,...": not digits. */
        header[7] = '\0';
        req = stripe_request(header, strlen(tv->header), tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, tv->timestamp),
                       WH_MALFORMED_HEADER, "NUL in the timestamp");
        wh_key_free(key);
}

/* ---- Standard Webhooks shapes ------------------------------------------------------------ */

/* With standard_vectors[0] (the libraries' vector), verified at its timestamp. */
static const shape standard_shapes[] = {
    {"v1,{sig}", WH_OK},
    /* the libraries' "multi sig" test */
    {"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/"
     "9tdO6mc= v1,{sig} v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
     WH_OK},
    /* the Go test's "invalid signature", the Python test's (last character changed) */
    {"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", WH_SIGNATURE_MISMATCH},
    {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=", WH_SIGNATURE_MISMATCH},
    /* the JavaScript tests' "invalid signature" and "partial signature" */
    {"v1,dawfeoifkpqwoekfpqoekf", WH_NO_SIGNATURE},
    {"v1,g0hM9", WH_NO_SIGNATURE},
    {"v1,", WH_NO_SIGNATURE},
    {"v1", WH_NO_SIGNATURE},
    {"{sig}", WH_NO_SIGNATURE},
    {"v1a,{sig}", WH_NO_SIGNATURE},
    {"v2,{sig}", WH_NO_SIGNATURE},
    {"V1,{sig}", WH_NO_SIGNATURE},
    {"v1,{sig},junk", WH_NO_SIGNATURE},
    {"v1, {sig}", WH_NO_SIGNATURE},
    {"v1={sig}", WH_NO_SIGNATURE},
    /* only the canonical text can match (both libraries compare text) */
    {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE", WH_NO_SIGNATURE},  /* unpadded */
    {"v1,g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE=", WH_NO_SIGNATURE}, /* URL alphabet */
    {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", WH_NO_SIGNATURE}, /* same bytes */
    /* empty entries from extra spaces are ignored */
    {" v1,{sig}", WH_OK},
    {"v1,{sig} ", WH_OK},
    {"v1a,xyz  v1,{sig}", WH_OK},
    {"v1,a v1,b v1,c v1,d v1,e v1,f v1,g v1,{sig}", WH_OK},
    {"v1,a v1,b v1,c v1,d v1,e v1,f v1,g v1,h v1,{sig}", WH_MALFORMED_HEADER},
};

static void test_standard_signature_shapes(void **state)
{
        const standard_vector *tv = &standard_vectors[0];
        wh_key *key = key_of(WH_PROVIDER_STANDARD, tv->secret);
        char list[512];
        (void)state;

        for (size_t i = 0; i < sizeof(standard_shapes) / sizeof(standard_shapes[0]); i++) {
                expand(standard_shapes[i].text, tv->signature + 3, list, sizeof(list));
                wh_request req =
                    standard_request(tv->id, "1614265330", list, tv->payload, tv->payload_len);
                assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                               standard_shapes[i].want, standard_shapes[i].text);
        }
        wh_key_free(key);
}

typedef struct header_case {
        const char *id, *timestamp, *signature;
        wh_verdict want;
        const char *what;
} header_case;

static void test_standard_headers(void **state)
{
        const standard_vector *tv = &standard_vectors[0];
        const char *id = tv->id, *sig = tv->signature;
        char long_id[WH_ID_BYTES_MAX + 2];
        wh_key *key = key_of(WH_PROVIDER_STANDARD, tv->secret);
        (void)state;

        memset(long_id, 'a', sizeof(long_id) - 1);
        long_id[sizeof(long_id) - 1] = '\0';
        const header_case cases[] = {
            {id, "1614265330", sig, WH_OK, "valid"},
            {NULL, "1614265330", sig, WH_MISSING_HEADER, "no id"},
            {"", "1614265330", sig, WH_MISSING_HEADER, "empty id"},
            {id, NULL, sig, WH_MISSING_HEADER, "no timestamp"},
            {id, "", sig, WH_MISSING_HEADER, "empty timestamp"},
            {id, "1614265330", NULL, WH_MISSING_HEADER, "no signature"},
            {id, "1614265330", "", WH_MISSING_HEADER, "empty signature"},
            {"msg.1", "1614265330", sig, WH_BAD_ID, "a dot in the id"},
            {"msg 1", "1614265330", sig, WH_BAD_ID, "a space in the id"},
            {"msg\t1", "1614265330", sig, WH_BAD_ID, "a control character in the id"},
            {"msg_\xc3\xa9", "1614265330", sig, WH_BAD_ID, "non-ASCII in the id"},
            {long_id, "1614265330", sig, WH_BAD_ID, "an id over WH_ID_BYTES_MAX"},
            {long_id + 1, "1614265330", sig, WH_SIGNATURE_MISMATCH, "an id of WH_ID_BYTES_MAX"},
            {"msg.1", "hello", sig, WH_BAD_ID, "bad id before bad timestamp"},
            {"msg.1", "1614265330", NULL, WH_MISSING_HEADER, "missing before bad id"},
            {id, "hello", sig, WH_MALFORMED_HEADER, "the libraries' invalid timestamp"},
            {id, "1614265330 ", sig, WH_MALFORMED_HEADER, "a space after the timestamp"},
            {id, " 1614265330", sig, WH_MALFORMED_HEADER, "a space before the timestamp"},
            {id, "-1614265330", sig, WH_MALFORMED_HEADER, "a sign"},
            {id, "+1614265330", sig, WH_MALFORMED_HEADER, "a plus sign"},
            {id, "1614265330.5", sig, WH_MALFORMED_HEADER, "a fraction"},
            {id, "1614265330abc", sig, WH_MALFORMED_HEADER, "trailing letters"},
            {id, "1234567890123456789", sig, WH_MALFORMED_HEADER, "19 digits"},
            {id, "01614265330", sig, WH_OK, "a leading zero: the MAC covers 1614265330"},
            {id, "hello", "v2,x", WH_MALFORMED_HEADER, "bad timestamp before no v1"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                wh_request req = standard_request(cases[i].id, cases[i].timestamp,
                                                  cases[i].signature, tv->payload, tv->payload_len);
                assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, tv->timestamp),
                               cases[i].want, cases[i].what);
        }
        wh_key_free(key);
}

/* An id of WH_ID_BYTES_MAX signs and verifies; one byte more is refused both ways. */
static void test_standard_long_id(void **state)
{
        wh_key *key = key_of(WH_PROVIDER_STANDARD, standard_vectors[1].secret);
        char id[WH_ID_BYTES_MAX + 2], sig[WH_STANDARD_SIGNATURE_BYTES];
        (void)state;

        memset(id, 'x', sizeof(id) - 1);
        id[sizeof(id) - 1] = '\0';
        assert_int_equal(
            wh_sign_standard(key, id, WH_ID_BYTES_MAX + 1, 1674087231, "{}", 2, sig, sizeof(sig)),
            KS_INVALID_ARGUMENT);
        assert_string_equal(sig, "");
        id[WH_ID_BYTES_MAX] = '\0';
        assert_int_equal(
            wh_sign_standard(key, id, WH_ID_BYTES_MAX, 1674087231, "{}", 2, sig, sizeof(sig)),
            KS_OK);
        wh_request req = standard_request(id, "1674087231", sig, "{}", 2);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, key, 1674087231), WH_OK, "long id");
        wh_key_free(key);
}

/* ---- header bounds -------------------------------------------------------------------------- */

/* A valid header padded with an item or entry that is ignored, to exactly len bytes. */
static void padded(char *out, const char *valid, const char *pad_start, size_t len)
{
        size_t n = strlen(valid) + strlen(pad_start);

        assert_true(len >= n && len < HEADER_MAX);
        snprintf(out, HEADER_MAX, "%s%s", valid, pad_start);
        memset(out + n, 'a', len - n);
        out[len] = '\0';
}

static void test_oversize_headers(void **state)
{
        const stripe_vector *sv = &stripe_vectors[0];
        const standard_vector *tv = &standard_vectors[0];
        wh_key *skey = key_of(WH_PROVIDER_STRIPE, sv->secret);
        wh_key *tkey = key_of(WH_PROVIDER_STANDARD, tv->secret);
        static char header[HEADER_MAX];
        wh_request req;
        (void)state;

        padded(header, sv->header, ",x=", WH_HEADER_BYTES_MAX);
        req = stripe_request(header, WH_HEADER_BYTES_MAX, sv->payload, sv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, skey, sv->timestamp), WH_OK,
                       "Stripe-Signature of WH_HEADER_BYTES_MAX");
        padded(header, sv->header, ",x=", WH_HEADER_BYTES_MAX + 1);
        req = stripe_request(header, WH_HEADER_BYTES_MAX + 1, sv->payload, sv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, skey, sv->timestamp),
                       WH_MALFORMED_HEADER, "Stripe-Signature over WH_HEADER_BYTES_MAX");

        padded(header, tv->signature, " x", WH_HEADER_BYTES_MAX);
        req = standard_request(tv->id, "1614265330", header, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, tkey, tv->timestamp), WH_OK,
                       "webhook-signature of WH_HEADER_BYTES_MAX");
        padded(header, tv->signature, " x", WH_HEADER_BYTES_MAX + 1);
        req = standard_request(tv->id, "1614265330", header, tv->payload, tv->payload_len);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, tkey, tv->timestamp),
                       WH_MALFORMED_HEADER, "webhook-signature over WH_HEADER_BYTES_MAX");
        wh_key_free(tkey);
        wh_key_free(skey);
}

/* ---- the acceptance window --------------------------------------------------------------------
 */

typedef struct window_case {
        int64_t now_delta; /* now - timestamp */
        int64_t tolerance_s;
        wh_verdict want;
} window_case;

/* Exactly the tolerance is accepted, both ways (stripe-go, stripe-node, both Standard libraries).
 */
static const window_case window_cases[] = {
    {0, 300, WH_OK},
    {300, 300, WH_OK},
    {301, 300, WH_TIMESTAMP_TOO_OLD},
    {-300, 300, WH_OK},
    {-301, 300, WH_TIMESTAMP_TOO_NEW},
    {1, 1, WH_OK},
    {2, 1, WH_TIMESTAMP_TOO_OLD},
    {-1, 1, WH_OK},
    {-2, 1, WH_TIMESTAMP_TOO_NEW},
    {86400 * 3, 300, WH_TIMESTAMP_TOO_OLD}, /* a replay of a three-day-old delivery */
    {WH_TOLERANCE_S_MAX, WH_TOLERANCE_S_MAX, WH_OK},
    {-WH_TOLERANCE_S_MAX - 1, WH_TOLERANCE_S_MAX, WH_TIMESTAMP_TOO_NEW},
};

static void test_window(void **state)
{
        const stripe_vector *sv = &stripe_vectors[0];
        const standard_vector *tv = &standard_vectors[0];
        wh_key *skey = key_of(WH_PROVIDER_STRIPE, sv->secret);
        wh_key *tkey = key_of(WH_PROVIDER_STANDARD, tv->secret);
        wh_request sreq = stripe_request(sv->header, strlen(sv->header), sv->payload, 226);
        wh_request treq = standard_request(tv->id, "1614265330", tv->signature, tv->payload, 20);
        int64_t ts;
        (void)state;

        for (size_t i = 0; i < sizeof(window_cases) / sizeof(window_cases[0]); i++) {
                const window_case *c = &window_cases[i];
                char what[64];
                snprintf(what, sizeof(what), "now - t = %lld, tolerance %lld",
                         (long long)c->now_delta, (long long)c->tolerance_s);
                assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &sreq, &skey, 1,
                                         sv->timestamp + c->now_delta, c->tolerance_s, &ts),
                               c->want, what);
                assert_int_equal(ts, sv->timestamp);
                assert_verdict(wh_verify(WH_PROVIDER_STANDARD, &treq, &tkey, 1,
                                         tv->timestamp + c->now_delta, c->tolerance_s, &ts),
                               c->want, what);
                assert_int_equal(ts, tv->timestamp);
        }
        wh_key_free(tkey);
        wh_key_free(skey);
}

/* The window is judged after the v1 check and before the signature; extremes do not overflow. */
static void test_check_order(void **state)
{
        wh_key *key = key_of(WH_PROVIDER_STRIPE, "whsec_test_secret");
        const char *bad_sig =
            "t=1700000000,v1=0000000000000000000000000000000000000000000000000000000000000000";
        const char *far_future = "t=999999999999999999,v1="
                                 "0000000000000000000000000000000000000000000000000000000000000000";
        const char *epoch =
            "t=0,v1=0000000000000000000000000000000000000000000000000000000000000000";
        wh_request req;
        int64_t ts;
        (void)state;

        req = stripe_request(bad_sig, strlen(bad_sig), EVENT, 226);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, 1700000301), WH_TIMESTAMP_TOO_OLD,
                       "stale and wrong: the window first");
        req = stripe_request("t=1700000000,v0=ab", 18, EVENT, 226);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, 1800000000), WH_NO_SIGNATURE,
                       "stale without v1: no_signature first");
        req = stripe_request(far_future, strlen(far_future), EVENT, 226);
        assert_verdict(wh_verify(WH_PROVIDER_STRIPE, &req, &key, 1, 0, WH_TOLERANCE_S_MAX, &ts),
                       WH_TIMESTAMP_TOO_NEW, "the largest timestamp at the epoch");
        assert_int_equal(ts, WH_TIMESTAMP_MAX);
        req = stripe_request(epoch, strlen(epoch), EVENT, 226);
        assert_verdict(
            wh_verify(WH_PROVIDER_STRIPE, &req, &key, 1, WH_TIMESTAMP_MAX, WH_TOLERANCE_S_MAX, &ts),
            WH_TIMESTAMP_TOO_OLD, "the epoch at the largest now");
        req = stripe_request(NULL, 0, EVENT, 226);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, 1700000000), WH_MISSING_HEADER,
                       "no Stripe-Signature");
        req = stripe_request("", 0, EVENT, 226);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, key, 1700000000), WH_MISSING_HEADER,
                       "an empty Stripe-Signature (stripe-go: ErrNotSigned)");
        wh_key_free(key);
}

/* ---- wh_parse ---------------------------------------------------------------------------------
 */

static void test_parse(void **state)
{
        const char *header =
            "t=0001700000300,v1=0fcba4d6568ef07771810a9e68a139755c9781995f7c718111"
            "5849934c4e6af6,v0=zz,v1=4404AACAB74012020B62849AE53570B863844C99D99134"
            "A7ABA67D247BC566AE";
        wh_request req = stripe_request(header, strlen(header), "", 0);
        wh_parsed p;
        (void)state;

        assert_int_equal(wh_parse(WH_PROVIDER_STRIPE, &req, &p), WH_OK);
        assert_int_equal(p.timestamp, 1700000300);
        assert_int_equal(p.timestamp_digits_len, 10);
        assert_memory_equal(p.timestamp_digits, "1700000300", 10);
        assert_null(p.id);
        assert_int_equal(p.n_signatures, 2);
        assert_int_equal(p.signatures[0][0], 0x0f);
        assert_int_equal(p.signatures[0][31], 0xf6);
        assert_int_equal(p.signatures[1][0], 0x44);
        assert_int_equal(p.signatures[1][31], 0xae);

        req = standard_request("msg_1", "0",
                               "v1a,x v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "", 0);
        assert_int_equal(wh_parse(WH_PROVIDER_STANDARD, &req, &p), WH_OK);
        assert_int_equal(p.timestamp, 0);
        assert_int_equal(p.timestamp_digits_len, 1);
        assert_ptr_equal(p.id, req.id);
        assert_int_equal(p.id_len, 5);
        assert_int_equal(p.n_signatures, 1);
        for (int i = 0; i < WH_MAC_BYTES; i++) {
                assert_int_equal(p.signatures[0][i], 0);
        }
}

/* ---- keys and secrets -------------------------------------------------------------------------
 */

static int key_try(wh_provider provider, const char *secret, size_t len, char *err, size_t err_len)
{
        wh_key *key = (wh_key *)&key; /* anything but NULL: an error must reset it */
        int rc = wh_key_new(&key, provider, secret, len, err, err_len);

        if (rc == KS_OK) {
                assert_non_null(key);
                assert_int_equal(wh_key_provider(key), provider);
        } else {
                assert_null(key);
                /* The message names the problem, never the secret. */
                if (len >= 8) {
                        assert_null(strstr(err, secret));
                }
        }
        wh_key_free(key);
        return rc;
}

/* Standard base64 of n bytes of value v, after "whsec_", into out. */
static void standard_secret(size_t n, char *out, size_t out_len)
{
        uint8_t raw[128];
        assert_true(n <= sizeof(raw) && out_len > 6);
        memset(raw, 0xa5, n);
        memcpy(out, "whsec_", 6);
        assert_true(ks_base64_encode(raw, n, out + 6, out_len - 6) >= 0);
}

static void test_standard_key_lengths(void **state)
{
        char secret[256], err[160];
        (void)state;

        for (size_t n = 1; n <= 100; n++) {
                bool ok = n >= WH_STANDARD_KEY_BYTES_MIN && n <= WH_STANDARD_KEY_BYTES_MAX;
                standard_secret(n, secret, sizeof(secret));
                err[0] = '\0';
                int rc = key_try(WH_PROVIDER_STANDARD, secret, strlen(secret), err, sizeof(err));
                if (rc != (ok ? KS_OK : KS_INVALID_ARGUMENT)) {
                        fail_msg("%zu-byte key: rc %d (%s)", n, rc, err);
                }
                if (!ok && n <= 66) {
                        char want[64];
                        snprintf(want, sizeof(want), "a %zu-byte key", n);
                        assert_non_null(strstr(err, want));
                }
        }
}

static void test_standard_key_text(void **state)
{
        static const struct {
                const char *secret;
                int want;
        } cases[] = {
            {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", KS_OK},
            {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", KS_OK}, /* the prefix is optional */
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", KS_OK},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8==", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd-h8=", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd_h8=", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0O DxAREhMUFRYXGBkaGxwdHh8=", KS_INVALID_ARGUMENT},
            {"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGx=dHh8=", KS_INVALID_ARGUMENT},
            {"whsec_", KS_INVALID_ARGUMENT},
            {"", KS_INVALID_ARGUMENT},
            {"WHSEC_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", KS_INVALID_ARGUMENT},
        };
        char err[160];
        (void)state;

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *s = cases[i].secret;
                err[0] = '\0';
                if (key_try(WH_PROVIDER_STANDARD, s, strlen(s), err, sizeof(err)) !=
                    cases[i].want) {
                        fail_msg("secret #%zu: %s", i, err);
                }
                if (cases[i].want != KS_OK) {
                        assert_true(strncmp(err, "secret: ", 8) == 0);
                }
        }
        /* The same key with and without the prefix: the same signature. */
        wh_key *a = key_of(WH_PROVIDER_STANDARD, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        wh_key *b = key_of(WH_PROVIDER_STANDARD, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        char sa[WH_STANDARD_SIGNATURE_BYTES], sb[WH_STANDARD_SIGNATURE_BYTES];
        assert_int_equal(wh_sign_standard(a, "m", 1, 1, "x", 1, sa, sizeof(sa)), KS_OK);
        assert_int_equal(wh_sign_standard(b, "m", 1, 1, "x", 1, sb, sizeof(sb)), KS_OK);
        assert_string_equal(sa, sb);
        wh_key_free(b);
        wh_key_free(a);
        /* err may be NULL. */
        wh_key *k = NULL;
        assert_int_equal(wh_key_new(&k, WH_PROVIDER_STANDARD, "x", 1, NULL, 0),
                         KS_INVALID_ARGUMENT);
        assert_null(k);
}

static void test_stripe_key_text(void **state)
{
        char secret[WH_STRIPE_SECRET_BYTES_MAX + 2], err[160];
        (void)state;

        assert_int_equal(key_try(WH_PROVIDER_STRIPE, "", 0, err, sizeof(err)), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "secret: empty");
        assert_int_equal(key_try(WH_PROVIDER_STRIPE, "x", 1, err, sizeof(err)), KS_OK);
        memset(secret, 'k', sizeof(secret) - 1);
        secret[sizeof(secret) - 1] = '\0';
        assert_int_equal(
            key_try(WH_PROVIDER_STRIPE, secret, WH_STRIPE_SECRET_BYTES_MAX, err, sizeof(err)),
            KS_OK);
        assert_int_equal(
            key_try(WH_PROVIDER_STRIPE, secret, WH_STRIPE_SECRET_BYTES_MAX + 1, err, sizeof(err)),
            KS_INVALID_ARGUMENT);
        static const char *const refused[] = {
            "whsec_test_secret\n", " whsec_test_secret", "whsec_test secret",
            "whsec_test_secret\r", "whsec_t\xc3\xa9st",  "whsec_test\x7f",
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                assert_int_equal(
                    key_try(WH_PROVIDER_STRIPE, refused[i], strlen(refused[i]), err, sizeof(err)),
                    KS_INVALID_ARGUMENT);
        }
        /* A NUL inside the given length is refused too, not a shorter secret. */
        assert_int_equal(key_try(WH_PROVIDER_STRIPE, "whsec_a\0b", 9, err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
}

static void test_secret_generate(void **state)
{
        char a[WH_SECRET_BYTES], b[WH_SECRET_BYTES];
        uint8_t raw[64];
        (void)state;

        assert_int_equal(wh_secret_generate(a, sizeof(a)), KS_OK);
        assert_int_equal(wh_secret_generate(b, sizeof(b)), KS_OK);
        assert_int_equal(strlen(a), WH_SECRET_BYTES - 1);
        assert_true(strncmp(a, "whsec_", 6) == 0);
        assert_int_equal(ks_base64_decode(a + 6, strlen(a + 6), raw, sizeof(raw)),
                         WH_SECRET_RANDOM_BYTES);
        assert_string_not_equal(a, b);

        /* Usable for both providers, signing what the other side verifies. */
        wh_key *std = key_of(WH_PROVIDER_STANDARD, a), *stripe = key_of(WH_PROVIDER_STRIPE, a);
        char sig[WH_STANDARD_SIGNATURE_BYTES], header[WH_STRIPE_HEADER_BYTES];
        assert_int_equal(wh_sign_standard(std, "msg_1", 5, 1700000000, "{}", 2, sig, sizeof(sig)),
                         KS_OK);
        wh_request req = standard_request("msg_1", "1700000000", sig, "{}", 2);
        assert_verdict(verify_one(WH_PROVIDER_STANDARD, &req, std, 1700000000), WH_OK, "standard");
        assert_int_equal(wh_sign_stripe(stripe, 1700000000, "{}", 2, header, sizeof(header)),
                         KS_OK);
        req = stripe_request(header, strlen(header), "{}", 2);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, stripe, 1700000000), WH_OK, "stripe");
        wh_key_free(stripe);
        wh_key_free(std);
}

static void test_random_failure(void **state)
{
        char out[WH_SECRET_BYTES];
        (void)state;

        memset(out, 'x', sizeof(out));
        rand_fail = true;
        int rc = wh_secret_generate(out, sizeof(out));
        rand_fail = false;
        assert_int_equal(rc, KS_INTERNAL);
        assert_string_equal(out, "");
        assert_int_equal(wh_secret_generate(out, sizeof(out)), KS_OK);
}

/* ---- signing ------------------------------------------------------------------------------------
 */

static void test_sign_refusals(void **state)
{
        wh_key *std = key_of(WH_PROVIDER_STANDARD, standard_vectors[0].secret);
        wh_key *stripe = key_of(WH_PROVIDER_STRIPE, "whsec_test_secret");
        char sig[WH_STANDARD_SIGNATURE_BYTES], header[WH_STRIPE_HEADER_BYTES];
        (void)state;

        assert_int_equal(wh_sign_standard(std, "a.b", 3, 1, "", 0, sig, sizeof(sig)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(sig, "");
        assert_int_equal(wh_sign_standard(std, "", 0, 1, "", 0, sig, sizeof(sig)),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(wh_sign_standard(std, NULL, 0, 1, "", 0, sig, sizeof(sig)),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(wh_sign_standard(std, "m", 1, -1, "", 0, sig, sizeof(sig)),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(
            wh_sign_standard(std, "m", 1, WH_TIMESTAMP_MAX + 1, "", 0, sig, sizeof(sig)),
            KS_INVALID_ARGUMENT);
        assert_int_equal(wh_sign_stripe(stripe, -1, "", 0, header, sizeof(header)),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(header, "");

        /* The longest header fits its buffer exactly, and verifies. */
        assert_int_equal(wh_sign_stripe(stripe, WH_TIMESTAMP_MAX, NULL, 0, header, sizeof(header)),
                         KS_OK);
        assert_int_equal(strlen(header), WH_STRIPE_HEADER_BYTES - 1);
        wh_request req = stripe_request(header, strlen(header), NULL, 0);
        assert_verdict(verify_one(WH_PROVIDER_STRIPE, &req, stripe, WH_TIMESTAMP_MAX), WH_OK,
                       "largest timestamp");
        assert_int_equal(wh_sign_standard(std, "m", 1, 0, NULL, 0, sig, sizeof(sig)), KS_OK);
        assert_int_equal(strlen(sig), WH_STANDARD_SIGNATURE_BYTES - 1);
        wh_key_free(stripe);
        wh_key_free(std);
}

/* ---- allocation failures
 * ------------------------------------------------------------------------- */

/*
 * Runs op with the n-th OpenSSL allocation failing, for n = 1, 2, ... until
 * op completes without reaching it. op returns true when its outcome is
 * one of the allowed ones (success, or the documented internal error) and
 * checks that nothing half-done is visible.
 */
static void with_each_allocation_failing(bool (*op)(bool faulted), const char *what)
{
        for (long n = 1; n < 10000; n++) {
                fi_countdown = n;
                bool ok = op(true);
                bool reached = fi_countdown == 0;
                fi_countdown = 0;
                if (!ok) {
                        fail_msg("%s: wrong outcome with allocation %ld failing", what, n);
                }
                /* After a failure the next, unfaulted call succeeds. */
                if (!op(false)) {
                        fail_msg("%s: no recovery after allocation %ld failed", what, n);
                }
                if (!reached) {
                        print_message("%s: %ld OpenSSL allocation(s), each made to fail once\n",
                                      what, n - 1);
                        return;
                }
        }
        fail_msg("%s: never completed", what);
}

static bool op_key_new(bool faulted)
{
        const standard_vector *tv = &standard_vectors[0];
        wh_key *key = NULL;
        int rc = wh_key_new(&key, WH_PROVIDER_STANDARD, tv->secret, strlen(tv->secret), NULL, 0);
        bool ok = rc == KS_OK ? key != NULL : (faulted && rc == KS_INTERNAL && key == NULL);

        /* A key made, even with an allocation failing inside, signs right (faults paused). */
        if (rc == KS_OK) {
                char sig[WH_STANDARD_SIGNATURE_BYTES];
                long paused = fi_countdown;
                fi_countdown = 0;
                int src = wh_sign_standard(key, tv->id, strlen(tv->id), tv->timestamp, tv->payload,
                                           tv->payload_len, sig, sizeof(sig));
                fi_countdown = paused;
                if (src != KS_OK || strcmp(sig, tv->signature) != 0) {
                        print_message("sign after a faulted wh_key_new: %d %s\n", src, sig);
                        ok = false;
                }
        } else if (!ok) {
                print_message("wh_key_new: %d\n", rc);
        }
        wh_key_free(key);
        return ok;
}

static wh_key *fault_key;

static bool op_verify(bool faulted)
{
        const stripe_vector *tv = &stripe_vectors[0];
        wh_request req = stripe_request(tv->header, strlen(tv->header), tv->payload, 226);
        wh_verdict v =
            wh_verify(WH_PROVIDER_STRIPE, &req, &fault_key, 1, tv->timestamp, TOLERANCE_S, NULL);
        return v == WH_OK || (faulted && v == WH_INTERNAL);
}

static bool op_sign(bool faulted)
{
        const stripe_vector *tv = &stripe_vectors[0];
        char header[WH_STRIPE_HEADER_BYTES];
        int rc = wh_sign_stripe(fault_key, tv->timestamp, tv->payload, 226, header, sizeof(header));

        if (rc == KS_OK) {
                return strcmp(header, tv->header) == 0;
        }
        return faulted && rc == KS_INTERNAL && header[0] == '\0';
}

static bool op_generate(bool faulted)
{
        char out[WH_SECRET_BYTES];
        int rc = wh_secret_generate(out, sizeof(out));
        return rc == KS_OK ? strlen(out) == WH_SECRET_BYTES - 1
                           : faulted && rc == KS_INTERNAL && out[0] == '\0';
}

/*
 * First in the run, so that the first key also makes the module's HMAC
 * template under faults. OpenSSL's own initialisation happens before, without
 * faults: a failure there would disable OpenSSL for the whole process, which
 * is not this module's to test.
 */
static void test_allocation_failures(void **state)
{
        EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
        unsigned char warm[16];
        (void)state;

        assert_non_null(mac);
        assert_non_null(md);
        assert_int_equal(RAND_bytes_ex(NULL, warm, sizeof(warm), 0), 1);
        EVP_MD_free(md);
        EVP_MAC_free(mac);

        with_each_allocation_failing(op_key_new, "wh_key_new");
        fault_key = key_of(WH_PROVIDER_STRIPE, stripe_vectors[0].secret);
        with_each_allocation_failing(op_verify, "wh_verify");
        with_each_allocation_failing(op_sign, "wh_sign_stripe");
        with_each_allocation_failing(op_generate, "wh_secret_generate");
        wh_key_free(fault_key);
        fault_key = NULL;
}

int main(void)
{
        /* Before OpenSSL allocates anything, or it refuses. */
        if (CRYPTO_set_mem_functions(fi_malloc, fi_realloc, fi_free) != 1) {
                fprintf(stderr, "CRYPTO_set_mem_functions refused: OpenSSL allocated already\n");
                return 1;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_allocation_failures),
            cmocka_unit_test(test_verdict_names),
            cmocka_unit_test(test_standard_vectors),
            cmocka_unit_test(test_stripe_vectors),
            cmocka_unit_test(test_nul_bytes_in_body),
            cmocka_unit_test(test_stripe_rotation),
            cmocka_unit_test(test_standard_rotation),
            cmocka_unit_test(test_stripe_shapes),
            cmocka_unit_test(test_stripe_odd_bytes),
            cmocka_unit_test(test_standard_signature_shapes),
            cmocka_unit_test(test_standard_headers),
            cmocka_unit_test(test_standard_long_id),
            cmocka_unit_test(test_oversize_headers),
            cmocka_unit_test(test_window),
            cmocka_unit_test(test_check_order),
            cmocka_unit_test(test_parse),
            cmocka_unit_test(test_standard_key_lengths),
            cmocka_unit_test(test_standard_key_text),
            cmocka_unit_test(test_stripe_key_text),
            cmocka_unit_test(test_secret_generate),
            cmocka_unit_test(test_random_failure),
            cmocka_unit_test(test_sign_refusals),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
