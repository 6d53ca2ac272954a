/*
 * ks_shutdown: a bound on how long a stopping process may take.
 *
 * Everything a service must keep is committed in PostgreSQL before it is
 * answered, so stopping only drains and releases sockets and threads. A
 * stop that hangs all the same (a thread that never returns; nng 1.5's
 * socket close once did, before keelson spoke its protocol itself) must not
 * leave a supervisor waiting, so each main arms this deadline when it
 * starts to stop: if the process is still there after it, it logs that and
 * exits with status 1, and the supervisor sees a stop instead of a hang.
 */
#ifndef KS_SHUTDOWN_H
#define KS_SHUTDOWN_H

#include <stdint.h>

#define KS_SHUTDOWN_DEADLINE_MS 15000

/* Starts a detached thread that ends the process after ms. Call once. */
void ks_shutdown_deadline(int64_t ms);

#endif
