/*
 * libFuzzer target: the webhook signature headers and their verification
 * (services/webhook/signature.c) over untrusted header values and bodies.
 *
 * Input: 5 bytes, then text.
 *   byte 0      bit 0: 0 = Stripe, 1 = Standard Webhooks
 *   bytes 1-2   now - timestamp, a signed 16-bit offset (little-endian)
 *   bytes 3-4   tolerance: 1 + value % WH_TOLERANCE_S_MAX
 *   Stripe:     "<Stripe-Signature>\n<body>"
 *   Standard:   "<webhook-id>\n<webhook-timestamp>\n<webhook-signature>\n<body>"
 * The body is all that remains, '\n' and NUL included; a missing part is
 * an absent header.
 *
 * Checks, aborting on a violation:
 * - wh_parse's verdict, timestamp and signature count agree with a small
 *   reference reading of the rules signature.c documents, and each decoded
 *   signature with OpenSSL's own hex or base64 decoding;
 * - wh_verify gives wh_parse's verdict when parsing fails, the window's
 *   verdict (computed here) when the timestamp is outside it, and sets the
 *   timestamp exactly when the headers parse;
 * - "ok" only when the header carries the body's real MAC under the key;
 * - what keelson signs for the input's body (and id) verifies, and stops
 *   verifying once the body gains a byte; the Standard signer refuses
 *   exactly the ids the parser calls bad.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "ks_code.h"
#include "signature.h"

#define STRIPE_SECRET   "whsec_fuzz_stripe_secret"
#define STANDARD_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define BASE_TIMESTAMP  INT64_C(1700000000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn)) static void die(const char *what)
{
        fprintf(stderr, "fuzz_webhook_signature: %s\n", what);
        abort();
}

/* ---- the reference reading -------------------------------------------------------- */

typedef struct text {
        const char *p;
        size_t n;
} text;

static bool ref_digits(text t, int64_t *out)
{
        int64_t v = 0;
        if (t.n < 1 || t.n > WH_TIMESTAMP_DIGITS_MAX) {
                return false;
        }
        for (size_t i = 0; i < t.n; i++) {
                if (t.p[i] < '0' || t.p[i] > '9') {
                        return false;
                }
                v = v * 10 + (t.p[i] - '0');
        }
        *out = v;
        return true;
}

static size_t count_char(text t, char c)
{
        size_t n = 0;
        for (size_t i = 0; i < t.n; i++) {
                n += t.p[i] == c;
        }
        return n;
}

/* The part of t before the first sep (all of t without one); *rest after it. */
static text cut(text t, char sep, text *rest, bool *found)
{
        const char *at = memchr(t.p, sep, t.n);
        text head = {t.p, at != NULL ? (size_t)(at - t.p) : t.n};
        *found = at != NULL;
        if (rest != NULL) {
                rest->p = at != NULL ? at + 1 : t.p + t.n;
                rest->n = at != NULL ? t.n - head.n - 1 : 0;
        }
        return head;
}

static bool is_hex(char c)
{
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool ref_hex_mac(text v)
{
        if (v.n != 64) {
                return false;
        }
        for (size_t i = 0; i < v.n; i++) {
                if (!is_hex(v.p[i])) {
                        return false;
                }
        }
        return true;
}

static wh_verdict ref_stripe(text h, int64_t *t, size_t *n_sig)
{
        bool seen_t = false, more = true;
        size_t n_v1 = 0;

        *n_sig = 0;
        if (h.n == 0) {
                return WH_MISSING_HEADER;
        }
        if (h.n > WH_HEADER_BYTES_MAX) {
                return WH_MALFORMED_HEADER;
        }
        while (more) {
                text item = cut(h, ',', &h, &more), value;
                bool eq;
                if (count_char(item, '=') != 1) {
                        return WH_MALFORMED_HEADER;
                }
                text key = cut(item, '=', &value, &eq);
                if (key.n == 1 && key.p[0] == 't') {
                        if (seen_t || !ref_digits(value, t)) {
                                return WH_MALFORMED_HEADER;
                        }
                        seen_t = true;
                } else if (key.n == 2 && memcmp(key.p, "v1", 2) == 0) {
                        if (++n_v1 > WH_SIGNATURES_MAX) {
                                return WH_MALFORMED_HEADER;
                        }
                        *n_sig += ref_hex_mac(value);
                }
        }
        if (!seen_t) {
                return WH_MALFORMED_HEADER;
        }
        return *n_sig > 0 ? WH_OK : WH_NO_SIGNATURE;
}

static bool ref_id_ok(text id)
{
        if (id.n > WH_ID_BYTES_MAX) {
                return false;
        }
        for (size_t i = 0; i < id.n; i++) {
                unsigned char c = (unsigned char)id.p[i];
                if (c < 0x21 || c > 0x7e || c == '.') {
                        return false;
                }
        }
        return true;
}

/* 43 standard base64 characters, the last with two zero bits, then '='. */
static bool ref_base64_mac(text v)
{
        static const char alphabet[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        if (v.n != 44 || v.p[43] != '=') {
                return false;
        }
        for (size_t i = 0; i < 43; i++) {
                const char *at = v.p[i] != '\0' ? strchr(alphabet, v.p[i]) : NULL;
                if (at == NULL || (i == 42 && (at - alphabet) % 4 != 0)) {
                        return false;
                }
        }
        return true;
}

static wh_verdict ref_standard(text id, text ts, text sig, int64_t *t, size_t *n_sig)
{
        bool more = true;
        size_t n_v1 = 0;

        *n_sig = 0;
        if (id.p == NULL || id.n == 0 || ts.p == NULL || ts.n == 0 || sig.p == NULL || sig.n == 0) {
                return WH_MISSING_HEADER;
        }
        if (!ref_id_ok(id)) {
                return WH_BAD_ID;
        }
        if (!ref_digits(ts, t) || sig.n > WH_HEADER_BYTES_MAX) {
                return WH_MALFORMED_HEADER;
        }
        while (more) {
                text entry = cut(sig, ' ', &sig, &more);
                if (entry.n >= 3 && memcmp(entry.p, "v1,", 3) == 0) {
                        if (++n_v1 > WH_SIGNATURES_MAX) {
                                return WH_MALFORMED_HEADER;
                        }
                        *n_sig += ref_base64_mac((text){entry.p + 3, entry.n - 3});
                }
        }
        return *n_sig > 0 ? WH_OK : WH_NO_SIGNATURE;
}

/* ---- keys and helpers ----------------------------------------------------------- */

static wh_key *stripe_key, *standard_key;

static void keys_init(void)
{
        if (stripe_key != NULL) {
                return;
        }
        if (wh_key_new(&stripe_key, WH_PROVIDER_STRIPE, STRIPE_SECRET, strlen(STRIPE_SECRET), NULL,
                       0) != KS_OK ||
            wh_key_new(&standard_key, WH_PROVIDER_STANDARD, STANDARD_SECRET,
                       strlen(STANDARD_SECRET), NULL, 0) != KS_OK) {
                die("cannot make the keys");
        }
}

static bool contains(text hay, const char *needle, bool ignore_case)
{
        size_t n = strlen(needle);
        for (size_t i = 0; n <= hay.n && i <= hay.n - n; i++) {
                if ((ignore_case ? strncasecmp(hay.p + i, needle, n)
                                 : memcmp(hay.p + i, needle, n)) == 0) {
                        return true;
                }
        }
        return false;
}

static int64_t clamp_now(int64_t t, int64_t delta)
{
        int64_t now = t + delta;
        return now < 0 ? 0 : now > WH_TIMESTAMP_MAX ? WH_TIMESTAMP_MAX : now;
}

static wh_verdict ref_window(int64_t t, int64_t now, int64_t tolerance)
{
        if (now - t > tolerance) {
                return WH_TIMESTAMP_TOO_OLD;
        }
        return t - now > tolerance ? WH_TIMESTAMP_TOO_NEW : WH_OK;
}

/* The parsed signatures decode as OpenSSL decodes them, in order. */
static void check_decoded(const wh_parsed *p, text *values, size_t n_values, bool hex)
{
        size_t k = 0;
        for (size_t i = 0; i < n_values; i++) {
                uint8_t want[48];
                if (hex) {
                        for (size_t j = 0; j < WH_MAC_BYTES; j++) {
                                char pair[3] = {values[i].p[2 * j], values[i].p[2 * j + 1], '\0'};
                                want[j] = (uint8_t)strtoul(pair, NULL, 16);
                        }
                } else if (EVP_DecodeBlock(want, (const unsigned char *)values[i].p, 44) != 33) {
                        die("OpenSSL does not decode a signature the parser kept");
                }
                if (k >= p->n_signatures || memcmp(p->signatures[k++], want, WH_MAC_BYTES) != 0) {
                        die("a decoded signature differs from OpenSSL's decoding");
                }
        }
        if (k != p->n_signatures) {
                die("more signatures decoded than the header holds");
        }
}

/* ---- the checks -------------------------------------------------------------------- */

typedef struct input {
        bool standard;
        int64_t delta;
        int64_t tolerance;
        text id, ts, sig, body;
} input;

/* Splits the input as the header comment says; false when it is too short. */
static bool read_input(const uint8_t *data, size_t size, input *in)
{
        bool found = true;
        text rest;

        if (size < 5) {
                return false;
        }
        rest.p = (const char *)data + 5;
        rest.n = size - 5;
        memset(in, 0, sizeof(*in));
        in->standard = data[0] & 1;
        in->delta = (int16_t)(data[1] | data[2] << 8);
        in->tolerance = 1 + (data[3] | data[4] << 8) % WH_TOLERANCE_S_MAX;
        text *parts[4] = {&in->id, &in->ts, &in->sig, &in->body};
        for (size_t i = in->standard ? 0 : 2; i < 4; i++) {
                if (!found) {
                        break; /* an absent part: NULL */
                }
                *parts[i] = i == 3 ? rest : cut(rest, '\n', &rest, &found);
        }
        if (in->body.p == NULL) {
                in->body.p = "";
        }
        return true;
}

static wh_request request_of(const input *in, text body)
{
        wh_request req = {
            .signature = in->sig.p, .signature_len = in->sig.n, .body = body.p, .body_len = body.n};
        if (in->standard) {
                req.id = in->id.p;
                req.id_len = in->id.n;
                req.timestamp = in->ts.p;
                req.timestamp_len = in->ts.n;
        }
        return req;
}

/* The v1 values the reference keeps, in order, for check_decoded. */
static size_t kept_values(const input *in, text *out)
{
        text h = in->sig;
        bool more = h.n > 0;
        size_t n = 0;

        while (more && n < WH_SIGNATURES_MAX) {
                text item = cut(h, in->standard ? ' ' : ',', &h, &more), value;
                bool sep;
                text key = cut(item, in->standard ? ',' : '=', &value, &sep);
                if (sep && key.n == 2 && memcmp(key.p, "v1", 2) == 0 &&
                    (in->standard ? ref_base64_mac(value) : ref_hex_mac(value))) {
                        out[n++] = value;
                }
        }
        return n;
}

static void check_parse(const input *in, const wh_request *req, wh_parsed *p, wh_verdict *ref)
{
        int64_t ref_t = -1;
        size_t ref_n = 0;
        wh_verdict v = wh_parse(in->standard ? WH_PROVIDER_STANDARD : WH_PROVIDER_STRIPE, req, p);

        *ref = in->standard ? ref_standard(in->id, in->ts, in->sig, &ref_t, &ref_n)
                            : ref_stripe(in->sig, &ref_t, &ref_n);
        if (v != *ref) {
                fprintf(stderr, "wh_parse %s, reference %s\n", wh_verdict_name((int)v),
                        wh_verdict_name((int)*ref));
                die("wh_parse disagrees with the reference");
        }
        if (v != WH_OK) {
                return;
        }
        if (p->timestamp != ref_t || p->n_signatures != ref_n) {
                die("wh_parse's timestamp or signature count differs from the reference");
        }
        text values[WH_SIGNATURES_MAX];
        check_decoded(p, values, kept_values(in, values), !in->standard);
}

/* The MAC of the input's body as keelson signs it: hex (Stripe) or base64 (Standard). */
static bool real_mac(const input *in, int64_t t, text body, char *out, size_t out_len)
{
        char buf[WH_STRIPE_HEADER_BYTES];
        if (in->standard) {
                if (wh_sign_standard(standard_key, in->id.p, in->id.n, t, body.p, body.n, buf,
                                     sizeof(buf)) != KS_OK) {
                        return false;
                }
                snprintf(out, out_len, "%s", buf + 3);
        } else {
                if (wh_sign_stripe(stripe_key, t, body.p, body.n, buf, sizeof(buf)) != KS_OK) {
                        die("wh_sign_stripe failed on a parsed timestamp");
                }
                snprintf(out, out_len, "%s", strstr(buf, ",v1=") + 4);
        }
        return true;
}

static void check_verify(const input *in, const wh_request *req, const wh_parsed *p,
                         wh_verdict parsed)
{
        wh_key *key = in->standard ? standard_key : stripe_key;
        int64_t now = clamp_now(parsed == WH_OK ? p->timestamp : BASE_TIMESTAMP, in->delta),
                ts = -1;
        wh_verdict v = wh_verify(in->standard ? WH_PROVIDER_STANDARD : WH_PROVIDER_STRIPE, req,
                                 &key, 1, now, in->tolerance, &ts);
        char mac[96];

        if (parsed != WH_OK) {
                if (v != parsed || ts != 0) {
                        die("wh_verify's verdict or timestamp differs from wh_parse's refusal");
                }
                return;
        }
        if (ts != p->timestamp) {
                die("wh_verify's timestamp is not the parsed one");
        }
        wh_verdict window = ref_window(p->timestamp, now, in->tolerance);
        if (window != WH_OK) {
                if (v != window) {
                        die("wh_verify's verdict is not the window's");
                }
                return;
        }
        if (v != WH_OK && v != WH_SIGNATURE_MISMATCH) {
                die("wh_verify: a parsed header in the window is neither ok nor a mismatch");
        }
        if (v == WH_OK && (!real_mac(in, p->timestamp, in->body, mac, sizeof(mac)) ||
                           !contains(in->sig, mac, !in->standard))) {
                die("wh_verify says ok but the header lacks the body's MAC");
        }
}

/* What keelson signs for this body verifies; one more byte of body does not. */
static void check_round_trip(const input *in)
{
        int64_t t = clamp_now(BASE_TIMESTAMP, in->delta);
        char header[WH_STRIPE_HEADER_BYTES], ts[32];
        wh_key *key = in->standard ? standard_key : stripe_key;
        wh_provider provider = in->standard ? WH_PROVIDER_STANDARD : WH_PROVIDER_STRIPE;
        wh_request req = {.body = in->body.p, .body_len = in->body.n};
        int rc;

        if (in->standard) {
                rc = wh_sign_standard(key, in->id.p, in->id.n, t, in->body.p, in->body.n, header,
                                      sizeof(header));
                if ((rc == KS_OK) != (in->id.n > 0 && ref_id_ok(in->id))) {
                        die("wh_sign_standard's refusal disagrees with the id rule");
                }
                if (rc != KS_OK) {
                        return;
                }
                snprintf(ts, sizeof(ts), "%lld", (long long)t);
                req.id = in->id.p;
                req.id_len = in->id.n;
                req.timestamp = ts;
                req.timestamp_len = strlen(ts);
        } else if (wh_sign_stripe(key, t, in->body.p, in->body.n, header, sizeof(header)) !=
                   KS_OK) {
                die("wh_sign_stripe failed");
        }
        req.signature = header;
        req.signature_len = strlen(header);
        if (wh_verify(provider, &req, &key, 1, t, 1, NULL) != WH_OK) {
                die("a signature keelson made does not verify");
        }
        char *longer = malloc(in->body.n + 1);
        if (longer == NULL) {
                abort();
        }
        memcpy(longer, in->body.p, in->body.n);
        longer[in->body.n] = '\n';
        req.body = longer;
        req.body_len = in->body.n + 1;
        if (wh_verify(provider, &req, &key, 1, t, 1, NULL) != WH_SIGNATURE_MISMATCH) {
                die("a signature verifies a body with a byte more");
        }
        free(longer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        input in;
        wh_parsed p;
        wh_verdict parsed;

        if (!read_input(data, size, &in)) {
                return 0;
        }
        keys_init();
        wh_request req = request_of(&in, in.body);
        check_parse(&in, &req, &p, &parsed);
        check_verify(&in, &req, &p, parsed);
        check_round_trip(&in);
        return 0;
}
