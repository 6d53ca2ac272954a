/*
 * ks_sp: nng's wire protocol (SP over TCP, the
 * nanomsg RFC sp-tcp-mapping-01 that nng speaks, and over unix sockets as
 * nng's ipc transport) on a libevent loop, so a process can serve nng
 * peers from one thread with no hand-off per message. keelson-broker is built on it (ks_broker.h):
 * its peers are the services' and the gateway's nng sockets, which cannot tell it from nng.
 *
 * On the wire. Each side of a new connection sends 8 bytes: 0x00 'S' 'P'
 * 0x00, its protocol number (16 bits, big-endian) and 16 zero bits; a peer
 * whose protocol is not the one expected is closed. Then messages, each a
 * 64-bit big-endian length and that many bytes; over ipc:// each length is
 * preceded by a byte 0x01 (nng's type of a message frame; any other closes
 * the pipe, as in nng). A protocol's own header
 * (req/rep's backtrace and request id) is the message's first bytes: ks_sp
 * leaves it to the caller.
 *
 * Pipes. Every connection that completed its handshake is a pipe with an
 * id (31 bits, never 0, not reused while it lives) that ks_sp_pipe_find
 * turns back into the pipe: what a req/rep backtrace carries. At most
 * KS_SP_PIPES_MAX at once; more are closed at accept. A message over the
 * receive bound closes its pipe; a send over a pipe's send bound (its peer
 * does not read) is refused and the message dropped, as nng drops what a
 * full queue cannot take.
 *
 * One loop, one thread: every call and callback on the loop's thread. A
 * callback may close any pipe, its own included (ks_sp_close); the memory
 * goes later, on the loop.
 */
#ifndef KS_SP_H
#define KS_SP_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

/* Protocol numbers (nng's NNI_PROTO(major, minor) = major * 16 + minor). */
#define KS_SP_PUB0 0x20
#define KS_SP_SUB0 0x21
#define KS_SP_REQ0 0x30
#define KS_SP_REP0 0x31

#define KS_SP_PIPES_MAX     65535 /* connections at once, over every listener of a ks_sp */
#define KS_SP_HANDSHAKE_MS  10000 /* a peer that has not sent its 8 bytes by then is closed */
#define KS_SP_HEADER_BYTES  8
#define KS_SP_ADDRS_MAX     2 /* addresses one listener accepts on (a tcp:// and an ipc://) */
#define KS_SP_HOST_MAX      64
#define KS_SP_PEER_MAX      (KS_SP_HOST_MAX + 8)
#define KS_SP_REDIAL_MIN_MS 100  /* a dialer's first wait after a lost or failed pipe */
#define KS_SP_REDIAL_MAX_MS 5000 /* ... doubling up to this */
#define KS_SP_HOPS_MAX      8    /* req/rep: backtrace words a message may carry (nng's TTL) */
#define KS_SP_ID_BIT        0x80000000u /* req/rep: marks the request id, the backtrace's end */

/* A TCP pipe whose peer vanished without closing: probed after this much quiet, every
 * interval, and closed after this many probes unanswered (16 s in all); closed as well when
 * bytes it wrote stay unacknowledged for KS_SP_USER_TIMEOUT_MS. */
#define KS_SP_KEEPALIVE_IDLE_S     10
#define KS_SP_KEEPALIVE_INTERVAL_S 2
#define KS_SP_KEEPALIVE_PROBES     3
#define KS_SP_USER_TIMEOUT_MS      20000

typedef struct ks_sp ks_sp;
typedef struct ks_sp_listener ks_sp_listener;
typedef struct ks_sp_dialer ks_sp_dialer;
typedef struct ks_sp_pipe ks_sp_pipe;

typedef struct ks_sp_callbacks {
        /* A pipe completed its handshake. */
        void (*added)(ks_sp_pipe *p, void *arg);
        /* A whole message: msg is valid during the call only. */
        void (*message)(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg);
        /* A pipe that was added is gone (its peer closed, an error, ks_sp_close). */
        void (*removed)(ks_sp_pipe *p, void *arg);
} ks_sp_callbacks;

/*
 * Pipes on base: each message at most recv_max bytes, each pipe's unsent
 * output at most send_max. KS_OK, KS_INTERNAL.
 */
int ks_sp_new(ks_sp **out, struct event_base *base, size_t recv_max, size_t send_max) KS_MUST_CHECK;
/* The handshake's deadline of the connections made from now on, in ms (> 0):
 * KS_SP_HANDSHAKE_MS unless set (tests shorten it). */
void ks_sp_set_handshake_ms(ks_sp *sp, int ms);
/* Closes every listener and pipe (no callback runs) and frees. Accepts NULL. */
void ks_sp_free(ks_sp *sp);

/*
 * Listens on url ("tcp://host:port"; host "*" or empty: every address;
 * port 0: any free one. Or "ipc:///path/of/a/unix/socket": a file left
 * there by a process that is gone is replaced, one that something accepts
 * on is not; the file goes with ks_sp_free) for peers speaking peer,
 * answering as self. KS_OK, KS_INVALID_ARGUMENT (a malformed url),
 * KS_UNAVAILABLE (cannot listen).
 */
int ks_sp_listen(ks_sp *sp, const char *url, uint16_t self, uint16_t peer,
                 const ks_sp_callbacks *cb, void *arg, ks_sp_listener **out) KS_MUST_CHECK;
/*
 * One more address for l (at most KS_SP_ADDRS_MAX in all): its pipes join
 * l's, under the same protocols and callbacks. Returns as ks_sp_listen.
 */
int ks_sp_listen_also(ks_sp_listener *l, const char *url) KS_MUST_CHECK;
/* The port of l's first tcp:// address; 0 when it has none. */
int ks_sp_listener_port(const ks_sp_listener *l);
/* The listener's added pipes, oldest first; NULL after the last. */
ks_sp_pipe *ks_sp_listener_first(const ks_sp_listener *l);
ks_sp_pipe *ks_sp_pipe_next(const ks_sp_pipe *p);

/*
 * Dials url ("tcp://host:port", a name or an address; or "ipc:///path")
 * speaking self to a
 * peer of peer, and keeps one pipe to it: a pipe lost, or a connection
 * that fails, is dialled again after KS_SP_REDIAL_MIN_MS, doubling up to
 * KS_SP_REDIAL_MAX_MS (back to the least once a handshake completes). Its
 * pipe comes and goes through cb as a listener's. KS_OK,
 * KS_INVALID_ARGUMENT (a malformed url), KS_INTERNAL. Freed with sp.
 */
int ks_sp_dial(ks_sp *sp, const char *url, uint16_t self, uint16_t peer, const ks_sp_callbacks *cb,
               void *arg, ks_sp_dialer **out) KS_MUST_CHECK;
/* The dialer's pipe, once its handshake is done; else NULL. */
ks_sp_pipe *ks_sp_dialer_pipe(const ks_sp_dialer *d);

/* The pipe of id, or NULL when there is none (closed, or never was). */
ks_sp_pipe *ks_sp_pipe_find(const ks_sp *sp, uint32_t id);
uint32_t ks_sp_pipe_id(const ks_sp_pipe *p);
/* The peer's address: "127.0.0.1", and "127.0.0.1:41234"; over ipc://,
 * "local" and the socket's url. */
const char *ks_sp_pipe_host(const ks_sp_pipe *p);
const char *ks_sp_pipe_peer(const ks_sp_pipe *p);
/* What the caller keeps with a pipe (NULL at first). */
void *ks_sp_pipe_user(const ks_sp_pipe *p);
void ks_sp_pipe_set_user(ks_sp_pipe *p, void *user);

/*
 * One message, head then body (either may be empty), framed. 0, or -1 when
 * the pipe's output is over its bound or the pipe is closing (nothing sent).
 */
int ks_sp_send(ks_sp_pipe *p, const void *head, size_t head_len, const void *body, size_t body_len);
/* Bytes written to the pipe that its peer has not taken yet. */
size_t ks_sp_pending(const ks_sp_pipe *p);
/* Closes the pipe: its removed callback runs now, its memory goes later. */
void ks_sp_close(ks_sp_pipe *p);

/*
 * req/rep: the length of msg's backtrace, 32-bit big-endian words up to and
 * including the first with KS_SP_ID_BIT (the request id); 0 when none is
 * among its first KS_SP_HOPS_MAX words (nng's rep drops such a message).
 */
size_t ks_sp_backtrace(const uint8_t *msg, size_t len);

#endif
