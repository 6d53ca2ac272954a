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

/* ---- fields ------------------------------------------------------------------ */

/* How a field is held: lg_account's and lg_transfer's kinds (ledger.h), and a byte. */
typedef enum field_kind { K_ID, K_AMOUNT, K_U64, K_U32, K_U8 } field_kind;

/* A field of a record: its kind and where it is. */
typedef struct field {
        field_kind kind;
        size_t off;
} field;

#define FIELD(type, name, kind)                                                                    \
        {                                                                                          \
                K_##kind, offsetof(type, name)                                                     \
        }
#define ACCOUNT_FIELD(name, kind)  FIELD(lg_account, name, kind),
#define TRANSFER_FIELD(name, kind) FIELD(lg_transfer, name, kind),

static const field account_fields[LG_ACCOUNT_NCOLS] = {LG_ACCOUNT_FIELDS(ACCOUNT_FIELD)};
static const field transfer_fields[LG_TRANSFER_NCOLS] = {LG_TRANSFER_FIELDS(TRANSFER_FIELD)};

/* ---- reading ----------------------------------------------------------------- */

/* Columns c.. of a row into the n fields of out, in order. 0, or -1 for a malformed column. */
static int read_fields(const PGresult *r, int row, int c, const field *f, int n, void *out)
{
        char *base = out;

        for (int i = 0; i < n; i++, c++) {
                void *v = base + f[i].off;
                switch (f[i].kind) {
                case K_ID:
                        if (lg_field_u128_uuid(r, row, c, v) != 0) {
                                return -1;
                        }
                        break;
                case K_AMOUNT:
                        if (lg_field_u128_dec(r, row, c, v) != 0) {
                                return -1;
                        }
                        break;
                case K_U64:
                        *(uint64_t *)v = (uint64_t)lg_field_i64(r, row, c);
                        break;
                case K_U32:
                        *(uint32_t *)v = (uint32_t)lg_field_i64(r, row, c);
                        break;
                case K_U8:
                        *(uint8_t *)v = (uint8_t)lg_field_i64(r, row, c);
                        break;
                }
        }
        return 0;
}

int lg_read_account(const PGresult *r, int row, int c, lg_account *a)
{
        memset(a, 0, sizeof(*a));
        return read_fields(r, row, c, account_fields, LG_ACCOUNT_NCOLS, a);
}

int lg_read_transfer(const PGresult *r, int row, int c, lg_transfer *t)
{
        memset(t, 0, sizeof(*t));
        return read_fields(r, row, c, transfer_fields, LG_TRANSFER_NCOLS, t);
}

/* ---- the write statement ---------------------------------------------------------- */

typedef struct sqlbuf {
        char s[SQL_WRITE_MAX];
        size_t len;
        int ctes;
        bool overflow;
        bool custom_plan; /* planned for its parameters: write_changed_accounts */
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

/* Appends field f of the record at rec to the open array. */
static void add_item(lg_args *t, const field *f, const void *rec)
{
        const char *v = (const char *)rec + f->off;

        switch (f->kind) {
        case K_ID:
                lg_args_array_uuid(t, *(const u128 *)v);
                break;
        case K_AMOUNT:
                lg_args_array_dec(t, *(const u128 *)v);
                break;
        case K_U64:
                lg_args_array_i64(t, (int64_t) * (const uint64_t *)v);
                break;
        case K_U32:
                lg_args_array_i64(t, *(const uint32_t *)v);
                break;
        case K_U8:
                lg_args_array_i64(t, *(const uint8_t *)v);
                break;
        }
}

/* Records [from, to) of an array (size bytes each), those that keep takes (NULL: all). */
typedef struct rec_set {
        const void *recs;
        size_t size;
        int from, to;
        bool (*keep)(const lg_batch *b, int i);
        const lg_batch *b;
} rec_set;

/* One array parameter per column: of SQL type types[c], field fields[c] of every record of s. */
static void add_columns(lg_args *t, const char *const *types, const field *fields, int n,
                        const rec_set *s)
{
        for (int c = 0; c < n; c++) {
                lg_args_array_begin(t, elem_of(types[c]));
                for (int i = s->from; i < s->to; i++) {
                        if (s->keep == NULL || s->keep(s->b, i)) {
                                add_item(t, &fields[c],
                                         (const char *)s->recs + (size_t)i * s->size);
                        }
                }
                lg_args_array_end(t);
        }
}

/* A new account's balances are zero: the columns' defaults. */
static const char *const new_account_types[] = {"uuid", "uuid", "int8", "int8",
                                                "int8", "int4", "int4", "int8"};
static const field new_account_fields[] = {
    FIELD(lg_account, id, ID),
    FIELD(lg_account, user_data_128, ID),
    FIELD(lg_account, user_data_64, U64),
    FIELD(lg_account, user_data_32, U32),
    FIELD(lg_account, ledger, U32),
    FIELD(lg_account, code, U32),
    FIELD(lg_account, flags, U32),
    FIELD(lg_account, timestamp, U64),
};

static void write_new_accounts(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        rec_set s = {b->accounts, sizeof(lg_account), b->n_accounts_loaded, b->n_accounts, NULL, b};

        if (b->n_accounts == b->n_accounts_loaded) {
                return;
        }
        cte_insert(q, t,
                   "INSERT INTO ledger.accounts (tenant_id, id, user_data_128, user_data_64,"
                   " user_data_32, ledger, code, flags, timestamp)",
                   new_account_types, 8);
        add_columns(t, new_account_types, new_account_fields, 8, &s);
}

static const char *const changed_account_types[] = {"uuid",    "numeric", "numeric",
                                                    "numeric", "numeric", "int4"};
static const field changed_account_fields[] = {
    FIELD(lg_account, id, ID),
    FIELD(lg_account, debits_pending, AMOUNT),
    FIELD(lg_account, debits_posted, AMOUNT),
    FIELD(lg_account, credits_pending, AMOUNT),
    FIELD(lg_account, credits_posted, AMOUNT),
    FIELD(lg_account, flags, U32),
};

/*
 * Each changed account is found by its key, one probe per row of the
 * arrays, and updated where the probe found it (its ctid): OFFSET 0 keeps
 * the probe a subquery run per row, so the only plan is the arrays, then
 * the key, then the row, whatever the statistics say of the tenant. A plain
 * join of the arrays with the table is planned from them: planned while the
 * tenant's accounts were still few, it scanned them and read the whole
 * arrays again for each (253 accounts: 64,009 comparisons, 20 to 95 ms of
 * a batch of 750 transfers). The ctid holds: every writer of the tenant
 * locks its clock first (db.c), so no other transaction updates these rows
 * before this one commits.
 *
 * A probe costs about 14 us a row. From JOIN_CHANGED_MIN changed accounts
 * on, the plain join goes instead, and the statement is planned for its
 * own parameters (q->custom_plan): the planner then knows the arrays' true
 * length, and joins by hashing the tenant's accounts or probes by key,
 * whichever its statistics of the tenant make cheaper. Both are linear: at
 * this length it no longer weighs a loop over the arrays for each account
 * of a tenant it believes small. 6,000 of a tenant's 10,000 accounts: 85 to
 * 96 ms probed, 30 to 32 ms hashed (docs/performance.md).
 */
#define JOIN_CHANGED_MIN 1024

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
                " $%d::numeric[], $%d::numeric[], $%d::int4[]) AS v(id, dp, dpo, cp, cpo, f)",
                q->ctes ? "," : "WITH", q->ctes, p, p + 1, p + 2, p + 3, p + 4, p + 5);
        if (changed >= JOIN_CHANGED_MIN) {
                sql_add(q, " WHERE a.tenant_id = $1::uuid AND a.id = v.id)");
                q->custom_plan = true;
        } else {
                sql_add(q, ", LATERAL (SELECT x.ctid AS c FROM ledger.accounts x"
                           " WHERE x.tenant_id = $1::uuid AND x.id = v.id OFFSET 0) k"
                           " WHERE a.ctid = k.c AND a.tenant_id = $1::uuid)");
        }
        q->ctes++;
        rec_set s = {b->accounts,          sizeof(lg_account),       0,
                     b->n_accounts_loaded, lg_batch_account_changed, b};
        add_columns(t, changed_account_types, changed_account_fields, 6, &s);
}

static const char *const transfer_types[] = {"uuid", "uuid", "uuid", "numeric", "uuid",
                                             "uuid", "int8", "int8", "int8",    "int8",
                                             "int4", "int4", "int8"};

#define XFER_FIELD(name, kind) FIELD(lg_xfer, t.name, kind),
static const field xfer_fields[LG_TRANSFER_NCOLS] = {LG_TRANSFER_FIELDS(XFER_FIELD)};

static void write_new_transfers(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        rec_set s = {b->xfers, sizeof(lg_xfer), b->n_xfers_loaded, b->n_xfers, NULL, b};

        if (b->n_xfers == b->n_xfers_loaded) {
                return;
        }
        cte_insert(q, t, "INSERT INTO ledger.transfers (tenant_id, " LG_TRANSFER_COLS ")",
                   transfer_types, LG_TRANSFER_NCOLS);
        add_columns(t, transfer_types, xfer_fields, LG_TRANSFER_NCOLS, &s);
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
static const field pending_fields[] = {
    FIELD(lg_xfer, t.id, ID),
    FIELD(lg_xfer, status, U8),
    FIELD(lg_xfer, expires_at_ns, U64),
};

static void write_pending(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        rec_set s = {b->xfers, sizeof(lg_xfer), 0, b->n_xfers, pending_row, b};
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
        add_columns(t, pending_types, pending_fields, 3, &s);
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

static const field hist_fields[] = {
    FIELD(lg_hist, account_id, ID),          FIELD(lg_hist, timestamp, U64),
    FIELD(lg_hist, transfer_id, ID),         FIELD(lg_hist, side, U8),
    FIELD(lg_hist, debits_pending, AMOUNT),  FIELD(lg_hist, debits_posted, AMOUNT),
    FIELD(lg_hist, credits_pending, AMOUNT), FIELD(lg_hist, credits_posted, AMOUNT),
};

static void write_history(sqlbuf *q, lg_args *t, const lg_batch *b)
{
        rec_set s = {b->hist, sizeof(lg_hist), 0, b->n_hist, NULL, b};

        if (b->n_hist == 0) {
                return;
        }
        cte_insert(q, t,
                   "INSERT INTO ledger.account_balances (tenant_id, account_id, timestamp,"
                   " transfer_id, side, debits_pending, debits_posted, credits_pending,"
                   " credits_posted)",
                   hist_types, 8);
        add_columns(t, hist_types, hist_fields, 8, &s);
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
        /*
         * A statement planned for its parameters goes between two settings of
         * the transaction's plan_cache_mode (the session's is generic: ks_pg.c).
         */
        lg_stmt stmts[3] = {
            {.sql = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"},
            {.sql = local.s, .n_params = n, .args = params},
            {.sql = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"},
        };
        lg_stmt *write = local.custom_plan ? stmts : &stmts[1];
        int n_stmts = local.custom_plan ? 3 : 1;

        if (n_absent == 0) {
                /* The COMMIT goes in the same round trip. */
                return lg_run(tx, write, n_stmts, true);
        }
        /* The check decides whether to commit: lg_tx_run commits after KS_OK. */
        stmts[1].out = &found;
        int rc = lg_run(tx, write, n_stmts, false);
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
