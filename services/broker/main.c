/*
 * keelson-broker: a stateless forwarder between the gateway, the services
 * and event subscribers. The forwarding itself lives in ks_broker (core);
 * this file wires configuration, the health listener and signals.
 */

#include <stdatomic.h>

#include "ks_broker.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_outlier.h"
#include "ks_process.h"

typedef struct broker_config {
        char *url;
        char *http_host;
        int64_t http_port;
        char *log_level;
        int64_t eject_after_ms;
        int64_t eject_check_ms;
} broker_config;

#define STR_(x) #x
#define STR(x)  STR_(x)

static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_BROKER_URL", broker_config, url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "base address to listen on, tcp://host:port, ipc:///path or one of each "
               "(comma-separated); services sit at fixed offsets from the port, or at "
               "sockets named after the path (see docs/architecture.md)"),
    KS_CFG_STR("KEELSON_BROKER_HTTP_HOST", broker_config, http_host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address of the /healthz, /readyz and /metrics listener"),
    KS_CFG_INT("KEELSON_BROKER_HTTP_PORT", broker_config, http_port, "7480", 0, 65535,
               "port of the /healthz, /readyz and /metrics listener (0 = any free port)"),
    KS_CFG_LOG_LEVEL(broker_config, log_level),
    KS_CFG_INT("KEELSON_BROKER_EJECT_AFTER_MS", broker_config, eject_after_ms,
               STR(KS_BROKER_EJECT_AFTER_MS_DEFAULT), 0, KS_OUTLIER_AFTER_MAX_MS,
               "a replica that holds calls and answers none for this long leaves the rotation "
               "until it dials back; never the last replica that answers (0 = off; else at "
               "least KEELSON_BROKER_EJECT_CHECK_MS)"),
    KS_CFG_INT("KEELSON_BROKER_EJECT_CHECK_MS", broker_config, eject_check_ms,
               STR(KS_BROKER_EJECT_CHECK_MS_DEFAULT), KS_BROKER_EJECT_CHECK_MS_MIN,
               KS_BROKER_EJECT_CHECK_MS_MAX,
               "how often the broker looks for replicas that hold calls and answer none"),
};

/* SIGTERM or SIGINT came: /readyz fails from then on. */
static atomic_bool g_stopping;

static int ready_check(void *arg)
{
        return arg != NULL && !atomic_load(&g_stopping) ? 0 : -1;
}

int main(int argc, char **argv)
{
        broker_config cfg;
        size_t n_vars = sizeof(config_vars) / sizeof(config_vars[0]);
        sigset_t stop;
        int status = 1;
        ks_broker *broker = NULL;
        ks_health *health = NULL;

        ks_process_signals(&stop);
        ks_process_config("broker", argc, argv,
                          "keelson-broker: forwards RPCs and events between services", config_vars,
                          n_vars, &cfg);
        if (cfg.eject_after_ms != 0 && cfg.eject_after_ms < cfg.eject_check_ms) {
                ks_log_error(NULL,
                             "KEELSON_BROKER_EJECT_AFTER_MS must be 0 or at least "
                             "KEELSON_BROKER_EJECT_CHECK_MS",
                             NULL);
                status = 2;
                goto out;
        }
        const ks_broker_options opts = {.eject_after_ms = cfg.eject_after_ms,
                                        .eject_check_ms = cfg.eject_check_ms};
        if (ks_broker_start_with(&broker, cfg.url, &opts) != 0) {
                goto out;
        }
        if (ks_health_start(&health, cfg.http_host, (int)cfg.http_port) != 0 ||
            ks_health_add_check(health, "listeners", ready_check, broker) != 0) {
                ks_log_error(NULL, "cannot start the health listener", NULL);
                goto out;
        }
        ks_log_info(NULL, "broker ready", "{s:s,s:i}", "url", cfg.url, "http_port",
                    ks_health_port(health));
        ks_process_wait(&stop);
        /* Clients take their new calls elsewhere; what this broker holds is answered first. */
        atomic_store(&g_stopping, true);
        (void)ks_broker_drain(broker, KS_BROKER_DRAIN_MS);
        status = 0;
out:
        ks_health_stop(health);
        ks_broker_stop(broker);
        ks_config_free(config_vars, n_vars, &cfg);
        if (status == 0) {
                /* Last, with the exit status, as the services do: a clean stop in the log. */
                ks_log_info(NULL, "stopped", "{s:i}", "exit_status", 0);
        }
        return status;
}
