/*
 * ks_loop: see ks_loop.h. The stop is an event of the loop's own, made
 * active from the stopping thread: it runs on the loop and breaks it, so
 * the stop never lands between two turns of a loop that then waits forever.
 */
#include "ks_loop.h"

#include <event2/thread.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct ks_loop {
        struct event_base *base;
        struct event *stop;
        pthread_t thread;
        bool running;
};

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rv = -1;

static void threads_init(void)
{
        threads_rv = evthread_use_pthreads();
}

int ks_loop_threads_init(void)
{
        pthread_once(&threads_once, threads_init);
        return threads_rv;
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        event_base_loopbreak(((ks_loop *)arg)->base);
}

static void *loop_main(void *arg)
{
        ks_loop *l = arg;
        event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

int ks_loop_new(ks_loop **out)
{
        *out = NULL;
        ks_loop *l = calloc(1, sizeof(*l));
        if (l == NULL) {
                return KS_INTERNAL;
        }
        if (ks_loop_threads_init() != 0 || (l->base = event_base_new()) == NULL ||
            (l->stop = event_new(l->base, -1, 0, on_stop, l)) == NULL) {
                ks_loop_free(l);
                return KS_INTERNAL;
        }
        *out = l;
        return KS_OK;
}

struct event_base *ks_loop_base(const ks_loop *l)
{
        return l->base;
}

int ks_loop_start(ks_loop *l)
{
        if (l->running) {
                return KS_OK;
        }
        if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
                return KS_INTERNAL;
        }
        l->running = true;
        return KS_OK;
}

void ks_loop_stop(ks_loop *l)
{
        if (l == NULL || !l->running) {
                return;
        }
        event_active(l->stop, EV_TIMEOUT, 0);
        pthread_join(l->thread, NULL);
        l->running = false;
}

void ks_loop_free(ks_loop *l)
{
        if (l == NULL) {
                return;
        }
        ks_loop_stop(l);
        if (l->stop != NULL) {
                event_free(l->stop);
        }
        if (l->base != NULL) {
                event_base_free(l->base);
        }
        free(l);
}
