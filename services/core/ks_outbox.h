/*
 * ks_outbox: events published only after the write that caused them commits.
 *
 * A service keeps an outbox table in its own schema (see the DDL below; put
 * it in one of the service's migrations). A handler that must tell others
 * about a write calls ks_outbox_add inside the write's transaction: the row
 * commits or rolls back with the write, and a NOTIFY (delivered only on
 * commit) wakes the relays. The table, not the notification, is the record.
 *
 * Each event's id also goes into <schema>.outbox_queue, put there by a
 * statement trigger on the outbox (below), whoever inserts the event: the
 * queue is the set of events not yet published. The relay
 * runs on its own thread in every replica: it claims queued ids with FOR
 * UPDATE SKIP LOCKED (so replicas share the work and never publish a row
 * twice while it is claimed), publishes their events on the broker's event
 * bus in id order within a batch, deletes the ids from the queue in the same
 * transaction, and deletes events older than a retention period that are no
 * longer queued. An event row deleted by hand leaves the queue at its next
 * claim, unpublished; a queued id deleted by hand counts as published. It wakes
 * on NOTIFY and also polls (a notification can be lost with a connection).
 * Delivery is at least once: a relay that dies after publishing and before
 * committing leaves the rows to be published again; consumers deduplicate by
 * event id.
 *
 *   CREATE TABLE <schema>.outbox (
 *       id           bigserial PRIMARY KEY,
 *       event_id     uuid NOT NULL UNIQUE,
 *       topic        text NOT NULL,
 *       tenant_id    uuid,
 *       payload      bytea NOT NULL,
 *       created_at   timestamptz NOT NULL DEFAULT now()
 *   );
 *   CREATE TABLE <schema>.outbox_queue (id int8 PRIMARY KEY);
 *   CREATE FUNCTION <schema>.outbox_queue_add() RETURNS trigger LANGUAGE plpgsql AS $$
 *   BEGIN
 *       INSERT INTO <schema>.outbox_queue (id) SELECT id FROM new_events
 *           ON CONFLICT DO NOTHING;
 *       RETURN NULL;
 *   END $$;
 *   CREATE TRIGGER outbox_queued AFTER INSERT ON <schema>.outbox
 *       REFERENCING NEW TABLE AS new_events
 *       FOR EACH STATEMENT EXECUTE FUNCTION <schema>.outbox_queue_add();
 *
 * The trigger, not the writer, queues: a writer of an older release still
 * running beside a newer one (a rolling upgrade) inserts events only, and
 * they are published all the same. A role that writes events needs INSERT
 * on both tables and USAGE on <schema>.outbox_id_seq, nothing more: the
 * ids come from the column's default and are not read back, so a writer
 * cannot read any event, its own included.
 */
#ifndef KS_OUTBOX_H
#define KS_OUTBOX_H

#include "ks_code.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_events.h"
#include "ks_pg.h"

/* Largest payload ks_outbox_add takes: the event envelope must fit the bus's 1 MiB. */
#define KS_OUTBOX_PAYLOAD_MAX ((size_t)1000 * 1000)

/*
 * Inside an open transaction on conn: inserts one event for topic (tenant_id
 * may be NULL) with a fresh event id, and NOTIFYs "<schema>_outbox". payload
 * is the topic's message, serialized. Returns KS_OK or the ks_pg_exec code;
 * the caller rolls back on failure. event_id_out (37 bytes) may be NULL.
 *
 * Checked before anything is sent: schema matches [a-z_][a-z0-9_]{0,62},
 * topic is 1..128 bytes of [a-z0-9._-], tenant_id is NULL, "" (same as NULL)
 * or a uuid in text form, payload_len <= KS_OUTBOX_PAYLOAD_MAX (payload may be
 * NULL when payload_len is 0); else KS_INVALID_ARGUMENT. conn outside a
 * transaction is KS_FAILED_PRECONDITION: the event would commit on its own,
 * apart from the write it reports. One round trip (the insert and the NOTIFY
 * are one statement).
 */
int ks_outbox_add(PGconn *conn, const char *request_id, const char *schema, const char *topic,
                  const char *tenant_id, const uint8_t *payload, size_t payload_len,
                  char *event_id_out) KS_MUST_CHECK;

/*
 * The statement ks_outbox_add runs, for a caller that sends it in a pipeline
 * of its own with other statements of the same transaction (one round trip
 * for many writes): sql and its n_params params, owned by ev until
 * ks_outbox_event_clear. The same checks as ks_outbox_add (KS_INVALID_ARGUMENT,
 * KS_RESOURCE_EXHAUSTED), but not the transaction's: sending it inside the
 * write's transaction is the caller's to ensure.
 */
#define KS_OUTBOX_SQL_MAX 1024
typedef struct ks_outbox_event {
        char event_id[37];
        char channel[72];
        char sql[KS_OUTBOX_SQL_MAX];
        char *payload_hex;
        const char *params[5];
        int n_params;
} ks_outbox_event;
int ks_outbox_event_make(ks_outbox_event *ev, const char *schema, const char *topic,
                         const char *tenant_id, const uint8_t *payload,
                         size_t payload_len) KS_MUST_CHECK;
void ks_outbox_event_clear(ks_outbox_event *ev);

/*
 * Many events of one transaction as one statement (one multi-row insert, and
 * one NOTIFY when notify): add them with ks_outbox_batch_add, then send sql
 * with params in the transaction. Each event is checked as ks_outbox_add
 * checks it. ks_outbox_batch_clear frees it all (also a batch only begun).
 *
 * Without the NOTIFY the relays find the events at their next poll
 * (KEELSON_<SVC>_OUTBOX_POLL_MS). A NOTIFY costs every transaction that
 * sends one a database-wide lock held through its commit, and every
 * listening relay a wake-up per commit: a service that commits many small
 * transactions with events (billing) polls instead.
 */
typedef struct ks_outbox_batch {
        char schema[64];
        char sql[KS_OUTBOX_SQL_MAX];
        char channel[72];
        char *arrays[4]; /* event ids, topics, tenants, payloads: array literals */
        size_t lens[4], caps[4];
        const char *params[5];
        int n_params;
        size_t n_events;
        bool oom;
        bool notify;
} ks_outbox_batch;
int ks_outbox_batch_begin(ks_outbox_batch *b, const char *schema, bool notify) KS_MUST_CHECK;
int ks_outbox_batch_add(ks_outbox_batch *b, const char *topic, const char *tenant_id,
                        const uint8_t *payload, size_t payload_len) KS_MUST_CHECK;
/* The statement's text and parameters (b->sql, b->params); KS_RESOURCE_EXHAUSTED when out of
 * memory. */
int ks_outbox_batch_finish(ks_outbox_batch *b) KS_MUST_CHECK;
void ks_outbox_batch_clear(ks_outbox_batch *b);

typedef struct ks_outbox_relay ks_outbox_relay;

typedef struct ks_outbox_relay_options {
        const char *dsn;         /* its own connections, outside the service's pool */
        const char *schema;      /* "auth" */
        ks_publisher *publisher; /* borrowed; outlives the relay */
        int batch_max;           /* rows per claim, e.g. 100 */
        int poll_ms;             /* also look without a notification, e.g. 1000 */
        int retention_s;         /* delete published events created longer ago, e.g. 86400 */
} ks_outbox_relay_options;

/*
 * Starts the relay thread. Returns KS_OK, or KS_INVALID_ARGUMENT when an
 * option is out of bounds: dsn and publisher set, schema as for
 * ks_outbox_add, batch_max 1..1000, poll_ms 10..3600000, retention_s
 * 0..about 10 years. The database need not be up: the relay connects (and
 * reconnects, with a backoff of 100 ms doubling to 5 s) by itself, and logs
 * each change of state once.
 *
 * Metrics (ks_metrics_default, label schema): keelson_outbox_published_total,
 * keelson_outbox_publish_failures_total, keelson_outbox_backlog (queued ids,
 * sampled at most once a second, and at every idle poll while it is not 0,
 * capped at 100000) and keelson_outbox_lag_seconds (from created_at to the
 * publish, both read from the database clock).
 *
 * A caveat of the bus: nng pub/sub accepts a message with no broker connected
 * and drops it, so "the publisher accepted it" is all the relay can know.
 */
int ks_outbox_relay_start(ks_outbox_relay **out, const ks_outbox_relay_options *opts) KS_MUST_CHECK;

/* Stops the thread (finishing the batch in hand) and frees; accepts NULL. */
void ks_outbox_relay_stop(ks_outbox_relay *r);

/* Events published and marked by this relay since start (for tests and metrics). */
uint64_t ks_outbox_relay_published(const ks_outbox_relay *r);

/*
 * The relay's retention statement for schema (validated by the caller; $1 the
 * retention in seconds): at most 1,000 published events past retention, found
 * among the 2,000 oldest, so that a pass reads a bounded part of the outbox.
 */
void ks_outbox_retention_sql(char *out, size_t len, const char *schema);

/*
 * Where a relay's next claim of a queue table (ids taken from a sequence,
 * deleted once sent) starts: KS_CLAIM_WINDOW ids below the highest any of
 * its claims took, and at the queue's first id (0) at least every
 * KS_CLAIM_FULL_EVERY_MS. Sent ids stay in the queue's index as dead
 * entries until VACUUM, and a claim from the first id walks them all; an
 * id that commits after ids KS_CLAIM_WINDOW above it were claimed waits for
 * the next claim from the first id: late by a second at most, never lost.
 * The outbox's relay and billing's ledger relay claim this way.
 */
#define KS_CLAIM_WINDOW        1024
#define KS_CLAIM_FULL_EVERY_MS 1000

/*
 * The planner setting under which a relay reads its queue (after SET or SET
 * LOCAL): by the queue's key, whatever the queue held when a generic plan
 * of a claim or a mark was made (ks_outbox.c says why). The outbox's relay
 * sets it on its connection, billing's ledger relay in each round.
 */
#define KS_QUEUE_BY_KEY "enable_seqscan = off"
typedef struct ks_claim_window {
        long long from;      /* the highest id claimed less the window; 0 at first */
        int64_t full_due_ms; /* the next claim from the first id, at the latest */
} ks_claim_window;

/* The id the claim made at now_ms starts at (the claim's "id >= $n"); *full: it is 0. */
long long ks_claim_window_start(const ks_claim_window *w, int64_t now_ms, bool *full);
/* After the claim committed: top is the highest id it took (0: none). */
void ks_claim_window_done(ks_claim_window *w, int64_t now_ms, bool full, long long top);

#endif
