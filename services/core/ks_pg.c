/*
 * ks_pg: the PostgreSQL connection pool, statement helpers with SQLSTATE ->
 * ks_code mapping, and the migration runner.
 *
 * Pool: a fixed array of slots guarded by one mutex and a condition variable
 * on CLOCK_MONOTONIC (a wall-clock jump must not shorten or stretch an
 * acquire timeout). A slot is marked in use under the lock; connecting,
 * resetting and rolling back happen outside it, by the slot's owner only, so
 * one slow reconnect never blocks the other callers.
 */
#include "ks_pg.h"

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_log.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_SIZE_MAX            256
#define ACQUIRE_TIMEOUT_MS_MAX   (10 * 60 * 1000)
#define STATEMENT_TIMEOUT_MS_MAX (24 * 60 * 60 * 1000)
/* A dead host must not hang an acquire forever; the dsn may override it. */
#define CONNECT_TIMEOUT_S "5"
/* PostgreSQL truncates identifiers and application_name at 63 bytes. */
#define IDENT_MAX          63
#define MIGRATION_NAME_MAX 255
#define MIGRATIONS_MAX     10000
#define SQL_MAX            512

typedef struct slot {
        PGconn *conn;     /* written under the pool lock; NULL until first use */
        bool in_use;      /* written under the pool lock */
        bool needs_reset; /* owner only */
} slot;

struct ks_pg_pool {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        char *dsn;
        char *application_name;
        int size;
        int acquire_timeout_ms;
        int statement_timeout_ms;
        slot *slots;
};

static const char *nz(const char *s)
{
        return s != NULL ? s : "";
}

/*
 * libpq's default notice processor prints raw text on stderr, which would
 * break the one-JSON-object-per-line log. Only the primary message is kept:
 * DETAIL lines can echo row values.
 */
static void on_notice(void *arg, const PGresult *res)
{
        (void)arg;
        const char *sev = nz(PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED));
        ks_log_level level = strcmp(sev, "NOTICE") == 0 || strcmp(sev, "DEBUG") == 0 ||
                                     strcmp(sev, "LOG") == 0 || strcmp(sev, "INFO") == 0
                                 ? KS_LOG_DEBUG
                                 : KS_LOG_WARN;
        ks_log(level, NULL, "postgres notice", "{s:s,s:s,s:s}", "severity", sev, "sqlstate",
               nz(PQresultErrorField(res, PG_DIAG_SQLSTATE)), "pg_message",
               nz(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)));
}

/*
 * expand_dbname=1 lets dsn be a URI or a key=value string. Keywords are
 * applied in order, the last one winning: connect_timeout is a default the
 * dsn may override, application_name is ours whatever the dsn says.
 */
static PGconn *connect_db(const char *dsn, const char *application_name)
{
        const char *const keys[] = {"connect_timeout", "dbname", "application_name", NULL};
        const char *const vals[] = {CONNECT_TIMEOUT_S, dsn, application_name, NULL};
        PGconn *conn = PQconnectdbParams(keys, vals, 1);
        if (conn != NULL) {
                PQsetNoticeReceiver(conn, on_notice, NULL);
                if (ks_pg_prepared_attach(conn) != 0) {
                        ks_log_warn(NULL, "postgres statements will run unprepared", NULL);
                }
        }
        return conn;
}

static char *first_line(const char *msg, char *out, size_t out_len)
{
        snprintf(out, out_len, "%s", nz(msg));
        out[strcspn(out, "\n")] = '\0';
        return out;
}

/* ---- pool ----------------------------------------------------------------- */

static int check_options(const ks_pg_pool_options *o)
{
        if (o == NULL || o->dsn == NULL || o->size < 1 || o->size > POOL_SIZE_MAX ||
            o->acquire_timeout_ms < 0 || o->acquire_timeout_ms > ACQUIRE_TIMEOUT_MS_MAX ||
            o->statement_timeout_ms < 0 || o->statement_timeout_ms > STATEMENT_TIMEOUT_MS_MAX ||
            (o->application_name != NULL && strlen(o->application_name) > IDENT_MAX)) {
                return KS_INVALID_ARGUMENT;
        }
        return KS_OK;
}

static int sync_init(ks_pg_pool *p)
{
        if (ks_cond_init_monotonic(&p->cv) != 0) {
                return -1;
        }
        if (pthread_mutex_init(&p->mu, NULL) != 0) {
                pthread_cond_destroy(&p->cv);
                return -1;
        }
        return 0;
}

int ks_pg_pool_new(ks_pg_pool **out, const ks_pg_pool_options *opts)
{
        if (out == NULL || check_options(opts) != KS_OK) {
                return KS_INVALID_ARGUMENT;
        }
        ks_pg_pool *p = calloc(1, sizeof(*p));
        if (p == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        p->dsn = strdup(opts->dsn);
        p->application_name =
            strdup(opts->application_name != NULL ? opts->application_name : "keelson");
        p->slots = calloc((size_t)opts->size, sizeof(*p->slots));
        if (p->dsn == NULL || p->application_name == NULL || p->slots == NULL ||
            sync_init(p) != 0) {
                free(p->slots);
                free(p->application_name);
                free(p->dsn);
                free(p);
                return KS_RESOURCE_EXHAUSTED;
        }
        p->size = opts->size;
        p->acquire_timeout_ms = opts->acquire_timeout_ms;
        p->statement_timeout_ms = opts->statement_timeout_ms;
        *out = p;
        return KS_OK;
}

void ks_pg_pool_free(ks_pg_pool *pool)
{
        if (pool == NULL) {
                return;
        }
        for (int i = 0; i < pool->size; i++) {
                if (pool->slots[i].in_use) {
                        ks_log_error(NULL, "postgres pool freed with a connection in use", NULL);
                }
                if (pool->slots[i].conn != NULL) {
                        PQfinish(pool->slots[i].conn);
                }
        }
        pthread_cond_destroy(&pool->cv);
        pthread_mutex_destroy(&pool->mu);
        free(pool->slots);
        free(pool->application_name);
        free(pool->dsn);
        free(pool);
}

/* ks_pg_spare_idle_check: this thread's acquisitions skip idle_socket_readable. */
static __thread bool spare_check;

void ks_pg_spare_idle_check(bool on)
{
        spare_check = on;
}

/*
 * An idle connection has nothing to say: a readable socket means the server
 * sent something unasked (in practice a FATAL before closing, as when the
 * backend is terminated) or hung up. Either way the connection is not worth
 * handing out, and polling costs no round trip.
 */
static bool idle_socket_readable(const PGconn *conn)
{
        struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
        if (pfd.fd < 0) {
                return true;
        }
        return poll(&pfd, 1, 0) != 0;
}

/*
 * Session settings, applied after every connect or reset of a pool's
 * connection, in one round trip, unprepared (it runs once per session), and
 * by the outbox relays to their own connections (ks_pg.h).
 *
 * JIT compilation is off: our statements are short OLTP work whose cost
 * estimates still cross jit_above_cost when a batch carries thousands of
 * ids, and compiling them cost more than running them (10 to 20 ms of a
 * ledger batch of 8,190 transfers).
 *
 * Generic plans from the first execution (plan_cache_mode): every statement
 * is prepared (ks_pg_prepared.c) and written so that one plan fits every
 * parameter value, each row found by its key. A custom plan is made again at
 * every execution (0.15 ms each for the ledger's reads, as much as running
 * them), and it depends on what the statistics know of the tenant in the
 * parameters: for a tenant they did not know yet, the planner read all of
 * its accounts to update two of them (rows estimated 1, 10,000 read).
 *
 * A SET rather than a startup option, so that it holds whatever options the
 * dsn carries (a pool's runtime role is one: ks_pg_login.h).
 */
void ks_pg_session_sql(char out[KS_PG_SESSION_SQL_MAX], int statement_timeout_ms)
{
        int n = snprintf(out, KS_PG_SESSION_SQL_MAX,
                         "SELECT set_config('jit', 'off', false),"
                         " set_config('plan_cache_mode', 'force_generic_plan', false)");

        if (statement_timeout_ms != 0) {
                snprintf(out + n, KS_PG_SESSION_SQL_MAX - (size_t)n,
                         ", set_config('statement_timeout', '%d', false)", statement_timeout_ms);
        }
}

static int conn_setup(const ks_pg_pool *pool, PGconn *conn)
{
        char sql[KS_PG_SESSION_SQL_MAX];

        ks_pg_session_sql(sql, pool->statement_timeout_ms);
        PGresult *res = PQexec(conn, sql);
        bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
        if (!ok) {
                char msg[256];
                ks_log_warn(NULL, "postgres session settings failed", "{s:s}", "pg_message",
                            first_line(PQerrorMessage(conn), msg, sizeof(msg)));
        }
        PQclear(res);
        return ok ? KS_OK : KS_UNAVAILABLE;
}

static void slot_set_conn(ks_pg_pool *pool, slot *s, PGconn *conn)
{
        pthread_mutex_lock(&pool->mu);
        s->conn = conn;
        pthread_mutex_unlock(&pool->mu);
}

/* Connects or repairs the slot's connection; called by its owner, unlocked. */
static int slot_ready(ks_pg_pool *pool, slot *s)
{
        bool fresh = false;
        if (s->conn == NULL) {
                slot_set_conn(pool, s, connect_db(pool->dsn, pool->application_name));
                fresh = true;
        } else if (s->needs_reset || PQstatus(s->conn) != CONNECTION_OK ||
                   PQtransactionStatus(s->conn) != PQTRANS_IDLE ||
                   (!spare_check && idle_socket_readable(s->conn))) {
                PQreset(s->conn);
                fresh = true;
        }
        if (s->conn == NULL || PQstatus(s->conn) != CONNECTION_OK) {
                char msg[256];
                ks_log_warn(NULL, "postgres unreachable", "{s:s}", "pg_message",
                            first_line(s->conn != NULL ? PQerrorMessage(s->conn) : "out of memory",
                                       msg, sizeof(msg)));
                s->needs_reset = true;
                return KS_UNAVAILABLE;
        }
        if (fresh && conn_setup(pool, s->conn) != KS_OK) {
                s->needs_reset = true;
                return KS_UNAVAILABLE;
        }
        s->needs_reset = false;
        return KS_OK;
}

/* A free slot, preferring one already connected; called locked. */
static slot *free_slot(ks_pg_pool *pool)
{
        slot *unconnected = NULL;
        for (int i = 0; i < pool->size; i++) {
                slot *s = &pool->slots[i];
                if (!s->in_use && s->conn != NULL) {
                        return s;
                }
                if (!s->in_use && unconnected == NULL) {
                        unconnected = s;
                }
        }
        return unconnected;
}

static void slot_give_back(ks_pg_pool *pool, slot *s)
{
        pthread_mutex_lock(&pool->mu);
        KS_ASSERT(s->in_use); /* given back twice: two owners thought they held it */
        s->in_use = false;
        pthread_cond_signal(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
}

bool ks_pg_pool_has_free(ks_pg_pool *pool)
{
        pthread_mutex_lock(&pool->mu);
        bool any = free_slot(pool) != NULL;
        pthread_mutex_unlock(&pool->mu);
        return any;
}

int ks_pg_acquire(ks_pg_pool *pool, PGconn **out)
{
        slot *s;

        if (out == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        *out = NULL;
        if (pool == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        struct timespec deadline =
            ks_deadline_timespec(ks_deadline_after_ms(pool->acquire_timeout_ms));
        pthread_mutex_lock(&pool->mu);
        while ((s = free_slot(pool)) == NULL) {
                int rv = pthread_cond_timedwait(&pool->cv, &pool->mu, &deadline);
                if (rv == ETIMEDOUT && (s = free_slot(pool)) == NULL) {
                        pthread_mutex_unlock(&pool->mu);
                        ks_log_warn(NULL, "postgres pool exhausted", "{s:i,s:i}", "size",
                                    pool->size, "timeout_ms", pool->acquire_timeout_ms);
                        return KS_UNAVAILABLE;
                }
        }
        KS_ASSERT(!s->in_use);
        s->in_use = true;
        pthread_mutex_unlock(&pool->mu);

        int rv = slot_ready(pool, s);
        if (rv != KS_OK) {
                slot_give_back(pool, s);
                return rv;
        }
        KS_ASSERT(s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK); /* what ready means */
        *out = s->conn;
        return KS_OK;
}

static slot *slot_of_conn(ks_pg_pool *pool, const PGconn *conn)
{
        slot *found = NULL;
        pthread_mutex_lock(&pool->mu);
        for (int i = 0; i < pool->size && found == NULL; i++) {
                if (pool->slots[i].conn == conn && pool->slots[i].in_use) {
                        found = &pool->slots[i];
                }
        }
        pthread_mutex_unlock(&pool->mu);
        return found;
}

void ks_pg_release(ks_pg_pool *pool, PGconn *conn)
{
        if (pool == NULL || conn == NULL) {
                return;
        }
        slot *s = slot_of_conn(pool, conn);
        if (s == NULL) {
                ks_log_error(NULL, "postgres connection released to a pool it is not from", NULL);
                return;
        }
        /* Still the owner: put the connection back the way acquire promises it. */
        PGTransactionStatusType ts = PQtransactionStatus(conn);
        if (PQstatus(conn) != CONNECTION_OK || ts == PQTRANS_ACTIVE || ts == PQTRANS_UNKNOWN) {
                s->needs_reset = true;
        } else if (ts != PQTRANS_IDLE) {
                ks_pg_rollback(conn);
                s->needs_reset = PQtransactionStatus(conn) != PQTRANS_IDLE;
        }
        slot_give_back(pool, s);
}

int ks_pg_ping(ks_pg_pool *pool)
{
        PGconn *conn = NULL;
        if (ks_pg_acquire(pool, &conn) != KS_OK) {
                return -1;
        }
        int rv = ks_pg_exec(conn, NULL, "SELECT 1", 0, NULL, NULL);
        ks_pg_release(pool, conn);
        return rv == KS_OK ? 0 : -1;
}

/* ---- statements ------------------------------------------------------------ */

/* libpq's value of a NULL in a text result is "" (never a null pointer). */
const char *ks_pg_text(const PGresult *res, int row, int col)
{
        return PQgetvalue(res, row, col);
}

/*
 * An integer column as the server writes it, -?[0-9]+, read by hand while it
 * has at most 18 digits (no overflow possible); anything else as strtoll
 * reads it (a NULL's "" is 0). A page of fifty customers reads two hundred.
 */
int64_t ks_pg_int(const PGresult *res, int row, int col)
{
        const char *s = PQgetvalue(res, row, col);
        const char *d = s + (s[0] == '-');
        uint64_t v = 0;
        int n = 0;

        while (n <= 18 && d[n] >= '0' && d[n] <= '9') {
                v = v * 10 + (uint64_t)(d[n] - '0');
                n++;
        }
        if (n == 0 || n > 18 || d[n] != '\0') {
                return strtoll(s, NULL, 10);
        }
        return s[0] == '-' ? -(int64_t)v : (int64_t)v;
}

bool ks_pg_bool(const PGresult *res, int row, int col)
{
        return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

ks_pg_num ks_pg_num_of(int64_t v)
{
        ks_pg_num n;

        snprintf(n.s, sizeof(n.s), "%lld", (long long)v);
        return n;
}

const char *ks_pg_sqlstate(const PGresult *res)
{
        return res != NULL ? nz(PQresultErrorField(res, PG_DIAG_SQLSTATE)) : "";
}

char *ks_pg_bytea_text(const uint8_t *data, size_t n)
{
        char *out = malloc(2 + 2 * n + 1);

        if (out == NULL) {
                return NULL;
        }
        out[0] = '\\';
        out[1] = 'x';
        ks_hex_encode(data, n, out + 2);
        return out;
}

long ks_pg_bytea_decode(const char *text, uint8_t *out, size_t out_len)
{
        size_t n;

        if (text == NULL || text[0] != '\\' || text[1] != 'x') {
                return -1;
        }
        text += 2;
        n = strlen(text);
        if (n % 2 != 0 || n / 2 > out_len) {
                return -1;
        }
        for (size_t i = 0; i < n / 2; i++) {
                int hi = ks_hex_digit(text[2 * i]), lo = ks_hex_digit(text[2 * i + 1]);

                if (hi < 0 || lo < 0) {
                        return -1;
                }
                out[i] = (uint8_t)(hi << 4 | lo);
        }
        return (long)(n / 2);
}

/*
 * Class 08 is connection exception; 57P01..57P03 are the server shutting
 * down or refusing connections: to the caller all of them mean "try again".
 */
static int code_of(const PGconn *conn, const PGresult *res)
{
        const char *st = ks_pg_sqlstate(res);
        if (PQstatus(conn) != CONNECTION_OK || strncmp(st, "08", 2) == 0 ||
            strcmp(st, "57P01") == 0 || strcmp(st, "57P02") == 0 || strcmp(st, "57P03") == 0) {
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

int ks_pg_exec(PGconn *conn, const char *request_id, const char *sql, int n_params,
               const char *const *params, PGresult **out)
{
        if (out != NULL) {
                *out = NULL;
        }
        if (conn == NULL || sql == NULL || n_params < 0 || (n_params > 0 && params == NULL)) {
                return KS_INVALID_ARGUMENT;
        }
        PGresult *res = NULL;
        const char *name = ks_pg_prepared(conn, sql, n_params, NULL, &res);
        if (name != NULL) {
                res = PQexecPrepared(conn, name, n_params, params, NULL, NULL, 0);
        } else if (res == NULL) {
                res = PQexecParams(conn, sql, n_params, NULL, params, NULL, NULL, 0);
        }
        ExecStatusType st = PQresultStatus(res);
        if (res != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)) {
                if (out != NULL) {
                        *out = res;
                } else {
                        PQclear(res);
                }
                return KS_OK;
        }
        int code = ks_pg_failure(conn, request_id, res);
        PQclear(res);
        return code;
}

int ks_pg_failure(const PGconn *conn, const char *request_id, const PGresult *res)
{
        return ks_pg_failure_expected(conn, request_id, res, NULL);
}

int ks_pg_failure_expected(const PGconn *conn, const char *request_id, const PGresult *res,
                           const char *expected_sqlstate)
{
        int code = ks_pg_prepared_failed(conn, res) ? KS_ABORTED : code_of(conn, res);
        bool expected =
            expected_sqlstate != NULL && strcmp(ks_pg_sqlstate(res), expected_sqlstate) == 0;
        char msg[512];
        /* The primary message only: DETAIL repeats key values, and parameters never appear. */
        const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        ks_log(expected ? KS_LOG_DEBUG : KS_LOG_ERROR, request_id, "postgres statement failed",
               "{s:s,s:s,s:s}", "sqlstate", ks_pg_sqlstate(res), "code", ks_code_name(code),
               "pg_message",
               first_line(primary != NULL ? primary : PQerrorMessage(conn), msg, sizeof(msg)));
        return code;
}

int ks_pg_begin(PGconn *conn, const char *request_id)
{
        return ks_pg_exec(conn, request_id, "BEGIN", 0, NULL, NULL);
}

int ks_pg_commit(PGconn *conn, const char *request_id)
{
        PGresult *res = NULL;
        int rv = ks_pg_exec(conn, request_id, "COMMIT", 0, NULL, &res);
        if (rv != KS_OK) {
                return rv;
        }
        /* COMMIT of a failed transaction "succeeds" with the tag ROLLBACK. */
        bool rolled_back = strcmp(PQcmdStatus(res), "ROLLBACK") == 0;
        PQclear(res);
        if (rolled_back) {
                ks_log_error(request_id, "postgres transaction rolled back at commit", NULL);
                return KS_ABORTED;
        }
        return KS_OK;
}

void ks_pg_rollback(PGconn *conn)
{
        if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
                return;
        }
        PGTransactionStatusType ts = PQtransactionStatus(conn);
        if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
                PQclear(PQexec(conn, "ROLLBACK"));
        }
}

/* ---- migrations ------------------------------------------------------------ */

typedef struct migrator {
        PGconn *conn;
        const char *schema;
        char *quoted; /* PQescapeIdentifier's, PQfreemem'd */
        char *err;
        size_t err_len;
} migrator;

static bool valid_schema(const char *s)
{
        size_t len = s != NULL ? strlen(s) : 0;
        if (len == 0 || len > IDENT_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) {
                return false;
        }
        for (size_t i = 1; i < len; i++) {
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '_')) {
                        return false;
                }
        }
        return true;
}

static int fail(migrator *mg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes the error for the caller; returns -1 so a failing path can return it. */
static int fail(migrator *mg, const char *fmt, ...)
{
        if (mg->err != NULL && mg->err_len > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(mg->err, mg->err_len, fmt, ap);
                va_end(ap);
        }
        return -1;
}

/* Runs a statement expecting success; on failure fills err with what and the primary message. */
static int mg_exec(migrator *mg, const char *what, const char *sql, int n, const char *const *p,
                   PGresult **out)
{
        PGresult *res =
            n > 0 ? PQexecParams(mg->conn, sql, n, NULL, p, NULL, NULL, 0) : PQexec(mg->conn, sql);
        ExecStatusType st = PQresultStatus(res);
        if (res != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)) {
                if (out != NULL) {
                        *out = res;
                } else {
                        PQclear(res);
                }
                return 0;
        }
        const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        char msg[512];
        first_line(primary != NULL ? primary : PQerrorMessage(mg->conn), msg, sizeof(msg));
        PQclear(res);
        return fail(mg, "%s: %s", what, msg);
}

static int mg_exec_schema(migrator *mg, const char *what, const char *fmt)
{
        char sql[SQL_MAX];
        snprintf(sql, sizeof(sql), fmt, mg->quoted);
        return mg_exec(mg, what, sql, 0, NULL, NULL);
}

/* Looks the file up: 1 recorded (hash in recorded), 0 not recorded, -1 error. */
static int mg_recorded(migrator *mg, const char *name, char *recorded, size_t recorded_len)
{
        char sql[SQL_MAX];
        PGresult *res = NULL;
        const char *params[] = {name};
        snprintf(sql, sizeof(sql), "SELECT sha256 FROM %s.schema_migrations WHERE name = $1",
                 mg->quoted);
        if (mg_exec(mg, "reading schema_migrations", sql, 1, params, &res) != 0) {
                return -1;
        }
        int found = PQntuples(res) > 0;
        if (found) {
                snprintf(recorded, recorded_len, "%s", PQgetvalue(res, 0, 0));
        }
        PQclear(res);
        return found;
}

/*
 * One file and its record in one transaction, so a failing file leaves
 * neither objects nor a record. search_path is set for the transaction only,
 * so unqualified names in a file land in the service's own schema. A file
 * must not COMMIT itself: that would end the transaction early.
 */
static int mg_apply(migrator *mg, const ks_migration *m, const char *sha)
{
        char sql[SQL_MAX];
        char what[MIGRATION_NAME_MAX + 32];
        const char *params[] = {m->name, sha};

        snprintf(what, sizeof(what), "migration %s failed", m->name);
        if (mg_exec(mg, "BEGIN", "BEGIN", 0, NULL, NULL) != 0 ||
            mg_exec_schema(mg, "setting search_path", "SET LOCAL search_path TO %s, public") != 0 ||
            mg_exec(mg, what, m->sql, 0, NULL, NULL) != 0) {
                ks_pg_rollback(mg->conn);
                return -1;
        }
        snprintf(sql, sizeof(sql),
                 "INSERT INTO %s.schema_migrations (name, sha256) VALUES ($1, $2)", mg->quoted);
        PGresult *res = NULL;
        if (mg_exec(mg, "recording the migration", sql, 2, params, NULL) != 0 ||
            mg_exec(mg, what, "COMMIT", 0, NULL, &res) != 0) {
                ks_pg_rollback(mg->conn);
                return -1;
        }
        bool rolled_back = strcmp(PQcmdStatus(res), "ROLLBACK") == 0;
        PQclear(res);
        if (rolled_back) {
                return fail(mg, "migration %s failed: %s", m->name, "rolled back at commit");
        }
        ks_log_info(NULL, "migration applied", "{s:s,s:s}", "schema", mg->schema, "migration",
                    m->name);
        return 0;
}

static int mg_run(migrator *mg, const ks_migration *migrations, size_t n)
{
        if (mg_exec_schema(mg, "creating the schema", "CREATE SCHEMA IF NOT EXISTS %s") != 0 ||
            mg_exec_schema(mg, "creating schema_migrations",
                           "CREATE TABLE IF NOT EXISTS %s.schema_migrations ("
                           "name text PRIMARY KEY, sha256 text NOT NULL, "
                           "applied_at timestamptz NOT NULL DEFAULT now())") != 0) {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                const ks_migration *m = &migrations[i];
                char sha[2 * KS_SHA256_BYTES + 1];
                char recorded[2 * KS_SHA256_BYTES + 1];
                ks_sha256_hex(m->sql, strlen(m->sql), sha);
                int found = mg_recorded(mg, m->name, recorded, sizeof(recorded));
                if (found < 0) {
                        return -1;
                }
                if (found && strcmp(recorded, sha) != 0) {
                        return fail(mg, "migration %s was changed after it was applied", m->name);
                }
                if (!found && mg_apply(mg, m, sha) != 0) {
                        return -1;
                }
        }
        return 0;
}

static int check_migrations(migrator *mg, const ks_migration *migrations, size_t n)
{
        if (n > MIGRATIONS_MAX || (n > 0 && migrations == NULL)) {
                return fail(mg, "too many migrations (%zu, at most %d)", n, MIGRATIONS_MAX);
        }
        for (size_t i = 0; i < n; i++) {
                const char *name = migrations[i].name;
                if (name == NULL || name[0] == '\0' || strlen(name) > MIGRATION_NAME_MAX ||
                    migrations[i].sql == NULL) {
                        return fail(mg, "migration %zu has no name, a too long name or no SQL", i);
                }
        }
        return 0;
}

/* Connects, quotes the schema and takes the advisory lock. */
static int mg_open(migrator *mg, const char *dsn)
{
        char msg[512];
        const char *params[] = {mg->schema};

        mg->conn = connect_db(dsn, "keelson-migrate");
        if (mg->conn == NULL || PQstatus(mg->conn) != CONNECTION_OK) {
                return fail(
                    mg, "cannot connect to postgres: %s",
                    first_line(mg->conn != NULL ? PQerrorMessage(mg->conn) : "out of memory", msg,
                               sizeof(msg)));
        }
        mg->quoted = PQescapeIdentifier(mg->conn, mg->schema, strlen(mg->schema));
        if (mg->quoted == NULL) {
                return fail(mg, "cannot quote the schema name");
        }
        /* Session lock: waits while another replica migrates the same schema. */
        return mg_exec(mg, "taking the migration lock",
                       "SELECT pg_advisory_lock(hashtext('keelson.migrate.' || $1))", 1, params,
                       NULL);
}

int ks_pg_migrate(const char *dsn, const char *schema, const ks_migration *migrations, size_t n,
                  char *err, size_t err_len)
{
        migrator mg = {.schema = schema, .err = err, .err_len = err_len};
        if (err != NULL && err_len > 0) {
                err[0] = '\0';
        }
        if (dsn == NULL || !valid_schema(schema)) {
                return fail(&mg, "schema name must match [a-z_][a-z0-9_]* (63 bytes at most)");
        }
        if (check_migrations(&mg, migrations, n) != 0) {
                return -1;
        }
        int rv = mg_open(&mg, dsn);
        bool locked = rv == 0;
        if (rv == 0) {
                rv = mg_run(&mg, migrations, n);
        }
        if (locked) {
                /* A failed transaction was rolled back, so the unlock can run. */
                const char *params[] = {schema};
                PQclear(PQexecParams(
                    mg.conn, "SELECT pg_advisory_unlock(hashtext('keelson.migrate.' || $1))", 1,
                    NULL, params, NULL, NULL, 0));
        }
        if (mg.quoted != NULL) {
                PQfreemem(mg.quoted);
        }
        /* Closing the session also drops the lock if the unlock could not run. */
        PQfinish(mg.conn);
        return rv;
}
