/*
 * The frame of every billing method: who calls, in which tenant, with which
 * permission, under which Idempotency-Key, in one transaction.
 *
 * The role is the one the gateway resolved for the caller (session or API
 * key): the RPC server checks it against the permission of the method's row
 * (methods.def, services/core/ks_perms.c) before the handler runs, since
 * billing's spec says role_from_caller (main.c). Billing keeps no copy of
 * memberships: a role change revokes the contexts the gateways cache
 * (auth.context_revoked), so a demoted caller's next call carries the new
 * role.
 *
 * A transaction runs as keelson_billing_rt (the pool's role) with
 * keelson.tenant_id set for it: the row-level security policies of every
 * table match only that tenant's rows, whatever a query forgets.
 */
#include "billing.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"

static const char sql_act_for[] = "SELECT set_config('keelson.tenant_id', $1, true)";

int bl_require_tenant(ks_call *call)
{
        const ks_caller *c = call->caller;

        /* From the gateway over the internal network; still, nothing malformed reaches SQL. */
        if (!c->authenticated || c->tenant_id == NULL || !bl_uuid_valid(c->tenant_id)) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        return KS_OK;
}

int bl_fail(bl_tx *tx, int code, const char *fmt, ...)
{
        char msg[KS_MESSAGE_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (tx->call != NULL) {
                return ks_call_fail(tx->call, code, "%s", msg);
        }
        ks_log_warn(tx->request_id, "billing step refused", "{s:s, s:s, s:s}", "tenant_id",
                    tx->tenant_id, "code", ks_code_name(code), "message", msg);
        return code;
}

int bl_db_fail(bl_tx *tx, int code)
{
        const char *msg = BL_INTERNAL_MSG;

        if (code == KS_PG_DEFERRED) {
                return code; /* a read recorded for the loop's batch: no failure */
        }
        ks_log_warn(tx->request_id, "billing database call failed", "{s:s, s:s}", "method",
                    tx->call != NULL && tx->call->method ? tx->call->method->name : "", "code",
                    ks_code_name(code));
        if (code == KS_UNAVAILABLE) {
                msg = "service temporarily unavailable, retry later";
        } else if (code == KS_ABORTED || code == KS_ALREADY_EXISTS) {
                /* A conflict with a concurrent write that committed first: a retry sees it. */
                code = KS_ABORTED;
                msg = "conflicting concurrent update, retry";
        } else if (code == KS_DEADLINE_EXCEEDED) {
                msg = "the database did not answer in time, retry later";
        } else {
                code = KS_INTERNAL;
        }
        return bl_fail(tx, code, "%s", msg);
}

/* ---- deferred writes ------------------------------------------------------------------ */

static void deferred_free(bl_deferred *d)
{
        for (int i = 0; i < d->n; i++) {
                free(d->params[i]);
        }
        free(d->params);
        free(d->sql);
        memset(d, 0, sizeof(*d));
}

static void deferred_clear(bl_tx *tx)
{
        for (size_t i = 0; i < tx->n_deferred; i++) {
                deferred_free(&tx->deferred[i]);
        }
        tx->n_deferred = 0;
}

static int oom(bl_tx *tx)
{
        return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
}

/* The last deferred statement of row and sql, or NULL. */
static bl_deferred *deferred_of(bl_tx *tx, const char *row, const char *sql)
{
        for (size_t i = tx->n_deferred; i-- > 0;) {
                bl_deferred *d = &tx->deferred[i];
                if (strcmp(d->row, row) == 0 && strcmp(d->sql, sql) == 0) {
                        return d;
                }
        }
        return NULL;
}

int bl_defer_rewrite(bl_tx *tx, const char *row, const char *sql, int from, int n,
                     const char *const *params, bool *found)
{
        bl_deferred *d = deferred_of(tx, row, sql);

        *found = d != NULL;
        if (d == NULL) {
                return KS_OK;
        }
        KS_ASSERT(from >= 0 && from + n <= d->n);
        for (int k = 0; k < n; k++) {
                char *v = params[k] != NULL ? strdup(params[k]) : NULL;
                if (params[k] != NULL && v == NULL) {
                        return oom(tx);
                }
                free(d->params[from + k]);
                d->params[from + k] = v;
        }
        return KS_OK;
}

/* Whether sql names table as a whole name ("billing.invoices" is not "billing.invoices_x"). */
static bool names(const char *sql, const char *table)
{
        size_t n = strlen(table);

        for (const char *p = strstr(sql, table); p != NULL; p = strstr(p + 1, table)) {
                if (!isalnum((unsigned char)p[n]) && p[n] != '_') {
                        return true;
                }
        }
        return false;
}

/*
 * Whether a statement deferred after index i names table; the same
 * statement for another row (another invoice's insert) does not count:
 * their order does not matter.
 */
static bool named_after(const bl_tx *tx, size_t i, const char *table)
{
        for (size_t k = i + 1; k < tx->n_deferred; k++) {
                if (strcmp(tx->deferred[k].sql, tx->deferred[i].sql) != 0 &&
                    names(tx->deferred[k].sql, table)) {
                        return true;
                }
        }
        return false;
}

bool bl_defer_take(bl_tx *tx, const char *row, const char *sql, const char *table, bl_deferred *out)
{
        bl_deferred *d = deferred_of(tx, row, sql);

        if (d == NULL || named_after(tx, (size_t)(d - tx->deferred), table)) {
                return false;
        }
        *out = *d;
        size_t i = (size_t)(d - tx->deferred);
        memmove(d, d + 1, (tx->n_deferred - i - 1) * sizeof(*d));
        tx->n_deferred--;
        return true;
}

void bl_deferred_free(bl_deferred *d)
{
        deferred_free(d);
}

int bl_defer_row(bl_tx *tx, const char *row, const char *sql, int n, const char *const *params)
{
        bool found;
        int rc;

        if ((rc = bl_defer_rewrite(tx, row, sql, 0, n, params, &found)) != KS_OK || found) {
                return rc;
        }
        if ((rc = bl_defer(tx, sql, n, params)) == KS_OK) {
                snprintf(tx->deferred[tx->n_deferred - 1].row, BL_UUID_LEN + 1, "%s", row);
        }
        return rc;
}

int bl_defer_insert(bl_tx *tx, const char *row, const char *sql, int n, const char *const *params)
{
        static const char prefix[] = "INSERT INTO ";
        size_t before = tx->n_deferred;
        int rc;

        /* The one-row form ks_pg_rows_sql reads, and the table's name after INSERT INTO. */
        KS_ASSERT(strncmp(sql, prefix, sizeof(prefix) - 1) == 0 && strstr(sql, " VALUES (") &&
                  sql[strlen(sql) - 1] == ')');
        rc = row != NULL ? bl_defer_row(tx, row, sql, n, params) : bl_defer(tx, sql, n, params);
        if (rc == KS_OK && tx->n_deferred > before) {
                bl_deferred *d = &tx->deferred[tx->n_deferred - 1];
                const char *t = sql + sizeof(prefix) - 1;
                size_t len = strcspn(t, " (");
                KS_ASSERT(len > 0 && len < sizeof(d->table));
                memcpy(d->table, t, len);
                d->table[len] = '\0';
        }
        return rc;
}

int bl_defer(bl_tx *tx, const char *sql, int n, const char *const *params)
{
        bl_deferred d = {.n = n};

        KS_ASSERT(!tx->reads_only); /* a read method writes nothing */
        if (tx->n_deferred == tx->cap_deferred) {
                size_t cap = tx->cap_deferred == 0 ? 32 : tx->cap_deferred * 2;
                bl_deferred *v = realloc(tx->deferred, cap * sizeof(*v));
                if (v == NULL) {
                        return oom(tx);
                }
                tx->deferred = v;
                tx->cap_deferred = cap;
        }
        d.sql = strdup(sql);
        d.params = calloc((size_t)n + 1, sizeof(char *));
        bool ok = d.sql != NULL && d.params != NULL;
        for (int i = 0; ok && i < n; i++) {
                ok = params[i] == NULL || (d.params[i] = strdup(params[i])) != NULL;
        }
        if (!ok) {
                deferred_free(&d);
                return oom(tx);
        }
        tx->deferred[tx->n_deferred++] = d;
        return KS_OK;
}

/*
 * A read of tx's tenant in one round trip: the tenant, then the n
 * statements, with no BEGIN or COMMIT; PostgreSQL runs them as one
 * transaction, which the pipeline's Sync ends (ks_pg_read, which may answer
 * it from the loop's batch).
 */
static int read_round(bl_tx *tx, const ks_pg_stmt *reads, int n)
{
        const char *params[1] = {tx->tenant_id};
        const ks_pg_stmt act_for = {.sql = sql_act_for, .n_params = 1, .params = params};

        KS_ASSERT(n >= 1 && n < KS_PG_PIPELINE_MAX);
        /* A pooled connection is released outside a transaction: the Sync ends the read's. */
        KS_ASSERT(PQtransactionStatus(tx->conn) == PQTRANS_IDLE);
        int rc = ks_pg_read(tx->conn, tx->request_id, &act_for, 1, reads, n);
        return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
}

/*
 * The rows of entries idx[0..k) (bl_defer_insert, one statement) as one
 * entry in place of the first, over arrays (ks_pg_rows_sql); the others
 * are freed and left without sql, for rows_together to drop. KS_OK, or
 * out of memory (nothing changed).
 */
static int rows_merge(bl_tx *tx, const size_t *idx, size_t k)
{
        bl_deferred *d = &tx->deferred[idx[0]];
        char *sql = ks_pg_rows_sql(d->sql, d->n);
        char **params = calloc((size_t)d->n + 1, sizeof(*params));
        bool ok = sql != NULL && params != NULL;

        for (int p = 0; ok && p < d->n; p++) {
                bl_arr a = {0};
                for (size_t r = 0; r < k; r++) {
                        const char *v = tx->deferred[idx[r]].params[p];
                        if (v != NULL) {
                                bl_arr_text(&a, v);
                        } else {
                                bl_arr_null(&a);
                        }
                }
                const char *lit = bl_arr_done(&a);
                ok = lit != NULL && (params[p] = strdup(lit)) != NULL;
                bl_arr_free(&a);
        }
        if (!ok) {
                for (int p = 0; params != NULL && p < d->n; p++) {
                        free(params[p]);
                }
                free(params);
                free(sql);
                return oom(tx);
        }
        for (size_t r = 1; r < k; r++) {
                deferred_free(&tx->deferred[idx[r]]);
        }
        int n = d->n;
        deferred_free(d);
        *d = (bl_deferred){.sql = sql, .n = n, .params = params};
        return KS_OK;
}

/*
 * Rows written together (bl_defer_insert): each waiting insert of one row
 * takes the later rows of its statement into one insert over arrays, each
 * up to the first statement between that names its table; the rows taken
 * go at the first's place, in their order.
 */
static int rows_together(bl_tx *tx)
{
        size_t *idx = NULL, n = tx->n_deferred, k, out = 0;
        int rc = KS_OK;

        for (size_t i = 0; i < n && rc == KS_OK; i++) {
                const bl_deferred *d = &tx->deferred[i];
                if (d->sql == NULL || d->table[0] == '\0') {
                        continue;
                }
                k = 0;
                for (size_t j = i + 1; j < n; j++) {
                        const bl_deferred *e = &tx->deferred[j];
                        if (e->sql == NULL) {
                                continue; /* taken into an earlier insert already */
                        }
                        if (e->table[0] != '\0' && strcmp(e->sql, d->sql) == 0) {
                                if (idx == NULL && (idx = malloc(n * sizeof(*idx))) == NULL) {
                                        return oom(tx);
                                }
                                if (k == 0) {
                                        idx[k++] = i;
                                }
                                idx[k++] = j;
                        } else if (e->table[0] != '\0' ? strcmp(e->table, d->table) == 0
                                                       : names(e->sql, d->table)) {
                                break;
                        }
                }
                if (k > 1) {
                        rc = rows_merge(tx, idx, k);
                }
        }
        free(idx);
        for (size_t i = 0; i < n; i++) {
                if (tx->deferred[i].sql != NULL) {
                        tx->deferred[out++] = tx->deferred[i];
                }
        }
        tx->n_deferred = out;
        return rc;
}

/*
 * The deferred writes, then stmts, in as few round trips as the pipeline
 * bound allows (one, nearly always). The deferred ones are gone afterwards,
 * sent or failed. In a read frame (bl_tx_run_reads) stmts are a read of
 * their own, and nothing is deferred.
 */
static int flush_with(bl_tx *tx, const ks_pg_stmt *stmts, int n)
{
        ks_pg_stmt batch[KS_PG_PIPELINE_MAX];
        size_t i = 0;
        int rc = KS_OK;

        KS_ASSERT(n >= 0 && n <= KS_PG_PIPELINE_MAX / 2);
        if (tx->reads_only) {
                KS_ASSERT(tx->n_deferred == 0);
                return n > 0 ? read_round(tx, stmts, n) : KS_OK;
        }
        if ((rc = rows_together(tx)) != KS_OK) {
                deferred_clear(tx);
                return rc;
        }
        while (rc == KS_OK) {
                int k = 0;
                for (; i < tx->n_deferred && k < KS_PG_PIPELINE_MAX - n; i++, k++) {
                        const bl_deferred *d = &tx->deferred[i];
                        batch[k] = (ks_pg_stmt){.sql = d->sql,
                                                .n_params = d->n,
                                                .params = (const char *const *)d->params};
                }
                bool last = i == tx->n_deferred;
                for (int j = 0; last && j < n; j++) {
                        batch[k++] = stmts[j];
                }
                if (k > 0) {
                        rc = ks_pg_pipeline(tx->conn, tx->request_id, batch, k);
                }
                if (last) {
                        break;
                }
        }
        deferred_clear(tx);
        return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
}

int bl_exec(bl_tx *tx, const char *sql, int n, const char *const *params, PGresult **out)
{
        const ks_pg_stmt s = {.sql = sql, .n_params = n, .params = params, .out = out};

        if (tx->n_deferred == 0 && !tx->reads_only) {
                int rc = ks_pg_exec(tx->conn, tx->request_id, sql, n, params, out);
                return rc == KS_OK ? KS_OK : bl_db_fail(tx, rc);
        }
        return flush_with(tx, &s, 1);
}

int bl_pipeline(bl_tx *tx, const ks_pg_stmt *stmts, int n)
{
        return flush_with(tx, stmts, n);
}

int bl_flush(bl_tx *tx)
{
        return tx->n_deferred > 0 ? flush_with(tx, NULL, 0) : KS_OK;
}

/* Frees what the transaction holds when it ends, committed or not. */
void bl_tx_free(bl_tx *tx)
{
        deferred_clear(tx);
        free(tx->deferred);
        tx->deferred = NULL;
        tx->cap_deferred = 0;
        bl_tx_numbered_free(tx);
        PQclear(tx->take_res);
        tx->take_res = NULL;
        tx->taken_left = 0;
        bl_events_clear(tx);
        bl_postings_clear(tx);
}

/* BEGIN and the tenant: they ride on the transaction's first statement. */
static int open_tx(bl_tx *tx)
{
        const char *params[1] = {tx->tenant_id};
        int rc;

        if ((rc = bl_defer(tx, "BEGIN", 0, NULL)) != KS_OK) {
                return rc;
        }
        return bl_defer(tx, sql_act_for, 1, params);
}

/* The invoices to number, then the deferred writes and COMMIT in one round trip. */
static int commit(bl_tx *tx)
{
        const ks_pg_stmt c = {.sql = "COMMIT"};
        int rc;

        if ((rc = bl_tx_seal(tx)) != KS_OK || (rc = bl_postings_flush(tx)) != KS_OK ||
            (rc = bl_events_flush(tx)) != KS_OK) {
                return rc;
        }
        return flush_with(tx, &c, 1);
}

/* Everything between BEGIN and COMMIT. *replayed: the reply is a stored one. */
static int run_in_tx(bl_tx *tx, bl_tx_fn fn, void *arg, bool *replayed)
{
        bl_idem_state idem = BL_IDEM_NONE;
        int rc, stored = KS_OK;

        *replayed = false;
        if ((rc = open_tx(tx)) != KS_OK) {
                return rc;
        }
        if ((rc = bl_idem_claim(tx, &idem, &stored)) != KS_OK) {
                return rc;
        }
        if (idem == BL_IDEM_REPLAYED) {
                *replayed = true;
                return stored;
        }
        if ((rc = fn(tx, arg)) != KS_OK) {
                return rc;
        }
        if (idem == BL_IDEM_NEW && (rc = bl_idem_store(tx, KS_OK)) != KS_OK) {
                return rc;
        }
        return commit(tx);
}

/*
 * The call's transaction, before its first statement: the caller's tenant
 * (checked) and a pool connection. The method's permission was checked
 * against the caller's role before the handler ran (main.c:
 * role_from_caller), before any input was read.
 */
static int call_tx(ks_call *call, bl_tx *tx)
{
        int rc;

        if ((rc = bl_require_tenant(call)) != KS_OK) {
                return rc;
        }
        memset(tx, 0, sizeof(*tx));
        tx->call = call;
        tx->svc = call->service;
        tx->tenant_id = call->caller->tenant_id;
        tx->request_id = call->request_id;
        if ((rc = ks_pg_acquire(tx->svc->pool, &tx->conn)) != KS_OK) {
                return bl_db_fail(tx, rc);
        }
        return KS_OK;
}

int bl_tx_run(ks_call *call, bl_tx_fn fn, void *arg)
{
        bl_tx tx;
        bool replayed = false;
        int rc;

        if ((rc = call_tx(call, &tx)) != KS_OK) {
                return rc;
        }
        rc = run_in_tx(&tx, fn, arg, &replayed);
        if (rc != KS_OK || replayed) {
                ks_pg_rollback(tx.conn);
        }
        bl_tx_free(&tx);
        ks_pg_release(tx.svc->pool, tx.conn);
        call->replayed = replayed;
        if (rc != KS_OK && !replayed && call->idempotency_key[0] != '\0' && bl_idem_keeps(rc)) {
                /* The request ran and was refused for what it asked: a retry is answered the same.
                 */
                bl_idem_store_failure(call, rc);
        }
        return rc;
}

/* Each call of a group alone, in its own transaction, after the group's was rolled back. */
static void run_alone(ks_call *const *calls, void *const *args, int n, const bl_group_fns *fns,
                      int *codes)
{
        for (int i = 0; i < n; i++) {
                free(calls[i]->out_payload);
                calls[i]->out_payload = NULL;
                calls[i]->out_len = 0;
                calls[i]->message[0] = '\0';
                calls[i]->replayed = false;
                codes[i] = bl_tx_run(calls[i], fns->whole, args[i]);
        }
}

/* Whether two calls of the group carry one Idempotency-Key: each must see the other's outcome. */
static bool keys_repeat(ks_call *const *calls, int n)
{
        for (int i = 0; i < n; i++) {
                for (int k = i + 1; calls[i]->idempotency_key[0] != '\0' && k < n; k++) {
                        if (strcmp(calls[i]->idempotency_key, calls[k]->idempotency_key) == 0) {
                                return true;
                        }
                }
        }
        return false;
}

/*
 * The group's calls in tx: their keys claimed, their reads in one round
 * trip, each body, the seal, each finish (its reply) and its key stored,
 * COMMIT.
 */
static int run_group_in_tx(bl_tx *tx, ks_call *const *calls, void *const *args, int n,
                           const bl_group_fns *fns, bl_idem_state *idem, char (*fps)[2 + 64 + 1])
{
        int rc, stored;

        if ((rc = open_tx(tx)) != KS_OK) {
                return rc;
        }
        for (int i = 0; i < n; i++) {
                tx->call = calls[i];
                tx->request_id = calls[i]->request_id;
                if ((rc = bl_idem_claim(tx, &idem[i], &stored)) != KS_OK) {
                        return rc;
                }
                if (idem[i] == BL_IDEM_REPLAYED) {
                        return KS_ABORTED; /* its stored reply is for it alone */
                }
                memcpy(fps[i], tx->idem_fp, sizeof(fps[i]));
        }
        tx->call = calls[0];
        tx->request_id = calls[0]->request_id;
        if ((rc = fns->reads(tx, args, n)) != KS_OK) {
                return rc;
        }
        for (int i = 0; i < n; i++) {
                tx->call = calls[i];
                tx->request_id = calls[i]->request_id;
                if ((rc = fns->body(tx, args[i])) != KS_OK) {
                        return rc;
                }
        }
        if ((rc = bl_tx_seal(tx)) != KS_OK) {
                return rc;
        }
        for (int i = 0; i < n; i++) {
                tx->call = calls[i];
                tx->request_id = calls[i]->request_id;
                memcpy(tx->idem_fp, fps[i], sizeof(tx->idem_fp));
                if ((rc = fns->finish(tx, args[i])) != KS_OK ||
                    (idem[i] == BL_IDEM_NEW && (rc = bl_idem_store(tx, KS_OK)) != KS_OK)) {
                        return rc;
                }
        }
        return commit(tx);
}

void bl_tx_run_group(ks_call *const *calls, void *const *args, int n, const bl_group_fns *fns,
                     int *codes)
{
        bl_service *svc = calls[0]->service;
        bl_idem_state *idem = calloc((size_t)n, sizeof(*idem));
        char(*fps)[2 + 64 + 1] = calloc((size_t)n, sizeof(*fps));
        bl_tx tx;
        int rc = KS_OK;

        for (int i = 0; i < n && rc == KS_OK; i++) {
                rc = bl_require_tenant(calls[i]);
                rc = rc == KS_OK && strcmp(calls[i]->caller->tenant_id, calls[0]->caller->tenant_id)
                         ? KS_INVALID_ARGUMENT
                         : rc;
        }
        if (n < 2 || idem == NULL || fps == NULL || rc != KS_OK || keys_repeat(calls, n) ||
            call_tx(calls[0], &tx) != KS_OK) {
                ks_counter_add(svc->grouped_undone, (uint64_t)n);
                run_alone(calls, args, n, fns, codes);
                goto out;
        }
        if ((rc = run_group_in_tx(&tx, calls, args, n, fns, idem, fps)) != KS_OK) {
                ks_pg_rollback(tx.conn);
        }
        bl_tx_free(&tx);
        ks_pg_release(tx.svc->pool, tx.conn);
        for (int i = 0; i < n; i++) {
                fns->forget(args[i]);
        }
        if (rc != KS_OK) {
                ks_counter_add(svc->grouped_undone, (uint64_t)n);
                run_alone(calls, args, n, fns, codes);
                goto out;
        }
        ks_counter_add(svc->grouped_committed, (uint64_t)n);
        for (int i = 0; i < n; i++) {
                codes[i] = KS_OK;
        }
out:
        free(fps);
        free(idem);
}

int bl_tx_run_reads(ks_call *call, bl_tx_fn fn, void *arg)
{
        bl_tx tx;
        int rc;

        if ((rc = call_tx(call, &tx)) != KS_OK) {
                return rc;
        }
        tx.reads_only = true;
        rc = fn(&tx, arg);
        bl_tx_free(&tx);
        ks_pg_release(tx.svc->pool, tx.conn);
        return rc;
}

int bl_tx_run_as(bl_service *svc, const char *request_id, const char *tenant_id, bl_tx_fn fn,
                 void *arg)
{
        bl_tx tx = {.svc = svc, .tenant_id = tenant_id, .request_id = request_id};
        int rc;

        if (!bl_uuid_valid(tenant_id)) {
                return KS_INTERNAL;
        }
        if ((rc = ks_pg_acquire(svc->pool, &tx.conn)) != KS_OK) {
                return rc;
        }
        if ((rc = open_tx(&tx)) == KS_OK && (rc = fn(&tx, arg)) == KS_OK) {
                rc = commit(&tx);
        }
        if (rc != KS_OK) {
                ks_pg_rollback(tx.conn);
        }
        bl_tx_free(&tx);
        ks_pg_release(svc->pool, tx.conn);
        return rc;
}
