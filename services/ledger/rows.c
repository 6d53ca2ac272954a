/*
 * Rows: reading accounts and transfers from results, and writing back what
 * a batch changed in one statement.
 *
 * The write is a single statement of data-modifying CTEs, one per kind of
 * row that the batch produced (new accounts, changed accounts, new
 * transfers, pending states, failed ids, history), each fed by unnest() of
 * array parameters: one round trip and set-based execution however many
 * events the batch had. The CTEs touch distinct rows, so it does not matter
 * that they run on one snapshot and do not see each other's effects.
 *
 * Storage forms: ids and user_data_128 as uuid, amounts and balances as
 * numeric(39,0), user_data_64 as the int8 with the same 64 bits, other
 * unsigned 32-bit values as int8.
 */
#include "ledger.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SQL_WRITE_MAX 8192

/* ---- reading ----------------------------------------------------------------- */

int lg_read_account(const PGresult *r, int row, int c, lg_account *a)
{
        memset(a, 0, sizeof(*a));
        if (lg_field_u128_uuid(r, row, c + 0, &a->id) != 0 ||
            lg_field_u128_dec(r, row, c + 1, &a->debits_pending) != 0 ||
            lg_field_u128_dec(r, row, c + 2, &a->debits_posted) != 0 ||
            lg_field_u128_dec(r, row, c + 3, &a->credits_pending) != 0 ||
            lg_field_u128_dec(r, row, c + 4, &a->credits_posted) != 0 ||
            lg_field_u128_uuid(r, row, c + 5, &a->user_data_128) != 0) {
                return -1;
        }
        a->user_data_64 = (uint64_t)lg_field_i64(r, row, c + 6);
        a->user_data_32 = (uint32_t)lg_field_i64(r, row, c + 7);
        a->ledger = (uint32_t)lg_field_i64(r, row, c + 8);
        a->code = (uint32_t)lg_field_i64(r, row, c + 9);
        a->flags = (uint32_t)lg_field_i64(r, row, c + 10);
        a->timestamp = (uint64_t)lg_field_i64(r, row, c + 11);
        return 0;
}

int lg_read_transfer(const PGresult *r, int row, int c, lg_transfer *t)
{
        memset(t, 0, sizeof(*t));
        if (lg_field_u128_uuid(r, row, c + 0, &t->id) != 0 ||
            lg_field_u128_uuid(r, row, c + 1, &t->debit_account_id) != 0 ||
            lg_field_u128_uuid(r, row, c + 2, &t->credit_account_id) != 0 ||
            lg_field_u128_dec(r, row, c + 3, &t->amount) != 0 ||
            lg_field_u128_uuid(r, row, c + 4, &t->pending_id) != 0 ||
            lg_field_u128_uuid(r, row, c + 5, &t->user_data_128) != 0) {
                return -1;
        }
        t->user_data_64 = (uint64_t)lg_field_i64(r, row, c + 6);
        t->user_data_32 = (uint32_t)lg_field_i64(r, row, c + 7);
        t->timeout = (uint32_t)lg_field_i64(r, row, c + 8);
        t->ledger = (uint32_t)lg_field_i64(r, row, c + 9);
        t->code = (uint32_t)lg_field_i64(r, row, c + 10);
        t->flags = (uint32_t)lg_field_i64(r, row, c + 11);
        t->timestamp = (uint64_t)lg_field_i64(r, row, c + 12);
        return 0;
}

/* ---- the write statement ---------------------------------------------------------- */

typedef struct sqlbuf {
        char s[SQL_WRITE_MAX];
        size_t len;
        int ctes;
        bool overflow;
} sqlbuf;

static void sql_add(sqlbuf *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sql_add(sqlbuf *q, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(q->s + q->len, sizeof(q->s) - q->len, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(q->s) - q->len) {
                q->overflow = true;
                return;
        }
        q->len += (size_t)n;
}

/*
 * Opens a CTE "<name> AS (<head> SELECT $1::uuid, * FROM unnest($k::t, ...)"
 * for the n arrays about to be appended (parameters first .. first + n - 1).
 */
static void cte_insert(sqlbuf *q, const lg_args *t, const char *head, const char *const *types,
                       int n)
{
        int first = t->n_params + 1;

        sql_add(q, "%s w%d AS (%s SELECT $1::uuid, * FROM unnest(", q->ctes ? "," : "WITH", q->ctes,
                head);
        for (int i = 0; i < n; i++) {
                sql_add(q, "%s$%d::%s[]", i ? ", " : "", first + i, types[i]);
        }
        sql_add(q, "))");
        q->ctes++;
}

/* The binary element type an array of SQL type `type` is sent as (integers as int8). */
static lg_elem elem_of(const char *type)
{
        if (strcmp(type, "uuid") == 0) {
                return LG_ELEM_UUID;
        }
        return strcmp(type, "numeric") == 0 ? LG_ELEM_NUMERIC : LG_ELEM_INT8;
}

static const char *const new_account_types[] = {"uuid", "uuid", "int8", "int8",
                                                "int8", "int4", "int4", "int8"};

static void write_new_accounts(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        if (b->n_accounts == b->n_accounts_loaded) {
                return;
        }
        cte_insert(q, t,
                   "INSERT INTO ledger.accounts (tenant_id, id, user_data_128, user_data_64,"
                   " user_data_32, ledger, code, flags, timestamp)",
                   new_account_types, 8);
        for (int col = 0; col < 8; col++) {
                lg_args_array_begin(t, elem_of(new_account_types[col]));
                for (int i = b->n_accounts_loaded; i < b->n_accounts; i++) {
                        const lg_account *a = &b->accounts[i];
                        switch (col) {
                        case 0:
                                lg_args_array_uuid(t, a->id);
                                break;
                        case 1:
                                lg_args_array_uuid(t, a->user_data_128);
                                break;
                        case 2:
                                lg_args_array_i64(t, (int64_t)a->user_data_64);
                                break;
                        case 3:
                                lg_args_array_i64(t, a->user_data_32);
                                break;
                        case 4:
                                lg_args_array_i64(t, a->ledger);
                                break;
                        case 5:
                                lg_args_array_i64(t, a->code);
                                break;
                        case 6:
                                lg_args_array_i64(t, a->flags);
                                break;
                        default:
                                lg_args_array_i64(t, (int64_t)a->timestamp);
                                break;
                        }
                }
                lg_args_array_end(t);
        }
}

/*
 * a.id = ANY (the ids) besides the join: given the array itself, the
 * planner either probes the primary key or, at worst, reads the tenant's
 * accounts once and tests each against a hash of the array; never worse
 * than linear (an ARRAY(SELECT ...) here could be tested linearly per row).
 */
static void write_changed_accounts(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        int changed = 0;

        for (int i = 0; i < b->n_accounts_loaded; i++) {
                changed += lg_batch_account_changed(b, i);
        }
        if (changed == 0) {
                return;
        }
        int p = t->n_params + 1;
        sql_add(q,
                "%s w%d AS (UPDATE ledger.accounts a SET debits_pending = v.dp,"
                " debits_posted = v.dpo, credits_pending = v.cp, credits_posted = v.cpo,"
                " flags = v.f FROM unnest($%d::uuid[], $%d::numeric[], $%d::numeric[],"
                " $%d::numeric[], $%d::numeric[], $%d::int4[]) AS v(id, dp, dpo, cp, cpo, f)"
                " WHERE a.tenant_id = $1::uuid AND a.id = ANY ($%d::uuid[]) "
                "AND a.id = v.id)",
                q->ctes ? "," : "WITH", q->ctes, p, p + 1, p + 2, p + 3, p + 4, p + 5, p);
        q->ctes++;
        for (int col = 0; col < 6; col++) {
                lg_args_array_begin(t, col == 0   ? LG_ELEM_UUID
                                       : col == 5 ? LG_ELEM_INT8
                                                  : LG_ELEM_NUMERIC);
                for (int i = 0; i < b->n_accounts_loaded; i++) {
                        const lg_account *a = &b->accounts[i];
                        if (!lg_batch_account_changed(b, i)) {
                                continue;
                        }
                        switch (col) {
                        case 0:
                                lg_args_array_uuid(t, a->id);
                                break;
                        case 1:
                                lg_args_array_dec(t, a->debits_pending);
                                break;
                        case 2:
                                lg_args_array_dec(t, a->debits_posted);
                                break;
                        case 3:
                                lg_args_array_dec(t, a->credits_pending);
                                break;
                        case 4:
                                lg_args_array_dec(t, a->credits_posted);
                                break;
                        default:
                                lg_args_array_i64(t, a->flags);
                                break;
                        }
                }
                lg_args_array_end(t);
        }
}

static const char *const transfer_types[] = {"uuid", "uuid", "uuid", "numeric", "uuid",
                                             "uuid", "int8", "int8", "int8",    "int8",
                                             "int4", "int4", "int8"};

static void transfer_item(lg_args *t, const lg_transfer *x, int col)
{
        switch (col) {
        case 0:
                lg_args_array_uuid(t, x->id);
                break;
        case 1:
                lg_args_array_uuid(t, x->debit_account_id);
                break;
        case 2:
                lg_args_array_uuid(t, x->credit_account_id);
                break;
        case 3:
                lg_args_array_dec(t, x->amount);
                break;
        case 4:
                lg_args_array_uuid(t, x->pending_id);
                break;
        case 5:
                lg_args_array_uuid(t, x->user_data_128);
                break;
        case 6:
                lg_args_array_i64(t, (int64_t)x->user_data_64);
                break;
        case 7:
                lg_args_array_i64(t, x->user_data_32);
                break;
        case 8:
                lg_args_array_i64(t, x->timeout);
                break;
        case 9:
                lg_args_array_i64(t, x->ledger);
                break;
        case 10:
                lg_args_array_i64(t, x->code);
                break;
        case 11:
                lg_args_array_i64(t, x->flags);
                break;
        default:
                lg_args_array_i64(t, (int64_t)x->timestamp);
                break;
        }
}

static void write_new_transfers(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        if (b->n_xfers == b->n_xfers_loaded) {
                return;
        }
        cte_insert(q, t, "INSERT INTO ledger.transfers (tenant_id, " LG_TRANSFER_COLS ")",
                   transfer_types, LG_TRANSFER_NCOLS);
        for (int col = 0; col < LG_TRANSFER_NCOLS; col++) {
                lg_args_array_begin(t, elem_of(transfer_types[col]));
                for (int i = b->n_xfers_loaded; i < b->n_xfers; i++) {
                        transfer_item(t, &b->xfers[i].t, col);
                }
                lg_args_array_end(t);
        }
}

/* New pending transfers, and loaded ones whose state changed. */
static bool pending_row(const lg_batch *b, int i)
{
        const lg_xfer *x = &b->xfers[i];

        if (i >= b->n_xfers_loaded) {
                return x->status != LG_PENDING_NONE;
        }
        return x->status != x->status_loaded;
}

static const char *const pending_types[] = {"uuid", "int2", "int8"};

static void write_pending(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        int n = 0;

        for (int i = 0; i < b->n_xfers; i++) {
                n += pending_row(b, i);
        }
        if (n == 0) {
                return;
        }
        cte_insert(q, t,
                   "INSERT INTO ledger.pending_transfers (tenant_id, id, status, expires_at_ns)",
                   pending_types, 3);
        q->len -= 1; /* reopen the CTE to add the conflict clause */
        sql_add(q, " ON CONFLICT (tenant_id, id) DO UPDATE SET status = EXCLUDED.status)");
        for (int col = 0; col < 3; col++) {
                lg_args_array_begin(t, elem_of(pending_types[col]));
                for (int i = 0; i < b->n_xfers; i++) {
                        const lg_xfer *x = &b->xfers[i];
                        if (!pending_row(b, i)) {
                                continue;
                        }
                        if (col == 0) {
                                lg_args_array_uuid(t, x->t.id);
                        } else if (col == 1) {
                                lg_args_array_i64(t, x->status);
                        } else {
                                lg_args_array_i64(t, (int64_t)x->expires_at_ns);
                        }
                }
                lg_args_array_end(t);
        }
}

static const char *const failed_types[] = {"uuid", "int4"};

static void write_failed(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        if (b->n_failed == b->n_failed_loaded) {
                return;
        }
        cte_insert(q, t, "INSERT INTO ledger.transfers_failed (tenant_id, id, result)",
                   failed_types, 2);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = b->n_failed_loaded; i < b->n_failed; i++) {
                lg_args_array_uuid(t, b->failed_ids[i]);
        }
        lg_args_array_end(t);
        lg_args_array_begin(t, LG_ELEM_INT8);
        for (int i = b->n_failed_loaded; i < b->n_failed; i++) {
                lg_args_array_i64(t, b->failed_results[i]);
        }
        lg_args_array_end(t);
}

static const char *const hist_types[] = {"uuid",    "int8",    "uuid",    "int2",
                                         "numeric", "numeric", "numeric", "numeric"};

static void hist_item(lg_args *t, const lg_hist *h, int col)
{
        switch (col) {
        case 0:
                lg_args_array_uuid(t, h->account_id);
                break;
        case 1:
                lg_args_array_i64(t, (int64_t)h->timestamp);
                break;
        case 2:
                lg_args_array_uuid(t, h->transfer_id);
                break;
        case 3:
                lg_args_array_i64(t, h->side);
                break;
        case 4:
                lg_args_array_dec(t, h->debits_pending);
                break;
        case 5:
                lg_args_array_dec(t, h->debits_posted);
                break;
        case 6:
                lg_args_array_dec(t, h->credits_pending);
                break;
        default:
                lg_args_array_dec(t, h->credits_posted);
                break;
        }
}

static void write_history(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        if (b->n_hist == 0) {
                return;
        }
        cte_insert(q, t,
                   "INSERT INTO ledger.account_balances (tenant_id, account_id, timestamp,"
                   " transfer_id, side, debits_pending, debits_posted, credits_pending,"
                   " credits_posted)",
                   hist_types, 8);
        for (int col = 0; col < 8; col++) {
                lg_args_array_begin(t, elem_of(hist_types[col]));
                for (int i = 0; i < b->n_hist; i++) {
                        hist_item(t, &b->hist[i], col);
                }
                lg_args_array_end(t);
        }
}

/*
 * The statement's last part: " SELECT 1", or the count of the ids in absent
 * that are transfers already (on the statement's snapshot, which does not
 * see the rows its own CTEs insert).
 */
static void write_check(sqlbuf *q, lg_args *t, const u128 *absent, int n)
{
        if (n == 0) {
                sql_add(q, " SELECT 1");
                return;
        }
        sql_add(q, " SELECT count(*) FROM (" LG_BY_KEYS("1", "ledger.transfers", "$%d") ") c",
                t->n_params + 1);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                lg_args_array_uuid(t, absent[i]);
        }
        lg_args_array_end(t);
}

int lg_write_batch_unless(lg_tx *tx, const lg_batch *b, const u128 *absent, int n_absent)
{
        sqlbuf local = {.len = 0};
        lg_param params[LG_PARAMS_MAX];
        PGresult *found = NULL;
        lg_args *t = tx->args;

        lg_args_reset(t);
        lg_args_text(t, tx->tenant);
        write_new_accounts(&local, t, b);
        write_changed_accounts(&local, t, b);
        write_new_transfers(&local, t, b);
        write_pending(&local, t, b);
        write_failed(&local, t, b);
        write_history(&local, t, b);
        if (local.ctes == 0 && n_absent == 0) {
                return KS_OK; /* nothing changed: every event failed; lg_tx_run commits */
        }
        write_check(&local, t, absent, n_absent);
        int n = lg_args_params(t, params);
        if (local.overflow || n < 0) {
                return KS_INTERNAL;
        }
        if (n_absent == 0) {
                lg_stmt write = {.sql = local.s, .n_params = n, .args = params};
                return lg_run(tx, &write, 1, true); /* the COMMIT goes in the same round trip */
        }
        /* The check decides whether to commit: lg_tx_run commits after KS_OK. */
        lg_stmt write = {.sql = local.s, .n_params = n, .args = params, .out = &found};
        int rc = lg_run(tx, &write, 1, false);
        if (rc == KS_OK) {
                rc = PQntuples(found) != 1            ? KS_INTERNAL
                     : lg_field_i64(found, 0, 0) == 0 ? KS_OK
                                                      : LG_RERUN_EXACT;
        }
        PQclear(found);
        return rc;
}

int lg_write_batch(lg_tx *tx, const lg_batch *b)
{
        return lg_write_batch_unless(tx, b, NULL, 0);
}
