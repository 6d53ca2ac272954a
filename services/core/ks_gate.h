/*
 * ks_gate: at most `width` holders per key at once, the others waiting in
 * the order they came, each until its deadline.
 *
 * A service puts a tenant's write transactions through it, so that they
 * queue in the replica, a condition variable each, rather than in
 * PostgreSQL on the tenant's hot rows (billing's invoice counter): twenty
 * backends convoying on one row lock cost PostgreSQL more CPU per
 * transaction than two (docs/performance.md, "One writer per tenant").
 * Keys are independent: a busy tenant's queue never delays another's.
 *
 * Entries live in a bounded table (keys_max, sized to the threads that may
 * enter at once: a waiter or a holder is a thread). A key that finds the
 * table full is let through ungated (*held false): the gate shapes load,
 * it never refuses a call.
 *
 *   bool held, waited;
 *   if ((rc = ks_gate_enter(g, tenant, deadline_unix_ms, &held, &waited)) != KS_OK)
 *           return rc;                  (KS_DEADLINE_EXCEEDED)
 *   ... the transaction ...
 *   if (held) ks_gate_leave(g, tenant);
 *
 * Thread-safe: one mutex; each waiter sleeps on a condition variable of its
 * own, woken when a holder leaves and hands it the place.
 */
#ifndef KS_GATE_H
#define KS_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "ks_code.h"

#define KS_GATE_KEY_MAX 63 /* bytes of a key (a uuid is 36) */

typedef struct ks_gate ks_gate;

/* A gate of width >= 1 over at most keys_max >= 1 keys at once: KS_OK, or KS_RESOURCE_EXHAUSTED. */
int ks_gate_new(ks_gate **out, int width, uint32_t keys_max) KS_MUST_CHECK;
/* Frees it: nothing may hold or wait on it. */
void ks_gate_free(ks_gate *g);

/*
 * Enters key's gate: at once when fewer than width hold it and nobody waits,
 * else after those before it (FIFO). deadline_unix_ms (wall clock, 0: none)
 * bounds the wait: past it, KS_DEADLINE_EXCEEDED and nothing held. *held
 * says whether the caller must ks_gate_leave (false: let through ungated,
 * the table being full, or a key longer than KS_GATE_KEY_MAX). *waited: it
 * queued behind others (whether or not it then got in).
 */
int ks_gate_enter(ks_gate *g, const char *key, int64_t deadline_unix_ms, bool *held,
                  bool *waited) KS_MUST_CHECK;
/* Leaves key's gate, handing the place to its first waiter. */
void ks_gate_leave(ks_gate *g, const char *key);

/* Holders and waiters of key now (for tests and metrics). */
void ks_gate_count(ks_gate *g, const char *key, int *holders, int *waiters);

#endif
