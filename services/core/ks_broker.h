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
 */
#ifndef KS_BROKER_H
#define KS_BROKER_H

#include "ks_code.h"

typedef struct ks_broker ks_broker;

/* Listens on every socket of the broker at base ("tcp://host:port") and starts forwarding. */
int ks_broker_start(ks_broker **out, const char *base) KS_MUST_CHECK;

/* Stops forwarding, closes every socket and frees; accepts NULL. */
void ks_broker_stop(ks_broker *b);

#endif
