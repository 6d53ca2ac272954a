/*
 * ks_events: the event bus client side (see ks_events.h). Publishers use a
 * pub0 socket dialling every broker's event input; subscribers a sub0 socket
 * dialling every broker's event output, filtered by topic prefix in nng.
 */
#include "ks_events.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"
#include "ks_log.h"
#include "ks_topology.h"

#define EVENT_MAX_BYTES (1u << 20)
#define TOPIC_MAX_BYTES 128

/*
 * Buffers: nng's pub/sub queues hold 16 messages per peer by default and drop
 * the oldest on overflow, so a relay draining a backlog lost most of a burst.
 * 8192 (nng's maximum) absorbs any batch a relay publishes at once.
 */
#define EVENT_QUEUE_MSGS 8192

struct ks_publisher {
        nng_socket sock;
        atomic_int connected;
};

struct ks_subscriber {
        nng_socket sock;
        nng_aio *aio;
};

static int dial_all(nng_socket sock, const char *const *bases, int n, ks_broker_side side)
{
        char url[KS_URL_MAX];
        for (int i = 0; i < n; i++) {
                if (ks_broker_url(url, sizeof(url), bases[i], 0, side) != 0) {
                        ks_log_error(NULL, "bad broker url", "{s:s}", "url", bases[i]);
                        return -1;
                }
                int rv = nng_dial(sock, url, NULL, NNG_FLAG_NONBLOCK);
                if (rv != 0) {
                        ks_log_error(NULL, "cannot dial broker events", "{s:s,s:s}", "url", url,
                                     "error", nng_strerror(rv));
                        return -1;
                }
        }
        return 0;
}

static void publisher_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
        (void)pipe;
        ks_publisher *p = arg;
        atomic_fetch_add(&p->connected, ev == NNG_PIPE_EV_ADD_POST ? 1 : -1);
}

int ks_publisher_connected(const ks_publisher *p)
{
        return atomic_load(&p->connected);
}

int ks_publisher_new(ks_publisher **out, const char *const *broker_bases, int n)
{
        *out = NULL;
        ks_publisher *p = calloc(1, sizeof(*p));
        if (p == NULL || nng_pub0_open(&p->sock) != 0) {
                free(p);
                return KS_INTERNAL;
        }
        nng_socket_set_int(p->sock, NNG_OPT_SENDBUF, EVENT_QUEUE_MSGS);
        ks_broker_dialer(p->sock, publisher_pipe_event, p);
        if (dial_all(p->sock, broker_bases, n, KS_SIDE_EVENTS_IN) != 0) {
                ks_publisher_free(p);
                return KS_INVALID_ARGUMENT;
        }
        *out = p;
        return KS_OK;
}

void ks_publisher_free(ks_publisher *p)
{
        if (p == NULL) {
                return;
        }
        if (!ks_broker_close(p->sock, KS_BROKER_CLOSE_MS)) {
                /* nng may still call publisher_pipe_event with p: left to the exit */
                ks_log_warn(NULL, "event publisher's socket did not close in time", "{s:i}",
                            "waited_ms", KS_BROKER_CLOSE_MS);
                return;
        }
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
        nng_msg *msg = NULL;
        if (nng_msg_alloc(&msg, topic_len + 1 + size) != 0) {
                return KS_INTERNAL;
        }
        uint8_t *body = nng_msg_body(msg);
        memcpy(body, ev->topic, topic_len);
        body[topic_len] = '\0';
        keelson__events__v1__event__pack(ev, body + topic_len + 1);
        int rv = nng_sendmsg(p->sock, msg, 0);
        if (rv != 0) {
                nng_msg_free(msg);
                return KS_UNAVAILABLE;
        }
        return KS_OK;
}

int ks_subscriber_new(ks_subscriber **out, const char *const *broker_bases, int n,
                      const char *const *prefixes, int n_prefixes)
{
        *out = NULL;
        ks_subscriber *s = calloc(1, sizeof(*s));
        if (s == NULL || nng_sub0_open(&s->sock) != 0) {
                free(s);
                return KS_INTERNAL;
        }
        if (nng_aio_alloc(&s->aio, NULL, NULL) != 0) {
                nng_close(s->sock);
                free(s);
                return KS_INTERNAL;
        }
        nng_socket_set_int(s->sock, NNG_OPT_RECVBUF, EVENT_QUEUE_MSGS);
        nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, EVENT_MAX_BYTES + TOPIC_MAX_BYTES + 1);
        ks_broker_dialer(s->sock, NULL, NULL);
        for (int i = 0; i < n_prefixes; i++) {
                nng_socket_set(s->sock, NNG_OPT_SUB_SUBSCRIBE, prefixes[i], strlen(prefixes[i]));
        }
        if (dial_all(s->sock, broker_bases, n, KS_SIDE_EVENTS_OUT) != 0) {
                ks_subscriber_free(s);
                return KS_INVALID_ARGUMENT;
        }
        *out = s;
        return KS_OK;
}

void ks_subscriber_free(ks_subscriber *s)
{
        if (s == NULL) {
                return;
        }
        if (!ks_broker_close(s->sock, KS_BROKER_CLOSE_MS)) {
                ks_log_warn(NULL, "event subscriber's socket did not close in time", "{s:i}",
                            "waited_ms", KS_BROKER_CLOSE_MS);
        }
        nng_aio_free(s->aio); /* idle: its receiver has returned */
        free(s);
}

int ks_subscriber_next(ks_subscriber *s, int timeout_ms, Keelson__Events__V1__Event **out)
{
        *out = NULL;
        for (;;) {
                nng_aio_set_timeout(s->aio, timeout_ms);
                nng_recv_aio(s->sock, s->aio);
                nng_aio_wait(s->aio);
                int rv = nng_aio_result(s->aio);
                if (rv == NNG_ETIMEDOUT) {
                        return KS_DEADLINE_EXCEEDED;
                }
                if (rv != 0) {
                        return KS_UNAVAILABLE;
                }
                nng_msg *msg = nng_aio_get_msg(s->aio);
                const uint8_t *body = nng_msg_body(msg);
                size_t len = nng_msg_len(msg);
                const uint8_t *nul = memchr(body, '\0', len);
                if (nul != NULL) {
                        size_t off = (size_t)(nul - body) + 1;
                        *out = keelson__events__v1__event__unpack(NULL, len - off, body + off);
                }
                nng_msg_free(msg);
                if (*out != NULL) {
                        return KS_OK;
                }
                ks_log_warn(NULL, "dropped a malformed event", NULL);
        }
}
