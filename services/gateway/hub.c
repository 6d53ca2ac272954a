/* See hub.h. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "grpc.h"
#include "hub.h"
#include "keelson/events/v1/event_service.pb-c.h"
#include "ks_clock.h"
#include "ks_events.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_topology.h"
#include "rpcstream.h"

#define QUEUE_MAX     4096 /* events waiting for the loop; more are dropped (counted) */
#define POLL_MS       250
#define ERROR_MS      100
#define TICK_MS_MAX   1000
#define TENANT_MAX    64
#define CURSOR_FORMAT "v1.%016" PRIx64 ".%" PRIu64 ".%" PRId64
/* SubscribeResponse.event: field 1, length-delimited; the tag and a varint length at most. */
#define EVENT_FIELD_TAG 0x0a
#define EVENT_HEAD_MAX  11

/* The topics one may subscribe to: billing's topics.def, as the webhook service has them. */
static const char *const topics_all[] = {
#define KS_TOPIC(id, topic, d) topic,
#include "../billing/topics.def"
#undef KS_TOPIC
};
#define TOPICS_N (sizeof(topics_all) / sizeof(topics_all[0]))

bool gw_hub_topic_ok(const char *topic)
{
        for (size_t i = 0; i < TOPICS_N; i++) {
                if (strcmp(topics_all[i], topic) == 0) {
                        return true;
                }
        }
        return false;
}

/* One event as it is kept: its envelope packed, what a stream matches it on. */
typedef struct kept {
        uint64_t seq;
        int64_t at_ms; /* occurred_at_unix_ms */
        int64_t kept_ms;
        char tenant[TENANT_MAX + 1];
        int topic; /* index in topics_all */
        uint8_t *packed;
        size_t len;
} kept;

typedef struct queued {
        struct queued *next;
        Keelson__Events__V1__Event *ev;
} queued;

typedef struct sub {
        struct sub *prev, *next;
        gw_hub *hub;
        gw_req *req;
        gw_wire wire; /* the protocol its client speaks */
        char tenant[TENANT_MAX + 1];
        bool topics[TOPICS_N]; /* which it asked for */
        uint64_t last_seq;     /* of the last event sent */
        int64_t last_at_ms;
        int64_t sent_ms; /* when it was last sent anything */
} sub;

struct gw_hub {
        gw_hub_config cfg;
        struct event_base *base;
        ks_subscriber *bus;
        pthread_t thread;
        bool started;
        atomic_bool stop;
        struct event *wake;
        struct event *tick;
        pthread_mutex_t mu; /* guards head, tail, n_queued */
        queued *head, *tail;
        size_t n_queued;
        uint64_t epoch; /* this run */
        uint64_t seq;   /* of the last event numbered */
        kept *ring;     /* cfg.retain slots; seq % retain */
        sub *subs;
        size_t n_subs;
        bool draining;
        ks_gauge *streams;
        ks_counter *events;
        ks_counter *dropped;
        ks_counter *cut_slow;
};

/* ---- the bus thread ----------------------------------------------------------------- */

static void *run(void *arg)
{
        gw_hub *h = arg;
        while (!atomic_load(&h->stop)) {
                Keelson__Events__V1__Event *ev = NULL;
                int rc = ks_subscriber_next(h->bus, POLL_MS, &ev);
                if (rc == KS_DEADLINE_EXCEEDED) {
                        continue;
                }
                if (rc != KS_OK) {
                        struct timespec ts = {0, ERROR_MS * 1000000L};
                        nanosleep(&ts, NULL);
                        continue;
                }
                queued *q = calloc(1, sizeof(*q));
                pthread_mutex_lock(&h->mu);
                bool room = q != NULL && h->n_queued < QUEUE_MAX;
                if (room) {
                        q->ev = ev;
                        if (h->tail != NULL) {
                                h->tail->next = q;
                        } else {
                                h->head = q;
                        }
                        h->tail = q;
                        if (h->n_queued++ == 0) {
                                event_active(h->wake, EV_READ, 0);
                        }
                }
                pthread_mutex_unlock(&h->mu);
                if (!room) {
                        free(q);
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                        ks_counter_inc(h->dropped);
                }
        }
        return NULL;
}

/* ---- streams ------------------------------------------------------------------------ */

static void cursor_of(const gw_hub *h, uint64_t seq, int64_t at_ms, char out[GW_HUB_CURSOR_MAX])
{
        snprintf(out, GW_HUB_CURSOR_MAX, CURSOR_FORMAT, h->epoch, seq, at_ms);
}

static void sub_free(sub *s)
{
        gw_hub *h = s->hub;
        if (s->prev != NULL) {
                s->prev->next = s->next;
        } else {
                h->subs = s->next;
        }
        if (s->next != NULL) {
                s->next->prev = s->prev;
        }
        h->n_subs--;
        ks_gauge_add(h->streams, -1);
        free(s);
}

/* Ends a stream with a status (its trailers), then frees it. */
static void sub_end(sub *s, int code, const char *message)
{
        gw_rpcstream_end(s->req, s->wire, code, message);
        sub_free(s);
}

/* The client went away. */
static void sub_gone(void *arg)
{
        sub_free(arg);
}

/*
 * One SubscribeResponse to a stream: ev (packed, or NULL for a heartbeat or
 * a gap notice). False when the stream was ended (too far behind).
 *
 * In protobuf the event goes as it was kept: field 1's tag and length, its
 * bytes, then the other fields packed (fields may come in any order), so
 * an event is not unpacked and packed again for every stream. In JSON it
 * is unpacked to be written out.
 */
static bool sub_send(sub *s, const uint8_t *ev, size_t ev_len, uint64_t seq, int64_t at_ms,
                     bool gap)
{
        gw_hub *h = s->hub;
        char cursor[GW_HUB_CURSOR_MAX];
        Keelson__Events__V1__SubscribeResponse r = KEELSON__EVENTS__V1__SUBSCRIBE_RESPONSE__INIT;
        cursor_of(h, seq, at_ms, cursor);
        r.cursor = cursor;
        r.heartbeat = ev == NULL && !gap;
        r.gap = gap;
        if (s->wire == GW_WIRE_CONNECT_JSON) {
                Keelson__Events__V1__Event *unpacked = NULL;
                if (ev != NULL &&
                    (unpacked = keelson__events__v1__event__unpack(NULL, ev_len, ev)) == NULL) {
                        return true; /* cannot happen: it was packed here */
                }
                r.event = unpacked;
                (void)gw_rpcstream_send(s->req, s->wire, &r.base); /* out of memory: skipped */
                if (unpacked != NULL) {
                        keelson__events__v1__event__free_unpacked(unpacked, NULL);
                }
        } else {
                size_t rest = keelson__events__v1__subscribe_response__get_packed_size(&r);
                uint8_t *buf = malloc(EVENT_HEAD_MAX + (ev != NULL ? ev_len : 0) + rest + 1);
                if (buf != NULL) {
                        size_t n = 0;
                        if (ev != NULL) {
                                buf[n++] = EVENT_FIELD_TAG;
                                for (uint64_t v = ev_len; n == 1 || v > 0; v >>= 7) {
                                        buf[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                                }
                                memcpy(buf + n, ev, ev_len);
                                n += ev_len;
                        }
                        n += keelson__events__v1__subscribe_response__pack(&r, buf + n);
                        (void)gw_rpcstream_send_packed(s->req, s->wire, buf, n);
                }
                free(buf);
        }
        s->sent_ms = ks_mono_ms();
        if (ev != NULL) {
                s->last_seq = seq;
                s->last_at_ms = at_ms;
        }
        if (gw_req_stream_pending(s->req) > h->cfg.buffer_bytes) {
                /* Its trailers would wait behind what it does not read: reset instead. */
                ks_counter_inc(h->cut_slow);
                gw_req_on_cancel(s->req, NULL, NULL);
                gw_req_stream_abort(s->req);
                sub_free(s);
                return false;
        }
        return true;
}

static bool matches(const sub *s, const kept *k)
{
        return s->topics[k->topic] && strcmp(s->tenant, k->tenant) == 0;
}

/* ---- the loop ----------------------------------------------------------------------- */

static int topic_index(const char *topic)
{
        for (size_t i = 0; i < TOPICS_N; i++) {
                if (strcmp(topics_all[i], topic) == 0) {
                        return (int)i;
                }
        }
        return -1;
}

static kept *ring_at(gw_hub *h, uint64_t seq)
{
        return h->cfg.retain > 0 ? &h->ring[seq % h->cfg.retain] : NULL;
}

/* The oldest number still kept (h->seq + 1 when none is). */
static uint64_t oldest(gw_hub *h)
{
        int64_t now = ks_mono_ms();
        uint64_t first = h->seq + 1 > h->cfg.retain ? h->seq + 1 - h->cfg.retain : 1;
        while (first <= h->seq) {
                kept *k = ring_at(h, first);
                if (k->seq == first && k->packed != NULL && now - k->kept_ms <= h->cfg.retain_ms) {
                        break;
                }
                first++;
        }
        return first;
}

static void take(gw_hub *h, Keelson__Events__V1__Event *ev)
{
        int topic = topic_index(ev->topic);
        if (topic < 0 || ev->tenant_id == NULL || ev->tenant_id[0] == '\0' ||
            strlen(ev->tenant_id) > TENANT_MAX) {
                return;
        }
        ks_counter_inc(h->events);
        kept k = {.seq = ++h->seq,
                  .at_ms = ev->occurred_at_unix_ms,
                  .kept_ms = ks_mono_ms(),
                  .topic = topic};
        snprintf(k.tenant, sizeof(k.tenant), "%s", ev->tenant_id);
        k.len = keelson__events__v1__event__get_packed_size(ev);
        if ((k.packed = malloc(k.len > 0 ? k.len : 1)) == NULL) {
                return;
        }
        keelson__events__v1__event__pack(ev, k.packed);
        sub *s = h->subs;
        while (s != NULL) {
                sub *next = s->next; /* s may end */
                if (matches(s, &k)) {
                        sub_send(s, k.packed, k.len, k.seq, k.at_ms, false);
                }
                s = next;
        }
        kept *slot = ring_at(h, k.seq);
        if (slot == NULL) {
                free(k.packed);
                return;
        }
        free(slot->packed);
        *slot = k;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_hub *h = arg;
        pthread_mutex_lock(&h->mu);
        queued *q = h->head;
        h->head = h->tail = NULL;
        h->n_queued = 0;
        pthread_mutex_unlock(&h->mu);
        while (q != NULL) {
                queued *next = q->next;
                take(h, q->ev);
                keelson__events__v1__event__free_unpacked(q->ev, NULL);
                free(q);
                q = next;
        }
}

/* Heartbeats to streams that have been sent nothing for heartbeat_ms. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_hub *h = arg;
        int64_t now = ks_mono_ms();
        sub *s = h->subs;
        while (s != NULL) {
                sub *next = s->next;
                if (now - s->sent_ms >= h->cfg.heartbeat_ms) {
                        sub_send(s, NULL, 0, s->last_seq, s->last_at_ms, false);
                }
                s = next;
        }
}

/* "v1.<epoch hex>.<seq>.<time ms>". */
static int cursor_parse(const char *c, uint64_t *epoch, uint64_t *seq, int64_t *at_ms)
{
        char tail;
        if (strlen(c) >= GW_HUB_CURSOR_MAX ||
            sscanf(c, "v1.%16" SCNx64 ".%" SCNu64 ".%" SCNd64 "%c", epoch, seq, at_ms, &tail) !=
                3) {
                return -1;
        }
        return 0;
}

/* What a cursor asks to be sent again; false when the stream was ended meanwhile. */
static bool replay(sub *s, uint64_t epoch, uint64_t seq, int64_t at_ms)
{
        gw_hub *h = s->hub;
        uint64_t first = oldest(h);
        bool ours = epoch == h->epoch && seq <= h->seq;
        uint64_t from = ours && seq + 1 >= first ? seq + 1 : first;
        if (!(ours && seq + 1 >= first) && !sub_send(s, NULL, 0, seq, at_ms, true)) {
                return false;
        }
        for (uint64_t n = from; n <= h->seq; n++) {
                kept *k = ring_at(h, n);
                if (k == NULL || k->seq != n || k->packed == NULL || !matches(s, k)) {
                        continue;
                }
                if (!ours && k->at_ms < at_ms - GW_HUB_SKEW_MS) {
                        continue;
                }
                if (!sub_send(s, k->packed, k->len, k->seq, k->at_ms, false)) {
                        return false;
                }
        }
        return true;
}

int gw_hub_subscribe(gw_hub *h, gw_req *req, gw_wire wire, const char *tenant_id,
                     const char *const *topics, size_t n, const char *cursor, const char **msg)
{
        uint64_t epoch = 0, seq = 0;
        int64_t at_ms = 0;
        bool resume = cursor != NULL && cursor[0] != '\0';
        if (h->draining) {
                *msg = "the gateway is stopping: subscribe to another";
                return KS_UNAVAILABLE;
        }
        if (resume && cursor_parse(cursor, &epoch, &seq, &at_ms) != 0) {
                *msg = "cursor: not one this service gave";
                return KS_INVALID_ARGUMENT;
        }
        if (h->n_subs >= h->cfg.subscribers_max) {
                *msg = "too many event streams on this gateway";
                return KS_RESOURCE_EXHAUSTED;
        }
        if (strlen(tenant_id) > TENANT_MAX) {
                *msg = "tenant id too long";
                return KS_INVALID_ARGUMENT;
        }
        sub *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                *msg = "out of memory";
                return KS_RESOURCE_EXHAUSTED;
        }
        s->hub = h;
        s->req = req;
        s->wire = wire;
        snprintf(s->tenant, sizeof(s->tenant), "%s", tenant_id);
        for (size_t i = 0; i < TOPICS_N; i++) {
                s->topics[i] = n == 0;
        }
        for (size_t i = 0; i < n; i++) {
                int t = topic_index(topics[i]);
                if (t >= 0) {
                        s->topics[t] = true;
                }
        }
        s->next = h->subs;
        if (h->subs != NULL) {
                h->subs->prev = s;
        }
        h->subs = s;
        h->n_subs++;
        ks_gauge_add(h->streams, 1);
        gw_req_on_cancel(req, sub_gone, s);
        gw_rpcstream_open(req, wire);
        /* Now, as a cursor: a client that stops before any event resumes from here. */
        s->last_seq = h->seq;
        s->last_at_ms = ks_now_ms();
        if (!sub_send(s, NULL, 0, s->last_seq, s->last_at_ms, false)) {
                return KS_OK;
        }
        if (resume) {
                replay(s, epoch, seq, at_ms);
        }
        return KS_OK;
}

void gw_hub_drain(gw_hub *h)
{
        if (h == NULL) {
                return;
        }
        h->draining = true;
        while (h->subs != NULL) {
                sub_end(h->subs, KS_UNAVAILABLE, "the gateway is stopping: resume on another");
        }
}

/* ---- life --------------------------------------------------------------------------- */

static int bus_open(gw_hub *h)
{
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        const char *bases[KS_BROKERS_MAX];
        int n = ks_broker_list(h->cfg.broker_url, brokers, KS_BROKERS_MAX);
        if (n < 1) {
                return -1;
        }
        for (int i = 0; i < n; i++) {
                bases[i] = brokers[i];
        }
        return ks_subscriber_new(&h->bus, bases, n, topics_all, (int)TOPICS_N) == KS_OK ? 0 : -1;
}

int gw_hub_new(gw_hub **out, struct event_base *base, const gw_hub_config *cfg)
{
        *out = NULL;
        gw_hub *h = calloc(1, sizeof(*h));
        if (h == NULL) {
                return -1;
        }
        h->cfg = *cfg;
        h->base = base;
        pthread_mutex_init(&h->mu, NULL);
        atomic_init(&h->stop, false);
        if (RAND_bytes((unsigned char *)&h->epoch, sizeof(h->epoch)) != 1) {
                h->epoch = (uint64_t)ks_now_ms();
        }
        ks_metrics *m = ks_metrics_default();
        h->streams =
            ks_gauge_get(m, "keelson_gateway_event_streams", "Open EventService streams", NULL);
        h->events = ks_counter_get(m, "keelson_gateway_event_stream_events_total",
                                   "Events taken for EventService streams", NULL);
        h->dropped = ks_counter_get(m, "keelson_gateway_event_stream_dropped_total",
                                    "Events dropped before the loop could take them", NULL);
        h->cut_slow =
            ks_counter_get(m, "keelson_gateway_event_streams_cut_total",
                           "Streams ended because their reader fell too far behind", NULL);
        struct timeval tv = {0, 0};
        int64_t tick = cfg->heartbeat_ms < TICK_MS_MAX ? cfg->heartbeat_ms : TICK_MS_MAX;
        tv.tv_sec = (time_t)(tick / 1000);
        tv.tv_usec = (suseconds_t)(tick % 1000) * 1000;
        if (cfg->retain > 0 && (h->ring = calloc(cfg->retain, sizeof(*h->ring))) == NULL) {
                gw_hub_free(h);
                return -1;
        }
        h->wake = event_new(base, -1, EV_PERSIST, on_wake, h);
        h->tick = event_new(base, -1, EV_PERSIST, on_tick, h);
        if (h->wake == NULL || h->tick == NULL || event_add(h->tick, &tv) != 0 ||
            bus_open(h) != 0 || pthread_create(&h->thread, NULL, run, h) != 0) {
                ks_log_error(NULL, "cannot subscribe to events for EventService", NULL);
                gw_hub_free(h);
                return -1;
        }
        h->started = true;
        *out = h;
        return 0;
}

void gw_hub_free(gw_hub *h)
{
        if (h == NULL) {
                return;
        }
        atomic_store(&h->stop, true);
        if (h->started) {
                pthread_join(h->thread, NULL);
        }
        ks_subscriber_free(h->bus);
        while (h->subs != NULL) {
                sub_free(h->subs); /* their requests are the front's, gone or going */
        }
        while (h->head != NULL) {
                queued *next = h->head->next;
                keelson__events__v1__event__free_unpacked(h->head->ev, NULL);
                free(h->head);
                h->head = next;
        }
        for (size_t i = 0; h->ring != NULL && i < h->cfg.retain; i++) {
                free(h->ring[i].packed);
        }
        free(h->ring);
        if (h->wake != NULL) {
                event_free(h->wake);
        }
        if (h->tick != NULL) {
                event_free(h->tick);
        }
        pthread_mutex_destroy(&h->mu);
        free(h);
}
