/*
 * server.c: the evhttp server on one libevent thread, its limits, the
 * gateway's own pages (/healthz, /readyz, /metrics), signals and the drain;
 * it makes every other module and hands RPC paths to the handler.
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include "config.h"

typedef struct gw_server gw_server;

/* Binds host:port and sets everything up; gw_server_port tells the port bound. */
int gw_server_new(gw_server **out, const gw_config *cfg);
int gw_server_port(const gw_server *s);
/* Serves until SIGINT/SIGTERM (and the drain after it). Returns 0 or -1. */
int gw_server_run(gw_server *s);
void gw_server_free(gw_server *s);

#endif
