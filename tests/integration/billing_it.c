/*
 * billing_it: BillingService through the stack's gateway in JSON (see
 * billing_it.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing_it.h"

#include <time.h>

#include "ks_crypto.h"

#define BIT_BODY_MAX (64 * 1024)

int bit_setup(void **state)
{
        return ait_setup(state);
}

void bit_tenant_new(const char *prefix, bit_tenant *t)
{
        memset(t, 0, sizeof(*t));
        ait_signup(prefix, prefix, &t->owner);
}

static void vcall(const char *token, const char *const *headers, const char *method,
                  it_http_response *out, const char *fmt, va_list ap)
{
        static char body[BIT_BODY_MAX];
        it_request req = {.token = token, .headers = headers};
        char path[160];
        int n = vsnprintf(body, sizeof(body), fmt, ap);

        assert_true(n >= 0 && (size_t)n < sizeof(body));
        snprintf(path, sizeof(path), BIT_PATH "%s", method);
        if (it_connect(ait_stack.gateway_url, path, body, (size_t)n, &req, out) != 0) {
                fail_msg("%s: no HTTP reply", method);
        }
}

void bit_call(const char *token, const char *const *headers, const char *method,
              it_http_response *out, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vcall(token, headers, method, out, fmt, ap);
        va_end(ap);
}

json_t *bit_ok(const char *token, const char *method, const char *fmt, ...)
{
        it_http_response r;
        va_list ap;
        json_t *j;

        va_start(ap, fmt);
        vcall(token, NULL, method, &r, fmt, ap);
        va_end(ap);
        if (r.status != 200) {
                fail_msg("%s: expected HTTP 200, got %ld: %.400s", method, r.status, r.body);
        }
        j = ait_json(&r);
        it_http_response_free(&r);
        return j;
}

/* A refusal with code and, unless message is NULL, that message. */
static void vrefused(const char *token, const char *method, const char *code, const char *message,
                     const char *fmt, va_list ap)
{
        it_http_response r;

        vcall(token, NULL, method, &r, fmt, ap);
        it_assert_refused(&r, method, code, message);
        it_http_response_free(&r);
}

void bit_fails(const char *token, const char *method, const char *code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vrefused(token, method, code, NULL, fmt, ap);
        va_end(ap);
}

void bit_fails_with(const char *token, const char *method, const char *code, const char *message,
                    const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vrefused(token, method, code, message, fmt, ap);
        va_end(ap);
}

json_t *bit_at(json_t *j, const char *path)
{
        char key[128];
        const char *p = path;

        while (j != NULL && *p != '\0') {
                const char *dot = strchr(p, '.');
                size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
                snprintf(key, sizeof(key), "%.*s", (int)n, p);
                j = json_object_get(j, key);
                p += n + (dot != NULL);
        }
        return j;
}

int64_t bit_int(json_t *j, const char *path)
{
        json_t *v = bit_at(j, path);

        if (v == NULL) {
                return 0;
        }
        if (json_is_integer(v)) {
                return (int64_t)json_integer_value(v);
        }
        if (!json_is_string(v)) {
                fail_msg("%s: not an integer", path);
        }
        return strtoll(json_string_value(v), NULL, 10);
}

const char *bit_str(json_t *j, const char *path)
{
        json_t *v = bit_at(j, path);

        return json_is_string(v) ? json_string_value(v) : "";
}

bool bit_bool(json_t *j, const char *path)
{
        return json_is_true(bit_at(j, path));
}

void bit_customer(const bit_tenant *t, const char *currency, int tax_rate_bp, const char *pm,
                  const char *clock_id, char id[BIT_ID_MAX])
{
        char email[AIT_EMAIL_MAX];
        json_t *j;

        it_unique_email("customer", email, sizeof(email));
        j = bit_ok(t->owner.token, "CreateCustomer",
                   "{\"email\":\"%s\",\"name\":\"Customer\",\"currency\":\"%s\","
                   "\"taxRateBp\":%d,\"defaultPaymentMethod\":\"%s\",\"testClockId\":\"%s\"}",
                   email, currency, tax_rate_bp, pm, clock_id);
        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "customer.id"));
        assert_int_equal(strlen(id), 36);
        json_decref(j);
}

void bit_plan(const bit_tenant *t, const char *code, const char *currency, const char *model,
              int64_t amount, const char *unit, int count, int trial_days)
{
        json_t *j = bit_ok(t->owner.token, "CreatePlan",
                           "{\"code\":\"%s\",\"name\":\"%s\",\"currency\":\"%s\","
                           "\"intervalUnit\":\"INTERVAL_UNIT_%s\",\"intervalCount\":%d,"
                           "\"trialDays\":%d,\"price\":{\"model\":\"PRICE_MODEL_%s\","
                           "\"amount\":\"%lld\"}}",
                           code, code, currency, unit, count, trial_days, model, (long long)amount);
        json_decref(j);
}

void bit_clock(const bit_tenant *t, int64_t frozen_ms, char id[BIT_ID_MAX])
{
        json_t *j =
            bit_ok(t->owner.token, "CreateTestClock",
                   "{\"name\":\"clock\",\"frozenTimeUnixMs\":\"%lld\"}", (long long)frozen_ms);

        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "testClock.id"));
        json_decref(j);
}

int bit_advance(const bit_tenant *t, const char *clock_id, int64_t to_ms)
{
        json_t *j =
            bit_ok(t->owner.token, "AdvanceTestClock",
                   "{\"id\":\"%s\",\"frozenTimeUnixMs\":\"%lld\"}", clock_id, (long long)to_ms);
        int n = (int)bit_int(j, "actionsRun");

        assert_int_equal(bit_int(j, "testClock.frozenTimeUnixMs"), to_ms);
        json_decref(j);
        return n;
}

long bit_postings_pending(const char *tenant_id)
{
        const char *p[1] = {tenant_id};

        return ait_sql_long(
            "SELECT count(*) FROM billing.postings_queue WHERE tenant_id = $1::uuid", 1, p);
}

void bit_wait_posted(const char *tenant_id, long timeout_ms)
{
        for (long waited = 0; bit_postings_pending(tenant_id) > 0; waited += 50) {
                if (waited >= timeout_ms) {
                        fail_msg("postings of %s still queued after %ld ms", tenant_id, timeout_ms);
                }
                it_sleep_ms(50);
        }
}

json_t *bit_reconcile_clean(const bit_tenant *t)
{
        json_t *j;

        bit_wait_posted(t->owner.tenant_id, 30000);
        j = bit_ok(t->owner.token, "GetReconciliation", "{}");
        if (bit_int(j, "discrepanciesTotal") != 0 || bit_int(j, "postingsPending") != 0) {
                char *s = json_dumps(j, JSON_COMPACT);
                fail_msg("reconciliation is not clean: %.2000s", s);
        }
        return j;
}

int bit_post(const char *gateway_url, const char *token, const char *const *headers,
             const char *method, const char *json, it_http_response *out)
{
        it_request req = {.token = token, .headers = headers};
        char path[160];

        snprintf(path, sizeof(path), BIT_PATH "%s", method);
        return it_connect(gateway_url, path, json, strlen(json), &req, out);
}

json_t *bit_reconcile_clean_at(const char *gateway_url, const bit_tenant *t)
{
        it_http_response r;
        json_t *j;

        bit_wait_posted(t->owner.tenant_id, 30000);
        if (bit_post(gateway_url, t->owner.token, NULL, "GetReconciliation", "{}", &r) != 0) {
                fail_msg("GetReconciliation through %s: no HTTP reply", gateway_url);
        }
        if (r.status != 200) {
                fail_msg("GetReconciliation through %s: HTTP %ld: %.400s", gateway_url, r.status,
                         r.body);
        }
        j = ait_json(&r);
        it_http_response_free(&r);
        if (bit_int(j, "discrepanciesTotal") != 0 || bit_int(j, "postingsPending") != 0) {
                char *s = json_dumps(j, JSON_COMPACT);
                fail_msg("reconciliation is not clean: %.2000s", s);
        }
        return j;
}

/* What postings.c queues for each fact (its header), as (source, type, code, amount). */
static const char sql_ledger_mismatches[] =
    "WITH inv AS (SELECT id, subtotal, tax, balance_applied, total FROM billing.invoices"
    "  WHERE tenant_id = $1::uuid AND state <> 0),"
    " expected AS ("
    "  SELECT id, 1::int8 AS type, 101 AS code, abs(subtotal) AS amount FROM inv"
    "   WHERE subtotal <> 0"
    "  UNION ALL SELECT id, 1, 102, abs(tax) FROM inv WHERE tax <> 0"
    "  UNION ALL SELECT id, 1, 103, balance_applied FROM inv WHERE balance_applied <> 0"
    "  UNION ALL SELECT id, 1, 104, -total FROM inv WHERE total < 0"
    "  UNION ALL SELECT id, 2, 111, amount FROM billing.payments"
    "   WHERE tenant_id = $1::uuid AND status = 1 AND amount <> 0"
    "  UNION ALL SELECT id, 3, 121, abs(subtotal) FROM billing.credit_notes"
    "   WHERE tenant_id = $1::uuid AND subtotal <> 0"
    "  UNION ALL SELECT id, 3, 122, abs(tax) FROM billing.credit_notes"
    "   WHERE tenant_id = $1::uuid AND tax <> 0"
    "  UNION ALL SELECT id, 3, 123, amount FROM billing.credit_notes"
    "   WHERE tenant_id = $1::uuid AND credited_to = 'refund'),"
    " found AS (SELECT user_data_128, user_data_64, code, amount::int8 FROM ledger.transfers"
    "  WHERE tenant_id = $1::uuid AND user_data_64 IN (1, 2, 3))"
    " SELECT (SELECT count(*) FROM (SELECT * FROM expected EXCEPT ALL SELECT * FROM found) m)"
    "  + (SELECT count(*) FROM (SELECT * FROM found EXCEPT ALL SELECT * FROM expected) d)";

long bit_ledger_mismatches(const char *tenant_id)
{
        const char *p[1] = {tenant_id};

        return ait_sql_long(sql_ledger_mismatches, 1, p);
}

int64_t bit_utc(int year, int month, int day, int hour, int minute, int second)
{
        struct tm tm = {.tm_year = year - 1900,
                        .tm_mon = month - 1,
                        .tm_mday = day,
                        .tm_hour = hour,
                        .tm_min = minute,
                        .tm_sec = second};

        return (int64_t)timegm(&tm) * 1000;
}

void bit_digest_hex(const char *text, char out[33])
{
        uint8_t h[KS_SHA256_BYTES];

        ks_sha256(text, strlen(text), h);
        ks_hex_encode(h, 16, out);
}

void bit_mock_charge_id(const char *key, char out[64])
{
        char hex[33];

        bit_digest_hex(key, hex);
        snprintf(out, 64, "ch_mock_%s", hex);
}
