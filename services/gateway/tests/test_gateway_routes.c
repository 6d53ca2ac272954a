/*
 * The gateway's routes against the method tables the services serve.
 *
 * Each service serves its own table (auth_methods, bl_methods, lg_methods, sm_methods,
 * wh_methods:
 * methods.c in the service's library, linked here); the gateway builds its
 * routes from its catalog (catalog.c). Both come from the services'
 * methods.def files today, through different macros and different code, and
 * must agree row for row: a method the gateway routed with other flags than
 * its service gives it would be resent when it must not be, asked for no
 * token when it needs one, or left stale in the context cache. So, for
 * every row of every service: the route exists (or, for an internal method,
 * does not; for the webhook intake, exists but at no Connect path) with the
 * same flags, bearer, revocations, service and types;
 * the gateway routes nothing that no service serves; and the reads of
 * billing, the ledger and the summary are resent by the gateway, their
 * writes never.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"
#include "billing.h"
#include "catalog.h"
#include "ks_method.h"
#include "ks_topology.h"
#include "ledger.h"
#include "routes.h"
#include "summary.h"
#include "webhook.h"

#define MISMATCH_MAX 512

typedef struct served {
        const ks_method_table *table;
        int service; /* ks_service_id */
        ks_method *v;
        size_t n;
} served;

static served services[] = {
    {&auth_methods, KS_SVC_AUTH, NULL, 0},  {&bl_methods, KS_SVC_BILLING, NULL, 0},
    {&lg_methods, KS_SVC_LEDGER, NULL, 0},  {&sm_methods, KS_SVC_SUMMARY, NULL, 0},
    {&wh_methods, KS_SVC_WEBHOOK, NULL, 0},
};
#define N_SERVICES (sizeof(services) / sizeof(services[0]))

static gw_routes *routes;

static int setup(void **state)
{
        (void)state;
        char err[256];
        for (size_t i = 0; i < N_SERVICES; i++) {
                served *s = &services[i];
                if (ks_method_resolve(s->table, &s->v, &s->n, err, sizeof(err)) != 0) {
                        fprintf(stderr, "%s: %s\n", s->table->service->name, err);
                        return -1;
                }
        }
        return gw_routes_new(&routes);
}

static int teardown(void **state)
{
        (void)state;
        for (size_t i = 0; i < N_SERVICES; i++) {
                ks_method_free(services[i].v, services[i].n);
                services[i].v = NULL;
                services[i].n = 0;
        }
        gw_routes_free(routes);
        routes = NULL;
        return 0;
}

static const gw_route *route_of(const char *method)
{
        char path[GW_PATH_MAX];
        int n = snprintf(path, sizeof(path), "/%s", method);
        assert_true(n > 0 && (size_t)n < sizeof(path));
        return gw_routes_find(routes, path);
}

/*
 * "" when the route says of the method what the service's row says, else
 * what differs, naming the method (cmocka then prints both strings).
 */
static const char *mismatch(const ks_method *m, int service, const gw_route *r)
{
        static char why[MISMATCH_MAX];
        why[0] = '\0';
        if (r == NULL) {
                snprintf(why, sizeof(why), "%s: served, not routed", m->name);
        } else if (strcmp(r->method, m->name) != 0) {
                snprintf(why, sizeof(why), "%s: routed as %s", m->name, r->method);
        } else if (r->flags != m->flags) {
                snprintf(why, sizeof(why), "%s: flags 0x%x served, 0x%x routed", m->name, m->flags,
                         r->flags);
        } else if (r->bearer != m->bearer) {
                snprintf(why, sizeof(why), "%s: bearer %d served, %d routed", m->name,
                         (int)m->bearer, (int)r->bearer);
        } else if (r->revokes != m->revokes) {
                snprintf(why, sizeof(why), "%s: revokes %d served, %d routed", m->name,
                         (int)m->revokes, (int)r->revokes);
        } else if (r->service != service) {
                snprintf(why, sizeof(why), "%s: service %d serves it, routed to %d", m->name,
                         service, r->service);
        } else if (r->input != m->input || r->output != m->output) {
                snprintf(why, sizeof(why), "%s: other request or response type", m->name);
        }
        return why;
}

static void test_every_served_method_is_routed_alike(void **state)
{
        (void)state;
        size_t routed = 0, resolvers = 0, intakes = 0;
        for (size_t i = 0; i < N_SERVICES; i++) {
                const served *s = &services[i];
                assert_true(s->n > 0);
                for (size_t j = 0; j < s->n; j++) {
                        const ks_method *m = &s->v[j];
                        const gw_route *r = route_of(m->name);
                        if ((m->flags & KS_M_INTERNAL) != 0) {
                                /* Never routed: to a client it does not exist. */
                                assert_null(r);
                                if ((m->flags & KS_M_RESOLVER) != 0) {
                                        resolvers++;
                                        assert_string_equal(
                                            mismatch(m, s->service, gw_routes_resolver(routes)),
                                            "");
                                }
                                continue;
                        }
                        if ((m->flags & KS_M_INTAKE) != 0) {
                                /* At /webhooks/... only: its Connect path is unknown. */
                                assert_null(r);
                                assert_string_equal(
                                    mismatch(m, s->service, gw_routes_intake(routes)), "");
                                intakes++;
                                routed++;
                                continue;
                        }
                        assert_string_equal(mismatch(m, s->service, r), "");
                        routed++;
                }
        }
        assert_int_equal(resolvers, 1);
        assert_int_equal(intakes, 1);
        assert_int_equal(gw_routes_count(routes), routed);
}

/* The served method of a full name, in any service; NULL when none serves it. */
static const ks_method *served_method(const char *name, int *service)
{
        for (size_t i = 0; i < N_SERVICES; i++) {
                const ks_method *m = ks_method_find(services[i].v, services[i].n, name);
                if (m != NULL) {
                        *service = services[i].service;
                        return m;
                }
        }
        return NULL;
}

static void test_no_route_that_no_service_serves(void **state)
{
        (void)state;
        assert_true(gw_routes_count(routes) > 0);
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                const gw_route *r = gw_routes_at(routes, i);
                int service = -1;
                const ks_method *m = served_method(r->method, &service);
                if (m == NULL) {
                        fail_msg("%s: routed, served by no service", r->method);
                }
                assert_int_equal(m->flags & KS_M_INTERNAL, 0);
                assert_string_equal(mismatch(m, service, r), "");
        }
        /* Every service of the catalog is one of those served here, once. */
        assert_int_equal(gw_catalog_n, N_SERVICES);
        for (size_t i = 0; i < gw_catalog_n; i++) {
                size_t same = 0;
                for (size_t j = 0; j < N_SERVICES; j++) {
                        same += gw_catalog[i].service == services[j].table->service;
                }
                assert_int_equal(same, 1);
        }
}

static bool is_read(const char *method)
{
        const char *name = strrchr(method, '/');
        assert_non_null(name);
        name++;
        return strncmp(name, "Get", 3) == 0 || strncmp(name, "Lookup", 6) == 0 ||
               strncmp(name, "List", 4) == 0 || strncmp(name, "Query", 5) == 0 ||
               strncmp(name, "Preview", 7) == 0;
}

/*
 * A replica that dies holding a read must not fail it: the gateway sends it
 * again. A ledger write is never resent blindly (a batch that committed would
 * answer `exists` for every event: methods.def says why), nor a billing write
 * (without an Idempotency-Key it would happen twice).
 */
static void test_ledger_and_summary_reads_are_resent(void **state)
{
        (void)state;
        const int svcs[] = {KS_SVC_BILLING, KS_SVC_LEDGER, KS_SVC_SUMMARY, KS_SVC_WEBHOOK};
        for (size_t k = 0; k < sizeof(svcs) / sizeof(svcs[0]); k++) {
                size_t reads = 0;
                for (size_t i = 0; i < gw_routes_count(routes); i++) {
                        const gw_route *r = gw_routes_at(routes, i);
                        if (r->service != svcs[k] || (r->flags & KS_M_INTAKE) != 0) {
                                continue; /* the intake: deduplicated, so resent (methods.def) */
                        }
                        if (is_read(r->method)) {
                                reads++;
                                if (!gw_route_resendable(r)) {
                                        fail_msg("%s: a read the gateway does not resend",
                                                 r->method);
                                }
                        } else if (svcs[k] != KS_SVC_SUMMARY && gw_route_resendable(r)) {
                                fail_msg("%s: a write the gateway resends", r->method);
                        }
                }
                assert_true(reads > 0);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_every_served_method_is_routed_alike),
            cmocka_unit_test(test_no_route_that_no_service_serves),
            cmocka_unit_test(test_ledger_and_summary_reads_are_resent),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
