/*
 * ks_req: see ks_req.h. The request id of a call is KS_SP_ID_BIT, then the
 * slot's generation (15 bits, so a late reply to a slot's earlier call is
 * not taken for the current one), then the slot's index (16 bits).
 */
#include "ks_req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_broker_ctl.h"
#include "ks_log.h"
#include "ks_sp.h"
#include "ks_topology.h"

#define SLOT_BITS      16
#define SLOT_MASK      ((1u << SLOT_BITS) - 1)
#define GEN_MASK       0x7fffu
#define TARGETS_MAX    16
#define RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define SEND_MAX_BYTES ((size_t)16 << 20)
#define NO_SLOT        UINT32_MAX

typedef struct slot slot;

/* A broker pipe's user while the broker drains: no new call goes on it. */
static char draining_mark;

typedef struct target {
        ks_req *r;
        int id;
        ks_sp_dialer *dialers[KS_BROKERS_MAX];
        int n_dialers;
        int next; /* round robin over the dialers */
} target;

struct slot {
        ks_req *r;
        ks_req_call *call; /* NULL: free */
        uint32_t id;       /* on the wire; 0 when free */
        uint16_t gen;
        int target;
        ks_sp_pipe *pipe; /* sent on; NULL: waiting for a broker */
        uint8_t *msg;     /* the packed envelope, kept for sending again */
        size_t len;
        ks_deadline deadline;
        int resend_ms;
        struct event *timer;
        uint32_t next_free;
};

struct ks_req {
        struct event_base *base;
        ks_sp *sp;
        target targets[TARGETS_MAX];
        int n_targets;
        slot *slots;
        uint32_t n_slots;
        uint32_t free_head;
        int n_free;
        int64_t default_timeout_ms;
        ks_req_complete_fn complete;
        void *complete_arg;
        void (*watch)(void *arg, int target, int connected);
        void *watch_arg;
};

void ks_req_watch(ks_req *r, void (*fn)(void *arg, int target, int connected), void *arg)
{
        r->watch = fn;
        r->watch_arg = arg;
}

static void notify(ks_req *r, int t)
{
        if (r->watch != NULL) {
                r->watch(r->watch_arg, t, ks_req_connected(r, t));
        }
}

/* ---- calls ------------------------------------------------------------------------- */

static uint32_t index_of(const ks_req *r, const slot *s)
{
        return (uint32_t)(s - r->slots);
}

/* Ends a call: the slot is free again, then complete runs with the result. */
static void finish(slot *s, ks_rpc_result *res)
{
        ks_req *r = s->r;
        ks_req_call *call = s->call;
        evtimer_del(s->timer);
        free(s->msg);
        s->msg = NULL;
        s->call = NULL;
        s->id = 0;
        s->pipe = NULL;
        s->next_free = r->free_head;
        r->free_head = index_of(r, s);
        r->n_free++;
        call->result = *res;
        r->complete(call, r->complete_arg);
}

static void finish_error(slot *s, int code, const char *message)
{
        ks_rpc_result res;
        memset(&res, 0, sizeof(res));
        res.code = code;
        snprintf(res.message, sizeof(res.message), "%s", message);
        finish(s, &res);
}

/* The next connected broker of a target that is not draining, round robin; NULL when none. */
static ks_sp_pipe *choose(target *t)
{
        for (int i = 0; i < t->n_dialers; i++) {
                int k = (t->next + i) % t->n_dialers;
                ks_sp_pipe *p = ks_sp_dialer_pipe(t->dialers[k]);
                if (p != NULL && ks_sp_pipe_user(p) != &draining_mark &&
                    ks_sp_pending(p) <= SEND_MAX_BYTES) {
                        t->next = (k + 1) % t->n_dialers;
                        return p;
                }
        }
        return NULL;
}

/* Arms the slot's timer: the deadline, or the next resend if sooner. */
static void arm(slot *s)
{
        int64_t left = ks_deadline_remaining_ms(s->deadline);
        if (left < 1) {
                left = 1;
        }
        if (s->resend_ms > 0 && s->resend_ms < left) {
                left = s->resend_ms;
        }
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
        evtimer_add(s->timer, &tv);
}

/* Sends (again) under a fresh request id: a reply to an earlier one finds nothing. */
static void send_now(slot *s)
{
        ks_req *r = s->r;
        s->gen = (uint16_t)((s->gen + 1) & GEN_MASK);
        s->id = KS_SP_ID_BIT | (uint32_t)s->gen << SLOT_BITS | index_of(r, s);
        s->pipe = choose(&r->targets[s->target]);
        if (s->pipe != NULL) {
                uint8_t head[4] = {(uint8_t)(s->id >> 24), (uint8_t)(s->id >> 16),
                                   (uint8_t)(s->id >> 8), (uint8_t)s->id};
                if (ks_sp_send(s->pipe, head, sizeof(head), s->msg, s->len) != 0) {
                        s->pipe = NULL; /* waits for the timer, or a broker */
                }
        }
        arm(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        slot *s = arg;
        if (ks_deadline_remaining_ms(s->deadline) <= 0) {
                finish_error(s, KS_DEADLINE_EXCEEDED, "deadline exceeded");
                return;
        }
        if (s->resend_ms > 0 || s->pipe == NULL) {
                send_now(s);
                return;
        }
        arm(s); /* woken early: wait on */
}

int ks_req_start_packed(ks_req *r, int t, uint8_t *msg, size_t len, int64_t deadline_unix_ms,
                        int resend_ms, ks_req_call *call)
{
        int64_t now = ks_now_ms();
        int code = KS_OK;
        if (t < 0 || t >= r->n_targets) {
                code = KS_UNIMPLEMENTED;
        } else if (deadline_unix_ms <= now) {
                code = KS_DEADLINE_EXCEEDED;
        } else if (ks_req_connected(r, t) == 0) {
                code = KS_UNAVAILABLE;
        } else if (r->free_head == NO_SLOT) {
                code = KS_RESOURCE_EXHAUSTED;
        }
        if (code != KS_OK) {
                free(msg);
                return code;
        }
        slot *s = &r->slots[r->free_head];
        r->free_head = s->next_free;
        r->n_free--;
        memset(&call->result, 0, sizeof(call->result));
        s->call = call;
        s->target = t;
        s->msg = msg;
        s->len = len;
        s->deadline = ks_deadline_after_ms(deadline_unix_ms - now);
        s->resend_ms = resend_ms > 0 ? resend_ms : 0;
        send_now(s);
        return KS_OK;
}

int ks_req_start(ks_req *r, int t, const ks_rpc_call_args *args, ks_req_call *call)
{
        if (args->payload_len > KS_RPC_PAYLOAD_MAX) {
                return KS_RESOURCE_EXHAUSTED;
        }
        int64_t now = ks_now_ms();
        int64_t deadline =
            args->deadline_unix_ms != 0 ? args->deadline_unix_ms : now + r->default_timeout_ms;
        if (deadline <= now) {
                return KS_DEADLINE_EXCEEDED;
        }
        Keelson__Rpc__V1__Request req;
        ks_rpc_request_of(args, deadline, &req);
        size_t len = keelson__rpc__v1__request__get_packed_size(&req);
        uint8_t *msg = malloc(len > 0 ? len : 1);
        if (msg == NULL) {
                return KS_INTERNAL;
        }
        keelson__rpc__v1__request__pack(&req, msg);
        return ks_req_start_packed(r, t, msg, len, deadline, args->resend_ms, call);
}

int ks_req_free_slots(const ks_req *r)
{
        return r->n_free;
}

/* ---- the brokers ----------------------------------------------------------------------- */

/*
 * A broker about to stop said "drain" (ks_broker_ctl.h): no new call goes to
 * it, and it is told so. What was sent on it is still answered through it;
 * a call with no other broker to go to waits for one to connect.
 */
static void on_control(ks_sp_pipe *p, const uint8_t *msg, size_t len)
{
        if (!ks_broker_ctl_equal(msg, len, KS_BROKER_CTL_DRAIN, KS_BROKER_CTL_DRAIN_LEN) ||
            ks_sp_pipe_user(p) == &draining_mark) {
                return;
        }
        ks_sp_pipe_set_user(p, &draining_mark);
        if (ks_sp_send(p, NULL, 0, (const uint8_t *)KS_BROKER_CTL_DRAINED,
                       KS_BROKER_CTL_DRAINED_LEN) != 0) {
                ks_log_warn(NULL, "cannot confirm a broker's drain", "{s:s}", "broker",
                            ks_sp_pipe_peer(p));
        }
}

/* A reply: [request id][envelope]; one no call waits for (ended, or sent again) is dropped. */
static void on_reply(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        target *t = arg;
        ks_req *r = t->r;
        if (ks_broker_ctl_is(msg, len)) {
                on_control(p, msg, len);
                return;
        }
        if (len < 4) {
                return;
        }
        uint32_t id =
            (uint32_t)msg[0] << 24 | (uint32_t)msg[1] << 16 | (uint32_t)msg[2] << 8 | msg[3];
        uint32_t i = id & SLOT_MASK;
        if ((id & KS_SP_ID_BIT) == 0 || i >= r->n_slots || r->slots[i].id != id ||
            r->slots[i].call == NULL) {
                return;
        }
        ks_rpc_result res;
        ks_rpc_reply_read(msg + 4, len - 4, &res);
        finish(&r->slots[i], &res);
}

/* A broker came: the calls of this target that wait for one go now. */
static void on_broker_added(ks_sp_pipe *p, void *arg)
{
        (void)p;
        target *t = arg;
        ks_req *r = t->r;
        notify(r, t->id);
        for (uint32_t i = 0; i < r->n_slots; i++) {
                slot *s = &r->slots[i];
                if (s->call != NULL && s->target == t->id && s->pipe == NULL) {
                        send_now(s);
                }
        }
}

/* A broker went: what was sent on it is sent again on another (nng's req0 does so). */
static void on_broker_removed(ks_sp_pipe *p, void *arg)
{
        target *t = arg;
        ks_req *r = t->r;
        notify(r, t->id);
        for (uint32_t i = 0; i < r->n_slots; i++) {
                slot *s = &r->slots[i];
                if (s->call != NULL && s->pipe == p) {
                        s->pipe = NULL;
                        if (ks_req_connected(r, t->id) > 0) {
                                send_now(s);
                        }
                }
        }
}

int ks_req_connected(const ks_req *r, int t)
{
        if (t < 0 || t >= r->n_targets) {
                return 0;
        }
        const target *v = &r->targets[t];
        int n = 0;
        for (int i = 0; i < v->n_dialers; i++) {
                n += ks_sp_dialer_pipe(v->dialers[i]) != NULL;
        }
        return n;
}

int ks_req_target(ks_req *r, const char *const *urls, int n, int *out)
{
        static const ks_sp_callbacks cb = {on_broker_added, on_reply, on_broker_removed};
        if (n < 1 || n > KS_BROKERS_MAX || r->n_targets >= TARGETS_MAX) {
                return KS_INVALID_ARGUMENT;
        }
        target *t = &r->targets[r->n_targets];
        t->r = r;
        t->id = r->n_targets;
        for (int i = 0; i < n; i++) {
                int rv = ks_sp_dial(r->sp, urls[i], KS_SP_REQ0, KS_SP_REP0, &cb, t,
                                    &t->dialers[t->n_dialers]);
                if (rv != KS_OK) {
                        ks_log_error(NULL, "cannot dial broker", "{s:s}", "url", urls[i]);
                        return rv; /* the dialers made are freed with r */
                }
                t->n_dialers++;
        }
        *out = r->n_targets++;
        return KS_OK;
}

/* ---- life ------------------------------------------------------------------------------ */

int ks_req_new(ks_req **out, struct event_base *base, int max_inflight, int default_timeout_ms,
               ks_req_complete_fn complete, void *arg)
{
        *out = NULL;
        if (max_inflight < 1 || max_inflight > KS_REQ_INFLIGHT_MAX || default_timeout_ms < 1) {
                return KS_INVALID_ARGUMENT;
        }
        ks_req *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                return KS_INTERNAL;
        }
        r->base = base;
        r->complete = complete;
        r->complete_arg = arg;
        r->default_timeout_ms = default_timeout_ms;
        r->n_slots = (uint32_t)max_inflight;
        r->free_head = NO_SLOT;
        if ((r->slots = calloc(r->n_slots, sizeof(*r->slots))) == NULL ||
            ks_sp_new(&r->sp, base, RECV_MAX_BYTES, SEND_MAX_BYTES) != KS_OK) {
                ks_req_free(r, NULL);
                return KS_INTERNAL;
        }
        for (uint32_t i = r->n_slots; i-- > 0;) {
                slot *s = &r->slots[i];
                s->r = r;
                if ((s->timer = evtimer_new(base, on_timer, s)) == NULL) {
                        ks_req_free(r, NULL);
                        return KS_INTERNAL;
                }
                s->next_free = r->free_head;
                r->free_head = i;
                r->n_free++;
        }
        *out = r;
        return KS_OK;
}

void ks_req_free(ks_req *r, const char *message)
{
        if (r == NULL) {
                return;
        }
        for (uint32_t i = 0; r->slots != NULL && i < r->n_slots; i++) {
                if (r->slots[i].call != NULL) {
                        finish_error(&r->slots[i], KS_UNAVAILABLE,
                                     message != NULL ? message : "stopping");
                }
        }
        ks_sp_free(r->sp); /* every broker connection, no callback */
        for (uint32_t i = 0; r->slots != NULL && i < r->n_slots; i++) {
                if (r->slots[i].timer != NULL) {
                        event_free(r->slots[i].timer);
                }
        }
        free(r->slots);
        free(r);
}
