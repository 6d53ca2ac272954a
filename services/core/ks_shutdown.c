/* ks_shutdown: see ks_shutdown.h. */
#include "ks_shutdown.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "ks_log.h"

static void *deadline_main(void *arg)
{
        int64_t ms = (int64_t)(intptr_t)arg;
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
        ks_log_error(NULL, "stop did not finish in time: exiting", "{s:i}", "deadline_ms", (int)ms);
        _exit(1);
        return NULL;
}

void ks_shutdown_deadline(int64_t ms)
{
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, deadline_main, (void *)(intptr_t)ms) != 0) {
                ks_log_warn(NULL, "cannot arm the stop deadline", NULL);
        }
        pthread_attr_destroy(&attr);
}
