/* ks_arena: see ks_arena.h. */
#include "ks_arena.h"

#include <stdint.h>
#include <stdlib.h>

#define ALIGN 16

struct ks_arena_chunk {
        ks_arena_chunk *next;
        size_t size;
        _Alignas(16) char data[];
};

static void *pb_alloc(void *data, size_t n)
{
        return ks_arena_alloc(data, n);
}

static void pb_free(void *data, void *p)
{
        (void)data;
        (void)p; /* released with the arena */
}

void ks_arena_init(ks_arena *a)
{
        a->pb.alloc = pb_alloc;
        a->pb.free = pb_free;
        a->pb.allocator_data = a;
        a->chunks = NULL;
        a->at = a->first;
        a->end = a->first + sizeof(a->first);
}

void *ks_arena_alloc(ks_arena *a, size_t n)
{
        if (n == 0 || n > SIZE_MAX - ALIGN - sizeof(ks_arena_chunk)) {
                return NULL;
        }
        size_t rounded = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
        if ((size_t)(a->end - a->at) < rounded) {
                size_t size = rounded > KS_ARENA_CHUNK_BYTES ? rounded : KS_ARENA_CHUNK_BYTES;
                ks_arena_chunk *c = malloc(sizeof(*c) + size);
                if (c == NULL) {
                        return NULL;
                }
                c->next = a->chunks;
                c->size = size;
                a->chunks = c;
                a->at = c->data;
                a->end = c->data + size;
        }
        void *p = a->at;
        a->at += rounded;
        return p;
}

ProtobufCAllocator *ks_arena_allocator(ks_arena *a)
{
        return &a->pb;
}

void ks_arena_release(ks_arena *a)
{
        while (a->chunks != NULL) {
                ks_arena_chunk *next = a->chunks->next;
                free(a->chunks);
                a->chunks = next;
        }
        ks_arena_init(a);
}
