/*
 * The ledger relay: one thread per replica (KEELSON_BILLING_RELAY) that
 * sends the chains queued in billing.postings (postings.c) to
 * keelson.ledger.v1.LedgerService until the ledger holds them.
 *
 * The queue is billing.postings_queue: a posting's id, put there by a
 * trigger on billing.postings in the transaction that queued the posting,
 * and deleted once the ledger holds its chain or it failed for good
 * (migration 007: marking the posting row itself wrote a new version of it
 * into every index). A round, in one transaction on a pool connection, as
 * keelson_billing_worker (which may read and mark postings of every tenant
 * and nothing else): claim up to relay_batch_max queued ids in id order
 * with FOR UPDATE SKIP LOCKED (replicas share the queue and never send one
 * row twice at once); per tenant, acting for it as its admin:
 *   1. CreateAccounts of the distinct accounts of its rows (ok and exists
 *      are fine; any other result refuses the rows that touch that account,
 *      whose transfers are then not sent: a transfer to a missing account
 *      would spend its id for good, TigerBeetle's id_already_failed);
 *   2. CreateTransfers of its chains, each linked inside and unlinked at its
 *      end, whole chains in calls of at most 8,190 transfers.
 * A chain is posted when every result is ok, or when its first is exists and
 * the others exists or linked_event_failed: it committed before, and a relay
 * died between the ledger's commit and its own (exists is not ok, and
 * breaks the chain). Any other answer refuses the row: attempts + 1,
 * last_error the results, and failed once attempts reach
 * relay_attempts_max (reconciliation reports it; it leaves the queue and
 * nothing sends it again). Posted rows leave the queue, then COMMIT. The
 * ledger applies a chain once whatever happens around it, so a row sent
 * again (a crash before COMMIT, a rollback) is only an exists. A queued id
 * whose posting was deleted by hand leaves the queue unsent, logged.
 *
 * A call that fails as a whole (the ledger unreachable or too slow, or
 * refusing the request itself, which is a matter of configuration such as a
 * KEELSON_LEDGER_BATCH_MAX below 8,190: nothing per transfer to judge, and
 * never counted against the rows' attempts) rolls the round back and backs
 * off, 100 ms doubling to 5 s; so does a failure of PostgreSQL. Failures are
 * states, logged when entered (a refusal at error level). After a full batch
 * that posted something the next round starts at once; otherwise the relay
 * rests relay_poll_ms on a condition variable, so that stop is prompt (a
 * call in flight still runs to its deadline, ledger_timeout_ms).
 */
#include "billing.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_log.h"
#include "ks_u128.h"

#define BACKOFF_MIN_MS     100
#define BACKOFF_MAX_MS     5000
#define ERROR_MAX          256
#define ROW_ERROR_MAX      320 /* six result names and commas */
#define ACCOUNTS_ROW_MAX   (2 * BL_CHAIN_MAX)
#define ITEMS_PER_CALL_MAX KS_RPC_ITEMS_MAX /* the ledger's batch maximum */
#define INT8_TEXT_MAX      21               /* "-9223372036854775808," */
#define LEDGER_SERVICE     "keelson.ledger.v1.LedgerService/"

typedef Keelson__Ledger__V1__CreateTransfersRequest transfers_req;
typedef Keelson__Ledger__V1__CreateTransfersResponse transfers_resp;
typedef Keelson__Ledger__V1__CreateAccountsRequest accounts_req;
typedef Keelson__Ledger__V1__CreateAccountsResponse accounts_resp;
typedef Keelson__Ledger__V1__Transfer transfer_pb;
typedef Keelson__Ledger__V1__Account account_pb;

#define TR(name) KEELSON__LEDGER__V1__CREATE_TRANSFERS_RESPONSE__RESULT__##name
#define AR(name) KEELSON__LEDGER__V1__CREATE_ACCOUNTS_RESPONSE__RESULT__##name

/* The queue read by its key, whatever it held when the claim was planned (KS_QUEUE_BY_KEY). */
static const char sql_open[] =
    "BEGIN; SET LOCAL ROLE keelson_billing_worker; SET LOCAL " KS_QUEUE_BY_KEY;

/*
 * Queued ids from $2 on (ks_claim_window), each posting found by its key
 * (OFFSET 0 keeps the join a lookup per id).
 */
static const char sql_claim[] =
    "SELECT q.id, p.tenant_id, p.n_transfers, p.transfers, p.accounts"
    " FROM (SELECT id FROM billing.postings_queue WHERE id >= $2::int8 ORDER BY id"
    " LIMIT $1::int8 FOR UPDATE SKIP LOCKED) q"
    " LEFT JOIN LATERAL (SELECT tenant_id, n_transfers, transfers, accounts"
    " FROM billing.postings WHERE id = q.id OFFSET 0) p ON true ORDER BY q.id";

static const char sql_posted[] = "DELETE FROM billing.postings_queue WHERE id = ANY($1::int8[])";

/* A posting failed for good leaves the queue: nothing sends it again. */
static const char sql_refused[] =
    "WITH u AS (UPDATE billing.postings p SET attempts = p.attempts + 1, last_error = u.err,"
    " failed = p.attempts + 1 >= $3::int4"
    " FROM unnest($1::int8[], $2::text[]) AS u(id, err)"
    " WHERE p.id = ANY($1::int8[]) AND p.id = u.id RETURNING p.id, p.attempts, p.failed),"
    " d AS (DELETE FROM billing.postings_queue q USING u WHERE q.id = u.id AND u.failed)"
    " SELECT id, attempts, failed FROM u";

/* ---- state ----------------------------------------------------------------------- */

typedef enum row_state {
        ROW_OPEN,    /* claimed, not judged yet */
        ROW_POSTED,  /* the ledger holds its chain */
        ROW_REFUSED, /* the ledger refused it: attempts + 1 */
        ROW_GONE,    /* queued, its posting deleted by hand: off the queue, unsent */
} row_state;

typedef struct row {
        int64_t id;
        char tenant[BL_UUID_LEN + 1];
        transfers_req *transfers; /* unpacked: its chain */
        accounts_req *accounts;
        row_state state;
        char error[ROW_ERROR_MAX];
        int32_t attempts; /* after the round (RETURNING) */
        bool failed;
} row;

typedef enum relay_state {
        STATE_STARTING,
        STATE_OK,
        STATE_DB_FAILING,     /* no connection, or statements fail */
        STATE_LEDGER_DOWN,    /* calls fail as a whole, transiently (unreachable, too slow) */
        STATE_LEDGER_REFUSES, /* calls fail as a whole for another reason (a configuration) */
} relay_state;

typedef enum step {
        STEP_IDLE, /* rest relay_poll_ms */
        STEP_MORE, /* a full batch made progress: at once */
        STEP_DB_FAILED,
        STEP_LEDGER_DOWN,    /* a call failed transiently */
        STEP_LEDGER_REFUSED, /* a call failed as a whole otherwise */
} step;

struct bl_relay {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop; /* under mu */
        bl_service *svc;
        size_t batch_max;

        /* Owned by the thread. */
        relay_state state;
        char error[ERROR_MAX]; /* the last failure, for the state change log */
        int backoff_ms;
        row *rows;               /* batch_max */
        transfer_pb **transfers; /* ITEMS_PER_CALL_MAX: one call's */
        account_pb **accounts;   /* batch_max * ACCOUNTS_ROW_MAX: a tenant's */
        ks_claim_window claims;

        ks_counter *posted_total, *failed_total, *refused_total;
        ks_counter *errors_db, *errors_ledger;
};

static void set_error(bl_relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_error(bl_relay *r, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(r->error, sizeof(r->error), fmt, ap);
        va_end(ap);
        r->error[strcspn(r->error, "\n")] = '\0';
}

/* Logs a change of state, once: a retry in the same state stays silent. */
static void set_state(bl_relay *r, relay_state s)
{
        if (s == r->state) {
                return;
        }
        r->state = s;
        if (s == STATE_OK) {
                ks_log_info(NULL, "ledger relay posting", NULL);
        } else if (s == STATE_DB_FAILING) {
                ks_log_error(NULL, "ledger relay cannot use postgres, retrying", "{s:s}", "error",
                             r->error);
        } else if (s == STATE_LEDGER_DOWN) {
                ks_log_warn(NULL, "ledger relay cannot reach the ledger, retrying", "{s:s}",
                            "error", r->error);
        } else if (s == STATE_LEDGER_REFUSES) {
                ks_log_error(NULL, "ledger relay's calls are refused, retrying", "{s:s}", "error",
                             r->error);
        }
}

/* ---- calls of the ledger (shared with reconcile.c) --------------------------------- */

bool bl_ledger_transient(int code)
{
        return code == KS_UNAVAILABLE || code == KS_DEADLINE_EXCEEDED || code == KS_ABORTED ||
               code == KS_RESOURCE_EXHAUSTED;
}

static void count_call(const char *method, int code)
{
        char labels[128];

        snprintf(labels, sizeof(labels), "method=\"%s\",code=\"%s\"", method, ks_code_name(code));
        ks_counter_inc(ks_counter_get(ks_metrics_default(), "keelson_billing_ledger_calls_total",
                                      "Calls of billing to the ledger by method and code", labels));
}

int bl_ledger_call(bl_service *svc, const char *tenant_id, const char *request_id,
                   const char *method, int64_t deadline_unix_ms, const ProtobufCMessage *in,
                   const ProtobufCMessageDescriptor *out_type, ProtobufCMessage **out, char *msg)
{
        char full[96];
        ks_caller caller = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        ks_rpc_result res;
        size_t len = protobuf_c_message_get_packed_size(in);
        uint8_t *buf;
        int code;

        KS_ASSERT(svc != NULL && tenant_id != NULL && method != NULL && out != NULL);
        *out = NULL;
        if (msg != NULL) {
                msg[0] = '\0';
        }
        if (svc->ledger == NULL || (buf = malloc(len > 0 ? len : 1)) == NULL) {
                return svc->ledger == NULL ? KS_UNAVAILABLE : KS_RESOURCE_EXHAUSTED;
        }
        protobuf_c_message_pack(in, buf);
        snprintf(full, sizeof(full), LEDGER_SERVICE "%s", method);
        caller.authenticated = true;
        caller.tenant_id = (char *)tenant_id;
        caller.role = "admin";
        ks_rpc_call_args a = {.method = full,
                              .request_id = request_id,
                              .caller = &caller,
                              .deadline_unix_ms = deadline_unix_ms > 0
                                                      ? deadline_unix_ms
                                                      : ks_now_ms() + svc->cfg->ledger_timeout_ms,
                              .payload = buf,
                              .payload_len = len};
        code = ks_rpc_call(svc->ledger, &a, &res);
        free(buf);
        if (code == KS_OK) {
                *out = protobuf_c_message_unpack(out_type, NULL, res.payload_len, res.payload);
                if (*out == NULL) {
                        code = KS_INTERNAL;
                        snprintf(res.message, sizeof(res.message), "undecodable reply");
                }
        }
        if (code != KS_OK && msg != NULL) {
                snprintf(msg, KS_MESSAGE_MAX, "%s", res.message);
        }
        ks_rpc_result_clear(&res);
        count_call(method, code);
        return code;
}

/* ---- rows --------------------------------------------------------------------------- */

/* Columns of sql_claim. */
enum { COL_ID, COL_TENANT, COL_N, COL_TRANSFERS, COL_ACCOUNTS };

static void refuse(row *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(row *w, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(w->error, sizeof(w->error), fmt, ap);
        va_end(ap);
        w->state = ROW_REFUSED;
}

static ProtobufCMessage *unpack_bytea(const char *text, const ProtobufCMessageDescriptor *d)
{
        size_t len = 0;
        unsigned char *b = PQunescapeBytea((const unsigned char *)text, &len);
        ProtobufCMessage *m;

        if (b == NULL) {
                return NULL;
        }
        m = protobuf_c_message_unpack(d, NULL, len, b);
        PQfreemem(b);
        return m;
}

/* What postings.c packs: 1..BL_CHAIN_MAX transfers, linked but the last, and their accounts. */
static bool row_well_formed(const row *w, int64_t n_column)
{
        const transfers_req *t = w->transfers;

        if (t == NULL || w->accounts == NULL || t->n_transfers < 1 ||
            t->n_transfers > BL_CHAIN_MAX || (int64_t)t->n_transfers != n_column ||
            w->accounts->n_accounts < 1 || w->accounts->n_accounts > ACCOUNTS_ROW_MAX) {
                return false;
        }
        for (size_t i = 0; i < t->n_transfers; i++) {
                uint32_t want = i + 1 < t->n_transfers
                                    ? KEELSON__LEDGER__V1__TRANSFER_FLAG__TRANSFER_FLAG_LINKED
                                    : 0;
                if (t->transfers[i]->flags != want) {
                        return false;
                }
        }
        return true;
}

static void row_read(row *w, const PGresult *res, int i)
{
        memset(w, 0, sizeof(*w));
        w->id = strtoll(PQgetvalue(res, i, COL_ID), NULL, 10);
        if (PQgetisnull(res, i, COL_TENANT)) {
                w->state = ROW_GONE;
                return;
        }
        snprintf(w->tenant, sizeof(w->tenant), "%s", PQgetvalue(res, i, COL_TENANT));
        w->transfers = (transfers_req *)unpack_bytea(
            PQgetvalue(res, i, COL_TRANSFERS),
            &keelson__ledger__v1__create_transfers_request__descriptor);
        w->accounts =
            (accounts_req *)unpack_bytea(PQgetvalue(res, i, COL_ACCOUNTS),
                                         &keelson__ledger__v1__create_accounts_request__descriptor);
        w->state = ROW_OPEN;
        if (!row_well_formed(w, strtoll(PQgetvalue(res, i, COL_N), NULL, 10))) {
                refuse(w, "the posting's packed chain cannot be read");
        }
}

static void rows_free(bl_relay *r, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (r->rows[i].transfers != NULL) {
                        protobuf_c_message_free_unpacked(&r->rows[i].transfers->base, NULL);
                }
                if (r->rows[i].accounts != NULL) {
                        protobuf_c_message_free_unpacked(&r->rows[i].accounts->base, NULL);
                }
                r->rows[i].transfers = NULL;
                r->rows[i].accounts = NULL;
        }
}

/* By tenant, then id: a tenant's rows together, each tenant's in queue order. */
static int row_cmp(const void *a, const void *b)
{
        const row *x = a, *y = b;
        int c = strcmp(x->tenant, y->tenant);

        if (c != 0) {
                return c;
        }
        return x->id < y->id ? -1 : x->id > y->id;
}

/* ---- CreateAccounts ------------------------------------------------------------------ */

static int account_cmp(const void *a, const void *b)
{
        const account_pb *x = *(account_pb *const *)a, *y = *(account_pb *const *)b;
        ks_u128 u = ks_u128_of(x->id_hi, x->id), v = ks_u128_of(y->id_hi, y->id);

        return u < v ? -1 : u > v;
}

static const char *result_name(const ProtobufCEnumDescriptor *d, int v)
{
        const ProtobufCEnumValue *e = protobuf_c_enum_descriptor_get_value(d, v);

        return e != NULL ? e->name : "unknown_result";
}

/* The rows that touch account a are refused: the ledger would not find it. */
static void refuse_account(row *rows, size_t n, const account_pb *a, int result)
{
        const char *name =
            result_name(&keelson__ledger__v1__create_accounts_response__result__descriptor, result);

        for (size_t i = 0; i < n; i++) {
                for (size_t k = 0; rows[i].state == ROW_OPEN && k < rows[i].accounts->n_accounts;
                     k++) {
                        const account_pb *b = rows[i].accounts->accounts[k];
                        if (b->id == a->id && b->id_hi == a->id_hi) {
                                refuse(&rows[i], "account (code %u): %s", a->code, name);
                        }
                }
        }
}

/* The distinct accounts of the open rows, in r->accounts; their count. */
static size_t distinct_accounts(bl_relay *r, const row *rows, size_t n)
{
        size_t na = 0, nu = 0;

        for (size_t i = 0; i < n; i++) {
                for (size_t k = 0; rows[i].state == ROW_OPEN && k < rows[i].accounts->n_accounts;
                     k++) {
                        KS_ASSERT(na < r->batch_max * ACCOUNTS_ROW_MAX);
                        r->accounts[na++] = rows[i].accounts->accounts[k];
                }
        }
        qsort(r->accounts, na, sizeof(r->accounts[0]), account_cmp);
        for (size_t i = 0; i < na; i++) {
                if (nu == 0 || account_cmp(&r->accounts[nu - 1], &r->accounts[i]) != 0) {
                        r->accounts[nu++] = r->accounts[i];
                }
        }
        return nu;
}

static int create_accounts(bl_relay *r, row *rows, size_t n)
{
        size_t nu = distinct_accounts(r, rows, n);
        char request_id[40], msg[KS_MESSAGE_MAX];

        snprintf(request_id, sizeof(request_id), "relay-%lld", (long long)rows[0].id);
        for (size_t start = 0; start < nu; start += ITEMS_PER_CALL_MAX) {
                accounts_req req = KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
                accounts_resp *resp = NULL;
                req.accounts = r->accounts + start;
                req.n_accounts = nu - start < ITEMS_PER_CALL_MAX ? nu - start : ITEMS_PER_CALL_MAX;
                int rc = bl_ledger_call(r->svc, rows[0].tenant, request_id, "CreateAccounts", 0,
                                        &req.base,
                                        &keelson__ledger__v1__create_accounts_response__descriptor,
                                        (ProtobufCMessage **)&resp, msg);
                if (rc != KS_OK) {
                        set_error(r, "CreateAccounts: %s: %s", ks_code_name(rc), msg);
                        return rc;
                }
                if (resp->n_results != req.n_accounts) {
                        set_error(r, "CreateAccounts: %zu results for %zu accounts",
                                  resp->n_results, req.n_accounts);
                        protobuf_c_message_free_unpacked(&resp->base, NULL);
                        return KS_INTERNAL;
                }
                for (size_t k = 0; k < resp->n_results; k++) {
                        int res = (int)resp->results[k];
                        if (res != AR(ok) && res != AR(exists)) {
                                refuse_account(rows, n, req.accounts[k], res);
                        }
                }
                protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
        return KS_OK;
}

/* ---- CreateTransfers ------------------------------------------------------------------ */

/* Every result ok; or the first exists and the rest exists or linked_event_failed. */
static bool chain_in_ledger(const Keelson__Ledger__V1__CreateTransfersResponse__Result *res,
                            size_t n)
{
        bool all_ok = true;

        for (size_t j = 0; j < n; j++) {
                all_ok = all_ok && (int)res[j] == TR(ok);
        }
        if (all_ok) {
                return true;
        }
        if ((int)res[0] != TR(exists)) {
                return false;
        }
        for (size_t j = 1; j < n; j++) {
                if ((int)res[j] != TR(exists) && (int)res[j] != TR(linked_event_failed)) {
                        return false;
                }
        }
        return true;
}

static void judge_chain(row *w, const Keelson__Ledger__V1__CreateTransfersResponse__Result *res)
{
        size_t n = w->transfers->n_transfers, len = 0;

        if (chain_in_ledger(res, n)) {
                w->state = ROW_POSTED;
                return;
        }
        w->state = ROW_REFUSED;
        w->error[0] = '\0';
        for (size_t j = 0; j < n && len < sizeof(w->error); j++) {
                int k = snprintf(
                    w->error + len, sizeof(w->error) - len, "%s%s", j > 0 ? "," : "",
                    result_name(&keelson__ledger__v1__create_transfers_response__result__descriptor,
                                (int)res[j]));
                len += k > 0 ? (size_t)k : 0;
        }
}

/* One call: the open rows of [rows, rows + n), whose nt transfers are in r->transfers. */
static int send_transfers(bl_relay *r, row *rows, size_t n, size_t nt)
{
        transfers_req req = KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        transfers_resp *resp = NULL;
        char request_id[40], msg[KS_MESSAGE_MAX];
        size_t at = 0;
        int rc;

        req.transfers = r->transfers;
        req.n_transfers = nt;
        snprintf(request_id, sizeof(request_id), "relay-%lld", (long long)rows[0].id);
        rc = bl_ledger_call(r->svc, rows[0].tenant, request_id, "CreateTransfers", 0, &req.base,
                            &keelson__ledger__v1__create_transfers_response__descriptor,
                            (ProtobufCMessage **)&resp, msg);
        if (rc != KS_OK) {
                set_error(r, "CreateTransfers: %s: %s", ks_code_name(rc), msg);
                return rc;
        }
        if (resp->n_results != nt) {
                set_error(r, "CreateTransfers: %zu results for %zu transfers", resp->n_results, nt);
                protobuf_c_message_free_unpacked(&resp->base, NULL);
                return KS_INTERNAL;
        }
        for (size_t i = 0; i < n; i++) {
                if (rows[i].state == ROW_OPEN) {
                        judge_chain(&rows[i], resp->results + at);
                        at += rows[i].transfers->n_transfers;
                }
        }
        KS_ASSERT(at == nt); /* the same rows, in the same order, as packed */
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return KS_OK;
}

/* The tenant's open chains, whole, in calls of at most ITEMS_PER_CALL_MAX transfers. */
static int create_transfers(bl_relay *r, row *rows, size_t n)
{
        size_t i = 0;

        while (i < n) {
                size_t first = i, nt = 0;
                for (; i < n; i++) {
                        if (rows[i].state != ROW_OPEN) {
                                continue;
                        }
                        size_t k = rows[i].transfers->n_transfers;
                        if (nt + k > ITEMS_PER_CALL_MAX) {
                                break;
                        }
                        memcpy(r->transfers + nt, rows[i].transfers->transfers,
                               k * sizeof(r->transfers[0]));
                        nt += k;
                }
                if (nt == 0) {
                        continue; /* nothing open left (then i == n) */
                }
                int rc = send_transfers(r, rows + first, i - first, nt);
                if (rc != KS_OK) {
                        return rc;
                }
        }
        return KS_OK;
}

/* ---- marking ---------------------------------------------------------------------- */

/*
 * "{1,2}" of the rows in a state of the set (malloc'ed; STATE(ROW_POSTED) |
 * STATE(ROW_GONE)), and for REFUSED their errors as "{"a","b"}".
 */
#define STATE(s) (1u << (s))
static int id_arrays(const row *rows, size_t n, unsigned states, char **ids, char **errs,
                     size_t *count)
{
        size_t ids_cap = n * INT8_TEXT_MAX + 3, errs_cap = n * (2 * ROW_ERROR_MAX + 3) + 3;
        size_t il = 1, el = 1;

        *count = 0;
        *ids = malloc(ids_cap);
        if (errs != NULL) {
                *errs = malloc(errs_cap);
        }
        if (*ids == NULL || (errs != NULL && *errs == NULL)) {
                return KS_RESOURCE_EXHAUSTED;
        }
        (*ids)[0] = '{';
        if (errs != NULL) {
                (*errs)[0] = '{';
        }
        for (size_t i = 0; i < n; i++) {
                if (!(states & (1u << rows[i].state))) {
                        continue;
                }
                il += (size_t)snprintf(*ids + il, ids_cap - il, "%s%lld", *count > 0 ? "," : "",
                                       (long long)rows[i].id);
                if (errs != NULL) {
                        (*errs)[el++] = *count > 0 ? ',' : '"';
                        if (*count > 0) {
                                (*errs)[el++] = '"';
                        }
                        for (const char *p = rows[i].error; *p != '\0'; p++) {
                                if (*p == '"' || *p == '\\') {
                                        (*errs)[el++] = '\\';
                                }
                                (*errs)[el++] = *p;
                        }
                        (*errs)[el++] = '"';
                }
                (*count)++;
        }
        KS_ASSERT(il + 2 <= ids_cap && el + 2 <= errs_cap);
        memcpy(*ids + il, "}", 2);
        if (errs != NULL) {
                memcpy(*errs + el, "}", 2);
        }
        return KS_OK;
}

static PGresult *db_exec(bl_relay *r, PGconn *conn, const char *sql, int n,
                         const char *const *params)
{
        PGresult *res = NULL;
        const char *name = ks_pg_prepared(conn, sql, n, NULL, &res);

        if (name != NULL) {
                res = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
        } else if (res == NULL) {
                res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
        }
        ExecStatusType st = PQresultStatus(res);
        if (res != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)) {
                return res;
        }
        (void)ks_pg_prepared_failed(conn, res); /* a plan a migration changed: prepared again */
        const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        set_error(r, "%s: %s", ks_pg_sqlstate(res),
                  primary != NULL ? primary : PQerrorMessage(conn));
        PQclear(res);
        return NULL;
}

/* Reads back what the refusal made of each row: its attempts and whether it failed for good. */
static void read_refused(row *rows, size_t n, const PGresult *res)
{
        for (int k = 0; k < PQntuples(res); k++) {
                int64_t id = strtoll(PQgetvalue(res, k, 0), NULL, 10);
                for (size_t i = 0; i < n; i++) {
                        if (rows[i].id == id) {
                                rows[i].attempts = (int32_t)strtol(PQgetvalue(res, k, 1), NULL, 10);
                                rows[i].failed = PQgetvalue(res, k, 2)[0] == 't';
                        }
                }
        }
}

/*
 * Takes the posted rows and the gone ones off the queue, and marks the
 * refused ones refused; *n_posted.
 */
static bool mark_rows(bl_relay *r, PGconn *conn, row *rows, size_t n, size_t *n_posted)
{
        char *ids = NULL, *errs = NULL;
        size_t n_done = 0, n_refused = 0;
        ks_pg_num max = ks_pg_num_of(r->svc->cfg->relay_attempts_max);
        PGresult *res = NULL;
        bool ok = false;

        *n_posted = 0;
        for (size_t i = 0; i < n; i++) {
                *n_posted += rows[i].state == ROW_POSTED;
        }
        if (id_arrays(rows, n, STATE(ROW_POSTED) | STATE(ROW_GONE), &ids, NULL, &n_done) != KS_OK) {
                set_error(r, "out of memory");
                goto done;
        }
        if (n_done > 0 && (res = db_exec(r, conn, sql_posted, 1, (const char *[]){ids})) == NULL) {
                goto done;
        }
        PQclear(res);
        free(ids);
        ids = NULL;
        if (id_arrays(rows, n, STATE(ROW_REFUSED), &ids, &errs, &n_refused) != KS_OK) {
                set_error(r, "out of memory");
                goto done;
        }
        if (n_refused > 0) {
                const char *params[3] = {ids, errs, max.s};
                if ((res = db_exec(r, conn, sql_refused, 3, params)) == NULL) {
                        goto done;
                }
                read_refused(rows, n, res);
                PQclear(res);
        }
        ok = true;
done:
        free(ids);
        free(errs);
        return ok;
}

/* ---- a round -------------------------------------------------------------------------- */

/*
 * Claims up to batch_max rows from id `from` on into r->rows; *n, and *top
 * the highest id (0: none). The transaction stays open.
 */
static step claim(bl_relay *r, PGconn *conn, long long from, size_t *n, long long *top)
{
        ks_pg_num limit = ks_pg_num_of((int64_t)r->batch_max), start = ks_pg_num_of(from);
        PGresult *res = PQexec(conn, sql_open);
        ExecStatusType st = PQresultStatus(res);

        *n = 0;
        *top = 0;
        if (st != PGRES_COMMAND_OK) {
                set_error(r, "%s: %s", ks_pg_sqlstate(res), PQerrorMessage(conn));
                PQclear(res);
                return STEP_DB_FAILED;
        }
        PQclear(res);
        if ((res = db_exec(r, conn, sql_claim, 2, (const char *[]){limit.s, start.s})) == NULL) {
                return STEP_DB_FAILED;
        }
        KS_ASSERT((size_t)PQntuples(res) <= r->batch_max);
        for (int i = 0; i < PQntuples(res); i++) {
                row_read(&r->rows[(*n)++], res, i);
        }
        if (*n > 0) { /* ORDER BY q.id: the last is the highest (post_rows sorts by tenant) */
                *top = r->rows[*n - 1].id;
        }
        PQclear(res);
        return STEP_IDLE;
}

/* After COMMIT: what the round did, counted and logged. */
static void report(bl_relay *r, size_t n, size_t n_posted)
{
        ks_counter_add(r->posted_total, (uint64_t)n_posted);
        for (size_t i = 0; i < n; i++) {
                const row *w = &r->rows[i];
                if (w->state == ROW_GONE) {
                        ks_log_warn(NULL, "a queued billing posting is gone; taken off the queue",
                                    "{s:I}", "posting_id", (long long)w->id);
                }
                if (w->state != ROW_REFUSED) {
                        continue;
                }
                ks_counter_inc(r->refused_total);
                if (w->failed) {
                        ks_counter_inc(r->failed_total);
                }
                ks_log_error(NULL,
                             w->failed ? "ledger refused a billing posting; it is failed now"
                                       : "ledger refused a billing posting",
                             "{s:s, s:I, s:s, s:i, s:b}", "tenant_id", w->tenant, "posting_id",
                             (long long)w->id, "results", w->error, "attempts", (int)w->attempts,
                             "failed", w->failed);
        }
}

/* The claimed rows, tenant by tenant, then marked and committed. */
static step post_rows(bl_relay *r, PGconn *conn, size_t n)
{
        size_t n_posted = 0;
        PGresult *res;

        qsort(r->rows, n, sizeof(r->rows[0]), row_cmp);
        for (size_t a = 0, b; a < n; a = b) {
                for (b = a + 1; b < n && strcmp(r->rows[b].tenant, r->rows[a].tenant) == 0; b++) {
                }
                int rc = create_accounts(r, r->rows + a, b - a);
                if (rc == KS_OK) {
                        rc = create_transfers(r, r->rows + a, b - a);
                }
                if (rc != KS_OK) {
                        /* All of it again after the backoff: the ledger applies a chain once. */
                        return bl_ledger_transient(rc) ? STEP_LEDGER_DOWN : STEP_LEDGER_REFUSED;
                }
        }
        if (!mark_rows(r, conn, r->rows, n, &n_posted) ||
            (res = db_exec(r, conn, "COMMIT", 0, NULL)) == NULL) {
                return STEP_DB_FAILED;
        }
        bool committed = strcmp(PQcmdStatus(res), "COMMIT") == 0;
        PQclear(res);
        if (!committed) {
                set_error(r, "the transaction rolled back at commit");
                return STEP_DB_FAILED;
        }
        report(r, n, n_posted);
        /* Only progress earns an immediate next round: a batch of refusals would spin. */
        return n == r->batch_max && n_posted > 0 ? STEP_MORE : STEP_IDLE;
}

static step relay_round(bl_relay *r)
{
        PGconn *conn = NULL;
        size_t n = 0;
        int64_t now = ks_mono_ms();
        long long top = 0;
        bool full;
        step s;
        int rc;

        if ((rc = ks_pg_acquire(r->svc->pool, &conn)) != KS_OK) {
                set_error(r, "no database connection: %s", ks_code_name(rc));
                return STEP_DB_FAILED;
        }
        s = claim(r, conn, ks_claim_window_start(&r->claims, now, &full), &n, &top);
        if (s == STEP_IDLE && n > 0) {
                s = post_rows(r, conn, n);
        }
        if (s == STEP_IDLE || s == STEP_MORE) { /* committed, or nothing claimed */
                ks_claim_window_done(&r->claims, now, full, top);
        }
        ks_pg_rollback(conn); /* after COMMIT: nothing to undo */
        rows_free(r, n);
        ks_pg_release(r->svc->pool, conn);
        return s;
}

/* ---- the thread ----------------------------------------------------------------------- */

/* Waits ms, or less when stopped. Returns false once stopped. */
static bool rest(bl_relay *r, int64_t ms)
{
        struct timespec until = ks_deadline_timespec(ks_deadline_after_ms(ms));
        bool go_on;

        pthread_mutex_lock(&r->mu);
        while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT) {
        }
        go_on = !r->stop;
        pthread_mutex_unlock(&r->mu);
        return go_on;
}

static void *relay_main(void *arg)
{
        bl_relay *r = arg;

        r->backoff_ms = BACKOFF_MIN_MS;
        for (;;) {
                step s = relay_round(r);
                int64_t wait_ms = 0;
                if (s == STEP_MORE || s == STEP_IDLE) {
                        set_state(r, STATE_OK);
                        r->backoff_ms = BACKOFF_MIN_MS;
                        wait_ms = s == STEP_IDLE ? r->svc->cfg->relay_poll_ms : 0;
                } else {
                        ks_counter_inc(s == STEP_DB_FAILED ? r->errors_db : r->errors_ledger);
                        set_state(r, s == STEP_DB_FAILED     ? STATE_DB_FAILING
                                     : s == STEP_LEDGER_DOWN ? STATE_LEDGER_DOWN
                                                             : STATE_LEDGER_REFUSES);
                        wait_ms = r->backoff_ms;
                        r->backoff_ms = r->backoff_ms >= BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS
                                                                            : r->backoff_ms * 2;
                }
                if (!rest(r, wait_ms)) {
                        return NULL;
                }
        }
}

static void init_metrics(bl_relay *r)
{
        ks_metrics *m = ks_metrics_default();
        const char *errors_help = "Rounds of the ledger relay that failed, by what failed";

        r->posted_total = ks_counter_get(m, "keelson_billing_postings_posted_total",
                                         "Postings the ledger acknowledged (ok or exists)", NULL);
        r->failed_total =
            ks_counter_get(m, "keelson_billing_postings_failed_total",
                           "Postings marked failed after relay_attempts_max refusals", NULL);
        r->refused_total =
            ks_counter_get(m, "keelson_billing_postings_refused_total",
                           "Refusals of a posting by the ledger (each attempt)", NULL);
        r->errors_db = ks_counter_get(m, "keelson_billing_relay_errors_total", errors_help,
                                      "kind=\"postgres\"");
        r->errors_ledger =
            ks_counter_get(m, "keelson_billing_relay_errors_total", errors_help, "kind=\"ledger\"");
}

static void relay_free(bl_relay *r)
{
        free(r->rows);
        free(r->transfers);
        free(r->accounts);
        free(r);
}

int bl_relay_start(bl_relay **out, bl_service *svc)
{
        const bl_config *c = svc->cfg;
        bl_relay *r = calloc(1, sizeof(*r));

        *out = NULL;
        KS_ASSERT(c->relay_batch_max >= 1 && c->relay_poll_ms >= 1 && c->relay_attempts_max >= 1);
        if (r == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        r->svc = svc;
        r->batch_max = (size_t)c->relay_batch_max;
        r->state = STATE_STARTING;
        r->rows = calloc(r->batch_max, sizeof(r->rows[0]));
        r->transfers = calloc(ITEMS_PER_CALL_MAX, sizeof(r->transfers[0]));
        r->accounts = calloc(r->batch_max * ACCOUNTS_ROW_MAX, sizeof(r->accounts[0]));
        if (r->rows == NULL || r->transfers == NULL || r->accounts == NULL) {
                relay_free(r);
                return KS_RESOURCE_EXHAUSTED;
        }
        init_metrics(r);
        if (pthread_mutex_init(&r->mu, NULL) != 0) {
                relay_free(r);
                return KS_INTERNAL;
        }
        if (ks_cond_init_monotonic(&r->cv) != 0) {
                pthread_mutex_destroy(&r->mu);
                relay_free(r);
                return KS_INTERNAL;
        }
        if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
                pthread_cond_destroy(&r->cv);
                pthread_mutex_destroy(&r->mu);
                relay_free(r);
                return KS_INTERNAL;
        }
        *out = r;
        return KS_OK;
}

void bl_relay_stop(bl_relay *r)
{
        if (r == NULL) {
                return;
        }
        pthread_mutex_lock(&r->mu);
        r->stop = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        relay_free(r);
}
