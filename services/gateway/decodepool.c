/*
 * See decodepool.h. Two queues under one mutex: jobs waiting for a worker
 * (todo, a condition variable wakes the workers) and jobs decoded (done, a
 * persistent event wakes the loop, activated when done was empty: the same
 * reasoning as in upstream.c). The loop never waits on a worker.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "decodepool.h"
#include "ks_code.h"

#define THREADS_MAX 64

struct gw_decodepool {
        struct event *wake;
        gw_decoded_fn fn;
        void *arg;
        size_t queue_max;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stopping;
        ks_fifo todo, done; /* of gw_decode_job */
        pthread_t threads[THREADS_MAX];
        int n_threads;
};

static void push(ks_fifo *q, gw_decode_job *j)
{
        ks_fifo_push(q, &j->link);
}

static gw_decode_job *pop(ks_fifo *q)
{
        ks_fifo_link *l = ks_fifo_pop(q);
        return l != NULL ? KS_FIFO_ITEM(l, gw_decode_job, link) : NULL;
}

static void *worker_main(void *arg)
{
        gw_decodepool *p = arg;
        pthread_mutex_lock(&p->mu);
        for (;;) {
                while (!p->stopping && p->todo.n == 0) {
                        pthread_cond_wait(&p->cv, &p->mu);
                }
                if (p->stopping) {
                        break;
                }
                gw_decode_job *j = pop(&p->todo);
                pthread_mutex_unlock(&p->mu);
                j->rc = gw_decode(j->desc, j->codec, j->body, j->body_len, &j->payload,
                                  &j->payload_len, j->err, sizeof(j->err));
                free(j->body);
                j->body = NULL;
                pthread_mutex_lock(&p->mu);
                bool was_empty = p->done.n == 0;
                push(&p->done, j);
                if (was_empty) {
                        event_active(p->wake, EV_READ, 0);
                }
        }
        pthread_mutex_unlock(&p->mu);
        return NULL;
}

static void hand_back(gw_decodepool *p)
{
        pthread_mutex_lock(&p->mu);
        ks_fifo done = ks_fifo_take(&p->done);
        pthread_mutex_unlock(&p->mu);
        for (gw_decode_job *j; (j = pop(&done)) != NULL;) {
                p->fn(j, p->arg); /* may free the job: it is off the list already */
        }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        hand_back(arg);
}

int gw_decodepool_new(gw_decodepool **out, struct event_base *base, int threads, size_t queue_max,
                      gw_decoded_fn fn, void *arg)
{
        *out = NULL;
        if (threads < 1 || threads > THREADS_MAX) {
                return -1;
        }
        gw_decodepool *p = calloc(1, sizeof(*p));
        if (p == NULL) {
                return -1;
        }
        p->fn = fn;
        p->arg = arg;
        p->queue_max = queue_max;
        if (pthread_mutex_init(&p->mu, NULL) != 0 || pthread_cond_init(&p->cv, NULL) != 0 ||
            (p->wake = event_new(base, -1, EV_PERSIST, on_wake, p)) == NULL) {
                free(p);
                return -1;
        }
        event_add(p->wake, NULL);
        for (; p->n_threads < threads; p->n_threads++) {
                if (pthread_create(&p->threads[p->n_threads], NULL, worker_main, p) != 0) {
                        gw_decodepool_free(p);
                        return -1;
                }
        }
        *out = p;
        return 0;
}

int gw_decodepool_submit(gw_decodepool *p, gw_decode_job *job)
{
        job->rc = KS_CANCELED;
        job->payload = NULL;
        job->payload_len = 0;
        job->err[0] = '\0';
        pthread_mutex_lock(&p->mu);
        if (p->todo.n >= p->queue_max) {
                pthread_mutex_unlock(&p->mu);
                return -1;
        }
        push(&p->todo, job);
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return 0;
}

void gw_decodepool_free(gw_decodepool *p)
{
        if (p == NULL) {
                return;
        }
        pthread_mutex_lock(&p->mu);
        p->stopping = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads; i++) {
                pthread_join(p->threads[i], NULL); /* each finishes the job it has */
        }
        for (gw_decode_job *j; (j = pop(&p->todo)) != NULL;) {
                free(j->body); /* never decoded: rc stays KS_CANCELED */
                j->body = NULL;
                push(&p->done, j);
        }
        hand_back(p);
        if (p->wake != NULL) {
                event_free(p->wake);
        }
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
}
