/*
 * ks_broker: the forwarding core of keelson-broker, a library so that tests
 * (and a single-process deployment) can run a broker in-process.
 *
 * For every service it listens on a front (clients dial it) and a back (the
 * service's replicas dial it) and forwards between them as nng's raw
 * req/rep device does (nng's wire protocol, spoken by ks_sp.h), so requests
 * spread over whichever replicas are connected and replies find their way
 * back by the routing header each request carries. Events: what publishers
 * send goes to every subscriber, which filters by topic prefix. Ports:
 * ks_topology.h.
 *
 * Draining (ks_broker_ctl.h). A replica about to stop says "drain" and the
 * broker sends it no new call; with no other replica of its service
 * connected, calls wait in the queue for the next one. A broker about to
 * stop (ks_broker_drain) says "drain" to its clients, which send their new
 * calls to their other brokers (or keep them until a broker connects), and
 * stops once the calls it holds are answered.
 *
 * Hung replicas. A request goes to a connected replica that has room, so a
 * replica that stops answering but keeps its connection (stopped, stalled,
 * its disk full) would keep receiving calls. Every eject_check_ms the
 * broker looks at each back's connections (the calls sent to each and
 * answered) and closes one that has held calls without answering
 * any for eject_after_ms, unless no other replica of the service answers
 * (ks_outlier.h has the rules). The replica dials back when it runs again.
 * A replica that stops answering while it holds a call is out of the
 * rotation within eject_after_ms + 2 * eject_check_ms of its last reply.
 */
#ifndef KS_BROKER_H
#define KS_BROKER_H

#include "ks_code.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ks_broker ks_broker;

/* The defaults of keelson-broker's KEELSON_BROKER_EJECT_* settings. */
#define KS_BROKER_EJECT_AFTER_MS_DEFAULT 3000
#define KS_BROKER_EJECT_CHECK_MS_DEFAULT 250
#define KS_BROKER_EJECT_CHECK_MS_MIN     10
#define KS_BROKER_EJECT_CHECK_MS_MAX     60000
/* keelson-broker's drain on SIGTERM, at most (under KS_SHUTDOWN_DEADLINE_MS). */
#define KS_BROKER_DRAIN_MS 10000

typedef struct ks_broker_options {
        /* A replica holding calls and answering none for this long leaves the
         * rotation; 0: never (1..KS_OUTLIER_AFTER_MAX_MS otherwise, and at
         * least eject_check_ms). */
        int64_t eject_after_ms;
        /* How often the backs are looked at, KS_BROKER_EJECT_CHECK_MS_MIN..MAX. */
        int64_t eject_check_ms;
} ks_broker_options;

/* Listens on every socket of the broker at base ("tcp://host:port", "ipc:///path", or one
 * of each separated by a comma: both lead to the same devices) and starts forwarding, with
 * the default options. */
int ks_broker_start(ks_broker **out, const char *base) KS_MUST_CHECK;

/* The same with options; KS_INVALID_ARGUMENT when one is out of range. */
int ks_broker_start_with(ks_broker **out, const char *base,
                         const ks_broker_options *o) KS_MUST_CHECK;

/*
 * Before a stop: tells every client "drain" (and each that connects from
 * now), waits up to KS_BROKER_CTL_WAIT_MS for their answers, then until
 * every call it forwarded or queued is answered and the replies are
 * written, for at most max_ms in all. Logs "broker drained" with its
 * figures; true when nothing was left held. Forwarding goes on meanwhile.
 */
bool ks_broker_drain(ks_broker *b, int64_t max_ms);

/* Stops forwarding, closes every socket and frees; accepts NULL. */
void ks_broker_stop(ks_broker *b);

#endif
