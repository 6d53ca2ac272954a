/*
 * libFuzzer target: ks_sp (nng's wire protocol on a libevent loop) as a
 * hostile peer meets it. The input is what a peer sends on one TCP
 * connection to a ks_sp listener that answers as a service's rep side (as
 * ks_rpc_server does): the bytes go in a few pieces, the loop runs until
 * nothing more happens after each, and every message is echoed back
 * behind its backtrace.
 *
 * Input: one flag byte, then the connection's bytes. Flag bit 0 sends the
 * right handshake first (so that mutations spend themselves on messages);
 * bits 1-2 choose how many pieces the bytes go in (1 to 4); bit 3 connects
 * over the listener's ipc address (a unix socket), where each frame is a
 * type byte, 1, before its length.
 *
 * Beyond memory safety and leaks (ASan, LSan, UBSan), it checks that:
 *
 * - the messages handed to the callback are exactly the ones the bytes
 *   frame, in order, after a handshake naming the protocol expected: a
 *   64-bit big-endian length (over ipc: after a byte 1) and that many
 *   bytes, until one is longer than the receive bound or, over ipc, a
 *   frame's type is not 1 (then the pipe closes), or the bytes end;
 * - ks_sp_backtrace finds the first word with the high bit among the first
 *   KS_SP_HOPS_MAX, or none;
 * - a pipe that was added is removed once its peer has closed, and no
 *   callback runs for it after that.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ks_log.h"
#include "ks_sp.h"

#define RECV_MAX      4096
#define SEND_MAX      65536
#define MSGS_MAX      4096
#define LOOPS_MAX     64
#define QUIET_RUNS    3
#define CONNECT_TRIES 100 /* 10 ms apart */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct {
        struct event_base *base;
        ks_sp *sp;
        int port;
        struct sockaddr_un ipc; /* the listener's ipc address */
        /* this input's */
        int added, removed;
        ks_sp_pipe *pipe;
        size_t n_msgs;
        size_t lens[MSGS_MAX];
        uint64_t sums[MSGS_MAX];
        size_t events;
} g;

__attribute__((noreturn)) static void die(const char *what)
{
        fprintf(stderr, "fuzz_sp: %s\n", what);
        abort();
}

static uint64_t sum_of(const uint8_t *p, size_t n)
{
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (size_t i = 0; i < n; i++) {
                h = (h ^ p[i]) * 1099511628211ull;
        }
        return h;
}

static void on_added(ks_sp_pipe *p, void *arg)
{
        (void)arg;
        g.added++;
        g.pipe = p;
        g.events++;
}

static void on_message(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)arg;
        if (p != g.pipe || g.removed > 0) {
                die("a message on a pipe not added, or removed");
        }
        if (len > RECV_MAX) {
                die("a message over the receive bound");
        }
        size_t bt = ks_sp_backtrace(msg, len);
        size_t want = 0;
        for (size_t at = 0; at + 4 <= len && at < KS_SP_HOPS_MAX * 4; at += 4) {
                if (msg[at] & 0x80) {
                        want = at + 4;
                        break;
                }
        }
        if (bt != want) {
                die("ks_sp_backtrace disagrees");
        }
        if (g.n_msgs < MSGS_MAX) {
                g.lens[g.n_msgs] = len;
                g.sums[g.n_msgs] = sum_of(msg, len);
        }
        g.n_msgs++;
        g.events++;
        if (bt > 0) {
                (void)ks_sp_send(p, msg, bt, msg + bt, len - bt); /* as a rep answers */
        }
}

static void on_removed(ks_sp_pipe *p, void *arg)
{
        (void)arg;
        if (p != g.pipe) {
                die("a pipe removed that was not added");
        }
        g.removed++;
        g.events++;
}

static void init(void)
{
        static const ks_sp_callbacks cb = {on_added, on_message, on_removed};
        ks_sp_listener *l = NULL;
        static char dir[] = "/tmp/fuzz_sp.XXXXXX";
        char url[64];
        ks_log_init("fuzz", KS_LOG_ERROR);
        if (mkdtemp(dir) == NULL) {
                die("mkdtemp");
        }
        g.ipc.sun_family = AF_UNIX;
        snprintf(g.ipc.sun_path, sizeof(g.ipc.sun_path), "%s/sp", dir);
        snprintf(url, sizeof(url), "ipc://%s/sp", dir);
        if ((g.base = event_base_new()) == NULL ||
            ks_sp_new(&g.sp, g.base, RECV_MAX, SEND_MAX) != KS_OK ||
            ks_sp_listen(g.sp, "tcp://127.0.0.1:0", KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &l) !=
                KS_OK ||
            ks_sp_listen_also(l, url) != KS_OK) {
                die("setup");
        }
        g.port = ks_sp_listener_port(l);
}

/* Runs the loop until QUIET_RUNS turns in a row change nothing (or LOOPS_MAX). */
static void settle(int client)
{
        char sink[65536];
        int quiet = 0;
        for (int i = 0; i < LOOPS_MAX && quiet < QUIET_RUNS; i++) {
                size_t before = g.events;
                event_base_loop(g.base, EVLOOP_NONBLOCK);
                ssize_t n = client >= 0 ? recv(client, sink, sizeof(sink), MSG_DONTWAIT) : -1;
                if (g.events == before && n <= 0) {
                        quiet++;
                        struct timespec ts = {0, 100000};
                        nanosleep(&ts, NULL);
                } else {
                        quiet = 0;
                }
        }
}

/*
 * A connection to the listener. A connect that fails is tried again, the loop
 * run in between, for up to a second: the machine (a CI run's, with other
 * work on it) may refuse one for a moment, which is not what is fuzzed here.
 * A listener that stays unreachable is a failure, with the reason.
 */
static int connect_to_listener(bool ipc)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int err = 0;
        for (int attempt = 0; attempt < CONNECT_TRIES; attempt++) {
                int fd = socket(ipc ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
                if (fd >= 0 && (ipc ? connect(fd, (struct sockaddr *)&g.ipc, sizeof(g.ipc))
                                    : connect(fd, (struct sockaddr *)&sa, sizeof(sa))) == 0) {
                        return fd;
                }
                err = errno;
                if (fd >= 0) {
                        close(fd);
                }
                settle(-1);
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        fprintf(stderr, "fuzz_sp: connect: %s\n", strerror(err));
        die("connect");
}

/* What the bytes frame: the messages a correct reader hands over. */
static void expect(const uint8_t *p, size_t n, bool ipc, size_t *n_out, size_t *lens,
                   uint64_t *sums)
{
        static const uint8_t header[8] = {0, 'S', 'P', 0, 0, KS_SP_REQ0, 0, 0};
        size_t head = ipc ? 9 : 8;
        *n_out = 0;
        if (n < 8 || memcmp(p, header, 8) != 0) {
                return;
        }
        size_t at = 8;
        while (at + head <= n) {
                if (ipc && p[at] != 1) {
                        return; /* closed: not a message frame */
                }
                uint64_t len = 0;
                for (size_t i = head - 8; i < head; i++) {
                        len = len << 8 | p[at + i];
                }
                if (len > RECV_MAX || at + head + len > n) {
                        return; /* closed, or incomplete */
                }
                if (*n_out < MSGS_MAX) {
                        lens[*n_out] = (size_t)len;
                        sums[*n_out] = sum_of(p + at + head, (size_t)len);
                }
                (*n_out)++;
                at += head + (size_t)len;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static bool ready;
        static uint8_t bytes[1 << 20];
        static size_t lens[MSGS_MAX];
        static uint64_t sums[MSGS_MAX];
        if (!ready) {
                init();
                ready = true;
        }
        if (size < 1 || size > sizeof(bytes) - 8) {
                return 0;
        }
        uint8_t flags = data[0];
        size_t n = 0;
        if (flags & 1) {
                static const uint8_t header[8] = {0, 'S', 'P', 0, 0, KS_SP_REQ0, 0, 0};
                memcpy(bytes, header, 8);
                n = 8;
        }
        memcpy(bytes + n, data + 1, size - 1);
        n += size - 1;
        int pieces = 1 + ((flags >> 1) & 3);
        bool ipc = (flags & 8) != 0;

        g.added = g.removed = 0;
        g.pipe = NULL;
        g.n_msgs = 0;
        g.events = 0;

        int fd = connect_to_listener(ipc);
        settle(fd);
        for (int k = 0; k < pieces; k++) {
                size_t from = n * (size_t)k / (size_t)pieces,
                       to = n * (size_t)(k + 1) / (size_t)pieces;
                size_t off = from;
                while (off < to) {
                        ssize_t w = send(fd, bytes + off, to - off, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w > 0) {
                                off += (size_t)w;
                        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                                settle(fd); /* the reader drains */
                        } else {
                                break; /* closed by ks_sp */
                        }
                }
                settle(fd);
        }
        close(fd);
        settle(-1);

        size_t want_n = 0;
        expect(bytes, n, ipc, &want_n, lens, sums);
        if (g.n_msgs != want_n) {
                fprintf(stderr, "fuzz_sp: %zu messages framed, %zu handed over\n", want_n,
                        g.n_msgs);
                abort();
        }
        for (size_t i = 0; i < want_n && i < MSGS_MAX; i++) {
                if (g.lens[i] != lens[i] || g.sums[i] != sums[i]) {
                        die("a message handed over is not the one framed");
                }
        }
        if (g.added != g.removed || g.added > 1) {
                die("a pipe left behind after its peer closed");
        }
        return 0;
}
