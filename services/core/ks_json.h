/*
 * ks_json: the proto3 JSON mapping over protobuf-c descriptors, both ways,
 * with jansson underneath.
 *
 * Output: field names in lowerCamelCase (json_name); fields at their default
 * value omitted (proto3 rule); int64/uint64/fixed64/sint64 as decimal strings;
 * bytes as standard base64 with padding; enums by name; nested messages,
 * repeated fields, maps (as JSON objects) and oneofs; float/double as numbers
 * ("NaN", "Infinity", "-Infinity" as strings).
 *
 * Input: both lowerCamelCase and the original proto field names; null means
 * the default; 64-bit integers as strings or numbers; 32-bit integers as
 * numbers or strings, checked for range and integrality; bytes as standard or
 * URL-safe base64, padded or not; enums by name or number. Unknown fields,
 * wrong types, out-of-range numbers, bad base64, duplicate fields (the same
 * field under both names) and trailing garbage are rejected with
 * KS_INVALID_ARGUMENT and a message naming the field ("field 'email': expected
 * a string"). Nesting is bounded (KS_JSON_DEPTH_MAX).
 */
#ifndef KS_JSON_H
#define KS_JSON_H

#include "ks_code.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#define KS_JSON_DEPTH_MAX 32

/*
 * Parses json (len bytes, need not be NUL-terminated) into a new message of
 * type desc. On success returns KS_OK and *out owns a message that the caller
 * frees with protobuf_c_message_free_unpacked(*out, NULL). On failure returns
 * KS_INVALID_ARGUMENT, *out is NULL and err holds a message for the client.
 */
int ks_json_to_message(const ProtobufCMessageDescriptor *desc, const char *json, size_t len,
                       ProtobufCMessage **out, char *err, size_t err_len) KS_MUST_CHECK;

/*
 * Serializes msg as compact JSON. On success returns KS_OK and *out is a
 * NUL-terminated malloc'd string of *out_len bytes (caller frees). Returns
 * KS_INTERNAL only on allocation failure or an invalid message.
 */
int ks_json_from_message(const ProtobufCMessage *msg, char **out, size_t *out_len) KS_MUST_CHECK;

#endif
