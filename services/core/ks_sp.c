/* See ks_sp.h. */
#include "ks_sp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ks_assert.h"
#include "ks_log.h"

#define TCP_PREFIX   "tcp://"
#define IPC_PREFIX   "ipc://"
#define IPC_MESSAGE  0x01 /* nng's ipc frame type of a message, the only one it sends */
#define IPC_HOST     "local"
#define FRAME_TCP    8 /* a frame's head: the length */
#define FRAME_IPC    9 /* ... the type, then the length */
#define FRAME_MAX    FRAME_IPC
#define SUN_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)
#define READ_BYTES   16384 /* a read's room, as libevent's bufferevent reads */
#define SLOT_BITS    16
#define SLOT_MASK    ((1u << SLOT_BITS) - 1)
#define GEN_MASK     0x7fffu /* ids keep the high bit clear: req/rep backtraces need it so */

/* What a listener and a dialer share: the protocols, the callbacks, the added pipes. */
typedef struct endpoint {
        ks_sp *sp;
        uint16_t self, peer;
        ks_sp_callbacks cb;
        void *arg;
        ks_sp_pipe *first, *last;
        ks_sp_dialer *dialer; /* a dialer's; NULL for a listener's */
} endpoint;

struct ks_sp_pipe {
        ks_sp *sp;
        endpoint *ep;
        struct bufferevent *bev; /* connects and writes; the pipe reads itself (on_readable) */
        struct event *rev;       /* readable: persistent, never with a timeout */
        struct event *deadline;  /* the handshake's, until its 8 bytes are in */
        struct evbuffer *in;     /* read, not yet a whole message */
        struct evbuffer *out;    /* sent in this turn of the loop, for on_flush to write */
        ks_sp_pipe *flush_prev, *flush_next; /* in sp's flush list while out holds bytes */
        bool flush_queued;
        ks_sp_pipe *prev, *next; /* the listener's added pipes; next: the dead ones once closed */
        uint32_t id;
        uint32_t slot;
        bool added;   /* the handshake is done */
        bool closing; /* closed: no more reads, sends or callbacks */
        bool ipc;     /* over a unix socket: nng's ipc framing */
        void *user;
        char host[KS_SP_HOST_MAX];
        char peer[KS_SP_PEER_MAX];
};

/* One address a listener accepts on. */
typedef struct bound {
        ks_sp_listener *l;
        struct evconnlistener *ev;
        bool ipc;
        char path[SUN_PATH_MAX]; /* ipc: the socket's file, removed at free if still ours */
        dev_t dev;
        ino_t ino;
} bound;

struct ks_sp_listener {
        endpoint ep;
        bound addrs[KS_SP_ADDRS_MAX];
        int n_addrs;
        int port; /* the first tcp address's */
        ks_sp_listener *next_listener;
};

/* A parsed url: tcp's host and port, or ipc's path. */
typedef struct sp_addr {
        bool ipc;
        char host[256];
        char port[8];
        char path[SUN_PATH_MAX];
} sp_addr;

struct ks_sp_dialer {
        endpoint ep;
        sp_addr to;
        ks_sp_pipe *pipe; /* connecting or connected; NULL while waiting to redial */
        struct event *redial;
        int64_t backoff_ms;
        ks_sp_dialer *next_dialer;
};

struct ks_sp {
        struct event_base *base;
        size_t recv_max, send_max;
        int handshake_ms;
        ks_sp_pipe **slots; /* KS_SP_PIPES_MAX + 1; slot 0 unused (an id is never 0) */
        uint16_t *gens;
        uint32_t next_slot;
        uint32_t n_pipes;
        ks_sp_listener *listeners;
        ks_sp_dialer *dialers;
        struct evdns_base *dns; /* a dialer's host names; NULL: getaddrinfo */
        bool freeing;
        ks_sp_pipe *dead;    /* closed, to be freed by reap */
        struct event *reap;  /* frees the dead on the loop, after the callback that closed them */
        struct event *flush; /* writes the pipes of the flush list, after this turn's work */
        ks_sp_pipe *flush_first; /* pipes whose out holds bytes */
};

static void header_of(uint8_t out[KS_SP_HEADER_BYTES], uint16_t proto)
{
        out[0] = 0x00;
        out[1] = 'S';
        out[2] = 'P';
        out[3] = 0x00;
        out[4] = (uint8_t)(proto >> 8);
        out[5] = (uint8_t)proto;
        out[6] = 0;
        out[7] = 0;
}

/* ---- pipes ------------------------------------------------------------------------- */

static void peer_of(const struct sockaddr *sa, char *host, size_t host_len, char *peer,
                    size_t peer_len);
static void redial_later(ks_sp_dialer *d);

static void pipe_free(ks_sp_pipe *p)
{
        if (p->rev != NULL) {
                event_free(p->rev);
        }
        if (p->deadline != NULL) {
                event_free(p->deadline);
        }
        evbuffer_free(p->in);
        evbuffer_free(p->out);
        bufferevent_free(p->bev);
        free(p);
}

/*
 * Writing. What a turn of the loop sends to a pipe gathers in the pipe's
 * out; once the turn's callbacks have run, on_flush writes each pipe's
 * with one writev, and hands the bufferevent only what the socket did not
 * take (it writes that when the socket can take it). A message thus costs
 * no epoll_ctl to arm and disarm a write event, and the messages of one
 * turn (a broker forwarding a read's worth) share one system call.
 */
static void flush_unqueue(ks_sp_pipe *p)
{
        if (!p->flush_queued) {
                return;
        }
        if (p->flush_prev != NULL) {
                p->flush_prev->flush_next = p->flush_next;
        } else {
                p->sp->flush_first = p->flush_next;
        }
        if (p->flush_next != NULL) {
                p->flush_next->flush_prev = p->flush_prev;
        }
        p->flush_prev = p->flush_next = NULL;
        p->flush_queued = false;
}

static void flush_queue(ks_sp_pipe *p)
{
        ks_sp *sp = p->sp;
        if (p->flush_queued) {
                return;
        }
        if (sp->flush_first == NULL) {
                event_active(sp->flush, EV_TIMEOUT, 0); /* runs after the callbacks now ready */
        } else {
                sp->flush_first->flush_prev = p;
        }
        p->flush_next = sp->flush_first;
        p->flush_prev = NULL;
        sp->flush_first = p;
        p->flush_queued = true;
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_sp *sp = arg;
        ks_sp_pipe *p;
        while ((p = sp->flush_first) != NULL) {
                flush_unqueue(p);
                struct evbuffer *waiting = bufferevent_get_output(p->bev);
                if (evbuffer_get_length(waiting) == 0) {
                        /* An error leaves the bytes to the bufferevent, whose own write meets
                         * it and closes the pipe as for any other. */
                        (void)evbuffer_write(p->out, bufferevent_getfd(p->bev));
                }
                /* The rest, if any; when it cannot be kept, a cut frame would desynchronise
                 * the peer. */
                if (evbuffer_get_length(p->out) > 0 && evbuffer_add_buffer(waiting, p->out) != 0) {
                        ks_sp_close(p);
                }
        }
}

static void free_dead(ks_sp *sp)
{
        while (sp->dead != NULL) {
                ks_sp_pipe *p = sp->dead;
                sp->dead = p->next;
                pipe_free(p);
        }
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        free_dead(arg);
}

/* Takes the pipe out of everything; unless quiet, its removed callback runs. */
static void pipe_detach(ks_sp_pipe *p, bool quiet)
{
        ks_sp *sp = p->sp;
        endpoint *l = p->ep;
        if (p->closing) {
                return;
        }
        p->closing = true;
        flush_unqueue(p);
        bufferevent_disable(p->bev, EV_READ | EV_WRITE);
        if (p->rev != NULL) {
                event_del(p->rev);
        }
        if (p->deadline != NULL) {
                event_del(p->deadline);
        }
        if (p->added) {
                if (p->prev != NULL) {
                        p->prev->next = p->next;
                } else {
                        l->first = p->next;
                }
                if (p->next != NULL) {
                        p->next->prev = p->prev;
                } else {
                        l->last = p->prev;
                }
        }
        sp->slots[p->slot] = NULL;
        sp->n_pipes--;
        if (p->added && !quiet && l->cb.removed != NULL) {
                l->cb.removed(p, l->arg);
        }
        if (l->dialer != NULL && l->dialer->pipe == p) {
                l->dialer->pipe = NULL;
                if (!sp->freeing) {
                        redial_later(l->dialer);
                }
        }
}

void ks_sp_close(ks_sp_pipe *p)
{
        if (p->closing) {
                return;
        }
        pipe_detach(p, false);
        /* Freed on the loop: the caller may be inside this pipe's own read callback. */
        p->next = p->sp->dead;
        p->sp->dead = p;
        event_active(p->sp->reap, EV_TIMEOUT, 0);
}

static void handshake(ks_sp_pipe *p, struct evbuffer *in)
{
        endpoint *l = p->ep;
        uint8_t got[KS_SP_HEADER_BYTES], want[KS_SP_HEADER_BYTES];
        evbuffer_remove(in, got, sizeof(got));
        header_of(want, l->peer);
        if (memcmp(got, want, sizeof(got)) != 0) {
                ks_log_warn(NULL, "peer refused: not the SP protocol expected", "{s:s,s:i}", "peer",
                            p->peer, "expected", (int)l->peer);
                ks_sp_close(p);
                return;
        }
        event_del(p->deadline);
        p->added = true;
        p->prev = l->last;
        if (l->last != NULL) {
                l->last->next = p;
        } else {
                l->first = p;
        }
        l->last = p;
        if (l->dialer != NULL) {
                l->dialer->backoff_ms = KS_SP_REDIAL_MIN_MS;
        }
        if (l->cb.added != NULL) {
                l->cb.added(p, l->arg);
        }
}

/* The bytes before each message: FRAME_TCP, or over ipc FRAME_IPC. */
static size_t frame_bytes(const ks_sp_pipe *p)
{
        return p->ipc ? FRAME_IPC : FRAME_TCP;
}

/* The handshake, then every whole message in; what is left waits for more bytes. */
static void consume(ks_sp_pipe *p, struct evbuffer *in)
{
        if (!p->added) {
                if (evbuffer_get_length(in) < KS_SP_HEADER_BYTES) {
                        return;
                }
                handshake(p, in);
        }
        size_t head = frame_bytes(p);
        while (!p->closing) {
                uint8_t frame[FRAME_MAX];
                size_t have = evbuffer_get_length(in);
                if (have < head || evbuffer_copyout(in, frame, head) != (ev_ssize_t)head) {
                        return;
                }
                if (p->ipc && frame[0] != IPC_MESSAGE) { /* nng closes such a pipe too */
                        ks_log_warn(NULL, "peer closed: not a message frame", "{s:s,s:i}", "peer",
                                    p->peer, "type", (int)frame[0]);
                        ks_sp_close(p);
                        return;
                }
                uint64_t len = 0;
                for (size_t i = head - 8; i < head; i++) {
                        len = len << 8 | frame[i];
                }
                if (len > p->sp->recv_max) {
                        ks_log_warn(NULL, "peer closed: a message over the bound", "{s:s,s:I,s:I}",
                                    "peer", p->peer, "bytes", (json_int_t)len, "max",
                                    (json_int_t)p->sp->recv_max);
                        ks_sp_close(p);
                        return;
                }
                if (have - head < len) {
                        return;
                }
                uint8_t *all = evbuffer_pullup(in, (ev_ssize_t)(head + len));
                if (all == NULL) {
                        ks_sp_close(p);
                        return;
                }
                p->ep->cb.message(p, all + head, (size_t)len, p->ep->arg);
                if (!p->closing) {
                        evbuffer_drain(in, head + len);
                }
        }
}

/*
 * The socket is readable (or the handshake's deadline passed): one read
 * into the input. Read here, not by the bufferevent, whose every read asks
 * the kernel first how much there is (ioctl FIONREAD): a system call per
 * message on every hop.
 */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
        (void)what;
        ks_sp_pipe *p = arg;
        struct evbuffer *in = p->in;
        struct evbuffer_iovec v;
        if (evbuffer_reserve_space(in, READ_BYTES, &v, 1) < 1) {
                ks_sp_close(p);
                return;
        }
        ssize_t n = read(fd, v.iov_base, v.iov_len);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                return; /* the space reserved is not committed */
        }
        if (n <= 0) {
                ks_sp_close(p); /* the peer closed, or an error */
                return;
        }
        v.iov_len = (size_t)n;
        if (evbuffer_commit_space(in, &v, 1) != 0) {
                ks_sp_close(p);
                return;
        }
        consume(p, in);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_sp_close(arg); /* no handshake in time */
}

/*
 * Our 8 bytes, then reading, and the handshake's deadline: at once on an
 * accepted connection, on a dialled one once it is connected. The deadline
 * is a timer of its own, deleted at the handshake. (Not a timeout on the
 * read event: libevent keeps a persistent event's timeout through
 * event_del and an event_add without one, and re-arms it at every read, so
 * a pipe would be closed after any pause as long as the deadline.)
 */
static void hello(ks_sp_pipe *p)
{
        uint8_t h[KS_SP_HEADER_BYTES];
        header_of(h, p->ep->self);
        bufferevent_write(p->bev, h, sizeof(h));
        int ms = p->sp->handshake_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        p->rev =
            event_new(p->sp->base, bufferevent_getfd(p->bev), EV_READ | EV_PERSIST, on_readable, p);
        p->deadline = evtimer_new(p->sp->base, on_deadline, p);
        if (p->rev == NULL || p->deadline == NULL || event_add(p->rev, NULL) != 0 ||
            event_add(p->deadline, &tv) != 0) {
                ks_sp_close(p);
        }
}

/*
 * A TCP pipe's options: no Nagle delay (a message is a whole request or
 * reply), and a peer that vanished without closing (its host gone, a
 * partition) found within seconds, not the kernel's two hours of idle or
 * quarter hour of retransmissions: keepalive probes after
 * KS_SP_KEEPALIVE_IDLE_S of quiet, and written bytes unacknowledged for
 * KS_SP_USER_TIMEOUT_MS, close the pipe as an error would (its calls are
 * sent again on another broker). Best effort: a refused option leaves the
 * kernel's default.
 */
static void tcp_tune(evutil_socket_t fd)
{
        int one = 1, idle = KS_SP_KEEPALIVE_IDLE_S, intvl = KS_SP_KEEPALIVE_INTERVAL_S,
            cnt = KS_SP_KEEPALIVE_PROBES;
        unsigned user_timeout = KS_SP_USER_TIMEOUT_MS;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
        ks_sp_pipe *p = arg;
        if ((what & BEV_EVENT_CONNECTED) != 0) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof(ss);
                evutil_socket_t fd = bufferevent_getfd(bev);
                if (!p->ipc) { /* an ipc pipe's names are the path's (dial_now) */
                        tcp_tune(fd);
                        if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
                                peer_of((struct sockaddr *)&ss, p->host, sizeof(p->host), p->peer,
                                        sizeof(p->peer));
                        }
                }
                hello(p);
                return;
        }
        ks_sp_close(p); /* EOF, an error (a dead peer's timeout included), a failed connect */
}

static void peer_of(const struct sockaddr *sa, char *host, size_t host_len, char *peer,
                    size_t peer_len)
{
        char ip[INET6_ADDRSTRLEN] = "unknown";
        unsigned port = 0;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
                port = ntohs(in->sin_port);
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
                port = ntohs(in6->sin6_port);
        }
        snprintf(host, host_len, "%s", ip);
        snprintf(peer, peer_len, "%s:%u", ip, port);
}

/* An ipc pipe's host and peer: "local" and the socket's url (its path's end when long). */
static void ipc_names(ks_sp_pipe *p, const char *path)
{
        size_t n = strlen(path), room = sizeof(p->peer) - strlen(IPC_PREFIX) - 1;
        snprintf(p->host, sizeof(p->host), IPC_HOST);
        snprintf(p->peer, sizeof(p->peer), IPC_PREFIX "%.*s", (int)room,
                 n > room ? path + (n - room) : path);
}

/* A free slot, or 0 when every one is taken. */
static uint32_t slot_take(ks_sp *sp)
{
        for (uint32_t n = 0; n < KS_SP_PIPES_MAX; n++) {
                uint32_t s = sp->next_slot;
                sp->next_slot = sp->next_slot % KS_SP_PIPES_MAX + 1;
                if (sp->slots[s] == NULL) {
                        return s;
                }
        }
        return 0;
}

/* A pipe of ep over fd (-1: a socket the dialer connects later), or NULL (no slot, memory). */
static ks_sp_pipe *pipe_new(endpoint *ep, evutil_socket_t fd)
{
        ks_sp *sp = ep->sp;
        uint32_t slot = sp->n_pipes < KS_SP_PIPES_MAX ? slot_take(sp) : 0;
        ks_sp_pipe *p = slot != 0 ? calloc(1, sizeof(*p)) : NULL;
        struct evbuffer *in = p != NULL ? evbuffer_new() : NULL;
        struct evbuffer *out = in != NULL ? evbuffer_new() : NULL;
        struct bufferevent *bev =
            out != NULL ? bufferevent_socket_new(sp->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
        if (bev == NULL) {
                if (in != NULL) {
                        evbuffer_free(in);
                }
                if (out != NULL) {
                        evbuffer_free(out);
                }
                free(p);
                return NULL;
        }
        p->in = in;
        p->out = out;
        p->sp = sp;
        p->ep = ep;
        p->bev = bev;
        p->slot = slot;
        sp->gens[slot] = (uint16_t)((sp->gens[slot] + 1) & GEN_MASK);
        p->id = (uint32_t)sp->gens[slot] << SLOT_BITS | slot;
        sp->slots[slot] = p;
        sp->n_pipes++;
        bufferevent_setcb(bev, NULL, NULL, on_event, p);
        return p;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
        (void)ev;
        (void)salen;
        bound *b = arg;
        ks_sp_listener *l = b->l;
        ks_sp_pipe *p = pipe_new(&l->ep, fd);
        if (p == NULL) {
                evutil_closesocket(fd);
                ks_log_warn(NULL, "peer refused: too many pipes, or out of memory", "{s:i}",
                            "pipes", (int)l->ep.sp->n_pipes);
                return;
        }
        p->ipc = b->ipc;
        if (b->ipc) { /* a unix socket's peer has no address: the listener's path names it */
                ipc_names(p, b->path);
        } else {
                tcp_tune(fd);
                peer_of(sa, p->host, sizeof(p->host), p->peer, sizeof(p->peer));
        }
        bufferevent_enable(p->bev, EV_WRITE);
        hello(p);
}

ks_sp_pipe *ks_sp_pipe_find(const ks_sp *sp, uint32_t id)
{
        uint32_t slot = id & SLOT_MASK;
        if (slot == 0 || slot > KS_SP_PIPES_MAX) {
                return NULL;
        }
        ks_sp_pipe *p = sp->slots[slot];
        return p != NULL && p->id == id && p->added ? p : NULL;
}

uint32_t ks_sp_pipe_id(const ks_sp_pipe *p)
{
        return p->id;
}

const char *ks_sp_pipe_host(const ks_sp_pipe *p)
{
        return p->host;
}

const char *ks_sp_pipe_peer(const ks_sp_pipe *p)
{
        return p->peer;
}

void *ks_sp_pipe_user(const ks_sp_pipe *p)
{
        return p->user;
}

void ks_sp_pipe_set_user(ks_sp_pipe *p, void *user)
{
        p->user = user;
}

ks_sp_pipe *ks_sp_listener_first(const ks_sp_listener *l)
{
        return l->ep.first;
}

ks_sp_pipe *ks_sp_pipe_next(const ks_sp_pipe *p)
{
        return p->next;
}

size_t ks_sp_pending(const ks_sp_pipe *p)
{
        return evbuffer_get_length(p->out) + evbuffer_get_length(bufferevent_get_output(p->bev));
}

int ks_sp_send(ks_sp_pipe *p, const void *head, size_t head_len, const void *body, size_t body_len)
{
        if (p->closing || ks_sp_pending(p) > p->sp->send_max) {
                return -1;
        }
        uint64_t len = (uint64_t)head_len + body_len;
        uint8_t frame[FRAME_MAX];
        size_t frame_len = frame_bytes(p);
        frame[0] = IPC_MESSAGE; /* ipc's type; tcp's length overwrites it */
        for (size_t i = frame_len; i > frame_len - 8; i--) {
                frame[i - 1] = (uint8_t)len;
                len >>= 8;
        }
        if (evbuffer_add(p->out, frame, frame_len) != 0 ||
            (head_len > 0 && evbuffer_add(p->out, head, head_len) != 0) ||
            (body_len > 0 && evbuffer_add(p->out, body, body_len) != 0)) {
                ks_sp_close(p); /* a partial frame would desynchronise the peer */
                return -1;
        }
        flush_queue(p);
        return 0;
}

/* ---- addresses ----------------------------------------------------------------------- */

/* "tcp://host:port" ("[v6]" brackets dropped) into tcp's host and port. 0 or -1. */
static int parse_tcp(const char *hp, sp_addr *a)
{
        const char *colon = strrchr(hp, ':');
        if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= sizeof(a->port)) {
                return -1;
        }
        const char *h = hp;
        size_t hl = (size_t)(colon - hp);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1] */
                h++;
                hl -= 2;
        }
        if (hl >= sizeof(a->host)) {
                return -1;
        }
        memcpy(a->host, h, hl);
        a->host[hl] = '\0';
        snprintf(a->port, sizeof(a->port), "%s", colon + 1);
        for (const char *c = a->port; *c != '\0'; c++) {
                if (*c < '0' || *c > '9') {
                        return -1;
                }
        }
        return 0;
}

/* "tcp://host:port" or "ipc://path" (as nng: a path that fits a unix socket's address). */
static int parse_addr(const char *url, sp_addr *a)
{
        memset(a, 0, sizeof(*a));
        if (strncmp(url, IPC_PREFIX, strlen(IPC_PREFIX)) == 0) {
                const char *path = url + strlen(IPC_PREFIX);
                size_t n = strlen(path);
                if (n == 0 || n >= sizeof(a->path)) {
                        return -1;
                }
                a->ipc = true;
                memcpy(a->path, path, n + 1);
                return 0;
        }
        if (strncmp(url, TCP_PREFIX, strlen(TCP_PREFIX)) != 0) {
                return -1;
        }
        return parse_tcp(url + strlen(TCP_PREFIX), a);
}

static struct sockaddr_un unix_addr(const char *path)
{
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
        return sun;
}

/*
 * A unix socket bound at path. A file left there by a process that is gone
 * (nothing accepts on it) is replaced, as nng does; one that something
 * still accepts on is not. The socket, or -1 with *rc set.
 */
static evutil_socket_t bind_unix(const char *path, int *rc)
{
        struct sockaddr_un sun = unix_addr(path);
        evutil_socket_t fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                *rc = KS_INTERNAL;
                return -1;
        }
        if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
                return fd;
        }
        *rc = KS_UNAVAILABLE;
        if (errno == EADDRINUSE) {
                evutil_socket_t probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                bool stale = probe >= 0 &&
                             connect(probe, (struct sockaddr *)&sun, sizeof(sun)) != 0 &&
                             errno == ECONNREFUSED;
                if (probe >= 0) {
                        close(probe);
                }
                if (stale && unlink(path) == 0 &&
                    bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
                        return fd;
                }
        }
        close(fd);
        return -1;
}

/* ---- listeners ----------------------------------------------------------------------- */

/* One more address for l; KS_OK, KS_INVALID_ARGUMENT, KS_UNAVAILABLE, KS_INTERNAL. */
static int listen_at(ks_sp_listener *l, const char *url)
{
        sp_addr a;
        if (l->n_addrs == KS_SP_ADDRS_MAX || parse_addr(url, &a) != 0) {
                return KS_INVALID_ARGUMENT;
        }
        bound *b = &l->addrs[l->n_addrs];
        *b = (bound){.l = l, .ipc = a.ipc};
        /* Close-on-exec, as nng's sockets are: a child this process starts must not hold a
         * pipe open after the broker closed it (an ejected replica would never see it end). */
        unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
        if (a.ipc) {
                int rc = KS_OK;
                struct stat st;
                evutil_socket_t fd = bind_unix(a.path, &rc);
                if (fd < 0) {
                        return rc;
                }
                b->ev = evconnlistener_new(l->ep.sp->base, on_accept, b, flags, 1024, fd);
                if (b->ev == NULL) {
                        close(fd);
                        unlink(a.path);
                        return KS_INTERNAL;
                }
                memcpy(b->path, a.path, sizeof(b->path));
                if (stat(a.path, &st) == 0) {
                        b->dev = st.st_dev;
                        b->ino = st.st_ino;
                }
                l->n_addrs++;
                return KS_OK;
        }
        bool any = a.host[0] == '\0' || strcmp(a.host, "*") == 0;
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *ai = NULL;
        if (getaddrinfo(any ? NULL : a.host, a.port, &hints, &ai) != 0 || ai == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        b->ev = evconnlistener_new_bind(l->ep.sp->base, on_accept, b, flags | LEV_OPT_REUSEABLE,
                                        1024, ai->ai_addr, (int)ai->ai_addrlen);
        freeaddrinfo(ai);
        if (b->ev == NULL) {
                return KS_UNAVAILABLE;
        }
        struct sockaddr_storage ss;
        socklen_t ss_len = sizeof(ss);
        if (l->port == 0 &&
            getsockname(evconnlistener_get_fd(b->ev), (struct sockaddr *)&ss, &ss_len) == 0) {
                l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                         : ((struct sockaddr_in *)&ss)->sin_port);
        }
        l->n_addrs++;
        return KS_OK;
}

/* Stops accepting on b; an ipc socket's file goes, unless another socket took its place. */
static void unbind(bound *b)
{
        struct stat st;
        evconnlistener_free(b->ev);
        if (b->ipc && stat(b->path, &st) == 0 && st.st_dev == b->dev && st.st_ino == b->ino) {
                unlink(b->path);
        }
}

int ks_sp_listen(ks_sp *sp, const char *url, uint16_t self, uint16_t peer,
                 const ks_sp_callbacks *cb, void *arg, ks_sp_listener **out)
{
        *out = NULL;
        ks_sp_listener *l = calloc(1, sizeof(*l));
        if (l == NULL) {
                return KS_INTERNAL;
        }
        l->ep = (endpoint){.sp = sp, .self = self, .peer = peer, .cb = *cb, .arg = arg};
        int rc = listen_at(l, url);
        if (rc != KS_OK) {
                free(l);
                return rc;
        }
        l->next_listener = sp->listeners;
        sp->listeners = l;
        *out = l;
        return KS_OK;
}

int ks_sp_listen_also(ks_sp_listener *l, const char *url)
{
        return listen_at(l, url);
}

int ks_sp_listener_port(const ks_sp_listener *l)
{
        return l->port;
}

/* ---- dialers ----------------------------------------------------------------------------- */

/* Connects p's socket fd (taken) to sa: on failure p is closed and its dialer tries later. */
static void dial_connect(ks_sp_pipe *p, evutil_socket_t fd, const struct sockaddr *sa,
                         socklen_t sa_len)
{
        if (fd < 0 || bufferevent_setfd(p->bev, fd) != 0) {
                if (fd >= 0) {
                        evutil_closesocket(fd);
                }
                ks_sp_close(p);
                return;
        }
        bufferevent_enable(p->bev, EV_WRITE); /* reads start once connected (hello) */
        if (bufferevent_socket_connect(p->bev, sa, (int)sa_len) != 0) {
                ks_sp_close(p);
        }
}

static void dial_resolved(int err, struct evutil_addrinfo *ai, void *arg)
{
        ks_sp_dialer *d = arg;
        if (err == EVUTIL_EAI_CANCEL) {
                return; /* ks_sp_free is freeing d */
        }
        if (err != 0 || ai == NULL) {
                if (ai != NULL) {
                        evutil_freeaddrinfo(ai);
                }
                ks_sp_close(d->pipe); /* then the dialer tries again later */
                return;
        }
        evutil_socket_t fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        dial_connect(d->pipe, fd, ai->ai_addr, (socklen_t)ai->ai_addrlen);
        evutil_freeaddrinfo(ai);
}

static void dial_now(ks_sp_dialer *d)
{
        ks_sp_pipe *p = pipe_new(&d->ep, -1);
        if (p == NULL) {
                redial_later(d);
                return;
        }
        d->pipe = p;
        if (d->to.ipc) {
                p->ipc = true;
                ipc_names(p, d->to.path);
                struct sockaddr_un sun = unix_addr(d->to.path);
                dial_connect(p, socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                             (struct sockaddr *)&sun, sizeof(sun));
                return;
        }
        snprintf(p->host, sizeof(p->host), "%.*s", KS_SP_HOST_MAX - 1, d->to.host);
        snprintf(p->peer, sizeof(p->peer), "%.*s:%s", KS_SP_HOST_MAX - 1, d->to.host, d->to.port);
        struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                        .ai_socktype = SOCK_STREAM,
                                        .ai_flags = EVUTIL_AI_NUMERICSERV | EVUTIL_AI_ADDRCONFIG};
        if (d->ep.sp->dns != NULL) {
                evdns_getaddrinfo(d->ep.sp->dns, d->to.host, d->to.port, &hints, dial_resolved, d);
                return;
        }
        struct evutil_addrinfo *ai = NULL;
        int err = evutil_getaddrinfo(d->to.host, d->to.port, &hints, &ai);
        dial_resolved(err, ai, d);
}

static void on_redial(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        dial_now(arg);
}

/* The next try after the current backoff, which doubles up to KS_SP_REDIAL_MAX_MS. */
static void redial_later(ks_sp_dialer *d)
{
        struct timeval tv = {(time_t)(d->backoff_ms / 1000),
                             (suseconds_t)(d->backoff_ms % 1000) * 1000};
        evtimer_add(d->redial, &tv);
        d->backoff_ms =
            d->backoff_ms * 2 > KS_SP_REDIAL_MAX_MS ? KS_SP_REDIAL_MAX_MS : d->backoff_ms * 2;
}

int ks_sp_dial(ks_sp *sp, const char *url, uint16_t self, uint16_t peer, const ks_sp_callbacks *cb,
               void *arg, ks_sp_dialer **out)
{
        *out = NULL;
        ks_sp_dialer *d = calloc(1, sizeof(*d));
        if (d == NULL) {
                return KS_INTERNAL;
        }
        if (parse_addr(url, &d->to) != 0 ||
            (!d->to.ipc && (d->to.host[0] == '\0' || strcmp(d->to.host, "*") == 0 ||
                            strcmp(d->to.port, "0") == 0))) {
                free(d);
                return KS_INVALID_ARGUMENT;
        }
        if ((d->redial = evtimer_new(sp->base, on_redial, d)) == NULL) {
                free(d);
                return KS_INTERNAL;
        }
        d->ep =
            (endpoint){.sp = sp, .self = self, .peer = peer, .cb = *cb, .arg = arg, .dialer = d};
        d->backoff_ms = KS_SP_REDIAL_MIN_MS;
        d->next_dialer = sp->dialers;
        sp->dialers = d;
        dial_now(d);
        *out = d;
        return KS_OK;
}

ks_sp_pipe *ks_sp_dialer_pipe(const ks_sp_dialer *d)
{
        /* a pipe closing is gone already, also inside its own removed callback */
        return d->pipe != NULL && d->pipe->added && !d->pipe->closing ? d->pipe : NULL;
}

/* ---- life ------------------------------------------------------------------------------ */

int ks_sp_new(ks_sp **out, struct event_base *base, size_t recv_max, size_t send_max)
{
        *out = NULL;
        ks_sp *sp = calloc(1, sizeof(*sp));
        if (sp == NULL) {
                return KS_INTERNAL;
        }
        sp->slots = calloc(KS_SP_PIPES_MAX + 1, sizeof(*sp->slots));
        sp->gens = calloc(KS_SP_PIPES_MAX + 1, sizeof(*sp->gens));
        if (sp->slots == NULL || sp->gens == NULL) {
                ks_sp_free(sp);
                return KS_INTERNAL;
        }
        sp->base = base;
        if ((sp->reap = event_new(base, -1, 0, on_reap, sp)) == NULL ||
            (sp->flush = event_new(base, -1, 0, on_flush, sp)) == NULL) {
                ks_sp_free(sp);
                return KS_INTERNAL;
        }
        sp->recv_max = recv_max;
        sp->send_max = send_max;
        sp->handshake_ms = KS_SP_HANDSHAKE_MS;
        sp->next_slot = 1;
        sp->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS); /* NULL: getaddrinfo */
        *out = sp;
        return KS_OK;
}

void ks_sp_set_handshake_ms(ks_sp *sp, int ms)
{
        KS_ASSERT(ms > 0);
        sp->handshake_ms = ms;
}

void ks_sp_free(ks_sp *sp)
{
        if (sp == NULL) {
                return;
        }
        sp->freeing = true;
        for (uint32_t s = 1; sp->slots != NULL && s <= KS_SP_PIPES_MAX; s++) {
                ks_sp_pipe *p = sp->slots[s];
                if (p != NULL) {
                        pipe_detach(p, true);
                        pipe_free(p);
                }
        }
        while (sp->dialers != NULL) {
                ks_sp_dialer *d = sp->dialers;
                sp->dialers = d->next_dialer;
                event_free(d->redial);
                free(d);
        }
        if (sp->dns != NULL) {
                evdns_base_free(sp->dns, 1); /* fails what is being looked up (EAI_CANCEL) */
        }
        while (sp->listeners != NULL) {
                ks_sp_listener *l = sp->listeners;
                sp->listeners = l->next_listener;
                for (int i = 0; i < l->n_addrs; i++) {
                        unbind(&l->addrs[i]);
                }
                free(l);
        }
        free_dead(sp);
        if (sp->reap != NULL) {
                event_free(sp->reap);
        }
        if (sp->flush != NULL) {
                event_free(sp->flush);
        }
        free(sp->slots);
        free(sp->gens);
        free(sp);
}

size_t ks_sp_backtrace(const uint8_t *msg, size_t len)
{
        for (size_t at = 0; at + 4 <= len && at < KS_SP_HOPS_MAX * 4; at += 4) {
                uint32_t w = (uint32_t)msg[at] << 24 | (uint32_t)msg[at + 1] << 16 |
                             (uint32_t)msg[at + 2] << 8 | msg[at + 3];
                if ((w & KS_SP_ID_BIT) != 0) {
                        return at + 4;
                }
        }
        return 0;
}
