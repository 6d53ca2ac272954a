/*
 * What the billing integration tests share: BillingService through the
 * stack's gateway in JSON (Connect's proto3 JSON: int64 fields travel as
 * strings, fields at their default value are left out), tenants of their
 * own, customers and plans made through the API, the ledger relay's queue
 * and the reconciliation.
 *
 * Part of the keelson_it_support library (billing_it.c). Every function
 * fails the test when a call does not go through; call them from the
 * test's own thread. Include after <cmocka.h>.
 */
#ifndef BILLING_IT_H
#define BILLING_IT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth_it.h"
#include "it_support.h"

#define BIT_PATH   "/keelson.billing.v1.BillingService/"
#define BIT_ID_MAX 64
#define BIT_DAY_MS (86400LL * 1000)

/* Loads the stack (as ait_setup). */
int bit_setup(void **state);

/* A tenant of its own: its owner signed up and logged in. */
typedef struct bit_tenant {
        ait_user owner;
} bit_tenant;
void bit_tenant_new(const char *prefix, bit_tenant *t);

/*
 * One call with a JSON body made from fmt (printf-style) and the bearer
 * token, plus extra "Name: value" headers (NULL-terminated, may be NULL).
 */
void bit_call(const char *token, const char *const *headers, const char *method,
              it_http_response *out, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The reply of a call that must succeed (HTTP 200), parsed; json_decref it. */
json_t *bit_ok(const char *token, const char *method, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A call that must fail with the Connect code (and HTTP status that goes with it). */
void bit_fails(const char *token, const char *method, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same, and the error's message must be message, as docs/api.md gives it. */
void bit_fails_with(const char *token, const char *method, const char *code, const char *message,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A field of a reply, by a dotted path ("invoice.amountDue"); NULL when absent. */
json_t *bit_at(json_t *j, const char *path);
/* int64 fields come as strings, int32 as numbers; absent is the default, 0. */
int64_t bit_int(json_t *j, const char *path);
/* A string field; "" when absent. */
const char *bit_str(json_t *j, const char *path);
bool bit_bool(json_t *j, const char *path);

/* A customer in currency with a payment method ("" for none), on a test clock ("" for none). */
void bit_customer(const bit_tenant *t, const char *currency, int tax_rate_bp, const char *pm,
                  const char *clock_id, char id[BIT_ID_MAX]);
/* A plan: model "FLAT" or "PER_UNIT" with amount, interval unit ("MONTH"...) and count. */
void bit_plan(const bit_tenant *t, const char *code, const char *currency, const char *model,
              int64_t amount, const char *unit, int count, int trial_days);
/* A test clock frozen at ms; its id. */
void bit_clock(const bit_tenant *t, int64_t frozen_ms, char id[BIT_ID_MAX]);
/* Advances a clock to ms; the reply's actionsRun. */
int bit_advance(const bit_tenant *t, const char *clock_id, int64_t to_ms);

/* Postings of the tenant the relay has not sent yet (and not failed). */
long bit_postings_pending(const char *tenant_id);
/* Waits (at most timeout_ms) until the relay has sent them all; fails the test otherwise. */
void bit_wait_posted(const char *tenant_id, long timeout_ms);
/* GetReconciliation after bit_wait_posted: it must find nothing wrong. Returns the reply. */
json_t *bit_reconcile_clean(const bit_tenant *t);

/* ---- through any gateway, from any thread ---------------------------------------- */

/*
 * One call of method with a JSON body through gateway_url (a gateway of the
 * test's own, or the stack's), the bearer token and extra "Name: value"
 * headers (NULL-terminated, may be NULL, at most 6). No cmocka assertion:
 * worker threads may call it. Returns what it_connect returns.
 */
int bit_post(const char *gateway_url, const char *token, const char *const *headers,
             const char *method, const char *json, it_http_response *out);
/* bit_reconcile_clean through gateway_url. */
json_t *bit_reconcile_clean_at(const char *gateway_url, const bit_tenant *t);

/*
 * The ledger against billing's facts, in SQL: every transfer the tenant's
 * finalized invoices, succeeded payments and credit notes must have posted
 * (postings.c: source, type, code and amount), compared as multisets with
 * the tenant's ledger.transfers of those source types (user_data_64 1, 2,
 * 3). Returns how many are missing plus how many are there that should not
 * be (a chain posted twice counts each of its transfers): 0 when the ledger
 * holds exactly one chain per fact. Voids and write-offs are not compared.
 */
long bit_ledger_mismatches(const char *tenant_id);

/*
 * The provider keys' digest as services/billing/provider.c documents it, computed here on its
 * own: the first 16 bytes of text's SHA-256 in lower-case hex (33 bytes with the NUL); and the
 * mock provider's id of the charge made with key: "ch_mock_" and key's digest.
 */
void bit_digest_hex(const char *text, char out[33]);
void bit_mock_charge_id(const char *key, char out[64]);

/* Unix ms of a UTC date and time. */
int64_t bit_utc(int year, int month, int day, int hour, int minute, int second);

#endif
