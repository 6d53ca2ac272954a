/*
 * ks_gate: at most `width` holders per key at once; a key never counts
 * against another.
 *
 * The RPC server keeps a tenant's write calls to that many running at once
 * per replica (ks_rpc_server_options.tenant_writers): a worker takes a
 * queued write only when ks_gate_try_enter lets it, and leaves when the
 * call is done, so the tenant's other writes stay queued, in order, while
 * the workers serve other tenants (ks_rpc_server.c, "Tenants' turns").
 *
 * Entries live in a bounded table (keys_max, sized to the calls that may
 * hold at once). A key that finds the table full, or longer than
 * KS_GATE_KEY_MAX, is let through ungated (*held false): the gate shapes
 * load, it never refuses.
 *
 * Thread-safe (one mutex).
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
/* Frees it: nothing may hold it. */
void ks_gate_free(ks_gate *g);

/*
 * Whether key may go now: true when fewer than width hold it (then *held,
 * and the caller must ks_gate_leave), or when it is let through ungated
 * (*held false); false when width already hold it.
 */
bool ks_gate_try_enter(ks_gate *g, const char *key, bool *held);
/* Gives back a place key held. */
void ks_gate_leave(ks_gate *g, const char *key);

/* Holders of key now. */
int ks_gate_holders(ks_gate *g, const char *key);

#endif
