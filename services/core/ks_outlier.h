/*
 * ks_outlier: which replica connected to a service's back the broker should
 * take out of the rotation, judged from what the broker sees of each
 * connection: the requests nng handed to it and the replies that came back
 * (nng's per-pipe message counters). Passive outlier detection in the manner
 * of Envoy's (consecutive local-origin failures, with max_ejection_percent
 * keeping the last hosts in), where the failure is a connection that holds
 * calls and answers none of them.
 *
 * A pure state machine, fed one look at a back at a time, so that it can be
 * tested without a network; ks_broker does the looking and the acting.
 *
 *   - A pipe is stalled when it has requests outstanding (sent - answered >
 *     0) and its answered count has not moved for eject_after_ms. A pipe with
 *     nothing outstanding is never stalled, however long it is quiet.
 *   - A stalled pipe is ejected (the broker closes the connection, and nng's
 *     req socket stops handing it requests) only while another pipe of the
 *     back is not stalled: never the last replica that answers, and never
 *     every replica at once (a shared cause, such as a slow database, would
 *     turn slow into unavailable). Such a pipe is reported held, once.
 *   - At most one ejection per look, the pipe silent the longest.
 *   - Readmission: an ejected replica that runs again dials back (nng's
 *     dialer), as a new connection. Peers carry no identity, so the first
 *     new pipe from the host of an ejected one is taken as that replica
 *     coming back; on one host, any new pipe is.
 */
#ifndef KS_OUTLIER_H
#define KS_OUTLIER_H

#include "ks_code.h"

#include <stddef.h>
#include <stdint.h>

#define KS_OUTLIER_PIPES_MAX   256 /* pipes judged per back; more are left alone */
#define KS_OUTLIER_PENDING_MAX 64  /* ejections remembered until the replica is back */
#define KS_OUTLIER_HOST_MAX    64  /* "127.0.0.1", "::1" */
#define KS_OUTLIER_EVENTS_MAX  (KS_OUTLIER_PIPES_MAX + 1)

typedef struct ks_outlier ks_outlier;

/* One pipe of the back, as one look sees it. */
typedef struct ks_outlier_pipe {
        uint32_t id;
        uint64_t sent;     /* requests written to it */
        uint64_t answered; /* replies read from it */
        char host[KS_OUTLIER_HOST_MAX];
} ks_outlier_pipe;

typedef enum ks_outlier_kind {
        KS_OUTLIER_EJECT,   /* close this pipe */
        KS_OUTLIER_HELD,    /* stalled, but kept: no other pipe answers */
        KS_OUTLIER_READMIT, /* a new pipe from the host of an ejected one */
} ks_outlier_kind;

typedef struct ks_outlier_event {
        ks_outlier_kind kind;
        uint32_t pipe;
        uint64_t outstanding; /* EJECT, HELD: requests it holds */
        int64_t elapsed_ms;   /* EJECT, HELD: silent for; READMIT: since the ejection */
        char host[KS_OUTLIER_HOST_MAX];
} ks_outlier_event;

/* eject_after_ms: 1..KS_OUTLIER_AFTER_MAX_MS. KS_OK, KS_INVALID_ARGUMENT, KS_INTERNAL. */
#define KS_OUTLIER_AFTER_MAX_MS 600000
int ks_outlier_new(ks_outlier **out, int64_t eject_after_ms) KS_MUST_CHECK;
void ks_outlier_free(ks_outlier *o);

/*
 * One look at every pipe of the back (n <= KS_OUTLIER_PIPES_MAX; the pipes
 * not listed are gone) at now_ms, a monotonic clock. Writes what to do into
 * ev (room for KS_OUTLIER_EVENTS_MAX) and returns how many events.
 */
size_t ks_outlier_step(ks_outlier *o, const ks_outlier_pipe *pipes, size_t n, int64_t now_ms,
                       ks_outlier_event *ev);

/* Ejected replicas that have not come back. */
int ks_outlier_pending(const ks_outlier *o);

#endif
