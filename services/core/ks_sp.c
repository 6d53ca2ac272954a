/* See ks_sp.h. */
#include "ks_sp.h"

#include <arpa/inet.h>
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

#include "ks_log.h"

#define TCP_PREFIX "tcp://"
#define SLOT_BITS  16
#define SLOT_MASK  ((1u << SLOT_BITS) - 1)
#define GEN_MASK   0x7fffu /* ids keep the high bit clear: req/rep backtraces need it so */

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
        struct bufferevent *bev;
        ks_sp_pipe *prev, *next; /* the listener's added pipes; next: the dead ones once closed */
        uint32_t id;
        uint32_t slot;
        bool added;   /* the handshake is done */
        bool closing; /* closed: no more reads, sends or callbacks */
        void *user;
        char host[KS_SP_HOST_MAX];
        char peer[KS_SP_PEER_MAX];
};

struct ks_sp_listener {
        endpoint ep;
        struct evconnlistener *ev;
        int port;
        ks_sp_listener *next_listener;
};

struct ks_sp_dialer {
        endpoint ep;
        char host[256];
        char port[8];
        ks_sp_pipe *pipe; /* connecting or connected; NULL while waiting to redial */
        struct event *redial;
        int64_t backoff_ms;
        ks_sp_dialer *next_dialer;
};

struct ks_sp {
        struct event_base *base;
        size_t recv_max, send_max;
        ks_sp_pipe **slots; /* KS_SP_PIPES_MAX + 1; slot 0 unused (an id is never 0) */
        uint16_t *gens;
        uint32_t next_slot;
        uint32_t n_pipes;
        ks_sp_listener *listeners;
        ks_sp_dialer *dialers;
        struct evdns_base *dns; /* a dialer's host names; NULL: getaddrinfo */
        bool freeing;
        ks_sp_pipe *dead;   /* closed, to be freed by reap */
        struct event *reap; /* frees the dead on the loop, after the callback that closed them */
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

static void free_dead(ks_sp *sp)
{
        while (sp->dead != NULL) {
                ks_sp_pipe *p = sp->dead;
                sp->dead = p->next;
                bufferevent_free(p->bev);
                free(p);
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
        bufferevent_disable(p->bev, EV_READ | EV_WRITE);
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
        bufferevent_set_timeouts(p->bev, NULL, NULL);
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

static void on_read(struct bufferevent *bev, void *arg)
{
        ks_sp_pipe *p = arg;
        struct evbuffer *in = bufferevent_get_input(bev);
        if (!p->added) {
                if (evbuffer_get_length(in) < KS_SP_HEADER_BYTES) {
                        return;
                }
                handshake(p, in);
        }
        while (!p->closing) {
                uint8_t len_be[8];
                size_t have = evbuffer_get_length(in);
                if (have < sizeof(len_be) || evbuffer_copyout(in, len_be, sizeof(len_be)) != 8) {
                        return;
                }
                uint64_t len = 0;
                for (int i = 0; i < 8; i++) {
                        len = len << 8 | len_be[i];
                }
                if (len > p->sp->recv_max) {
                        ks_log_warn(NULL, "peer closed: a message over the bound", "{s:s,s:I,s:I}",
                                    "peer", p->peer, "bytes", (json_int_t)len, "max",
                                    (json_int_t)p->sp->recv_max);
                        ks_sp_close(p);
                        return;
                }
                if (have - sizeof(len_be) < len) {
                        return;
                }
                uint8_t *all = evbuffer_pullup(in, (ev_ssize_t)(sizeof(len_be) + len));
                if (all == NULL) {
                        ks_sp_close(p);
                        return;
                }
                p->ep->cb.message(p, all + sizeof(len_be), (size_t)len, p->ep->arg);
                if (!p->closing) {
                        evbuffer_drain(in, sizeof(len_be) + len);
                }
        }
}

/* Our 8 bytes, and the handshake's deadline: at once on an accepted connection, on a
 * dialled one once it is connected. */
static void hello(ks_sp_pipe *p)
{
        uint8_t h[KS_SP_HEADER_BYTES];
        header_of(h, p->ep->self);
        bufferevent_write(p->bev, h, sizeof(h));
        struct timeval tv = {KS_SP_HANDSHAKE_MS / 1000, (KS_SP_HANDSHAKE_MS % 1000) * 1000};
        bufferevent_set_timeouts(p->bev, &tv, NULL);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
        ks_sp_pipe *p = arg;
        if ((what & BEV_EVENT_CONNECTED) != 0) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof(ss);
                evutil_socket_t fd = bufferevent_getfd(bev);
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
                        peer_of((struct sockaddr *)&ss, p->host, sizeof(p->host), p->peer,
                                sizeof(p->peer));
                }
                hello(p);
                return;
        }
        ks_sp_close(p); /* EOF, an error, a failed connect, or the handshake's timeout */
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
        struct bufferevent *bev =
            p != NULL ? bufferevent_socket_new(sp->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
        if (bev == NULL) {
                free(p);
                return NULL;
        }
        p->sp = sp;
        p->ep = ep;
        p->bev = bev;
        p->slot = slot;
        sp->gens[slot] = (uint16_t)((sp->gens[slot] + 1) & GEN_MASK);
        p->id = (uint32_t)sp->gens[slot] << SLOT_BITS | slot;
        sp->slots[slot] = p;
        sp->n_pipes++;
        bufferevent_setcb(bev, on_read, NULL, on_event, p);
        return p;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
        (void)ev;
        (void)salen;
        ks_sp_listener *l = arg;
        ks_sp_pipe *p = pipe_new(&l->ep, fd);
        if (p == NULL) {
                evutil_closesocket(fd);
                ks_log_warn(NULL, "peer refused: too many pipes, or out of memory", "{s:i}",
                            "pipes", (int)l->ep.sp->n_pipes);
                return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        peer_of(sa, p->host, sizeof(p->host), p->peer, sizeof(p->peer));
        hello(p);
        bufferevent_enable(p->bev, EV_READ | EV_WRITE);
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
        return evbuffer_get_length(bufferevent_get_output(p->bev));
}

int ks_sp_send(ks_sp_pipe *p, const void *head, size_t head_len, const void *body, size_t body_len)
{
        if (p->closing || ks_sp_pending(p) > p->sp->send_max) {
                return -1;
        }
        uint64_t len = (uint64_t)head_len + body_len;
        uint8_t len_be[8];
        for (int i = 7; i >= 0; i--) {
                len_be[i] = (uint8_t)len;
                len >>= 8;
        }
        struct evbuffer *out = bufferevent_get_output(p->bev);
        if (evbuffer_add(out, len_be, sizeof(len_be)) != 0 ||
            (head_len > 0 && evbuffer_add(out, head, head_len) != 0) ||
            (body_len > 0 && evbuffer_add(out, body, body_len) != 0)) {
                ks_sp_close(p); /* a partial frame would desynchronise the peer */
                return -1;
        }
        return 0;
}

/* ---- listeners ----------------------------------------------------------------------- */

/* "tcp://host:port" into host (NULL: any) and port. 0 or -1. */
static int parse_url(const char *url, char *host, size_t host_len, char *port, size_t port_len)
{
        size_t plen = strlen(TCP_PREFIX);
        if (strncmp(url, TCP_PREFIX, plen) != 0) {
                return -1;
        }
        const char *hp = url + plen;
        const char *colon = strrchr(hp, ':');
        if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= port_len) {
                return -1;
        }
        const char *h = hp;
        size_t hl = (size_t)(colon - hp);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1] */
                h++;
                hl -= 2;
        }
        if (hl >= host_len) {
                return -1;
        }
        memcpy(host, h, hl);
        host[hl] = '\0';
        snprintf(port, port_len, "%s", colon + 1);
        for (const char *c = port; *c != '\0'; c++) {
                if (*c < '0' || *c > '9') {
                        return -1;
                }
        }
        return 0;
}

int ks_sp_listen(ks_sp *sp, const char *url, uint16_t self, uint16_t peer,
                 const ks_sp_callbacks *cb, void *arg, ks_sp_listener **out)
{
        char host[256], port[8];
        *out = NULL;
        if (parse_url(url, host, sizeof(host), port, sizeof(port)) != 0) {
                return KS_INVALID_ARGUMENT;
        }
        bool any = host[0] == '\0' || strcmp(host, "*") == 0;
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *ai = NULL;
        if (getaddrinfo(any ? NULL : host, port, &hints, &ai) != 0 || ai == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        ks_sp_listener *l = calloc(1, sizeof(*l));
        if (l == NULL) {
                freeaddrinfo(ai);
                return KS_INTERNAL;
        }
        l->ep = (endpoint){.sp = sp, .self = self, .peer = peer, .cb = *cb, .arg = arg};
        /* Close-on-exec, as nng's sockets are: a child this process starts must not hold a
         * pipe open after the broker closed it (an ejected replica would never see it end). */
        l->ev = evconnlistener_new_bind(sp->base, on_accept, l,
                                        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                                            LEV_OPT_REUSEABLE,
                                        1024, ai->ai_addr, (int)ai->ai_addrlen);
        freeaddrinfo(ai);
        if (l->ev == NULL) {
                free(l);
                return KS_UNAVAILABLE;
        }
        struct sockaddr_storage ss;
        socklen_t ss_len = sizeof(ss);
        if (getsockname(evconnlistener_get_fd(l->ev), (struct sockaddr *)&ss, &ss_len) == 0) {
                l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                         : ((struct sockaddr_in *)&ss)->sin_port);
        }
        l->next_listener = sp->listeners;
        sp->listeners = l;
        *out = l;
        return KS_OK;
}

int ks_sp_listener_port(const ks_sp_listener *l)
{
        return l->port;
}

/* ---- dialers ----------------------------------------------------------------------------- */

static void dial_resolved(int err, struct evutil_addrinfo *ai, void *arg)
{
        ks_sp_dialer *d = arg;
        if (err == EVUTIL_EAI_CANCEL) {
                return; /* ks_sp_free is freeing d */
        }
        ks_sp_pipe *p = d->pipe;
        evutil_socket_t fd = -1;
        if (err != 0 || ai == NULL ||
            (fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
            bufferevent_setfd(p->bev, fd) != 0) {
                if (fd >= 0) {
                        evutil_closesocket(fd);
                }
                if (ai != NULL) {
                        evutil_freeaddrinfo(ai);
                }
                ks_sp_close(p); /* then the dialer tries again later */
                return;
        }
        bufferevent_enable(p->bev, EV_READ | EV_WRITE);
        int rc = bufferevent_socket_connect(p->bev, ai->ai_addr, (int)ai->ai_addrlen);
        evutil_freeaddrinfo(ai);
        if (rc != 0) {
                ks_sp_close(p);
        }
}

static void dial_now(ks_sp_dialer *d)
{
        ks_sp_pipe *p = pipe_new(&d->ep, -1);
        if (p == NULL) {
                redial_later(d);
                return;
        }
        d->pipe = p;
        snprintf(p->host, sizeof(p->host), "%.*s", KS_SP_HOST_MAX - 1, d->host);
        snprintf(p->peer, sizeof(p->peer), "%.*s:%s", KS_SP_HOST_MAX - 1, d->host, d->port);
        struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                        .ai_socktype = SOCK_STREAM,
                                        .ai_flags = EVUTIL_AI_NUMERICSERV | EVUTIL_AI_ADDRCONFIG};
        if (d->ep.sp->dns != NULL) {
                evdns_getaddrinfo(d->ep.sp->dns, d->host, d->port, &hints, dial_resolved, d);
                return;
        }
        struct evutil_addrinfo *ai = NULL;
        int err = evutil_getaddrinfo(d->host, d->port, &hints, &ai);
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
        if (parse_url(url, d->host, sizeof(d->host), d->port, sizeof(d->port)) != 0 ||
            d->host[0] == '\0' || strcmp(d->host, "*") == 0 || strcmp(d->port, "0") == 0) {
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
        if ((sp->reap = event_new(base, -1, 0, on_reap, sp)) == NULL) {
                ks_sp_free(sp);
                return KS_INTERNAL;
        }
        sp->recv_max = recv_max;
        sp->send_max = send_max;
        sp->next_slot = 1;
        sp->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS); /* NULL: getaddrinfo */
        *out = sp;
        return KS_OK;
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
                        bufferevent_free(p->bev);
                        free(p);
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
                evconnlistener_free(l->ev);
                free(l);
        }
        free_dead(sp);
        if (sp->reap != NULL) {
                event_free(sp->reap);
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
