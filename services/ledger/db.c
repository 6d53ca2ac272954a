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

#include "ks_clock.h"
#include "ks_log.h"

#define BACKOFF_MS_MAX     50
#define TEXT_INITIAL_BYTES (64u << 10)

int64_t lg_now_us(void)
{
        return ks_mono_ns() / KS_NS_PER_US;
}

/* ---- parameters ------------------------------------------------------------ */

/* PostgreSQL's type oids (pg_type.dat): fixed since the types were added. */
#define OID_INT8          20
#define OID_NUMERIC       1700
#define OID_UUID          2950
#define OID_INT8_ARRAY    1016
#define OID_NUMERIC_ARRAY 1231
#define OID_UUID_ARRAY    2951
#define ARRAY_HEADER      20 /* ndim, flags, element type, length, lower bound */

void lg_args_reset(lg_args *t)
{
        t->len = 0;
        t->n_params = 0;
        t->failed = false;
        t->in_array = false;
}

void lg_args_fini(lg_args *t)
{
        free(t->buf);
        memset(t, 0, sizeof(*t));
}

/* Room for n more bytes; false (and failed) when there is none. */
static bool args_room(lg_args *t, size_t n)
{
        if (t->failed) {
                return false;
        }
        if (t->len + n + 1 > t->cap) {
                size_t cap = t->cap != 0 ? t->cap : TEXT_INITIAL_BYTES;
                while (cap < t->len + n + 1) {
                        cap *= 2;
                }
                char *nb = cap <= LG_ARGS_MAX_BYTES ? realloc(t->buf, cap) : NULL;
                if (nb == NULL) {
                        t->failed = true;
                        return false;
                }
                t->buf = nb;
                t->cap = cap;
        }
        return true;
}

static void args_append(lg_args *t, const void *s, size_t n)
{
        if (args_room(t, n)) {
                memcpy(t->buf + t->len, s, n);
                t->len += n;
        }
}

static void put_be32(char *p, uint32_t v)
{
        p[0] = (char)(v >> 24);
        p[1] = (char)(v >> 16);
        p[2] = (char)(v >> 8);
        p[3] = (char)v;
}

static void append_be16(lg_args *t, uint16_t v)
{
        char b[2] = {(char)(v >> 8), (char)v};
        args_append(t, b, 2);
}

static void append_be32(lg_args *t, uint32_t v)
{
        char b[4];
        put_be32(b, v);
        args_append(t, b, 4);
}

static void append_be64(lg_args *t, uint64_t v)
{
        append_be32(t, (uint32_t)(v >> 32));
        append_be32(t, (uint32_t)v);
}

/* Starts a parameter: its bytes run from here to where the next one starts. */
static void param_start(lg_args *t, unsigned int type)
{
        if (t->n_params >= LG_PARAMS_MAX || t->in_array) {
                t->failed = true;
                return;
        }
        t->types[t->n_params] = type;
        t->offsets[t->n_params++] = t->len;
}

static void param_end(lg_args *t)
{
        if (t->failed) {
                return;
        }
        int i = t->n_params - 1;
        t->lengths[i] = t->len - t->offsets[i];
        /* a NUL after each parameter: a text one is then a C string in place */
        if (args_room(t, 1)) {
                t->buf[t->len++] = '\0';
        }
}

void lg_args_text(lg_args *t, const char *s)
{
        param_start(t, 0);
        args_append(t, s, strlen(s));
        param_end(t);
}

static const unsigned int array_oid[] = {OID_UUID_ARRAY, OID_NUMERIC_ARRAY, OID_INT8_ARRAY};
static const unsigned int elem_oid[] = {OID_UUID, OID_NUMERIC, OID_INT8};

void lg_args_array_begin(lg_args *t, lg_elem elem)
{
        param_start(t, array_oid[elem]);
        t->in_array = true;
        t->elem = elem;
        t->items = 0;
        char header[ARRAY_HEADER] = {0};
        args_append(t, header, sizeof(header)); /* filled in by lg_args_array_end */
}

/* Counts an item of the open array, which must be of type elem. */
static bool array_item(lg_args *t, lg_elem elem)
{
        if (!t->in_array || t->elem != elem || t->items == INT32_MAX) {
                t->failed = true;
                return false;
        }
        t->items++;
        return !t->failed;
}

void lg_args_array_uuid(lg_args *t, u128 v)
{
        if (array_item(t, LG_ELEM_UUID)) {
                append_be32(t, 16);
                append_be64(t, lg_hi(v));
                append_be64(t, lg_lo(v));
        }
}

/*
 * numeric's binary form: ndigits, weight (of the first digit, in powers of
 * 10000), sign, display scale, then the base-10000 digits from the most
 * significant, trailing zero digits left out. 2^128 - 1 has 10 of them.
 */
void lg_args_array_dec(lg_args *t, u128 v)
{
        if (!array_item(t, LG_ELEM_NUMERIC)) {
                return;
        }
        uint16_t digits[10];
        int n = 0;
        for (; v != 0; v /= 10000) {
                digits[n++] = (uint16_t)(v % 10000); /* least significant first */
        }
        int weight = n - 1;
        int skip = 0; /* trailing zero digits */
        while (skip < n && digits[skip] == 0) {
                skip++;
        }
        int ndigits = n - skip;
        append_be32(t, (uint32_t)(8 + 2 * ndigits));
        append_be16(t, (uint16_t)ndigits);
        append_be16(t, (uint16_t)(n == 0 ? 0 : weight));
        append_be16(t, 0); /* positive */
        append_be16(t, 0); /* scale 0 */
        for (int i = n - 1; i >= skip; i--) {
                append_be16(t, digits[i]);
        }
}

void lg_args_array_i64(lg_args *t, int64_t v)
{
        if (array_item(t, LG_ELEM_INT8)) {
                append_be32(t, 8);
                append_be64(t, (uint64_t)v);
        }
}

void lg_args_array_end(lg_args *t)
{
        if (!t->in_array) {
                t->failed = true;
                return;
        }
        t->in_array = false;
        if (t->failed) {
                return;
        }
        char *h = t->buf + t->offsets[t->n_params - 1];
        if (t->items == 0) {
                /* an empty array has no dimension: 12 bytes of header, nothing after */
                put_be32(h, 0);
                put_be32(h + 4, 0);
                put_be32(h + 8, elem_oid[t->elem]);
                t->len = t->offsets[t->n_params - 1] + 12;
        } else {
                put_be32(h, 1);
                put_be32(h + 4, 0); /* no NULLs */
                put_be32(h + 8, elem_oid[t->elem]);
                put_be32(h + 12, (uint32_t)t->items);
                put_be32(h + 16, 1);
        }
        param_end(t);
}

int lg_args_params(lg_args *t, lg_param *params)
{
        if (t->failed || t->in_array) {
                return -1;
        }
        for (int i = 0; i < t->n_params; i++) {
                params[i] = (lg_param){.value = t->buf + t->offsets[i],
                                       .length = (int)t->lengths[i],
                                       .format = t->types[i] != 0,
                                       .type = t->types[i]};
        }
        return t->n_params;
}

/* ---- statements: pipelined ------------------------------------------------------ */

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
        lg_stmt all[KS_PG_PIPELINE_MAX];
        PGresult *clock = NULL, *committed = NULL;
        int k = 0, rc;

        if (n < 0 || n > KS_PG_PIPELINE_MAX - 5) {
                return KS_INTERNAL;
        }
        bool opening = !tx->opened;
        if (opening) {
                k = prelude(tx, all, &clock);
        }
        for (int i = 0; i < n; i++) {
                all[k] = stmts[i];
                if (all[k].expected_sqlstate == NULL) {
                        all[k].expected_sqlstate = tx->expected_sqlstate;
                }
                k++;
        }
        if (commit) {
                all[k++] = (lg_stmt){.sql = "COMMIT", .out = &committed};
        }
        tx->opened = true; /* even on failure: the transaction is there, aborted */
        if ((rc = ks_pg_pipeline(tx->conn, tx->request_id, all, k)) != KS_OK) {
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

int lg_exec_args(lg_tx *tx, const char *sql, int n, const lg_param *args, PGresult **out)
{
        lg_stmt s = {.sql = sql, .n_params = n, .args = args, .out = out};

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

lg_tx lg_call_tx(ks_call *call)
{
        lg_worker *w = call->worker_state;

        return (lg_tx){.svc = call->service,
                       .request_id = call->request_id,
                       .tenant = call->caller->tenant_id,
                       .args = &w->args};
}

int lg_tx_run(lg_tx *tx, int reserve_ts, bool read_only, lg_tx_fn fn, void *arg)
{
        int rc;

        /* A writer that did not take the tenant's clock would run beside another: refused. */
        if (!lg_tenant_valid(tx->tenant) || reserve_ts < 0 || reserve_ts > LG_BATCH_MAX ||
            (!read_only && reserve_ts == 0)) {
                return KS_INTERNAL;
        }
        if ((rc = ks_pg_acquire(tx->svc->pool, &tx->conn)) != KS_OK) {
                return rc;
        }
        tx->reserve = reserve_ts;
        tx->read_only = read_only;
        tx->exact = false;
        for (tx->attempt = 0;; tx->attempt++) {
                /* The opening statements go with the first statement fn runs (lg_run). */
                tx->opened = false;
                tx->committed = false;
                rc = fn(tx, arg);
                if (rc == KS_OK && tx->opened && !tx->committed) {
                        rc = lg_run(tx, NULL, 0, true);
                }
                ks_pg_rollback(tx->conn); /* no-op after a commit */
                if (rc == LG_RERUN_EXACT) {
                        if (tx->exact) {
                                rc = KS_INTERNAL; /* fn must not guess twice */
                                break;
                        }
                        tx->exact = true;
                        tx->attempt--; /* not a retry: the same attempt, without the guess */
                        ks_counter_inc(tx->svc->reruns);
                        continue;
                }
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
