/*
 * Imported batches (TigerBeetle's `imported` flag): what the state machine
 * checks an imported event's own timestamp against, read in the batch's
 * transaction after the tenant's clock is locked, so that no writer of the
 * tenant can move it meanwhile.
 *
 *   - the latest timestamp of the batch's kind of object (accounts, or
 *     transfers): an imported event must be later
 *     (imported_event_timestamp_must_not_regress);
 *   - which of the events' timestamps another object already holds: an
 *     account's, for an imported transfer, and a transfer's, for an
 *     imported account; and, for a transfer, a balance row of one of its
 *     accounts (the expiry of a pending transfer writes balance rows at its
 *     own timestamp, and two balance rows of an account may not share one).
 *
 * Both are reads of the (tenant_id::text, timestamp) indexes and of the
 * balance rows' primary key (migrations/003_query_indexes.sql). Only
 * imported batches pay for them: one more round trip.
 */
#include "ledger.h"

#include <stdlib.h>

#define IMPORT_MAX_SQL(table)                                                                      \
        "SELECT coalesce(max(timestamp), 0) FROM " table " WHERE tenant_id::text = $1::text"

static const char sql_accounts_max[] = IMPORT_MAX_SQL("ledger.accounts");
static const char sql_transfers_max[] = IMPORT_MAX_SQL("ledger.transfers");

/* Timestamps of the batch ($2) held by transfers: an imported account may not take one. */
static const char sql_taken_by_transfers[] = "SELECT timestamp FROM ledger.transfers"
                                             " WHERE tenant_id::text = $1::text"
                                             " AND timestamp = ANY ($2::int8[])";

/* Held by accounts, or by a balance row of the account ($3[i]) at that time ($4[i]). */
static const char sql_taken_by_accounts[] =
    "SELECT timestamp FROM ledger.accounts WHERE tenant_id::text = $1::text"
    " AND timestamp = ANY ($2::int8[])"
    " UNION SELECT b.timestamp FROM unnest($3::uuid[], $4::int8[]) AS k(account_id, ts),"
    " LATERAL (SELECT timestamp FROM ledger.account_balances"
    "  WHERE tenant_id = $1::text::uuid AND account_id = k.account_id AND timestamp = k.ts"
    "  OFFSET 0) b";

/* The timestamps of the n events (of either kind: ts[i] read through get). */
static void args_timestamps(lg_args *t, const void *ev, int n, uint64_t (*get)(const void *, int))
{
        lg_args_array_begin(t, LG_ELEM_INT8);
        for (int i = 0; i < n; i++) {
                lg_args_array_i64(t, (int64_t)get(ev, i)); /* out of range: matches nothing */
        }
        lg_args_array_end(t);
}

static uint64_t account_ts(const void *ev, int i)
{
        return ((const lg_account *)ev)[i].timestamp;
}

static uint64_t transfer_ts(const void *ev, int i)
{
        return ((const lg_transfer *)ev)[i].timestamp;
}

/* Each transfer's accounts ($3) beside its timestamp twice ($4). */
static void args_account_pairs(lg_args *t, const lg_transfer *ev, int n)
{
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                lg_args_array_uuid(t, ev[i].debit_account_id);
                lg_args_array_uuid(t, ev[i].credit_account_id);
        }
        lg_args_array_end(t);
        lg_args_array_begin(t, LG_ELEM_INT8);
        for (int i = 0; i < n; i++) {
                lg_args_array_i64(t, (int64_t)ev[i].timestamp);
                lg_args_array_i64(t, (int64_t)ev[i].timestamp);
        }
        lg_args_array_end(t);
}

/* The rows of max and taken into the batch. */
static int load_results(lg_batch *b, const PGresult *max, const PGresult *taken)
{
        int n = PQntuples(taken);
        uint64_t *ts = malloc(((size_t)n + 1) * sizeof(*ts));
        int rc = KS_INTERNAL;

        if (ts != NULL && PQntuples(max) == 1) {
                for (int i = 0; i < n; i++) {
                        ts[i] = (uint64_t)lg_field_i64(taken, i, 0);
                }
                if (lg_batch_load_import(b, (uint64_t)lg_field_i64(max, 0, 0), ts, n) == 0) {
                        rc = KS_OK;
                }
        }
        free(ts);
        return rc;
}

/*
 * Reads an imported batch's context into b (after its rows are loaded:
 * lg_batch_load_import does not reset them). transfers: the events are
 * lg_transfer, else lg_account. KS_OK or a database failure's code.
 */
int lg_load_import(lg_tx *tx, lg_batch *b, bool transfers, const void *ev, int n)
{
        lg_args *t = tx->args;
        lg_param p[4];
        PGresult *max = NULL, *taken = NULL;
        int rc;

        lg_args_reset(t);
        lg_args_text(t, tx->tenant);
        args_timestamps(t, ev, n, transfers ? transfer_ts : account_ts);
        if (transfers) {
                args_account_pairs(t, ev, n);
        }
        int n_params = transfers ? 4 : 2;
        if (lg_args_params(t, p) != n_params) {
                return KS_INTERNAL;
        }
        lg_stmt s[2] = {
            {.sql = transfers ? sql_transfers_max : sql_accounts_max,
             .n_params = 1,
             .args = p,
             .out = &max},
            {.sql = transfers ? sql_taken_by_accounts : sql_taken_by_transfers,
             .n_params = n_params,
             .args = p,
             .out = &taken},
        };
        if ((rc = lg_run(tx, s, 2, false)) == KS_OK) {
                rc = load_results(b, max, taken);
        }
        PQclear(max);
        PQclear(taken);
        return rc;
}

bool lg_batch_imports(const void *ev, int n, bool transfers)
{
        if (n < 1) {
                return false;
        }
        return transfers ? (((const lg_transfer *)ev)[0].flags & LG_TF_IMPORTED) != 0
                         : (((const lg_account *)ev)[0].flags & LG_AF_IMPORTED) != 0;
}
