/*
 * bench_webhook_verify: webhook signature verifications per second
 * (services/webhook/signature.c, wh_verify) next to raw OpenSSL HMAC-SHA256
 * over the same signed bytes, measured in the same run, on one thread.
 *
 *   bench_webhook_verify [--seconds S]   (S: the whole run's budget, default 3)
 *
 * Payloads: a Stripe-like JSON event of about 1.5 KB (an
 * invoice.payment_succeeded, pretty-printed as Stripe sends them) and the
 * same event grown to 64 KiB by its invoice lines.
 *
 * The baseline is the fastest straightforward OpenSSL 3 way to MAC one
 * message under a known key: EVP_MAC (HMAC, SHA-256) with a context keyed
 * once and re-initialised per message with EVP_MAC_init(ctx, NULL, 0, NULL),
 * which restarts from the saved ipad/opad states; then one EVP_MAC_update
 * over the signed bytes, prepared once ("{t}.{body}" for Stripe,
 * "{id}.{t}.{body}" for Standard Webhooks), and EVP_MAC_final. wh_verify
 * gets the same advantage: a wh_key keeps such a keyed context. (HMAC() and
 * EVP_Q_mac fetch the algorithm on every call and are slower; they would
 * flatter the ratio.) wh_verify's work beyond the baseline: parsing the
 * headers, checking the window, two updates instead of one, the
 * constant-time comparisons.
 *
 * Second table: the same with the key made for each verification
 * (wh_key_new + wh_verify + wh_key_free, as a service that keeps no key
 * between requests would), against OpenSSL keying a context duplicated from
 * a template for each MAC.
 *
 * Rates are per CPU-second of the thread (CLOCK_THREAD_CPUTIME_ID): on a
 * shared machine the wall clock also counts other processes. The variants
 * run interleaved in rounds of ~5 ms, so that a change of clock speed falls
 * on all of them alike.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "signature.h"

#define SECONDS_DEFAULT 3
#define SECONDS_MAX     600
#define ROUND_NS        5000000 /* one variant's turn in a round */
#define SMALL_BYTES     1536    /* at most: one invoice line */
#define LARGE_BYTES     65536

#define STRIPE_SECRET   "whsec_5Ek3Q9yP7cVnZ0b1LmT8rXw2HdJ4gUaF"
#define ROTATED_SECRET  "whsec_Rr7mK2pQ9vX4nB8cL1dF6gH3jT0wZ5yE"
#define STANDARD_SECRET "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
#define MSG_ID          "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
#define TIMESTAMP       INT64_C(1700000000)

/* A Stripe invoice.payment_succeeded event as Stripe formats them; LINE is one invoice line. */
#define EVENT_HEAD                                                                                 \
        "{\n  \"id\": \"evt_1PqW3r2eZvKYlo2C8dJk0aBc\",\n  \"object\": \"event\",\n"               \
        "  \"api_version\": \"2024-06-20\",\n  \"created\": 1700000000,\n  \"data\": {\n"          \
        "    \"object\": {\n      \"id\": \"in_1PqW3q2eZvKYlo2CmB8xT4nQ\",\n"                      \
        "      \"object\": \"invoice\",\n      \"account_country\": \"FR\",\n"                     \
        "      \"account_name\": \"Keelson Example SAS\",\n      \"amount_due\": 4200,\n"          \
        "      \"amount_paid\": 4200,\n"                                                           \
        "      \"attempted\": true,\n"                                                             \
        "      \"billing_reason\": \"subscription_cycle\",\n"                                      \
        "      \"charge\": \"ch_3PqW3r2eZvKYlo2C1Xc9Kq2L\",\n"                                     \
        "      \"collection_method\": \"charge_automatically\",\n      \"currency\": \"eur\",\n"   \
        "      \"customer\": \"cus_QhZ8e1wVt3Lk9A\",\n"                                            \
        "      \"customer_email\": \"billing@example.com\",\n"                                     \
        "      \"lines\": {\n        \"object\": \"list\",\n        \"data\": [\n"
#define LINE                                                                                       \
        "          {\n            \"id\": \"il_1PqW3q2eZvKYlo2CzR7uV1hY\",\n"                      \
        "            \"object\": \"line_item\",\n            \"amount\": 4200,\n"                  \
        "            \"currency\": \"eur\",\n"                                                     \
        "            \"description\": \"1 x Keelson Team (at 42.00 / month)\",\n"                  \
        "            \"period\": {\"end\": 1702592000, \"start\": 1700000000},\n"                  \
        "            \"quantity\": 1\n          }"
#define EVENT_TAIL                                                                                 \
        "\n        ],\n        \"has_more\": false,\n        \"total_count\": 1\n      },\n"       \
        "      \"livemode\": false,\n      \"number\": \"KX-2023-0042\",\n"                        \
        "      \"paid\": true,\n      \"period_end\": 1700000000,\n"                               \
        "      \"period_start\": 1697408000,\n      \"status\": \"paid\",\n"                       \
        "      \"subscription\": \"sub_1NvPcX2eZvKYlo2CfG3hJ8kL\",\n"                              \
        "      \"subtotal\": 4200,\n      \"tax\": 0,\n      \"total\": 4200\n    }\n  },\n"       \
        "  \"livemode\": false,\n  \"pending_webhooks\": 1,\n"                                     \
        "  \"request\": {\"id\": null, \"idempotency_key\": null},\n"                              \
        "  \"type\": \"invoice.payment_succeeded\"\n}\n"

typedef struct payload {
        const char *name;
        char *body;
        size_t len;
} payload;

/* The event with as many lines as fit in target bytes, padded with spaces to exactly target. */
static payload make_event(const char *name, size_t target)
{
        size_t fixed = strlen(EVENT_HEAD) + strlen(EVENT_TAIL), line = strlen(LINE);
        payload p = {name, malloc(target + 1), 0};
        size_t n = 0;

        if (p.body == NULL || target < fixed + line) {
                abort();
        }
        n += (size_t)sprintf(p.body, "%s%s", EVENT_HEAD, LINE);
        while (n + 2 + line + strlen(EVENT_TAIL) <= target) {
                n += (size_t)sprintf(p.body + n, ",\n%s", LINE);
        }
        n += (size_t)sprintf(p.body + n, "%s", EVENT_TAIL);
        if (target > fixed + line + 64) { /* the large one: exactly target bytes */
                memset(p.body + n - 2, ' ', target - n);
                memcpy(p.body + target - 2, "}\n", 2);
                n = target;
        }
        p.len = n;
        return p;
}

/* ---- what is measured -------------------------------------------------------------- */

typedef struct bench {
        const payload *p;
        wh_key *stripe, *rotated, *standard;
        char stripe_header[WH_STRIPE_HEADER_BYTES];
        char standard_sig[WH_STANDARD_SIGNATURE_BYTES];
        char ts[24];
        wh_request stripe_req, standard_req;
        unsigned char *stripe_signed, *standard_signed; /* the bytes each scheme MACs */
        size_t stripe_signed_len, standard_signed_len;
        EVP_MAC_CTX *raw; /* the baseline: keyed once with the Stripe secret */
        EVP_MAC_CTX *raw_std;
        EVP_MAC_CTX *raw_template; /* HMAC-SHA256, no key */
} bench;

static volatile unsigned char sink;

static void fail(const char *what)
{
        fprintf(stderr, "bench_webhook_verify: %s\n", what);
        exit(1);
}

static wh_key *key_of(wh_provider provider, const char *secret)
{
        wh_key *key;
        char err[128];
        if (wh_key_new(&key, provider, secret, strlen(secret), err, sizeof(err)) != KS_OK) {
                fail(err);
        }
        return key;
}

static void expect_ok(wh_verdict v)
{
        if (v != WH_OK) {
                fail(wh_verdict_name((int)v));
        }
}

/* The baseline's MAC: a context keyed once, restarted from its keyed state. */
static void raw_mac(EVP_MAC_CTX *ctx, const unsigned char *msg, size_t len)
{
        unsigned char out[32];
        size_t out_len;
        if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1 || EVP_MAC_update(ctx, msg, len) != 1 ||
            EVP_MAC_final(ctx, out, &out_len, sizeof(out)) != 1) {
                fail("EVP_MAC failed");
        }
        sink ^= out[0];
}

/* The baseline with a key set per MAC: a context duplicated from the template, keyed, freed. */
static void raw_mac_cold(const bench *b, const char *key, const unsigned char *msg, size_t len)
{
        EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(b->raw_template);
        if (ctx == NULL || EVP_MAC_init(ctx, (const unsigned char *)key, strlen(key), NULL) != 1) {
                fail("EVP_MAC_init failed");
        }
        raw_mac(ctx, msg, len);
        EVP_MAC_CTX_free(ctx);
}

enum {
        RAW_STRIPE,
        WH_STRIPE_1,
        WH_STRIPE_2,
        RAW_STANDARD,
        WH_STANDARD_1,
        RAW_COLD,
        WH_STRIPE_COLD,
        WH_STANDARD_COLD,
        VARIANTS
};

static const char *const variant_names[VARIANTS] = {
    [RAW_STRIPE] = "raw OpenSSL HMAC over \"{t}.{body}\"",
    [WH_STRIPE_1] = "wh_verify Stripe, 1 key",
    [WH_STRIPE_2] = "wh_verify Stripe, 2 keys (rotation)",
    [RAW_STANDARD] = "raw OpenSSL HMAC over \"{id}.{t}.{body}\"",
    [WH_STANDARD_1] = "wh_verify Standard Webhooks, 1 key",
    [RAW_COLD] = "raw OpenSSL HMAC, key set per MAC",
    [WH_STRIPE_COLD] = "wh_key_new + wh_verify Stripe",
    [WH_STANDARD_COLD] = "wh_key_new + wh_verify Standard",
};

static void run_once(const bench *b, int variant)
{
        wh_key *keys[2], *k;

        switch (variant) {
        case RAW_STRIPE:
                raw_mac(b->raw, b->stripe_signed, b->stripe_signed_len);
                break;
        case WH_STRIPE_1:
                expect_ok(wh_verify(WH_PROVIDER_STRIPE, &b->stripe_req,
                                    (wh_key *const[]){b->stripe}, 1, TIMESTAMP, 300, NULL));
                break;
        case WH_STRIPE_2: /* the old key first: both MACs are always computed */
                keys[0] = b->rotated;
                keys[1] = b->stripe;
                expect_ok(
                    wh_verify(WH_PROVIDER_STRIPE, &b->stripe_req, keys, 2, TIMESTAMP, 300, NULL));
                break;
        case RAW_STANDARD:
                raw_mac(b->raw_std, b->standard_signed, b->standard_signed_len);
                break;
        case WH_STANDARD_1:
                expect_ok(wh_verify(WH_PROVIDER_STANDARD, &b->standard_req,
                                    (wh_key *const[]){b->standard}, 1, TIMESTAMP, 300, NULL));
                break;
        case RAW_COLD:
                raw_mac_cold(b, STRIPE_SECRET, b->stripe_signed, b->stripe_signed_len);
                break;
        case WH_STRIPE_COLD:
                k = key_of(WH_PROVIDER_STRIPE, STRIPE_SECRET);
                expect_ok(
                    wh_verify(WH_PROVIDER_STRIPE, &b->stripe_req, &k, 1, TIMESTAMP, 300, NULL));
                wh_key_free(k);
                break;
        case WH_STANDARD_COLD:
                k = key_of(WH_PROVIDER_STANDARD, STANDARD_SECRET);
                expect_ok(
                    wh_verify(WH_PROVIDER_STANDARD, &b->standard_req, &k, 1, TIMESTAMP, 300, NULL));
                wh_key_free(k);
                break;
        default:
                abort();
        }
}

/* ---- set-up ------------------------------------------------------------------------- */

static EVP_MAC_CTX *hmac_ctx(const char *key)
{
        EVP_MAC *mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
        EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
        OSSL_PARAM params[2] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
            OSSL_PARAM_construct_end()};

        EVP_MAC_free(mac);
        if (ctx == NULL || EVP_MAC_CTX_set_params(ctx, params) != 1 ||
            (key != NULL &&
             EVP_MAC_init(ctx, (const unsigned char *)key, strlen(key), NULL) != 1)) {
                fail("cannot make an HMAC-SHA256 context");
        }
        return ctx;
}

/* prefix then body, in one buffer: what the baseline MACs. */
static unsigned char *concat(const char *prefix, const payload *p, size_t *len)
{
        size_t n = strlen(prefix);
        unsigned char *buf = malloc(n + p->len);
        if (buf == NULL) {
                abort();
        }
        memcpy(buf, prefix, n);
        memcpy(buf + n, p->body, p->len);
        *len = n + p->len;
        return buf;
}

static void bench_init(bench *b, const payload *p)
{
        uint8_t standard_key[64];
        memset(b, 0, sizeof(*b));
        b->p = p;
        b->stripe = key_of(WH_PROVIDER_STRIPE, STRIPE_SECRET);
        b->rotated = key_of(WH_PROVIDER_STRIPE, ROTATED_SECRET);
        b->standard = key_of(WH_PROVIDER_STANDARD, STANDARD_SECRET);
        if (wh_sign_stripe(b->stripe, TIMESTAMP, p->body, p->len, b->stripe_header,
                           sizeof(b->stripe_header)) != KS_OK ||
            wh_sign_standard(b->standard, MSG_ID, strlen(MSG_ID), TIMESTAMP, p->body, p->len,
                             b->standard_sig, sizeof(b->standard_sig)) != KS_OK) {
                fail("cannot sign");
        }
        snprintf(b->ts, sizeof(b->ts), "%" PRId64, TIMESTAMP);
        b->stripe_req = (wh_request){.signature = b->stripe_header,
                                     .signature_len = strlen(b->stripe_header),
                                     .body = p->body,
                                     .body_len = p->len};
        b->standard_req = (wh_request){.id = MSG_ID,
                                       .id_len = strlen(MSG_ID),
                                       .timestamp = b->ts,
                                       .timestamp_len = strlen(b->ts),
                                       .signature = b->standard_sig,
                                       .signature_len = strlen(b->standard_sig),
                                       .body = p->body,
                                       .body_len = p->len};
        b->stripe_signed = concat("1700000000.", p, &b->stripe_signed_len);
        b->standard_signed = concat(MSG_ID ".1700000000.", p, &b->standard_signed_len);
        b->raw = hmac_ctx(STRIPE_SECRET);
        b->raw_template = hmac_ctx(NULL);
        /* The Standard key is the secret's base64 decoded: bytes 0..31. */
        for (int i = 0; i < 32; i++) {
                standard_key[i] = (uint8_t)i;
        }
        b->raw_std = hmac_ctx(NULL);
        if (EVP_MAC_init(b->raw_std, standard_key, 32, NULL) != 1) {
                fail("cannot key the Standard baseline");
        }
}

static void bench_free(bench *b)
{
        EVP_MAC_CTX_free(b->raw_std);
        EVP_MAC_CTX_free(b->raw_template);
        EVP_MAC_CTX_free(b->raw);
        free(b->standard_signed);
        free(b->stripe_signed);
        wh_key_free(b->standard);
        wh_key_free(b->rotated);
        wh_key_free(b->stripe);
}

/* ---- measuring ---------------------------------------------------------------------- */

static int64_t cpu_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Iterations of variant that take about ROUND_NS. */
static long calibrate(const bench *b, int variant)
{
        long n = 1;
        for (;;) {
                int64_t t0 = cpu_ns();
                for (long i = 0; i < n; i++) {
                        run_once(b, variant);
                }
                int64_t dt = cpu_ns() - t0;
                if (dt >= ROUND_NS / 4 || n >= (1L << 24)) {
                        return n * ROUND_NS / (dt > 0 ? dt : 1) + 1;
                }
                n *= 4;
        }
}

/* Rounds of every variant in turn until budget_ns of CPU time; rates in per_s. */
static void measure(const bench *b, int64_t budget_ns, double per_s[VARIANTS])
{
        long chunk[VARIANTS], count[VARIANTS] = {0};
        int64_t spent[VARIANTS] = {0}, total = 0;

        for (int v = 0; v < VARIANTS; v++) {
                chunk[v] = calibrate(b, v);
        }
        while (total < budget_ns) {
                for (int v = 0; v < VARIANTS; v++) {
                        int64_t t0 = cpu_ns();
                        for (long i = 0; i < chunk[v]; i++) {
                                run_once(b, v);
                        }
                        int64_t dt = cpu_ns() - t0;
                        spent[v] += dt;
                        count[v] += chunk[v];
                        total += dt;
                }
        }
        for (int v = 0; v < VARIANTS; v++) {
                per_s[v] = (double)count[v] * 1e9 / (double)spent[v];
        }
}

static void row(const char *size, int variant, double rate, double baseline)
{
        printf("%-18s %-42s %12.0f %7.2f\n", size, variant_names[variant], rate, rate / baseline);
}

static void report(const payload *p, const double r[VARIANTS])
{
        char size[32];
        snprintf(size, sizeof(size), "%zu bytes", p->len);
        printf("%s, %s\n", p->name, size);
        row("  prepared key", RAW_STRIPE, r[RAW_STRIPE], r[RAW_STRIPE]);
        row("", WH_STRIPE_1, r[WH_STRIPE_1], r[RAW_STRIPE]);
        row("", WH_STRIPE_2, r[WH_STRIPE_2], r[RAW_STRIPE]);
        row("", RAW_STANDARD, r[RAW_STANDARD], r[RAW_STANDARD]);
        row("", WH_STANDARD_1, r[WH_STANDARD_1], r[RAW_STANDARD]);
        row("  key per call", RAW_COLD, r[RAW_COLD], r[RAW_COLD]);
        row("", WH_STRIPE_COLD, r[WH_STRIPE_COLD], r[RAW_COLD]);
        row("", WH_STANDARD_COLD, r[WH_STANDARD_COLD], r[RAW_COLD]);
}

int main(int argc, char **argv)
{
        long seconds = SECONDS_DEFAULT;

        if (argc == 3 && strcmp(argv[1], "--seconds") == 0) {
                seconds = strtol(argv[2], NULL, 10);
        } else if (argc != 1) {
                seconds = 0;
        }
        if (seconds < 1 || seconds > SECONDS_MAX) {
                fprintf(stderr, "usage: bench_webhook_verify [--seconds 1..%d]\n", SECONDS_MAX);
                return 2;
        }
        payload payloads[2] = {make_event("Stripe-like event", SMALL_BYTES),
                               make_event("Stripe-like event, grown", LARGE_BYTES)};
        printf("webhook verifications per CPU-second, one thread, %ld s in all; %s\n", seconds,
               OpenSSL_version(OPENSSL_VERSION));
        printf("%-18s %-42s %12s %7s\n", "", "", "per second", "ratio");
        for (int i = 0; i < 2; i++) {
                bench b;
                double rates[VARIANTS];
                bench_init(&b, &payloads[i]);
                measure(&b, seconds * 1000000000LL / 2, rates);
                report(&payloads[i], rates);
                bench_free(&b);
                free(payloads[i].body);
        }
        printf("ratio: against the row's raw OpenSSL baseline, the same bytes MAC'd by OpenSSL "
               "alone.\n");
        return 0;
}
