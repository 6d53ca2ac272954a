/*
 * probe.c: whether a replica of each service answers, for
 * grpc.health.v1.Health (health.h's answers()).
 *
 * A broker connection says nothing of the replicas behind it: with none
 * connected the broker holds a call until one comes. So every period_ms the
 * probe sends each service a call of a method no service has
 * (GW_PROBE_METHOD), on a broker connection of its own (an upstream of its
 * own: its calls never take a slot of the clients'), with period_ms as its
 * deadline, and at most one in flight per service. A replica's loop answers
 * it UNIMPLEMENTED at once (ks_rpc_server: no worker, no database, no
 * metric): that answer, and only it, is "a replica answers". A call that
 * runs out (no replica within the period) or finds no broker connected
 * makes the service not answer until the next answer.
 *
 * So a service whose replicas all stopped is NOT_SERVING within two periods
 * (the call sent at most a period later runs out a period after that), and
 * SERVING again as soon as a replica takes the call waiting at the broker.
 * Before its first answer, a service does not answer.
 */
#ifndef GW_PROBE_H
#define GW_PROBE_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "routes.h"

struct gw_config;

#define GW_PROBE_METHOD "keelson.gateway.v1.Probe/Ping"

typedef struct gw_probe gw_probe;

/*
 * Probes every service the routes reach on base, every period_ms (its
 * first round at once). Returns 0 or -1.
 */
int gw_probe_new(gw_probe **out, struct event_base *base, const struct gw_config *cfg,
                 const gw_routes *routes, int64_t period_ms);
/* Whether a replica of service (a ks_service_id) answered the last call that ended. */
bool gw_probe_answers(const gw_probe *p, int service);
/* Ends the calls in flight and frees. Accepts NULL. On base's thread. */
void gw_probe_free(gw_probe *p);

#endif
