/* See probe.h. */
#include <stdlib.h>

#include "config.h"
#include "ks_clock.h"
#include "ks_code.h"
#include "ks_log.h"
#include "ks_topology.h"
#include "probe.h"
#include "upstream.h"

typedef struct probed {
        gw_call call; /* first: the completion finds its service from it */
        struct gw_probe *p;
        int service;
        bool wanted;
        bool in_flight;
        bool answers;
} probed;

struct gw_probe {
        gw_upstream *up;
        struct event *tick;
        int64_t period_ms;
        bool freeing; /* gw_upstream_free hands back the calls in flight */
        probed svc[KS_SVC_COUNT];
};

static void on_answer(gw_call *call, void *arg)
{
        (void)arg;
        probed *s = (probed *)call;                           /* call is probed's first member */
        bool answers = call->result.code == KS_UNIMPLEMENTED; /* only a replica says so */
        s->in_flight = false;
        ks_rpc_result_clear(&call->result);
        if (s->p->freeing || answers == s->answers) {
                return;
        }
        s->answers = answers;
        ks_log_info(NULL, answers ? "a replica answers" : "no replica answers", "{s:s}", "service",
                    ks_service_name((ks_service_id)s->service));
}

static void send_probe(gw_probe *p, probed *s)
{
        ks_rpc_call_args args = {
            .method = GW_PROBE_METHOD,
            .request_id = "health-probe",
            .deadline_unix_ms = ks_now_ms() + p->period_ms,
        };
        int code = gw_upstream_call(p->up, s->service, &args, &s->call);
        if (code == KS_OK) {
                s->in_flight = true;
        } else {
                s->answers = false; /* no broker connected */
        }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_probe *p = arg;
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                if (p->svc[i].wanted && !p->svc[i].in_flight) {
                        send_probe(p, &p->svc[i]);
                }
        }
        struct timeval tv = {(time_t)(p->period_ms / 1000),
                             (suseconds_t)(p->period_ms % 1000) * 1000};
        evtimer_add(p->tick, &tv);
}

int gw_probe_new(gw_probe **out, struct event_base *base, const gw_config *cfg,
                 const gw_routes *routes, int64_t period_ms)
{
        *out = NULL;
        gw_probe *p = calloc(1, sizeof(*p));
        if (p == NULL || period_ms < 1) {
                free(p);
                return -1;
        }
        p->period_ms = period_ms;
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                p->svc[i] = (probed){.p = p, .service = i};
        }
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                p->svc[gw_routes_at(routes, i)->service].wanted = true;
        }
        if (gw_upstream_new(&p->up, base, cfg, routes, on_answer, p) != 0 ||
            (p->tick = evtimer_new(base, on_tick, p)) == NULL) {
                gw_probe_free(p);
                return -1;
        }
        struct timeval now = {0, 0};
        evtimer_add(p->tick, &now);
        *out = p;
        return 0;
}

bool gw_probe_answers(const gw_probe *p, int service)
{
        return p != NULL && service >= 0 && service < KS_SVC_COUNT && p->svc[service].answers;
}

void gw_probe_free(gw_probe *p)
{
        if (p == NULL) {
                return;
        }
        if (p->tick != NULL) {
                event_free(p->tick);
        }
        p->freeing = true;
        gw_upstream_free(p->up);
        free(p);
}
