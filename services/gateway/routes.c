/*
 * The route table: every method of every routed service, straight from the
 * protobuf-c service descriptors, so a path, its request and response types
 * and its owning service can never drift apart from the .proto files.
 *
 * Adding a service is one line in routed_services[] (and, when some of its
 * methods are public or internal, lines in method_flags[]). A method without
 * a line in method_flags[] needs an authenticated caller: forgetting a line
 * fails closed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "keelson/summary/v1/summary.pb-c.h"
#include "ks_log.h"

/* The services the gateway routes, one line each. */
static const ProtobufCServiceDescriptor *const routed_services[] = {
    &keelson__auth__v1__auth_service__descriptor,
    &keelson__ledger__v1__ledger_service__descriptor,
    &keelson__summary__v1__admin_summary_service__descriptor,
};

/*
 * Methods that are not plain "caller required" writes. KS_M_INTERNAL methods
 * are never routed: a request for one is answered exactly like an unknown
 * method. KS_M_IDEMPOTENT methods may be resent when a replica dies under them.
 * KS_M_CALLER_OPTIONAL methods still need a bearer token, but one that does
 * not resolve reaches the service as an unauthenticated caller.
 */
static const struct {
        const char *method;
        unsigned flags;
} method_flags[] = {
    {"keelson.auth.v1.AuthService/SignUp", KS_M_PUBLIC},
    {"keelson.auth.v1.AuthService/Login", KS_M_PUBLIC},
    {"keelson.auth.v1.AuthService/ResolveContext", KS_M_INTERNAL | KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/WhoAmI", KS_M_IDEMPOTENT},
    /* A second Logout with the same token is "already done", not 401. */
    {"keelson.auth.v1.AuthService/Logout", KS_M_IDEMPOTENT | KS_M_CALLER_OPTIONAL},
    {"keelson.auth.v1.AuthService/AcceptInvitation", KS_M_PUBLIC},
    {"keelson.auth.v1.AuthService/ForgotPassword", KS_M_PUBLIC},
    {"keelson.auth.v1.AuthService/ResetPassword", KS_M_PUBLIC},
    /* Reads, and tenant writes the auth service deduplicates by request id. */
    {"keelson.auth.v1.AuthService/ListTenants", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/RevokeAllSessions", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/ListMembers", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/SetRole", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/RemoveMember", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/Invite", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/ListInvitations", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/RevokeInvitation", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/ListApiKeys", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/RevokeApiKey", KS_M_IDEMPOTENT},
    {"keelson.auth.v1.AuthService/ListAudit", KS_M_IDEMPOTENT},
};

/*
 * Methods after whose success cached contexts of the caller are stale: the
 * gateway evicts them from its own cache at once (the other replicas hear
 * of it through auth.context_revoked). A name that is not routed (yet)
 * simply never matches.
 */
static const struct {
        const char *method;
        int revokes; /* gw_revokes */
} revoking[] = {
    {"keelson.auth.v1.AuthService/Logout", GW_REVOKES_TOKEN},
    {"keelson.auth.v1.AuthService/SwitchTenant", GW_REVOKES_TOKEN},
    {"keelson.auth.v1.AuthService/RevokeAllSessions", GW_REVOKES_USER},
    {"keelson.auth.v1.AuthService/ChangePassword", GW_REVOKES_USER},
};

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
};

static unsigned flags_of(const char *method)
{
        for (size_t i = 0; i < sizeof(method_flags) / sizeof(method_flags[0]); i++) {
                if (strcmp(method_flags[i].method, method) == 0) {
                        return method_flags[i].flags;
                }
        }
        return 0;
}

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

/* Fills *r from one method of a service; returns 0, 1 (internal: skip) or -1. */
static int route_of(const ProtobufCServiceDescriptor *svc, const ProtobufCMethodDescriptor *m,
                    gw_route *r)
{
        memset(r, 0, sizeof(*r));
        int n = snprintf(r->path, sizeof(r->path), "/%s/%s", svc->name, m->name);
        if (n < 0 || (size_t)n >= sizeof(r->path)) {
                ks_log_error(NULL, "method path too long", "{s:s}", "service", svc->name);
                return -1;
        }
        r->method = r->path + 1;
        r->service = ks_service_of_method(r->method);
        if (r->service < 0) {
                ks_log_error(NULL, "method of no known service", "{s:s}", "method", r->method);
                return -1;
        }
        r->flags = flags_of(r->method);
        for (size_t i = 0; i < sizeof(revoking) / sizeof(revoking[0]); i++) {
                if (strcmp(revoking[i].method, r->method) == 0) {
                        r->revokes = revoking[i].revokes;
                }
        }
        r->input = m->input;
        r->output = m->output;
        return (r->flags & KS_M_INTERNAL) != 0 ? 1 : 0;
}

static int build(gw_routes *t)
{
        size_t cap = 0;
        for (size_t i = 0; i < sizeof(routed_services) / sizeof(routed_services[0]); i++) {
                cap += routed_services[i]->n_methods;
        }
        if (cap == 0 || cap > ROUTES_MAX || (t->v = calloc(cap, sizeof(*t->v))) == NULL) {
                return -1;
        }
        for (size_t i = 0; i < sizeof(routed_services) / sizeof(routed_services[0]); i++) {
                const ProtobufCServiceDescriptor *svc = routed_services[i];
                for (unsigned j = 0; j < svc->n_methods; j++) {
                        int rc = route_of(svc, &svc->methods[j], &t->v[t->n]);
                        if (rc < 0) {
                                return -1;
                        }
                        t->n += rc == 0 ? 1 : 0;
                }
        }
        qsort(t->v, t->n, sizeof(*t->v), cmp_route);
        for (size_t i = 0; i < t->n; i++) {
                if (i > 0 && strcmp(t->v[i - 1].path, t->v[i].path) == 0) {
                        ks_log_error(NULL, "duplicate route", "{s:s}", "route", t->v[i].path);
                        return -1;
                }
                /* qsort moved the entries: point method into each entry's own path. */
                t->v[i].method = t->v[i].path + 1;
                route_metrics(&t->v[i]);
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
        return bsearch(&key, r->v, r->n, sizeof(*r->v), cmp_route);
}

gw_route *gw_routes_unmatched(gw_routes *r)
{
        return &r->unmatched;
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
        for (size_t i = 0; i < sizeof(routed_services) / sizeof(routed_services[0]); i++) {
                const ProtobufCServiceDescriptor *svc = routed_services[i];
                size_t n = strlen(svc->name);
                if (strncmp(method, svc->name, n) != 0 || method[n] != '/') {
                        continue;
                }
                for (unsigned j = 0; j < svc->n_methods; j++) {
                        if (strcmp(method + n + 1, svc->methods[j].name) == 0) {
                                return (flags_of(method) & KS_M_INTERNAL) == 0;
                        }
                }
        }
        return false;
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
