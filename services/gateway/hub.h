/*
 * hub.c: keelson.events.v1.EventService/Subscribe, the event stream for
 * subscribers outside the broker's network. One thread of its own takes
 * the topics tenants may subscribe to (billing's topics.def, the same the
 * webhook service delivers) from the brokers; on the loop, each event is
 * numbered, kept (the last KEELSON_GATEWAY_EVENTS_RETAIN events, at most
 * KEELSON_GATEWAY_EVENTS_RETAIN_S old) and written to every stream of its
 * tenant that asked for its topic. A stream that falls more than
 * KEELSON_GATEWAY_EVENTS_BUFFER_BYTES behind is ended with
 * RESOURCE_EXHAUSTED (its client resumes from its cursor): a slow reader
 * costs the gateway that much and never holds anyone else up. A heartbeat
 * goes to a stream that has been sent nothing for
 * KEELSON_GATEWAY_EVENTS_HEARTBEAT_MS.
 *
 * A cursor names this gateway's run (a random epoch) and an event's number
 * and time. Resumed on the same run within what is kept, a stream goes on
 * exactly after it; otherwise the first message says `gap` and what is
 * kept from a little (GW_HUB_SKEW_MS) before the cursor's time is sent
 * again (subscribers deduplicate on event_id). The bus below is nng
 * pub/sub, which drops what a full queue cannot take: the stream is for
 * watching; durable delivery is the webhook service's.
 */
#ifndef GW_HUB_H
#define GW_HUB_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "front.h"
#include "wire.h"

#define GW_HUB_TOPICS_MAX 32
#define GW_HUB_CURSOR_MAX 64
#define GW_HUB_SKEW_MS    5000 /* how far before a foreign cursor's time a resume starts */

typedef struct gw_hub gw_hub;

typedef struct gw_hub_config {
        const char *broker_url; /* KEELSON_BROKER_URL */
        size_t retain;          /* events kept for resumes */
        int64_t retain_ms;
        int64_t heartbeat_ms;
        size_t buffer_bytes; /* a stream's reply not yet written, at most */
        size_t subscribers_max;
} gw_hub_config;

int gw_hub_new(gw_hub **out, struct event_base *base, const gw_hub_config *cfg);
/* Frees; streams still open are left to the front (free it first). Accepts NULL. */
void gw_hub_free(gw_hub *h);
/* Ends every stream: UNAVAILABLE, "the gateway is stopping", so that clients resume elsewhere. */
void gw_hub_drain(gw_hub *h);

/* Whether a topic may be subscribed to. */
bool gw_hub_topic_ok(const char *topic);

/*
 * Takes req's reply, written on wire (rpcstream.h): the stream opens, with a
 * heartbeat carrying the cursor of now, then what a cursor asks to be sent
 * again, then events as they come. topics: n of them (0: every topic).
 * Returns KS_OK (req is the hub's), or a code with *msg and nothing done:
 * KS_INVALID_ARGUMENT (a malformed cursor), KS_RESOURCE_EXHAUSTED (too many
 * streams), KS_UNAVAILABLE (draining).
 */
int gw_hub_subscribe(gw_hub *h, gw_req *req, gw_wire wire, const char *tenant_id,
                     const char *const *topics, size_t n, const char *cursor, const char **msg);

#endif
