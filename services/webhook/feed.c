/*
 * The feed: other services' outboxes, read in commit order, each event
 * fanned out into one delivery per subscription of its tenant and topic.
 *
 * A source's outbox (billing's, 003_feed.sql) stamps every event with the
 * transaction that wrote it (xid). One step, in one transaction as
 * keelson_webhook_worker (a member of keelson_feed_reader):
 *
 *   1. takes the source's advisory lock, or leaves it to the replica that
 *      holds it (one reader per source at a time; any replica may be it);
 *   2. reads the events after the cursor (xid, id) whose xid is below the
 *      xmin of the statement's snapshot: their transactions have ended, so
 *      no event can later appear before the page's end, whatever order the
 *      writers commit in; with each, the ids of the subscriptions it goes to
 *      (enabled, of its tenant and topic, made before the event);
 *   3. renders each event that goes somewhere as JSON once (topics.c),
 *      stores it and its deliveries, and moves the cursor past the page.
 *
 * The deliveries and the cursor commit together: an event becomes its
 * deliveries exactly once. While this service is down the events wait in
 * the outbox (KEELSON_BILLING_OUTBOX_RETENTION_S, a day by default); while
 * the broker is down nothing here notices, since the feed is the database.
 * A transaction that stays open holds the xmin back, and the feed with it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_clock.h"
#include "ks_log.h"
#include "webhook.h"

#define FEED_LOCK_CLASS "7523" /* advisory lock space of the feed: (class, hashtext(source)) */
#define SQL_MAX         2048

/* $1 source. Where the feed stands; no row: at the start. */
static const char sql_cursor_read[] = "SELECT xid, id FROM webhook.feed_cursors WHERE source = $1";

/*
 * The schema (one of wh_sources), the cursor (xid, id) and the page size are
 * written into the text, and the statement is planned at each page
 * (unprepared). Prepared, it was planned once, generically, on whatever the
 * outbox looked like then (empty, on a new database): the planner knew
 * neither where the cursor stands nor how small the page is, guessed that a
 * third of the outbox follows the cursor and ten per cent of it is the page,
 * and chose to gather every row from the cursor to the snapshot's xmin (or
 * the whole table) and sort it, in parallel workers started at each step
 * (docs/performance.md, "the webhook feed's read"). With the values in the
 * text, the plan is a walk of outbox_feed from the cursor (the row
 * comparison with constants is the scan's start key), stopped by the xmin or
 * the LIMIT: no row below the cursor is touched again.
 */
static const char sql_read_fmt[] =
    "WITH e AS (SELECT o.xid, o.id, o.event_id, o.topic, o.tenant_id, o.payload,"
    " (extract(epoch FROM o.created_at) * 1000)::int8 AS created_ms"
    " FROM %s.outbox o WHERE (o.xid, o.id) > ('%" PRIu64 "'::xid8, %" PRId64 "::int8)"
    " AND o.xid < pg_snapshot_xmin(pg_current_snapshot())"
    " ORDER BY o.xid, o.id LIMIT %" PRId64 ")"
    " SELECT e.xid, e.id, e.event_id, e.topic, e.tenant_id, e.created_ms, s.ids,"
    " CASE WHEN s.ids IS NOT NULL THEN e.payload END"
    " FROM e LEFT JOIN LATERAL (SELECT array_agg(s.id) AS ids FROM webhook.subscriptions s"
    " WHERE s.tenant_id = e.tenant_id AND s.enabled AND e.topic = ANY (s.topics)"
    " AND s.created_ms <= e.created_ms) s ON true ORDER BY e.xid, e.id";

/* $1 tenant, $2 event id, $3 source, $4 topic, $5 body, $6 created_ms, $7 subscription ids. */
static const char sql_fan_out[] =
    "WITH e AS (INSERT INTO webhook.events (tenant_id, id, source, topic, body, created_ms)"
    " VALUES ($1::uuid, $2::uuid, $3, $4, $5, $6::int8) ON CONFLICT DO NOTHING)"
    " INSERT INTO webhook.deliveries (tenant_id, subscription_id, event_id, next_attempt_ms,"
    " created_ms) SELECT $1::uuid, s, $2::uuid, webhook.now_ms(), webhook.now_ms()"
    " FROM unnest($7::uuid[]) s ON CONFLICT DO NOTHING";

static const char sql_cursor[] =
    "INSERT INTO webhook.feed_cursors (source, xid, id, updated_ms)"
    " VALUES ($1, $2::xid8, $3::int8, webhook.now_ms()) ON CONFLICT (source) DO UPDATE"
    " SET xid = EXCLUDED.xid, id = EXCLUDED.id, updated_ms = EXCLUDED.updated_ms";

typedef struct fan {
        char *body;
        const char *params[7];
        char created[24];
} fan;

/* The events of rows [from, to) of res that go somewhere, stored with their deliveries. */
static int fan_out(PGconn *conn, const char *source, PGresult *res, int from, int to,
                   int64_t *n_deliveries)
{
        fan f[KS_PG_PIPELINE_MAX];
        ks_pg_stmt s[KS_PG_PIPELINE_MAX];
        int n = 0, rc = KS_OK;

        for (int r = from; r < to; r++) {
                if (PQgetisnull(res, r, 6)) {
                        continue;
                }
                const wh_topic *t = wh_topic_find(ks_pg_text(res, r, 3));
                const char *hex = ks_pg_text(res, r, 7);
                size_t cap = strlen(hex) / 2 + 1;
                uint8_t *payload = malloc(cap);
                long len = payload != NULL ? ks_pg_bytea_decode(hex, payload, cap) : -1;
                size_t body_len = 0;
                if (len < 0) {
                        free(payload);
                        rc = KS_RESOURCE_EXHAUSTED;
                        break;
                }
                f[n].body = NULL;
                int brc = t == NULL ? KS_NOT_FOUND
                                    : wh_event_body(t, ks_pg_int(res, r, 5), payload, (size_t)len,
                                                    &f[n].body, &body_len);
                free(payload);
                if (brc == KS_RESOURCE_EXHAUSTED) {
                        rc = brc;
                        break;
                }
                if (brc != KS_OK) {
                        /* A subscription names a topic no longer in topics.def, or the
                         * payload is not its message: nothing a retry changes. */
                        ks_log_error(NULL, "webhook feed: an event cannot be rendered; skipped",
                                     "{s:s, s:s, s:s}", "source", source, "event_id",
                                     ks_pg_text(res, r, 2), "topic", ks_pg_text(res, r, 3));
                        continue;
                }
                snprintf(f[n].created, sizeof(f[n].created), "%s", ks_pg_text(res, r, 5));
                f[n].params[0] = ks_pg_text(res, r, 4);
                f[n].params[1] = ks_pg_text(res, r, 2);
                f[n].params[2] = source;
                f[n].params[3] = t->name;
                f[n].params[4] = f[n].body;
                f[n].params[5] = f[n].created;
                f[n].params[6] = ks_pg_text(res, r, 6);
                s[n] = (ks_pg_stmt){.sql = sql_fan_out, .n_params = 7, .params = f[n].params};
                n++;
        }
        if (rc == KS_OK && n > 0) {
                PGresult *outs[KS_PG_PIPELINE_MAX] = {0};
                for (int i = 0; i < n; i++) {
                        s[i].out = &outs[i];
                }
                rc = ks_pg_pipeline(conn, "feed", s, n);
                for (int i = 0; i < n; i++) {
                        if (outs[i] != NULL) {
                                *n_deliveries += atol(PQcmdTuples(outs[i]));
                        }
                        PQclear(outs[i]);
                }
        }
        for (int i = 0; i < n; i++) {
                free(f[i].body);
        }
        return rc;
}

/* A decimal field of the cursor's row: digits only, no sign, at most max. */
static int cursor_field(const PGresult *cursor, int col, uint64_t max, uint64_t *out)
{
        const char *v = ks_pg_text(cursor, 0, col);
        char *end = NULL;

        if (v[0] < '0' || v[0] > '9') {
                return KS_INTERNAL;
        }
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno != 0 || *end != '\0' || n > max) {
                return KS_INTERNAL;
        }
        *out = (uint64_t)n;
        return KS_OK;
}

/*
 * The page after the cursor's row (none: from the start, xid 0 being below
 * every real one), as sql_read_fmt says, into *res.
 */
static int read_page(wh_service *svc, PGconn *conn, const char *source, const PGresult *cursor,
                     PGresult **res)
{
        char sql[SQL_MAX];
        uint64_t xid = 0, id = 0;
        int rc;

        if (PQntuples(cursor) > 0 && ((rc = cursor_field(cursor, 0, UINT64_MAX, &xid)) != KS_OK ||
                                      (rc = cursor_field(cursor, 1, INT64_MAX, &id)) != KS_OK)) {
                ks_log_error(NULL, "webhook feed: the cursor is not (xid, id)", "{s:s}", "source",
                             source);
                return rc;
        }
        int n = snprintf(sql, sizeof(sql), sql_read_fmt, source, xid, (int64_t)id,
                         svc->cfg->feed_batch_max);
        if (n < 0 || (size_t)n >= sizeof(sql)) {
                return KS_INTERNAL;
        }
        const ks_pg_stmt s = {.sql = sql, .out = res, .unprepared = true};
        return ks_pg_pipeline(conn, "feed", &s, 1);
}

/* One page of source in one transaction. *n_read: events read (0: none, or another's turn). */
static int page(wh_service *svc, PGconn *conn, const char *source, int *n_read)
{
        const char *lp[2] = {FEED_LOCK_CLASS, source};
        const char *cp[1] = {source};
        PGresult *locked = NULL, *cursor = NULL, *res = NULL;
        int64_t n_deliveries = 0;
        int rc;

        *n_read = 0;
        const ks_pg_stmt open[4] = {
            {.sql = "BEGIN"},
            {.sql = "SET LOCAL ROLE keelson_webhook_worker"},
            {.sql = "SELECT pg_try_advisory_xact_lock($1::int4, hashtext($2))",
             .n_params = 2,
             .params = lp,
             .out = &locked},
            {.sql = sql_cursor_read, .n_params = 1, .params = cp, .out = &cursor}};
        if ((rc = ks_pg_pipeline(conn, "feed", open, 4)) != KS_OK) {
                return rc;
        }
        bool mine = ks_pg_bool(locked, 0, 0);
        PQclear(locked);
        if (!mine) {
                PQclear(cursor);
                ks_pg_rollback(conn);
                return KS_OK;
        }
        rc = read_page(svc, conn, source, cursor, &res);
        PQclear(cursor);
        if (rc != KS_OK) {
                return rc;
        }
        int rows = PQntuples(res);
        for (int from = 0; from < rows && rc == KS_OK; from += KS_PG_PIPELINE_MAX) {
                int to = from + KS_PG_PIPELINE_MAX < rows ? from + KS_PG_PIPELINE_MAX : rows;
                rc = fan_out(conn, source, res, from, to, &n_deliveries);
        }
        if (rc == KS_OK && rows > 0) {
                const char *up[3] = {source, ks_pg_text(res, rows - 1, 0),
                                     ks_pg_text(res, rows - 1, 1)};
                rc = ks_pg_exec(conn, "feed", sql_cursor, 3, up, NULL);
        }
        if (rc == KS_OK && (rc = ks_pg_commit(conn, "feed")) == KS_OK) {
                *n_read = rows;
                int64_t now = ks_now_ms();
                for (int r = 0; r < rows; r++) {
                        ks_histogram_observe(svc->feed_lag_seconds,
                                             (double)(now - ks_pg_int(res, r, 5)) / 1000.0);
                }
                ks_counter_add(svc->feed_events, (uint64_t)rows);
                ks_counter_add(svc->feed_deliveries, (uint64_t)n_deliveries);
        }
        PQclear(res);
        return rc;
}

int wh_feed_step(wh_service *svc, PGconn *conn, bool *more)
{
        int rc = KS_OK;

        *more = false;
        for (size_t i = 0; i < wh_sources_n && rc == KS_OK; i++) {
                int n = 0;
                if ((rc = page(svc, conn, wh_sources[i], &n)) != KS_OK) {
                        ks_pg_rollback(conn);
                        /* Before the source's migration has run: its outbox has no xid yet. */
                        ks_log_warn(NULL, "webhook feed step failed", "{s:s, s:s}", "source",
                                    wh_sources[i], "code", ks_code_name(rc));
                } else if (n == svc->cfg->feed_batch_max) {
                        *more = true;
                }
        }
        return rc;
}
