/*
 * ks_process: what every keelson binary's main does around its own work.
 *
 *   sigset_t stop;
 *   ks_process_signals(&stop);                  before any thread starts
 *   ks_process_config("broker", argc, argv, "keelson-broker: ...", vars, n, &cfg);
 *   ... start ...
 *   ks_process_wait(&stop);                     SIGINT or SIGTERM
 *   ... stop ...
 *
 * The RPC services get all of it through ks_service_run (ks_service.h); the
 * broker and the gateway call these pieces themselves.
 */
#ifndef KS_PROCESS_H
#define KS_PROCESS_H

#include <signal.h>
#include <stddef.h>

#include "ks_config.h"

/*
 * Blocks SIGINT and SIGTERM in the calling thread, so that every thread it
 * starts afterwards inherits the mask and only ks_process_wait takes them,
 * and ignores SIGPIPE (a peer that hangs up costs an EPIPE, not the process).
 */
void ks_process_signals(sigset_t *stop);

/*
 * Logging as name, then ks_config_init (--help, a bad value exits 2), then
 * the log level of the table's KS_CFG_LOG_LEVEL variable (if it has one).
 */
void ks_process_config(const char *name, int argc, char **argv, const char *summary,
                       const ks_config_var *vars, size_t n, void *cfg);

/*
 * Waits for SIGINT or SIGTERM (blocked by ks_process_signals), logs which,
 * and arms the shutdown deadline (ks_shutdown.h) for what follows.
 */
void ks_process_wait(const sigset_t *stop);

#endif
