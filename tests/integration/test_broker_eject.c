/*
 * A replica that stops answering but keeps its connection leaves the
 * broker's rotation, and comes back when it runs again.
 *
 * The test runs a broker of its own (in process, so that its metrics are
 * this process's) with KEELSON_BROKER_EJECT_AFTER_MS = EJECT_AFTER_MS and
 * KEELSON_BROKER_EJECT_CHECK_MS = EJECT_CHECK_MS, two auth replicas behind
 * it on the stack's database, and load: LOAD_THREADS threads calling
 * ResolveContext (an empty token: answered without the database) back to
 * back over nng, as the gateway does, with no resend. Then:
 *
 *   1. both replicas answer calls (each replica's own request counter);
 *   2. one replica is stopped (SIGSTOP): the calls it receives are held. The
 *      broker must eject it within EJECT_AFTER_MS + 2 * EJECT_CHECK_MS of
 *      its last reply (ks_broker.h); the test waits up to EJECT_WAIT_MS, ten
 *      times that, for keelson_broker_ejections_total to move;
 *   3. every call started after the ejection is answered ok, by the other
 *      replica (the stopped one answers nothing): none deadline_exceeded;
 *   4. the replica is continued (SIGCONT): it dials back, the broker counts
 *      a readmission, and the replica answers calls again (its counter of
 *      ok ResolveContext moves; the calls it held expired while it was
 *      stopped and count as deadline_exceeded, never ok).
 *
 * The only bounds are waits for what must happen, tied to the settings and
 * far above them; nothing asserts how fast.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "it_support.h"
#include "ks_broker.h"
#include "ks_code.h"
#include "ks_metrics.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define EJECT_AFTER_MS 1000
#define EJECT_CHECK_MS 100
#define EJECT_WAIT_MS  (10 * (EJECT_AFTER_MS + 2 * EJECT_CHECK_MS))
#define CALL_MS        2500 /* each call's deadline: a held call ends deadline_exceeded */
#define LOAD_THREADS   4
#define PHASE_MS                                                                                   \
        (CALL_MS + 1000) /* load after the ejection (outlives the held calls), and after SIGCONT   \
                          */
#define BACK_WAIT_MS 30000
#define PORT_TRIES   20
#define PORT_LOW     15000 /* below the ephemeral range, as stack.sh --free-ports */
#define PORT_SPAN    16900 /* base .. base+41 stays below 32000 */
#define RESOLVE      "keelson.auth.v1.AuthService/ResolveContext"
#define RESOLVE_OK   "keelson_rpc_requests_total{service=\"auth\",method=\"" RESOLVE "\",code=\"ok\"}"

static struct {
        it_stack stack;
        ks_broker *broker;
        char base[64];
        it_service replicas[2];
        ks_rpc_client *client;
} fx;

/* Calls of one load thread, by when they started relative to a mark. */
typedef struct load {
        pthread_t thread;
        atomic_bool *stop;
        _Atomic int64_t *mark_ms; /* 0: none yet */
        long ok_after, failed_after, held_before;
        char failure[KS_MESSAGE_MAX + 64];
} load;

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static uint64_t broker_counter(const char *name)
{
        /* the broker's own series, in this process's registry */
        return ks_counter_value(ks_counter_get(ks_metrics_default(), name, "", "device=\"auth\""));
}

static double replica_ok(const it_service *r)
{
        char url[64];
        double v = 0;

        snprintf(url, sizeof(url), "http://127.0.0.1:%d", r->health_port);
        return it_metric(url, RESOLVE_OK, &v) == 0 ? v : 0;
}

static void *load_main(void *arg)
{
        load *l = arg;
        ks_rpc_call_args a = {.method = RESOLVE, .request_id = "it-broker-eject"};
        ks_rpc_result res;

        while (!atomic_load(l->stop)) {
                int64_t mark = atomic_load(l->mark_ms), started = ks_now_ms();
                a.deadline_unix_ms = started + CALL_MS;
                int code = ks_rpc_call(fx.client, &a, &res);
                if (mark != 0 && started >= mark) {
                        if (code == KS_OK) {
                                l->ok_after++;
                        } else if (l->failed_after++ == 0) {
                                snprintf(l->failure, sizeof(l->failure), "%s: %s",
                                         ks_code_name(code), res.message);
                        }
                } else if (code == KS_DEADLINE_EXCEEDED) {
                        l->held_before++;
                }
                ks_rpc_result_clear(&res);
        }
        return NULL;
}

typedef struct load_set {
        load threads[LOAD_THREADS];
        atomic_bool stop;
        _Atomic int64_t mark_ms;
} load_set;

static void load_start(load_set *s)
{
        memset(s, 0, sizeof(*s));
        for (int i = 0; i < LOAD_THREADS; i++) {
                s->threads[i].stop = &s->stop;
                s->threads[i].mark_ms = &s->mark_ms;
                assert_int_equal(
                    pthread_create(&s->threads[i].thread, NULL, load_main, &s->threads[i]), 0);
        }
}

/* Stops and joins; sums what the threads saw into threads[0]. */
static void load_stop(load_set *s)
{
        atomic_store(&s->stop, true);
        for (int i = 0; i < LOAD_THREADS; i++) {
                pthread_join(s->threads[i].thread, NULL);
                if (i > 0) {
                        s->threads[0].ok_after += s->threads[i].ok_after;
                        s->threads[0].held_before += s->threads[i].held_before;
                        if (s->threads[0].failed_after == 0) {
                                memcpy(s->threads[0].failure, s->threads[i].failure,
                                       sizeof(s->threads[0].failure));
                        }
                        s->threads[0].failed_after += s->threads[i].failed_after;
                }
        }
}

static int start_broker(void)
{
        const ks_broker_options o = {.eject_after_ms = EJECT_AFTER_MS,
                                     .eject_check_ms = EJECT_CHECK_MS};

        for (int i = 0; i < PORT_TRIES && fx.broker == NULL; i++) {
                snprintf(fx.base, sizeof(fx.base), "tcp://127.0.0.1:%d",
                         PORT_LOW + rand() % PORT_SPAN);
                if (ks_broker_start_with(&fx.broker, fx.base, &o) != KS_OK) {
                        fx.broker = NULL;
                }
        }
        return fx.broker != NULL ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        for (int i = 0; i < 2; i++) {
                if (fx.replicas[i].pid > 0) {
                        kill(fx.replicas[i].pid, SIGCONT); /* a stopped one cannot stop */
                }
                it_service_stop(&fx.replicas[i]);
        }
        ks_rpc_client_free(fx.client);
        fx.client = NULL;
        ks_broker_stop(fx.broker);
        fx.broker = NULL;
        return 0;
}

static int setup(void **state)
{
        char env_broker[96], front[KS_URL_MAX];
        const char *urls[1] = {front};

        if (it_stack_load(&fx.stack) != 0) {
                return -1;
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        if (start_broker() != 0) {
                fprintf(stderr, "no free ports for a broker\n");
                return -1;
        }
        snprintf(env_broker, sizeof(env_broker), "KEELSON_BROKER_URL=%s", fx.base);
        /* its events would reach nobody behind this broker */
        const char *env[] = {env_broker, "KEELSON_AUTH_OUTBOX_RELAY=false", NULL};
        ks_rpc_client_options co = {
            .dial_urls = urls, .n_dial_urls = 1, .max_inflight = 64, .default_timeout_ms = CALL_MS};
        if (ks_broker_url(front, sizeof(front), fx.base, KS_SVC_AUTH, KS_SIDE_FRONT) != 0 ||
            it_service_start(&fx.stack, "keelson-auth", "KEELSON_AUTH", env, &fx.replicas[0]) !=
                0 ||
            it_service_start(&fx.stack, "keelson-auth", "KEELSON_AUTH", env, &fx.replicas[1]) !=
                0 ||
            ks_rpc_client_new(&fx.client, &co) != KS_OK) {
                teardown(state); /* cmocka runs no teardown after a failed setup */
                return -1;
        }
        *state = &fx;
        return 0;
}

/* Waits until fn() > floor, at most wait_ms; returns the last value seen. */
static double wait_above(double (*fn)(void), double floor, int wait_ms)
{
        double v = fn();
        for (int waited = 0; v <= floor && waited < wait_ms; waited += 50) {
                sleep_ms(50);
                v = fn();
        }
        return v;
}

static double ok_of_stopped(void)
{
        return replica_ok(&fx.replicas[0]);
}

static double ok_of_other(void)
{
        return replica_ok(&fx.replicas[1]);
}

static double ejections(void)
{
        return (double)broker_counter("keelson_broker_ejections_total");
}

static double readmissions(void)
{
        return (double)broker_counter("keelson_broker_readmissions_total");
}

static void test_hung_replica_leaves_and_returns(void **state)
{
        load_set ls;
        (void)state;

        /* 1. both in the rotation */
        load_start(&ls);
        assert_true(wait_above(ok_of_stopped, 0, BACK_WAIT_MS) > 0);
        assert_true(wait_above(ok_of_other, 0, BACK_WAIT_MS) > 0);
        double ejected_before = ejections(), readmitted_before = readmissions();

        /* 2. stopped: held calls, then an ejection */
        assert_int_equal(kill(fx.replicas[0].pid, SIGSTOP), 0);
        double ej = wait_above(ejections, ejected_before, EJECT_WAIT_MS);
        if (ej <= ejected_before) {
                fail_msg("no ejection within %d ms of SIGSTOP (eject after %d ms, check %d ms)",
                         EJECT_WAIT_MS, EJECT_AFTER_MS, EJECT_CHECK_MS);
        }
        assert_true(ej - ejected_before == 1); /* the stopped one only, never the last */

        /* 3. every call started from now on is answered, by the other replica */
        double other_before = ok_of_other();
        atomic_store(&ls.mark_ms, ks_now_ms());
        sleep_ms(PHASE_MS);
        load_stop(&ls);
        if (ls.threads[0].failed_after != 0) {
                fail_msg("%ld calls started after the ejection failed, the first %s",
                         ls.threads[0].failed_after, ls.threads[0].failure);
        }
        assert_true(ls.threads[0].ok_after > 0);
        /* the stopped replica held calls (the case this test is about) */
        assert_true(ls.threads[0].held_before > 0);
        assert_true(ok_of_other() - other_before >= (double)ls.threads[0].ok_after);

        /* 4. continued: it dials back and answers again (its /metrics only answers now) */
        assert_int_equal(kill(fx.replicas[0].pid, SIGCONT), 0);
        assert_true(wait_above(readmissions, readmitted_before, BACK_WAIT_MS) > readmitted_before);
        double resumed_ok = ok_of_stopped();
        load_start(&ls);
        atomic_store(&ls.mark_ms, ks_now_ms());
        double back = wait_above(ok_of_stopped, resumed_ok, BACK_WAIT_MS);
        sleep_ms(PHASE_MS);
        load_stop(&ls);
        assert_true(back > resumed_ok);
        if (ls.threads[0].failed_after != 0) {
                fail_msg("%ld calls failed after SIGCONT, the first %s", ls.threads[0].failed_after,
                         ls.threads[0].failure);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hung_replica_leaves_and_returns),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
