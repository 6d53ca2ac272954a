/*
 * ks_method: the facts of an RPC method, in one row.
 *
 * Each service lists its methods in services/<svc>/methods.def, one
 * KS_METHOD row per RPC, in the manner of Redis's command table:
 *
 *   KS_METHOD(Login, auth_login, KS_M_PUBLIC | KS_M_HEAVY, KS_BEARER_NONE, 0,
 *             KS_REVOKES_NONE)
 *
 * The service includes the file with the handler kept (its method table);
 * the gateway includes the same file with the handler dropped (its route
 * table, services/gateway/catalog.c). Nothing else states a method's flags.
 * A row names the method as its .proto does; the full name and the request
 * and response types come from the protobuf-c service descriptor, and
 * ks_method_resolve refuses a table whose rows and descriptor disagree (a
 * row for a method the .proto lacks, a method without a row, a row twice).
 */
#ifndef KS_METHOD_H
#define KS_METHOD_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

#include "envelope.pb-c.h"
#include "ks_code.h"

typedef Keelson__Rpc__V1__CallerContext ks_caller;

/* Method flags. */
enum {
        KS_M_PUBLIC = 1u << 0,     /* callable without a caller context */
        KS_M_INTERNAL = 1u << 1,   /* never routed from the outside by the gateway */
        KS_M_IDEMPOTENT = 1u << 2, /* safe to receive twice: the gateway resends it */
        /* Spends a password hash: the server bounds how many wait at once
         * (ks_rpc_server_options.heavy_max), so cheap calls keep their workers. */
        KS_M_HEAVY = 1u << 3,
        /* A bearer token that does not resolve (revoked, expired, unknown) is
         * not refused: the call goes on with an unauthenticated caller. */
        KS_M_CALLER_OPTIONAL = 1u << 4,
        /* The method the gateway calls to turn a bearer token into a caller
         * (auth's ResolveContext): exactly one row of all carries it. */
        KS_M_RESOLVER = 1u << 5,
        /* A webhook intake (with KS_M_PUBLIC): the gateway routes it only at
         * /webhooks/<provider>/<id>, never at its Connect path, and makes its
         * request (ReceiveWebhookRequest) from the raw body and the signature
         * headers (services/gateway/intake.c). At most one row of all. */
        KS_M_INTAKE = 1u << 6,
        /* A tenant's write that may run in one transaction with the same
         * method's other queued calls of its tenant: the server hands them to
         * the service's group_run together (ks_rpc_server.c, "Groups"). */
        KS_M_GROUPED = 1u << 7,
};

/* Which bearer a caller must hold; checked by the RPC server before the handler. */
typedef enum ks_bearer {
        KS_BEARER_NONE = 0, /* public: no caller needed */
        KS_BEARER_ANY = 1,  /* a user's session or an API key */
        KS_BEARER_USER = 2, /* a user's session only: an API key is permission_denied */
} ks_bearer;

/* What a success makes stale in the gateways' context caches. */
typedef enum ks_revokes {
        KS_REVOKES_NONE = 0,
        KS_REVOKES_TOKEN = 1, /* the caller's own token */
        KS_REVOKES_USER = 2,  /* every token of the caller's user */
} ks_revokes;

typedef struct ks_call ks_call;
typedef int (*ks_handler_fn)(ks_call *call);

/* One row of a methods.def. */
typedef struct ks_method_row {
        const char *name; /* as in the .proto: "Login" */
        ks_handler_fn handler;
        unsigned flags;
        ks_bearer bearer;
        unsigned permission; /* the service's permission bit the role must hold; 0: none */
        ks_revokes revokes;
} ks_method_row;

/* A service's rows and the descriptor they describe. */
typedef struct ks_method_table {
        const ProtobufCServiceDescriptor *service;
        const ks_method_row *rows;
        size_t n_rows;
} ks_method_table;

/* A row made whole: what the RPC server dispatches and a handler sees. */
typedef struct ks_method {
        const char *name; /* "keelson.auth.v1.AuthService/Login" */
        const ProtobufCMessageDescriptor *input;
        const ProtobufCMessageDescriptor *output;
        ks_handler_fn handler;
        unsigned flags;
        ks_bearer bearer;
        unsigned permission;
        ks_revokes revokes;
} ks_method;

/*
 * A methods.def row as an initializer: a service defines KS_METHOD as this;
 * the gateway defines it as this with the handler and permission dropped,
 * so it links no handler and needs no service's header.
 */
#define KS_METHOD_ROW(name, fn, flags, bearer, perm, revokes)                                      \
        {#name, fn, flags, bearer, perm, revokes},

/*
 * Checks the table against its descriptor and makes the whole methods, in
 * the descriptor's order: *out (malloc'ed, free it; names point into the
 * descriptor). Returns 0, or -1 with the reason in err.
 */
int ks_method_resolve(const ks_method_table *t, ks_method **out, size_t *n, char *err,
                      size_t err_len) KS_MUST_CHECK;

/* Frees what ks_method_resolve made (NULL is fine). */
void ks_method_free(ks_method *v, size_t n);

/* The method of a full name in a resolved array; NULL when none. */
const ks_method *ks_method_find(const ks_method *v, size_t n, const char *name);

/*
 * Whether a caller may call m, before its handler runs: KS_OK, or
 * KS_UNAUTHENTICATED / KS_PERMISSION_DENIED with a message for the client in
 * msg. The permission is not checked here: a service checks it against the
 * role it trusts (auth reads the role again inside the transaction).
 */
int ks_method_admits(const ks_method *m, const ks_caller *caller, char *msg, size_t msg_len);

#endif
