/*
 * auth.context_revoked: auth publishes one after every commit that must end
 * cached contexts at once (logout, revoked sessions or API keys, role
 * changes, removed members, password changes); every gateway replica evicts
 * what it names.
 *
 * ks_subscriber_next blocks, so a thread of our own waits on it (waking
 * every EVENTS_POLL_MS to see whether it should stop), decodes each event and
 * hands it to the loop the way upstream.c hands back replies: a mutex-guarded
 * queue and a persistent event activated when the queue was empty. The
 * cache is touched on the loop only.
 *
 * Pub/sub may drop: the cache's TTL is the floor for a lost event. Where we
 * drop ourselves (the queue is full, an event names more tokens than we
 * keep), the whole cache goes instead, so nothing revoked survives.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "events.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "ks_crypto.h"
#include "ks_events.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_topology.h"

#define REVOKED_TOPIC      "auth.context_revoked"
#define REVOKED_TOKENS_MAX 1024 /* per event; more: the whole cache goes */
#define EVENTS_QUEUE_MAX   1024 /* events waiting for the loop; more: likewise */
#define EVENTS_POLL_MS     250
#define EVENTS_ERROR_MS    100 /* pause after a receive error */

typedef struct revocation {
        struct revocation *next;
        size_t n_tokens;
        uint8_t (*tokens)[KS_SHA256_BYTES];
        char user_id[GW_ID_MAX + 1];
        char tenant_id[GW_ID_MAX + 1];
        char api_key_id[GW_ID_MAX + 1];
        bool everything; /* too big to list: clear the cache */
} revocation;

struct gw_events {
        gw_cache *cache;
        ks_subscriber *sub;
        pthread_t thread;
        bool started;
        atomic_bool stop;
        struct event *wake;
        pthread_mutex_t mu; /* guards head, tail, queued, overflowed */
        revocation *head, *tail;
        size_t queued;
        bool overflowed;
        ks_counter *received, *dropped;
};

static void revocation_free(revocation *r)
{
        if (r != NULL) {
                free(r->tokens);
                free(r);
        }
}

/* ---- the thread --------------------------------------------------------------- */

static void push(gw_events *e, revocation *r)
{
        pthread_mutex_lock(&e->mu);
        bool was_empty = e->head == NULL && !e->overflowed;
        if (e->queued >= EVENTS_QUEUE_MAX) {
                e->overflowed = true;
                revocation_free(r);
        } else {
                if (e->tail != NULL) {
                        e->tail->next = r;
                } else {
                        e->head = r;
                }
                e->tail = r;
                e->queued++;
        }
        pthread_mutex_unlock(&e->mu);
        if (was_empty) {
                event_active(e->wake, EV_READ, 0);
        }
}

/* A revocation from one ContextRevoked; NULL when out of memory. */
static revocation *revocation_of(const Keelson__Auth__V1__ContextRevoked *m)
{
        revocation *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                return NULL;
        }
        size_t n = m->n_token_sha256;
        r->everything = n > REVOKED_TOKENS_MAX || strlen(m->user_id) > GW_ID_MAX ||
                        strlen(m->tenant_id) > GW_ID_MAX || strlen(m->api_key_id) > GW_ID_MAX;
        if (!r->everything && n > 0) {
                r->tokens = calloc(n, sizeof(*r->tokens));
                if (r->tokens == NULL) {
                        r->everything = true;
                }
        }
        for (size_t i = 0; !r->everything && i < n; i++) {
                if (m->token_sha256[i].len == KS_SHA256_BYTES) { /* else: not a token hash */
                        memcpy(r->tokens[r->n_tokens++], m->token_sha256[i].data, KS_SHA256_BYTES);
                }
        }
        if (!r->everything) {
                snprintf(r->user_id, sizeof(r->user_id), "%s", m->user_id);
                snprintf(r->tenant_id, sizeof(r->tenant_id), "%s", m->tenant_id);
                snprintf(r->api_key_id, sizeof(r->api_key_id), "%s", m->api_key_id);
        }
        return r;
}

static void handle(gw_events *e, const Keelson__Events__V1__Event *ev)
{
        if (strcmp(ev->topic, REVOKED_TOPIC) != 0) {
                return; /* a longer topic with the same prefix */
        }
        ks_counter_inc(e->received);
        Keelson__Auth__V1__ContextRevoked *m =
            keelson__auth__v1__context_revoked__unpack(NULL, ev->payload.len, ev->payload.data);
        if (m == NULL) {
                ks_counter_inc(e->dropped);
                ks_log_warn(NULL, "undecodable context_revoked event: ignored", "{s:s}", "event_id",
                            ev->event_id);
                return;
        }
        revocation *r = revocation_of(m);
        keelson__auth__v1__context_revoked__free_unpacked(m, NULL);
        if (r == NULL) {
                pthread_mutex_lock(&e->mu); /* out of memory: forget everything instead */
                e->overflowed = true;
                pthread_mutex_unlock(&e->mu);
                event_active(e->wake, EV_READ, 0);
                return;
        }
        push(e, r);
}

static void pause_ms(long ms)
{
        struct timespec ts = {0, ms * 1000000L};
        nanosleep(&ts, NULL);
}

static void *run(void *arg)
{
        gw_events *e = arg;
        while (!atomic_load(&e->stop)) {
                Keelson__Events__V1__Event *ev = NULL;
                int rc = ks_subscriber_next(e->sub, EVENTS_POLL_MS, &ev);
                if (rc == KS_OK) {
                        handle(e, ev);
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                } else if (rc != KS_DEADLINE_EXCEEDED) {
                        pause_ms(EVENTS_ERROR_MS);
                }
        }
        return NULL;
}

/* ---- the loop -------------------------------------------------------------------- */

static void apply(gw_events *e, const revocation *r)
{
        size_t n = 0;
        for (size_t i = 0; i < r->n_tokens; i++) {
                n += gw_cache_evict_token(e->cache, r->tokens[i]);
        }
        if (r->user_id[0] != '\0') {
                n += gw_cache_evict_user(e->cache, r->user_id, r->tenant_id);
        }
        if (r->api_key_id[0] != '\0') {
                n += gw_cache_evict_api_key(e->cache, r->api_key_id);
        }
        /* Counts only: a log line names no user, tenant or token. */
        ks_log_debug(NULL, "contexts revoked", "{s:I,s:I}", "tokens", (json_int_t)r->n_tokens,
                     "evicted", (json_int_t)n);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_events *e = arg;
        pthread_mutex_lock(&e->mu);
        revocation *list = e->head;
        bool overflowed = e->overflowed;
        e->head = e->tail = NULL;
        e->queued = 0;
        e->overflowed = false;
        pthread_mutex_unlock(&e->mu);
        if (overflowed) {
                size_t n = gw_cache_clear(e->cache);
                ks_counter_inc(e->dropped);
                ks_log_warn(NULL, "revocations were dropped: the whole context cache was cleared",
                            "{s:I}", "evicted", (json_int_t)n);
        }
        while (list != NULL) {
                revocation *next = list->next;
                if (list->everything) {
                        gw_cache_clear(e->cache);
                } else if (!overflowed) {
                        apply(e, list);
                }
                revocation_free(list);
                list = next;
        }
}

/* ---- life ------------------------------------------------------------------------ */

static int subscribe(gw_events *e, const char *broker_url)
{
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        const char *bases[KS_BROKERS_MAX];
        const char *prefixes[] = {REVOKED_TOPIC};
        int n = ks_broker_list(broker_url, brokers, KS_BROKERS_MAX);
        if (n < 1) {
                return -1;
        }
        for (int i = 0; i < n; i++) {
                bases[i] = brokers[i];
        }
        return ks_subscriber_new(&e->sub, bases, n, prefixes, 1) == KS_OK ? 0 : -1;
}

int gw_events_new(gw_events **out, struct event_base *base, const char *broker_url, gw_cache *cache)
{
        *out = NULL;
        gw_events *e = calloc(1, sizeof(*e));
        if (e == NULL) {
                return -1;
        }
        pthread_mutex_init(&e->mu, NULL);
        atomic_init(&e->stop, false);
        e->cache = cache;
        ks_metrics *m = ks_metrics_default();
        e->received = ks_counter_get(m, "keelson_gateway_revocation_events_total",
                                     "auth.context_revoked events received", NULL);
        e->dropped = ks_counter_get(m, "keelson_gateway_revocation_events_dropped_total",
                                    "Revocations that could not be applied one by one (the "
                                    "whole cache was cleared instead, or the event was unreadable)",
                                    NULL);
        e->wake = event_new(base, -1, EV_PERSIST, on_wake, e);
        if (e->wake == NULL || subscribe(e, broker_url) != 0 ||
            pthread_create(&e->thread, NULL, run, e) != 0) {
                ks_log_error(NULL, "cannot subscribe to context revocations", NULL);
                gw_events_free(e);
                return -1;
        }
        e->started = true;
        *out = e;
        return 0;
}

void gw_events_free(gw_events *e)
{
        if (e == NULL) {
                return;
        }
        atomic_store(&e->stop, true);
        if (e->started) {
                pthread_join(e->thread, NULL);
        }
        ks_subscriber_free(e->sub);
        while (e->head != NULL) {
                revocation *next = e->head->next;
                revocation_free(e->head);
                e->head = next;
        }
        if (e->wake != NULL) {
                event_free(e->wake);
        }
        pthread_mutex_destroy(&e->mu);
        free(e);
}
