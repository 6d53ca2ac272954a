/*
 * What the ledger's integration tests share (header-only: every
 * tests/integration/test_*.c is an executable of its own): a signed-up
 * tenant with a session token, calls of keelson.ledger.v1.LedgerService
 * through the gateway in binary protobuf (application/proto, as a Connect
 * client sends it), and 128-bit helpers.
 */
#ifndef TEST_LEDGER_SUPPORT_H
#define TEST_LEDGER_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
        AF_CLOSED = 32,
        TF_LINKED = 1,
        TF_PENDING = 2,
        TF_POST = 4,
        TF_VOID = 8,
        TF_BALANCING_DEBIT = 16,
        TF_BALANCING_CREDIT = 32,
        TF_CLOSING_DEBIT = 64,
        TF_CLOSING_CREDIT = 128,
};

typedef Keelson__Ledger__V1__Account lt_account_pb;
typedef Keelson__Ledger__V1__Transfer lt_transfer_pb;

/* A tenant of its own: a fresh user signed up and logged in. */
typedef struct lt_tenant {
        char gateway[256];
        char token[LT_TOKEN_MAX];
        char tenant_id[64];
} lt_tenant;

static inline uint64_t lt_lo(u128 v)
{
        return (uint64_t)v;
}
static inline uint64_t lt_hi(u128 v)
{
        return (uint64_t)(v >> 64);
}
static inline u128 lt_u128(uint64_t hi, uint64_t lo)
{
        return ((u128)hi << 64) | lo;
}

/*
 * POSTs like it_http_post, but waits out the gateway's rate limits as a
 * well-behaved client does: on 429 it sleeps for Retry-After (1 s without
 * one) and tries again, for at most LT_RATE_WAIT_S in all. The limits are
 * the gateway's to test; here they would only make the ledger's tests
 * depend on what else ran in the same minute.
 */
#define LT_RATE_WAIT_S 90

static inline int lt_post(const char *base, const char *path, const char *type, const void *body,
                          size_t len, const char *const *headers, it_http_response *r)
{
        int waited = 0;

        for (;;) {
                if (it_http_post(base, path, type, body, len, headers, r) != 0) {
                        return -1;
                }
                char after[32] = "";
                int s = 1;
                if (r->status != 429 || waited >= LT_RATE_WAIT_S) {
                        return 0;
                }
                if (it_http_header(r, "Retry-After", after, sizeof(after)) == 0) {
                        s = atoi(after) > 0 ? atoi(after) : 1;
                }
                it_http_response_free(r);
                sleep((unsigned)s);
                waited += s;
        }
}

/* A JSON call to the auth service (public methods). */
static inline json_t *lt_auth_json(const char *gateway, const char *method, json_t *req)
{
        char path[128];
        char *body = json_dumps(req, JSON_COMPACT);
        it_http_response r;
        json_error_t err;

        assert_non_null(body);
        snprintf(path, sizeof(path), "/keelson.auth.v1.AuthService/%s", method);
        assert_int_equal(lt_post(gateway, path, "application/json", body, strlen(body), NULL, &r),
                         0);
        free(body);
        json_decref(req);
        if (r.status != 200) {
                fail_msg("%s: HTTP %ld %.300s", method, r.status, r.body);
        }
        json_t *j = json_loadb(r.body, r.body_len, 0, &err);
        it_http_response_free(&r);
        assert_non_null(j);
        return j;
}

/* Signs up a new user (and so a new tenant), logs in, keeps the token. */
static inline void lt_tenant_new(const it_stack *s, const char *prefix, lt_tenant *t)
{
        char email[128];
        json_t *j;

        memset(t, 0, sizeof(*t));
        snprintf(t->gateway, sizeof(t->gateway), "%s", s->gateway_url);
        it_unique_email(prefix, email, sizeof(email));
        j = lt_auth_json(t->gateway, "SignUp",
                         json_pack("{s:s, s:s, s:s}", "email", email, "password", LT_PASSWORD,
                                   "tenantName", "Ledger tests"));
        json_decref(j);
        j = lt_auth_json(t->gateway, "Login",
                         json_pack("{s:s, s:s}", "email", email, "password", LT_PASSWORD));
        snprintf(t->token, sizeof(t->token), "%s",
                 json_string_value(json_object_get(j, "sessionToken")));
        snprintf(t->tenant_id, sizeof(t->tenant_id), "%s",
                 json_string_value(json_object_get(j, "tenantId")));
        json_decref(j);
        assert_true(strlen(t->token) > 0);
        assert_true(strlen(t->tenant_id) == 36);
}

/*
 * Calls a LedgerService method in binary protobuf. Returns the HTTP status;
 * on 200 *out holds the unpacked reply (protobuf_c_message_free_unpacked),
 * else *out is NULL and, when err is not NULL, the Connect code is copied
 * into err.
 */
static inline long lt_call_status(const lt_tenant *t, const char *method,
                                  const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *out_desc,
                                  ProtobufCMessage **out, char *err, size_t err_len)
{
        char path[128], auth[LT_TOKEN_MAX + 32];
        const char *headers[2] = {auth, NULL};
        size_t len = protobuf_c_message_get_packed_size(req);
        uint8_t *body = malloc(len + 1);
        it_http_response r;
        long status;

        assert_non_null(body);
        protobuf_c_message_pack(req, body);
        snprintf(path, sizeof(path), LT_PATH "%s", method);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t->token);
        assert_int_equal(lt_post(t->gateway, path, "application/proto", body, len, headers, &r), 0);
        free(body);
        status = r.status;
        *out = NULL;
        if (status == 200) {
                *out =
                    protobuf_c_message_unpack(out_desc, NULL, r.body_len, (const uint8_t *)r.body);
                assert_non_null(*out);
        } else if (err != NULL) {
                json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
                snprintf(err, err_len, "%s",
                         j != NULL && json_is_string(json_object_get(j, "code"))
                             ? json_string_value(json_object_get(j, "code"))
                             : "?");
                json_decref(j);
        }
        it_http_response_free(&r);
        return status;
}

/* The same, failing the test unless the call succeeds. */
static inline void *lt_call(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *out_desc)
{
        ProtobufCMessage *out = NULL;
        char err[64] = "";
        long status = lt_call_status(t, method, req, out_desc, &out, err, sizeof(err));

        if (status != 200) {
                fail_msg("%s: HTTP %ld (%s)", method, status, err);
        }
        return out;
}

static inline void lt_account_init(lt_account_pb *a, u128 id, uint32_t ledger, uint32_t code,
                                   uint32_t flags)
{
        keelson__ledger__v1__account__init(a);
        a->id = lt_lo(id);
        a->id_hi = lt_hi(id);
        a->ledger = ledger;
        a->code = code;
        a->flags = flags;
}

static inline void lt_transfer_init(lt_transfer_pb *t, u128 id, u128 debit, u128 credit,
                                    u128 amount, uint32_t ledger, uint32_t code, uint32_t flags)
{
        keelson__ledger__v1__transfer__init(t);
        t->id = lt_lo(id);
        t->id_hi = lt_hi(id);
        t->debit_account_id = lt_lo(debit);
        t->debit_account_id_hi = lt_hi(debit);
        t->credit_account_id = lt_lo(credit);
        t->credit_account_id_hi = lt_hi(credit);
        t->amount = lt_lo(amount);
        t->amount_hi = lt_hi(amount);
        t->ledger = ledger;
        t->code = code;
        t->flags = flags;
}

/* CreateAccounts; results[] receives one code per account. */
static inline void lt_create_accounts(const lt_tenant *t, lt_account_pb *accounts, size_t n,
                                      int *results)
{
        Keelson__Ledger__V1__CreateAccountsRequest req =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        if (n > LT_BATCH_MAX) {
                fail_msg("a batch of %zu accounts is more than a test sends", n);
                return;
        }
        lt_account_pb **ptrs = calloc(n, sizeof(*ptrs));

        assert_non_null(ptrs);
        for (size_t i = 0; i < n; i++) {
                ptrs[i] = &accounts[i];
        }
        req.n_accounts = n;
        req.accounts = ptrs;
        Keelson__Ledger__V1__CreateAccountsResponse *resp =
            lt_call(t, "CreateAccounts", &req.base,
                    &keelson__ledger__v1__create_accounts_response__descriptor);
        assert_int_equal(resp->n_results, n);
        for (size_t i = 0; i < n; i++) {
                results[i] = resp->results[i];
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        free(ptrs);
}

static inline void lt_create_transfers(const lt_tenant *t, lt_transfer_pb *transfers, size_t n,
                                       int *results)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        if (n > LT_BATCH_MAX) {
                fail_msg("a batch of %zu transfers is more than a test sends", n);
                return;
        }
        lt_transfer_pb **ptrs = calloc(n, sizeof(*ptrs));

        assert_non_null(ptrs);
        for (size_t i = 0; i < n; i++) {
                ptrs[i] = &transfers[i];
        }
        req.n_transfers = n;
        req.transfers = ptrs;
        Keelson__Ledger__V1__CreateTransfersResponse *resp =
            lt_call(t, "CreateTransfers", &req.base,
                    &keelson__ledger__v1__create_transfers_response__descriptor);
        assert_int_equal(resp->n_results, n);
        for (size_t i = 0; i < n; i++) {
                results[i] = resp->results[i];
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        free(ptrs);
}

/* Fills lo/hi id lists of a lookup request. */
static inline void lt_ids(const u128 *ids, size_t n, uint64_t *lo, uint64_t *hi)
{
        for (size_t i = 0; i < n; i++) {
                lo[i] = lt_lo(ids[i]);
                hi[i] = lt_hi(ids[i]);
        }
}

/* LookupAccounts; the caller frees the reply. */
static inline Keelson__Ledger__V1__LookupAccountsResponse *
lt_lookup_accounts(const lt_tenant *t, const u128 *ids, size_t n)
{
        Keelson__Ledger__V1__LookupAccountsRequest req =
            KEELSON__LEDGER__V1__LOOKUP_ACCOUNTS_REQUEST__INIT;
        if (n > LT_BATCH_MAX) {
                fail_msg("a lookup of %zu ids is more than a test sends", n);
                return NULL;
        }
        uint64_t *lo = calloc(n, 8), *hi = calloc(n, 8);

        lt_ids(ids, n, lo, hi);
        req.n_ids = req.n_ids_hi = n;
        req.ids = lo;
        req.ids_hi = hi;
        void *resp = lt_call(t, "LookupAccounts", &req.base,
                             &keelson__ledger__v1__lookup_accounts_response__descriptor);
        free(lo);
        free(hi);
        return resp;
}

static inline Keelson__Ledger__V1__LookupTransfersResponse *
lt_lookup_transfers(const lt_tenant *t, const u128 *ids, size_t n)
{
        Keelson__Ledger__V1__LookupTransfersRequest req =
            KEELSON__LEDGER__V1__LOOKUP_TRANSFERS_REQUEST__INIT;
        if (n > LT_BATCH_MAX) {
                fail_msg("a lookup of %zu ids is more than a test sends", n);
                return NULL;
        }
        uint64_t *lo = calloc(n, 8), *hi = calloc(n, 8);

        lt_ids(ids, n, lo, hi);
        req.n_ids = req.n_ids_hi = n;
        req.ids = lo;
        req.ids_hi = hi;
        void *resp = lt_call(t, "LookupTransfers", &req.base,
                             &keelson__ledger__v1__lookup_transfers_response__descriptor);
        free(lo);
        free(hi);
        return resp;
}

/* Name of a transfer result, for failure messages. */
static inline const char *lt_tr_name(int r)
{
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
            &keelson__ledger__v1__create_transfers_response__result__descriptor, r);
        return v != NULL ? v->name : "?";
}

static inline const char *lt_ar_name(int r)
{
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
            &keelson__ledger__v1__create_accounts_response__result__descriptor, r);
        return v != NULL ? v->name : "?";
}

/* Polls fn(arg) every 100 ms until it returns true or timeout_ms passes. */
static inline int lt_wait_until(int (*fn)(void *), void *arg, int timeout_ms)
{
        for (int waited = 0; waited <= timeout_ms; waited += 100) {
                if (fn(arg)) {
                        return 1;
                }
                struct timespec ts = {0, 100 * 1000000L};
                nanosleep(&ts, NULL);
        }
        return 0;
}

/* The ledger replicas' health ports, from the stack's env file. */
static inline int lt_ledger_ports(const it_stack *st, int *ports, int max)
{
        char path[600], line[1024];
        int n = 0;

        snprintf(path, sizeof(path), "%s/env", st->dir);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f) != NULL) {
                const char *key = "KEELSON_IT_LEDGER_HEALTH_PORTS=";
                if (strncmp(line, key, strlen(key)) != 0) {
                        continue;
                }
                for (char *p = line + strlen(key); *p != '\0' && n < max;) {
                        ports[n++] = (int)strtol(p, &p, 10);
                        if (*p != ',') {
                                break;
                        }
                        p++;
                }
        }
        fclose(f);
        return n;
}

/* One series of /metrics summed over every ledger replica (absent counts 0). */
static inline double lt_ledger_metric(const it_stack *st, const char *series)
{
        int ports[IT_REPLICAS_MAX];
        int n = lt_ledger_ports(st, ports, IT_REPLICAS_MAX);
        double sum = 0;

        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
                char base[64];
                double v = 0;
                snprintf(base, sizeof(base), "http://127.0.0.1:%d", ports[i]);
                if (it_metric(base, series, &v) == 0) {
                        sum += v;
                }
        }
        return sum;
}

/* The one integer a query answers; any other answer fails the test. */
static inline long lt_sql_long(PGconn *c, const char *sql)
{
        PGresult *r = PQexec(c, sql);

        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                fail_msg("%s: %s", sql, PQerrorMessage(c));
        }
        long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        return v;
}

/*
 * The invariants on the stored rows, in SQL: each counts the violations (0
 * when they hold). Per ledger, sum of debits = sum of credits, posted and
 * pending; every account of the tenant ('%s') has the balances its
 * transfers add up to (posted: single-phase transfers and posts; pending:
 * pending transfers still pending).
 */
#define LT_SQL_LEDGER_SUMS                                                                         \
        "SELECT count(*) FROM (SELECT tenant_id, ledger FROM ledger.accounts"                      \
        " GROUP BY tenant_id, ledger"                                                              \
        " HAVING sum(debits_posted) <> sum(credits_posted)"                                        \
        " OR sum(debits_pending) <> sum(credits_pending)) x"

#define LT_SQL_ACCOUNT_SUMS                                                                        \
        "WITH t AS (SELECT t.tenant_id, t.debit_account_id, t.credit_account_id, t.amount,"        \
        "   (t.flags & 10) = 0 AS posts,"                                                          \
        "   (t.flags & 2) <> 0 AND p.status = 1 AS reserves"                                       \
        "  FROM ledger.transfers t LEFT JOIN ledger.pending_transfers p"                           \
        "   ON p.tenant_id = t.tenant_id AND p.id = t.id),"                                        \
        " s AS (SELECT a.tenant_id, a.id,"                                                         \
        "   a.debits_posted, a.credits_posted, a.debits_pending, a.credits_pending,"               \
        "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"               \
        "     AND t.debit_account_id = a.id AND posts) AS dpo,"                                    \
        "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"               \
        "     AND t.credit_account_id = a.id AND posts) AS cpo,"                                   \
        "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"               \
        "     AND t.debit_account_id = a.id AND reserves) AS dp,"                                  \
        "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"               \
        "     AND t.credit_account_id = a.id AND reserves) AS cp"                                  \
        "  FROM ledger.accounts a WHERE a.tenant_id = '%s')"                                       \
        " SELECT count(*) FROM s WHERE debits_posted <> dpo OR credits_posted <> cpo"              \
        " OR debits_pending <> dp OR credits_pending <> cp"

#endif
