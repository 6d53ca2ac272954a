/* ks_service: see ks_service.h. */
#include "ks_service.h"

#include "ks_code.h"
#include "ks_log.h"

void ks_service_ready_init(ks_service_ready *r)
{
        pthread_mutex_init(&r->mu, NULL);
        r->pool = NULL;
        r->rpc = NULL;
}

void ks_service_ready_set_rpc(ks_service_ready *r, ks_rpc_server *s)
{
        pthread_mutex_lock(&r->mu);
        r->rpc = s;
        pthread_mutex_unlock(&r->mu);
}

ks_rpc_server *ks_service_ready_take_rpc(ks_service_ready *r)
{
        pthread_mutex_lock(&r->mu);
        ks_rpc_server *s = r->rpc;
        r->rpc = NULL;
        pthread_mutex_unlock(&r->mu);
        return s;
}

static int ready_database(void *arg)
{
        ks_service_ready *r = arg;
        return ks_pg_ping(r->pool) == 0 ? 0 : -1;
}

static int ready_broker(void *arg)
{
        ks_service_ready *r = arg;
        int connected = 0;
        pthread_mutex_lock(&r->mu);
        if (r->rpc != NULL) {
                connected = ks_rpc_server_connected(r->rpc);
        }
        pthread_mutex_unlock(&r->mu);
        return connected > 0 ? 0 : -1;
}

int ks_service_health_start(ks_health **out, const char *host, int port, ks_service_ready *r)
{
        if (ks_health_start(out, host, port) != KS_OK) {
                ks_log_error(NULL, "cannot start the health listener", "{s:s, s:i}", "host", host,
                             "port", port);
                return 1;
        }
        if (ks_health_add_check(*out, "database", ready_database, r) != 0 ||
            ks_health_add_check(*out, "broker", ready_broker, r) != 0) {
                ks_log_error(NULL, "cannot register readiness checks", NULL);
                return 1;
        }
        ks_log_info(NULL, "health listener started", "{s:s, s:i}", "host", host, "port",
                    ks_health_port(*out));
        return 0;
}
