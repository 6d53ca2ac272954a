/*
 * ks_broker_drain, through two real in-process brokers on loopback TCP, a
 * replica dialling both backs and a client dialling both fronts: a broker
 * that drains tells its clients, so their new calls go to the other broker,
 * and it stops only once the calls it forwarded are answered, so each
 * call runs once. Without the drain, the calls the stopped broker held are
 * sent again through the other broker and run twice.
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

#include "auth.pb-c.h"
#include "ks_broker.h"
#include "ks_clock.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define CALLS_MAX         256
#define HOLD_MS           150  /* each call of the test runs this long */
#define WAIT_MS           5000 /* for anything that should take far less */
#define CLIENT_TIMEOUT_MS 8000

/* Runs per call, by the call's number (its email). */
static atomic_int g_runs[CALLS_MAX];
static atomic_int g_done, g_ok, g_other;

typedef struct fixture {
        ks_broker *a, *b;
        char base_a[64], base_b[64];
        ks_rpc_server *srv;
        ks_rpc_client *client;
} fixture;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* Counts a run of the call whose number is the email, holds HOLD_MS, echoes. */
static int hold(ks_call *call)
{
        const Keelson__Auth__V1__SignUpRequest *in = (const void *)call->in;
        int n = atoi(in->email);

        if (n >= 0 && n < CALLS_MAX) {
                atomic_fetch_add(&g_runs[n], 1);
        }
        sleep_ms(HOLD_MS);
        Keelson__Auth__V1__SignUpResponse out = KEELSON__AUTH__V1__SIGN_UP_RESPONSE__INIT;
        out.user_id = in->email;
        return ks_call_reply(call, &out.base);
}

static const ks_method methods[] = {
    {.name = "keelson.auth.v1.AuthService/SignUp",
     .input = &keelson__auth__v1__sign_up_request__descriptor,
     .output = &keelson__auth__v1__sign_up_response__descriptor,
     .handler = hold,
     .flags = KS_M_PUBLIC,
     .bearer = KS_BEARER_NONE},
};

static void side_urls(fixture *f, ks_broker_side side, char urls[2][KS_URL_MAX])
{
        assert_int_equal(ks_broker_url(urls[0], KS_URL_MAX, f->base_a, KS_SVC_AUTH, side), 0);
        assert_int_equal(ks_broker_url(urls[1], KS_URL_MAX, f->base_b, KS_SVC_AUTH, side), 0);
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));
        char back[2][KS_URL_MAX], front[2][KS_URL_MAX];

        assert_non_null(f);
        for (int i = 0; i < CALLS_MAX; i++) {
                atomic_store(&g_runs[i], 0);
        }
        atomic_store(&g_done, 0);
        atomic_store(&g_ok, 0);
        atomic_store(&g_other, 0);
        assert_int_equal(test_broker_start(&f->a, f->base_a, sizeof(f->base_a)), 0);
        assert_int_equal(test_broker_start(&f->b, f->base_b, sizeof(f->base_b)), 0);
        side_urls(f, KS_SIDE_BACK, back);
        side_urls(f, KS_SIDE_FRONT, front);
        const char *backs[2] = {back[0], back[1]}, *fronts[2] = {front[0], front[1]};
        ks_rpc_client_options co = {.dial_urls = fronts,
                                    .n_dial_urls = 2,
                                    .max_inflight = CALLS_MAX,
                                    .default_timeout_ms = CLIENT_TIMEOUT_MS};
        assert_int_equal(ks_rpc_client_new(&f->client, &co), KS_OK);
        ks_rpc_server_options o = {.service_name = "auth",
                                   .dial_urls = backs,
                                   .n_dial_urls = 2,
                                   .methods = methods,
                                   .n_methods = 1,
                                   .workers = 64,
                                   .queue_max = 64,
                                   .max_inflight = 256};
        assert_int_equal(ks_rpc_server_start(&f->srv, &o), KS_OK);
        for (int t = 0; t < WAIT_MS / 10; t++) {
                if (ks_rpc_client_connected(f->client) == 2 &&
                    ks_rpc_server_connected(f->srv) == 2) {
                        sleep_ms(50); /* the brokers' side of each pipe settles too */
                        *state = f;
                        return 0;
                }
                sleep_ms(10);
        }
        fail_msg("peers never connected");
        return -1;
}

static int teardown(void **state)
{
        fixture *f = *state;

        ks_rpc_client_free(f->client); /* ends what is still in flight */
        ks_rpc_server_stop(f->srv);
        ks_broker_stop(f->a);
        ks_broker_stop(f->b);
        free(f);
        return 0;
}

static void on_done(void *arg, ks_rpc_result *res)
{
        (void)arg;
        atomic_fetch_add(res->code == KS_OK ? &g_ok : &g_other, 1);
        atomic_fetch_add(&g_done, 1);
}

static void send_call(fixture *f, int n)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        char email[16];
        uint8_t buf[64];

        snprintf(email, sizeof(email), "%d", n);
        req.email = email;
        size_t len = keelson__auth__v1__sign_up_request__pack(&req, buf);
        ks_rpc_call_args a = {.method = methods[0].name, .payload = buf, .payload_len = len};
        assert_int_equal(ks_rpc_call_async(f->client, &a, on_done, NULL), KS_OK);
}

static void wait_done(int n)
{
        for (int t = 0; t < (CLIENT_TIMEOUT_MS + WAIT_MS) / 5 && atomic_load(&g_done) < n; t++) {
                sleep_ms(5);
        }
        assert_int_equal(atomic_load(&g_done), n);
}

typedef struct drainer {
        fixture *f;
        bool drained;
        int64_t took_ms;
} drainer;

static void *drain_main(void *arg)
{
        drainer *d = arg;
        int64_t t0 = ks_mono_ms();
        d->drained = ks_broker_drain(d->f->a, 10000);
        d->took_ms = ks_mono_ms() - t0;
        ks_broker_stop(d->f->a);
        d->f->a = NULL;
        return NULL;
}

/*
 * Calls stream in, each held HOLD_MS by the replica, while broker a drains
 * and stops: every call is answered ok and ran exactly once, and the drain
 * ended as soon as a's calls were answered (the calls made meanwhile went
 * to b, or a would have held calls to the end of its time).
 */
static void test_drain_lets_every_call_run_once(void **state)
{
        fixture *f = *state;
        drainer d = {.f = f};
        pthread_t t;
        int sent = 0;

        for (; sent < 40; sent++) { /* both brokers carry calls, held at the replica */
                send_call(f, sent);
                sleep_ms(3);
        }
        assert_int_equal(pthread_create(&t, NULL, drain_main, &d), 0);
        for (; sent < 160; sent++) { /* and more while a drains, and after it stopped */
                send_call(f, sent);
                sleep_ms(3);
        }
        pthread_join(t, NULL);
        wait_done(sent);
        assert_int_equal(atomic_load(&g_ok), sent);
        assert_int_equal(atomic_load(&g_other), 0);
        for (int i = 0; i < sent; i++) {
                if (atomic_load(&g_runs[i]) != 1) {
                        fail_msg("call %d ran %d times", i, atomic_load(&g_runs[i]));
                }
        }
        assert_true(d.drained);
        assert_true(d.took_ms < HOLD_MS + 1000);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_drain_lets_every_call_run_once, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
