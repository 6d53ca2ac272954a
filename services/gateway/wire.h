/*
 * wire.c: the protocols that frame messages in a body, side by side, as
 * pure functions: gRPC, gRPC-Web (binary and base64 text) and the Connect
 * protocol's streaming form (connect+proto, connect+json). All of them put
 * each message behind the same 5-byte prefix (grpc.h); they differ in how
 * a call's status ends the body:
 *
 *   gRPC                 HTTP/2 trailers (grpc-status, grpc-message); the
 *                        body holds messages only
 *   gRPC-Web             a last frame flagged 0x80 holding the trailers as
 *                        "name: value\r\n" lines (grpcweb.h)
 *   gRPC-Web text        the same, each frame in padded base64
 *   Connect streaming    a last frame flagged 0x02 holding JSON: {} or
 *                        {"error":{"code":"...","message":"..."}}
 *                        (connectrpc.com/docs/protocol, "Streaming-RPC")
 *
 * A stream (rpcstream.h) and a unary gRPC-family reply (handler.c) both
 * write their bodies with these, so each rule lives here once.
 */
#ifndef GW_WIRE_H
#define GW_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

typedef enum gw_wire {
        GW_WIRE_GRPC = 0,          /* application/grpc[+proto] (HTTP/2 only) */
        GW_WIRE_GRPC_WEB = 1,      /* application/grpc-web[+proto] */
        GW_WIRE_GRPC_WEB_TEXT = 2, /* application/grpc-web-text[+proto] */
        GW_WIRE_CONNECT_PROTO = 3, /* application/connect+proto (streaming methods) */
        GW_WIRE_CONNECT_JSON = 4,  /* application/connect+json (streaming methods) */
} gw_wire;

/* The end-of-stream flag of the Connect protocol's last frame. */
#define GW_WIRE_FLAG_CONNECT_END 0x02

/*
 * The wire of a request's Content-Type (case-insensitive, parameters after
 * ';' allowed). Returns 0, or -1 for any other (a unary Connect call's
 * application/json and application/proto included).
 */
int gw_wire_parse(const char *content_type, gw_wire *out);
/* The Content-Type of a reply on the wire. */
const char *gw_wire_content_type(gw_wire w);
/* Whether the status goes in HTTP/2 trailers (gRPC) rather than in the body. */
bool gw_wire_trailers(gw_wire w);
/* Whether the Connect protocol's headers (Connect-*) rule the call, not gRPC's. */
bool gw_wire_connect(gw_wire w);

/*
 * One message of len packed bytes, framed for the wire (in base64 for
 * gRPC-Web text), malloc'd into *out. For connect+json msg must be the
 * message's JSON. Returns 0, or -1 (out of memory, over UINT32_MAX).
 */
int gw_wire_frame(gw_wire w, const uint8_t *msg, size_t len, uint8_t **out,
                  size_t *out_len) KS_MUST_CHECK;

/*
 * One message framed for the wire: packed, or as JSON for connect+json.
 * Returns 0, or -1 (out of memory).
 */
int gw_wire_message(gw_wire w, const ProtobufCMessage *msg, uint8_t **out,
                    size_t *out_len) KS_MUST_CHECK;

/*
 * The frame that ends a body with a call's status (code, and message: NULL
 * or "" for none), malloc'd into *out; for gRPC, whose status goes in
 * trailers, nothing (*out NULL, *out_len 0). The message is percent-encoded
 * for the gRPC family (grpc-message) and plain in Connect's JSON. Returns
 * 0, or -1 (out of memory).
 */
int gw_wire_end(gw_wire w, int code, const char *message, uint8_t **out,
                size_t *out_len) KS_MUST_CHECK;

/*
 * grpc-status and grpc-message as trailer values: status (12 bytes) holds
 * the number; text (GW_GRPC_MESSAGE_MAX + 1) the percent-encoded message,
 * "" when there is none.
 */
void gw_wire_status(int code, const char *message, char *status, char *text);

#endif
