/*
 * signature: webhook signatures, received and sent. Verifies what payment
 * providers send (Stripe's Stripe-Signature, and Standard Webhooks / Svix:
 * webhook-id, webhook-timestamp, webhook-signature) and signs the events
 * keelson delivers, both schemes HMAC-SHA256 over OpenSSL 3.
 *
 * Pure: no I/O but the random generator (wh_secret_generate), no clock (the
 * caller passes now_s), no allocation but the keys' MAC contexts. The rules,
 * and the library each follows, are written where they are applied in
 * signature.c; docs/security.md has them in prose.
 *
 * Verification checks, in this order, and stops at the first that fails:
 *
 *   1. the headers are present and not empty            missing_header
 *   2. they parse (bounded lengths, one timestamp, ...) malformed_header
 *      Standard Webhooks: the id is a usable id         bad_id
 *   3. at least one v1 signature that can be an HMAC    no_signature
 *   4. |now - timestamp| <= tolerance                   timestamp_too_old,
 *                                                       timestamp_too_new
 *   5. a v1 signature matches the HMAC of some key      signature_mismatch
 *
 * and "internal" when OpenSSL fails (an allocation): the webhook was not
 * judged, so the caller answers 5xx and the provider retries.
 */
#ifndef WH_SIGNATURE_H
#define WH_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

#define WH_MAC_BYTES 32 /* HMAC-SHA256 */

/*
 * Limits on what a request may carry. A header over them is malformed: the
 * providers send one timestamp and one or two signatures per scheme.
 */
#define WH_HEADER_BYTES_MAX     8192 /* a signature header's value */
#define WH_SIGNATURES_MAX       8    /* v1 entries in one signature header */
#define WH_ID_BYTES_MAX         255  /* webhook-id: it becomes an idempotency key */
#define WH_TIMESTAMP_DIGITS_MAX 18   /* any 18-digit decimal fits an int64 */
#define WH_TIMESTAMP_MAX        INT64_C(999999999999999999)

/* Keys: the current one and, during a rotation, the previous one. */
#define WH_KEYS_MAX 2

/* The widest acceptance window wh_verify takes, either side of now. */
#define WH_TOLERANCE_S_MAX 3600

/* Secrets. */
#define WH_SECRET_PREFIX           "whsec_"
#define WH_STRIPE_SECRET_BYTES_MAX 256 /* Stripe's are "whsec_" + 32 characters */
#define WH_STANDARD_KEY_BYTES_MIN  24  /* the spec: "at least 24 bytes (192 bits, */
#define WH_STANDARD_KEY_BYTES_MAX  64  /* 512 maximum)", i.e. 512 bits */
#define WH_SECRET_RANDOM_BYTES     32  /* what wh_secret_generate draws */
#define WH_SECRET_BYTES            51  /* "whsec_" + 44 base64 characters + NUL */

/* Output buffers of the signers, NUL included. */
#define WH_STANDARD_SIGNATURE_BYTES 48 /* "v1," + 44 base64 characters */
#define WH_STRIPE_HEADER_BYTES      89 /* "t=" + 18 digits + ",v1=" + 64 hex digits */

typedef enum wh_provider {
        WH_PROVIDER_STRIPE = 1,   /* Stripe-Signature: t=...,v1=<hex> */
        WH_PROVIDER_STANDARD = 2, /* Standard Webhooks (and Svix, white-labelled) */
} wh_provider;

typedef enum wh_verdict {
        WH_OK = 0,
        WH_MISSING_HEADER,
        WH_MALFORMED_HEADER,
        WH_BAD_ID,
        WH_NO_SIGNATURE,
        WH_TIMESTAMP_TOO_OLD,
        WH_TIMESTAMP_TOO_NEW,
        WH_SIGNATURE_MISMATCH,
        WH_INTERNAL,
        WH_VERDICT_COUNT
} wh_verdict;

/*
 * A verdict's stable short name, for a metric label or a log field: "ok",
 * "missing_header", "malformed_header", "bad_id", "no_signature",
 * "timestamp_too_old", "timestamp_too_new", "signature_mismatch",
 * "internal"; "unknown" out of range.
 */
const char *wh_verdict_name(int verdict);

/* "stripe", "standard"; "unknown" otherwise. */
const char *wh_provider_name(int provider);

/*
 * What a webhook request brings: header values and the raw body as
 * pointer + length (any bytes, NUL included). A header that is absent is
 * NULL; absent and empty are the same. Stripe uses signature alone.
 */
typedef struct wh_request {
        const char *signature; /* Stripe-Signature, or webhook-signature */
        size_t signature_len;
        const char *id; /* webhook-id (Standard Webhooks) */
        size_t id_len;
        const char *timestamp; /* webhook-timestamp (Standard Webhooks) */
        size_t timestamp_len;
        const void *body;
        size_t body_len;
} wh_request;

/* The parsed headers: pointers borrow from the request. */
typedef struct wh_parsed {
        int64_t timestamp;
        const char *timestamp_digits; /* its digits without leading zeros: what the MAC covers */
        size_t timestamp_digits_len;
        const char *id; /* Standard Webhooks; NULL for Stripe */
        size_t id_len;
        size_t n_signatures; /* v1 values that can be an HMAC-SHA256, decoded */
        uint8_t signatures[WH_SIGNATURES_MAX][WH_MAC_BYTES];
} wh_parsed;

/*
 * A key: a secret made ready to MAC (a keyed OpenSSL context). It is not
 * safe for concurrent use: wh_verify and the signers re-initialise its
 * context, so a key belongs to one thread at a time (build one per request,
 * or keep one per worker).
 */
typedef struct wh_key wh_key;

/*
 * Makes *out from an endpoint secret of secret_len bytes:
 * - Stripe: the key is the secret's bytes exactly as given, "whsec_" and
 *   all; 1..WH_STRIPE_SECRET_BYTES_MAX printable ASCII characters, no space.
 * - Standard Webhooks: an optional "whsec_" then standard padded base64 of
 *   WH_STANDARD_KEY_BYTES_MIN..WH_STANDARD_KEY_BYTES_MAX bytes, the key.
 * Returns KS_OK; KS_INVALID_ARGUMENT with a message in err ("secret: ...",
 * never the secret itself); KS_INTERNAL when OpenSSL fails. *out is NULL on
 * error. err may be NULL.
 */
int wh_key_new(wh_key **out, wh_provider provider, const char *secret, size_t secret_len, char *err,
               size_t err_len) KS_MUST_CHECK;

/* Frees a key and wipes it; NULL is accepted. */
void wh_key_free(wh_key *key);

wh_provider wh_key_provider(const wh_key *key);

/*
 * A new endpoint secret: "whsec_" + standard base64 of WH_SECRET_RANDOM_BYTES
 * from RAND_bytes, NUL-terminated into out (out_len >= WH_SECRET_BYTES).
 * Valid for both providers' wh_key_new. Returns KS_OK, or KS_INTERNAL when
 * the generator fails (out is then "").
 */
int wh_secret_generate(char *out, size_t out_len) KS_MUST_CHECK;

/*
 * Steps 1 to 3 above: the request's headers into *out. Returns WH_OK,
 * WH_MISSING_HEADER, WH_MALFORMED_HEADER, WH_BAD_ID or WH_NO_SIGNATURE
 * (*out is then unspecified).
 */
wh_verdict wh_parse(wh_provider provider, const wh_request *req, wh_parsed *out) KS_MUST_CHECK;

/*
 * Verifies a request against n_keys (1..WH_KEYS_MAX) keys of provider at
 * now_s (unix seconds), accepting timestamps within tolerance_s
 * (1..WH_TOLERANCE_S_MAX) either side of it, bounds included. Every v1
 * signature is compared with every key's HMAC, in constant time.
 * *timestamp_out (may be NULL) is the header's timestamp once the headers
 * parsed, else 0.
 */
wh_verdict wh_verify(wh_provider provider, const wh_request *req, wh_key *const keys[],
                     size_t n_keys, int64_t now_s, int64_t tolerance_s,
                     int64_t *timestamp_out) KS_MUST_CHECK;

/*
 * "v1,<base64 HMAC>" over "{id}.{timestamp}.{body}" into out (out_len >=
 * WH_STANDARD_SIGNATURE_BYTES), the webhook-signature of a delivery; key is
 * a Standard Webhooks key. Returns KS_OK; KS_INVALID_ARGUMENT when id is not
 * one wh_verify accepts or timestamp is outside 0..WH_TIMESTAMP_MAX;
 * KS_INTERNAL when OpenSSL fails. out is "" on error.
 */
int wh_sign_standard(wh_key *key, const char *id, size_t id_len, int64_t timestamp,
                     const void *body, size_t body_len, char *out, size_t out_len) KS_MUST_CHECK;

/*
 * "t=<timestamp>,v1=<hex HMAC>" over "{timestamp}.{body}" into out (out_len
 * >= WH_STRIPE_HEADER_BYTES), a Stripe-Signature value; key is a Stripe key.
 * Returns as wh_sign_standard.
 */
int wh_sign_stripe(wh_key *key, int64_t timestamp, const void *body, size_t body_len, char *out,
                   size_t out_len) KS_MUST_CHECK;

#endif
