/*
 * keelson-gateway: the HTTP front door. Speaks the Connect protocol's unary
 * RPCs over HTTP/1.1 and forwards each call through the broker. This file
 * wires configuration, logging and the server (see gateway.h for the rest).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "gateway.h"
#include "ks_config.h"
#include "ks_log.h"

static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_GATEWAY_HOST", gw_config, host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address to listen on for HTTP"),
    KS_CFG_INT("KEELSON_GATEWAY_PORT", gw_config, port, "8080", 0, 65535,
               "port to listen on (0 = any free port; the port bound is logged)"),
    KS_CFG_STR("KEELSON_BROKER_URL", gw_config, broker_url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "base address of every broker, tcp://host:port, comma-separated"),
    KS_CFG_STR("KEELSON_LOG_LEVEL", gw_config, log_level, "info", KS_CFG_NONEMPTY,
               "minimum log level: debug, info, warn or error"),
    KS_CFG_INT("KEELSON_GATEWAY_BODY_MAX_BYTES", gw_config, body_max_bytes, "1048576", 1024,
               67108864, "largest request body; bigger ones get 413 resource_exhausted"),
    KS_CFG_INT("KEELSON_GATEWAY_HEADERS_MAX_BYTES", gw_config, headers_max_bytes, "16384", 1024,
               1048576, "largest request line plus headers"),
    KS_CFG_INT("KEELSON_GATEWAY_TIMEOUT_MS", gw_config, timeout_ms, "10000", 10, 600000,
               "deadline of an upstream call: the default, and the maximum a "
               "Connect-Timeout-Ms header may ask for"),
    KS_CFG_INT("KEELSON_GATEWAY_MAX_INFLIGHT", gw_config, max_inflight, "1024", 1, 65536,
               "upstream calls in flight per service; more get resource_exhausted"),
    KS_CFG_INT("KEELSON_GATEWAY_IO_TIMEOUT_S", gw_config, io_timeout_s, "30", 1, 3600,
               "seconds to read a request or write a reply, and to keep an idle "
               "connection open"),
    KS_CFG_INT("KEELSON_GATEWAY_DRAIN_MS", gw_config, drain_ms, "10000", 0, 600000,
               "after SIGTERM/SIGINT: how long calls in flight may finish"),
    KS_CFG_INT("KEELSON_GATEWAY_RESEND_MS", gw_config, resend_ms, "1000", 0, 600000,
               "resend an unanswered call of an idempotent method (WhoAmI, Logout, token "
               "resolution) after this many ms, so a call caught by a replica that died is "
               "answered by another; 0 = never. Writes are never resent"),
};

int main(int argc, char **argv)
{
        gw_config cfg;
        size_t n_vars = sizeof(config_vars) / sizeof(config_vars[0]);
        ks_log_init("gateway", KS_LOG_INFO);
        ks_config_init(argc, argv, "keelson-gateway: the Connect (HTTP/1.1) front door",
                       config_vars, n_vars, &cfg);
        int level = ks_log_level_parse(cfg.log_level);
        if (level < 0) {
                fprintf(stderr, "KEELSON_LOG_LEVEL=%s: expected debug, info, warn or error\n",
                        cfg.log_level);
                ks_config_free(config_vars, n_vars, &cfg);
                return 2;
        }
        ks_log_init("gateway", (ks_log_level)level);
        /* A client that hangs up mid-reply must cost an EPIPE, not the process. */
        signal(SIGPIPE, SIG_IGN);

        int status = 1;
        gw_server *server = NULL;
        if (gw_server_new(&server, &cfg) != 0) {
                ks_log_error(NULL, "cannot start the gateway", NULL);
                goto out;
        }
        status = gw_server_run(server) == 0 ? 0 : 1;
        ks_log_info(NULL, "gateway stopped", NULL);
out:
        gw_server_free(server);
        ks_config_free(config_vars, n_vars, &cfg);
        return status;
}
