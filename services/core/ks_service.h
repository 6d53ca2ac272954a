/*
 * ks_service: what every RPC service's main shares. Its /readyz watches two
 * things: the database pool answers, and the RPC server is connected to a
 * broker. The server comes and goes (published once it runs, withdrawn
 * before it drains so that readiness fails while in-flight calls finish),
 * so it sits behind a mutex the readiness check takes too.
 */
#ifndef KS_SERVICE_H
#define KS_SERVICE_H

#include <pthread.h>

#include "ks_health.h"
#include "ks_pg.h"
#include "ks_rpc.h"

typedef struct ks_service_ready {
        pthread_mutex_t mu;
        ks_pg_pool *pool;   /* set before ks_service_health_start */
        ks_rpc_server *rpc; /* behind mu */
} ks_service_ready;

void ks_service_ready_init(ks_service_ready *r);

/* Publishes the running server: readiness may pass from now on. */
void ks_service_ready_set_rpc(ks_service_ready *r, ks_rpc_server *s);

/* Withdraws the server (readiness fails from here on) and returns it to stop. */
ks_rpc_server *ks_service_ready_take_rpc(ks_service_ready *r);

/*
 * Starts the health listener on host:port with the "database" and "broker"
 * readiness checks over r, and logs the port bound. Returns 0, or 1 after
 * logging why (a main's start-up status).
 */
int ks_service_health_start(ks_health **out, const char *host, int port, ks_service_ready *r);

#endif
