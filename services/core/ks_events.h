/*
 * ks_events: publishing and subscribing on the broker's event bus.
 * An nng message is "<topic>\0<keelson.events.v1.Event serialized>"; a
 * subscription is a topic prefix. Pub/sub may drop: consumers that must act
 * exactly once use the outbox and an acknowledged delivery instead.
 */
#ifndef KS_EVENTS_H
#define KS_EVENTS_H

#include "ks_code.h"

#include <stddef.h>
#include <stdint.h>

#include "event.pb-c.h"

typedef struct ks_publisher ks_publisher;
typedef struct ks_subscriber ks_subscriber;

/* Dials the event input of each broker base URL. */
int ks_publisher_new(ks_publisher **out, const char *const *broker_bases, int n) KS_MUST_CHECK;
void ks_publisher_free(ks_publisher *p);
/*
 * Brokers this publisher is connected to. pub/sub reports success even with
 * none, so a publisher that must not lose events (the outbox relay) waits
 * while this is 0.
 */
int ks_publisher_connected(const ks_publisher *p);
/* Publishes one event (topic taken from ev->topic). Returns KS_OK or a code. */
int ks_publish(ks_publisher *p, const Keelson__Events__V1__Event *ev);

/*
 * Dials the event output of each broker and subscribes to each prefix
 * (an empty prefix receives everything).
 */
int ks_subscriber_new(ks_subscriber **out, const char *const *broker_bases, int n,
                      const char *const *prefixes, int n_prefixes) KS_MUST_CHECK;
void ks_subscriber_free(ks_subscriber *s);
/*
 * Waits up to timeout_ms for the next event. Returns KS_OK with *out owning
 * an unpacked event (keelson__events__v1__event__free_unpacked(*out, NULL)),
 * KS_DEADLINE_EXCEEDED on timeout, or another code.
 */
int ks_subscriber_next(ks_subscriber *s, int timeout_ms,
                       Keelson__Events__V1__Event **out) KS_MUST_CHECK;

#endif
