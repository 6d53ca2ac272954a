/*
 * reflection.c: gRPC server reflection (grpc.reflection.v1 and v1alpha,
 * whose messages are the same on the wire) as a pure function: a
 * ServerReflectionRequest's bytes in, the ServerReflectionResponse's bytes
 * out, answered from a FileDescriptorSet (the gateway's is embedded at
 * build time: descriptor_set.h) from which the methods the gateway does
 * not serve were cut when it was loaded.
 */
#ifndef GW_REFLECTION_H
#define GW_REFLECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

#define GW_REFLECTION_FILES_MAX   256   /* files in a descriptor set */
#define GW_REFLECTION_SYMBOLS_MAX 65536 /* symbols in all of them */

typedef struct gw_reflection gw_reflection;

/* Whether a method ("keelson.auth.v1.AuthService/Login") is served, so shown. */
typedef bool (*gw_reflection_served_fn)(const char *method, void *arg);

/*
 * The gateway's rule: a method the route table serves (gw_method_routed:
 * not KS_M_INTERNAL, not the webhook intake, which is served only at its
 * /webhooks/ path) or a method of a service the gateway answers itself
 * (health, reflection). arg is unused.
 */
bool gw_reflection_served(const char *method, void *arg);

/*
 * Loads a serialized FileDescriptorSet (set[0..set_len), protoc
 * --include_imports: every dependency in it), keeping of each service the
 * methods served says are served, and of the services those with one left;
 * the comments (source_code_info) follow what is kept. Returns 0, or -1
 * (malformed set, a dependency missing, over the bounds, out of memory).
 */
int gw_reflection_new(gw_reflection **out, const uint8_t *set, size_t set_len,
                      gw_reflection_served_fn served, void *arg) KS_MUST_CHECK;
void gw_reflection_free(gw_reflection *r); /* NULL is fine */

/* The services kept, in the set's order: the answer to list_services. */
size_t gw_reflection_services_n(const gw_reflection *r);
const char *gw_reflection_service(const gw_reflection *r, size_t i);

/*
 * The files one stream has been sent (zero it when the stream starts):
 * a dependency already sent is not sent again, as the protocol allows; the
 * file asked for always is. May be NULL: every answer is then whole.
 */
typedef struct gw_reflection_sent {
        uint64_t bits[GW_REFLECTION_FILES_MAX / 64];
} gw_reflection_sent;

/*
 * Answers one request of a ServerReflectionInfo stream: the response,
 * malloc'd into *out. What the protocol answers with an error_response (an
 * unknown file, symbol, type or extension: NOT_FOUND; a request of a kind
 * it does not know: UNIMPLEMENTED) is KS_OK too. Returns KS_OK, or the
 * status that ends the stream: KS_INVALID_ARGUMENT (the request does not
 * parse), KS_INTERNAL (out of memory).
 */
int gw_reflection_answer(const gw_reflection *r, gw_reflection_sent *sent, const uint8_t *req,
                         size_t req_len, uint8_t **out, size_t *out_len) KS_MUST_CHECK;

#endif
