/*
 * rpcstream.c: a reply written as it is made, in the protocol the caller
 * spoke (wire.h): gRPC on HTTP/2, gRPC-Web and the Connect protocol's
 * streaming on HTTP/2 or HTTP/1.1 (front.h's streams). The event
 * subscription (hub.c), Health/Watch (watch.c) and reflection (handler.c)
 * write through these, so a stream's framing and its status are made in
 * one place whatever the method.
 */
#ifndef GW_RPCSTREAM_H
#define GW_RPCSTREAM_H

#include <protobuf-c/protobuf-c.h>

#include "front.h"
#include "wire.h"

/* Opens r's reply on w: 200 and the wire's Content-Type. */
void gw_rpcstream_open(gw_req *r, gw_wire w);
/* One message. Returns 0, or -1 (out of memory: nothing was written). */
int gw_rpcstream_send(gw_req *r, gw_wire w, const ProtobufCMessage *msg);
/* One message already packed (not for connect+json). Returns 0 or -1. */
int gw_rpcstream_send_packed(gw_req *r, gw_wire w, const uint8_t *msg, size_t len);
/*
 * Ends the stream with a status (code, message: NULL for none): gRPC's
 * trailers, or the body's last frame. r is gone afterwards.
 */
void gw_rpcstream_end(gw_req *r, gw_wire w, int code, const char *message);
/* grpc-status and grpc-message as r's trailers (gRPC; a unary reply's too). */
void gw_rpcstream_trailers(gw_req *r, int code, const char *message);

#endif
