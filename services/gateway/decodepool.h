/*
 * decodepool.c: large request bodies decoded off the event loop. Worker
 * threads run gw_decode (decode.c) on jobs the loop submits, and hand each
 * job back on the loop, the way upstream.c hands back calls. The loop stays
 * free while a batch of 8,190 transfers is decoded (tens of milliseconds as
 * JSON); small bodies, which cost less than the hop, are decoded inline by
 * the handler.
 */
#ifndef GW_DECODEPOOL_H
#define GW_DECODEPOOL_H

#include <event2/event.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "connect.h"
#include "ks_fifo.h"

#define GW_DECODE_INLINE_BYTES 16384 /* bodies up to this size are decoded on the loop */
#define GW_DECODE_ERR_MAX      256

typedef struct gw_decodepool gw_decodepool;

/* One body to decode; owned by the pool from submit until handed back. */
typedef struct gw_decode_job {
        ks_fifo_link link; /* the pool's */
        const ProtobufCMessageDescriptor *desc;
        gw_codec codec;
        uint8_t *body; /* malloc'd copy; the pool frees it once decoded */
        size_t body_len;
        int rc;           /* after: KS_OK, or the error with err */
        uint8_t *payload; /* after, on KS_OK: the packed message (the submitter frees it) */
        size_t payload_len;
        char err[GW_DECODE_ERR_MAX];
} gw_decode_job;

/* Runs on the loop for every job handed back (also at gw_decodepool_free). */
typedef void (*gw_decoded_fn)(gw_decode_job *job, void *arg);

int gw_decodepool_new(gw_decodepool **out, struct event_base *base, int threads, size_t queue_max,
                      gw_decoded_fn fn, void *arg);
/* 0, or -1 when queue_max jobs already wait (the job is not taken). Loop thread. */
int gw_decodepool_submit(gw_decodepool *p, gw_decode_job *job);
/* Stops the threads and hands every job back, decoded or not (rc KS_CANCELED). */
void gw_decodepool_free(gw_decodepool *p);

#endif
