/*
 * What the ledger's integration tests share: a signed-up tenant with a
 * session token, calls of keelson.ledger.v1.LedgerService through the
 * gateway in binary protobuf (application/proto, as a Connect client sends
 * it), the ledger replicas' metrics, the invariants of the stored rows in
 * SQL, and 128-bit helpers.
 *
 * Part of the keelson_it_support library (ledger_it.c). Functions that
 * call fail the test when the call does not go through: call them from the
 * test's own thread.
 */
#ifndef LEDGER_IT_H
#define LEDGER_IT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "it_support.h"
#include "keelson/ledger/v1/ledger.pb-c.h"

typedef unsigned __int128 u128;
#define U128_MAX (~(u128)0)

#define LT_PATH      "/keelson.ledger.v1.LedgerService/"
#define LT_PASSWORD  "correct horse battery staple"
#define LT_TOKEN_MAX 512
#define LT_BATCH_MAX 8190

/* Result names as the proto has them: TigerBeetle's. */
#define TR(name) KEELSON__LEDGER__V1__CREATE_TRANSFERS_RESPONSE__RESULT__##name
#define AR(name) KEELSON__LEDGER__V1__CREATE_ACCOUNTS_RESPONSE__RESULT__##name

/* Flags (ledger.proto). */
enum {
        AF_LINKED = 1,
        AF_DEBITS_MUST_NOT_EXCEED_CREDITS = 2,
        AF_CREDITS_MUST_NOT_EXCEED_DEBITS = 4,
        AF_HISTORY = 8,
        AF_IMPORTED = 16,
        AF_CLOSED = 32,
        TF_LINKED = 1,
        TF_PENDING = 2,
        TF_POST = 4,
        TF_VOID = 8,
        TF_BALANCING_DEBIT = 16,
        TF_BALANCING_CREDIT = 32,
        TF_CLOSING_DEBIT = 64,
        TF_CLOSING_CREDIT = 128,
        TF_IMPORTED = 256,
};

typedef Keelson__Ledger__V1__Account lt_account_pb;
typedef Keelson__Ledger__V1__Transfer lt_transfer_pb;

/* A tenant of its own: a fresh user signed up and logged in. */
typedef struct lt_tenant {
        char gateway[256];
        char token[LT_TOKEN_MAX];
        char tenant_id[64];
} lt_tenant;

uint64_t lt_lo(u128 v);
uint64_t lt_hi(u128 v);
u128 lt_u128(uint64_t hi, uint64_t lo);

/*
 * POSTs like it_http_post, but waits out the gateway's rate limits as a
 * well-behaved client does: on 429 it sleeps for Retry-After (1 s without
 * one) and tries again, for at most LT_RATE_WAIT_S in all. The limits are
 * the gateway's to test; here they would only make the ledger's tests
 * depend on what else ran in the same minute. No cmocka assertion: worker
 * threads may call it.
 */
#define LT_RATE_WAIT_S 90
int lt_post(const char *base, const char *path, const char *type, const void *body, size_t len,
            const char *const *headers, it_http_response *r);

/* Signs up a new user (and so a new tenant), logs in, keeps the token. */
void lt_tenant_new(const it_stack *s, const char *prefix, lt_tenant *t);

/* A group setup's work: loads the stack into s, then lt_tenant_new. Returns 0 or -1. */
int lt_setup(it_stack *s, const char *prefix, lt_tenant *t);

/*
 * Calls a LedgerService method in binary protobuf. Returns the HTTP status;
 * on 200 *out holds the unpacked reply (protobuf_c_message_free_unpacked),
 * else *out is NULL and, when err is not NULL, the Connect code is copied
 * into err.
 */
long lt_call_status(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *out_desc, ProtobufCMessage **out, char *err,
                    size_t err_len);

/* The same, failing the test unless the call succeeds. */
void *lt_call(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *out_desc);

void lt_account_init(lt_account_pb *a, u128 id, uint32_t ledger, uint32_t code, uint32_t flags);
void lt_transfer_init(lt_transfer_pb *t, u128 id, u128 debit, u128 credit, u128 amount,
                      uint32_t ledger, uint32_t code, uint32_t flags);

/* CreateAccounts / CreateTransfers of n (at most LT_BATCH_MAX); results[] gets one code each. */
void lt_create_accounts(const lt_tenant *t, lt_account_pb *accounts, size_t n, int *results);
void lt_create_transfers(const lt_tenant *t, lt_transfer_pb *transfers, size_t n, int *results);

/* LookupAccounts / LookupTransfers of n ids; the caller frees the reply. */
Keelson__Ledger__V1__LookupAccountsResponse *lt_lookup_accounts(const lt_tenant *t, const u128 *ids,
                                                                size_t n);
Keelson__Ledger__V1__LookupTransfersResponse *lt_lookup_transfers(const lt_tenant *t,
                                                                  const u128 *ids, size_t n);

/* Name of a transfer / account result, for failure messages. */
const char *lt_tr_name(int r);
const char *lt_ar_name(int r);

/* Polls fn(arg) every 100 ms until it returns true (1) or timeout_ms passes (0). */
int lt_wait_until(int (*fn)(void *), void *arg, int timeout_ms);

/* The ledger replicas' health ports, from the stack's env file (fails the test without one). */
int lt_ledger_ports(int *ports, int max);

/* One series of /metrics summed over every ledger replica (absent counts 0). */
double lt_ledger_metric(const char *series);

/*
 * The invariants on the stored rows, in SQL: each counts the violations (0
 * when they hold). lt_sql_ledger_sums: per ledger, sum of debits = sum of
 * credits, posted and pending. lt_sql_account_sums, a format of one '%s'
 * (the tenant): every account of the tenant has the balances its transfers
 * add up to (posted: single-phase transfers and posts; pending: pending
 * transfers still pending).
 */
extern const char lt_sql_ledger_sums[];
extern const char lt_sql_account_sums[];

#endif
