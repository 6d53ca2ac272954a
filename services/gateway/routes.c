/*
 * The route table: every method of every service in the catalog
 * (catalog.c: each service's methods.def checked against its protobuf-c
 * descriptor), so that a path, its request and response types, its owning
 * service and its flags can never drift apart from the .proto files or
 * from what the service itself serves.
 *
 * KS_M_INTERNAL methods are never routed: a request for one is answered
 * exactly like an unknown method. The one KS_M_RESOLVER method (auth's
 * ResolveContext) is kept aside for the handler, which calls it to turn a
 * bearer token into a caller. The one KS_M_INTAKE method (the webhook
 * service's ReceiveWebhook) is a route like the others (its rate limit, its
 * metrics, its upstream) that no Connect path finds: the handler serves it
 * at /webhooks/<provider>/<id> (intake.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "ks_log.h"
#include "ks_topology.h"
#include "routes.h"

#define ROUTES_MAX    1024 /* far above what the protos hold; bounds the table */
#define UNMATCHED     "unmatched"
#define LATENCY_NAME  "keelson_gateway_request_duration_seconds"
#define LATENCY_HELP  "Time from a request's arrival to its reply, by route"
#define REQUESTS_NAME "keelson_gateway_requests_total"
#define REQUESTS_HELP "Requests answered, by route and Connect code"

struct gw_routes {
        gw_route *v; /* sorted by path */
        size_t n;
        gw_route unmatched;
        gw_route resolver; /* not routed: called by the handler */
        int n_resolvers;
        gw_route *intake; /* in v; NULL when no service has one */
};

static int cmp_route(const void *a, const void *b)
{
        return strcmp(((const gw_route *)a)->path, ((const gw_route *)b)->path);
}

static void route_metrics(gw_route *r)
{
        char label[GW_PATH_MAX * 2];
        char escaped[GW_PATH_MAX * 2];
        snprintf(label, sizeof(label), "route=\"%s\"",
                 ks_metrics_escape(r->path, escaped, sizeof(escaped)));
        r->latency = ks_histogram_get(ks_metrics_default(), LATENCY_NAME, LATENCY_HELP, label,
                                      KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

/* Fills *r from one method; returns 0, or -1 for a method of no known service. */
static int route_of(const ks_method *m, gw_route *r)
{
        memset(r, 0, sizeof(*r));
        int n = snprintf(r->path, sizeof(r->path), "/%s", m->name);
        if (n < 0 || (size_t)n >= sizeof(r->path)) {
                ks_log_error(NULL, "method path too long", "{s:s}", "method", m->name);
                return -1;
        }
        r->method = r->path + 1;
        r->service = ks_service_of_method(r->method);
        if (r->service < 0) {
                ks_log_error(NULL, "method of no known service", "{s:s}", "method", r->method);
                return -1;
        }
        r->flags = m->flags;
        r->bearer = m->bearer;
        r->revokes = m->revokes;
        r->input = m->input;
        r->output = m->output;
        return 0;
}

/* Adds the routes of one table (and notes its resolver); -1 on a bad table. */
static int add_table(gw_routes *t, const ks_method_table *table, size_t cap)
{
        ks_method *v = NULL;
        size_t n = 0;
        char err[256];
        int rc = 0;

        if (ks_method_resolve(table, &v, &n, err, sizeof(err)) != 0) {
                ks_log_error(NULL, "bad method table", "{s:s}", "error", err);
                return -1;
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
                gw_route *r = &t->v[t->n];
                if ((v[i].flags & KS_M_RESOLVER) != 0) {
                        r = &t->resolver;
                        t->n_resolvers++;
                } else if ((v[i].flags & KS_M_INTERNAL) != 0) {
                        continue;
                } else if (t->n == cap) {
                        rc = -1;
                        break;
                } else {
                        t->n++;
                }
                rc = route_of(&v[i], r);
        }
        ks_method_free(v, n);
        return rc;
}

static int build(gw_routes *t)
{
        size_t cap = 0;
        for (size_t i = 0; i < gw_catalog_n; i++) {
                cap += gw_catalog[i].service->n_methods;
        }
        if (cap == 0 || cap > ROUTES_MAX || (t->v = calloc(cap, sizeof(*t->v))) == NULL) {
                return -1;
        }
        for (size_t i = 0; i < gw_catalog_n; i++) {
                if (add_table(t, &gw_catalog[i], cap) != 0) {
                        return -1;
                }
        }
        if (t->n_resolvers != 1) {
                ks_log_error(NULL, "the catalog must have exactly one resolver method", "{s:i}",
                             "resolvers", t->n_resolvers);
                return -1;
        }
        t->resolver.method = t->resolver.path + 1;
        qsort(t->v, t->n, sizeof(*t->v), cmp_route);
        for (size_t i = 0; i < t->n; i++) {
                if (i > 0 && strcmp(t->v[i - 1].path, t->v[i].path) == 0) {
                        ks_log_error(NULL, "duplicate route", "{s:s}", "route", t->v[i].path);
                        return -1;
                }
                /* qsort moved the entries: point method into each entry's own path. */
                t->v[i].method = t->v[i].path + 1;
                route_metrics(&t->v[i]);
                if ((t->v[i].flags & KS_M_INTAKE) != 0) {
                        if (t->intake != NULL) {
                                ks_log_error(NULL, "the catalog has two intake methods", NULL);
                                return -1;
                        }
                        t->intake = &t->v[i];
                }
        }
        return 0;
}

int gw_routes_new(gw_routes **out)
{
        *out = NULL;
        gw_routes *t = calloc(1, sizeof(*t));
        if (t == NULL) {
                return -1;
        }
        if (build(t) != 0) {
                gw_routes_free(t);
                return -1;
        }
        snprintf(t->unmatched.path, sizeof(t->unmatched.path), "%s", UNMATCHED);
        t->unmatched.method = t->unmatched.path;
        t->unmatched.service = -1;
        route_metrics(&t->unmatched);
        *out = t;
        return 0;
}

void gw_routes_free(gw_routes *r)
{
        if (r == NULL) {
                return;
        }
        free(r->v);
        free(r);
}

gw_route *gw_routes_find(gw_routes *r, const char *path)
{
        if (path == NULL || strlen(path) >= GW_PATH_MAX) {
                return NULL;
        }
        gw_route key;
        memcpy(key.path, path, strlen(path) + 1);
        gw_route *found = bsearch(&key, r->v, r->n, sizeof(*r->v), cmp_route);
        /* The intake is served at /webhooks/... only: its Connect path is unknown. */
        return found != NULL && (found->flags & KS_M_INTAKE) == 0 ? found : NULL;
}

gw_route *gw_routes_intake(gw_routes *r)
{
        return r->intake;
}

gw_route *gw_routes_unmatched(gw_routes *r)
{
        return &r->unmatched;
}

const gw_route *gw_routes_resolver(const gw_routes *r)
{
        return &r->resolver;
}

size_t gw_routes_count(const gw_routes *r)
{
        return r->n;
}

const gw_route *gw_routes_at(const gw_routes *r, size_t i)
{
        return i < r->n ? &r->v[i] : NULL;
}

gw_route *gw_routes_at_mut(gw_routes *r, size_t i)
{
        return i < r->n ? &r->v[i] : NULL;
}

bool gw_method_routed(const char *method)
{
        for (size_t i = 0; i < gw_catalog_n; i++) {
                const ks_method_table *t = &gw_catalog[i];
                size_t n = strlen(t->service->name);
                if (strncmp(method, t->service->name, n) != 0 || method[n] != '/') {
                        continue;
                }
                for (size_t j = 0; j < t->n_rows; j++) {
                        if (strcmp(method + n + 1, t->rows[j].name) == 0) {
                                return (t->rows[j].flags & (KS_M_INTERNAL | KS_M_INTAKE)) == 0;
                        }
                }
        }
        return false;
}

bool gw_route_resendable(const gw_route *route)
{
        return (route->flags & KS_M_IDEMPOTENT) != 0;
}

void gw_route_observe(gw_route *route, int code, double seconds)
{
        if (code < 0 || code >= KS_CODE_COUNT) {
                code = KS_UNKNOWN;
        }
        if (route->requests[code] == NULL) {
                /* Made on first use (on the libevent thread only), so /metrics
                 * lists the codes a route has actually answered. */
                char label[GW_PATH_MAX * 2 + 64];
                char escaped[GW_PATH_MAX * 2];
                snprintf(label, sizeof(label), "route=\"%s\",code=\"%s\"",
                         ks_metrics_escape(route->path, escaped, sizeof(escaped)),
                         ks_code_name(code));
                route->requests[code] =
                    ks_counter_get(ks_metrics_default(), REQUESTS_NAME, REQUESTS_HELP, label);
        }
        ks_counter_inc(route->requests[code]);
        ks_histogram_observe(route->latency, seconds);
}
