/*
 * ks_events: the event bus client side (see ks_events.h), speaking nng's
 * pub0/sub0 wire protocol with ks_sp on a loop of its own (ks_loop), so a
 * publisher or subscriber closes at once whatever its peers do.
 *
 * A publisher dials every broker's event input. ks_publish may be called
 * from any thread: it queues the message and wakes the loop, which sends it
 * down every connected pipe (a pipe over its send bound misses it, as a
 * full nng pub queue drops).
 *
 * A subscriber dials every broker's event output and filters by topic
 * prefix itself, as nng's sub0 does (the publisher side sends everything).
 * What matches waits in a queue of EVENT_QUEUE_MSGS for ks_subscriber_next;
 * a full queue drops its oldest message, as nng's sub0 does.
 */
#include "ks_events.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_code.h"
#include "ks_fifo.h"
#include "ks_log.h"
#include "ks_loop.h"
#include "ks_sp.h"
#include "ks_topology.h"

#define EVENT_MAX_BYTES (1u << 20)
#define TOPIC_MAX_BYTES 128
#define MSG_MAX_BYTES   (EVENT_MAX_BYTES + TOPIC_MAX_BYTES + 1)

/*
 * Queues: nng's pub/sub queues hold 16 messages per peer by default and drop
 * the oldest on overflow, so a relay draining a backlog lost most of a burst.
 * 8192 messages absorb any batch a relay publishes at once; a publisher's
 * pipe holds up to PIPE_SEND_MAX bytes its broker has not read yet.
 */
#define EVENT_QUEUE_MSGS 8192
#define PIPE_SEND_MAX    (64u << 20)
#define PIPE_IDLE_MAX    64 /* what a pipe that receives nothing may take */

typedef struct msg {
        ks_fifo_link link;
        size_t len;
        uint8_t data[];
} msg;

static void queue_push(ks_fifo *q, msg *m)
{
        ks_fifo_push(q, &m->link);
}

static msg *queue_pop(ks_fifo *q)
{
        ks_fifo_link *l = ks_fifo_pop(q);
        return l != NULL ? KS_FIFO_ITEM(l, msg, link) : NULL;
}

static void queue_clear(ks_fifo *q)
{
        msg *m;
        while ((m = queue_pop(q)) != NULL) {
                free(m);
        }
}

/* What a publisher and a subscriber share: a loop, its pipes, the dialers. */
typedef struct bus {
        ks_loop *loop;
        ks_sp *sp;
        ks_sp_dialer *dialers[KS_BROKERS_MAX];
        int n_dialers;
} bus;

static int bus_open(bus *b, size_t recv_max, size_t send_max)
{
        if (ks_loop_new(&b->loop) != KS_OK ||
            ks_sp_new(&b->sp, ks_loop_base(b->loop), recv_max, send_max) != KS_OK) {
                return KS_INTERNAL;
        }
        return KS_OK;
}

static int bus_dial(bus *b, const char *const *bases, int n, ks_broker_side side, uint16_t self,
                    uint16_t peer, const ks_sp_callbacks *cb, void *arg)
{
        char url[KS_URL_MAX];
        if (n < 0 || n > KS_BROKERS_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        for (int i = 0; i < n; i++) {
                if (ks_broker_url(url, sizeof(url), bases[i], 0, side) != 0) {
                        ks_log_error(NULL, "bad broker url", "{s:s}", "url", bases[i]);
                        return KS_INVALID_ARGUMENT;
                }
                int rv = ks_sp_dial(b->sp, url, self, peer, cb, arg, &b->dialers[i]);
                if (rv != KS_OK) {
                        ks_log_error(NULL, "cannot dial broker events", "{s:s}", "url", url);
                        return rv;
                }
                b->n_dialers++;
        }
        return KS_OK;
}

/* Stops the loop first: then nothing runs on the pipes while they are freed. */
static void bus_close(bus *b)
{
        ks_loop_stop(b->loop);
        ks_sp_free(b->sp);
        ks_loop_free(b->loop);
}

static void ignore_message(ks_sp_pipe *p, const uint8_t *m, size_t len, void *arg)
{
        (void)p;
        (void)m;
        (void)len;
        (void)arg;
}

/* ---- publisher ------------------------------------------------------------------------- */

struct ks_publisher {
        bus bus;
        struct event *wake;
        pthread_mutex_t mu;
        ks_fifo out; /* under mu */
        atomic_int connected;
};

static void publisher_added(ks_sp_pipe *p, void *arg)
{
        (void)p;
        atomic_fetch_add(&((ks_publisher *)arg)->connected, 1);
}

static void publisher_removed(ks_sp_pipe *p, void *arg)
{
        (void)p;
        atomic_fetch_sub(&((ks_publisher *)arg)->connected, 1);
}

static void publisher_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_publisher *p = arg;
        pthread_mutex_lock(&p->mu);
        ks_fifo q = ks_fifo_take(&p->out);
        pthread_mutex_unlock(&p->mu);
        msg *m;
        while ((m = queue_pop(&q)) != NULL) {
                for (int i = 0; i < p->bus.n_dialers; i++) {
                        ks_sp_pipe *pipe = ks_sp_dialer_pipe(p->bus.dialers[i]);
                        if (pipe != NULL) {
                                (void)ks_sp_send(pipe, NULL, 0, m->data, m->len);
                        }
                }
                free(m);
        }
}

int ks_publisher_connected(const ks_publisher *p)
{
        return atomic_load(&p->connected);
}

int ks_publisher_new(ks_publisher **out, const char *const *broker_bases, int n)
{
        static const ks_sp_callbacks cb = {publisher_added, ignore_message, publisher_removed};
        *out = NULL;
        ks_publisher *p = calloc(1, sizeof(*p));
        if (p == NULL) {
                return KS_INTERNAL;
        }
        pthread_mutex_init(&p->mu, NULL);
        int rv = bus_open(&p->bus, PIPE_IDLE_MAX, PIPE_SEND_MAX);
        if (rv == KS_OK) {
                p->wake = event_new(ks_loop_base(p->bus.loop), -1, 0, publisher_wake, p);
                rv = p->wake != NULL ? KS_OK : KS_INTERNAL;
        }
        if (rv == KS_OK) {
                rv = bus_dial(&p->bus, broker_bases, n, KS_SIDE_EVENTS_IN, KS_SP_PUB0, KS_SP_SUB0,
                              &cb, p);
        }
        if (rv == KS_OK) {
                rv = ks_loop_start(p->bus.loop);
        }
        if (rv != KS_OK) {
                ks_publisher_free(p);
                return rv;
        }
        *out = p;
        return KS_OK;
}

void ks_publisher_free(ks_publisher *p)
{
        if (p == NULL) {
                return;
        }
        ks_loop_stop(p->bus.loop);
        if (p->wake != NULL) {
                event_free(p->wake);
        }
        bus_close(&p->bus);
        queue_clear(&p->out);
        pthread_mutex_destroy(&p->mu);
        free(p);
}

int ks_publish(ks_publisher *p, const Keelson__Events__V1__Event *ev)
{
        size_t topic_len = strlen(ev->topic);
        if (topic_len == 0 || topic_len > TOPIC_MAX_BYTES) {
                return KS_INVALID_ARGUMENT;
        }
        size_t size = keelson__events__v1__event__get_packed_size(ev);
        if (size > EVENT_MAX_BYTES) {
                return KS_RESOURCE_EXHAUSTED;
        }
        msg *m = malloc(sizeof(*m) + topic_len + 1 + size);
        if (m == NULL) {
                return KS_INTERNAL;
        }
        m->len = topic_len + 1 + size;
        memcpy(m->data, ev->topic, topic_len);
        m->data[topic_len] = '\0';
        keelson__events__v1__event__pack(ev, m->data + topic_len + 1);

        pthread_mutex_lock(&p->mu);
        bool full = p->out.n >= EVENT_QUEUE_MSGS;
        bool first = p->out.n == 0;
        if (!full) {
                queue_push(&p->out, m);
        }
        pthread_mutex_unlock(&p->mu);
        if (full) {
                free(m);
                return KS_UNAVAILABLE; /* the loop has not sent the last 8192: the caller retries */
        }
        if (first) {
                event_active(p->wake, EV_TIMEOUT, 0);
        }
        return KS_OK;
}

/* ---- subscriber ------------------------------------------------------------------------ */

struct ks_subscriber {
        bus bus;
        char **prefixes;
        int n_prefixes;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        ks_fifo in; /* under mu */
        uint64_t dropped;
};

static bool wanted(const ks_subscriber *s, const uint8_t *m, size_t len)
{
        for (int i = 0; i < s->n_prefixes; i++) {
                size_t n = strlen(s->prefixes[i]);
                if (n <= len && memcmp(m, s->prefixes[i], n) == 0) {
                        return true;
                }
        }
        return false;
}

static void subscriber_message(ks_sp_pipe *p, const uint8_t *data, size_t len, void *arg)
{
        (void)p;
        ks_subscriber *s = arg;
        if (!wanted(s, data, len)) {
                return;
        }
        msg *m = malloc(sizeof(*m) + len);
        if (m == NULL) {
                return; /* pub/sub may drop */
        }
        m->len = len;
        memcpy(m->data, data, len);
        pthread_mutex_lock(&s->mu);
        queue_push(&s->in, m);
        msg *old = s->in.n > EVENT_QUEUE_MSGS ? queue_pop(&s->in) : NULL;
        if (old != NULL) {
                s->dropped++;
        }
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(old);
}

static void subscriber_pipe(ks_sp_pipe *p, void *arg)
{
        (void)p;
        (void)arg;
}

int ks_subscriber_new(ks_subscriber **out, const char *const *broker_bases, int n,
                      const char *const *prefixes, int n_prefixes)
{
        static const ks_sp_callbacks cb = {subscriber_pipe, subscriber_message, subscriber_pipe};
        *out = NULL;
        if (n_prefixes < 0) {
                return KS_INVALID_ARGUMENT;
        }
        ks_subscriber *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                return KS_INTERNAL;
        }
        if (ks_cond_init_monotonic(&s->cv) != 0) {
                free(s);
                return KS_INTERNAL;
        }
        pthread_mutex_init(&s->mu, NULL);
        int rv = KS_OK;
        s->prefixes = calloc((size_t)n_prefixes + 1, sizeof(*s->prefixes));
        for (int i = 0; s->prefixes != NULL && i < n_prefixes; i++) {
                if ((s->prefixes[i] = strdup(prefixes[i])) == NULL) {
                        break;
                }
                s->n_prefixes++;
        }
        if (s->n_prefixes != n_prefixes) {
                rv = KS_INTERNAL;
        }
        if (rv == KS_OK) {
                rv = bus_open(&s->bus, MSG_MAX_BYTES, PIPE_IDLE_MAX);
        }
        if (rv == KS_OK) {
                rv = bus_dial(&s->bus, broker_bases, n, KS_SIDE_EVENTS_OUT, KS_SP_SUB0, KS_SP_PUB0,
                              &cb, s);
        }
        if (rv == KS_OK) {
                rv = ks_loop_start(s->bus.loop);
        }
        if (rv != KS_OK) {
                ks_subscriber_free(s);
                return rv;
        }
        *out = s;
        return KS_OK;
}

void ks_subscriber_free(ks_subscriber *s)
{
        if (s == NULL) {
                return;
        }
        bus_close(&s->bus);
        if (s->dropped > 0) {
                ks_log_warn(NULL, "event subscriber dropped events its reader had not taken",
                            "{s:I}", "dropped", (json_int_t)s->dropped);
        }
        queue_clear(&s->in);
        for (int i = 0; i < s->n_prefixes; i++) {
                free(s->prefixes[i]);
        }
        free(s->prefixes);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
}

int ks_subscriber_next(ks_subscriber *s, int timeout_ms, Keelson__Events__V1__Event **out)
{
        *out = NULL;
        struct timespec until =
            ks_deadline_timespec(ks_deadline_after_ms(timeout_ms)); /* negative: due now */
        for (;;) {
                pthread_mutex_lock(&s->mu);
                msg *m;
                while ((m = queue_pop(&s->in)) == NULL) {
                        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0 && s->in.n == 0) {
                                pthread_mutex_unlock(&s->mu);
                                return KS_DEADLINE_EXCEEDED;
                        }
                }
                pthread_mutex_unlock(&s->mu);
                const uint8_t *nul = memchr(m->data, '\0', m->len);
                if (nul != NULL) {
                        size_t off = (size_t)(nul - m->data) + 1;
                        *out =
                            keelson__events__v1__event__unpack(NULL, m->len - off, m->data + off);
                }
                free(m);
                if (*out != NULL) {
                        return KS_OK;
                }
                ks_log_warn(NULL, "dropped a malformed event", NULL);
        }
}
