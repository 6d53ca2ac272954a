/*
 * Transactions as a tenant, retries, array parameters and field parsers.
 *
 * Tenant isolation in depth: every statement filters by tenant_id, and on
 * top of that each transaction switches to the runtime role
 * keelson_ledger_rt (NOLOGIN, not the owner of the tables: row-level
 * security applies to it) and sets keelson.tenant_id for the transaction
 * only, which the policies of 001_init.sql compare every row against. Both
 * are LOCAL: when the transaction ends the connection is back to the login
 * role with no tenant, and a pooled connection can never carry one
 * tenant's setting into another's call.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_log.h"

#define BACKOFF_MS_MAX     50
#define TEXT_INITIAL_BYTES (64u << 10)

int64_t lg_now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- text parameters ------------------------------------------------------ */

void lg_text_reset(lg_text *t)
{
        t->len = 0;
        t->n_params = 0;
        t->failed = false;
        t->in_array = false;
}

void lg_text_fini(lg_text *t)
{
        free(t->buf);
        memset(t, 0, sizeof(*t));
}

static void text_append(lg_text *t, const char *s, size_t n)
{
        if (t->failed) {
                return;
        }
        if (t->len + n + 1 > t->cap) {
                size_t cap = t->cap != 0 ? t->cap : TEXT_INITIAL_BYTES;
                while (cap < t->len + n + 1) {
                        cap *= 2;
                }
                char *nb = cap <= LG_TEXT_MAX ? realloc(t->buf, cap) : NULL;
                if (nb == NULL) {
                        t->failed = true;
                        return;
                }
                t->buf = nb;
                t->cap = cap;
        }
        memcpy(t->buf + t->len, s, n);
        t->len += n;
        t->buf[t->len] = '\0';
}

/* Starts a parameter: its text runs from here to the NUL that ends it. */
static void text_param_start(lg_text *t)
{
        if (t->n_params >= LG_PARAMS_MAX) {
                t->failed = true;
                return;
        }
        t->offsets[t->n_params++] = t->len;
}

static void text_param_end(lg_text *t)
{
        text_append(t, "", 0);
        if (!t->failed) {
                t->len++; /* keep the NUL: the next parameter starts after it */
        }
}

void lg_text_param(lg_text *t, const char *s)
{
        text_param_start(t);
        text_append(t, s, strlen(s));
        text_param_end(t);
}

void lg_text_array_begin(lg_text *t)
{
        text_param_start(t);
        text_append(t, "{", 1);
        t->in_array = true;
        t->array_empty = true;
}

void lg_text_array_item(lg_text *t, const char *s)
{
        if (!t->array_empty) {
                text_append(t, ",", 1);
        }
        t->array_empty = false;
        text_append(t, s, strlen(s));
}

void lg_text_array_uuid(lg_text *t, u128 v)
{
        char s[LG_UUID_LEN + 1];

        lg_u128_to_uuid(v, s);
        lg_text_array_item(t, s);
}

void lg_text_array_dec(lg_text *t, u128 v)
{
        char s[LG_DEC128_LEN + 1];

        lg_u128_to_dec(v, s);
        lg_text_array_item(t, s);
}

void lg_text_array_i64(lg_text *t, int64_t v)
{
        char s[LG_INT8_LEN + 1];

        snprintf(s, sizeof(s), "%lld", (long long)v);
        lg_text_array_item(t, s);
}

void lg_text_array_end(lg_text *t)
{
        text_append(t, "}", 1);
        t->in_array = false;
        text_param_end(t);
}

int lg_text_params(lg_text *t, const char **params)
{
        if (t->failed || t->in_array) {
                return -1;
        }
        for (int i = 0; i < t->n_params; i++) {
                params[i] = t->buf + t->offsets[i];
        }
        return t->n_params;
}

/* ---- statements: pipelined ------------------------------------------------------ */

/* ks_pg_exec's mapping of a failure to a code. */
static int code_of(PGconn *conn, const PGresult *res)
{
        const char *st = ks_pg_sqlstate(res);

        if (PQstatus(conn) != CONNECTION_OK || strncmp(st, "08", 2) == 0 ||
            strncmp(st, "57P0", 4) == 0) {
                return KS_UNAVAILABLE;
        }
        if (strcmp(st, "23505") == 0) {
                return KS_ALREADY_EXISTS;
        }
        if (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0) {
                return KS_ABORTED;
        }
        if (strcmp(st, "57014") == 0) {
                return KS_DEADLINE_EXCEEDED;
        }
        return KS_INTERNAL;
}

static void log_failure(lg_tx *tx, PGconn *conn, const PGresult *res, int code)
{
        char msg[256];
        const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

        /* The primary message only: DETAIL repeats key values, and parameters never appear. */
        snprintf(msg, sizeof(msg), "%s", primary != NULL ? primary : PQerrorMessage(conn));
        msg[strcspn(msg, "\n")] = '\0';
        ks_log_error(tx->request_id, "postgres statement failed", "{s:s,s:s,s:s}", "sqlstate",
                     ks_pg_sqlstate(res), "code", ks_code_name(code), "pg_message", msg);
}

/* Reads the result of one pipelined statement: the first result, then up to the NULL. */
static int take_result(lg_tx *tx, const lg_stmt *s, int code)
{
        PGresult *r = PQgetResult(tx->conn), *extra;
        ExecStatusType st = PQresultStatus(r);

        while ((extra = PQgetResult(tx->conn)) != NULL) {
                PQclear(extra);
        }
        if (code == KS_OK && r != NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)) {
                if (s->out != NULL) {
                        *s->out = r;
                } else {
                        PQclear(r);
                }
                return KS_OK;
        }
        if (code == KS_OK) {
                /* The first failure; the statements after it only say "aborted". */
                code = code_of(tx->conn, r);
                log_failure(tx, tx->conn, r, code);
        }
        PQclear(r);
        return code;
}

static void clear_outs(const lg_stmt *s, int n)
{
        for (int i = 0; i < n; i++) {
                if (s[i].out != NULL) {
                        PQclear(*s[i].out);
                        *s[i].out = NULL;
                }
        }
}

/*
 * Sends the statements in one pipeline and one Sync, then reads every
 * result: one round trip however many statements. libpq keeps reading
 * while it waits to send, so a large result cannot block a large request.
 */
static int pipeline(lg_tx *tx, const lg_stmt *s, int n)
{
        PGconn *c = tx->conn;
        int code = KS_OK, sent = 0;

        for (int i = 0; i < n; i++) {
                if (s[i].out != NULL) {
                        *s[i].out = NULL;
                }
        }
        if (PQenterPipelineMode(c) != 1) {
                return KS_UNAVAILABLE;
        }
        while (sent < n && PQsendQueryParams(c, s[sent].sql, s[sent].n_params, NULL, s[sent].params,
                                             NULL, NULL, 0) == 1) {
                sent++;
        }
        if (sent < n || PQpipelineSync(c) != 1) {
                code = KS_UNAVAILABLE;
                log_failure(tx, c, NULL, code);
        }
        for (int i = 0; i < sent; i++) {
                code = take_result(tx, &s[i], code);
        }
        for (int i = 0; i < 4; i++) { /* the Sync's result ends the pipeline */
                PGresult *r = PQgetResult(c);
                bool sync = r != NULL && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
                PQclear(r);
                if (sync) {
                        break;
                }
        }
        if (PQexitPipelineMode(c) != 1 && code == KS_OK) {
                code = KS_UNAVAILABLE; /* the pool resets the connection */
        }
        if (code != KS_OK) {
                clear_outs(s, n);
        }
        return code;
}

/*
 * The statements that open a transaction: BEGIN, the runtime role, the
 * tenant and, for a writer, the tenant's clock: INSERT .. ON CONFLICT DO
 * UPDATE locks the clock row (creating it the first time) and moves it to
 * max(last + 1, now) + reserve - 1, returning the first timestamp reserved.
 */
static const char sql_clock[] =
    "INSERT INTO ledger.clocks AS c (tenant_id, last_ns)"
    " VALUES ($1::uuid, (extract(epoch FROM clock_timestamp()) * 1000000000)::int8"
    " + $2::int8 - 1)"
    " ON CONFLICT (tenant_id) DO UPDATE SET last_ns = GREATEST(c.last_ns + $2::int8,"
    " EXCLUDED.last_ns)"
    " RETURNING last_ns - $2::int8 + 1";

static int prelude(lg_tx *tx, lg_stmt *out, PGresult **clock)
{
        int k = 0;

        snprintf(tx->reserve_text, sizeof(tx->reserve_text), "%d", tx->reserve);
        tx->prelude_params[0] = tx->tenant;
        tx->prelude_params[1] = tx->reserve_text;
        out[k++] = (lg_stmt){
            .sql = tx->read_only ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN"};
        out[k++] = (lg_stmt){.sql = "SET LOCAL ROLE keelson_ledger_rt"};
        out[k++] = (lg_stmt){.sql = "SELECT set_config('keelson.tenant_id', $1, true)",
                             .n_params = 1,
                             .params = tx->prelude_params};
        if (tx->reserve > 0) {
                out[k++] = (lg_stmt){
                    .sql = sql_clock, .n_params = 2, .params = tx->prelude_params, .out = clock};
        }
        return k;
}

static int clock_result(lg_tx *tx, PGresult *clock)
{
        int64_t base = clock != NULL && PQntuples(clock) == 1 ? lg_field_i64(clock, 0, 0) : 0;

        PQclear(clock);
        if (base <= 0) {
                return KS_INTERNAL;
        }
        tx->base_ts = (uint64_t)base;
        return KS_OK;
}

int lg_run(lg_tx *tx, const lg_stmt *stmts, int n, bool commit)
{
        lg_stmt all[LG_PIPELINE_MAX];
        PGresult *clock = NULL, *committed = NULL;
        int k = 0, rc;

        if (n < 0 || n > LG_PIPELINE_MAX - 5) {
                return KS_INTERNAL;
        }
        bool opening = !tx->opened;
        if (opening) {
                k = prelude(tx, all, &clock);
        }
        for (int i = 0; i < n; i++) {
                all[k++] = stmts[i];
        }
        if (commit) {
                all[k++] = (lg_stmt){.sql = "COMMIT", .out = &committed};
        }
        tx->opened = true; /* even on failure: the transaction is there, aborted */
        if ((rc = pipeline(tx, all, k)) != KS_OK) {
                return rc;
        }
        if (opening && tx->reserve > 0 && (rc = clock_result(tx, clock)) != KS_OK) {
                PQclear(committed);
                return rc;
        }
        if (commit) {
                /* COMMIT of a failed transaction "succeeds" with the tag ROLLBACK. */
                bool rolled_back = strcmp(PQcmdStatus(committed), "ROLLBACK") == 0;
                PQclear(committed);
                if (rolled_back) {
                        return KS_ABORTED;
                }
                tx->committed = true;
        }
        return KS_OK;
}

int lg_exec(lg_tx *tx, const char *sql, int n, const char *const *params, PGresult **out)
{
        lg_stmt s = {.sql = sql, .n_params = n, .params = params, .out = out};

        return lg_run(tx, &s, 1, false);
}

static bool retryable(int code)
{
        /* ALREADY_EXISTS: a unique key taken by a transaction that committed meanwhile. */
        return code == KS_ABORTED || code == KS_ALREADY_EXISTS;
}

/* Up to 2^attempt ms plus jitter, capped: replicas that collided do not collide again. */
static void backoff(int attempt)
{
        long ms = 1L << (attempt < 6 ? attempt : 6);
        ms = ms > BACKOFF_MS_MAX ? BACKOFF_MS_MAX : ms;
        ms += rand() % 3;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
        nanosleep(&ts, NULL);
}

int lg_tx_run(lg_tx *tx, int reserve_ts, bool read_only, lg_tx_fn fn, void *arg)
{
        int rc;

        if (!lg_tenant_valid(tx->tenant) || reserve_ts < 0 || reserve_ts > LG_BATCH_MAX) {
                return KS_INTERNAL;
        }
        if ((rc = ks_pg_acquire(tx->svc->pool, &tx->conn)) != KS_OK) {
                return rc;
        }
        tx->reserve = reserve_ts;
        tx->read_only = read_only;
        for (tx->attempt = 0;; tx->attempt++) {
                /* The opening statements go with the first statement fn runs (lg_run). */
                tx->opened = false;
                tx->committed = false;
                rc = fn(tx, arg);
                if (rc == KS_OK && tx->opened && !tx->committed) {
                        rc = lg_run(tx, NULL, 0, true);
                }
                ks_pg_rollback(tx->conn); /* no-op after a commit */
                if (!retryable(rc) || tx->attempt >= tx->svc->tx_retries) {
                        break;
                }
                ks_counter_inc(tx->svc->retries);
                ks_log_info(tx->request_id, "retrying a ledger transaction", "{s:i,s:s}", "attempt",
                            tx->attempt + 1, "code", ks_code_name(rc));
                backoff(tx->attempt);
        }
        ks_pg_release(tx->svc->pool, tx->conn);
        tx->conn = NULL;
        return rc;
}

/* ---- fields ----------------------------------------------------------------- */

int lg_field_u128_uuid(const PGresult *r, int row, int col, u128 *out)
{
        if (PQgetisnull(r, row, col)) {
                *out = 0;
                return 0;
        }
        return lg_uuid_to_u128(PQgetvalue(r, row, col), out);
}

int lg_field_u128_dec(const PGresult *r, int row, int col, u128 *out)
{
        if (PQgetisnull(r, row, col)) {
                *out = 0;
                return 0;
        }
        return lg_dec_to_u128(PQgetvalue(r, row, col), out);
}

int64_t lg_field_i64(const PGresult *r, int row, int col)
{
        return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* ---- callers and errors ------------------------------------------------------- */

int lg_require_caller(ks_call *call, bool write)
{
        const ks_caller *c = call->caller;

        if (!c->authenticated || !lg_tenant_valid(c->tenant_id)) {
                return ks_call_fail(call, KS_UNAUTHENTICATED, "authentication required");
        }
        if (write && c->role != NULL && strcmp(c->role, "viewer") == 0) {
                return ks_call_fail(call, KS_PERMISSION_DENIED,
                                    "the viewer role may read the ledger but not write to it");
        }
        return KS_OK;
}

int lg_db_fail(ks_call *call, int code)
{
        const char *msg = LG_INTERNAL_MSG;

        ks_log_warn(call->request_id, "ledger database call failed", "{s:s, s:s}", "method",
                    call->method ? call->method->name : "", "code", ks_code_name(code));
        if (code == KS_UNAVAILABLE) {
                msg = "service temporarily unavailable, retry later";
        } else if (code == KS_ABORTED || code == KS_ALREADY_EXISTS) {
                /* Still conflicting after the retries: the client's retry is as safe. */
                code = KS_ABORTED;
                msg = "conflicting concurrent update, retry";
        } else if (code == KS_DEADLINE_EXCEEDED) {
                msg = "the database did not answer in time, retry later";
        } else {
                code = KS_INTERNAL;
        }
        return ks_call_fail(call, code, "%s", msg);
}
