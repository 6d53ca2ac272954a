/*
 * The ledger relay's queue (services/billing/relay.c, migration
 * 007_postings_queue.sql), on the stack's billing replicas:
 *
 * - a posting inserted by anyone is queued by the postings' trigger (here a
 *   hand-written row, as a replica of an older release would write it);
 * - a posting the relay refuses (its packed chain cannot be read) is counted
 *   at every round, failed once its attempts reach
 *   KEELSON_BILLING_RELAY_ATTEMPTS_MAX (20 on the stack), then leaves the
 *   queue and is never sent again;
 * - a queued id whose posting was deleted by hand leaves the queue.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "auth_it.h"
#include "ks_crypto.h"

#define ATTEMPTS_MAX 20    /* KEELSON_BILLING_RELAY_ATTEMPTS_MAX's default */
#define WAIT_MS      30000 /* 20 rounds of a 100 ms poll, with room */

static long queued(const char *id)
{
        const char *p[1] = {id};
        return ait_sql_long("SELECT count(*) FROM billing.postings_queue WHERE id = $1::int8", 1,
                            p);
}

/* Waits until sql (one long; $1 the id) gives want; false after WAIT_MS. */
static bool wait_for(const char *sql, const char *id, long want)
{
        const char *p[1] = {id};
        for (int waited = 0; waited < WAIT_MS; waited += 50) {
                if (ait_sql_long(sql, 1, p) == want) {
                        return true;
                }
                it_sleep_ms(50);
        }
        return false;
}

/* Inserts a posting as a writer of any release would, for a new tenant and source; *id. */
static void insert_posting(PGconn *pg, char id[24])
{
        char tenant[37], source[37];
        const char *p[2] = {tenant, source};

        assert_int_equal(ks_uuid_v4(tenant), 0);
        assert_int_equal(ks_uuid_v4(source), 0);
        /* Its packed chain cannot be read: the relay refuses it at every round. */
        PGresult *r = it_sql(pg,
                             "INSERT INTO billing.postings (tenant_id, source_type, source_id,"
                             " currency, n_transfers, transfers, accounts)"
                             " VALUES ($1::uuid, 1, $2::uuid, 'USD', 1, '\\x00ff', '\\x00ff')"
                             " RETURNING id",
                             2, p);
        snprintf(id, 24, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
}

static void test_refused_posting_fails_and_leaves_queue(void **state)
{
        char id[24];
        PGconn *pg = ait_pg();

        (void)state;
        insert_posting(pg, id);
        PQfinish(pg);
        assert_true(wait_for("SELECT count(*) FROM billing.postings WHERE id = $1::int8 AND failed",
                             id, 1));
        const char *ip[1] = {id};
        assert_int_equal(
            ait_sql_long("SELECT attempts FROM billing.postings WHERE id = $1::int8", 1, ip),
            ATTEMPTS_MAX);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM billing.postings WHERE id = $1::int8"
                                      " AND last_error = 'the posting''s packed chain cannot be"
                                      " read'",
                                      1, ip),
                         1);
        assert_int_equal(queued(id), 0);
        /* Nothing claims it again: its attempts stay where they stopped. */
        it_sleep_ms(500);
        assert_int_equal(
            ait_sql_long("SELECT attempts FROM billing.postings WHERE id = $1::int8", 1, ip),
            ATTEMPTS_MAX);
}

static void test_gone_posting_leaves_queue(void **state)
{
        char id[24];
        PGconn *pg = ait_pg();

        (void)state;
        /* Inserted and deleted in one transaction: the trigger queued its id. */
        PQclear(it_sql(pg, "BEGIN", 0, NULL));
        insert_posting(pg, id);
        const char *ip[1] = {id};
        assert_int_equal(
            it_sql_long(pg, "SELECT count(*) FROM billing.postings_queue WHERE id = $1::int8", 1,
                        ip),
            1);
        PQclear(it_sql(pg, "DELETE FROM billing.postings WHERE id = $1::int8", 1, ip));
        PQclear(it_sql(pg, "COMMIT", 0, NULL));
        PQfinish(pg);
        assert_true(
            wait_for("SELECT count(*) FROM billing.postings_queue WHERE id = $1::int8", id, 0));
}

/* How often billing.postings_queue was read by a sequential scan, so far. */
static long queue_seq_scans(void)
{
        return ait_sql_long("SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables"
                            " WHERE schemaname = 'billing' AND relname = 'postings_queue'",
                            0, NULL);
}

/*
 * The relay's claim is planned on an empty queue its statistics call empty
 * (VACUUM ANALYZE, then the relay's empty rounds), and then a backlog of
 * postings arrives at once, as after an outage of the ledger. The relay
 * works through it reading the queue by its key (every posting here is
 * refused at each of its ATTEMPTS_MAX rounds, so the backlog is claimed
 * again and again): the queue's statistics count no sequential scan while
 * it does. The waits read billing.postings, not the queue.
 */
static void test_backlog_is_read_by_the_queues_key(void **state)
{
        enum { BACKLOG = 1500 };
        char tenant[37], first[24], backlog[16];
        PGconn *pg = ait_pg();

        (void)state;
        PQclear(it_sql(pg, "VACUUM ANALYZE billing.postings_queue", 0, NULL));
        /*
         * The relay's rounds now plan on the empty queue; a backend reports its
         * statistics at most once a second, at the end of a transaction.
         */
        it_sleep_ms(2500);
        long before = queue_seq_scans();
        assert_int_equal(ks_uuid_v4(tenant), 0);
        snprintf(backlog, sizeof(backlog), "%d", BACKLOG);
        const char *p[2] = {tenant, backlog};
        PGresult *r = it_sql(pg,
                             "INSERT INTO billing.postings (tenant_id, source_type, source_id,"
                             " currency, n_transfers, transfers, accounts)"
                             " SELECT $1::uuid, 1, gen_random_uuid(), 'USD', 1, '\\x00ff',"
                             " '\\x00ff' FROM generate_series(1, $2::int4) RETURNING id",
                             2, p);
        assert_int_equal(PQntuples(r), BACKLOG);
        snprintf(first, sizeof(first), "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        PQfinish(pg);
        const char *tp[1] = {tenant};
        bool done = false;
        for (int waited = 0; !done && waited < 4 * WAIT_MS; waited += 100) {
                done = ait_sql_long("SELECT count(*) FROM billing.postings WHERE tenant_id ="
                                    " $1::uuid AND failed",
                                    1, tp) == BACKLOG;
                it_sleep_ms(100);
        }
        assert_true(done);
        it_sleep_ms(2500); /* the relay's empty rounds carry its statistics out */
        assert_int_equal(queue_seq_scans(), before);
        assert_int_equal(queued(first), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_refused_posting_fails_and_leaves_queue),
            cmocka_unit_test(test_gone_posting_leaves_queue),
            cmocka_unit_test(test_backlog_is_read_by_the_queues_key),
        };
        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
