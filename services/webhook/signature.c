/*
 * signature: Stripe and Standard Webhooks signatures (signature.h).
 *
 * Sources each rule follows, read in their code, not from memory:
 * - Stripe: stripe-go webhook/client.go (parseSignatureHeader,
 *   ComputeSignature, validatePayload) and stripe-node src/Webhooks.ts
 *   (parseHeader, validateComputedSignature, DEFAULT_TOLERANCE = 300).
 * - Standard Webhooks: spec/standard-webhooks.md (v1.0.0), and the
 *   reference libraries libraries/go/webhook.go and
 *   libraries/javascript/src/index.ts of standard-webhooks/standard-webhooks.
 *
 * Speed: a key keeps an HMAC context keyed once (the ipad/opad states);
 * each MAC re-initialises it from those states (EVP_MAC_init with a NULL
 * key), so a verification costs the hash of its bytes and little else
 * (tools/bench_webhook_verify.c measures it against OpenSSL alone).
 *
 * When OpenSSL fails, the thread's OpenSSL error queue is cleared: this
 * module answers with its own status, and a stale entry would mislead the
 * next OpenSSL caller on the thread (TLS, libpq).
 */
#include "signature.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "ks_assert.h"
#include "ks_crypto.h"

/* Base64 of one HMAC-SHA256: 43 characters and one '=' (standard, padded). */
#define MAC_BASE64_CHARS 44
#define MAC_HEX_CHARS    (2 * WH_MAC_BYTES)

/* Room for "{id}.{timestamp}." before the body. */
#define PREFIX_BYTES_MAX (WH_ID_BYTES_MAX + 1 + WH_TIMESTAMP_DIGITS_MAX + 1)

/* The longest Standard Webhooks secret: the prefix and base64 of the largest key. */
#define STANDARD_SECRET_BASE64_MAX (4 * ((WH_STANDARD_KEY_BYTES_MAX + 2) / 3))

struct wh_key {
        wh_provider provider;
        EVP_MAC_CTX *mac; /* HMAC-SHA256, keyed */
};

static const char *const verdict_names[WH_VERDICT_COUNT] = {
    [WH_OK] = "ok",
    [WH_MISSING_HEADER] = "missing_header",
    [WH_MALFORMED_HEADER] = "malformed_header",
    [WH_BAD_ID] = "bad_id",
    [WH_NO_SIGNATURE] = "no_signature",
    [WH_TIMESTAMP_TOO_OLD] = "timestamp_too_old",
    [WH_TIMESTAMP_TOO_NEW] = "timestamp_too_new",
    [WH_SIGNATURE_MISMATCH] = "signature_mismatch",
    [WH_INTERNAL] = "internal",
};

const char *wh_verdict_name(int verdict)
{
        if (verdict < 0 || verdict >= WH_VERDICT_COUNT) {
                return "unknown";
        }
        KS_ASSERT(verdict_names[verdict] != NULL);
        return verdict_names[verdict];
}

const char *wh_provider_name(int provider)
{
        switch (provider) {
        case WH_PROVIDER_STRIPE:
                return "stripe";
        case WH_PROVIDER_STANDARD:
                return "standard";
        default:
                return "unknown";
        }
}

static bool provider_valid(wh_provider provider)
{
        return provider == WH_PROVIDER_STRIPE || provider == WH_PROVIDER_STANDARD;
}

/* ------------------------------------------------------------------------ */
/* The HMAC template, fetched once                                          */
/* ------------------------------------------------------------------------ */

/*
 * HMAC with SHA-256 set and no key, which each new key duplicates (an
 * OpenSSL 3 fetch per key would cost more than the MAC). Made on first use
 * under a lock rather than pthread_once, so that a failure (an allocation)
 * is retried by the next key instead of lasting as long as the process.
 */
static pthread_mutex_t hmac_lock = PTHREAD_MUTEX_INITIALIZER;
static EVP_MAC_CTX *hmac_template;

static EVP_MAC_CTX *hmac_fetch(void)
{
        EVP_MAC *mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
        EVP_MAC_CTX *ctx;
        OSSL_PARAM params[2];

        if (mac == NULL) {
                return NULL;
        }
        ctx = EVP_MAC_CTX_new(mac);
        EVP_MAC_free(mac); /* the context holds its own reference */
        if (ctx == NULL) {
                return NULL;
        }
        params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0);
        params[1] = OSSL_PARAM_construct_end();
        if (EVP_MAC_CTX_set_params(ctx, params) != 1) {
                EVP_MAC_CTX_free(ctx);
                return NULL;
        }
        return ctx;
}

/* The template, or NULL when it cannot be made now. Never freed once made. */
static EVP_MAC_CTX *hmac_template_get(void)
{
        EVP_MAC_CTX *t;

        KS_ASSERT(pthread_mutex_lock(&hmac_lock) == 0);
        if (hmac_template == NULL) {
                hmac_template = hmac_fetch();
        }
        t = hmac_template;
        KS_ASSERT(pthread_mutex_unlock(&hmac_lock) == 0);
        return t;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

static void set_err(char *err, size_t err_len, const char *msg)
{
        if (err != NULL && err_len > 0) {
                snprintf(err, err_len, "%s", msg);
        }
}

/*
 * Stripe: the HMAC key is the endpoint secret's bytes as given, prefix
 * included (stripe-go ComputeSignature: hmac.New(sha256.New,
 * []byte(secret)); stripe-node: crypto.createHmac('sha256', secret)).
 * Stricter than both: a space or control character is refused, being
 * almost always a stray newline from a secrets file (stripe-node only adds
 * a hint about whitespace to its error message).
 */
static int stripe_secret_check(const char *secret, size_t len, char *err, size_t err_len)
{
        if (len == 0) {
                set_err(err, err_len, "secret: empty");
                return KS_INVALID_ARGUMENT;
        }
        if (len > WH_STRIPE_SECRET_BYTES_MAX) {
                set_err(err, err_len, "secret: longer than 256 bytes");
                return KS_INVALID_ARGUMENT;
        }
        for (size_t i = 0; i < len; i++) {
                if (secret[i] <= ' ' || secret[i] > '~') {
                        set_err(err, err_len,
                                "secret: only printable ASCII without spaces (a stray newline?)");
                        return KS_INVALID_ARGUMENT;
                }
        }
        return KS_OK;
}

/*
 * Character classes for the parsers, one lookup per byte: the digits of a
 * signature are random, and branching on each of them mispredicts about
 * every other time (the branches cost more than the rest of a parse).
 * b64_std: the standard base64 alphabet. hex_hi, hex_lo: a hex digit (either
 * case) as the high or low half of a byte, flagged valid by 0x200 or 0x100.
 */
static const uint8_t b64_std[256] = {
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
    ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1,
    ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1,
    ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['+'] = 1, ['/'] = 1,
};

static const uint16_t hex_hi[256] = {
    ['0'] = 0x200, ['1'] = 0x210, ['2'] = 0x220, ['3'] = 0x230, ['4'] = 0x240, ['5'] = 0x250,
    ['6'] = 0x260, ['7'] = 0x270, ['8'] = 0x280, ['9'] = 0x290, ['a'] = 0x2a0, ['b'] = 0x2b0,
    ['c'] = 0x2c0, ['d'] = 0x2d0, ['e'] = 0x2e0, ['f'] = 0x2f0, ['A'] = 0x2a0, ['B'] = 0x2b0,
    ['C'] = 0x2c0, ['D'] = 0x2d0, ['E'] = 0x2e0, ['F'] = 0x2f0,
};

static const uint16_t hex_lo[256] = {
    ['0'] = 0x100, ['1'] = 0x101, ['2'] = 0x102, ['3'] = 0x103, ['4'] = 0x104, ['5'] = 0x105,
    ['6'] = 0x106, ['7'] = 0x107, ['8'] = 0x108, ['9'] = 0x109, ['a'] = 0x10a, ['b'] = 0x10b,
    ['c'] = 0x10c, ['d'] = 0x10d, ['e'] = 0x10e, ['f'] = 0x10f, ['A'] = 0x10a, ['B'] = 0x10b,
    ['C'] = 0x10c, ['D'] = 0x10d, ['E'] = 0x10e, ['F'] = 0x10f,
};

static bool b64_std_char(char c)
{
        return b64_std[(unsigned char)c] != 0;
}

/*
 * Standard base64 with its padding, as the reference libraries decode a
 * secret (Go: base64.StdEncoding; JavaScript: @stablelib/base64, which
 * refuses a length that is not a multiple of 4). ks_base64_decode also takes
 * the URL alphabet and no padding: this check comes first.
 */
static bool b64_std_padded(const char *s, size_t n)
{
        size_t pad = 0;

        if (n == 0 || n % 4 != 0) {
                return false;
        }
        while (pad < 2 && s[n - 1 - pad] == '=') {
                pad++;
        }
        for (size_t i = 0; i < n - pad; i++) {
                if (!b64_std_char(s[i])) {
                        return false;
                }
        }
        return true;
}

/*
 * Standard Webhooks: "whsec_" (optional, as both libraries TrimPrefix it)
 * then base64 of the key; the spec's symmetric secret is "at least 24 bytes
 * (192 bits, 512 maximum)": 24..64 bytes. The libraries only refuse an
 * empty key; keelson refuses any length outside the spec's.
 */
static int standard_secret_decode(const char *secret, size_t len, uint8_t *key, size_t *key_len,
                                  char *err, size_t err_len)
{
        const size_t prefix_len = strlen(WH_SECRET_PREFIX);
        char msg[128];
        int n;

        if (len >= prefix_len && memcmp(secret, WH_SECRET_PREFIX, prefix_len) == 0) {
                secret += prefix_len;
                len -= prefix_len;
        }
        if (len == 0) {
                set_err(err, err_len, "secret: empty");
                return KS_INVALID_ARGUMENT;
        }
        /* Past 88 characters, valid base64 is 92 or more: at least 67 bytes. */
        if (len > STANDARD_SECRET_BASE64_MAX) {
                set_err(err, err_len, "secret: a key longer than 64 bytes");
                return KS_INVALID_ARGUMENT;
        }
        if (!b64_std_padded(secret, len) ||
            (n = ks_base64_decode(secret, len, key, WH_STANDARD_KEY_BYTES_MAX + 3)) < 0) {
                set_err(err, err_len, "secret: not standard padded base64 after \"whsec_\"");
                return KS_INVALID_ARGUMENT;
        }
        if (n < WH_STANDARD_KEY_BYTES_MIN || n > WH_STANDARD_KEY_BYTES_MAX) {
                snprintf(msg, sizeof(msg),
                         "secret: a %d-byte key; Standard Webhooks keys are %d to %d bytes", n,
                         WH_STANDARD_KEY_BYTES_MIN, WH_STANDARD_KEY_BYTES_MAX);
                set_err(err, err_len, msg);
                return KS_INVALID_ARGUMENT;
        }
        *key_len = (size_t)n;
        return KS_OK;
}

/* A fresh HMAC-SHA256 context keyed with key, or NULL when OpenSSL fails. */
static EVP_MAC_CTX *mac_new(const uint8_t *key, size_t key_len)
{
        EVP_MAC_CTX *template = hmac_template_get(), *ctx;

        if (template == NULL || (ctx = EVP_MAC_CTX_dup(template)) == NULL) {
                ERR_clear_error();
                return NULL;
        }
        if (EVP_MAC_init(ctx, key, key_len, NULL) != 1) {
                EVP_MAC_CTX_free(ctx);
                ERR_clear_error();
                return NULL;
        }
        return ctx;
}

int wh_key_new(wh_key **out, wh_provider provider, const char *secret, size_t secret_len, char *err,
               size_t err_len)
{
        uint8_t decoded[WH_STANDARD_KEY_BYTES_MAX + 3];
        const uint8_t *key = (const uint8_t *)secret;
        size_t key_len = secret_len;
        wh_key *k = NULL;
        int rc;

        KS_ASSERT(out != NULL);
        KS_ASSERT(provider_valid(provider));
        KS_ASSERT(secret != NULL || secret_len == 0);
        *out = NULL;
        if (provider == WH_PROVIDER_STRIPE) {
                rc = stripe_secret_check(secret, secret_len, err, err_len);
        } else {
                rc = standard_secret_decode(secret, secret_len, decoded, &key_len, err, err_len);
                key = decoded;
        }
        if (rc != KS_OK) {
                goto done;
        }
        rc = KS_INTERNAL;
        if ((k = OPENSSL_zalloc(sizeof(*k))) == NULL || (k->mac = mac_new(key, key_len)) == NULL) {
                set_err(err, err_len, "secret: OpenSSL could not make an HMAC context");
                wh_key_free(k);
                goto done;
        }
        k->provider = provider;
        *out = k;
        rc = KS_OK;
done:
        OPENSSL_cleanse(decoded, sizeof(decoded));
        return rc;
}

void wh_key_free(wh_key *key)
{
        if (key == NULL) {
                return;
        }
        EVP_MAC_CTX_free(key->mac); /* OpenSSL clears the key and states it held */
        OPENSSL_clear_free(key, sizeof(*key));
}

wh_provider wh_key_provider(const wh_key *key)
{
        KS_ASSERT(key != NULL);
        return key->provider;
}

int wh_secret_generate(char *out, size_t out_len)
{
        const size_t prefix_len = strlen(WH_SECRET_PREFIX);
        uint8_t raw[WH_SECRET_RANDOM_BYTES];
        int rc = KS_INTERNAL, n;

        KS_ASSERT(out != NULL && out_len >= WH_SECRET_BYTES);
        out[0] = '\0';
        if (RAND_bytes(raw, (int)sizeof(raw)) == 1) {
                memcpy(out, WH_SECRET_PREFIX, prefix_len);
                n = ks_base64_encode(raw, sizeof(raw), out + prefix_len, out_len - prefix_len);
                KS_ASSERT(n == MAC_BASE64_CHARS); /* 32 bytes, like a MAC: 44 characters */
                rc = KS_OK;
        } else {
                ERR_clear_error();
        }
        OPENSSL_cleanse(raw, sizeof(raw));
        return rc;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A timestamp: 1..WH_TIMESTAMP_DIGITS_MAX ASCII digits, nothing else. Go's
 * strconv.ParseInt (both Go libraries) also takes a sign; stripe-node's and
 * the Standard JavaScript library's parseInt take trailing garbage; keelson
 * takes neither. Leading zeros are accepted, and the MAC covers the digits
 * without them, as both Go libraries re-format the parsed value
 * (fmt.Sprintf("%d", t.Unix())) and both JavaScript ones print the number.
 */
static bool parse_timestamp(const char *s, size_t len, wh_parsed *out)
{
        int64_t v = 0;
        size_t lead = 0;

        if (len == 0 || len > WH_TIMESTAMP_DIGITS_MAX) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9') {
                        return false;
                }
                v = v * 10 + (s[i] - '0');
        }
        while (lead + 1 < len && s[lead] == '0') {
                lead++;
        }
        out->timestamp = v;
        out->timestamp_digits = s + lead;
        out->timestamp_digits_len = len - lead;
        return true;
}

/* 64 hex digits, either case (Go's hex.DecodeString), into a MAC. */
static bool decode_hex_mac(const char *s, size_t len, uint8_t mac[WH_MAC_BYTES])
{
        unsigned valid = 0x300;

        if (len != MAC_HEX_CHARS) {
                return false;
        }
        for (size_t i = 0; i < WH_MAC_BYTES; i++) {
                unsigned v = hex_hi[(unsigned char)s[2 * i]] | hex_lo[(unsigned char)s[2 * i + 1]];
                valid &= v;
                mac[i] = (uint8_t)v;
        }
        return valid == 0x300;
}

/*
 * The canonical standard base64 of a MAC: 43 characters of the alphabet,
 * the last holding 4 bits and two zero bits, then '='. Both reference
 * libraries compare the text with their own encoding, so only this form can
 * match; decoding it lets both providers compare 32 bytes. OpenSSL's
 * EVP_DecodeBlock decodes (it takes a '=' anywhere as zero bits, hence the
 * alphabet check first); its 33rd byte holds the two bits that must be zero
 * and the padding's.
 */
static bool decode_base64_mac(const char *s, size_t len, uint8_t mac[WH_MAC_BYTES])
{
        unsigned char out[WH_MAC_BYTES + 1];
        unsigned bad = 0;

        if (len != MAC_BASE64_CHARS || s[MAC_BASE64_CHARS - 1] != '=') {
                return false;
        }
        for (size_t i = 0; i < MAC_BASE64_CHARS - 1; i++) {
                bad |= b64_std[(unsigned char)s[i]] ^ 1u;
        }
        if (bad != 0 ||
            EVP_DecodeBlock(out, (const unsigned char *)s, MAC_BASE64_CHARS) != WH_MAC_BYTES + 1 ||
            out[WH_MAC_BYTES] != 0) {
                return false;
        }
        memcpy(mac, out, WH_MAC_BYTES);
        return true;
}

/* One v1 value: counted against WH_SIGNATURES_MAX, kept when it can be a MAC. */
static bool add_v1(wh_parsed *out, size_t *n_v1, const char *s, size_t len, bool hex)
{
        if (++*n_v1 > WH_SIGNATURES_MAX) {
                return false;
        }
        if (hex ? decode_hex_mac(s, len, out->signatures[out->n_signatures])
                : decode_base64_mac(s, len, out->signatures[out->n_signatures])) {
                out->n_signatures++;
        }
        return true;
}

/*
 * One "key=value" item of a Stripe-Signature header. Following stripe-go's
 * parseSignatureHeader: an item must split on '=' into exactly two parts
 * (strings.Split(pair, "=") with len(parts) != 2 is ErrInvalidHeader: no
 * '=', or more than one, is malformed); "t" is the timestamp, an invalid one
 * malformed; "v1" a signature, one that is not hex ignored ("Ignore invalid
 * signatures"); anything else (v0, unknown keys, " v1" with a space: no
 * trimming) ignored.
 *
 * Stricter than stripe-go: a second "t" is malformed (stripe-go keeps the
 * last), as are more than WH_SIGNATURES_MAX v1 items; a v1 value of valid
 * hex but not 64 digits is ignored (stripe-go keeps it, to fail the
 * comparison: the same outcome).
 */
static bool stripe_item(const char *item, size_t len, wh_parsed *out, bool *seen_t, size_t *n_v1)
{
        const char *eq = memchr(item, '=', len);
        const char *value;
        size_t key_len, value_len;

        if (eq == NULL || memchr(eq + 1, '=', len - (size_t)(eq + 1 - item)) != NULL) {
                return false;
        }
        key_len = (size_t)(eq - item);
        value = eq + 1;
        value_len = len - key_len - 1;
        if (key_len == 1 && item[0] == 't') {
                if (*seen_t || !parse_timestamp(value, value_len, out)) {
                        return false;
                }
                *seen_t = true;
        } else if (key_len == 2 && item[0] == 'v' && item[1] == '1') {
                return add_v1(out, n_v1, value, value_len, true);
        }
        return true;
}

/*
 * "t=1495999758,v1=ABC,v1=DEF,v0=GHI": items split on ',' (an empty item,
 * as in ",," or a trailing ',', has no '=' and is malformed, as in
 * stripe-go). A header without "t" is malformed (stripe-go would take the
 * zero time and refuse it as too old; stripe-node: "Unable to extract
 * timestamp and signatures from header"); without a usable v1,
 * no_signature (stripe-go's ErrNoValidSignature).
 */
static wh_verdict parse_stripe(const wh_request *req, wh_parsed *out)
{
        const char *s = req->signature, *end = s + req->signature_len;
        bool seen_t = false;
        size_t n_v1 = 0;

        if (s == NULL || req->signature_len == 0) {
                return WH_MISSING_HEADER;
        }
        if (req->signature_len > WH_HEADER_BYTES_MAX) {
                return WH_MALFORMED_HEADER;
        }
        for (;;) {
                const char *comma = memchr(s, ',', (size_t)(end - s));
                const char *item_end = comma != NULL ? comma : end;
                if (!stripe_item(s, (size_t)(item_end - s), out, &seen_t, &n_v1)) {
                        return WH_MALFORMED_HEADER;
                }
                if (comma == NULL) {
                        break;
                }
                s = comma + 1;
        }
        if (!seen_t) {
                return WH_MALFORMED_HEADER;
        }
        return out->n_signatures > 0 ? WH_OK : WH_NO_SIGNATURE;
}

/*
 * webhook-id: the spec wants ids that cannot contain '.' ("to prevent
 * certain attacks": the signed content is "{id}.{timestamp}.{body}"); the
 * libraries do not check it, keelson does, and also bounds its length and
 * keeps it to printable ASCII without spaces, since it becomes the
 * idempotency key.
 */
static bool standard_id_ok(const char *id, size_t len)
{
        if (len > WH_ID_BYTES_MAX) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                if (id[i] <= ' ' || id[i] > '~' || id[i] == '.') {
                        return false;
                }
        }
        return true;
}

/*
 * webhook-signature: a space-delimited list of "<version>,<signature>"
 * (spec; Go and JavaScript split on a single " "). As both libraries do, an
 * entry without ',' or of another version (v1a, v2, an empty entry from a
 * double space) is ignored; "v1,<x>" is a v1 signature whose value is all
 * that follows the first ','. So "v1,<sig>,junk" matches nothing, as in the
 * JavaScript library as published (npm standardwebhooks 1.3.0 compares the
 * whole entry with "v1,<expected>"); the Go library, and the JavaScript
 * source before it, compare the part between the first and second ',' and
 * would accept it.
 */
static wh_verdict parse_standard_signatures(const char *s, size_t len, wh_parsed *out)
{
        const char *end = s + len;
        size_t n_v1 = 0;

        for (;;) {
                const char *space = memchr(s, ' ', (size_t)(end - s));
                const char *entry_end = space != NULL ? space : end;
                size_t entry_len = (size_t)(entry_end - s);
                if (entry_len >= 3 && memcmp(s, "v1,", 3) == 0 &&
                    !add_v1(out, &n_v1, s + 3, entry_len - 3, false)) {
                        return WH_MALFORMED_HEADER;
                }
                if (space == NULL) {
                        break;
                }
                s = space + 1;
        }
        return out->n_signatures > 0 ? WH_OK : WH_NO_SIGNATURE;
}

/*
 * The three headers must all be there and non-empty (both libraries:
 * "missing required headers"); then the id, the timestamp (malformed when it
 * is not digits, as Go's errInvalidHeaders), the signature list.
 */
static wh_verdict parse_standard(const wh_request *req, wh_parsed *out)
{
        if (req->id == NULL || req->id_len == 0 || req->timestamp == NULL ||
            req->timestamp_len == 0 || req->signature == NULL || req->signature_len == 0) {
                return WH_MISSING_HEADER;
        }
        if (!standard_id_ok(req->id, req->id_len)) {
                return WH_BAD_ID;
        }
        if (!parse_timestamp(req->timestamp, req->timestamp_len, out) ||
            req->signature_len > WH_HEADER_BYTES_MAX) {
                return WH_MALFORMED_HEADER;
        }
        out->id = req->id;
        out->id_len = req->id_len;
        return parse_standard_signatures(req->signature, req->signature_len, out);
}

wh_verdict wh_parse(wh_provider provider, const wh_request *req, wh_parsed *out)
{
        KS_ASSERT(provider_valid(provider));
        KS_ASSERT(req != NULL && out != NULL);
        KS_ASSERT(req->body != NULL || req->body_len == 0);
        /* Not the signature slots: they are written before they count. */
        out->timestamp = 0;
        out->timestamp_digits = NULL;
        out->timestamp_digits_len = 0;
        out->id = NULL;
        out->id_len = 0;
        out->n_signatures = 0;
        if (provider == WH_PROVIDER_STRIPE) {
                return parse_stripe(req, out);
        }
        return parse_standard(req, out);
}

/* ------------------------------------------------------------------------ */
/* MACs                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * HMAC-SHA256 of prefix then body under key. The key's context is
 * re-initialised from its keyed state (a NULL key to EVP_MAC_init reuses
 * the one set before). 0, or -1 when OpenSSL fails.
 */
static int mac_compute(wh_key *key, const char *prefix, size_t prefix_len, const void *body,
                       size_t body_len, uint8_t out[WH_MAC_BYTES])
{
        static const unsigned char empty[1];
        size_t out_len = 0;

        if (EVP_MAC_init(key->mac, NULL, 0, NULL) != 1 ||
            EVP_MAC_update(key->mac, (const unsigned char *)prefix, prefix_len) != 1 ||
            EVP_MAC_update(key->mac, body_len > 0 ? body : empty, body_len) != 1 ||
            EVP_MAC_final(key->mac, out, &out_len, WH_MAC_BYTES) != 1) {
                ERR_clear_error();
                return -1;
        }
        KS_ASSERT(out_len == WH_MAC_BYTES);
        return 0;
}

/*
 * What precedes the body in the signed content: Stripe "{t}." (stripe-go
 * ComputeSignature, stripe-node makeHMACContent); Standard Webhooks
 * "{id}.{timestamp}." (spec: "{msg_id}.{timestamp}.{payload}"). Returns its
 * length.
 */
static size_t signed_prefix(const wh_parsed *p, char buf[PREFIX_BYTES_MAX])
{
        size_t n = 0;

        KS_ASSERT(p->id_len <= WH_ID_BYTES_MAX);
        KS_ASSERT(p->timestamp_digits_len >= 1 &&
                  p->timestamp_digits_len <= WH_TIMESTAMP_DIGITS_MAX);
        if (p->id != NULL) {
                memcpy(buf, p->id, p->id_len);
                n = p->id_len;
                buf[n++] = '.';
        }
        memcpy(buf + n, p->timestamp_digits, p->timestamp_digits_len);
        n += p->timestamp_digits_len;
        buf[n++] = '.';
        return n;
}

/*
 * The acceptance window, both directions, bounds included: old when now -
 * t > tolerance (stripe-go: time.Since(t) > tolerance; stripe-node:
 * timestampAge > tolerance; Standard Go/JavaScript: now - t > tolerance),
 * new when t - now > tolerance (Standard Go/JavaScript: t > now +
 * tolerance). For Stripe the second check is keelson's own: stripe-go and
 * stripe-node refuse only old timestamps.
 */
static wh_verdict check_window(int64_t t, int64_t now_s, int64_t tolerance_s)
{
        /* Both in [0, 10^18): neither difference can overflow. */
        if (now_s - t > tolerance_s) {
                return WH_TIMESTAMP_TOO_OLD;
        }
        if (t - now_s > tolerance_s) {
                return WH_TIMESTAMP_TOO_NEW;
        }
        return WH_OK;
}

/*
 * Each key's HMAC once, then every signature against every MAC with
 * CRYPTO_memcmp and no early exit (stripe-go: "Check all given v1
 * signatures, multiple signatures will be sent temporarily in the case of a
 * rolled signature secret"; the spec: try each signature, in constant time).
 */
static wh_verdict match_signatures(const wh_parsed *p, const wh_request *req, wh_key *const keys[],
                                   size_t n_keys)
{
        uint8_t macs[WH_KEYS_MAX][WH_MAC_BYTES];
        char prefix[PREFIX_BYTES_MAX];
        size_t prefix_len = signed_prefix(p, prefix);
        wh_verdict verdict = WH_INTERNAL;
        unsigned matched = 0;

        for (size_t k = 0; k < n_keys; k++) {
                if (mac_compute(keys[k], prefix, prefix_len, req->body, req->body_len, macs[k]) !=
                    0) {
                        goto done;
                }
        }
        for (size_t i = 0; i < p->n_signatures; i++) {
                for (size_t k = 0; k < n_keys; k++) {
                        matched |=
                            (unsigned)(CRYPTO_memcmp(p->signatures[i], macs[k], WH_MAC_BYTES) == 0);
                }
        }
        verdict = matched ? WH_OK : WH_SIGNATURE_MISMATCH;
done:
        /* A MAC of a body the sender chose is a forgery if it leaks: leave none behind. */
        OPENSSL_cleanse(macs, n_keys * WH_MAC_BYTES);
        return verdict;
}

wh_verdict wh_verify(wh_provider provider, const wh_request *req, wh_key *const keys[],
                     size_t n_keys, int64_t now_s, int64_t tolerance_s, int64_t *timestamp_out)
{
        wh_parsed p;
        wh_verdict v;

        KS_ASSERT(keys != NULL && n_keys >= 1 && n_keys <= WH_KEYS_MAX);
        for (size_t k = 0; k < n_keys; k++) {
                KS_ASSERT(keys[k] != NULL && keys[k]->provider == provider);
        }
        KS_ASSERT(now_s >= 0 && now_s <= WH_TIMESTAMP_MAX);
        KS_ASSERT(tolerance_s >= 1 && tolerance_s <= WH_TOLERANCE_S_MAX);
        if (timestamp_out != NULL) {
                *timestamp_out = 0;
        }
        if ((v = wh_parse(provider, req, &p)) != WH_OK) {
                return v;
        }
        if (timestamp_out != NULL) {
                *timestamp_out = p.timestamp;
        }
        if ((v = check_window(p.timestamp, now_s, tolerance_s)) != WH_OK) {
                return v;
        }
        return match_signatures(&p, req, keys, n_keys);
}

/* ------------------------------------------------------------------------ */
/* Signing                                                                  */
/* ------------------------------------------------------------------------ */

/* The parsed form of what keelson signs, so that signing and verifying share signed_prefix. */
static int sign_prepare(wh_parsed *p, const char *id, size_t id_len, int64_t timestamp,
                        char digits[WH_TIMESTAMP_DIGITS_MAX + 1])
{
        int n;

        if (timestamp < 0 || timestamp > WH_TIMESTAMP_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        n = snprintf(digits, WH_TIMESTAMP_DIGITS_MAX + 1, "%" PRId64, timestamp);
        KS_ASSERT(n >= 1 && n <= WH_TIMESTAMP_DIGITS_MAX);
        memset(p, 0, sizeof(*p));
        p->timestamp = timestamp;
        p->timestamp_digits = digits;
        p->timestamp_digits_len = (size_t)n;
        p->id = id;
        p->id_len = id_len;
        return KS_OK;
}

int wh_sign_standard(wh_key *key, const char *id, size_t id_len, int64_t timestamp,
                     const void *body, size_t body_len, char *out, size_t out_len)
{
        char digits[WH_TIMESTAMP_DIGITS_MAX + 1], prefix[PREFIX_BYTES_MAX];
        uint8_t mac[WH_MAC_BYTES];
        wh_parsed p;
        int rc;

        KS_ASSERT(key != NULL && key->provider == WH_PROVIDER_STANDARD);
        KS_ASSERT(body != NULL || body_len == 0);
        KS_ASSERT(out != NULL && out_len >= WH_STANDARD_SIGNATURE_BYTES);
        out[0] = '\0';
        if (id == NULL || id_len == 0 || !standard_id_ok(id, id_len)) {
                return KS_INVALID_ARGUMENT;
        }
        if ((rc = sign_prepare(&p, id, id_len, timestamp, digits)) != KS_OK) {
                return rc;
        }
        if (mac_compute(key, prefix, signed_prefix(&p, prefix), body, body_len, mac) != 0) {
                return KS_INTERNAL;
        }
        memcpy(out, "v1,", 3);
        rc = ks_base64_encode(mac, sizeof(mac), out + 3, out_len - 3);
        KS_ASSERT(rc == MAC_BASE64_CHARS);
        return KS_OK;
}

int wh_sign_stripe(wh_key *key, int64_t timestamp, const void *body, size_t body_len, char *out,
                   size_t out_len)
{
        char digits[WH_TIMESTAMP_DIGITS_MAX + 1], prefix[PREFIX_BYTES_MAX];
        char hex[MAC_HEX_CHARS + 1];
        uint8_t mac[WH_MAC_BYTES];
        wh_parsed p;
        int rc, n;

        KS_ASSERT(key != NULL && key->provider == WH_PROVIDER_STRIPE);
        KS_ASSERT(body != NULL || body_len == 0);
        KS_ASSERT(out != NULL && out_len >= WH_STRIPE_HEADER_BYTES);
        out[0] = '\0';
        if ((rc = sign_prepare(&p, NULL, 0, timestamp, digits)) != KS_OK) {
                return rc;
        }
        if (mac_compute(key, prefix, signed_prefix(&p, prefix), body, body_len, mac) != 0) {
                return KS_INTERNAL;
        }
        /* stripe-go generateHeader: "t=%d,%s=%s" with hex.EncodeToString (lower case). */
        ks_hex_encode(mac, sizeof(mac), hex);
        n = snprintf(out, out_len, "t=%s,v1=%s", digits, hex);
        KS_ASSERT(n > 0 && (size_t)n < out_len);
        return KS_OK;
}
