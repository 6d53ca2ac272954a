/*
 * The reads: LookupAccounts, LookupTransfers, GetAccountTransfers,
 * GetAccountBalances, GetTrialBalance, QueryAccounts and QueryTransfers. Each runs in one read-only
 * REPEATABLE READ transaction as the tenant (one snapshot: a trial
 * balance's page and totals agree), with every statement bounded by a
 * limit of at most the batch size.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

#define TRIAL_LIMIT_DEFAULT 1000
#define SCALAR_MAX          48

typedef Keelson__Ledger__V1__Account pb_account;
typedef Keelson__Ledger__V1__Transfer pb_transfer;
typedef Keelson__Ledger__V1__AccountBalance pb_balance;
typedef Keelson__Ledger__V1__AccountFilter pb_filter;

/* fn in one read-only transaction as the caller's tenant; KS_OK, or the code of the reply sent. */
static int run_read(ks_call *call, lg_tx_fn fn, void *arg)
{
        lg_tx tx = lg_call_tx(call);
        int rc = lg_tx_run(&tx, 0, true, fn, arg);

        return rc == KS_OK ? KS_OK : lg_db_fail(call, rc);
}

/* A reply of rows: its repeated field (*n_field, *field) and how a row becomes an item. */
typedef struct rows_reply {
        ProtobufCMessage *resp;
        size_t *n_field;
        void ***field;
        size_t item_size;
        int (*read)(const PGresult *res, int row, void *item); /* 0, or -1: a malformed row */
} rows_reply;

/* Replies with one item per row of res; a malformed row is an internal error. */
static int reply_rows(ks_call *call, const PGresult *res, const rows_reply *r)
{
        int n = PQntuples(res);
        char *items = calloc((size_t)n + 1, r->item_size);
        void **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
        int rc = items != NULL && ptrs != NULL ? KS_OK : KS_RESOURCE_EXHAUSTED;

        for (int i = 0; rc == KS_OK && i < n; i++) {
                ptrs[i] = items + (size_t)i * r->item_size;
                rc = r->read(res, i, ptrs[i]) == 0 ? KS_OK : KS_INTERNAL;
        }
        if (rc == KS_OK) {
                *r->n_field = (size_t)n;
                *r->field = ptrs;
                rc = ks_call_reply(call, r->resp);
        } else {
                rc = ks_call_fail(call, rc, LG_INTERNAL_MSG);
        }
        free(ptrs);
        free(items);
        return rc;
}

static int account_item(const PGresult *res, int row, void *item)
{
        lg_account a;

        if (lg_read_account(res, row, 0, &a) != 0) {
                return -1;
        }
        lg_account_to_pb(&a, item);
        return 0;
}

static int transfer_item(const PGresult *res, int row, void *item)
{
        lg_transfer t;

        if (lg_read_transfer(res, row, 0, &t) != 0) {
                return -1;
        }
        lg_transfer_to_pb(&t, item);
        return 0;
}

/* ---- lookups ------------------------------------------------------------------ */

typedef struct lookup_job {
        lg_worker *w;
        int n;          /* ids in w->ids */
        bool transfers; /* else accounts */
} lookup_job;

static const char sql_lookup_accounts[] = LG_BY_KEYS(LG_ACCOUNT_COLS, "ledger.accounts", "$2");
static const char sql_lookup_transfers[] = LG_BY_KEYS(LG_TRANSFER_COLS, "ledger.transfers", "$2");

/* Loads the rows into the worker's batch, whose maps then answer in request order. */
static int lookup_tx(lg_tx *tx, void *arg)
{
        lookup_job *j = arg;
        lg_batch *b = j->w->batch;
        lg_param params[2];
        PGresult *res = NULL;
        int rc;

        lg_batch_reset(b);
        lg_args_reset(tx->args);
        lg_args_text(tx->args, tx->tenant);
        lg_args_array_begin(tx->args, LG_ELEM_UUID);
        for (int i = 0; i < j->n; i++) {
                lg_args_array_uuid(tx->args, j->w->ids[i]);
        }
        lg_args_array_end(tx->args);
        if (lg_args_params(tx->args, params) != 2) {
                return KS_INTERNAL;
        }
        lg_stmt q = {.sql = j->transfers ? sql_lookup_transfers : sql_lookup_accounts,
                     .n_params = 2,
                     .args = params,
                     .out = &res};
        rc = lg_run(tx, &q, 1, true); /* BEGIN, the query and COMMIT: one round trip */
        for (int i = 0; rc == KS_OK && i < PQntuples(res); i++) {
                lg_account a;
                lg_transfer t;
                if (j->transfers ? lg_read_transfer(res, i, 0, &t) != 0 ||
                                       lg_batch_load_transfer(b, &t, 0, 0, 0) != 0
                                 : lg_read_account(res, i, 0, &a) != 0 ||
                                       lg_batch_load_account(b, &a) != 0) {
                        rc = KS_INTERNAL;
                }
        }
        PQclear(res);
        return rc;
}

static int lookup(ks_call *call, size_t n_ids, const uint64_t *ids, size_t n_hi, const uint64_t *hi,
                  bool transfers)
{
        lg_service *svc = call->service;
        lg_worker *w = call->worker_state;
        char err[128];
        int rc;

        if ((rc = lg_require_caller(call, false)) != KS_OK) {
                return rc;
        }
        if (lg_ids_from_pb(n_ids, ids, n_hi, hi, svc->batch_max, w->ids, err, sizeof(err)) !=
            KS_OK) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        lookup_job j = {.w = w, .n = (int)n_ids, .transfers = transfers};
        return run_read(call, lookup_tx, &j);
}

/*
 * Replies with what a lookup found, in the order of the ids asked for: one
 * item per id that fill finds (item_size bytes each), listed in the reply's
 * repeated field (*n_field, *field).
 */
static int reply_found(ks_call *call, const lg_worker *w, int n, ProtobufCMessage *resp,
                       size_t *n_field, void ***field, size_t item_size,
                       bool (*fill)(const lg_batch *b, u128 id, void *item))
{
        char *items = calloc((size_t)n, item_size);
        void **ptrs = calloc((size_t)n, sizeof(*ptrs));
        int rc;

        if (items == NULL || ptrs == NULL) {
                rc = ks_call_oom(call);
        } else {
                for (int i = 0; i < n; i++) {
                        void *item = items + *n_field * item_size;
                        if (fill(w->batch, w->ids[i], item)) {
                                ptrs[(*n_field)++] = item;
                        }
                }
                *field = ptrs;
                rc = ks_call_reply(call, resp);
        }
        free(ptrs);
        free(items);
        return rc;
}

static bool fill_account(const lg_batch *b, u128 id, void *item)
{
        int32_t k = lg_map_get(&b->account_ix, id);

        if (k >= 0) {
                lg_account_to_pb(&b->accounts[k], item);
        }
        return k >= 0;
}

static bool fill_transfer(const lg_batch *b, u128 id, void *item)
{
        int32_t k = lg_map_get(&b->xfer_ix, id);

        if (k >= 0) {
                lg_transfer_to_pb(&b->xfers[k].t, item);
        }
        return k >= 0;
}

int lg_lookup_accounts_handler(ks_call *call)
{
        const Keelson__Ledger__V1__LookupAccountsRequest *req = (const void *)call->in;
        Keelson__Ledger__V1__LookupAccountsResponse resp =
            KEELSON__LEDGER__V1__LOOKUP_ACCOUNTS_RESPONSE__INIT;
        int rc = lookup(call, req->n_ids, req->ids, req->n_ids_hi, req->ids_hi, false);

        if (rc != KS_OK) {
                return rc;
        }
        return reply_found(call, call->worker_state, (int)req->n_ids, &resp.base, &resp.n_accounts,
                           (void ***)&resp.accounts, sizeof(pb_account), fill_account);
}

int lg_lookup_transfers_handler(ks_call *call)
{
        const Keelson__Ledger__V1__LookupTransfersRequest *req = (const void *)call->in;
        Keelson__Ledger__V1__LookupTransfersResponse resp =
            KEELSON__LEDGER__V1__LOOKUP_TRANSFERS_RESPONSE__INIT;
        int rc = lookup(call, req->n_ids, req->ids, req->n_ids_hi, req->ids_hi, true);

        if (rc != KS_OK) {
                return rc;
        }
        return reply_found(call, call->worker_state, (int)req->n_ids, &resp.base, &resp.n_transfers,
                           (void ***)&resp.transfers, sizeof(pb_transfer), fill_transfer);
}

/* ---- account filters --------------------------------------------------------- */

/* The filter as statement parameters; NULL parameters do not filter. */
typedef struct filter_params {
        char tenant[LG_TENANT_LEN + 1];
        char account[LG_UUID_LEN + 1];
        char ts_min[SCALAR_MAX], ts_max[SCALAR_MAX];
        char ud128[LG_UUID_LEN + 1], ud64[SCALAR_MAX], ud32[SCALAR_MAX], code[SCALAR_MAX];
        char debits[8], credits[8], limit[SCALAR_MAX];
        const char *p[11];
        bool reversed;
} filter_params;

/* The limit of a filter (AccountFilter or QueryFilter): 1..batch_max. */
static int limit_check(ks_call *call, uint32_t limit, int batch_max)
{
        if (limit == 0 || limit > (uint32_t)batch_max) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "limit: expected 1 to %d",
                                    batch_max);
        }
        return KS_OK;
}

/* A filter's timestamp range and code, alike in AccountFilter and QueryFilter. */
static int range_code_check(ks_call *call, uint64_t ts_min, uint64_t ts_max, uint32_t code)
{
        if (ts_min > (uint64_t)INT64_MAX || ts_max > (uint64_t)INT64_MAX ||
            (ts_max != 0 && ts_min > ts_max)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "timestamp_min and timestamp_max: expected 0 <= min <= max"
                                    " < 2^63 (0 = unbounded)");
        }
        if (code > 65535) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "code must be at most 65535");
        }
        return KS_OK;
}

static int filter_check(ks_call *call, const pb_filter *f, int batch_max)
{
        int rc;

        u128 id = lg_u128(f->account_id_hi, f->account_id);

        if (id == 0 || id == U128_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "account_id: must not be 0 nor 2^128-1");
        }
        if ((rc = limit_check(call, f->limit, batch_max)) != KS_OK) {
                return rc;
        }
        if ((f->flags & ~(uint32_t)LG_FILTER_KNOWN) != 0 ||
            (f->flags & (LG_FILTER_DEBITS | LG_FILTER_CREDITS)) == 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "flags: set debits (1), credits (2) or both, and maybe"
                                    " reversed (4)");
        }
        return range_code_check(call, f->timestamp_min, f->timestamp_max, f->code);
}

static void filter_fill(filter_params *fp, const char *tenant, const pb_filter *f)
{
        u128 ud128 = lg_u128(f->user_data_128_hi, f->user_data_128);

        snprintf(fp->tenant, sizeof(fp->tenant), "%s", tenant);
        lg_u128_to_uuid(lg_u128(f->account_id_hi, f->account_id), fp->account);
        snprintf(fp->ts_min, sizeof(fp->ts_min), "%llu", (unsigned long long)f->timestamp_min);
        snprintf(
            fp->ts_max, sizeof(fp->ts_max), "%llu",
            (unsigned long long)(f->timestamp_max != 0 ? f->timestamp_max : (uint64_t)INT64_MAX));
        lg_u128_to_uuid(ud128, fp->ud128);
        snprintf(fp->ud64, sizeof(fp->ud64), "%lld", (long long)(int64_t)f->user_data_64);
        snprintf(fp->ud32, sizeof(fp->ud32), "%u", f->user_data_32);
        snprintf(fp->code, sizeof(fp->code), "%u", f->code);
        snprintf(fp->debits, sizeof(fp->debits), "%s",
                 (f->flags & LG_FILTER_DEBITS) ? "true" : "false");
        snprintf(fp->credits, sizeof(fp->credits), "%s",
                 (f->flags & LG_FILTER_CREDITS) ? "true" : "false");
        snprintf(fp->limit, sizeof(fp->limit), "%u", f->limit);
        fp->reversed = (f->flags & LG_FILTER_REVERSED) != 0;
        const char *p[11] = {fp->tenant,
                             fp->account,
                             fp->ts_min,
                             fp->ts_max,
                             ud128 != 0 ? fp->ud128 : NULL,
                             f->user_data_64 != 0 ? fp->ud64 : NULL,
                             f->user_data_32 != 0 ? fp->ud32 : NULL,
                             f->code != 0 ? fp->code : NULL,
                             fp->debits,
                             fp->credits,
                             fp->limit};
        memcpy(fp->p, p, sizeof(p));
}

/*
 * One index range per side (transfers_debit_idx, transfers_credit_idx),
 * merged: a transfer never debits and credits the same account, so the
 * union has no duplicates.
 */
#define FILTER_WHERE(side)                                                                         \
        " WHERE tenant_id = $1::uuid AND " side " = $2::uuid"                                      \
        " AND timestamp BETWEEN $3::int8 AND $4::int8"                                             \
        " AND ($5::uuid IS NULL OR user_data_128 = $5::uuid)"                                      \
        " AND ($6::int8 IS NULL OR user_data_64 = $6::int8)"                                       \
        " AND ($7::int8 IS NULL OR user_data_32 = $7::int8)"                                       \
        " AND ($8::int4 IS NULL OR code = $8::int4)"
#define ACCOUNT_TRANSFERS_SQL(dir)                                                                 \
        "SELECT " LG_TRANSFER_COLS " FROM ("                                                       \
        "(SELECT " LG_TRANSFER_COLS " FROM ledger.transfers" FILTER_WHERE(                         \
            "debit_account_id") " AND $9::bool ORDER BY timestamp " dir " LIMIT $11::int8)"        \
                                " UNION ALL (SELECT " LG_TRANSFER_COLS                             \
                                " FROM ledger.transfers" FILTER_WHERE(                             \
                                    "credit_account_id") " AND $10::bool"                          \
                                                         " ORDER BY timestamp " dir                \
                                                         " LIMIT $11::int8)) x"                    \
                                                         " ORDER BY timestamp " dir                \
                                                         " LIMIT $11::int8"

static const char sql_account_transfers_asc[] = ACCOUNT_TRANSFERS_SQL("ASC");
static const char sql_account_transfers_desc[] = ACCOUNT_TRANSFERS_SQL("DESC");

/* History rows join the transfer (or, for an expiry, the pending transfer) they follow. */
#define ACCOUNT_BALANCES_SQL(dir)                                                                  \
        "SELECT b.timestamp, b.debits_pending, b.debits_posted, b.credits_pending,"                \
        " b.credits_posted FROM ledger.account_balances b"                                         \
        " JOIN LATERAL (SELECT user_data_128, user_data_64, user_data_32, code"                    \
        " FROM ledger.transfers WHERE tenant_id = b.tenant_id AND id = b.transfer_id) t ON true"   \
        " WHERE b.tenant_id = $1::uuid AND b.account_id = $2::uuid"                                \
        " AND b.timestamp BETWEEN $3::int8 AND $4::int8"                                           \
        " AND ($5::uuid IS NULL OR t.user_data_128 = $5::uuid)"                                    \
        " AND ($6::int8 IS NULL OR t.user_data_64 = $6::int8)"                                     \
        " AND ($7::int8 IS NULL OR t.user_data_32 = $7::int8)"                                     \
        " AND ($8::int4 IS NULL OR t.code = $8::int4)"                                             \
        " AND ((b.side = 1 AND $9::bool) OR (b.side = 2 AND $10::bool))"                           \
        " ORDER BY b.timestamp " dir " LIMIT $11::int8"

static const char sql_account_balances_asc[] = ACCOUNT_BALANCES_SQL("ASC");
static const char sql_account_balances_desc[] = ACCOUNT_BALANCES_SQL("DESC");

typedef struct filter_job {
        filter_params fp;
        const char *sql;
        PGresult *res; /* kept for the reply; the caller clears it */
} filter_job;

static int filter_tx(lg_tx *tx, void *arg)
{
        filter_job *j = arg;

        PQclear(j->res); /* a retry's leftover */
        j->res = NULL;
        lg_stmt q = {.sql = j->sql, .n_params = 11, .params = j->fp.p, .out = &j->res};
        return lg_run(tx, &q, 1, true);
}

static int run_filter(ks_call *call, filter_job *j, const char *asc, const char *desc)
{
        const pb_filter *f = (const pb_filter *)call->in;
        lg_service *svc = call->service;
        int rc;

        if ((rc = lg_require_caller(call, false)) != KS_OK ||
            (rc = filter_check(call, f, svc->batch_max)) != KS_OK) {
                return rc;
        }
        filter_fill(&j->fp, call->caller->tenant_id, f);
        j->sql = j->fp.reversed ? desc : asc;
        if ((rc = run_read(call, filter_tx, j)) != KS_OK) {
                PQclear(j->res);
                j->res = NULL;
        }
        return rc;
}

/* Runs the filter of the request (asc or desc as it asks) and replies with its rows. */
static int filter_reply(ks_call *call, const char *asc, const char *desc, const rows_reply *r)
{
        filter_job j = {.res = NULL};
        int rc = run_filter(call, &j, asc, desc);

        if (rc != KS_OK) {
                return rc;
        }
        rc = reply_rows(call, j.res, r);
        PQclear(j.res);
        return rc;
}

int lg_get_account_transfers_handler(ks_call *call)
{
        Keelson__Ledger__V1__GetAccountTransfersResponse resp =
            KEELSON__LEDGER__V1__GET_ACCOUNT_TRANSFERS_RESPONSE__INIT;
        rows_reply r = {&resp.base, &resp.n_transfers, (void ***)&resp.transfers,
                        sizeof(pb_transfer), transfer_item};

        return filter_reply(call, sql_account_transfers_asc, sql_account_transfers_desc, &r);
}

/*
 * Columns 1..4 of a row (debits pending and posted, credits pending and
 * posted) as the amounts of b, and as v.
 */
static int balance_amounts(const PGresult *r, int row, pb_balance *b, u128 v[4])
{
        keelson__ledger__v1__account_balance__init(b);
        for (int c = 0; c < 4; c++) {
                if (lg_field_u128_dec(r, row, 1 + c, &v[c]) != 0) {
                        return -1;
                }
        }
        b->debits_pending = lg_lo(v[0]);
        b->debits_pending_hi = lg_hi(v[0]);
        b->debits_posted = lg_lo(v[1]);
        b->debits_posted_hi = lg_hi(v[1]);
        b->credits_pending = lg_lo(v[2]);
        b->credits_pending_hi = lg_hi(v[2]);
        b->credits_posted = lg_lo(v[3]);
        b->credits_posted_hi = lg_hi(v[3]);
        return 0;
}

static int balance_item(const PGresult *r, int row, void *item)
{
        pb_balance *b = item;
        u128 v[4];

        if (balance_amounts(r, row, b, v) != 0) {
                return -1;
        }
        b->timestamp = (uint64_t)lg_field_i64(r, row, 0);
        return 0;
}

int lg_get_account_balances_handler(ks_call *call)
{
        Keelson__Ledger__V1__GetAccountBalancesResponse resp =
            KEELSON__LEDGER__V1__GET_ACCOUNT_BALANCES_RESPONSE__INIT;
        rows_reply r = {&resp.base, &resp.n_balances, (void ***)&resp.balances, sizeof(pb_balance),
                        balance_item};

        return filter_reply(call, sql_account_balances_asc, sql_account_balances_desc, &r);
}

/* ---- query filters ------------------------------------------------------------ */

typedef Keelson__Ledger__V1__QueryFilter pb_query;

#define QUERY_SQL_MAX 1024
#define ZERO_UUID     "'00000000-0000-0000-0000-000000000000'::uuid"

/* A query's statement, built for the fields it filters by, and its parameters. */
typedef struct query_job {
        char sql[QUERY_SQL_MAX];
        char tenant[LG_TENANT_LEN + 1], ts_min[SCALAR_MAX], ts_max[SCALAR_MAX], limit[SCALAR_MAX];
        char ud128[LG_UUID_LEN + 1], ud64[SCALAR_MAX], ud32[SCALAR_MAX], ledger[SCALAR_MAX];
        char code[SCALAR_MAX];
        const char *p[9];
        int n_params;
        PGresult *res; /* kept for the reply; the caller clears it */
} query_job;

static int query_check(ks_call *call, const pb_query *q, int batch_max)
{
        int rc;

        if ((rc = limit_check(call, q->limit, batch_max)) != KS_OK) {
                return rc;
        }
        if ((q->flags & ~(uint32_t)LG_QUERY_REVERSED) != 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "flags: only reversed (1) is defined");
        }
        return range_code_check(call, q->timestamp_min, q->timestamp_max, q->code);
}

/* Appends " AND <cond>" with parameter value v as the next $n; cond has one %d for n. */
static void query_cond(query_job *j, size_t *len, const char *cond, const char *v)
{
        j->p[j->n_params++] = v;
        *len += (size_t)snprintf(j->sql + *len, sizeof(j->sql) - *len, " AND ");
        *len += (size_t)snprintf(j->sql + *len, sizeof(j->sql) - *len, cond, j->n_params);
}

/*
 * The statement: one condition per non-zero field, each served by its
 * index (field, tenant_id, timestamp), the user_data ones repeating their
 * index's predicate (migrations/003_query_indexes.sql); with no field, the
 * tenant as text, served by (tenant_id::text, timestamp). Either way an
 * index range in timestamp order that stops at the limit.
 */
static void query_build(query_job *j, const char *tenant, const pb_query *q, bool transfers)
{
        u128 ud128 = lg_u128(q->user_data_128_hi, q->user_data_128);
        bool fields = ud128 != 0 || q->user_data_64 != 0 || q->user_data_32 != 0 ||
                      q->ledger != 0 || q->code != 0;
        size_t len;

        snprintf(j->tenant, sizeof(j->tenant), "%s", tenant);
        snprintf(j->ts_min, sizeof(j->ts_min), "%llu", (unsigned long long)q->timestamp_min);
        snprintf(
            j->ts_max, sizeof(j->ts_max), "%llu",
            (unsigned long long)(q->timestamp_max != 0 ? q->timestamp_max : (uint64_t)INT64_MAX));
        snprintf(j->limit, sizeof(j->limit), "%u", q->limit);
        j->p[0] = j->tenant;
        j->p[1] = j->ts_min;
        j->p[2] = j->ts_max;
        j->p[3] = j->limit;
        j->n_params = 4;
        len = (size_t)snprintf(j->sql, sizeof(j->sql),
                               "SELECT %s FROM %s WHERE %s"
                               " AND timestamp BETWEEN $2::int8 AND $3::int8",
                               transfers ? LG_TRANSFER_COLS : LG_ACCOUNT_COLS,
                               transfers ? "ledger.transfers" : "ledger.accounts",
                               fields ? "tenant_id = $1::uuid" : "tenant_id::text = $1::text");
        if (ud128 != 0) {
                lg_u128_to_uuid(ud128, j->ud128);
                query_cond(j, &len, "user_data_128 = $%d::uuid AND user_data_128 <> " ZERO_UUID,
                           j->ud128);
        }
        if (q->user_data_64 != 0) {
                snprintf(j->ud64, sizeof(j->ud64), "%lld", (long long)(int64_t)q->user_data_64);
                query_cond(j, &len, "user_data_64 = $%d::int8 AND user_data_64 <> 0", j->ud64);
        }
        if (q->user_data_32 != 0) {
                snprintf(j->ud32, sizeof(j->ud32), "%u", q->user_data_32);
                query_cond(j, &len, "user_data_32 = $%d::int8 AND user_data_32 <> 0", j->ud32);
        }
        if (q->ledger != 0) {
                snprintf(j->ledger, sizeof(j->ledger), "%u", q->ledger);
                query_cond(j, &len, "ledger = $%d::int8", j->ledger);
        }
        if (q->code != 0) {
                snprintf(j->code, sizeof(j->code), "%u", q->code);
                query_cond(j, &len, "code = $%d::int4", j->code);
        }
        snprintf(j->sql + len, sizeof(j->sql) - len, " ORDER BY timestamp %s LIMIT $4::int8",
                 (q->flags & LG_QUERY_REVERSED) ? "DESC" : "ASC");
}

static int query_tx(lg_tx *tx, void *arg)
{
        query_job *j = arg;

        PQclear(j->res); /* a retry's leftover */
        j->res = NULL;
        lg_stmt s = {.sql = j->sql, .n_params = j->n_params, .params = j->p, .out = &j->res};
        return lg_run(tx, &s, 1, true);
}

static int query_reply(ks_call *call, bool transfers, const rows_reply *r)
{
        const pb_query *q = (const pb_query *)call->in;
        lg_service *svc = call->service;
        query_job *j = calloc(1, sizeof(*j));
        int rc;

        if (j == NULL) {
                return ks_call_oom(call);
        }
        if ((rc = lg_require_caller(call, false)) == KS_OK &&
            (rc = query_check(call, q, svc->batch_max)) == KS_OK) {
                query_build(j, call->caller->tenant_id, q, transfers);
                if ((rc = run_read(call, query_tx, j)) == KS_OK) {
                        rc = reply_rows(call, j->res, r);
                }
        }
        PQclear(j->res);
        free(j);
        return rc;
}

int lg_query_accounts_handler(ks_call *call)
{
        Keelson__Ledger__V1__QueryAccountsResponse resp =
            KEELSON__LEDGER__V1__QUERY_ACCOUNTS_RESPONSE__INIT;
        rows_reply r = {&resp.base, &resp.n_accounts, (void ***)&resp.accounts, sizeof(pb_account),
                        account_item};

        return query_reply(call, false, &r);
}

int lg_query_transfers_handler(ks_call *call)
{
        Keelson__Ledger__V1__QueryTransfersResponse resp =
            KEELSON__LEDGER__V1__QUERY_TRANSFERS_RESPONSE__INIT;
        rows_reply r = {&resp.base, &resp.n_transfers, (void ***)&resp.transfers,
                        sizeof(pb_transfer), transfer_item};

        return query_reply(call, true, &r);
}

/* ---- trial balance ------------------------------------------------------------ */

static const char sql_trial_page[] = "SELECT " LG_ACCOUNT_COLS " FROM ledger.accounts"
                                     " WHERE tenant_id = $1::uuid AND ledger = $2::int8"
                                     " AND id > $3::uuid ORDER BY id LIMIT $4::int8";

static const char sql_trial_totals[] =
    "SELECT count(*), coalesce(sum(debits_pending), 0), coalesce(sum(debits_posted), 0),"
    " coalesce(sum(credits_pending), 0), coalesce(sum(credits_posted), 0),"
    " coalesce((SELECT last_ns FROM ledger.clocks WHERE tenant_id = $1::uuid), 0)"
    " FROM ledger.accounts WHERE tenant_id = $1::uuid AND ledger = $2::int8";

typedef struct trial_job {
        const char *p[4];
        PGresult *page, *totals;
} trial_job;

static int trial_tx(lg_tx *tx, void *arg)
{
        trial_job *j = arg;
        PQclear(j->page);
        PQclear(j->totals);
        j->page = j->totals = NULL;
        lg_stmt q[2] = {
            {.sql = sql_trial_page, .n_params = 4, .params = j->p, .out = &j->page},
            {.sql = sql_trial_totals, .n_params = 2, .params = j->p, .out = &j->totals},
        };
        return lg_run(tx, q, 2, true);
}

/* Totals into the reply; KS_OUT_OF_RANGE when a sum does not fit 128 bits. */
static int trial_totals(const PGresult *r, Keelson__Ledger__V1__GetTrialBalanceResponse *resp,
                        pb_balance *totals)
{
        u128 v[4];

        if (balance_amounts(r, 0, totals, v) != 0) {
                return KS_OUT_OF_RANGE;
        }
        totals->timestamp = (uint64_t)lg_field_i64(r, 0, 5);
        resp->totals = totals;
        resp->accounts_total = (uint64_t)lg_field_i64(r, 0, 0);
        resp->balanced = v[0] == v[2] && v[1] == v[3];
        return KS_OK;
}

static int trial_reply(ks_call *call, trial_job *j)
{
        Keelson__Ledger__V1__GetTrialBalanceResponse resp =
            KEELSON__LEDGER__V1__GET_TRIAL_BALANCE_RESPONSE__INIT;
        rows_reply r = {&resp.base, &resp.n_accounts, (void ***)&resp.accounts, sizeof(pb_account),
                        account_item};
        pb_balance totals;

        if (PQntuples(j->totals) == 1 && trial_totals(j->totals, &resp, &totals) != KS_OK) {
                return ks_call_fail(call, KS_OUT_OF_RANGE, "the ledger's totals exceed 2^128 - 1");
        }
        return reply_rows(call, j->page, &r);
}

int lg_get_trial_balance_handler(ks_call *call)
{
        const Keelson__Ledger__V1__GetTrialBalanceRequest *req = (const void *)call->in;
        lg_service *svc = call->service;
        char ledger[SCALAR_MAX], after[LG_UUID_LEN + 1], limit[SCALAR_MAX];
        trial_job j = {.page = NULL, .totals = NULL};
        int rc;

        if ((rc = lg_require_caller(call, false)) != KS_OK) {
                return rc;
        }
        if (req->ledger == 0 || req->limit > (uint32_t)svc->batch_max) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "ledger must not be 0, and limit at most %d", svc->batch_max);
        }
        snprintf(ledger, sizeof(ledger), "%u", req->ledger);
        lg_u128_to_uuid(lg_u128(req->after_account_id_hi, req->after_account_id), after);
        uint32_t n = req->limit != 0 ? req->limit : TRIAL_LIMIT_DEFAULT;
        snprintf(limit, sizeof(limit), "%u",
                 n < (uint32_t)svc->batch_max ? n : (uint32_t)svc->batch_max);
        j.p[0] = call->caller->tenant_id;
        j.p[1] = ledger;
        j.p[2] = after;
        j.p[3] = limit;
        if ((rc = run_read(call, trial_tx, &j)) == KS_OK) {
                rc = trial_reply(call, &j);
        }
        PQclear(j.page);
        PQclear(j.totals);
        return rc;
}
