/*
 * What front.c and h2.c share, and no other file sees: a connection, a
 * request, the front, and the few helpers of front.c that h2.c calls.
 */
#ifndef GW_FRONT_INTERNAL_H
#define GW_FRONT_INTERNAL_H

#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "clientip.h"
#include "front.h"
#include "http1.h"
#include "ks_hmap.h"
#include "ks_metrics.h"

#define STATUS_KINDS      7
#define OUTPUT_HIGH_BYTES 262144 /* replies not yet read: no next request past this */

typedef struct gw_h2 gw_h2;               /* h2.c: a connection's HTTP/2 session */
typedef struct gw_h2_stream gw_h2_stream; /* h2.c: one stream of it */

typedef enum conn_state {
        C_HEAD,
        C_BODY,
        C_CHUNK_LINE,
        C_CHUNK_DATA,
        C_CHUNK_CRLF,
        C_TRAILER,
        C_WAITING,
        C_CLOSING,
} conn_state;

typedef struct conn conn;

struct gw_req {
        conn *c;
        int32_t stream_id; /* HTTP/2: the request's stream; 0 on HTTP/1.1 */
        char *head;        /* a copy of the head; every string below points into it */
        gw_h1_head h;
        const char *path;
        bool is_head; /* HEAD: the reply has no body */
        struct evbuffer *body;
        struct evbuffer *out;      /* reply fields, "Name: value\r\n" each */
        struct evbuffer *trailers; /* HTTP/2: trailer fields, the same way; NULL if none */
        void (*cancel)(void *arg);
        void *cancel_arg;
        gw_h2_stream *h2; /* HTTP/2: what h2.c keeps of the stream; NULL on HTTP/1.1 */
        bool h1_open;     /* HTTP/1.1: a streamed reply's head is written (chunks follow) */
        bool h1_close;    /* HTTP/1.1: the connection closes after the streamed reply */
};

struct conn {
        gw_front *f;
        struct bufferevent *bev;
        struct event *timer;
        LIST_ENTRY(conn) link;
        conn_state state;
        bool started;    /* a byte of the current request has come */
        bool processing; /* inside process(): replies do not re-enter it */
        bool keep_alive;
        char *hb; /* head bytes so far (head_max + 1 at most) */
        size_t hb_len;
        size_t scanned;      /* hb bytes already looked at for line ends */
        uint64_t remaining;  /* body bytes still to come (BODY, CHUNK_DATA) */
        uint64_t body_bytes; /* decoded body so far (chunked) */
        size_t trailer_bytes;
        gw_req *req;
        uint32_t ip_slot; /* KS_HMAP_NONE: not counted per address */
        uint64_t served;  /* requests read so far (HTTP/1.1) */
        gw_h2 *h2;        /* an HTTP/2 connection: its session (h2.c); NULL on HTTP/1.1 */
        bool tls;         /* over TLS (its bufferevent is OpenSSL's) */
        char peer[GW_IP_MAX];
};

typedef struct ip_entry {
        uint8_t addr[16];
        uint32_t count;
} ip_entry;

struct gw_front {
        struct event_base *base;
        struct evconnlistener *listener;
        struct event *resume_ev;
        gw_front_limits lim;
        gw_front_fn fn;
        gw_front_stream_fn wants_stream; /* NULL: no request is taken as a stream */
        void *stream_arg;
        void *arg;
        int port;
        bool draining;
        bool paused;
        int64_t nconns;
        LIST_HEAD(, conn) conns;
        ks_hmap by_ip; /* peer address -> its entry in ips */
        ip_entry *ips;
        uint32_t *free_ips;
        uint32_t n_free_ips;
        ks_gauge *open_gauge;
        ks_counter *refused_limit;
        ks_counter *refused_address;
        ks_counter *accept_paused;
        ks_counter *errors[STATUS_KINDS];
        char refused_reply[256]; /* the 503 written to a connection over a cap */
        size_t refused_reply_len;
        struct evbuffer *reply; /* a reply composed before it is written (write_reply) */
};

/*
 * Serves fd, a connected stream socket, as if accepted from peer (not
 * counted per address): for the fuzz target and tests, which drive a
 * connection through one end of a socketpair without a listener. The front
 * owns fd either way. 0, or -1 (over conns_max, out of memory: fd closed).
 */
int front_adopt_fd(gw_front *f, evutil_socket_t fd, const char *peer);
/* Writes what is queued, then stops sending and drops what still comes. */
void front_conn_close(conn *c);
/* Frees a connection now: a request not answered yet gets its cancel callback. */
void front_conn_free(conn *c);
void front_req_free(gw_req *r);
/* The path of a request target (cut at '?' or '#' in place); NULL if it has none. */
const char *front_target_path(char *target);
/* HTTP-date of now (RFC 9110 §5.6.7). */
const char *front_http_date(void);
/* Counts a reply the front made itself (400, 408, 413, 417, 431, 501, 503). */
void front_count_error(gw_front *f, int status);
/* The Connect error JSON the front answers status with; returns its length. */
int front_error_json(int status, const char *message, char *buf, size_t len);

#endif
