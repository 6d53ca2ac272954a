/*
 * ks_topology: where things are on a broker. A broker is named by one base
 * URL, "tcp://127.0.0.1:7400"; every socket it offers sits at a fixed offset
 * from the base port, so one variable (KEELSON_BROKER_URL, a comma-separated
 * list when several brokers run) tells every process where to dial.
 *
 *   port base + 2*i      front of service i (clients dial it)
 *   port base + 2*i + 1  back of service i (replicas of service i dial it)
 *   port base + 40       event input  (publishers dial it)
 *   port base + 41       event output (subscribers dial it)
 *
 * A broker on the same machine can also be named by an ipc base,
 * "ipc:///run/keelson/broker" (nng's ipc transport: unix sockets); its
 * sockets are files named after the base: "<base>-auth-front",
 * "<base>-auth-back", ..., "<base>-events-in", "<base>-events-out".
 */
#ifndef KS_TOPOLOGY_H
#define KS_TOPOLOGY_H

#include "ks_code.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum ks_service_id {
        KS_SVC_AUTH = 0,
        KS_SVC_BILLING = 1,
        KS_SVC_LEDGER = 2,
        KS_SVC_WEBHOOK = 3,
        KS_SVC_SUMMARY = 4,
        KS_SVC_COUNT = 5
} ks_service_id;

typedef enum ks_broker_side {
        KS_SIDE_FRONT,
        KS_SIDE_BACK,
        KS_SIDE_EVENTS_IN,
        KS_SIDE_EVENTS_OUT
} ks_broker_side;

#define KS_BROKERS_MAX 8
#define KS_URL_MAX     256
/* What a list of broker bases looks like, for error messages. */
#define KS_BROKER_LIST_SYNTAX "tcp://host:port or ipc:///path[,...]"
/* An ipc base's path: its longest socket name must fit a unix socket's 108 bytes. */
#define KS_IPC_BASE_MAX 92

/* "auth", "billing", ... */
const char *ks_service_name(ks_service_id id);

/* The service owning a method "keelson.auth.v1.AuthService/Login"; -1 if none. */
int ks_service_of_method(const char *method);

/*
 * Writes the URL of one socket of the broker at base ("tcp://host:port" or
 * "ipc:///path") into out. Returns 0, or -1 when base is neither or out is
 * too small.
 */
int ks_broker_url(char *out, size_t out_len, const char *base, int service,
                  ks_broker_side side) KS_MUST_CHECK;

/*
 * Splits a comma-separated list of broker base URLs. Returns the count (at
 * most KS_BROKERS_MAX), or -1 when one is malformed.
 */
int ks_broker_list(const char *list, char urls[][KS_URL_MAX], int max) KS_MUST_CHECK;

/* True when base is an ipc:// base (a unix socket's path), not a tcp:// one. */
bool ks_broker_url_ipc(const char *base);

#endif
