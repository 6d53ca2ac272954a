/*
 * health.c: grpc.health.v1.Health/Check as a pure function: the request's
 * bytes in, the HealthCheckResponse's bytes out, from what the caller says
 * of the gateway and of the services behind it (gw_health_probe). The
 * names known are "" (the gateway as a whole), every service of the
 * catalog with a method the gateway routes, and the gateway's own gRPC
 * services (health, reflection).
 */
#ifndef GW_HEALTH_H
#define GW_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

/* grpc.health.v1.HealthCheckResponse.ServingStatus */
typedef enum gw_serving {
        GW_SERVING_UNKNOWN = 0,
        GW_SERVING = 1,
        GW_NOT_SERVING = 2,
        GW_SERVICE_UNKNOWN = 3, /* Watch only */
} gw_serving;

/* What Check asks of the running gateway; both answer at once, from memory. */
typedef struct gw_health_probe {
        /* The gateway takes calls: started, not draining (what /readyz says). */
        bool (*ready)(void *arg);
        /* A replica of service (a ks_service_id) answers through the broker. */
        bool (*answers)(void *arg, int service);
        void *arg;
} gw_health_probe;

/*
 * The status of one service name: SERVING when the gateway is ready and,
 * for a keelson service, a replica of it answers; NOT_SERVING otherwise.
 * Returns KS_OK with *status, or KS_NOT_FOUND for a name not known.
 */
int gw_health_status(const gw_health_probe *p, const char *service, gw_serving *status);

/*
 * Check: a HealthCheckRequest's bytes in, the HealthCheckResponse malloc'd
 * into *out. Returns KS_OK, KS_NOT_FOUND (an unknown service: the call's
 * status, with no message), KS_INVALID_ARGUMENT (the request does not
 * parse) or KS_INTERNAL (out of memory).
 */
int gw_health_check(const gw_health_probe *p, const uint8_t *req, size_t req_len, uint8_t **out,
                    size_t *out_len) KS_MUST_CHECK;

#endif
