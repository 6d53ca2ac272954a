/*
 * ks_req: calls to keelson services from a libevent loop, speaking nng's
 * req protocol through ks_sp dialers (no nng, no thread between a reply
 * and its call). The gateway's upstream and ks_rpc_client are built on it.
 *
 * Targets. A target is one service's front on every broker: a dialer per
 * broker URL, each keeping one pipe. A call goes to a connected broker of
 * its target, round robin, except one that said it is about to stop
 * (ks_broker_ctl.h); with only such brokers connected, it waits for the
 * next broker to connect (or its deadline).
 *
 * Calls. A call takes a slot (max_inflight of them); its request id (high
 * bit set, then the slot's generation and index) goes in front of the
 * packed envelope. The reply comes back on the loop with that id in front:
 * the slot is found and the call completed there and then, through the
 * completion function, never from within ks_req_start.
 *
 * What nng's req sockets did and callers rely on is kept:
 *   - a call sent on a broker connection that is lost is sent again on
 *     another at once (or when one connects, before its deadline): nng's
 *     req0 resends on a pipe's close, writes included, and every keelson
 *     write is safe to receive twice;
 *   - an idempotent call (resend_ms > 0) unanswered for resend_ms is sent
 *     again, under a new request id (a late reply to the earlier one is
 *     dropped), until its deadline;
 *   - no broker connected at the start: UNAVAILABLE at once; the deadline
 *     passed: DEADLINE_EXCEEDED; every slot taken: RESOURCE_EXHAUSTED.
 *
 * Every function on the loop's thread.
 */
#ifndef KS_REQ_H
#define KS_REQ_H

#include <event2/event.h>
#include <stdint.h>

#include "ks_rpc.h"

#define KS_REQ_INFLIGHT_MAX 65536 /* slots: a request id holds 16 bits of slot index */

typedef struct ks_req ks_req;

/* One call in flight: embedded in the caller's state, untouched until completed. */
typedef struct ks_req_call {
        ks_rpc_result result;
} ks_req_call;

typedef void (*ks_req_complete_fn)(ks_req_call *call, void *arg);

/* KS_OK, KS_INVALID_ARGUMENT (sizes), KS_INTERNAL. */
int ks_req_new(ks_req **out, struct event_base *base, int max_inflight, int default_timeout_ms,
               ks_req_complete_fn complete, void *arg) KS_MUST_CHECK;
/*
 * Ends every call in flight with UNAVAILABLE message (through complete),
 * closes every broker connection, then frees. Accepts NULL.
 */
void ks_req_free(ks_req *r, const char *message);

/*
 * Adds a target dialling urls (n of them, "tcp://host:port" or "ipc:///path", at most
 * KS_BROKERS_MAX); *target is its number for ks_req_start. KS_OK,
 * KS_INVALID_ARGUMENT (a malformed url, too many), KS_INTERNAL.
 */
int ks_req_target(ks_req *r, const char *const *urls, int n, int *target) KS_MUST_CHECK;
/* The target's brokers connected now. */
int ks_req_connected(const ks_req *r, int target);
/* fn(arg, target, connected) runs whenever a target's broker comes or goes. */
void ks_req_watch(ks_req *r, void (*fn)(void *arg, int target, int connected), void *arg);

/* Starts a call; KS_OK (complete will run once), else a code and nothing runs. */
int ks_req_start(ks_req *r, int target, const ks_rpc_call_args *args, ks_req_call *call);
/*
 * The same with the envelope already packed (msg, len: taken, freed by ks_req
 * in every case) and its absolute deadline.
 */
int ks_req_start_packed(ks_req *r, int target, uint8_t *msg, size_t len, int64_t deadline_unix_ms,
                        int resend_ms, ks_req_call *call);
/* Slots free now. */
int ks_req_free_slots(const ks_req *r);

#endif
