/*
 * CreateTransfers: a batch of up to 8,190 transfers in one transaction.
 *
 *   1. BEGIN as the tenant, lock the tenant's clock, reserve n timestamps
 *      (db.c): the tenant's batches now run one at a time, in timestamp
 *      order, which is the order TigerBeetle's single-threaded state
 *      machine gives its batches;
 *   2. read every account the batch can touch: the batch's own accounts
 *      and those of the pending transfers it posts or voids. The clock is
 *      the only lock a writer takes, and every writer takes it first (new
 *      accounts, transfers, the expiry sweeper), so no two transactions can
 *      wait for each other in a cycle: no deadlock, whatever the overlap;
 *   3. read the transfers the batch refers to (its own ids: idempotency;
 *      its pending ids: two-phase) with their pending state, and the ids
 *      that failed before; these reads come after the clock, so they see
 *      every batch that committed before;
 *   4. run the state machine (machine.c) and write what changed (rows.c).
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ks_log.h"

typedef Keelson__Ledger__V1__CreateTransfersRequest transfers_req;
typedef Keelson__Ledger__V1__CreateTransfersResponse transfers_resp;

/* n events in w's buffers: one client batch, or a group's batches one after another. */
typedef struct job {
        lg_worker *w;
        int n;
        int n_parts;         /* 0: one batch */
        const int *part_len; /* n_parts lengths adding up to n */
} job;

/*
 * Every row is found by its key (LG_BY_KEYS): the batch's accounts, and the
 * two accounts of each pending transfer it posts or voids. No row lock: the
 * tenant's clock, locked first by every writer of the tenant (db.c), already
 * makes its writers run one at a time, and each statement of a transaction
 * in READ COMMITTED sees what committed before it started, so these reads
 * see every earlier batch whole. One lock, always taken first: no deadlock.
 */
static const char sql_accounts[] =
    "SELECT a.* FROM ("
    "  SELECT unnest($2::uuid[]) AS id"
    "  UNION SELECT x.id FROM unnest($3::uuid[]) AS p(id),"
    "   LATERAL (SELECT debit_account_id, credit_account_id FROM ledger.transfers"
    "    WHERE tenant_id = $1::uuid AND id = p.id OFFSET 0) t,"
    "   LATERAL (VALUES (t.debit_account_id), (t.credit_account_id)) AS x(id)) k,"
    " LATERAL (SELECT " LG_ACCOUNT_COLS " FROM ledger.accounts"
    "  WHERE tenant_id = $1::uuid AND id = k.id OFFSET 0) a";

/*
 * A post's pending amount comes along for the idempotency check of posts.
 * Each join is a key lookup per row found (OFFSET 0 keeps them so), never a
 * scan of the tenant's pending transfers.
 */
static const char sql_transfers[] =
    "SELECT t.id, t.debit_account_id, t.credit_account_id, t.amount, t.pending_id,"
    " t.user_data_128, t.user_data_64, t.user_data_32, t.timeout, t.ledger, t.code, t.flags,"
    " t.timestamp, coalesce(p.status, 0), coalesce(p.expires_at_ns, 0), pt.amount"
    " FROM (SELECT DISTINCT unnest($2::uuid[]) AS id) k"
    " CROSS JOIN LATERAL (SELECT * FROM ledger.transfers"
    "  WHERE tenant_id = $1::uuid AND id = k.id OFFSET 0) t"
    " LEFT JOIN LATERAL (SELECT status, expires_at_ns FROM ledger.pending_transfers"
    "  WHERE tenant_id = t.tenant_id AND id = t.id OFFSET 0) p ON true"
    " LEFT JOIN LATERAL (SELECT amount FROM ledger.transfers"
    "  WHERE tenant_id = t.tenant_id AND id = t.pending_id AND (t.flags & 4) <> 0 OFFSET 0) pt"
    " ON true";

static const char sql_failed[] = LG_BY_KEYS("id, result", "ledger.transfers_failed", "$2");

/*
 * Parameters: $1 the tenant, $2 the batch's account ids, $3 its pending ids,
 * $4 its ids (when exact) and pending ids, $5 its ids alone
 * (id_already_failed concerns only those: the failed ids read stay within
 * the batch's size).
 */
static int load_params(lg_tx *tx, const lg_transfer *ev, int n, bool exact, lg_param *p)
{
        lg_args *t = tx->args;

        lg_args_reset(t);
        lg_args_text(t, tx->tenant);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                lg_args_array_uuid(t, ev[i].debit_account_id);
                lg_args_array_uuid(t, ev[i].credit_account_id);
        }
        lg_args_array_end(t);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                if (ev[i].pending_id != 0) {
                        lg_args_array_uuid(t, ev[i].pending_id);
                }
        }
        lg_args_array_end(t);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                if (exact) {
                        lg_args_array_uuid(t, ev[i].id);
                }
                if (ev[i].pending_id != 0) {
                        lg_args_array_uuid(t, ev[i].pending_id);
                }
        }
        lg_args_array_end(t);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                lg_args_array_uuid(t, ev[i].id);
        }
        lg_args_array_end(t);
        return lg_args_params(t, p) == 5 ? KS_OK : KS_INTERNAL;
}

static int load_accounts(lg_batch *b, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                lg_account a;
                if (lg_read_account(res, i, 0, &a) != 0 || lg_batch_load_account(b, &a) != 0) {
                        return KS_INTERNAL;
                }
        }
        return KS_OK;
}

static int load_transfer_rows(lg_batch *b, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                lg_transfer t;
                u128 pending_amount = 0;
                if (lg_read_transfer(res, i, 0, &t) != 0 ||
                    lg_field_u128_dec(res, i, LG_TRANSFER_NCOLS + 2, &pending_amount) != 0) {
                        return KS_INTERNAL;
                }
                uint8_t status = (uint8_t)lg_field_i64(res, i, LG_TRANSFER_NCOLS);
                uint64_t expires = (uint64_t)lg_field_i64(res, i, LG_TRANSFER_NCOLS + 1);
                if (lg_batch_load_transfer(b, &t, status, expires, pending_amount) != 0) {
                        return KS_INTERNAL;
                }
        }
        return KS_OK;
}

static int load_failed(lg_batch *b, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                u128 id;
                if (lg_field_u128_uuid(res, i, 0, &id) != 0 ||
                    lg_batch_load_failed(b, id, (int)lg_field_i64(res, i, 1)) != 0) {
                        return KS_INTERNAL;
                }
        }
        return KS_OK;
}

int lg_load_for_transfers(lg_tx *tx, lg_batch *b, const lg_transfer *ev, int n, bool exact)
{
        lg_param p[5];
        PGresult *accounts = NULL, *transfers = NULL, *failed = NULL;
        int rc;

        lg_batch_reset(b);
        if ((rc = load_params(tx, ev, n, exact, p)) != KS_OK) {
                return rc;
        }
        /* One round trip: the locks first, then the reads, which see what committed before. */
        const lg_param lock_params[3] = {p[0], p[1], p[2]};
        const lg_param read_params[2] = {p[0], p[3]};
        const lg_param failed_params[2] = {p[0], p[4]};
        lg_stmt s[3] = {
            {.sql = sql_accounts, .n_params = 3, .args = lock_params, .out = &accounts},
            {.sql = sql_transfers, .n_params = 2, .args = read_params, .out = &transfers},
            {.sql = sql_failed, .n_params = 2, .args = failed_params, .out = &failed},
        };
        if ((rc = lg_run(tx, s, 3, false)) != KS_OK) {
                return rc;
        }
        if ((rc = load_accounts(b, accounts)) == KS_OK &&
            (rc = load_transfer_rows(b, transfers)) == KS_OK) {
                rc = load_failed(b, failed);
        }
        PQclear(accounts);
        PQclear(transfers);
        PQclear(failed);
        return rc;
}

/*
 * The ids the write must check, when the load guessed that no id of the
 * batch is a transfer already: those of the events that created nothing.
 * The events that created a transfer need no check, their insert does it
 * (a unique violation on the primary key).
 */
static int uncreated_ids(const lg_transfer *ev, const uint8_t *results, int n, u128 *out)
{
        int k = 0;

        for (int i = 0; i < n; i++) {
                if (results[i] != LG_TR(ok)) {
                        out[k++] = ev[i].id;
                }
        }
        return k;
}

/*
 * Most batches carry new ids only: reading 8,190 ids that are not there
 * costs an eighth of such a batch. So the first run guesses that none of the
 * batch's ids is a transfer already and lets the write check the guess
 * (lg_write_batch_unless, and the primary key); a wrong guess rolls back
 * and runs the batch again with every id read (tx->exact). Either way the
 * results are those of a run that read every id: an event that found its id
 * taken fails as exists or exists_with_different_*, and no event can have
 * created a transfer under a taken id.
 */
static int transfers_tx(lg_tx *tx, void *arg)
{
        job *j = arg;
        lg_batch *b = j->w->batch;
        const lg_transfer *ev = j->w->transfer_events;
        int64_t t0 = lg_now_us();
        int rc;

        if ((rc = lg_load_for_transfers(tx, b, ev, j->n, tx->exact)) != KS_OK) {
                return rc;
        }
        if (j->n_parts == 0 && lg_batch_imports(ev, j->n, true) &&
            (rc = lg_load_import(tx, b, true, ev, j->n)) != KS_OK) {
                return rc;
        }
        int64_t t1 = lg_now_us();
        if (j->n_parts == 0) {
                lg_create_transfers(b, ev, j->n, tx->base_ts, j->w->results, j->w->result_ts);
        }
        /* A group: each batch on the state the ones before it left, its chains its own. */
        for (int p = 0, off = 0; p < j->n_parts; off += j->part_len[p], p++) {
                lg_create_transfers(b, ev + off, j->part_len[p], tx->base_ts + (uint64_t)off,
                                    j->w->results + off, j->w->result_ts + off);
        }
        int64_t t2 = lg_now_us();
        int n_check = tx->exact ? 0 : uncreated_ids(ev, j->w->results, j->n, j->w->ids);
        /* A wrong guess meets the primary key (23505, unique_violation): no alarm. */
        tx->expected_sqlstate = tx->exact ? NULL : "23505";
        rc = lg_write_batch_unless(tx, b, j->w->ids, n_check);
        tx->expected_sqlstate = NULL;
        if (rc == KS_ALREADY_EXISTS && !tx->exact) {
                rc = LG_RERUN_EXACT; /* an id created here was taken: no guessing */
        }
        /* Where a batch's time goes, for whoever tunes it (debug level). */
        ks_log_debug(tx->request_id, "transfer batch", "{s:i, s:i, s:b, s:I, s:I, s:I}", "events",
                     j->n, "batches", j->n_parts == 0 ? 1 : j->n_parts, "exact", tx->exact,
                     "load_us", (json_int_t)(t1 - t0), "run_us", (json_int_t)(t2 - t1), "write_us",
                     (json_int_t)(lg_now_us() - t2));
        return rc;
}

static int reply(ks_call *call, const lg_worker *w, int n)
{
        transfers_resp resp = KEELSON__LEDGER__V1__CREATE_TRANSFERS_RESPONSE__INIT;
        lg_results_reply out = {&resp.base, &resp.n_results, (int **)&resp.results,
                                &resp.n_timestamps, &resp.timestamps};

        return lg_reply_results(call, 1, w->results, w->result_ts, n, LG_TR(ok), &out);
}

static int run_job(lg_service *svc, const char *tenant, const char *request_id, job *j)
{
        lg_tx tx = {.svc = svc, .request_id = request_id, .tenant = tenant, .args = &j->w->args};
        int64_t t0 = ks_mono_ms();
        int rc = lg_tx_run(&tx, j->n, false, transfers_tx, j);

        if (rc == KS_OK) {
                ks_histogram_observe(svc->batch_seconds, (double)(ks_mono_ms() - t0) / 1000.0);
        }
        return rc;
}

/*
 * A group's batches in one transaction, in the leader's buffers (m[0]'s,
 * which hold its own events first), each batch's results copied back to
 * its own. Should the transaction fail, each batch runs again alone: a
 * batch never fails for another's sake.
 */
static void run_group(lg_service *svc, const char *tenant, lg_member *const *m, int k)
{
        lg_worker *lw = m[0]->w;
        int len[LG_GROUP_MAX], n = m[0]->n;

        len[0] = m[0]->n;
        for (int i = 1; i < k; i++) {
                memcpy(lw->transfer_events + n, m[i]->w->transfer_events,
                       (size_t)m[i]->n * sizeof(*lw->transfer_events));
                len[i] = m[i]->n;
                n += m[i]->n;
        }
        job j = {.w = lw, .n = n, .n_parts = k > 1 ? k : 0, .part_len = len};
        int rc = run_job(svc, tenant, m[0]->request_id, &j);
        if (rc == KS_OK || k == 1) {
                for (int i = 0, off = 0; i < k; off += m[i]->n, i++) {
                        if (i > 0 && rc == KS_OK) {
                                memcpy(m[i]->w->results, lw->results + off, (size_t)m[i]->n);
                                memcpy(m[i]->w->result_ts, lw->result_ts + off,
                                       (size_t)m[i]->n * sizeof(*lw->result_ts));
                        }
                        m[i]->rc = rc;
                }
                if (k > 1) {
                        ks_counter_add(svc->grouped, (uint64_t)k);
                }
                return;
        }
        ks_log_warn(m[0]->request_id, "grouped ledger batches failed together: each runs alone",
                    "{s:i,s:s}", "batches", k, "code", ks_code_name(rc));
        for (int i = 0; i < k; i++) {
                job alone = {.w = m[i]->w, .n = m[i]->n};
                m[i]->rc = run_job(svc, tenant, m[i]->request_id, &alone);
        }
}

int lg_create_transfers_handler(ks_call *call)
{
        const transfers_req *req = (const transfers_req *)call->in;
        lg_service *svc = call->service;
        lg_worker *w = call->worker_state;
        char err[128];
        int rc;

        if ((rc = lg_check_batch(call, req->n_transfers, "transfers")) != KS_OK) {
                return rc;
        }
        for (size_t i = 0; i < req->n_transfers; i++) {
                if (lg_transfer_from_pb(req->transfers[i], &w->transfer_events[i], err,
                                        sizeof(err)) != KS_OK) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT, "transfers[%zu]: %s", i,
                                            err);
                }
        }
        lg_member me = {.w = w, .n = (int)req->n_transfers, .request_id = call->request_id};
        /* An imported batch runs alone: its checks read the tenant's state for it alone. */
        if (svc->groups != NULL && !lg_batch_imports(w->transfer_events, me.n, true)) {
                rc = lg_group_run(svc, call->caller->tenant_id, &me, run_group);
        } else {
                run_group(svc, call->caller->tenant_id, (lg_member *const[]){&me}, 1);
                rc = me.rc;
        }
        if (rc != KS_OK) {
                return lg_db_fail(call, rc);
        }
        return reply(call, w, me.n);
}
