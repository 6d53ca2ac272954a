/*
 * ks_outbox: the transactional outbox and its relay (see ks_outbox.h).
 *
 * One connection per relay serves both LISTEN and the claim transactions.
 * PostgreSQL delivers notifications to a session only between its
 * transactions, and libpq queues those that arrive while a statement runs, so
 * the loop drains PQnotifies before it sleeps in poll() on the socket and no
 * wake-up is lost. A second connection would double what every replica of
 * every service holds against max_connections and add a second state to lose
 * and rebuild, for no gain: the relay does one thing at a time anyway.
 *
 * There is deliberately no "last published id" cursor: ids are taken at
 * insert, not at commit, so a transaction that commits after a later one
 * would be skipped for ever. Every claim looks for rows not yet published:
 * the ids in <schema>.outbox_queue, put there by the outbox's trigger in
 * the events' transaction. Publishing deletes an id from the queue, which
 * writes no new version of the event's row and no index entry; marking the
 * row itself (a published_at leaving a partial index) cost 2.5 times as
 * much per batch (docs/performance.md, "The outbox's queue").
 *
 * A claim starts a little below the highest id it claimed before, not at
 * the queue's first id (ks_claim_window, ks_outbox.h): the ids published
 * and deleted stay in the queue's index as dead entries until VACUUM
 * (autovacuum looks once a minute), and a claim from the first id walked
 * them all (13 ms to the first of 100 rows under bench_billing).
 *
 * The queue is read by its key only: the relay's connection runs with
 * enable_seqscan off (relay_connect). Its statements are prepared with
 * generic plans (ks_pg.c), made at their first run and again after each
 * ANALYZE of the queue, which a working relay keeps nearly empty: the
 * planner then scans and sorts the table rather than read its index. After
 * an outage (no broker, a stopped relay) the backlog was scanned and sorted
 * at every claim, and every mark compared each queued id with the batch's
 * ids, until the next ANALYZE: a drain quadratic in the backlog. With the
 * index, a claim and a mark cost their own rows (docs/performance.md,
 * "Outbox relays: a backlog after an outage").
 *
 * Failures are states, logged when entered, not at every retry: the database
 * cannot be reached, statements fail on a live connection, or the publisher
 * refuses. Each is retried after a backoff (100 ms doubling to 5 s) that an
 * error-free step resets.
 */
#include "ks_outbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_metrics.h"

#define SCHEMA_MAX           63 /* PostgreSQL truncates identifiers at 63 bytes */
#define TOPIC_MAX            128
#define UUID_LEN             36
#define BATCH_MAX            1000
#define POLL_MS_MIN          10
#define POLL_MS_MAX          (60 * 60 * 1000)
#define RETENTION_S_MAX      (10 * 366 * 24 * 3600)
#define BACKOFF_MIN_MS       100
#define BACKOFF_MAX_MS       5000
#define CONNECT_TIMEOUT_MS   5000
#define STATEMENT_TIMEOUT_MS 30000
#define RETENTION_EVERY_MS   60000
#define RETENTION_ROWS       1000                 /* per DELETE: a short transaction, short locks */
#define RETENTION_WINDOW     (2 * RETENTION_ROWS) /* the oldest events a DELETE looks at */
#define BACKLOG_EVERY_MS     1000
#define BACKLOG_COUNT_MAX    100000 /* the gauge saturates here: counting stays cheap */
#define ID_DIGITS_MAX        20     /* a bigint in text, and a comma */
#define SQL_MAX              1024
#define ERROR_MAX            256

/* ---- validation ------------------------------------------------------------ */

static bool valid_schema(const char *s)
{
        size_t len = s != NULL ? strlen(s) : 0;
        if (len == 0 || len > SCHEMA_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) {
                return false;
        }
        for (size_t i = 1; i < len; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
                        return false;
                }
        }
        return true;
}

static bool valid_topic(const char *t)
{
        size_t len = t != NULL ? strlen(t) : 0;
        if (len == 0 || len > TOPIC_MAX) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                char c = t[i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                      c == '-')) {
                        return false;
                }
        }
        return true;
}

/* ---- ks_outbox_add ----------------------------------------------------------- */

int ks_outbox_event_make(ks_outbox_event *ev, const char *schema, const char *topic,
                         const char *tenant_id, const uint8_t *payload, size_t payload_len)
{
        memset(ev, 0, sizeof(*ev));
        if (tenant_id != NULL && tenant_id[0] == '\0') {
                tenant_id = NULL;
        }
        if (!valid_schema(schema) || !valid_topic(topic) ||
            (tenant_id != NULL && !ks_uuid_valid(tenant_id)) ||
            (payload == NULL && payload_len > 0) || payload_len > KS_OUTBOX_PAYLOAD_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        if (ks_uuid_v7(ev->event_id) != 0) {
                return KS_INTERNAL;
        }
        if ((ev->payload_hex = ks_pg_bytea_text(payload, payload_len)) == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        snprintf(ev->channel, sizeof(ev->channel), "%s_outbox", schema);
        /*
         * One statement: the NOTIFY rides on the insert, and is sent only if it
         * commits. The outbox's trigger queues the event (ks_outbox.h).
         */
        snprintf(ev->sql, sizeof(ev->sql),
                 "WITH ins AS (INSERT INTO %s.outbox (event_id, topic, tenant_id, payload) "
                 "VALUES ($1::uuid, $2::text, $3::uuid, $4::bytea)) SELECT pg_notify($5, '')",
                 schema);
        ev->params[0] = ev->event_id;
        ev->params[1] = topic;
        ev->params[2] = tenant_id;
        ev->params[3] = ev->payload_hex;
        ev->params[4] = ev->channel;
        ev->n_params = 5;
        return KS_OK;
}

void ks_outbox_event_clear(ks_outbox_event *ev)
{
        free(ev->payload_hex);
        ev->payload_hex = NULL;
}

int ks_outbox_add(PGconn *conn, const char *request_id, const char *schema, const char *topic,
                  const char *tenant_id, const uint8_t *payload, size_t payload_len,
                  char *event_id_out)
{
        ks_outbox_event ev;
        int rv;

        if (conn == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        if ((rv = ks_outbox_event_make(&ev, schema, topic, tenant_id, payload, payload_len)) !=
            KS_OK) {
                return rv;
        }
        /* Outside a transaction the event would commit on its own, apart from the write. */
        if (PQtransactionStatus(conn) != PQTRANS_INTRANS) {
                ks_log_error(request_id, "outbox event added outside a transaction", "{s:s}",
                             "topic", topic);
                ks_outbox_event_clear(&ev);
                return KS_FAILED_PRECONDITION;
        }
        rv = ks_pg_exec(conn, request_id, ev.sql, ev.n_params, ev.params, NULL);
        if (rv == KS_OK && event_id_out != NULL) {
                memcpy(event_id_out, ev.event_id, sizeof(ev.event_id));
        }
        ks_outbox_event_clear(&ev);
        return rv;
}

/* ---- batches of events ------------------------------------------------------------- */

static void batch_put(ks_outbox_batch *b, int k, const char *s, size_t n)
{
        if (b->oom) {
                return;
        }
        if (b->lens[k] + n + 2 > b->caps[k]) {
                size_t cap = b->caps[k] == 0 ? 256 : b->caps[k];
                while (b->lens[k] + n + 2 > cap) {
                        cap *= 2;
                }
                char *p = realloc(b->arrays[k], cap);
                if (p == NULL) {
                        b->oom = true;
                        return;
                }
                b->arrays[k] = p;
                b->caps[k] = cap;
        }
        memcpy(b->arrays[k] + b->lens[k], s, n);
        b->lens[k] += n;
}

/* One element of array k: NULL, or a quoted value (ids, topics and hex need no escaping). */
static void batch_elem(ks_outbox_batch *b, int k, const char *v, const char *prefix)
{
        batch_put(b, k, b->n_events == 0 ? "{" : ",", 1);
        if (v == NULL) {
                batch_put(b, k, "NULL", 4);
                return;
        }
        batch_put(b, k, "\"", 1);
        batch_put(b, k, prefix, strlen(prefix));
        batch_put(b, k, v, strlen(v));
        batch_put(b, k, "\"", 1);
}

int ks_outbox_batch_begin(ks_outbox_batch *b, const char *schema, bool notify)
{
        memset(b, 0, sizeof(*b));
        b->notify = notify;
        if (!valid_schema(schema)) {
                return KS_INVALID_ARGUMENT;
        }
        snprintf(b->schema, sizeof(b->schema), "%s", schema);
        return KS_OK;
}

int ks_outbox_batch_add(ks_outbox_batch *b, const char *topic, const char *tenant_id,
                        const uint8_t *payload, size_t payload_len)
{
        char event_id[UUID_LEN + 1];

        if (tenant_id != NULL && tenant_id[0] == '\0') {
                tenant_id = NULL;
        }
        if (!valid_topic(topic) || (tenant_id != NULL && !ks_uuid_valid(tenant_id)) ||
            (payload == NULL && payload_len > 0) || payload_len > KS_OUTBOX_PAYLOAD_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        if (ks_uuid_v7(event_id) != 0) {
                return KS_INTERNAL;
        }
        char *hex = ks_pg_bytea_text(payload, payload_len);
        if (hex == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        batch_elem(b, 0, event_id, "");
        batch_elem(b, 1, topic, "");
        batch_elem(b, 2, tenant_id, "");
        /* "\x..." in the text form of bytea; its backslash escaped for the array literal. */
        batch_elem(b, 3, hex + 2, "\\\\x");
        free(hex);
        b->n_events++;
        return b->oom ? KS_RESOURCE_EXHAUSTED : KS_OK;
}

int ks_outbox_batch_finish(ks_outbox_batch *b)
{
        char rows[KS_OUTBOX_SQL_MAX / 2]; /* the rest of sql is at most 150 bytes and a schema */

        for (int k = 0; k < 4; k++) {
                batch_put(b, k, b->n_events == 0 ? "{}" : "}", b->n_events == 0 ? 2 : 1);
                if (b->oom) {
                        return KS_RESOURCE_EXHAUSTED;
                }
                b->arrays[k][b->lens[k]] = '\0';
                b->params[k] = b->arrays[k];
        }
        snprintf(b->channel, sizeof(b->channel), "%s_outbox", b->schema);
        /* The ids follow the events' order; the outbox's trigger queues them (ks_outbox.h). */
        snprintf(rows, sizeof(rows),
                 "INSERT INTO %s.outbox (event_id, topic, tenant_id, payload)"
                 " SELECT e.event_id, e.topic, e.tenant_id, e.payload FROM"
                 " unnest($1::uuid[], $2::text[], $3::uuid[], $4::bytea[]) WITH ORDINALITY"
                 " AS e(event_id, topic, tenant_id, payload, o) ORDER BY e.o",
                 b->schema);
        if (!b->notify) {
                snprintf(b->sql, sizeof(b->sql), "%s", rows);
                b->n_params = 4;
                return KS_OK;
        }
        /* One NOTIFY for the lot: it is sent only if the transaction commits. */
        snprintf(b->sql, sizeof(b->sql),
                 "WITH ins AS (%s) SELECT pg_notify($5, '') WHERE cardinality($1::uuid[]) > 0",
                 rows);
        b->params[4] = b->channel;
        b->n_params = 5;
        return KS_OK;
}

void ks_outbox_batch_clear(ks_outbox_batch *b)
{
        for (int k = 0; k < 4; k++) {
                free(b->arrays[k]);
        }
        memset(b, 0, sizeof(*b));
}

/* ---- the relay: state ---------------------------------------------------------- */

typedef enum relay_state {
        STATE_STARTING,
        STATE_OK,
        STATE_DB_DOWN,         /* cannot connect, or the connection broke */
        STATE_DB_FAILING,      /* connected, but statements fail (a missing table, a timeout) */
        STATE_PUBLISH_FAILING, /* the publisher refuses events */
} relay_state;

typedef enum step_result {
        STEP_IDLE,      /* nothing more for now: wait for a notification or the poll */
        STEP_MORE,      /* a full batch went out, or retention has more: go again at once */
        STEP_DB_LOST,   /* the connection is gone: reconnect after a backoff */
        STEP_DB_FAILED, /* a statement failed, rolled back: retry after a backoff */
        STEP_PUBLISH_FAILED,
} step_result;

struct ks_outbox_relay {
        pthread_t thread;
        int wake[2]; /* self-pipe: stop writes one byte, every wait polls it */
        atomic_bool stop;
        _Atomic uint64_t published;

        char *dsn;
        char schema[SCHEMA_MAX + 1];
        char app_name[SCHEMA_MAX + 24];
        ks_publisher *publisher;
        int batch_max;
        int poll_ms;
        int retention_s;
        char sql_claim[SQL_MAX];
        char sql_mark[SQL_MAX];
        char sql_retention[SQL_MAX];
        char sql_backlog[SQL_MAX];
        char sql_listen[SQL_MAX];

        /* Owned by the relay thread. */
        PGconn *conn;
        relay_state state;
        char error[ERROR_MAX]; /* the last failure, for the state change log */
        int backoff_ms;
        int64_t retention_due_ms;
        int64_t backlog_due_ms;
        long long backlog_last;     /* the gauge's last sample */
        long long poison_logged_id; /* rejected rows up to this id were logged already */
        ks_claim_window claims;     /* where the next claim starts */
        char *ids;                  /* "{1,2,…}": the rows of a batch to mark */
        size_t ids_cap;

        ks_counter *published_total;
        ks_counter *failures_total;
        ks_gauge *backlog;
        ks_histogram *lag;
};

/* Publishing lag, from a few milliseconds to an outage of an hour. */
static const double lag_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                     2.5,   5,    10,    30,   60,  300,  900, 3600};

static void set_error(ks_outbox_relay *r, const char *sqlstate, const char *msg)
{
        snprintf(r->error, sizeof(r->error), "%s%s%s", sqlstate != NULL ? sqlstate : "",
                 sqlstate != NULL && sqlstate[0] != '\0' ? ": " : "", msg != NULL ? msg : "");
        r->error[strcspn(r->error, "\n")] = '\0';
}

static const struct {
        ks_log_level level;
        const char *msg;
} state_logs[] = {
    [STATE_STARTING] = {KS_LOG_DEBUG, "outbox relay starting"},
    [STATE_OK] = {KS_LOG_INFO, "outbox relay publishing"},
    [STATE_DB_DOWN] = {KS_LOG_WARN, "outbox relay cannot reach postgres, retrying"},
    [STATE_DB_FAILING] = {KS_LOG_ERROR, "outbox relay statements fail, retrying"},
    [STATE_PUBLISH_FAILING] = {KS_LOG_ERROR, "outbox relay cannot publish, retrying"},
};

/* Logs a change of state, once: a retry in the same state stays silent. */
static void set_state(ks_outbox_relay *r, relay_state s)
{
        if (s == r->state) {
                return;
        }
        r->state = s;
        if (s == STATE_OK) {
                ks_log(state_logs[s].level, NULL, state_logs[s].msg, "{s:s}", "schema", r->schema);
        } else {
                ks_log(state_logs[s].level, NULL, state_logs[s].msg, "{s:s,s:s}", "schema",
                       r->schema, "error", r->error);
        }
}

/* ---- the relay: statements ------------------------------------------------------ */

/*
 * Runs one statement on the relay's connection, prepared the first time the
 * connection runs its text (ks_pg_prepared.c, as the pools do: planning the
 * claim cost the server more than running it, 0.8 ms against 1 ms for 100
 * events). Returns the result, or NULL with the failure kept for the state
 * change log. Not ks_pg_exec: that one logs every failure, and a relay
 * retrying against a broken table would write the same line every few
 * seconds.
 */
static PGresult *relay_exec(ks_outbox_relay *r, const char *sql, int n, const char *const *params)
{
        PGresult *res = NULL;
        const char *name = ks_pg_prepared(r->conn, sql, n, NULL, &res);
        if (name != NULL) {
                res = PQexecPrepared(r->conn, name, n, params, NULL, NULL, 0);
        } else if (res == NULL) {
                res = PQexecParams(r->conn, sql, n, NULL, params, NULL, NULL, 0);
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
                return res;
        }
        if (res != NULL) {
                /* A plan the schema changed under: the cache starts again, the retry replans. */
                (void)ks_pg_prepared_failed(r->conn, res);
        }
        const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        set_error(r, res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL,
                  primary != NULL ? primary : PQerrorMessage(r->conn));
        PQclear(res);
        return NULL;
}

static bool relay_ok(ks_outbox_relay *r, const char *sql, int n, const char *const *params)
{
        PGresult *res = relay_exec(r, sql, n, params);
        PQclear(res);
        return res != NULL;
}

/* What a failed statement means: the connection is gone, or the transaction is rolled back. */
static step_result db_failure(ks_outbox_relay *r)
{
        if (PQstatus(r->conn) != CONNECTION_OK) {
                return STEP_DB_LOST;
        }
        ks_pg_rollback(r->conn);
        return STEP_DB_FAILED;
}

/* ---- the relay: one batch ----------------------------------------------------------- */

/* Columns of sql_claim. */
enum { COL_ID, COL_EVENT_ID, COL_TOPIC, COL_TENANT, COL_PAYLOAD, COL_CREATED_MS, COL_LAG_S };

static int publish_row(ks_outbox_relay *r, PGresult *res, int i)
{
        size_t len = 0;
        unsigned char *payload =
            PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, COL_PAYLOAD), &len);
        if (payload == NULL) {
                return KS_INTERNAL;
        }
        Keelson__Events__V1__Event ev = KEELSON__EVENTS__V1__EVENT__INIT;
        ev.event_id = PQgetvalue(res, i, COL_EVENT_ID);
        ev.topic = PQgetvalue(res, i, COL_TOPIC);
        ev.tenant_id = PQgetvalue(res, i, COL_TENANT);
        ev.occurred_at_unix_ms = strtoll(PQgetvalue(res, i, COL_CREATED_MS), NULL, 10);
        ev.payload.data = payload;
        ev.payload.len = len;
        int rv = ks_publish(r->publisher, &ev);
        PQfreemem(payload);
        if (rv == KS_OK) {
                /* Measured by the database clock at claim: no skew between hosts. */
                ks_histogram_observe(r->lag, strtod(PQgetvalue(res, i, COL_LAG_S), NULL));
        }
        return rv;
}

/*
 * A row the publisher can never take (too big, a bad topic: only a row not
 * written by ks_outbox_add can be one) stays unpublished, so nothing is
 * dropped silently, and the rest of the batch goes out. Logged once per row;
 * the backlog gauge shows it until an operator deletes its id from the queue
 * (or the row itself: its id then leaves the queue at the next claim). (A
 * whole batch of such rows would stall the relay, which then only polls: it
 * never spins.)
 */
static void reject_row(ks_outbox_relay *r, PGresult *res, int i, int code)
{
        long long id = strtoll(PQgetvalue(res, i, COL_ID), NULL, 10);
        ks_counter_inc(r->failures_total);
        if (id <= r->poison_logged_id) {
                return;
        }
        r->poison_logged_id = id;
        ks_log_error(NULL, "outbox event rejected by the publisher, left unpublished",
                     "{s:s,s:s,s:s,s:s}", "schema", r->schema, "event_id",
                     PQgetvalue(res, i, COL_EVENT_ID), "topic", PQgetvalue(res, i, COL_TOPIC),
                     "code", ks_code_name(code));
}

/*
 * Publishes the claimed rows in id order; lists in r->ids (*n_done) the ids
 * to take off the queue: the published ones, and any whose event row is
 * gone (deleted by hand), which leave the queue without a publish.
 */
static int publish_rows(ks_outbox_relay *r, PGresult *res, int *n_sent, int *n_done)
{
        size_t len = 1;
        r->ids[0] = '{';
        *n_sent = 0;
        *n_done = 0;
        for (int i = 0; i < PQntuples(res); i++) {
                bool gone = PQgetisnull(res, i, COL_EVENT_ID);
                int rv = gone ? KS_OK : publish_row(r, res, i);
                if (rv == KS_INVALID_ARGUMENT || rv == KS_RESOURCE_EXHAUSTED) {
                        reject_row(r, res, i, rv);
                        continue;
                }
                if (rv != KS_OK) {
                        return rv;
                }
                int n = snprintf(r->ids + len, r->ids_cap - len, "%s%s", *n_done > 0 ? "," : "",
                                 PQgetvalue(res, i, COL_ID));
                /* ids_cap fits batch_max bigints, and the claim took at most batch_max rows. */
                KS_ASSERT(n > 0 && (size_t)n < r->ids_cap - len - 1);
                len += (size_t)n;
                (*n_done)++;
                *n_sent += !gone;
        }
        r->ids[len] = '}';
        r->ids[len + 1] = '\0';
        return KS_OK;
}

/*
 * Claims up to batch_max unpublished rows (rows another relay holds are
 * skipped, not waited for), publishes them, marks them, commits. A publish
 * failure rolls everything back: the rows stay for the next try, and any
 * already sent go again (consumers deduplicate by event id).
 */
static step_result relay_batch(ks_outbox_relay *r)
{
        char limit[16], from[24];
        int64_t now = ks_mono_ms();
        bool full;
        snprintf(limit, sizeof(limit), "%d", r->batch_max);
        snprintf(from, sizeof(from), "%lld", ks_claim_window_start(&r->claims, now, &full));
        const char *claim_params[] = {limit, from};
        /* pub/sub accepts and drops events with no broker: marking them published would lose them
         */
        if (ks_publisher_connected(r->publisher) == 0) {
                set_error(r, NULL, "no broker connected");
                return STEP_PUBLISH_FAILED;
        }
        if (!relay_ok(r, "BEGIN", 0, NULL)) {
                return db_failure(r);
        }
        PGresult *res = relay_exec(r, r->sql_claim, 2, claim_params);
        if (res == NULL) {
                return db_failure(r);
        }
        int claimed = PQntuples(res), sent = 0, done = 0;
        KS_ASSERT(claimed <= r->batch_max); /* LIMIT $1: r->ids is sized for no more */
        /* ORDER BY q.id: the last row is the highest. */
        long long top = claimed > 0 ? strtoll(PQgetvalue(res, claimed - 1, COL_ID), NULL, 10) : 0;
        int rv = publish_rows(r, res, &sent, &done);
        PQclear(res);
        if (rv != KS_OK) {
                ks_pg_rollback(r->conn);
                ks_counter_inc(r->failures_total);
                set_error(r, NULL, ks_code_name(rv));
                return STEP_PUBLISH_FAILED;
        }
        const char *mark_params[] = {r->ids};
        if ((done > 0 && !relay_ok(r, r->sql_mark, 1, mark_params)) ||
            !relay_ok(r, "COMMIT", 0, NULL)) {
                return db_failure(r);
        }
        ks_claim_window_done(&r->claims, now, full, top);
        /* The metric first: a reader that sees the count also sees the metric. */
        ks_counter_add(r->published_total, (uint64_t)sent);
        atomic_fetch_add(&r->published, (uint64_t)sent);
        /* Only progress earns an immediate next round: a batch of rejected rows would spin. */
        return claimed == r->batch_max && done > 0 ? STEP_MORE : STEP_IDLE;
}

long long ks_claim_window_start(const ks_claim_window *w, int64_t now_ms, bool *full)
{
        *full = now_ms >= w->full_due_ms;
        return *full ? 0 : w->from;
}

void ks_claim_window_done(ks_claim_window *w, int64_t now_ms, bool full, long long top)
{
        if (full) {
                w->full_due_ms = now_ms + KS_CLAIM_FULL_EVERY_MS;
        }
        if (top - KS_CLAIM_WINDOW > w->from) { /* never back: a late id waits for a full claim */
                w->from = top - KS_CLAIM_WINDOW;
        }
}

/* Deletes at most RETENTION_ROWS published rows past retention; more waits for the next step. */
static step_result relay_retention(ks_outbox_relay *r)
{
        char secs[16];
        snprintf(secs, sizeof(secs), "%d", r->retention_s);
        const char *params[] = {secs};
        PGresult *res = relay_exec(r, r->sql_retention, 1, params);
        if (res == NULL) {
                return db_failure(r);
        }
        long deleted = strtol(PQcmdTuples(res), NULL, 10);
        PQclear(res);
        bool more = deleted >= RETENTION_ROWS;
        r->retention_due_ms = ks_mono_ms() + (more ? 0 : RETENTION_EVERY_MS);
        return more ? STEP_MORE : STEP_IDLE;
}

static step_result relay_sample_backlog(ks_outbox_relay *r)
{
        PGresult *res = relay_exec(r, r->sql_backlog, 0, NULL);
        if (res == NULL) {
                return db_failure(r);
        }
        r->backlog_last = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        ks_gauge_set(r->backlog, r->backlog_last);
        PQclear(res);
        r->backlog_due_ms = ks_mono_ms() + BACKLOG_EVERY_MS;
        return STEP_IDLE;
}

/*
 * One round: a batch, retention when due, and the backlog gauge: at most
 * once a second, and at every idle round while its last sample was not 0,
 * so that it settles at 0 once the backlog is gone. An idle relay whose
 * gauge reads 0 does not count the queue at every poll (billing polls ten
 * times a second; the count was a quarter of an idle round's statements).
 */
static step_result relay_step(ks_outbox_relay *r)
{
        step_result sr = relay_batch(r);
        if (sr != STEP_IDLE && sr != STEP_MORE) {
                return sr;
        }
        if (ks_mono_ms() >= r->retention_due_ms) {
                step_result rr = relay_retention(r);
                if (rr != STEP_IDLE && rr != STEP_MORE) {
                        return rr;
                }
                sr = rr == STEP_MORE ? STEP_MORE : sr;
        }
        if ((sr == STEP_IDLE && r->backlog_last != 0) || ks_mono_ms() >= r->backlog_due_ms) {
                step_result br = relay_sample_backlog(r);
                if (br != STEP_IDLE) {
                        return br;
                }
        }
        return sr;
}

/* ---- the relay: connecting and waiting ------------------------------------------------ */

static void on_notice(void *arg, const PGresult *res)
{
        (void)arg;
        const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        ks_log_debug(NULL, "postgres notice", "{s:s}", "pg_message", msg != NULL ? msg : "");
}

/*
 * libpq's non-blocking connect, so that a stop need not wait for a dead host.
 * It ignores connect_timeout: the deadline is ours.
 */
static bool connect_poll(ks_outbox_relay *r, PGconn *c)
{
        int64_t deadline = ks_mono_ms() + CONNECT_TIMEOUT_MS;
        PostgresPollingStatusType st = PGRES_POLLING_WRITING;
        while (st != PGRES_POLLING_OK) {
                int64_t left_ms = deadline - ks_mono_ms();
                if (st == PGRES_POLLING_FAILED || left_ms <= 0 || atomic_load(&r->stop)) {
                        set_error(r, NULL,
                                  st == PGRES_POLLING_FAILED ? PQerrorMessage(c) : "timed out");
                        return false;
                }
                struct pollfd pfd[2] = {
                    {.fd = r->wake[0], .events = POLLIN},
                    {.fd = PQsocket(c), .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT}};
                int n = poll(pfd, 2, (int)left_ms);
                if (n < 0 && errno != EINTR) {
                        set_error(r, NULL, strerror(errno));
                        return false;
                }
                if (n > 0 && pfd[1].revents != 0) {
                        st = PQconnectPoll(c);
                }
        }
        return true;
}

static bool relay_connect(ks_outbox_relay *r)
{
        /* Keepalives find a peer that vanished without a word; the dsn may override them. */
        const char *const keys[] = {"keepalives_idle", "keepalives_interval", "keepalives_count",
                                    "dbname",          "application_name",    NULL};
        const char *const vals[] = {"30", "10", "3", r->dsn, r->app_name, NULL};
        PGconn *c = PQconnectStartParams(keys, vals, 1);
        if (c == NULL || PQstatus(c) == CONNECTION_BAD || !connect_poll(r, c)) {
                if (c == NULL || PQstatus(c) == CONNECTION_BAD) {
                        set_error(r, NULL, c != NULL ? PQerrorMessage(c) : "out of memory");
                }
                PQfinish(c);
                return false;
        }
        PQsetNoticeReceiver(c, on_notice, NULL);
        if (ks_pg_prepared_attach(c) != 0) {
                ks_log_warn(NULL, "outbox relay statements will run unprepared", "{s:s}", "schema",
                            r->schema);
        }
        r->conn = c;
        /*
         * The pools' session settings: generic plans for the prepared statements,
         * no JIT; and the queue read by its key whatever it held when a plan was
         * made (the head of this file).
         */
        char sql[KS_PG_SESSION_SQL_MAX];
        ks_pg_session_sql(sql, STATEMENT_TIMEOUT_MS);
        if (!relay_ok(r, sql, 0, NULL) || !relay_ok(r, "SET " KS_QUEUE_BY_KEY, 0, NULL) ||
            !relay_ok(r, r->sql_listen, 0, NULL)) {
                PQfinish(r->conn);
                r->conn = NULL;
                return false;
        }
        return true;
}

/* Notifications only wake the relay: what to publish is read from the table. */
static int drain_notifications(PGconn *conn)
{
        int n = 0;
        PGnotify *nt;
        while ((nt = PQnotifies(conn)) != NULL) {
                PQfreemem(nt);
                n++;
        }
        return n;
}

/*
 * Sleeps until a notification, the poll interval or a stop. A connection
 * that broke meanwhile is found by the next step's first statement.
 */
static void relay_wait(ks_outbox_relay *r)
{
        if (drain_notifications(r->conn) > 0) {
                return; /* arrived during the last statements */
        }
        struct pollfd pfd[2] = {{.fd = r->wake[0], .events = POLLIN},
                                {.fd = PQsocket(r->conn), .events = POLLIN}};
        if (poll(pfd, 2, r->poll_ms) > 0 && pfd[1].revents != 0 && PQconsumeInput(r->conn) == 1) {
                drain_notifications(r->conn);
        }
}

static void relay_backoff(ks_outbox_relay *r)
{
        struct pollfd pfd = {.fd = r->wake[0], .events = POLLIN};
        (void)poll(&pfd, 1, r->backoff_ms);
        r->backoff_ms = r->backoff_ms >= BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

static void relay_after(ks_outbox_relay *r, step_result sr)
{
        if (atomic_load(&r->stop)) {
                return;
        }
        switch (sr) {
        case STEP_MORE:
        case STEP_IDLE:
                set_state(r, STATE_OK);
                r->backoff_ms = BACKOFF_MIN_MS;
                if (sr == STEP_IDLE) {
                        relay_wait(r);
                }
                return;
        case STEP_DB_LOST:
                set_state(r, STATE_DB_DOWN);
                PQfinish(r->conn);
                r->conn = NULL;
                break;
        case STEP_DB_FAILED:
                set_state(r, STATE_DB_FAILING);
                break;
        case STEP_PUBLISH_FAILED:
                set_state(r, STATE_PUBLISH_FAILING);
                break;
        }
        relay_backoff(r);
}

static void *relay_main(void *arg)
{
        ks_outbox_relay *r = arg;
        while (!atomic_load(&r->stop)) {
                step_result sr;
                if (r->conn == NULL && !relay_connect(r)) {
                        sr = STEP_DB_LOST;
                } else {
                        sr = relay_step(r);
                }
                relay_after(r, sr);
        }
        PQfinish(r->conn);
        r->conn = NULL;
        return NULL;
}

/* ---- the relay: start and stop -------------------------------------------------------- */

static bool valid_options(const ks_outbox_relay_options *o)
{
        return o != NULL && o->dsn != NULL && valid_schema(o->schema) && o->publisher != NULL &&
               o->batch_max >= 1 && o->batch_max <= BATCH_MAX && o->poll_ms >= POLL_MS_MIN &&
               o->poll_ms <= POLL_MS_MAX && o->retention_s >= 0 &&
               o->retention_s <= RETENTION_S_MAX;
}

/*
 * Among the oldest RETENTION_WINDOW events by id, those past retention and
 * published. Looking only there keeps a pass's work bounded: the condition
 * on created_at over the whole outbox (no index has it) read every event at
 * each pass once none was old enough (168 ms at a million;
 * docs/performance.md). Ids follow creation closely enough: an event of a
 * long transaction, old with a later id, goes when the window reaches it,
 * and events still queued stay in the window without holding up the rest
 * unless there are RETENTION_WINDOW of them.
 */
void ks_outbox_retention_sql(char *out, size_t len, const char *schema)
{
        snprintf(out, len,
                 "DELETE FROM %s.outbox WHERE ctid = ANY(ARRAY(SELECT w.ctid FROM"
                 " (SELECT ctid, id, created_at FROM %s.outbox ORDER BY id LIMIT %d) w"
                 " WHERE w.created_at < now() - $1::int8 * interval '1 second' AND NOT EXISTS"
                 " (SELECT 1 FROM %s.outbox_queue q WHERE q.id = w.id) LIMIT %d))",
                 schema, schema, RETENTION_WINDOW, schema, RETENTION_ROWS);
}

/* The schema is validated: formatting it into the statements is safe. */
static void format_sql(ks_outbox_relay *r)
{
        const char *s = r->schema;
        /* Each event is found by its id (OFFSET 0 keeps the join a lookup per queued id). */
        snprintf(r->sql_claim, sizeof(r->sql_claim),
                 "SELECT q.id, o.event_id, o.topic, coalesce(o.tenant_id::text, ''), o.payload, "
                 "floor(extract(epoch FROM o.created_at) * 1000)::int8, "
                 "extract(epoch FROM clock_timestamp() - o.created_at)::float8 "
                 "FROM (SELECT id FROM %s.outbox_queue WHERE id >= $2::int8 ORDER BY id "
                 "LIMIT $1::int FOR UPDATE SKIP LOCKED) q "
                 "LEFT JOIN LATERAL (SELECT * FROM %s.outbox WHERE id = q.id OFFSET 0) o ON true "
                 "ORDER BY q.id",
                 s, s);
        snprintf(r->sql_mark, sizeof(r->sql_mark),
                 "DELETE FROM %s.outbox_queue WHERE id = ANY($1::int8[])", s);
        ks_outbox_retention_sql(r->sql_retention, sizeof(r->sql_retention), s);
        snprintf(r->sql_backlog, sizeof(r->sql_backlog),
                 "SELECT count(*) FROM (SELECT 1 FROM %s.outbox_queue LIMIT %d) AS b", s,
                 BACKLOG_COUNT_MAX);
        snprintf(r->sql_listen, sizeof(r->sql_listen), "LISTEN %s_outbox", s);
}

static void init_metrics(ks_outbox_relay *r)
{
        ks_metrics *m = ks_metrics_default();
        char labels[SCHEMA_MAX + 16];
        snprintf(labels, sizeof(labels), "schema=\"%s\"", r->schema);
        r->published_total = ks_counter_get(m, "keelson_outbox_published_total",
                                            "Outbox events published and marked.", labels);
        r->failures_total =
            ks_counter_get(m, "keelson_outbox_publish_failures_total",
                           "Outbox publish attempts the publisher refused.", labels);
        r->backlog = ks_gauge_get(m, "keelson_outbox_backlog",
                                  "Unpublished outbox events (sampled, capped at 100000).", labels);
        r->lag =
            ks_histogram_get(m, "keelson_outbox_lag_seconds",
                             "From an outbox event's commit-time timestamp to its publishing.",
                             labels, lag_buckets, sizeof(lag_buckets) / sizeof(lag_buckets[0]));
}

static void relay_free(ks_outbox_relay *r)
{
        if (r == NULL) {
                return;
        }
        for (int i = 0; i < 2; i++) {
                if (r->wake[i] >= 0) {
                        close(r->wake[i]);
                }
        }
        free(r->ids);
        free(r->dsn);
        free(r);
}

static int relay_init(ks_outbox_relay *r, const ks_outbox_relay_options *o)
{
        r->wake[0] = r->wake[1] = -1;
        r->dsn = strdup(o->dsn);
        r->ids_cap = (size_t)o->batch_max * ID_DIGITS_MAX + 3;
        r->ids = malloc(r->ids_cap);
        if (r->dsn == NULL || r->ids == NULL || pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
                return -1;
        }
        snprintf(r->schema, sizeof(r->schema), "%s", o->schema);
        snprintf(r->app_name, sizeof(r->app_name), "keelson-outbox-%s", o->schema);
        r->publisher = o->publisher;
        r->batch_max = o->batch_max;
        r->poll_ms = o->poll_ms;
        r->retention_s = o->retention_s;
        r->state = STATE_STARTING;
        r->backoff_ms = BACKOFF_MIN_MS;
        r->retention_due_ms = ks_mono_ms(); /* a first pass at start, then once a minute */
        format_sql(r);
        init_metrics(r);
        return 0;
}

int ks_outbox_relay_start(ks_outbox_relay **out, const ks_outbox_relay_options *opts)
{
        if (out == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        *out = NULL;
        if (!valid_options(opts)) {
                return KS_INVALID_ARGUMENT;
        }
        ks_outbox_relay *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        if (relay_init(r, opts) != 0) {
                relay_free(r);
                return KS_RESOURCE_EXHAUSTED;
        }
        if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
                relay_free(r);
                return KS_INTERNAL;
        }
        *out = r;
        return KS_OK;
}

void ks_outbox_relay_stop(ks_outbox_relay *r)
{
        if (r == NULL) {
                return;
        }
        atomic_store(&r->stop, true);
        char byte = 1;
        /* The pipe is empty until now, and the flag is set whatever write says. */
        ssize_t n = write(r->wake[1], &byte, 1);
        (void)n;
        pthread_join(r->thread, NULL);
        relay_free(r);
}

uint64_t ks_outbox_relay_published(const ks_outbox_relay *r)
{
        return r != NULL ? atomic_load(&r->published) : 0;
}
