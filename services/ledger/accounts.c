/*
 * CreateAccounts: a batch of up to 8,190 accounts in one transaction. The
 * tenant's clock (locked first, db.c) orders the batch among the tenant's
 * other writes and gives each account its timestamp; the accounts that
 * already exist with the batch's ids are read for the idempotency checks.
 * They need no lock: an account's identity fields never change, and only
 * this path, under the same clock, inserts accounts.
 *
 * A batch of accounts that all exist already, exactly as asked, takes no
 * clock: it is judged first on a read-only snapshot (REPEATABLE READ, no
 * timestamps reserved), and when every result is exists the reply is that
 * one. Nothing is written and no timestamp given (each exists carries the
 * existing account's), and since an account is never deleted and its
 * identity fields never change, the clocked run would answer the same; the
 * snapshot is the batch's moment. Any other result (one account new, one
 * different, a refusal, whose timestamp must come from the clock) runs the
 * batch again under the clock, from the start. That is billing's relay's
 * case at every round (it creates the accounts of its chains before
 * sending them, docs/performance.md): otherwise each round took the
 * tenant's clock twice, and its CreateAccounts queued behind the other
 * relays' CreateTransfers for nothing.
 */
#include "ledger.h"

#include <stdlib.h>

typedef Keelson__Ledger__V1__CreateAccountsRequest accounts_req;
typedef Keelson__Ledger__V1__CreateAccountsResponse accounts_resp;

/* base_ts of the read-only judgement, given to no result that is kept. */
#define KNOWN_TS_BASE 1

typedef struct job {
        lg_worker *w;
        int n;
        bool all_exist; /* known_tx: every event answered exists */
} job;

static const char sql_existing[] = LG_BY_KEYS(LG_ACCOUNT_COLS, "ledger.accounts", "$2");

static int load_existing(lg_tx *tx, lg_batch *b, const lg_account *ev, int n)
{
        lg_param params[2];
        PGresult *res = NULL;
        lg_args *t = tx->args;
        int rc;

        lg_args_reset(t);
        lg_args_text(t, tx->tenant);
        lg_args_array_begin(t, LG_ELEM_UUID);
        for (int i = 0; i < n; i++) {
                lg_args_array_uuid(t, ev[i].id);
        }
        lg_args_array_end(t);
        if (lg_args_params(t, params) != 2) {
                return KS_INTERNAL;
        }
        if ((rc = lg_exec_args(tx, sql_existing, 2, params, &res)) != KS_OK) {
                return rc;
        }
        for (int i = 0; i < PQntuples(res) && rc == KS_OK; i++) {
                lg_account a;
                if (lg_read_account(res, i, 0, &a) != 0 || lg_batch_load_account(b, &a) != 0) {
                        rc = KS_INTERNAL;
                }
        }
        PQclear(res);
        return rc;
}

/* The read-only judgement: j->all_exist when every event answered exists. */
static int known_tx(lg_tx *tx, void *arg)
{
        job *j = arg;
        lg_batch *b = j->w->batch;
        int rc;

        lg_batch_reset(b);
        if ((rc = load_existing(tx, b, j->w->account_events, j->n)) != KS_OK) {
                return rc;
        }
        /* No timestamp is reserved: only exists is kept, which answers the account's own. */
        lg_create_accounts(b, j->w->account_events, j->n, KNOWN_TS_BASE, j->w->results,
                           j->w->result_ts);
        j->all_exist = true;
        for (int i = 0; i < j->n; i++) {
                if (j->w->results[i] != LG_AR(exists)) {
                        j->all_exist = false;
                }
        }
        return KS_OK;
}

static int accounts_tx(lg_tx *tx, void *arg)
{
        job *j = arg;
        lg_batch *b = j->w->batch;
        int rc;

        lg_batch_reset(b);
        if ((rc = load_existing(tx, b, j->w->account_events, j->n)) != KS_OK) {
                return rc;
        }
        if (lg_batch_imports(j->w->account_events, j->n, false) &&
            (rc = lg_load_import(tx, b, false, j->w->account_events, j->n)) != KS_OK) {
                return rc;
        }
        lg_create_accounts(b, j->w->account_events, j->n, tx->base_ts, j->w->results,
                           j->w->result_ts);
        return lg_write_batch(tx, b);
}

static int reply(ks_call *call, const lg_worker *w, int n)
{
        accounts_resp resp = KEELSON__LEDGER__V1__CREATE_ACCOUNTS_RESPONSE__INIT;
        lg_results_reply out = {&resp.base, &resp.n_results, (int **)&resp.results,
                                &resp.n_timestamps, &resp.timestamps};

        return lg_reply_results(call, 0, w->results, w->result_ts, n, LG_AR(ok), &out);
}

int lg_create_accounts_handler(ks_call *call)
{
        const accounts_req *req = (const accounts_req *)call->in;
        lg_service *svc = call->service;
        lg_worker *w = call->worker_state;
        char err[128];
        int rc;

        if ((rc = lg_check_batch(call, req->n_accounts, "accounts")) != KS_OK) {
                return rc;
        }
        for (size_t i = 0; i < req->n_accounts; i++) {
                if (lg_account_from_pb(req->accounts[i], &w->account_events[i], err, sizeof(err)) !=
                    KS_OK) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT, "accounts[%zu]: %s", i, err);
                }
        }
        job j = {.w = w, .n = (int)req->n_accounts};
        lg_tx tx = lg_call_tx(call);
        int64_t t0 = ks_mono_ms();
        /* Imported batches are judged against the clock's time: never without it. */
        if (!lg_batch_imports(w->account_events, j.n, false) &&
            (rc = lg_tx_run(&tx, 0, true, known_tx, &j)) != KS_OK) {
                return lg_db_fail(call, rc);
        }
        if (!j.all_exist && (rc = lg_tx_run(&tx, j.n, false, accounts_tx, &j)) != KS_OK) {
                return lg_db_fail(call, rc);
        }
        ks_histogram_observe(svc->batch_seconds, (double)(ks_mono_ms() - t0) / 1000.0);
        return reply(call, w, j.n);
}
