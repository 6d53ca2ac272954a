/*
 * ks_rpc_server_stop drains before it stops, through a real in-process
 * broker on loopback TCP: the calls a replica holds, running or queued, are
 * all answered; the broker, told "drain" (ks_broker_ctl.h), sends it no new
 * call, so a call arriving meanwhile goes to another replica, or waits at
 * the broker for the next one, and none is refused or lost.
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
#include "ks_clock.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define SLOW_MS           300
#define WAIT_MS           5000 /* for anything that should take far less */
#define CLIENT_TIMEOUT_MS 8000

typedef struct test_service {
        atomic_int started;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool release;
} test_service;

typedef struct fixture {
        ks_broker *broker;
        char base[64];
        char back[KS_URL_MAX];
        char front[KS_URL_MAX];
        test_service svc, svc2; /* the replica of each test, and a second one */
        ks_rpc_server *srv, *srv2;
        ks_rpc_client *client;
} fixture;

typedef struct async_box {
        atomic_int done;
        atomic_int codes[KS_CODE_COUNT];
} async_box;

/* Static: a call still pending when an assertion fails may complete later. */
static async_box g_box, g_late;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* "slow" sleeps SLOW_MS; "block" waits for release; both then echo the email. */
static int echo(ks_call *call)
{
        test_service *svc = call->service;
        const Keelson__Auth__V1__SignUpRequest *in = (const void *)call->in;

        atomic_fetch_add(&svc->started, 1);
        if (strcmp(in->email, "slow") == 0) {
                sleep_ms(SLOW_MS);
        }
        if (strcmp(in->email, "block") == 0) {
                pthread_mutex_lock(&svc->mu);
                while (!svc->release) {
                        pthread_cond_wait(&svc->cv, &svc->mu);
                }
                pthread_mutex_unlock(&svc->mu);
        }
        Keelson__Auth__V1__SignUpResponse out = KEELSON__AUTH__V1__SIGN_UP_RESPONSE__INIT;
        out.user_id = in->email;
        return ks_call_reply(call, &out.base);
}

static const ks_method methods[] = {
    {.name = "keelson.auth.v1.AuthService/SignUp",
     .input = &keelson__auth__v1__sign_up_request__descriptor,
     .output = &keelson__auth__v1__sign_up_response__descriptor,
     .handler = echo,
     .flags = KS_M_PUBLIC,
     .bearer = KS_BEARER_NONE},
};

static void release_one(test_service *svc)
{
        pthread_mutex_lock(&svc->mu);
        svc->release = true;
        pthread_cond_broadcast(&svc->cv);
        pthread_mutex_unlock(&svc->mu);
}

/* Every "block" call of either replica returns. */
static void release(fixture *f)
{
        release_one(&f->svc);
        release_one(&f->svc2);
}

/* A replica of the test's service on the broker's back, connected when it returns. */
static ks_rpc_server *start_replica(fixture *f, test_service *svc)
{
        const char *urls[1] = {f->back};
        ks_rpc_server *srv = NULL;
        ks_rpc_server_options o = {.service_name = "auth",
                                   .dial_urls = urls,
                                   .n_dial_urls = 1,
                                   .methods = methods,
                                   .n_methods = 1,
                                   .workers = 2, /* one may block, the other serves */
                                   .queue_max = 4,
                                   .max_inflight = 16,
                                   .service = svc};
        assert_int_equal(ks_rpc_server_start(&srv, &o), KS_OK);
        for (int t = 0; t < WAIT_MS / 10; t++) {
                if (ks_rpc_server_connected(srv) > 0) {
                        sleep_ms(50); /* the broker's side of the pipe settles too */
                        return srv;
                }
                sleep_ms(10);
        }
        fail_msg("replica never connected");
        return NULL;
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));
        const char *urls[1];

        assert_non_null(f);
        pthread_mutex_init(&f->svc.mu, NULL);
        pthread_cond_init(&f->svc.cv, NULL);
        pthread_mutex_init(&f->svc2.mu, NULL);
        pthread_cond_init(&f->svc2.cv, NULL);
        assert_int_equal(test_broker_start(&f->broker, f->base, sizeof(f->base)), 0);
        assert_int_equal(
            ks_broker_url(f->back, sizeof(f->back), f->base, KS_SVC_AUTH, KS_SIDE_BACK), 0);
        assert_int_equal(
            ks_broker_url(f->front, sizeof(f->front), f->base, KS_SVC_AUTH, KS_SIDE_FRONT), 0);
        urls[0] = f->front;
        ks_rpc_client_options co = {.dial_urls = urls,
                                    .n_dial_urls = 1,
                                    .max_inflight = 16,
                                    .default_timeout_ms = CLIENT_TIMEOUT_MS};
        assert_int_equal(ks_rpc_client_new(&f->client, &co), KS_OK);
        f->srv = start_replica(f, &f->svc);
        for (int t = 0; t < WAIT_MS / 10; t++) {
                if (ks_rpc_client_connected(f->client) > 0) {
                        *state = f;
                        return 0;
                }
                sleep_ms(10);
        }
        fail_msg("the client never connected");
        return -1;
}

static int teardown(void **state)
{
        fixture *f = *state;

        release(f);
        ks_rpc_server_stop(f->srv); /* NULL when the test stopped it */
        ks_rpc_server_stop(f->srv2);
        ks_broker_stop(f->broker);
        ks_rpc_client_free(f->client);
        pthread_cond_destroy(&f->svc.cv);
        pthread_mutex_destroy(&f->svc.mu);
        pthread_cond_destroy(&f->svc2.cv);
        pthread_mutex_destroy(&f->svc2.mu);
        free(f);
        return 0;
}

static void on_done(void *arg, ks_rpc_result *res)
{
        async_box *b = arg;
        atomic_fetch_add(&b->codes[res->code], 1);
        atomic_fetch_add(&b->done, 1);
}

static void send_async(fixture *f, const char *email, async_box *box)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        uint8_t buf[64];

        req.email = (char *)email;
        size_t len = keelson__auth__v1__sign_up_request__pack(&req, buf);
        ks_rpc_call_args a = {.method = methods[0].name, .payload = buf, .payload_len = len};
        assert_int_equal(ks_rpc_call_async(f->client, &a, on_done, box), KS_OK);
}

static void wait_for(atomic_int *v, int n)
{
        for (int t = 0; t < WAIT_MS / 5 && atomic_load(v) < n; t++) {
                sleep_ms(5);
        }
        assert_int_equal(atomic_load(v), n);
}

/* Two calls run and one waits in the queue when the stop comes: all three are answered ok. */
static void test_stop_answers_the_calls_it_holds(void **state)
{
        fixture *f = *state;
        async_box *box = &g_box;

        memset(box, 0, sizeof(*box));
        for (int i = 0; i < 3; i++) {
                send_async(f, "slow", box);
        }
        wait_for(&f->svc.started, 2); /* both workers run one */
        sleep_ms(50);                 /* the third reaches the queue */
        int64_t t0 = ks_mono_ms();
        ks_rpc_server_stop(f->srv);
        f->srv = NULL;
        /* all three ran, one after the other, before the stop returned */
        assert_int_equal(atomic_load(&f->svc.started), 3);
        assert_true(ks_mono_ms() - t0 >= SLOW_MS);
        wait_for(&box->done, 3);
        assert_int_equal(atomic_load(&box->codes[KS_OK]), 3);
}

static void *stop_main(void *arg)
{
        fixture *f = arg;
        ks_rpc_server_stop(f->srv);
        return NULL;
}

/*
 * A call arriving while the only replica drains is not sent to it: the
 * broker keeps it, and the replica that connects next answers it.
 */
static void test_arrival_while_draining_waits_for_the_next_replica(void **state)
{
        fixture *f = *state;
        async_box *held = &g_box, *late = &g_late;
        pthread_t stopper;

        memset(held, 0, sizeof(*held));
        memset(late, 0, sizeof(*late));
        send_async(f, "block", held);
        wait_for(&f->svc.started, 1);
        assert_int_equal(pthread_create(&stopper, NULL, stop_main, f), 0);
        sleep_ms(100); /* the stop has begun: it waits for the blocked call */
        send_async(f, "late", late);
        sleep_ms(200);
        assert_int_equal(atomic_load(&late->done), 0); /* neither refused nor run */
        assert_int_equal(atomic_load(&f->svc.started), 1);
        release(f);
        pthread_join(stopper, NULL);
        f->srv = NULL;
        wait_for(&held->done, 1);
        assert_int_equal(atomic_load(&held->codes[KS_OK]), 1);
        f->srv2 = start_replica(f, &f->svc2);
        wait_for(&late->done, 1);
        assert_int_equal(atomic_load(&late->codes[KS_OK]), 1);
        assert_int_equal(atomic_load(&f->svc2.started), 1);
        assert_int_equal(atomic_load(&f->svc.started), 1);
}

/*
 * Two replicas, each holding a blocked call (so the broker spreads new
 * calls over both), under a steady stream of calls while one of them stops:
 * every call is answered ok, none unavailable, none lost.
 */
static void test_calls_during_a_stop_all_answered(void **state)
{
        fixture *f = *state;
        async_box *box = &g_late, *held = &g_box;
        pthread_t stopper;
        int sent = 0;

        memset(box, 0, sizeof(*box));
        memset(held, 0, sizeof(*held));
        f->srv2 = start_replica(f, &f->svc2);
        send_async(f, "block", held);
        send_async(f, "block", held);
        wait_for(&f->svc.started, 1);
        wait_for(&f->svc2.started, 1);
        for (int i = 0; i < 20; i++) { /* both take calls */
                send_async(f, "x", box);
                sent++;
                sleep_ms(2);
        }
        wait_for(&box->done, sent);
        assert_true(atomic_load(&f->svc.started) > 1);
        assert_true(atomic_load(&f->svc2.started) > 1);
        assert_int_equal(pthread_create(&stopper, NULL, stop_main, f), 0);
        for (int i = 0; i < 40; i++) { /* 200 ms of calls while it drains */
                send_async(f, "x", box);
                sent++;
                sleep_ms(5);
        }
        release(f);
        pthread_join(stopper, NULL);
        f->srv = NULL;
        for (int i = 0; i < 20; i++) { /* and after it left */
                send_async(f, "x", box);
                sent++;
                sleep_ms(2);
        }
        wait_for(&box->done, sent);
        assert_int_equal(atomic_load(&box->codes[KS_UNAVAILABLE]), 0);
        assert_int_equal(atomic_load(&box->codes[KS_OK]), sent);
        wait_for(&held->done, 2);
        assert_int_equal(atomic_load(&held->codes[KS_OK]), 2);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_stop_answers_the_calls_it_holds, setup, teardown),
            cmocka_unit_test_setup_teardown(test_arrival_while_draining_waits_for_the_next_replica,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_calls_during_a_stop_all_answered, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
