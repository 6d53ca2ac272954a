/*
 * raw_http: an HTTP/1.1 client over plain sockets for tests that send what
 * no well-behaved client would (smuggling, trickled heads, floods of
 * connections) and read back exactly what the server wrote.
 */
#ifndef RAW_HTTP_H
#define RAW_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#define RAW_HTTP_REPLY_MAX 16384
#define RAW_HTTP_WAIT_MS   3000 /* silence that ends a read still waiting for replies */

typedef struct raw_reply {
        char text[RAW_HTTP_REPLY_MAX];
        size_t len;
        bool closed; /* the server closed the connection */
} raw_reply;

/* A connection to 127.0.0.1:port from source address src ("127.0.0.x", or NULL); -1. */
int raw_dial(const char *src, int port);
/* Sends everything, or stops quietly at the first error (the server closed). */
void raw_send(int fd, const void *data, size_t len);
/*
 * Reads until the connection closes, or until want final replies have come
 * and nothing more follows within 200 ms; want 0: what comes within 200 ms.
 */
void raw_read(int fd, int want, raw_reply *r);
/* raw on a new connection, then raw_read(want), then close. */
void raw_exchange(int port, const char *raw, int want, raw_reply *r);
/* The status of the first reply, or 0. */
int raw_status(const raw_reply *r);
/* Final replies in text, walked by their Content-Length (100 Continue not counted). */
int raw_replies(const char *text);

#endif
