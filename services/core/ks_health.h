/*
 * ks_health: the small HTTP listener every service runs beside its RPC
 * sockets, on its own thread and libevent loop:
 *   GET /healthz  200 "ok" while the process is alive
 *   GET /readyz   200 when every readiness check passes, else 503 with the
 *                 name of the failing check
 *   GET /metrics  the default ks_metrics registry in Prometheus text format
 */
#ifndef KS_HEALTH_H
#define KS_HEALTH_H

#include "ks_code.h"

#include <stdint.h>

typedef struct ks_health ks_health;

/* A readiness check: returns 0 when ready; must answer within ~1 s. */
typedef int (*ks_ready_fn)(void *arg);

#define KS_HEALTH_CHECKS_MAX 8

/* Binds host:port (port 0 = any free port) and starts the thread. */
int ks_health_start(ks_health **out, const char *host, int port) KS_MUST_CHECK;

/* The port actually bound (useful with port 0). */
int ks_health_port(const ks_health *h);

/* Adds a named readiness check; call before traffic, at most KS_HEALTH_CHECKS_MAX. */
int ks_health_add_check(ks_health *h, const char *name, ks_ready_fn fn, void *arg) KS_MUST_CHECK;

/* Stops the thread and frees everything; accepts NULL. */
void ks_health_stop(ks_health *h);

struct evhttp_bound_socket;

/*
 * The local port of a libevent HTTP listener (IPv4 or IPv6), for any
 * listener bound to port 0; -1 when it cannot be read.
 */
int ks_health_bound_port(struct evhttp_bound_socket *sock);

#endif
