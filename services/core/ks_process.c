/* ks_process: see ks_process.h. */
#include "ks_process.h"

#include <pthread.h>

#include "ks_log.h"
#include "ks_shutdown.h"

void ks_process_signals(sigset_t *stop)
{
        sigemptyset(stop);
        sigaddset(stop, SIGINT);
        sigaddset(stop, SIGTERM);
        pthread_sigmask(SIG_BLOCK, stop, NULL);
        signal(SIGPIPE, SIG_IGN);
}

void ks_process_config(const char *name, int argc, char **argv, const char *summary,
                       const ks_config_var *vars, size_t n, void *cfg)
{
        ks_log_init(name, KS_LOG_INFO);
        ks_config_init(argc, argv, summary, vars, n, cfg);
        for (size_t i = 0; i < n; i++) {
                if (vars[i].choices == ks_log_level_names) {
                        const char *level = *(char **)((char *)cfg + vars[i].offset);
                        /* the table accepted it: one of the names */
                        ks_log_init(name, (ks_log_level)ks_log_level_parse(level));
                }
        }
}

void ks_process_wait(const sigset_t *stop)
{
        int sig = 0;

        sigwait(stop, &sig);
        ks_log_info(NULL, "stopping", "{s:s}", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
        ks_shutdown_deadline(KS_SHUTDOWN_DEADLINE_MS);
}
