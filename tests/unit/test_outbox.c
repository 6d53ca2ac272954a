/*
 * ks_outbox against a real, throwaway PostgreSQL (support/pg_cluster.h) and
 * an in-process broker: what a subscriber hears and what the table holds
 * after commits, rollbacks, several relays, a relay restart, a database
 * restart, retention, and a publisher with no broker until one comes up. Each test has its own
 * schema, and its own topic prefix (the schema name and a dot), so one test's late events cannot
 * satisfy another's.
 *
 * pub/sub delivers only to peers already connected, so every subscriber is
 * first "warmed": probe events go through the relays' shared publisher until
 * one arrives, which proves both the publisher's and the subscriber's link
 * to the broker are up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "broker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ks_broker.h"
#include "ks_code.h"
#include "ks_events.h"
#include "ks_metrics.h"
#include "ks_outbox.h"
#include "ks_pg.h"
#include "pg_db.h"

#define TENANT      "7d3c1f0e-5b2a-4c8d-9e6f-0a1b2c3d4e5f"
#define WAIT_MS     10000 /* generous: "arrives", never "arrives within" */
#define QUIET_MS    1000  /* how long "nothing arrives" is watched */
#define EVENTS_MANY 200
#define ADDERS      4

typedef Keelson__Events__V1__Event event;

static struct {
        pg_cluster pg;
        ks_broker *broker;
        char base[64];
        ks_publisher *pub; /* shared by every relay of the tests */
} fx;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int group_setup(void **state)
{
        (void)state;
        if (pg_cluster_start(&fx.pg) != 0) {
                return -1;
        }
        const char *bases[] = {fx.base};
        if (test_broker_start(&fx.broker, fx.base, sizeof(fx.base)) != 0 ||
            ks_publisher_new(&fx.pub, bases, 1) != KS_OK) {
                return -1;
        }
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        ks_publisher_free(fx.pub);
        ks_broker_stop(fx.broker);
        pg_cluster_stop(&fx.pg);
        return 0;
}

/* ---- database helpers ------------------------------------------------------- */

static PGconn *db(void)
{
        PGconn *c = NULL;
        /* Retried: right after a database restart the server may still be coming up. */
        for (int i = 0; i < 100; i++) {
                c = PQconnectdb(fx.pg.dsn);
                if (PQstatus(c) == CONNECTION_OK) {
                        return c;
                }
                PQfinish(c);
                sleep_ms(100);
        }
        fail_msg("cannot connect to the test database");
        return NULL;
}

static void sql(PGconn *c, const char *fmt, ...)
{
        char buf[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        PGresult *res = PQexec(c, buf);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                fprintf(stderr, "%s: %s", buf, PQerrorMessage(c));
        }
        PQclear(res);
        assert_true(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

static long long sql_int(PGconn *c, const char *fmt, ...)
{
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        PGresult *res = PQexec(c, buf);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(res), 1);
        long long v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return v;
}

/* Polls a count until it equals expect; false when it never did within WAIT_MS. */
static bool wait_count(PGconn *c, long long expect, const char *query)
{
        int64_t deadline = now_ms() + WAIT_MS;
        long long v;
        while ((v = sql_int(c, "%s", query)) != expect && now_ms() < deadline) {
                sleep_ms(20);
        }
        return v == expect;
}

/* Waits until expect rows of schema's outbox are published: their ids are off the queue. */
static bool wait_published_rows(PGconn *c, const char *schema, long long expect)
{
        char q[256];
        snprintf(q, sizeof(q),
                 "SELECT count(*) FROM %s.outbox o WHERE NOT EXISTS"
                 " (SELECT 1 FROM %s.outbox_queue q WHERE q.id = o.id)",
                 schema, schema);
        return wait_count(c, expect, q);
}

/* The relay counts a batch after its COMMIT, so a reader that saw the rows marked waits for it. */
static bool wait_published(const ks_outbox_relay *r, uint64_t expect)
{
        int64_t deadline = now_ms() + WAIT_MS;
        while (ks_outbox_relay_published(r) != expect && now_ms() < deadline) {
                sleep_ms(20);
        }
        return ks_outbox_relay_published(r) == expect;
}

/* The DDL of ks_outbox.h, in a fresh schema. */
static void create_outbox(const char *schema)
{
        PGconn *c = db();
        sql(c,
            "CREATE SCHEMA %s;"
            "CREATE TABLE %s.outbox (id bigserial PRIMARY KEY, event_id uuid NOT NULL UNIQUE,"
            " topic text NOT NULL, tenant_id uuid, payload bytea NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now());"
            "CREATE TABLE %s.outbox_queue (id int8 PRIMARY KEY);"
            "CREATE FUNCTION %s.outbox_queue_add() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO %s.outbox_queue (id) SELECT id FROM new_events"
            " ON CONFLICT DO NOTHING; RETURN NULL; END $$;"
            "CREATE TRIGGER outbox_queued AFTER INSERT ON %s.outbox"
            " REFERENCING NEW TABLE AS new_events"
            " FOR EACH STATEMENT EXECUTE FUNCTION %s.outbox_queue_add();",
            schema, schema, schema, schema, schema, schema, schema);
        PQfinish(c);
}

static void payload_of(int i, char *out, size_t len)
{
        snprintf(out, len, "payload-%d", i);
}

/* Adds n events "<schema>.created" in one transaction; ids (37 bytes each) may be NULL. */
static void add_events(PGconn *c, const char *schema, int first, int n, bool commit, char *ids)
{
        char topic[128], payload[64];
        snprintf(topic, sizeof(topic), "%s.created", schema);
        assert_int_equal(ks_pg_begin(c, "test"), KS_OK);
        for (int i = 0; i < n; i++) {
                payload_of(first + i, payload, sizeof(payload));
                assert_int_equal(ks_outbox_add(c, "test", schema, topic, TENANT,
                                               (const uint8_t *)payload, strlen(payload),
                                               ids != NULL ? ids + 37 * i : NULL),
                                 KS_OK);
        }
        if (commit) {
                assert_int_equal(ks_pg_commit(c, "test"), KS_OK);
        } else {
                ks_pg_rollback(c);
        }
}

/* ---- bus helpers --------------------------------------------------------------- */

static ks_outbox_relay *relay_start(const char *schema, int batch_max, int poll_ms, int retention_s)
{
        ks_outbox_relay *r = NULL;
        ks_outbox_relay_options o = {.dsn = fx.pg.dsn,
                                     .schema = schema,
                                     .publisher = fx.pub,
                                     .batch_max = batch_max,
                                     .poll_ms = poll_ms,
                                     .retention_s = retention_s};
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_OK);
        return r;
}

static bool is_probe(const event *ev)
{
        size_t len = strlen(ev->topic);
        return len >= 6 && strcmp(ev->topic + len - 6, ".probe") == 0;
}

/* A subscriber to "<schema>.", known to be connected (see the top of the file). */
static ks_subscriber *subscribe(const char *schema)
{
        char prefix[80], probe[96];
        snprintf(prefix, sizeof(prefix), "%s.", schema);
        snprintf(probe, sizeof(probe), "%s.probe", schema);
        const char *bases[] = {fx.base};
        const char *prefixes[] = {prefix};
        ks_subscriber *s = NULL;
        assert_int_equal(ks_subscriber_new(&s, bases, 1, prefixes, 1), KS_OK);
        event ev = KEELSON__EVENTS__V1__EVENT__INIT;
        ev.event_id = "probe";
        ev.topic = probe;
        for (int i = 0; i < 200; i++) {
                assert_int_equal(ks_publish(fx.pub, &ev), KS_OK);
                event *got = NULL;
                if (ks_subscriber_next(s, 50, &got) == KS_OK) {
                        keelson__events__v1__event__free_unpacked(got, NULL);
                        return s;
                }
        }
        fail_msg("the subscriber never heard a probe");
        return NULL;
}

/* The next event that is not a probe, or NULL when none came within timeout_ms. */
static event *next_event(ks_subscriber *s, int timeout_ms)
{
        int64_t deadline = now_ms() + timeout_ms;
        for (;;) {
                int64_t left = deadline - now_ms();
                event *ev = NULL;
                if (left <= 0 || ks_subscriber_next(s, (int)left, &ev) != KS_OK) {
                        return NULL;
                }
                if (!is_probe(ev)) {
                        return ev;
                }
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
}

static uint64_t counter(const char *name, const char *schema)
{
        char labels[96];
        snprintf(labels, sizeof(labels), "schema=\"%s\"", schema);
        return ks_counter_value(ks_counter_get(ks_metrics_default(), name, "", labels));
}

static int64_t backlog(const char *schema)
{
        char labels[96];
        snprintf(labels, sizeof(labels), "schema=\"%s\"", schema);
        return ks_gauge_value(
            ks_gauge_get(ks_metrics_default(), "keelson_outbox_backlog", "", labels));
}

static bool metrics_contain(const char *line)
{
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(ks_metrics_render(ks_metrics_default(), &text, &len), 0);
        bool found = strstr(text, line) != NULL;
        free(text);
        return found;
}

/* ---- ks_outbox_add --------------------------------------------------------------- */

static void test_add_rejects_bad_input(void **state)
{
        (void)state;
        const uint8_t p[] = "x";
        char big_topic[130];
        memset(big_topic, 'a', sizeof(big_topic) - 1);
        big_topic[sizeof(big_topic) - 1] = '\0';
        create_outbox("ob_bad");
        PGconn *c = db();

        /* Outside a transaction the event would not be tied to any write. */
        assert_int_equal(ks_outbox_add(c, "t", "ob_bad", "ob_bad.x", NULL, p, 1, NULL),
                         KS_FAILED_PRECONDITION);
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        const char *bad_schemas[] = {"", "Auth", "1x", "a-b", "a;drop table x", NULL};
        for (size_t i = 0; i < sizeof(bad_schemas) / sizeof(bad_schemas[0]); i++) {
                assert_int_equal(
                    ks_outbox_add(c, "t", bad_schemas[i], "ob_bad.x", NULL, p, 1, NULL),
                    KS_INVALID_ARGUMENT);
        }
        const char *bad_topics[] = {"", "Users.Created", "a b", "a/b", big_topic, NULL};
        for (size_t i = 0; i < sizeof(bad_topics) / sizeof(bad_topics[0]); i++) {
                assert_int_equal(ks_outbox_add(c, "t", "ob_bad", bad_topics[i], NULL, p, 1, NULL),
                                 KS_INVALID_ARGUMENT);
        }
        assert_int_equal(ks_outbox_add(c, "t", "ob_bad", "ob_bad.x", "not-a-uuid", p, 1, NULL),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outbox_add(c, "t", "ob_bad", "ob_bad.x", NULL, NULL, 1, NULL),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(
            ks_outbox_add(c, "t", "ob_bad", "ob_bad.x", NULL, p, KS_OUTBOX_PAYLOAD_MAX + 1, NULL),
            KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outbox_add(NULL, "t", "ob_bad", "ob_bad.x", NULL, p, 1, NULL),
                         KS_INVALID_ARGUMENT);
        /* A database error comes back as the ks_pg_exec code: no such table. */
        assert_int_equal(ks_outbox_add(c, "t", "ob_none", "ob_none.x", NULL, p, 1, NULL),
                         KS_INTERNAL);
        ks_pg_rollback(c);

        /* The accepted edge cases: an empty tenant is none, an empty payload is fine. */
        char id[37];
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_int_equal(ks_outbox_add(c, "t", "ob_bad", "ob_bad.a-b_c.9", "", NULL, 0, id), KS_OK);
        assert_int_equal(ks_pg_commit(c, "t"), KS_OK);
        assert_int_equal(sql_int(c,
                                 "SELECT count(*) FROM ob_bad.outbox o JOIN ob_bad.outbox_queue q"
                                 " USING (id) WHERE event_id = '%s' AND tenant_id IS NULL AND"
                                 " payload = ''::bytea",
                                 id),
                         1);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_bad.outbox"), 1);
        PQfinish(c);
}

/* ---- the relay ------------------------------------------------------------------- */

static void test_committed_event_is_published(void **state)
{
        (void)state;
        create_outbox("ob_commit");
        ks_subscriber *s = subscribe("ob_commit");
        ks_outbox_relay *r = relay_start("ob_commit", 100, 200, 86400);
        PGconn *c = db();

        /* Binary payload: NUL and high bytes must survive the round trip. */
        const uint8_t payload[] = {0x00, 0xff, 0x10, 'x', 0x00, 0x80};
        char id[37];
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_int_equal(ks_outbox_add(c, "t", "ob_commit", "ob_commit.user_created", TENANT,
                                       payload, sizeof(payload), id),
                         KS_OK);
        assert_int_equal(ks_pg_commit(c, "t"), KS_OK);

        event *ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        assert_string_equal(ev->event_id, id);
        assert_string_equal(ev->topic, "ob_commit.user_created");
        assert_string_equal(ev->tenant_id, TENANT);
        assert_int_equal(ev->payload.len, sizeof(payload));
        assert_memory_equal(ev->payload.data, payload, sizeof(payload));
        /* occurred_at is the row's created_at. */
        assert_int_equal(ev->occurred_at_unix_ms,
                         sql_int(c,
                                 "SELECT floor(extract(epoch FROM created_at) * 1000)::int8 "
                                 "FROM ob_commit.outbox WHERE event_id = '%s'",
                                 id));
        keelson__events__v1__event__free_unpacked(ev, NULL);

        assert_true(wait_published_rows(c, "ob_commit", 1));
        assert_true(wait_published(r, 1));
        ks_outbox_relay_stop(r);
        assert_int_equal(counter("keelson_outbox_published_total", "ob_commit"), 1);
        assert_true(metrics_contain("keelson_outbox_lag_seconds_count{schema=\"ob_commit\"} 1"));
        assert_int_equal(backlog("ob_commit"), 0);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_rollback_publishes_nothing(void **state)
{
        (void)state;
        create_outbox("ob_rollback");
        ks_subscriber *s = subscribe("ob_rollback");
        ks_outbox_relay *r = relay_start("ob_rollback", 100, 100, 86400);
        PGconn *c = db();

        add_events(c, "ob_rollback", 0, 3, false, NULL);
        assert_null(next_event(s, QUIET_MS));
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_rollback.outbox"), 0);

        /* The relay was alive all along: a committed event after it comes through, alone. */
        char id[37];
        add_events(c, "ob_rollback", 10, 1, true, id);
        event *ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        assert_string_equal(ev->event_id, id);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_rollback.outbox"), 1);

        ks_outbox_relay_stop(r);
        assert_int_equal(ks_outbox_relay_published(NULL), 0);
        PQfinish(c);
        ks_subscriber_free(s);
}

/*
 * A batch: many events in one statement, in the order added, binary payloads
 * intact, published by a relay that polls (no NOTIFY) or that is woken.
 */
static void batch_round_trip(const char *schema, bool notify, int poll_ms)
{
        enum { N = 5 };
        const uint8_t payload[] = {0x00, 0xff, '"', '\\', '{', 0x80};
        create_outbox(schema);
        ks_subscriber *s = subscribe(schema);
        ks_outbox_relay *r = relay_start(schema, 100, poll_ms, 86400);
        PGconn *c = db();
        ks_outbox_batch b;
        char topic[64];

        assert_int_equal(ks_outbox_batch_begin(&b, schema, notify), KS_OK);
        snprintf(topic, sizeof(topic), "%s.x", schema);
        for (int i = 0; i < N; i++) {
                assert_int_equal(
                    ks_outbox_batch_add(&b, topic, i % 2 ? NULL : TENANT, payload, (size_t)i + 1),
                    KS_OK);
        }
        assert_int_equal(ks_outbox_batch_add(&b, "Bad Topic", NULL, payload, 1),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outbox_batch_finish(&b), KS_OK);
        assert_int_equal(ks_pg_begin(c, "t"), KS_OK);
        assert_int_equal(ks_pg_exec(c, "t", b.sql, b.n_params, b.params, NULL), KS_OK);
        assert_int_equal(ks_pg_commit(c, "t"), KS_OK);
        ks_outbox_batch_clear(&b);
        for (int i = 0; i < N; i++) {
                event *ev = next_event(s, WAIT_MS);
                assert_non_null(ev);
                assert_string_equal(ev->tenant_id, i % 2 ? "" : TENANT);
                assert_int_equal(ev->payload.len, i + 1);
                assert_memory_equal(ev->payload.data, payload, (size_t)i + 1);
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
        ks_outbox_relay_stop(r);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_batch_with_notify(void **state)
{
        (void)state;
        /* The relay's poll is long: only the NOTIFY can bring the events in time. */
        batch_round_trip("ob_batch_n", true, 60000);
}

static void test_batch_without_notify_is_polled(void **state)
{
        (void)state;
        batch_round_trip("ob_batch_p", false, 50);
}

/* Receives n events and checks they are ids[0..n) in that order, with their payloads. */
static void expect_in_order(ks_subscriber *s, const char *ids, int first, int n)
{
        char payload[64];
        for (int i = 0; i < n; i++) {
                event *ev = next_event(s, WAIT_MS);
                assert_non_null(ev);
                assert_string_equal(ev->event_id, ids + 37 * i);
                payload_of(first + i, payload, sizeof(payload));
                assert_int_equal(ev->payload.len, strlen(payload));
                assert_memory_equal(ev->payload.data, payload, strlen(payload));
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
}

static void test_transaction_events_in_order(void **state)
{
        (void)state;
        enum { N = 25 };
        char ids[N * 37];
        create_outbox("ob_order");
        ks_subscriber *s = subscribe("ob_order");
        /* Batches smaller than the transaction: order holds across batches too. */
        ks_outbox_relay *r = relay_start("ob_order", 7, 200, 86400);
        PGconn *c = db();

        add_events(c, "ob_order", 0, N, true, ids);
        expect_in_order(s, ids, 0, N);
        assert_true(wait_count(c, 0, "SELECT count(*) FROM ob_order.outbox_queue"));
        ks_outbox_relay_stop(r);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_relay_started_later_publishes_backlog(void **state)
{
        (void)state;
        enum { N = 30 };
        char ids[N * 37];
        create_outbox("ob_later");
        ks_subscriber *s = subscribe("ob_later");
        PGconn *c = db();

        /* Committed while no relay ran (as during a deploy): nobody heard the NOTIFYs. */
        add_events(c, "ob_later", 0, N / 2, true, ids);
        add_events(c, "ob_later", N / 2, N / 2, true, ids + 37 * (N / 2));
        ks_outbox_relay *r = relay_start("ob_later", 100, 30000, 86400);
        expect_in_order(s, ids, 0, N);
        assert_true(wait_count(c, 0, "SELECT count(*) FROM ob_later.outbox_queue"));
        ks_outbox_relay_stop(r);
        assert_int_equal(backlog("ob_later"), 0);
        PQfinish(c);
        ks_subscriber_free(s);
}

/*
 * An event row deleted by hand (an operator removing a row nothing can
 * take) leaves its id queued: the relay takes the id off the queue without
 * publishing anything, and the events after it go out in order.
 */
static void test_deleted_event_leaves_queue(void **state)
{
        (void)state;
        enum { N = 3 };
        char ids[N * 37];
        create_outbox("ob_gone");
        ks_subscriber *s = subscribe("ob_gone");
        PGconn *c = db();

        add_events(c, "ob_gone", 0, N, true, ids);
        sql(c, "DELETE FROM ob_gone.outbox WHERE event_id = '%s'", ids);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_gone.outbox_queue"), N);
        ks_outbox_relay *r = relay_start("ob_gone", 100, 30000, 86400);
        expect_in_order(s, ids + 37, 1, N - 1);
        assert_true(wait_count(c, 0, "SELECT count(*) FROM ob_gone.outbox_queue"));
        assert_true(wait_published(r, N - 1));
        ks_outbox_relay_stop(r);
        assert_int_equal(counter("keelson_outbox_published_total", "ob_gone"), N - 1);
        assert_int_equal(backlog("ob_gone"), 0);
        PQfinish(c);
        ks_subscriber_free(s);
}

/*
 * Whoever inserts an event, the outbox's trigger queues it: a writer that
 * only inserts the row (as the release before the queue did, still running
 * beside a newer one in a rolling upgrade) and a writer that queues its own
 * id as well (ON CONFLICT: once). Both go out, in order, after
 * ks_outbox_add's.
 */
static void test_any_insert_is_queued(void **state)
{
        (void)state;
        char ids[3 * 37];
        create_outbox("ob_any");
        ks_subscriber *s = subscribe("ob_any");
        PGconn *c = db();

        add_events(c, "ob_any", 0, 1, true, ids);
        PGresult *r = PQexec(c, "INSERT INTO ob_any.outbox (event_id, topic, payload)"
                                " VALUES (gen_random_uuid(), 'ob_any.created', 'payload-1')"
                                " RETURNING event_id");
        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        snprintf(ids + 37, 37, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        r = PQexec(c, "WITH ins AS (INSERT INTO ob_any.outbox (event_id, topic, payload)"
                      " VALUES (gen_random_uuid(), 'ob_any.created', 'payload-2')"
                      " RETURNING id, event_id), q AS (INSERT INTO ob_any.outbox_queue (id)"
                      " SELECT id FROM ins) SELECT event_id FROM ins");
        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        snprintf(ids + 74, 37, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_any.outbox_queue"), 3);
        ks_outbox_relay *rl = relay_start("ob_any", 100, 30000, 86400);
        expect_in_order(s, ids, 0, 3);
        assert_true(wait_published_rows(c, "ob_any", 3));
        ks_outbox_relay_stop(rl);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_notify_wakes_relay(void **state)
{
        (void)state;
        create_outbox("ob_notify");
        ks_subscriber *s = subscribe("ob_notify");
        /* Polling alone would take 30 s: an event within WAIT_MS came by NOTIFY. */
        ks_outbox_relay *r = relay_start("ob_notify", 100, 30000, 86400);
        PGconn *c = db();
        char id[37];

        /* The first event proves the relay is up and listening (it LISTENs before it claims). */
        add_events(c, "ob_notify", 0, 1, true, id);
        event *ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        sleep_ms(300); /* let a wake-up of the first event pass: the next must be its own */

        add_events(c, "ob_notify", 1, 1, true, id);
        ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        assert_string_equal(ev->event_id, id);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        ks_outbox_relay_stop(r);
        PQfinish(c);
        ks_subscriber_free(s);
}

/*
 * A claim looks CLAIM_WINDOW (1,024) ids below the highest it took: an
 * event whose transaction commits after 1,200 later ones were published
 * lies below that, and a claim from the queue's first id (at least once a
 * second) must still find it.
 */
static void test_late_commit_below_the_claims_is_published(void **state)
{
        (void)state;
        enum { LATER = 1200 };
        create_outbox("ob_late");
        ks_subscriber *s = subscribe("ob_late");
        ks_outbox_relay *r = relay_start("ob_late", 100, 50, 86400);
        PGconn *late = db(), *c = db();
        char id[37];

        assert_int_equal(ks_pg_begin(late, "test"), KS_OK);
        assert_int_equal(ks_outbox_add(late, "test", "ob_late", "ob_late.created", TENANT,
                                       (const uint8_t *)"late", 4, id),
                         KS_OK);
        sql(c,
            "INSERT INTO ob_late.outbox (event_id, topic, tenant_id, payload)"
            " SELECT gen_random_uuid(), 'ob_late.created', '%s', 'later'"
            " FROM generate_series(1, %d)",
            TENANT, LATER);
        assert_true(wait_published_rows(c, "ob_late", LATER));
        assert_true(sql_int(c, "SELECT max(id) FROM ob_late.outbox") >
                    sql_int(c, "SELECT min(id) FROM ob_late.outbox") + 1024);

        assert_int_equal(ks_pg_commit(late, "test"), KS_OK);
        assert_true(wait_published_rows(c, "ob_late", LATER + 1));
        bool seen = false;
        event *ev;
        while (!seen && (ev = next_event(s, WAIT_MS)) != NULL) {
                seen = strcmp(ev->event_id, id) == 0;
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
        assert_true(seen);
        ks_outbox_relay_stop(r);
        PQfinish(late);
        PQfinish(c);
        ks_subscriber_free(s);
}

/* How often a table of schema was read by a sequential scan / an index scan, so far. */
static long long scans_of(PGconn *c, const char *schema, const char *table, const char *kind)
{
        return sql_int(c,
                       "SELECT coalesce(%s, 0) FROM pg_stat_user_tables"
                       " WHERE schemaname = '%s' AND relname = '%s'",
                       kind, schema, table);
}

/*
 * The relay's statements are planned on an empty queue (its first claims,
 * and one event published), then a backlog arrives at once, as after an
 * outage. The relay drains it reading the queue by its key: the queue's
 * statistics count no sequential scan of it but its index's build.
 * (Planned on the empty queue, the claim scanned and sorted the whole queue
 * at every batch and the mark compared each queued id with the batch's:
 * quadratic in the backlog.) The waits here read the relay's counter, not
 * the queue.
 */
static void test_backlog_is_read_by_the_queues_key(void **state)
{
        (void)state;
        enum { BACKLOG = 3000 };
        create_outbox("ob_key");
        PGconn *c = db();
        /* Building the queue's primary key read the (empty) table once. */
        long long built = scans_of(c, "ob_key", "outbox_queue", "seq_scan");
        ks_outbox_relay *r = relay_start("ob_key", 100, 20, 86400);

        add_events(c, "ob_key", 0, 1, true, NULL);
        assert_true(wait_published(r, 1));
        sleep_ms(300); /* empty claims, planned on the empty queue */
        sql(c,
            "INSERT INTO ob_key.outbox (event_id, topic, tenant_id, payload)"
            " SELECT gen_random_uuid(), 'ob_key.created', '%s', 'backlog'"
            " FROM generate_series(1, %d)",
            TENANT, BACKLOG);
        assert_true(wait_published(r, 1 + BACKLOG));
        /*
         * A backend reports its table statistics at most once a second, at the
         * end of a transaction: the relay's empty claims carry them out.
         */
        long long index_scans = 0;
        int64_t deadline = now_ms() + WAIT_MS;
        while ((index_scans = scans_of(c, "ob_key", "outbox_queue", "idx_scan")) < BACKLOG / 100 &&
               now_ms() < deadline) {
                sleep_ms(100);
        }
        sleep_ms(1500);
        assert_true(index_scans >= BACKLOG / 100); /* a claim and a mark per batch, at least */
        assert_int_equal(scans_of(c, "ob_key", "outbox_queue", "seq_scan"), built);
        ks_outbox_relay_stop(r);
        PQfinish(c);
}

typedef struct adder {
        int first;
        int n;
} adder;

static void *add_thread(void *arg)
{
        adder *a = arg;
        PGconn *c = db();
        for (int i = 0; i < a->n; i += 5) {
                add_events(c, "ob_two", a->first + i, 5, true, NULL);
        }
        PQfinish(c);
        return NULL;
}

static int index_of(char (*seen)[37], int n, const char *id)
{
        for (int i = 0; i < n; i++) {
                if (strcmp(seen[i], id) == 0) {
                        return i;
                }
        }
        return -1;
}

static void test_two_relays_publish_each_event_once(void **state)
{
        (void)state;
        static char seen[EVENTS_MANY][37];
        int n_seen = 0, duplicates = 0;
        create_outbox("ob_two");
        ks_subscriber *s = subscribe("ob_two");
        ks_outbox_relay *a = relay_start("ob_two", 10, 100, 86400);
        ks_outbox_relay *b = relay_start("ob_two", 10, 100, 86400);

        pthread_t t[ADDERS];
        adder args[ADDERS];
        for (int i = 0; i < ADDERS; i++) {
                args[i] = (adder){.first = i * (EVENTS_MANY / ADDERS), .n = EVENTS_MANY / ADDERS};
                assert_int_equal(pthread_create(&t[i], NULL, add_thread, &args[i]), 0);
        }
        event *ev;
        /* Until every event came, then a quiet while: a duplicate would arrive in it. */
        while ((ev = next_event(s, n_seen < EVENTS_MANY ? WAIT_MS : QUIET_MS)) != NULL) {
                if (index_of(seen, n_seen, ev->event_id) >= 0 || n_seen == EVENTS_MANY) {
                        duplicates++;
                } else {
                        snprintf(seen[n_seen++], 37, "%s", ev->event_id);
                }
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
        for (int i = 0; i < ADDERS; i++) {
                pthread_join(t[i], NULL);
        }
        assert_int_equal(n_seen, EVENTS_MANY);
        assert_int_equal(duplicates, 0);
        assert_int_equal(ks_outbox_relay_published(a) + ks_outbox_relay_published(b), EVENTS_MANY);
        PGconn *c = db();
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_two.outbox_queue"), 0);
        PQfinish(c);
        ks_outbox_relay_stop(a);
        ks_outbox_relay_stop(b);
        ks_subscriber_free(s);
}

static void test_rejected_row_does_not_block_others(void **state)
{
        (void)state;
        create_outbox("ob_reject");
        ks_subscriber *s = subscribe("ob_reject");
        PGconn *c = db();
        /* Written around ks_outbox_add: a topic the bus refuses (longer than 128 bytes). */
        sql(c, "INSERT INTO ob_reject.outbox (event_id, topic, payload) "
               "VALUES (gen_random_uuid(), 'ob_reject.' || repeat('x', 200), '')");
        char id[37];
        add_events(c, "ob_reject", 0, 1, true, id);
        ks_outbox_relay *r = relay_start("ob_reject", 100, 100, 86400);

        event *ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        assert_string_equal(ev->event_id, id);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        /* The refused row stays, unpublished and counted; nothing is lost silently. */
        assert_true(wait_count(c, 1,
                               "SELECT count(*) FROM ob_reject.outbox o JOIN ob_reject.outbox_queue"
                               " q USING (id) WHERE length(topic) > 128"));
        assert_true(wait_published_rows(c, "ob_reject", 1));
        ks_outbox_relay_stop(r);
        assert_true(counter("keelson_outbox_publish_failures_total", "ob_reject") >= 1);
        assert_int_equal(backlog("ob_reject"), 1);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_database_restart(void **state)
{
        (void)state;
        create_outbox("ob_restart");
        ks_subscriber *s = subscribe("ob_restart");
        ks_outbox_relay *r = relay_start("ob_restart", 100, 200, 86400);
        PGconn *c = db();
        char id[37];

        add_events(c, "ob_restart", 0, 1, true, id);
        event *ev = next_event(s, WAIT_MS);
        assert_non_null(ev);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        PQfinish(c);

        /* Every session is terminated, the relay's included. */
        assert_int_equal(pg_cluster_restart(&fx.pg), 0);
        c = db();
        add_events(c, "ob_restart", 1, 1, true, id);
        ev = next_event(s, 3 * WAIT_MS);
        assert_non_null(ev);
        assert_string_equal(ev->event_id, id);
        keelson__events__v1__event__free_unpacked(ev, NULL);
        assert_true(wait_count(c, 0, "SELECT count(*) FROM ob_restart.outbox_queue"));
        assert_true(wait_published(r, 2));
        ks_outbox_relay_stop(r);
        PQfinish(c);
        ks_subscriber_free(s);
}

static void test_retention_deletes_old_published_rows(void **state)
{
        (void)state;
        enum { N = 5 };
        char ids[N * 37];
        create_outbox("ob_keep");
        ks_subscriber *s = subscribe("ob_keep");
        ks_outbox_relay *r = relay_start("ob_keep", 100, 200, 3600);
        PGconn *c = db();

        add_events(c, "ob_keep", 0, N, true, ids);
        expect_in_order(s, ids, 0, N);
        assert_true(wait_count(c, 0, "SELECT count(*) FROM ob_keep.outbox_queue"));
        ks_outbox_relay_stop(r);

        /* Three published rows written two hours ago; retention is one hour. */
        sql(c,
            "UPDATE ob_keep.outbox SET created_at = now() - interval '2 hours' "
            "WHERE event_id IN ('%s', '%s', '%s')",
            ids, ids + 37, ids + 74);
        /* A fresh relay runs a retention pass as it starts. */
        r = relay_start("ob_keep", 100, 200, 3600);
        assert_true(wait_count(c, 2, "SELECT count(*) FROM ob_keep.outbox"));
        assert_int_equal(sql_int(c,
                                 "SELECT count(*) FROM ob_keep.outbox WHERE event_id IN "
                                 "('%s', '%s')",
                                 ids + 111, ids + 148),
                         2);
        ks_outbox_relay_stop(r);
        PQfinish(c);
        ks_subscriber_free(s);
}

/*
 * The retention statement (ks_outbox_retention_sql), prepared with a generic
 * plan as the relay runs it, beside 20,000 published events none of which is
 * past retention: it reads a bounded part of the outbox (the condition on
 * created_at over the whole table read all of it at every pass). Then, with
 * the oldest three past retention and one of them still queued, it deletes
 * the two published ones.
 */
static void test_retention_pass_is_bounded(void **state)
{
        (void)state;
        enum { N = 20000, PAGES_MAX = 200 };
        char stmt[1024];
        create_outbox("ob_bound");
        PGconn *c = db();

        sql(c,
            "INSERT INTO ob_bound.outbox (event_id, topic, payload) SELECT gen_random_uuid(),"
            " 'ob_bound.created', decode(repeat('ab', 300), 'hex') FROM generate_series(1, %d)",
            N);
        sql(c, "DELETE FROM ob_bound.outbox_queue");
        sql(c, "SET plan_cache_mode = force_generic_plan");
        ks_outbox_retention_sql(stmt, sizeof(stmt), "ob_bound");
        sql(c, "PREPARE retention(int8) AS %s", stmt);

        sql(c, "BEGIN");
        long long pages = pg_db_pages(c, "EXECUTE retention(3600)");
        sql(c, "ROLLBACK");
        if (pages > PAGES_MAX) {
                fail_msg("a retention pass read %lld pages of %d young events", pages, N);
        }

        sql(c, "UPDATE ob_bound.outbox SET created_at = now() - interval '2 hours'"
               " WHERE id IN (SELECT id FROM ob_bound.outbox ORDER BY id LIMIT 3)");
        sql(c, "INSERT INTO ob_bound.outbox_queue (id) SELECT min(id) FROM ob_bound.outbox");
        PGresult *r = PQexec(c, "EXECUTE retention(3600)");
        assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
        assert_string_equal(PQcmdTuples(r), "2");
        PQclear(r);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_bound.outbox"), N - 2);
        PQfinish(c);
}

/*
 * pub/sub takes an event with no broker connected and drops it, so a relay
 * whose publisher has no broker must not publish (nor mark) anything: the
 * row waits, unpublished. Once a broker is up on the publisher's address,
 * the relay publishes the row and marks it, by itself.
 */
static void test_no_broker_leaves_rows_unpublished(void **state)
{
        (void)state;
        char base[64], id[37];
        ks_broker *probe = NULL, *late = NULL;
        ks_publisher *lonely = NULL;
        ks_outbox_relay *r = NULL;

        /* An address where no broker listens (one that just started and stopped there). */
        assert_int_equal(test_broker_start(&probe, base, sizeof(base)), 0);
        ks_broker_stop(probe);
        const char *bases[] = {base};
        assert_int_equal(ks_publisher_new(&lonely, bases, 1), KS_OK);
        create_outbox("ob_nobroker");
        ks_outbox_relay_options o = {.dsn = fx.pg.dsn,
                                     .schema = "ob_nobroker",
                                     .publisher = lonely,
                                     .batch_max = 100,
                                     .poll_ms = 100,
                                     .retention_s = 86400};
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_OK);
        PGconn *c = db();

        add_events(c, "ob_nobroker", 0, 1, true, id);
        sleep_ms(QUIET_MS + 500); /* the relay had its chances: several tries and a poll */
        assert_int_equal(ks_publisher_connected(lonely), 0);
        assert_int_equal(sql_int(c,
                                 "SELECT count(*) FROM ob_nobroker.outbox o JOIN"
                                 " ob_nobroker.outbox_queue q USING (id) WHERE event_id = '%s'",
                                 id),
                         1);
        assert_int_equal(ks_outbox_relay_published(r), 0);
        assert_int_equal(counter("keelson_outbox_published_total", "ob_nobroker"), 0);

        /* A broker comes up where the publisher dials: the row goes out and is marked. */
        assert_int_equal(ks_broker_start(&late, base), KS_OK);
        assert_true(wait_published_rows(c, "ob_nobroker", 1));
        assert_true(ks_publisher_connected(lonely) > 0);
        assert_true(wait_published(r, 1));
        assert_int_equal(counter("keelson_outbox_published_total", "ob_nobroker"), 1);
        assert_int_equal(sql_int(c, "SELECT count(*) FROM ob_nobroker.outbox"), 1);
        ks_outbox_relay_stop(r);
        ks_publisher_free(lonely);
        ks_broker_stop(late);
        PQfinish(c);
}

static void test_relay_options_rejected(void **state)
{
        (void)state;
        ks_outbox_relay *r = (ks_outbox_relay *)1;
        ks_outbox_relay_options ok = {.dsn = fx.pg.dsn,
                                      .schema = "ob_opts",
                                      .publisher = fx.pub,
                                      .batch_max = 100,
                                      .poll_ms = 1000,
                                      .retention_s = 60};
        ks_outbox_relay_options o = ok;
        o.schema = "Bad";
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_INVALID_ARGUMENT);
        assert_null(r);
        o = ok;
        o.batch_max = 0;
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_INVALID_ARGUMENT);
        o = ok;
        o.poll_ms = 0;
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_INVALID_ARGUMENT);
        o = ok;
        o.publisher = NULL;
        assert_int_equal(ks_outbox_relay_start(&r, &o), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outbox_relay_start(&r, NULL), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outbox_relay_start(NULL, &ok), KS_INVALID_ARGUMENT);

        /* No table yet, and a stop still comes promptly and cleanly. */
        assert_int_equal(ks_outbox_relay_start(&r, &ok), KS_OK);
        sleep_ms(300);
        ks_outbox_relay_stop(r);
        ks_outbox_relay_stop(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_add_rejects_bad_input),
            cmocka_unit_test(test_committed_event_is_published),
            cmocka_unit_test(test_rollback_publishes_nothing),
            cmocka_unit_test(test_transaction_events_in_order),
            cmocka_unit_test(test_batch_with_notify),
            cmocka_unit_test(test_batch_without_notify_is_polled),
            cmocka_unit_test(test_relay_started_later_publishes_backlog),
            cmocka_unit_test(test_deleted_event_leaves_queue),
            cmocka_unit_test(test_any_insert_is_queued),
            cmocka_unit_test(test_notify_wakes_relay),
            cmocka_unit_test(test_two_relays_publish_each_event_once),
            cmocka_unit_test(test_late_commit_below_the_claims_is_published),
            cmocka_unit_test(test_backlog_is_read_by_the_queues_key),
            cmocka_unit_test(test_rejected_row_does_not_block_others),
            cmocka_unit_test(test_relay_options_rejected),
            cmocka_unit_test(test_no_broker_leaves_rows_unpublished),
            cmocka_unit_test(test_retention_deletes_old_published_rows),
            cmocka_unit_test(test_retention_pass_is_bounded),
            cmocka_unit_test(test_database_restart),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
