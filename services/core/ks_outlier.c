/* ks_outlier: see ks_outlier.h. */
#include "ks_outlier.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"

typedef struct tracked {
        uint32_t id;
        uint64_t answered;
        int64_t progress_ms; /* the last look at which it answered, or held nothing */
        bool ejected;
        bool held; /* reported held since its last progress */
} tracked;

typedef struct pending {
        char host[KS_OUTLIER_HOST_MAX];
        int64_t at_ms;
} pending;

struct ks_outlier {
        int64_t after_ms;
        tracked pipes[KS_OUTLIER_PIPES_MAX];
        size_t n_pipes;
        tracked next[KS_OUTLIER_PIPES_MAX]; /* the look being built */
        pending pending[KS_OUTLIER_PENDING_MAX];
        size_t n_pending; /* oldest first */
};

int ks_outlier_new(ks_outlier **out, int64_t eject_after_ms)
{
        *out = NULL;
        if (eject_after_ms < 1 || eject_after_ms > KS_OUTLIER_AFTER_MAX_MS) {
                return KS_INVALID_ARGUMENT;
        }
        ks_outlier *o = calloc(1, sizeof(*o));
        if (o == NULL) {
                return KS_INTERNAL;
        }
        o->after_ms = eject_after_ms;
        *out = o;
        return KS_OK;
}

void ks_outlier_free(ks_outlier *o)
{
        free(o);
}

int ks_outlier_pending(const ks_outlier *o)
{
        return (int)o->n_pending;
}

static const tracked *find(const ks_outlier *o, uint32_t id)
{
        for (size_t i = 0; i < o->n_pipes; i++) {
                if (o->pipes[i].id == id) {
                        return &o->pipes[i];
                }
        }
        return NULL;
}

static void pending_remove(ks_outlier *o, size_t i)
{
        memmove(&o->pending[i], &o->pending[i + 1], (o->n_pending - i - 1) * sizeof(pending));
        o->n_pending--;
}

static void pending_add(ks_outlier *o, const char *host, int64_t now_ms)
{
        if (o->n_pending == KS_OUTLIER_PENDING_MAX) {
                pending_remove(o, 0); /* the oldest is forgotten */
        }
        pending *p = &o->pending[o->n_pending++];
        snprintf(p->host, sizeof(p->host), "%s", host);
        p->at_ms = now_ms;
}

/* A pipe seen for the first time: the replica of an ejection, back? */
static size_t readmit(ks_outlier *o, const ks_outlier_pipe *p, int64_t now_ms, ks_outlier_event *ev)
{
        for (size_t i = 0; i < o->n_pending; i++) {
                if (strcmp(o->pending[i].host, p->host) == 0) {
                        *ev = (ks_outlier_event){.kind = KS_OUTLIER_READMIT,
                                                 .pipe = p->id,
                                                 .elapsed_ms = now_ms - o->pending[i].at_ms};
                        snprintf(ev->host, sizeof(ev->host), "%s", p->host);
                        pending_remove(o, i);
                        return 1;
                }
        }
        return 0;
}

static uint64_t outstanding(const ks_outlier_pipe *p)
{
        /* the two counters are read one after the other: a reply may be counted first */
        return p->sent > p->answered ? p->sent - p->answered : 0;
}

/* Builds o->next from the look; returns the readmissions written to ev. */
static size_t update(ks_outlier *o, const ks_outlier_pipe *pipes, size_t n, int64_t now_ms,
                     ks_outlier_event *ev)
{
        size_t n_ev = 0;

        for (size_t i = 0; i < n; i++) {
                const tracked *old = find(o, pipes[i].id);
                tracked *t = &o->next[i];
                if (old != NULL) {
                        *t = *old;
                } else {
                        *t = (tracked){.id = pipes[i].id, .progress_ms = now_ms};
                        n_ev += readmit(o, &pipes[i], now_ms, &ev[n_ev]);
                }
                if (old == NULL || pipes[i].answered != t->answered ||
                    outstanding(&pipes[i]) == 0) {
                        t->answered = pipes[i].answered;
                        t->progress_ms = now_ms;
                        t->held = false;
                }
        }
        return n_ev;
}

static bool stalled(const ks_outlier *o, const tracked *t, const ks_outlier_pipe *p, int64_t now_ms)
{
        return !t->ejected && outstanding(p) > 0 && now_ms - t->progress_ms >= o->after_ms;
}

static ks_outlier_event event_of(ks_outlier_kind kind, const tracked *t, const ks_outlier_pipe *p,
                                 int64_t now_ms)
{
        ks_outlier_event e = {.kind = kind,
                              .pipe = t->id,
                              .outstanding = outstanding(p),
                              .elapsed_ms = now_ms - t->progress_ms};
        snprintf(e.host, sizeof(e.host), "%s", p->host);
        return e;
}

size_t ks_outlier_step(ks_outlier *o, const ks_outlier_pipe *pipes, size_t n, int64_t now_ms,
                       ks_outlier_event *ev)
{
        KS_ASSERT(n <= KS_OUTLIER_PIPES_MAX);
        size_t n_ev = update(o, pipes, n, now_ms, ev);
        size_t answering = 0, worst = n;

        for (size_t i = 0; i < n; i++) {
                const tracked *t = &o->next[i];
                if (!stalled(o, t, &pipes[i], now_ms)) {
                        answering += t->ejected ? 0 : 1;
                } else if (worst == n || t->progress_ms < o->next[worst].progress_ms) {
                        worst = i;
                }
        }
        if (worst < n && answering > 0) {
                tracked *t = &o->next[worst];
                ev[n_ev++] = event_of(KS_OUTLIER_EJECT, t, &pipes[worst], now_ms);
                t->ejected = true;
                pending_add(o, pipes[worst].host, now_ms);
        } else if (worst < n) {
                for (size_t i = 0; i < n; i++) {
                        tracked *t = &o->next[i];
                        if (stalled(o, t, &pipes[i], now_ms) && !t->held) {
                                ev[n_ev++] = event_of(KS_OUTLIER_HELD, t, &pipes[i], now_ms);
                                t->held = true;
                        }
                }
        }
        memcpy(o->pipes, o->next, n * sizeof(tracked));
        o->n_pipes = n;
        KS_ASSERT(n_ev <= KS_OUTLIER_EVENTS_MAX);
        return n_ev;
}
