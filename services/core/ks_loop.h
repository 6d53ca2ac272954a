/*
 * ks_loop: a libevent loop on a thread of its own. What is added to its
 * base before ks_loop_start runs there once it starts; an event another
 * thread makes active (event_active) wakes it, since every ks_loop base is
 * created with libevent's pthreads locking on (evthread_use_pthreads, once
 * per process).
 *
 * Life: ks_loop_new, add events (or a ks_sp) to ks_loop_base, ks_loop_start;
 * ks_loop_stop from any other thread breaks the loop and joins its thread,
 * so the caller may then free what it added; ks_loop_free frees the base.
 */
#ifndef KS_LOOP_H
#define KS_LOOP_H

#include <event2/event.h>

#include "ks_code.h"

typedef struct ks_loop ks_loop;

/* KS_OK or KS_INTERNAL. */
int ks_loop_new(ks_loop **out) KS_MUST_CHECK;
struct event_base *ks_loop_base(const ks_loop *l);
/* Runs the loop on a new thread (also when nothing is added). KS_OK or KS_INTERNAL. */
int ks_loop_start(ks_loop *l) KS_MUST_CHECK;
/* Breaks the loop and waits for its thread; a loop never started, or stopped, is left as is. */
void ks_loop_stop(ks_loop *l);
/* Stops it if it runs, then frees the base. Accepts NULL. */
void ks_loop_free(ks_loop *l);
/* Turns libevent's pthreads locking on, once per process; 0 or -1. */
int ks_loop_threads_init(void);

#endif
