/*
 * Concurrency: several client threads hammer a handful of hot accounts of
 * one tenant at once, through the gateway and the two ledger replicas of
 * the test stack, with single-phase, pending, post and void transfers,
 * linked chains, limits and resent batches. Afterwards:
 *   - every request succeeded (none failed with a deadlock, a serialization
 *     failure or a timeout), and PostgreSQL counted no deadlock;
 *   - both replicas served batches;
 *   - the invariants hold, checked in SQL on the stored rows: per ledger,
 *     sum of debits_posted = sum of credits_posted and the same for pending;
 *     every account's balances equal the sums of its transfers; every
 *     pending transfer is resolved at most once; timestamps are unique.
 */
#include "ledger_it.h"

#include <inttypes.h>
#include <pthread.h>
#include <unistd.h>

#define THREADS      6
#define BATCHES      25
#define BATCH_EVENTS 40
#define HOT_ACCOUNTS 8
#define PENDING_MAX  (BATCHES * BATCH_EVENTS)

static it_stack g_stack;
static lt_tenant g_t;

typedef struct worker {
        int index;
        uint64_t rng;
        int failures; /* requests that did not answer 200 */
        char last_error[64];
        u128 pending[PENDING_MAX];
        int n_pending;
        uint64_t next;
} worker;

static uint64_t rnd(worker *w)
{
        w->rng ^= w->rng << 13;
        w->rng ^= w->rng >> 7;
        w->rng ^= w->rng << 17;
        return w->rng;
}

static u128 new_id(worker *w)
{
        return lt_u128((uint64_t)w->index + 1, ++w->next);
}

static void make_event(worker *w, lt_transfer_pb *t)
{
        u128 dr = 1 + rnd(w) % HOT_ACCOUNTS, cr = 1 + rnd(w) % HOT_ACCOUNTS;
        int k = (int)(rnd(w) % 100);

        if (cr == dr) {
                cr = 1 + dr % HOT_ACCOUNTS;
        }
        if (k < 55) {
                lt_transfer_init(t, new_id(w), dr, cr, 1 + rnd(w) % 50, 1, 1, 0);
        } else if (k < 80 || w->n_pending == 0) {
                u128 id = new_id(w);
                lt_transfer_init(t, id, dr, cr, 1 + rnd(w) % 50, 1, 1, TF_PENDING);
                w->pending[w->n_pending++] = id;
        } else {
                /* Post or void one of this thread's pending transfers (maybe resolved). */
                u128 p = w->pending[rnd(w) % (uint64_t)w->n_pending];
                bool post = rnd(w) % 2 == 0;
                lt_transfer_init(t, new_id(w), 0, 0, post ? U128_MAX : 0, 0, 0,
                                 post ? TF_POST : TF_VOID);
                t->pending_id = lt_lo(p);
                t->pending_id_hi = lt_hi(p);
        }
        if (rnd(w) % 10 == 0) {
                t->flags |= TF_LINKED; /* chains of various lengths */
        }
}

/*
 * POSTs a CreateTransfers batch in protobuf; 0 with *r to free, or -1 with
 * the reason in err. No cmocka assertion: the worker threads call this.
 */
static int post_batch(lt_transfer_pb *x, int n, it_http_response *r, char *err, size_t err_len)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        lt_transfer_pb *ptrs[BATCH_EVENTS];
        uint8_t body[BATCH_EVENTS * 128];
        char auth[LT_TOKEN_MAX + 32];
        const char *headers[2] = {auth, NULL};

        if (n > BATCH_EVENTS) {
                snprintf(err, err_len, "batch too large");
                return -1;
        }
        for (int i = 0; i < n; i++) {
                ptrs[i] = &x[i];
        }
        req.n_transfers = (size_t)n;
        req.transfers = ptrs;
        if (protobuf_c_message_get_packed_size(&req.base) > sizeof(body)) {
                snprintf(err, err_len, "batch too large");
                return -1;
        }
        size_t len = protobuf_c_message_pack(&req.base, body);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_t.token);
        if (it_http_post(g_t.gateway, LT_PATH "CreateTransfers", "application/proto", body, len,
                         headers, r) != 0) {
                snprintf(err, err_len, "no HTTP response");
                return -1;
        }
        return 0;
}

/* Sends one batch, counting a failure unless it answers 200. */
static void send(worker *w, lt_transfer_pb *x, int n)
{
        it_http_response r;

        if (post_batch(x, n, &r, w->last_error, sizeof(w->last_error)) != 0) {
                w->failures++;
                return;
        }
        if (r.status != 200) {
                w->failures++;
                snprintf(w->last_error, sizeof(w->last_error), "HTTP %ld %.40s", r.status, r.body);
        }
        it_http_response_free(&r);
}

static void *hammer(void *arg)
{
        worker *w = arg;
        lt_transfer_pb x[BATCH_EVENTS];

        for (int b = 0; b < BATCHES; b++) {
                for (int i = 0; i < BATCH_EVENTS; i++) {
                        make_event(w, &x[i]);
                }
                send(w, x, BATCH_EVENTS);
                if (rnd(w) % 8 == 0) {
                        send(w, x, BATCH_EVENTS); /* a client retry: all exists, or same */
                }
        }
        return NULL;
}

/* ---- measurements ---------------------------------------------------------------------- */

static int64_t deadlocks(PGconn *c)
{
        return it_sql_long(c, "SELECT deadlocks FROM pg_stat_database WHERE datname = 'keelson'", 0,
                           NULL);
}

/* Transfers served by the replica whose health port is port (from its metrics). */
static long served_by(int port)
{
        return (long)it_metric_sum_at(port, "keelson_ledger_events_total",
                                      "{kind=\"transfer\",result=\"ok\"}");
}

/* ---- the invariants, in SQL ---------------------------------------------------------------- */

static const char sql_resolved_twice[] =
    "SELECT count(*) FROM (SELECT pending_id FROM ledger.transfers"
    " WHERE tenant_id = '%s' AND (flags & 12) <> 0 GROUP BY pending_id HAVING count(*) > 1) x";

static const char sql_pending_states[] =
    "SELECT count(*) FROM ledger.transfers t JOIN ledger.pending_transfers p"
    " ON p.tenant_id = t.tenant_id AND p.id = t.pending_id"
    " WHERE t.tenant_id = '%s' AND (t.flags & 12) <> 0"
    " AND p.status <> CASE WHEN (t.flags & 4) <> 0 THEN 2 ELSE 3 END";

static const char sql_timestamps[] =
    "SELECT count(*) - count(DISTINCT ts) FROM (SELECT timestamp AS ts FROM ledger.transfers"
    " WHERE tenant_id = '%s' UNION ALL SELECT timestamp FROM ledger.accounts"
    " WHERE tenant_id = '%s') x";

static void assert_invariants(PGconn *c)
{
        char sql[4096];

        assert_int_equal(it_sql_long(c, lt_sql_ledger_sums, 0, NULL), 0);
        snprintf(sql, sizeof(sql), lt_sql_account_sums, g_t.tenant_id);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        snprintf(sql, sizeof(sql), sql_resolved_twice, g_t.tenant_id);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        snprintf(sql, sizeof(sql), sql_pending_states, g_t.tenant_id);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        snprintf(sql, sizeof(sql), sql_timestamps, g_t.tenant_id, g_t.tenant_id);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM ledger.transfers WHERE tenant_id = '%s'",
                 g_t.tenant_id);
        assert_true(it_sql_long(c, sql, 0, NULL) > THREADS * BATCHES); /* the hammering did write */
}

static void test_hammer_hot_accounts(void **state)
{
        static worker workers[THREADS];
        pthread_t threads[THREADS];
        lt_account_pb a[HOT_ACCOUNTS];
        int results[HOT_ACCOUNTS], ports[IT_REPLICAS_MAX];
        long before[IT_REPLICAS_MAX];
        (void)state;

        for (int i = 0; i < HOT_ACCOUNTS; i++) {
                /* One account with a limit: refusals must not break anything either. */
                lt_account_init(&a[i], (u128)i + 1, 1, 1,
                                i == 0 ? AF_DEBITS_MUST_NOT_EXCEED_CREDITS : 0);
        }
        lt_create_accounts(&g_t, a, HOT_ACCOUNTS, results);
        int n_ports = lt_ledger_ports(ports, IT_REPLICAS_MAX);
        assert_true(n_ports >= 2);
        for (int i = 0; i < n_ports; i++) {
                before[i] = served_by(ports[i]);
        }
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        int64_t deadlocks_before = deadlocks(c);

        for (int i = 0; i < THREADS; i++) {
                workers[i] = (worker){.index = i, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)};
                assert_int_equal(pthread_create(&threads[i], NULL, hammer, &workers[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(threads[i], NULL);
                if (workers[i].failures != 0) {
                        fail_msg("thread %d: %d requests failed, the last with %s", i,
                                 workers[i].failures, workers[i].last_error);
                }
        }
        for (int i = 0; i < n_ports; i++) {
                long after = served_by(ports[i]);
                if (after <= before[i]) {
                        fail_msg("ledger replica %d (port %d) served no transfer", i, ports[i]);
                }
        }
        assert_invariants(c);
        /* The statistics are flushed at most a second late: give them that. */
        sleep(2);
        assert_int_equal(deadlocks(c) - deadlocks_before, 0);
        PQfinish(c);
}

/* ---- small batches of one tenant at once: grouped, each with its own results ---------- */

/*
 * Pairs of threads send small batches of one tenant at the same moment, so
 * that the replicas run many of them in one transaction
 * (KEELSON_LEDGER_GROUP_BATCHES, on by default). Each request must get what
 * it would get alone, in some order: the two threads of a pair send the same
 * transfer (one ok, the other exists), a resend is exists, a chain left open
 * at the end of a request is linked_event_chain_open however many requests
 * ran with it, a chain that fails inside fails whole without touching its
 * neighbours in the transaction, and when one thread of a pair posts a
 * pending transfer as the other voids it, exactly one of them resolves it
 * and the other is told it was already posted or voided.
 */
#define SMALL_THREADS 8
#define SMALL_ROUNDS  40
#define LIMITED       1 /* debits must not exceed credits, never credited */

typedef struct small_worker {
        int index;
        int failures;
        char last_error[128];
        int shared_ok[SMALL_ROUNDS];   /* per round: did the pair's shared transfer say ok here */
        int resolved_ok[SMALL_ROUNDS]; /* per round: did this thread resolve the pair's pending */
} small_worker;

/* The pending transfer the pair of threads p races to resolve in round r. */
static u128 pair_pending(int p, int round)
{
        return lt_u128(5000 + (uint64_t)p, (uint64_t)round + 1);
}

/* Sends a batch and reads its results; no cmocka assertion: a worker thread runs this. */
static int send_small(small_worker *w, lt_transfer_pb *x, int n, int *results)
{
        it_http_response r;

        if (post_batch(x, n, &r, w->last_error, sizeof(w->last_error)) != 0) {
                return -1;
        }
        int rc = -1;
        if (r.status == 200) {
                Keelson__Ledger__V1__CreateTransfersResponse *resp =
                    (Keelson__Ledger__V1__CreateTransfersResponse *)protobuf_c_message_unpack(
                        &keelson__ledger__v1__create_transfers_response__descriptor, NULL,
                        r.body_len, (const uint8_t *)r.body);
                if (resp != NULL && resp->n_results == (size_t)n) {
                        for (int i = 0; i < n; i++) {
                                results[i] = resp->results[i];
                        }
                        rc = 0;
                }
                if (resp != NULL) {
                        protobuf_c_message_free_unpacked(&resp->base, NULL);
                }
        }
        if (rc != 0) {
                snprintf(w->last_error, sizeof(w->last_error), "HTTP %ld %.60s", r.status, r.body);
        }
        it_http_response_free(&r);
        return rc;
}

/* Records a result that is not the one expected. */
static void expect_small(small_worker *w, int round, const char *what, const int *got,
                         const int *want, int n)
{
        for (int i = 0; i < n; i++) {
                if (got[i] != want[i]) {
                        w->failures++;
                        snprintf(w->last_error, sizeof(w->last_error),
                                 "round %d, %s, event %d: %s, expected %s", round, what, i,
                                 lt_tr_name(got[i]), lt_tr_name(want[i]));
                        return;
                }
        }
}

static void *small_batches(void *arg)
{
        small_worker *w = arg;
        uint64_t mine = 100 + (uint64_t)w->index, pair = 1000 + (uint64_t)w->index / 2, next = 0;
        u128 dr = 2 + (u128)(w->index % 4), cr = 2 + (u128)((w->index + 1) % 4);
        lt_transfer_pb x[2];
        int got[2];

        for (int round = 0; round < SMALL_ROUNDS; round++) {
                /* The pair's shared transfer: the same id and fields from both threads. */
                lt_transfer_init(&x[0], lt_u128(pair, (uint64_t)round + 1), 2, 3, 1, 1, 1, 0);
                if (send_small(w, x, 1, got) != 0) {
                        w->failures++;
                        continue;
                }
                w->shared_ok[round] = got[0] == TR(ok);
                if (got[0] != TR(ok) && got[0] != TR(exists)) {
                        expect_small(w, round, "shared", got, (int[]){TR(exists)}, 1);
                }
                /* Sent again: exists, whoever created it. */
                if (send_small(w, x, 1, got) != 0) {
                        w->failures++;
                        continue;
                }
                expect_small(w, round, "resend", got, (int[]){TR(exists)}, 1);

                /* A chain of two that holds. */
                lt_transfer_init(&x[0], lt_u128(mine, ++next), dr, cr, 2, 1, 1, TF_LINKED);
                lt_transfer_init(&x[1], lt_u128(mine, ++next), cr, dr, 1, 1, 1, 0);
                if (send_small(w, x, 2, got) == 0) {
                        expect_small(w, round, "chain", got, (int[]){TR(ok), TR(ok)}, 2);
                } else {
                        w->failures++;
                }
                /* A chain the request leaves open: open, whoever ran with it. */
                lt_transfer_init(&x[0], lt_u128(mine, ++next), dr, cr, 1, 1, 1, TF_LINKED);
                if (send_small(w, x, 1, got) == 0) {
                        expect_small(w, round, "open chain", got,
                                     (int[]){TR(linked_event_chain_open)}, 1);
                } else {
                        w->failures++;
                }
                /* The pair's pending transfer: one thread posts it, the other voids it. */
                bool post = w->index % 2 == 0;
                lt_transfer_init(&x[0], lt_u128(mine, ++next), 0, 0, post ? U128_MAX : 0, 0, 0,
                                 post ? TF_POST : TF_VOID);
                u128 pending = pair_pending(w->index / 2, round);
                x[0].pending_id = lt_lo(pending);
                x[0].pending_id_hi = lt_hi(pending);
                if (send_small(w, x, 1, got) == 0) {
                        w->resolved_ok[round] = got[0] == TR(ok);
                        if (got[0] != TR(ok) && got[0] != TR(pending_transfer_already_posted) &&
                            got[0] != TR(pending_transfer_already_voided)) {
                                expect_small(w, round, post ? "post" : "void", got, (int[]){TR(ok)},
                                             1);
                        }
                } else {
                        w->failures++;
                }
                /* A chain that fails inside: undone whole, its neighbours untouched. */
                lt_transfer_init(&x[0], lt_u128(mine, ++next), dr, cr, 1, 1, 1, TF_LINKED);
                lt_transfer_init(&x[1], lt_u128(mine, ++next), LIMITED, cr, 1000000, 1, 1, 0);
                if (send_small(w, x, 2, got) == 0) {
                        expect_small(w, round, "failing chain", got,
                                     (int[]){TR(linked_event_failed), TR(exceeds_credits)}, 2);
                } else {
                        w->failures++;
                }
        }
        return NULL;
}

static void test_grouped_small_batches(void **state)
{
        static small_worker workers[SMALL_THREADS];
        pthread_t threads[SMALL_THREADS];
        lt_account_pb a[5];
        int results[5];
        (void)state;

        lt_account_init(&a[0], LIMITED, 1, 1, AF_DEBITS_MUST_NOT_EXCEED_CREDITS);
        for (int i = 1; i < 5; i++) {
                lt_account_init(&a[i], (u128)i + 1, 1, 1, 0);
        }
        lt_create_accounts(&g_t, a, 5, results);
        for (int i = 0; i < 5; i++) {
                assert_true(results[i] == AR(ok) || results[i] == AR(exists));
        }
        /* The pending transfers the pairs will race to resolve. */
        static lt_transfer_pb pend[(SMALL_THREADS / 2) * SMALL_ROUNDS];
        static int pend_results[(SMALL_THREADS / 2) * SMALL_ROUNDS];
        int n_pend = 0;
        for (int p = 0; p < SMALL_THREADS / 2; p++) {
                for (int round = 0; round < SMALL_ROUNDS; round++) {
                        lt_transfer_init(&pend[n_pend++], pair_pending(p, round), 4, 5, 3, 1, 1,
                                         TF_PENDING);
                }
        }
        lt_create_transfers(&g_t, pend, (size_t)n_pend, pend_results);
        for (int i = 0; i < n_pend; i++) {
                assert_int_equal(pend_results[i], TR(ok));
        }
        double grouped_before = lt_ledger_metric("keelson_ledger_grouped_batches_total");
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        char sql[256];
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM ledger.transfers WHERE tenant_id = '%s'",
                 g_t.tenant_id);
        long stored_before = it_sql_long(c, sql, 0, NULL);

        for (int i = 0; i < SMALL_THREADS; i++) {
                workers[i] = (small_worker){.index = i};
                assert_int_equal(pthread_create(&threads[i], NULL, small_batches, &workers[i]), 0);
        }
        for (int i = 0; i < SMALL_THREADS; i++) {
                pthread_join(threads[i], NULL);
                if (workers[i].failures != 0) {
                        fail_msg("thread %d: %d unexpected answers, the last: %s", i,
                                 workers[i].failures, workers[i].last_error);
                }
        }
        /* Each pair's shared transfer was created once: one ok, the other exists. */
        for (int p = 0; p < SMALL_THREADS / 2; p++) {
                for (int round = 0; round < SMALL_ROUNDS; round++) {
                        int oks =
                            workers[2 * p].shared_ok[round] + workers[2 * p + 1].shared_ok[round];
                        if (oks != 1) {
                                fail_msg("pair %d, round %d: %d threads were told ok", p, round,
                                         oks);
                        }
                }
        }
        /* Each pending transfer was resolved once: posted or voided, never both. */
        for (int p = 0; p < SMALL_THREADS / 2; p++) {
                for (int round = 0; round < SMALL_ROUNDS; round++) {
                        int oks = workers[2 * p].resolved_ok[round] +
                                  workers[2 * p + 1].resolved_ok[round];
                        if (oks != 1) {
                                fail_msg("pair %d, round %d: %d threads resolved the pending", p,
                                         round, oks);
                        }
                }
        }
        /* The replicas did run batches together: what this test is about. */
        double grouped = lt_ledger_metric("keelson_ledger_grouped_batches_total");
        if (grouped <= grouped_before) {
                fail_msg("no batch ran grouped with another (%.0f before, %.0f after)",
                         grouped_before, grouped);
        }
        assert_invariants(c);
        /*
         * Exactly the transfers that said ok are stored: per pair and round
         * the shared one and one post or void, and two per chain.
         */
        assert_int_equal(it_sql_long(c, sql, 0, NULL) - stored_before,
                         (SMALL_THREADS / 2) * SMALL_ROUNDS * 2 + SMALL_THREADS * SMALL_ROUNDS * 2);
        PQfinish(c);
}

/* ---- wide batches: more than a thousand accounts changed by one batch --------------- */

#define WIDE_PAIRS  1200 /* accounts changed by a batch: 2 * WIDE_PAIRS */
#define WIDE_FIRST  100000
#define WIDE_ROUNDS 3

typedef struct wide_balances {
        u128 dp, dpo, cp, cpo;
} wide_balances;

/*
 * Batches that change 2,400 accounts each (services/ledger/rows.c updates
 * those with a join planned for the batch, smaller ones by key probes),
 * then one that changes two, over the same accounts: posted transfers one
 * way, pending ones the other. Every account's balances, as LookupAccounts
 * returns them, must be what the test summed itself, and the stored rows
 * must agree with the stored transfers.
 */
static void test_wide_batches(void **state)
{
        static lt_account_pb a[2 * WIDE_PAIRS];
        static lt_transfer_pb x[2 * WIDE_PAIRS];
        static wide_balances want[2 * WIDE_PAIRS];
        static int results[2 * WIDE_PAIRS];
        static u128 ids[2 * WIDE_PAIRS];
        uint64_t next = 0;
        (void)state;

        for (int i = 0; i < 2 * WIDE_PAIRS; i++) {
                ids[i] = WIDE_FIRST + (u128)i;
                lt_account_init(&a[i], ids[i], 7, 1, 0);
        }
        lt_create_accounts(&g_t, a, 2 * WIDE_PAIRS, results);
        for (int i = 0; i < 2 * WIDE_PAIRS; i++) {
                assert_int_equal(results[i], AR(ok));
        }
        for (int round = 0; round < WIDE_ROUNDS; round++) {
                int n = 0;
                for (int i = 0; i < WIDE_PAIRS; i++) {
                        int dr = i, cr = WIDE_PAIRS + (i * 7 + round) % WIDE_PAIRS;
                        u128 amount = (u128)(i + 1) * (u128)(round + 1);
                        /* Posted, debit to credit; pending, the other way. */
                        lt_transfer_init(&x[n++], lt_u128(7, ++next), ids[dr], ids[cr], amount, 7,
                                         1, 0);
                        want[dr].dpo += amount;
                        want[cr].cpo += amount;
                        lt_transfer_init(&x[n++], lt_u128(7, ++next), ids[cr], ids[dr], amount, 7,
                                         1, TF_PENDING);
                        want[cr].dp += amount;
                        want[dr].cp += amount;
                }
                lt_create_transfers(&g_t, x, (size_t)n, results);
                for (int i = 0; i < n; i++) {
                        if (results[i] != TR(ok)) {
                                fail_msg("round %d, transfer %d: %s", round, i,
                                         lt_tr_name(results[i]));
                        }
                }
        }
        /* A narrow batch over the same accounts: two changed, by key probes. */
        lt_transfer_init(&x[0], lt_u128(7, ++next), ids[0], ids[2 * WIDE_PAIRS - 1], 5, 7, 1, 0);
        want[0].dpo += 5;
        want[2 * WIDE_PAIRS - 1].cpo += 5;
        lt_create_transfers(&g_t, x, 1, results);
        assert_int_equal(results[0], TR(ok));

        for (int from = 0; from < 2 * WIDE_PAIRS; from += 1000) {
                size_t n = 2 * WIDE_PAIRS - from < 1000 ? (size_t)(2 * WIDE_PAIRS - from) : 1000;
                Keelson__Ledger__V1__LookupAccountsResponse *r =
                    lt_lookup_accounts(&g_t, &ids[from], n);
                assert_int_equal(r->n_accounts, n);
                for (size_t k = 0; k < n; k++) {
                        const lt_account_pb *got = r->accounts[k];
                        u128 id = lt_u128(got->id_hi, got->id);
                        assert_true(id >= WIDE_FIRST && id < WIDE_FIRST + 2 * WIDE_PAIRS);
                        const wide_balances *w = &want[id - WIDE_FIRST];
                        if (lt_u128(got->debits_pending_hi, got->debits_pending) != w->dp ||
                            lt_u128(got->debits_posted_hi, got->debits_posted) != w->dpo ||
                            lt_u128(got->credits_pending_hi, got->credits_pending) != w->cp ||
                            lt_u128(got->credits_posted_hi, got->credits_posted) != w->cpo) {
                                fail_msg("account %" PRIu64 ": balances differ from the transfers'",
                                         lt_lo(id));
                        }
                }
                protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        char sql[4096];
        snprintf(sql, sizeof(sql), lt_sql_account_sums, g_t.tenant_id);
        assert_int_equal(it_sql_long(c, sql, 0, NULL), 0);
        assert_int_equal(it_sql_long(c, lt_sql_ledger_sums, 0, NULL), 0);
        PQfinish(c);
}

static int group_setup(void **state)
{
        (void)state;
        return lt_setup(&g_stack, "it-ledger-hammer", &g_t);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hammer_hot_accounts),
            cmocka_unit_test(test_grouped_small_batches),
            cmocka_unit_test(test_wide_batches),
        };
        return cmocka_run_group_tests(tests, group_setup, NULL);
}
