/*
 * ks_fifo: an intrusive first-in first-out list. An item embeds a
 * ks_fifo_link and is found back from it with KS_FIFO_ITEM; the list owns
 * nothing. Not thread-safe: a list shared between threads is used under
 * its owner's lock (ks_fifo_take empties it in one step, so the items can
 * be worked on after the lock is let go).
 */
#ifndef KS_FIFO_H
#define KS_FIFO_H

#include <stddef.h>

typedef struct ks_fifo_link {
        struct ks_fifo_link *next;
} ks_fifo_link;

typedef struct ks_fifo {
        ks_fifo_link *head, *tail;
        size_t n;
} ks_fifo;

/* The item of type holding link as its member. */
#define KS_FIFO_ITEM(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

static inline void ks_fifo_push(ks_fifo *q, ks_fifo_link *l)
{
        l->next = NULL;
        if (q->tail != NULL) {
                q->tail->next = l;
        } else {
                q->head = l;
        }
        q->tail = l;
        q->n++;
}

/* Takes l out of q, prev being the link before it (NULL: l is the head). */
static inline void ks_fifo_unlink(ks_fifo *q, ks_fifo_link *prev, ks_fifo_link *l)
{
        if (prev != NULL) {
                prev->next = l->next;
        } else {
                q->head = l->next;
        }
        if (q->tail == l) {
                q->tail = prev;
        }
        q->n--;
        l->next = NULL;
}

/* The oldest item's link, or NULL when the list is empty. */
static inline ks_fifo_link *ks_fifo_pop(ks_fifo *q)
{
        ks_fifo_link *l = q->head;
        if (l != NULL) {
                ks_fifo_unlink(q, NULL, l);
        }
        return l;
}

/* Every item, in order, as a list of its own; q is left empty. */
static inline ks_fifo ks_fifo_take(ks_fifo *q)
{
        ks_fifo all = *q;
        *q = (ks_fifo){0};
        return all;
}

#endif
