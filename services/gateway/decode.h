/*
 * decode.c: a request body into the method's input message, within limits
 * that match the messages, checked before anything is allocated for it.
 *
 * A body is first walked without decoding (the protobuf wire format against
 * the message's descriptor, or the JSON text's structure): no repeated
 * field may hold more than KS_RPC_ITEMS_MAX elements, the elements of the
 * whole message (every repeated element and every nested message) are at
 * most GW_DECODE_TOTAL_MAX, and messages nest at most GW_DECODE_DEPTH_MAX
 * deep. Only a body within them is decoded (protobuf-c, or ks_json) and
 * packed again for the service, so the cost of any body is bounded by what
 * a valid request of the largest kind costs: 1 MiB of 520,000 empty
 * sub-messages is refused after one pass over its bytes, not after 520,000
 * allocations.
 */
#ifndef GW_DECODE_H
#define GW_DECODE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "connect.h"
#include "ks_rpc.h"

#define GW_DECODE_TOTAL_MAX      (2 * KS_RPC_ITEMS_MAX)    /* ids and ids_hi of one lookup */
#define GW_DECODE_DEPTH_MAX      8                         /* keelson's requests nest 2 deep */
#define GW_DECODE_JSON_DEPTH_MAX (2 * GW_DECODE_DEPTH_MAX) /* an object and an array a level */

/*
 * The structure checks alone: KS_OK, or KS_INVALID_ARGUMENT with a message
 * naming the field and the limit ("transfers: at most 8190 elements").
 */
int gw_decode_check(const ProtobufCMessageDescriptor *desc, gw_codec codec, const uint8_t *data,
                    size_t len, char *err, size_t err_len);

/*
 * Checks, decodes and packs again: KS_OK with *payload (malloc'd, the
 * caller frees) and *payload_len; else the code (KS_INVALID_ARGUMENT,
 * KS_RESOURCE_EXHAUSTED for a message that packs past KS_RPC_PAYLOAD_MAX,
 * KS_INTERNAL) and a message for the client in err.
 */
int gw_decode(const ProtobufCMessageDescriptor *desc, gw_codec codec, const uint8_t *data,
              size_t len, uint8_t **payload, size_t *payload_len, char *err, size_t err_len);

#endif
