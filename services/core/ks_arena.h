/*
 * ks_arena: a bump allocator for messages that live for one step.
 *
 * protobuf-c allocates every string, array and sub-message of an unpacked
 * message on its own, and frees each again; a 50-item page was hundreds of
 * malloc and free calls in the gateway for a message that is printed as JSON
 * and dropped. Unpacked through ks_arena_allocator, the message's parts are
 * carved from the arena's chunks (the first one inside the arena itself,
 * so a small message costs no malloc at all), freeing one is nothing, and
 * ks_arena_release gives everything back at once. Do not call
 * protobuf_c_message_free_unpacked on such a message: release the arena.
 *
 * One arena belongs to one thread at a time.
 */
#ifndef KS_ARENA_H
#define KS_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* The chunk inside the arena, and each one after it (a larger request gets its own). */
#define KS_ARENA_INLINE_BYTES 4096
#define KS_ARENA_CHUNK_BYTES  16384

typedef struct ks_arena_chunk ks_arena_chunk;

typedef struct ks_arena {
        ProtobufCAllocator pb;
        ks_arena_chunk *chunks; /* malloc'd, newest first */
        char *at, *end;         /* the free part of the current chunk */
        _Alignas(16) char first[KS_ARENA_INLINE_BYTES];
} ks_arena;

void ks_arena_init(ks_arena *a);

/* n bytes aligned to 16, or NULL when out of memory (or n is 0). */
void *ks_arena_alloc(ks_arena *a, size_t n);

/* The allocator to hand protobuf-c: alloc from a, free does nothing. */
ProtobufCAllocator *ks_arena_allocator(ks_arena *a);

/* Frees every chunk; a is empty again (and may be used again). */
void ks_arena_release(ks_arena *a);

#endif
