/*
 * Upstream: the gateway's calls to the services, on its own libevent loop.
 *
 * One ks_req (services/core/ks_req.h) on the gateway's loop, with a target
 * per service the routes reach (and auth, for ResolveContext): that
 * service's front on every broker. A call costs the loop one write and one
 * read (ks_rpc_client, on nng's threads, cost the gateway about 14 thread
 * switches a call); resends, deadlines and the refusals at the start are
 * ks_req's, as its header says.
 */
#include <stdlib.h>

#include "config.h"
#include "ks_log.h"
#include "ks_topology.h"
#include "routes.h"
#include "upstream.h"

struct gw_upstream {
        ks_req *req;
        int target[KS_SVC_COUNT]; /* -1: the service is not called */
};

int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call)
{
        if (service < 0 || service >= KS_SVC_COUNT || u->target[service] < 0) {
                return KS_UNIMPLEMENTED;
        }
        return ks_req_start(u->req, u->target[service], args, call);
}

int gw_upstream_connected(const gw_upstream *u, int service)
{
        if (service < 0 || service >= KS_SVC_COUNT || u->target[service] < 0) {
                return 0;
        }
        return ks_req_connected(u->req, u->target[service]);
}

/* The service's front on every broker of KEELSON_BROKER_URL. */
static int add_target(gw_upstream *u, int service, const gw_config *cfg)
{
        char brokers[KS_BROKERS_MAX][KS_URL_MAX], urls[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial[KS_BROKERS_MAX];
        int n = ks_broker_list(cfg->broker_url, brokers, KS_BROKERS_MAX);
        if (n < 1) {
                ks_log_error(NULL, "KEELSON_BROKER_URL: expected " KS_BROKER_LIST_SYNTAX, NULL);
                return -1;
        }
        for (int i = 0; i < n; i++) {
                if (ks_broker_url(urls[i], sizeof(urls[i]), brokers[i], service, KS_SIDE_FRONT) !=
                    0) {
                        ks_log_error(NULL, "cannot dial broker", "{s:s,s:s}", "broker", brokers[i],
                                     "service", ks_service_name((ks_service_id)service));
                        return -1;
                }
                dial[i] = urls[i];
        }
        return ks_req_target(u->req, dial, n, &u->target[service]) == KS_OK ? 0 : -1;
}

int gw_upstream_new(gw_upstream **out, struct event_base *base, const gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg)
{
        bool wanted[KS_SVC_COUNT] = {false};
        *out = NULL;
        gw_upstream *u = calloc(1, sizeof(*u));
        if (u == NULL) {
                return -1;
        }
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                u->target[s] = -1;
        }
        if (ks_req_new(&u->req, base, (int)cfg->max_inflight, (int)cfg->timeout_ms, complete,
                       arg) != KS_OK) {
                free(u);
                return -1;
        }
        wanted[gw_routes_resolver(routes)->service] = true; /* the caller's resolution */
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                wanted[gw_routes_at(routes, i)->service] = true;
        }
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                if (wanted[s] && add_target(u, s, cfg) != 0) {
                        gw_upstream_free(u);
                        return -1;
                }
        }
        *out = u;
        return 0;
}

void gw_upstream_free(gw_upstream *u)
{
        if (u == NULL) {
                return;
        }
        ks_req_free(u->req, "the gateway is stopping");
        free(u);
}
