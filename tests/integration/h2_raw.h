/*
 * h2_raw: HTTP/2 frames by hand, over plain sockets, for tests that must
 * see a frame or send what no well-behaved client would (streams over the
 * limit, a window of zero). The requests' HPACK blocks use literals only.
 */
#ifndef H2_RAW_H
#define H2_RAW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define H2_FRAME_MAX     16384
#define H2_PREFACE       "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_DATA          0x0
#define H2_HEADERS       0x1
#define H2_RST_STREAM    0x3
#define H2_SETTINGS      0x4
#define H2_GOAWAY        0x7
#define H2_WINDOW_UPDATE 0x8
#define H2_END_STREAM    0x1
#define H2_END_HEADERS   0x4

typedef struct h2_frame {
        int type, flags;
        uint32_t stream;
        size_t len;
        uint8_t payload[H2_FRAME_MAX];
} h2_frame;

void h2_frame_send(int fd, int type, int flags, uint32_t stream, const void *p, size_t len);
/* The next frame; false on a close or after timeout_ms of silence. */
bool h2_frame_read(int fd, h2_frame *f, int timeout_ms);
/* Reads frames until one of type (on stream, when stream > 0) comes; false if none. */
bool h2_frame_wait(int fd, int type, uint32_t stream, h2_frame *f, int timeout_ms);
uint32_t h2_be32(const uint8_t *p);
/* A connection to 127.0.0.1:port that has sent the preface and SETTINGS of n (id, value) pairs. */
int h2_dial(int port, const uint32_t *settings, size_t n);
/*
 * The HPACK block of a POST to path, with :authority 127.0.0.1 and up to
 * n more fields (names lower-case), all literals without indexing.
 */
size_t h2_request_block(uint8_t *out, size_t cap, const char *path, const char *const *names,
                        const char *const *values, size_t n);

/*
 * Header blocks read back with nghttp2's HPACK decoder. HPACK is a state of
 * the connection: every HEADERS frame of it goes through one inflater, in
 * order.
 */
typedef struct h2_inflater h2_inflater;
h2_inflater *h2_inflater_new(void);
void h2_inflater_free(h2_inflater *inf);
/* The value of name in HEADERS frame f ("" if absent; valid until the next call); NULL if f
 * does not decode. */
const char *h2_field(h2_inflater *inf, const h2_frame *f, const char *name);

/*
 * Reads one stream's answer to its end (HEADERS with END_STREAM, or
 * RST_STREAM): the :status and grpc-status (or "" when absent), the DATA
 * bytes (up to data_max), and the RST_STREAM code (or -1). Every HEADERS
 * frame of the connection goes through inf. False when the connection
 * ended or went silent for timeout_ms first.
 */
typedef struct h2_answer {
        char status[8];
        char grpc_status[8];
        char grpc_message[256];
        long rst; /* -1: none */
        size_t data_len;
} h2_answer;
bool h2_read_answer(int fd, h2_inflater *inf, uint32_t stream, h2_answer *a, int timeout_ms);

#endif
