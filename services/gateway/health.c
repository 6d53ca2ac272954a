/*
 * grpc.health.v1.Health/Check (grpc/grpc-proto grpc/health/v1/health.proto;
 * doc/health-checking.md). Kubernetes' gRPC probe calls it with the empty
 * name (or the one its probe names) and fails on anything but SERVING, so
 * "" is the gateway's readiness alone: a probe must not take a gateway out
 * of its Service because one service behind it has no replica. A service's
 * own name asks for both, for clients that want to know.
 *
 * Which names are known follows the route table: a catalog service with at
 * least one method the gateway routes (gw_method_routed), so a service all
 * of whose methods are internal is as unknown here as in reflection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "grpc.h"
#include "grpc/health/v1/health.pb-c.h"
#include "health.h"
#include "ks_topology.h"
#include "routes.h"

#define SERVICE_NAME_MAX 256 /* longer names are no service's */

/* The ks_service_id of a catalog service with a routed method; -1 when none. */
static int routed_service(const char *name)
{
        char method[2 * SERVICE_NAME_MAX];
        for (size_t i = 0; i < gw_catalog_n; i++) {
                const ks_method_table *t = &gw_catalog[i];
                if (strcmp(t->service->name, name) != 0) {
                        continue;
                }
                for (size_t j = 0; j < t->n_rows; j++) {
                        int n = snprintf(method, sizeof(method), "%s/%s", name, t->rows[j].name);
                        if (n > 0 && (size_t)n < sizeof(method) && gw_method_routed(method)) {
                                return ks_service_of_method(method);
                        }
                }
                return -1;
        }
        return -1;
}

static bool own_service(const char *name)
{
        for (size_t i = 0; i < gw_grpc_own_services_n; i++) {
                if (strcmp(gw_grpc_own_services[i], name) == 0) {
                        return true;
                }
        }
        return false;
}

int gw_health_status(const gw_health_probe *p, const char *service, gw_serving *status)
{
        int id = -1;
        *status = GW_SERVICE_UNKNOWN;
        if (service == NULL || strlen(service) >= SERVICE_NAME_MAX) {
                return KS_NOT_FOUND;
        }
        if (service[0] != '\0' && !own_service(service) && (id = routed_service(service)) < 0) {
                return KS_NOT_FOUND;
        }
        bool up = p->ready(p->arg) && (id < 0 || p->answers(p->arg, id));
        *status = up ? GW_SERVING : GW_NOT_SERVING;
        return KS_OK;
}

int gw_health_check(const gw_health_probe *p, const uint8_t *req, size_t req_len, uint8_t **out,
                    size_t *out_len)
{
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        gw_serving status = GW_SERVING_UNKNOWN;
        *out = NULL;
        *out_len = 0;
        Grpc__Health__V1__HealthCheckRequest *q =
            grpc__health__v1__health_check_request__unpack(NULL, req_len, req);
        if (q == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        int code = gw_health_status(p, q->service, &status);
        grpc__health__v1__health_check_request__free_unpacked(q, NULL);
        if (code != KS_OK) {
                return code;
        }
        resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
        size_t len = grpc__health__v1__health_check_response__get_packed_size(&resp);
        if ((*out = malloc(len + 1)) == NULL) {
                return KS_INTERNAL;
        }
        *out_len = grpc__health__v1__health_check_response__pack(&resp, *out);
        return KS_OK;
}
