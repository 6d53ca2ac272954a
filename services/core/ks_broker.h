/*
 * ks_broker: the forwarding core of keelson-broker, a library so that tests
 * (and a single-process deployment) can run a broker in-process.
 *
 * For every service it listens on a front (clients dial it) and a back (the
 * service's replicas dial it) and joins them with nng_device over raw
 * req/rep sockets, so requests spread over whichever replicas are connected
 * and replies find their way back by the routing header nng keeps. Events: a
 * raw sub socket (publishers dial it) joined to a raw pub socket
 * (subscribers dial it and filter by topic prefix). Ports: ks_topology.h.
 *
 * Hung replicas. nng's req socket hands a request to any connected replica
 * that has room, so a replica that stops answering but keeps its connection
 * (stopped, stalled, its disk full) would keep receiving calls. Every
 * eject_check_ms the broker looks at each back's connections (nng's
 * per-pipe counters) and closes one that has held calls without answering
 * any for eject_after_ms, unless no other replica of the service answers
 * (ks_outlier.h has the rules). The replica dials back when it runs again.
 * A replica that stops answering while it holds a call is out of the
 * rotation within eject_after_ms + 2 * eject_check_ms of its last reply.
 */
#ifndef KS_BROKER_H
#define KS_BROKER_H

#include "ks_code.h"

#include <stdint.h>

typedef struct ks_broker ks_broker;

/* The defaults of keelson-broker's KEELSON_BROKER_EJECT_* settings. */
#define KS_BROKER_EJECT_AFTER_MS_DEFAULT 3000
#define KS_BROKER_EJECT_CHECK_MS_DEFAULT 250
#define KS_BROKER_EJECT_CHECK_MS_MIN     10
#define KS_BROKER_EJECT_CHECK_MS_MAX     60000

typedef struct ks_broker_options {
        /* A replica holding calls and answering none for this long leaves the
         * rotation; 0: never (1..KS_OUTLIER_AFTER_MAX_MS otherwise, and at
         * least eject_check_ms). */
        int64_t eject_after_ms;
        /* How often the backs are looked at, KS_BROKER_EJECT_CHECK_MS_MIN..MAX. */
        int64_t eject_check_ms;
} ks_broker_options;

/* Listens on every socket of the broker at base ("tcp://host:port") and starts forwarding,
 * with the default options. */
int ks_broker_start(ks_broker **out, const char *base) KS_MUST_CHECK;

/* The same with options; KS_INVALID_ARGUMENT when one is out of range. */
int ks_broker_start_with(ks_broker **out, const char *base,
                         const ks_broker_options *o) KS_MUST_CHECK;

/* Stops forwarding, closes every socket and frees; accepts NULL. */
void ks_broker_stop(ks_broker *b);

#endif
