/*
 * ks_rpc and ks_events through a real in-process broker on loopback TCP:
 * round trips, error codes, deadlines, overload, several replicas, a replica
 * going away, one client shared by many threads, and event prefix filtering.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "broker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.pb-c.h"
#include "ks_broker.h"
#include "ks_events.h"
#include "ks_metrics.h"
#include "ks_rpc.h"
#include "ks_topology.h"

typedef struct test_service {
        atomic_int calls;
        atomic_int blocked;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool release;
        bool lose;              /* "lost" requests are never answered, as by a dead replica */
        atomic_bool no_free_db; /* what the loop must not wait for is taken (inline_ready) */
        atomic_int group_runs;  /* group_run's calls, and the most calls one had */
        atomic_int group_largest;
} test_service;

typedef struct fixture {
        ks_broker *broker;
        char base[64];
        char back[KS_URL_MAX];
        char front[KS_URL_MAX];
        test_service svc[2];
        ks_rpc_server *srv[2];
        ks_rpc_client *client;
} fixture;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* Echo: SignUpRequest.email -> SignUpResponse.user_id; special emails steer it. */
static int echo(ks_call *call)
{
        test_service *svc = call->service;
        const Keelson__Auth__V1__SignUpRequest *in = (const void *)call->in;
        atomic_fetch_add(&svc->calls, 1);
        if (strcmp(in->email, "fail") == 0) {
                return ks_call_fail(call, KS_FAILED_PRECONDITION, "told to fail");
        }
        if (strcmp(in->email, "slow") == 0) {
                sleep_ms(400);
        }
        if (strcmp(in->email, "block") == 0 || (strcmp(in->email, "lost") == 0 && svc->lose)) {
                pthread_mutex_lock(&svc->mu);
                atomic_fetch_add(&svc->blocked, 1);
                while (!svc->release) {
                        pthread_cond_wait(&svc->cv, &svc->mu);
                }
                pthread_mutex_unlock(&svc->mu);
        }
        Keelson__Auth__V1__SignUpResponse out = KEELSON__AUTH__V1__SIGN_UP_RESPONSE__INIT;
        out.user_id = in->email;
        out.tenant_id = (char *)call->caller->tenant_id;
        return ks_call_reply(call, &out.base);
}

static const ks_method methods[] = {
    {.name = "keelson.auth.v1.AuthService/SignUp",
     .input = &keelson__auth__v1__sign_up_request__descriptor,
     .output = &keelson__auth__v1__sign_up_response__descriptor,
     .handler = echo,
     .flags = KS_M_PUBLIC,
     .bearer = KS_BEARER_NONE},
    /* the same handler as a read: idempotent, so the loop may run it itself */
    {.name = "keelson.auth.v1.AuthService/EchoRead",
     .input = &keelson__auth__v1__sign_up_request__descriptor,
     .output = &keelson__auth__v1__sign_up_response__descriptor,
     .handler = echo,
     .flags = KS_M_PUBLIC | KS_M_IDEMPOTENT,
     .bearer = KS_BEARER_NONE},
    /* the same handler as a write a tenant's queued calls of may run together */
    {.name = "keelson.auth.v1.AuthService/EchoGrouped",
     .input = &keelson__auth__v1__sign_up_request__descriptor,
     .output = &keelson__auth__v1__sign_up_response__descriptor,
     .handler = echo,
     .flags = KS_M_PUBLIC | KS_M_GROUPED,
     .bearer = KS_BEARER_NONE},
};
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))

static bool db_free(void *arg)
{
        return !atomic_load(&((test_service *)arg)->no_free_db);
}

/* A group: each call echoed on its own, the group's size noted. */
static void group_echo(void *service, ks_call *const *calls, int *codes, int n)
{
        test_service *svc = service;
        atomic_fetch_add(&svc->group_runs, 1);
        if (n > atomic_load(&svc->group_largest)) {
                atomic_store(&svc->group_largest, n);
        }
        for (int i = 0; i < n; i++) {
                codes[i] = echo(calls[i]);
        }
}

/* A replica of the echo service: tenant_writers and group_max 0 for none. */
static int start_server_with(fixture *f, int i, int workers, int queue_max, int inflight,
                             int tenant_writers, int group_max)
{
        const char *urls[] = {f->back};
        ks_rpc_server_options o = {
            .service_name = "auth",
            .dial_urls = urls,
            .n_dial_urls = 1,
            .methods = methods,
            .n_methods = N_METHODS,
            .workers = workers,
            .queue_max = queue_max,
            .max_inflight = inflight,
            .service = &f->svc[i],
            .inline_ready = db_free,
            .inline_ready_arg = &f->svc[i],
            .tenant_writers = tenant_writers,
            .group_run = group_max > 1 ? group_echo : NULL,
            .group_max = group_max,
        };
        return ks_rpc_server_start(&f->srv[i], &o);
}

static int start_server_turns(fixture *f, int i, int workers, int queue_max, int inflight,
                              int tenant_writers)
{
        return start_server_with(f, i, workers, queue_max, inflight, tenant_writers, 0);
}

static int start_server_groups(fixture *f, int i, int workers, int tenant_writers, int group_max)
{
        return start_server_with(f, i, workers, 16, 64, tenant_writers, group_max);
}

static int start_server(fixture *f, int i, int workers, int queue_max, int inflight)
{
        return start_server_turns(f, i, workers, queue_max, inflight, 0);
}

static void wait_connected(fixture *f, int n_servers)
{
        for (int t = 0; t < 200; t++) {
                int ok = ks_rpc_client_connected(f->client) > 0;
                for (int i = 0; i < n_servers; i++) {
                        ok = ok && ks_rpc_server_connected(f->srv[i]) > 0;
                }
                if (ok) {
                        sleep_ms(50); /* let the broker's side of each pipe settle too */
                        return;
                }
                sleep_ms(10);
        }
        fail_msg("peers never connected");
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));
        for (int i = 0; i < 2; i++) {
                pthread_mutex_init(&f->svc[i].mu, NULL);
                pthread_cond_init(&f->svc[i].cv, NULL);
        }
        assert_int_equal(test_broker_start(&f->broker, f->base, sizeof(f->base)), 0);
        assert_int_equal(
            ks_broker_url(f->back, sizeof(f->back), f->base, KS_SVC_AUTH, KS_SIDE_BACK), 0);
        assert_int_equal(
            ks_broker_url(f->front, sizeof(f->front), f->base, KS_SVC_AUTH, KS_SIDE_FRONT), 0);
        const char *urls[] = {f->front};
        ks_rpc_client_options co = {
            .dial_urls = urls, .n_dial_urls = 1, .max_inflight = 64, .default_timeout_ms = 5000};
        assert_int_equal(ks_rpc_client_new(&f->client, &co), KS_OK);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;
        for (int i = 0; i < 2; i++) {
                pthread_mutex_lock(&f->svc[i].mu);
                f->svc[i].release = true;
                pthread_cond_broadcast(&f->svc[i].cv);
                pthread_mutex_unlock(&f->svc[i].mu);
        }
        /* Replicas, then broker, then client. */
        for (int i = 0; i < 2; i++) {
                ks_rpc_server_stop(f->srv[i]);
        }
        ks_broker_stop(f->broker);
        ks_rpc_client_free(f->client);
        free(f);
        return 0;
}

#define ECHO_BUF 256

/* A call of m with the echo's request (email) packed into buf; the caller completes the rest. */
static ks_rpc_call_args echo_args(const ks_method *m, const char *email, uint8_t buf[ECHO_BUF])
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        req.email = (char *)email;
        assert_true(keelson__auth__v1__sign_up_request__get_packed_size(&req) <= ECHO_BUF);
        ks_rpc_call_args a = {.method = m->name,
                              .payload = buf,
                              .payload_len = keelson__auth__v1__sign_up_request__pack(&req, buf)};
        return a;
}

static int call_as(fixture *f, const ks_method *m, const char *email, const char *tenant,
                   int64_t deadline, ks_rpc_result *res)
{
        uint8_t buf[ECHO_BUF];
        ks_caller caller = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        caller.tenant_id = (char *)tenant;
        ks_rpc_call_args a = echo_args(m, email, buf);
        a.request_id = "req-1";
        a.caller = &caller;
        a.deadline_unix_ms = deadline;
        return ks_rpc_call(f->client, &a, res);
}

static int call_method(fixture *f, const ks_method *m, const char *email, int64_t deadline,
                       ks_rpc_result *res)
{
        return call_as(f, m, email, "t-1", deadline, res);
}

static int call_echo(fixture *f, const char *email, int64_t deadline, ks_rpc_result *res)
{
        return call_method(f, &methods[0], email, deadline, res);
}

/* The echo read, answered ok with what was sent. */
static void read_ok(fixture *f, const char *email)
{
        ks_rpc_result res;
        assert_int_equal(call_method(f, &methods[1], email, 0, &res), KS_OK);
        Keelson__Auth__V1__SignUpResponse *out =
            keelson__auth__v1__sign_up_response__unpack(NULL, res.payload_len, res.payload);
        assert_non_null(out);
        assert_string_equal(out->user_id, email);
        keelson__auth__v1__sign_up_response__free_unpacked(out, NULL);
        ks_rpc_result_clear(&res);
}

/* Calls the replicas (every one is "auth" here) ran on their loops. */
static uint64_t inline_calls(void)
{
        return ks_counter_value(ks_counter_get(ks_metrics_default(), "keelson_rpc_inline_total", "",
                                               "service=\"auth\""));
}

static void test_round_trip(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 2, 8, 16), KS_OK);
        wait_connected(f, 1);
        ks_rpc_result res;
        assert_int_equal(call_echo(f, "hello@example.test", 0, &res), KS_OK);
        Keelson__Auth__V1__SignUpResponse *out =
            keelson__auth__v1__sign_up_response__unpack(NULL, res.payload_len, res.payload);
        assert_non_null(out);
        assert_string_equal(out->user_id, "hello@example.test");
        assert_string_equal(out->tenant_id, "t-1"); /* the caller context travelled */
        keelson__auth__v1__sign_up_response__free_unpacked(out, NULL);
        ks_rpc_result_clear(&res);

        assert_int_equal(call_echo(f, "fail", 0, &res), KS_FAILED_PRECONDITION);
        assert_string_equal(res.message, "told to fail");
        assert_int_equal(res.payload_len, 0);
        ks_rpc_result_clear(&res);
}

static void test_unknown_method(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 1, 4, 8), KS_OK);
        wait_connected(f, 1);
        ks_rpc_call_args a = {.method = "keelson.auth.v1.AuthService/Nope"};
        ks_rpc_result res;
        assert_int_equal(ks_rpc_call(f->client, &a, &res), KS_UNIMPLEMENTED);
        ks_rpc_result_clear(&res);
        /* garbage payload for a known method */
        uint8_t junk[] = {0xff, 0xff, 0xff};
        a.method = methods[0].name;
        a.payload = junk;
        a.payload_len = sizeof(junk);
        assert_int_equal(ks_rpc_call(f->client, &a, &res), KS_INVALID_ARGUMENT);
        ks_rpc_result_clear(&res);
}

static void test_deadlines(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 1, 4, 8), KS_OK);
        wait_connected(f, 1);
        ks_rpc_result res;
        /* already past: refused before sending */
        assert_int_equal(call_echo(f, "x", ks_now_ms() - 1, &res), KS_DEADLINE_EXCEEDED);
        ks_rpc_result_clear(&res);
        /* the handler outlives the deadline: the caller gets deadline_exceeded */
        assert_int_equal(call_echo(f, "slow", ks_now_ms() + 100, &res), KS_DEADLINE_EXCEEDED);
        ks_rpc_result_clear(&res);
        sleep_ms(400);
        /* and the service keeps answering */
        assert_int_equal(call_echo(f, "after", 0, &res), KS_OK);
        ks_rpc_result_clear(&res);
}

typedef struct async_box {
        atomic_int done;
        atomic_int codes[KS_CODE_COUNT];
} async_box;

static void on_done(void *arg, ks_rpc_result *res)
{
        async_box *b = arg;
        atomic_fetch_add(&b->codes[res->code], 1);
        atomic_fetch_add(&b->done, 1);
}

static void test_overload(void **state)
{
        fixture *f = *state;
        /* one worker, a queue of one, four receiving contexts */
        assert_int_equal(start_server(f, 0, 1, 1, 4), KS_OK);
        wait_connected(f, 1);
        async_box box;
        memset(&box, 0, sizeof(box));
        uint8_t buf[ECHO_BUF];
        ks_rpc_call_args a = echo_args(&methods[0], "block", buf);
        for (int i = 0; i < 4; i++) {
                assert_int_equal(ks_rpc_call_async(f->client, &a, on_done, &box), KS_OK);
                if (i == 0) {
                        while (atomic_load(&f->svc[0].blocked) == 0) {
                                sleep_ms(5);
                        }
                }
        }
        /* one runs, one waits in the queue, the other two are refused at once */
        for (int t = 0; t < 500 && atomic_load(&box.done) < 2; t++) {
                sleep_ms(10);
        }
        assert_int_equal(atomic_load(&box.codes[KS_RESOURCE_EXHAUSTED]), 2);
        pthread_mutex_lock(&f->svc[0].mu);
        f->svc[0].release = true;
        pthread_cond_broadcast(&f->svc[0].cv);
        pthread_mutex_unlock(&f->svc[0].mu);
        for (int t = 0; t < 500 && atomic_load(&box.done) < 4; t++) {
                sleep_ms(10);
        }
        assert_int_equal(atomic_load(&box.codes[KS_OK]), 2);
}

/*
 * A read runs on the loop, once its handler is known to be fast (measured
 * over eight calls on the workers first); a write never does.
 */
static void test_inline_fast_reads(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 2, 8, 16), KS_OK);
        wait_connected(f, 1);
        uint64_t before = inline_calls();
        for (int i = 0; i < 8; i++) {
                read_ok(f, "warm@example.test");
        }
        assert_int_equal(inline_calls(), before); /* not measured yet: the workers ran them */
        for (int i = 0; i < 20; i++) {
                read_ok(f, "read@example.test");
        }
        assert_int_equal(inline_calls(), before + 20);
        ks_rpc_result res;
        for (int i = 0; i < 10; i++) {
                assert_int_equal(call_echo(f, "write@example.test", 0, &res), KS_OK);
                ks_rpc_result_clear(&res);
        }
        assert_int_equal(inline_calls(), before + 20); /* SignUp is no read */
        assert_int_equal(call_method(f, &methods[1], "fail", 0, &res), KS_FAILED_PRECONDITION);
        assert_string_equal(res.message, "told to fail");
        ks_rpc_result_clear(&res);
        assert_int_equal(atomic_load(&f->svc[0].calls), 8 + 20 + 10 + 1);

        /* Nothing the handler needs is free (a database connection): the workers wait for it. */
        atomic_store(&f->svc[0].no_free_db, true);
        for (int i = 0; i < 10; i++) {
                read_ok(f, "busy@example.test");
        }
        assert_int_equal(inline_calls(), before + 21); /* the 20 reads and "fail" */
        atomic_store(&f->svc[0].no_free_db, false);
        read_ok(f, "free@example.test");
        assert_int_equal(inline_calls(), before + 22);
}

/*
 * A read whose handler turns slow goes back to the workers from its next
 * call, and many reads at once are all answered (the workers take the ones
 * that come together).
 */
static void test_inline_slow_read_goes_to_workers(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 2, 40, 64), KS_OK);
        wait_connected(f, 1);
        for (int i = 0; i < 8; i++) {
                read_ok(f, "warm@example.test");
        }
        uint64_t before = inline_calls();
        read_ok(f, "slow"); /* 400 ms, on the loop: its average is now far above 2 ms */
        assert_int_equal(inline_calls(), before + 1);
        for (int i = 0; i < 5; i++) {
                read_ok(f, "after@example.test");
        }
        assert_int_equal(inline_calls(), before + 1);

        async_box box;
        memset(&box, 0, sizeof(box));
        uint8_t buf[ECHO_BUF];
        ks_rpc_call_args a = echo_args(&methods[1], "many@example.test", buf);
        for (int i = 0; i < 32; i++) {
                assert_int_equal(ks_rpc_call_async(f->client, &a, on_done, &box), KS_OK);
        }
        for (int t = 0; t < 500 && atomic_load(&box.done) < 32; t++) {
                sleep_ms(10);
        }
        assert_int_equal(atomic_load(&box.codes[KS_OK]), 32);
}

static void test_two_replicas_and_one_dies(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server(f, 0, 2, 8, 16), KS_OK);
        assert_int_equal(start_server(f, 1, 2, 8, 16), KS_OK);
        wait_connected(f, 2);
        ks_rpc_result res;
        for (int i = 0; i < 40; i++) {
                assert_int_equal(call_echo(f, "spread", 0, &res), KS_OK);
                ks_rpc_result_clear(&res);
        }
        assert_true(atomic_load(&f->svc[0].calls) > 0);
        assert_true(atomic_load(&f->svc[1].calls) > 0);
        assert_int_equal(atomic_load(&f->svc[0].calls) + atomic_load(&f->svc[1].calls), 40);

        ks_rpc_server_stop(f->srv[0]);
        f->srv[0] = NULL;
        sleep_ms(100);
        int before = atomic_load(&f->svc[1].calls);
        for (int i = 0; i < 20; i++) {
                assert_int_equal(call_echo(f, "survivor", ks_now_ms() + 3000, &res), KS_OK);
                ks_rpc_result_clear(&res);
        }
        assert_int_equal(atomic_load(&f->svc[1].calls) - before, 20);
}

static void test_resend_reaches_a_live_replica(void **state)
{
        fixture *f = *state;
        f->svc[0].lose = true;
        assert_int_equal(start_server(f, 0, 2, 8, 16), KS_OK);
        assert_int_equal(start_server(f, 1, 2, 8, 16), KS_OK);
        wait_connected(f, 2);
        uint8_t buf[ECHO_BUF];
        ks_rpc_call_args a = echo_args(&methods[0], "lost", buf);
        a.resend_ms = 150;
        ks_rpc_result res;
        for (int i = 0; i < 6; i++) {
                a.deadline_unix_ms = ks_now_ms() + 3000;
                assert_int_equal(ks_rpc_call(f->client, &a, &res), KS_OK);
                ks_rpc_result_clear(&res);
        }
        /* requests did reach the replica that swallows them, and were resent */
        assert_true(atomic_load(&f->svc[0].blocked) > 0);
        assert_true(atomic_load(&f->svc[1].calls) >= 6);
}

/* ---- one client, many threads ------------------------------------------- */

#define MT_THREADS 8
#define MT_CALLS   200

typedef struct mt_worker {
        fixture *f;
        pthread_barrier_t *start;
        int index;
        int ok;         /* replies to this very request */
        int mismatched; /* replies meant for another request */
        int failed;     /* calls that did not answer OK */
        int first_code; /* the first failure's code */
} mt_worker;

/* Calls on the shared client; each reply must echo this call's email and tenant. */
static void *mt_run(void *arg)
{
        mt_worker *w = arg;
        char email[64], tenant[32], rid[64];
        uint8_t buf[ECHO_BUF];

        snprintf(tenant, sizeof(tenant), "tenant-%d", w->index);
        pthread_barrier_wait(w->start);
        for (int i = 0; i < MT_CALLS; i++) {
                ks_caller caller = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
                ks_rpc_result res;

                snprintf(email, sizeof(email), "t%d-call%d@example.test", w->index, i);
                snprintf(rid, sizeof(rid), "mt-%d-%d", w->index, i);
                caller.tenant_id = tenant;
                ks_rpc_call_args a = echo_args(&methods[0], email, buf);
                a.request_id = rid;
                a.caller = &caller;
                int code = ks_rpc_call(w->f->client, &a, &res);
                if (code != KS_OK) {
                        w->first_code = w->failed++ == 0 ? code : w->first_code;
                        ks_rpc_result_clear(&res);
                        continue;
                }
                Keelson__Auth__V1__SignUpResponse *out =
                    keelson__auth__v1__sign_up_response__unpack(NULL, res.payload_len, res.payload);
                if (out != NULL && strcmp(out->user_id, email) == 0 &&
                    strcmp(out->tenant_id, tenant) == 0) {
                        w->ok++;
                } else {
                        w->mismatched++;
                }
                if (out != NULL) {
                        keelson__auth__v1__sign_up_response__free_unpacked(out, NULL);
                }
                ks_rpc_result_clear(&res);
        }
        return NULL;
}

/*
 * The gateway shares one client between its calls; services share theirs
 * between workers. MT_THREADS threads start together and each makes
 * MT_CALLS blocking calls on the fixture's one client, through the broker,
 * to two replicas: every call gets its own reply, none is lost, none is
 * answered twice.
 */
static void test_one_client_many_threads(void **state)
{
        fixture *f = *state;
        pthread_t threads[MT_THREADS];
        mt_worker w[MT_THREADS];
        pthread_barrier_t start;
        int ok = 0;

        assert_int_equal(start_server(f, 0, 2, 16, 32), KS_OK);
        assert_int_equal(start_server(f, 1, 2, 16, 32), KS_OK);
        wait_connected(f, 2);
        assert_int_equal(pthread_barrier_init(&start, NULL, MT_THREADS), 0);
        for (int i = 0; i < MT_THREADS; i++) {
                w[i] = (mt_worker){.f = f, .start = &start, .index = i};
                assert_int_equal(pthread_create(&threads[i], NULL, mt_run, &w[i]), 0);
        }
        for (int i = 0; i < MT_THREADS; i++) {
                assert_int_equal(pthread_join(threads[i], NULL), 0);
        }
        pthread_barrier_destroy(&start);
        for (int i = 0; i < MT_THREADS; i++) {
                if (w[i].failed != 0 || w[i].mismatched != 0) {
                        fail_msg("thread %d: %d failed (first code %d), %d another's reply", i,
                                 w[i].failed, w[i].first_code, w[i].mismatched);
                }
                ok += w[i].ok;
        }
        assert_int_equal(ok, MT_THREADS * MT_CALLS);
        /* Each request ran once: no resend, no duplicate. */
        assert_int_equal(atomic_load(&f->svc[0].calls) + atomic_load(&f->svc[1].calls),
                         MT_THREADS * MT_CALLS);
        assert_true(atomic_load(&f->svc[0].calls) > 0);
        assert_true(atomic_load(&f->svc[1].calls) > 0);
}

static void test_no_replica_is_unavailable_or_deadline(void **state)
{
        fixture *f = *state;
        wait_connected(f, 0);
        ks_rpc_result res;
        int code = call_echo(f, "nobody", ks_now_ms() + 200, &res);
        ks_rpc_result_clear(&res);
        /* the broker accepts the request but no replica takes it */
        assert_int_equal(code, KS_DEADLINE_EXCEEDED);
}

static void test_no_broker_is_unavailable_at_once(void **state)
{
        fixture *f = *state;
        ks_rpc_client *lonely = NULL;
        const char *urls[] = {"tcp://127.0.0.1:1"}; /* nothing listens there */
        ks_rpc_client_options co = {
            .dial_urls = urls, .n_dial_urls = 1, .max_inflight = 4, .default_timeout_ms = 60000};
        assert_int_equal(ks_rpc_client_new(&lonely, &co), KS_OK);
        ks_rpc_call_args a = {.method = methods[0].name};
        ks_rpc_result res;
        int64_t started = ks_now_ms();
        assert_int_equal(ks_rpc_call(lonely, &a, &res), KS_UNAVAILABLE);
        assert_string_equal(res.message, "no broker connected");
        /* not a timing assertion on speed: it must not have waited for the 60 s deadline */
        assert_true(ks_now_ms() - started < 60000);
        ks_rpc_result_clear(&res);
        ks_rpc_client_free(lonely);
        (void)f;
}

static void test_events_by_prefix(void **state)
{
        fixture *f = *state;
        const char *bases[] = {f->base};
        const char *prefixes[] = {"users."};
        ks_publisher *pub = NULL;
        ks_subscriber *sub = NULL;
        assert_int_equal(ks_publisher_new(&pub, bases, 1), KS_OK);
        assert_int_equal(ks_subscriber_new(&sub, bases, 1, prefixes, 1), KS_OK);
        sleep_ms(200); /* pub/sub: a subscriber hears only what is sent after it joined */

        Keelson__Events__V1__Event ev = KEELSON__EVENTS__V1__EVENT__INIT;
        ev.event_id = "e-1";
        ev.topic = "auth.email";
        ev.tenant_id = "t-1";
        assert_int_equal(ks_publish(pub, &ev), KS_OK);
        ev.event_id = "e-2";
        ev.topic = "users.admin_summary";
        assert_int_equal(ks_publish(pub, &ev), KS_OK);

        Keelson__Events__V1__Event *got = NULL;
        assert_int_equal(ks_subscriber_next(sub, 2000, &got), KS_OK);
        assert_string_equal(got->event_id, "e-2");
        assert_string_equal(got->topic, "users.admin_summary");
        assert_string_equal(got->tenant_id, "t-1");
        keelson__events__v1__event__free_unpacked(got, NULL);
        assert_int_equal(ks_subscriber_next(sub, 200, &got), KS_DEADLINE_EXCEEDED);
        ks_subscriber_free(sub);
        ks_publisher_free(pub);
}

/* A subscriber flooded while nobody reads keeps the newest, and closes at once. */
static void test_events_flooded_subscriber(void **state)
{
        fixture *f = *state;
        const char *bases[] = {f->base};
        const char *prefixes[] = {"flood."};
        ks_publisher *pub = NULL;
        ks_subscriber *sub = NULL, *unread = NULL;
        assert_int_equal(ks_publisher_new(&pub, bases, 1), KS_OK);
        assert_int_equal(ks_subscriber_new(&sub, bases, 1, prefixes, 1), KS_OK);
        assert_int_equal(ks_subscriber_new(&unread, bases, 1, prefixes, 1), KS_OK);
        sleep_ms(200);

        char id[32];
        Keelson__Events__V1__Event ev = KEELSON__EVENTS__V1__EVENT__INIT;
        ev.topic = "flood.x";
        ev.tenant_id = "t-1";
        ev.event_id = id;
        for (int i = 0; i <= 20000; i++) {
                snprintf(id, sizeof(id), i == 20000 ? "last" : "e-%d", i);
                int rv;
                while ((rv = ks_publish(pub, &ev)) == KS_UNAVAILABLE) {
                        sleep_ms(1); /* the publisher's queue is full: a relay retries */
                }
                assert_int_equal(rv, KS_OK);
        }
        /* The reader comes late: what it gets ends with the newest event. */
        Keelson__Events__V1__Event *got = NULL;
        int n = 0;
        bool last = false;
        while (!last && ks_subscriber_next(sub, 5000, &got) == KS_OK) {
                last = strcmp(got->event_id, "last") == 0;
                keelson__events__v1__event__free_unpacked(got, NULL);
                n++;
        }
        assert_true(last);
        assert_true(n >= 1 && n <= 20001);
        ks_subscriber_free(unread); /* its queue full, its broker still sending */
        ks_subscriber_free(sub);
        ks_publisher_free(pub);
}

/* A write of tenant on a thread of its own. */
typedef struct bg_call {
        fixture *f;
        const char *email, *tenant;
        const ks_method *method; /* NULL: SignUp */
        int code;
        char user_id[64]; /* the reply's */
        atomic_bool done;
} bg_call;

static void *bg_write(void *p)
{
        bg_call *c = p;
        ks_rpc_result res;
        c->code = call_as(c->f, c->method != NULL ? c->method : &methods[0], c->email, c->tenant, 0,
                          &res);
        if (c->code == KS_OK) {
                Keelson__Auth__V1__SignUpResponse *out =
                    keelson__auth__v1__sign_up_response__unpack(NULL, res.payload_len, res.payload);
                snprintf(c->user_id, sizeof(c->user_id), "%s", out != NULL ? out->user_id : "");
                keelson__auth__v1__sign_up_response__free_unpacked(out, NULL);
                ks_rpc_result_clear(&res);
        }
        atomic_store(&c->done, true);
        return NULL;
}

static uint64_t turn_waits(void)
{
        return ks_counter_value(ks_counter_get(
            ks_metrics_default(), "keelson_rpc_tenant_turn_waits_total", "", "service=\"auth\""));
}

/*
 * Tenants' turns (tenant_writers 1, three workers): a tenant's second write
 * stays queued while its first runs, and does not start when a worker is
 * free; another tenant's write and the first tenant's read go past it on
 * the free workers; it runs when the first is done, and is counted.
 */
static void test_tenant_writes_take_turns(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server_turns(f, 0, 3, 16, 64, 1), KS_OK);
        wait_connected(f, 1);
        uint64_t waits = turn_waits();
        bg_call a1 = {.f = f, .email = "block", .tenant = "tenant-a"};
        bg_call a2 = {.f = f, .email = "block", .tenant = "tenant-a"};
        pthread_t t1, t2;

        assert_int_equal(pthread_create(&t1, NULL, bg_write, &a1), 0);
        for (int i = 0; i < 500 && atomic_load(&f->svc[0].blocked) < 1; i++) {
                sleep_ms(2);
        }
        assert_int_equal(atomic_load(&f->svc[0].blocked), 1);
        assert_int_equal(pthread_create(&t2, NULL, bg_write, &a2), 0);
        sleep_ms(300);
        /* Two workers are free, and the second write of tenant-a still did not start. */
        assert_int_equal(atomic_load(&f->svc[0].blocked), 1);
        assert_int_equal(atomic_load(&f->svc[0].calls), 1);
        assert_false(atomic_load(&a2.done));

        ks_rpc_result res;
        assert_int_equal(call_as(f, &methods[0], "other", "tenant-b", 0, &res), KS_OK);
        ks_rpc_result_clear(&res);
        assert_int_equal(call_as(f, &methods[1], "read", "tenant-a", 0, &res), KS_OK);
        ks_rpc_result_clear(&res);
        assert_int_equal(atomic_load(&f->svc[0].calls), 3);
        assert_false(atomic_load(&a2.done));

        pthread_mutex_lock(&f->svc[0].mu);
        f->svc[0].release = true;
        pthread_cond_broadcast(&f->svc[0].cv);
        pthread_mutex_unlock(&f->svc[0].mu);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        assert_int_equal(a1.code, KS_OK);
        assert_int_equal(a2.code, KS_OK);
        assert_int_equal(atomic_load(&f->svc[0].calls), 4);
        assert_true(turn_waits() > waits);
}

static uint64_t grouped_calls(void)
{
        return ks_counter_value(ks_counter_get(
            ks_metrics_default(), "keelson_rpc_grouped_calls_total", "", "service=\"auth\""));
}

static void release_blocked(test_service *svc)
{
        pthread_mutex_lock(&svc->mu);
        svc->release = true;
        pthread_cond_broadcast(&svc->cv);
        pthread_mutex_unlock(&svc->mu);
}

/*
 * Groups (tenant_writers 1, group_max 3, two workers): while tenant-a's
 * first grouped write runs, four more of its writes queue; when it ends,
 * one worker takes the oldest three together, in one group_run, and the
 * fourth after them; each call is answered with its own reply or error.
 * Another tenant's write is never in tenant-a's group.
 */
static void test_tenant_writes_run_in_groups(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server_groups(f, 0, 2, 1, 3), KS_OK);
        wait_connected(f, 1);
        uint64_t grouped = grouped_calls();
        const char *emails[] = {"block", "g1", "fail", "g3", "g4"};
        bg_call c[5];
        pthread_t t[5];

        for (int i = 0; i < 5; i++) {
                c[i] = (bg_call){
                    .f = f, .email = emails[i], .tenant = "tenant-a", .method = &methods[2]};
                assert_int_equal(pthread_create(&t[i], NULL, bg_write, &c[i]), 0);
                for (int k = 0; i == 0 && k < 500 && atomic_load(&f->svc[0].blocked) < 1; k++) {
                        sleep_ms(2);
                }
                sleep_ms(20); /* queued in this order */
        }
        sleep_ms(200);
        assert_int_equal(atomic_load(&f->svc[0].calls), 1); /* the others wait their turn */
        bg_call b = {.f = f, .email = "b", .tenant = "tenant-b", .method = &methods[2]};
        (void)bg_write(&b);
        assert_int_equal(b.code, KS_OK);
        assert_string_equal(b.user_id, "b");
        assert_int_equal(atomic_load(&f->svc[0].group_runs), 0); /* tenant-b's ran alone */

        release_blocked(&f->svc[0]);
        for (int i = 0; i < 5; i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(c[i].code, i == 2 ? KS_FAILED_PRECONDITION : KS_OK);
                if (i != 2) {
                        assert_string_equal(c[i].user_id, emails[i]);
                }
        }
        assert_int_equal(atomic_load(&f->svc[0].calls), 6);
        assert_int_equal(atomic_load(&f->svc[0].group_runs), 1);
        assert_int_equal(atomic_load(&f->svc[0].group_largest), 3);
        assert_int_equal(grouped_calls() - grouped, 3);
}

/* group_max 1: no group, whatever queues. */
static void test_group_max_one_runs_each_alone(void **state)
{
        fixture *f = *state;
        assert_int_equal(start_server_groups(f, 0, 2, 1, 1), KS_OK);
        wait_connected(f, 1);
        bg_call c[3];
        pthread_t t[3];
        const char *emails[] = {"block", "x1", "x2"};

        for (int i = 0; i < 3; i++) {
                c[i] = (bg_call){
                    .f = f, .email = emails[i], .tenant = "tenant-a", .method = &methods[2]};
                assert_int_equal(pthread_create(&t[i], NULL, bg_write, &c[i]), 0);
                for (int k = 0; i == 0 && k < 500 && atomic_load(&f->svc[0].blocked) < 1; k++) {
                        sleep_ms(2);
                }
        }
        sleep_ms(200);
        release_blocked(&f->svc[0]);
        for (int i = 0; i < 3; i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(c[i].code, KS_OK);
        }
        assert_int_equal(atomic_load(&f->svc[0].group_runs), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
            cmocka_unit_test_setup_teardown(test_inline_fast_reads, setup, teardown),
            cmocka_unit_test_setup_teardown(test_inline_slow_read_goes_to_workers, setup, teardown),
            cmocka_unit_test_setup_teardown(test_deadlines, setup, teardown),
            cmocka_unit_test_setup_teardown(test_overload, setup, teardown),
            cmocka_unit_test_setup_teardown(test_two_replicas_and_one_dies, setup, teardown),
            cmocka_unit_test_setup_teardown(test_resend_reaches_a_live_replica, setup, teardown),
            cmocka_unit_test_setup_teardown(test_one_client_many_threads, setup, teardown),
            cmocka_unit_test_setup_teardown(test_no_replica_is_unavailable_or_deadline, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_no_broker_is_unavailable_at_once, setup, teardown),
            cmocka_unit_test_setup_teardown(test_events_by_prefix, setup, teardown),
            cmocka_unit_test_setup_teardown(test_events_flooded_subscriber, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tenant_writes_take_turns, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tenant_writes_run_in_groups, setup, teardown),
            cmocka_unit_test_setup_teardown(test_group_max_one_runs_each_alone, setup, teardown),
        };
        int failed = cmocka_run_group_tests_name("rpc", tests, NULL, NULL);
        return failed;
}
