/*
 * Upstream: one ks_rpc client per service, and the hop from nng's threads
 * back onto the libevent thread.
 *
 * ks_rpc_call_async runs its done callback on an nng thread, where nothing of
 * evhttp may be touched (evhttp is not thread-safe, and the request may be
 * answered only from the loop). done therefore only moves the result into
 * the call, appends the call to a mutex-protected queue and, when the queue
 * was empty, activates a persistent event of the base; the loop then takes
 * the whole queue at once and hands each call to the completion function.
 * event_active from another thread is safe because evthread_use_pthreads()
 * runs before the base is made (server.c), which also gives the base a
 * notification pipe that wakes the loop.
 *
 * Why "when the queue was empty" is enough: the loop empties the queue under
 * the same lock, so any push after that sees an empty queue and activates
 * again; a push that sees a non-empty queue joins calls that an already
 * activated, not yet finished, drain will take.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ks_log.h"
#include "ks_topology.h"
#include "routes.h"
#include "upstream.h"

struct gw_upstream {
        ks_rpc_client *clients[KS_SVC_COUNT]; /* NULL for a service without routes */
        struct event *wake;                   /* persistent, activated by done */
        gw_complete_fn complete;
        void *complete_arg;
        pthread_mutex_t mu; /* guards head and tail */
        gw_call *head;
        gw_call *tail;
};

/* Takes the whole queue, in arrival order. */
static gw_call *queue_take(gw_upstream *u)
{
        pthread_mutex_lock(&u->mu);
        gw_call *list = u->head;
        u->head = NULL;
        u->tail = NULL;
        pthread_mutex_unlock(&u->mu);
        return list;
}

static void run_completions(gw_upstream *u)
{
        gw_call *c = queue_take(u);
        while (c != NULL) {
                gw_call *next = c->next; /* complete may free c */
                c->next = NULL;
                u->complete(c, u->complete_arg);
                c = next;
        }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        run_completions(arg);
}

/* ks_rpc's done: runs on an nng thread (see the top of this file). */
static void on_done(void *arg, ks_rpc_result *res)
{
        gw_call *call = arg;
        gw_upstream *u = call->owner;

        call->result = *res;
        res->payload = NULL; /* the call owns it now */
        res->payload_len = 0;
        call->next = NULL;

        pthread_mutex_lock(&u->mu);
        bool was_empty = u->head == NULL;
        if (u->tail != NULL) {
                u->tail->next = call;
        } else {
                u->head = call;
        }
        u->tail = call;
        pthread_mutex_unlock(&u->mu);
        if (was_empty) {
                event_active(u->wake, EV_READ, 0);
        }
}

int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call)
{
        if (service < 0 || service >= KS_SVC_COUNT || u->clients[service] == NULL) {
                return KS_UNIMPLEMENTED;
        }
        memset(&call->result, 0, sizeof(call->result));
        call->next = NULL;
        call->owner = u;
        return ks_rpc_call_async(u->clients[service], args, on_done, call);
}

int gw_upstream_connected(const gw_upstream *u, int service)
{
        if (service < 0 || service >= KS_SVC_COUNT || u->clients[service] == NULL) {
                return 0;
        }
        return ks_rpc_client_connected(u->clients[service]);
}

static int client_new(gw_upstream *u, int service, const gw_config *cfg)
{
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        const char *bases[KS_BROKERS_MAX];
        int n = ks_broker_list(cfg->broker_url, brokers, KS_BROKERS_MAX);
        if (n < 1) {
                ks_log_error(NULL, "KEELSON_BROKER_URL: expected tcp://host:port[,...]", NULL);
                return -1;
        }
        for (int i = 0; i < n; i++) {
                bases[i] = brokers[i];
        }
        if (ks_rpc_client_of(&u->clients[service], bases, n, service, (int)cfg->max_inflight,
                             (int)cfg->timeout_ms) != KS_OK) {
                ks_log_error(NULL, "cannot make the rpc client", "{s:s}", "service",
                             ks_service_name((ks_service_id)service));
                return -1;
        }
        return 0;
}

int gw_upstream_new(gw_upstream **out, struct event_base *base, const gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg)
{
        *out = NULL;
        gw_upstream *u = calloc(1, sizeof(*u));
        if (u == NULL) {
                return -1;
        }
        pthread_mutex_init(&u->mu, NULL);
        u->complete = complete;
        u->complete_arg = arg;
        u->wake = event_new(base, -1, EV_PERSIST, on_wake, u);
        if (u->wake == NULL) {
                gw_upstream_free(u);
                return -1;
        }
        bool wanted[KS_SVC_COUNT] = {false};
        wanted[gw_routes_resolver(routes)->service] = true; /* the caller's resolution */
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                wanted[gw_routes_at(routes, i)->service] = true;
        }
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                if (wanted[s] && client_new(u, s, cfg) != 0) {
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
        /* ks_rpc_client_free closes the socket and waits for every aio: calls
         * in flight run done (queued here) before it returns. After the loop,
         * nothing can run the queue, so drain it by hand. */
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                ks_rpc_client_free(u->clients[s]);
                u->clients[s] = NULL;
        }
        if (u->complete != NULL) {
                run_completions(u);
        }
        if (u->wake != NULL) {
                event_free(u->wake);
        }
        pthread_mutex_destroy(&u->mu);
        free(u);
}
