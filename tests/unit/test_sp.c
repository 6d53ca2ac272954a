/*
 * Unit tests of ks_sp against nng itself: a ks_sp listener on a loop thread,
 * and nng 1.5.2's own sockets dialling it, as keelson's services and
 * gateway do. A req socket's request reaches the listener with its request
 * id in front, and the reply it is sent back is what nng_recv returns; a
 * peer of another protocol is refused; a message over the bound closes its
 * pipe, and a closed pipe's id finds nothing. The same over nng's ipc
 * transport (unix sockets), on a second address of the same listener:
 * nng's req dials it, ks_sp's dialer reaches nng's rep; a frame of another
 * type closes the pipe; a socket file left by a process that is gone is
 * replaced, one in use is not, and the file goes when the listener does.
 * A peer silent past the handshake's deadline is closed; a pipe quiet for
 * longer than that after its handshake is not, on either side. A TCP pipe,
 * accepted or dialled, probes its peer (keepalive, a user timeout).
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "ks_clock.h"
#include "ks_sp.h"

#define RECV_MAX 1024
#define WAIT_MS  3000

static struct event_base *base;
static ks_sp *sp;
static ks_sp_listener *listener;
static pthread_t thread;
static atomic_int added, removed, messages;
static atomic_uint last_id;
static char last_host[KS_SP_HOST_MAX];
static char dir[64];      /* a folder of this run's unix sockets */
static char ipc_url[128]; /* the listener's second address: DIR/rep */

/* Echoes each request: the same backtrace and request id, then "re:" and the body. */
static void on_message(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)arg;
        atomic_fetch_add(&messages, 1);
        if (len < 4) {
                return;
        }
        uint8_t head[7];
        memcpy(head, msg, 4);
        memcpy(head + 4, "re:", 3);
        assert_int_equal(ks_sp_send(p, head, sizeof(head), msg + 4, len - 4), 0);
}

static void on_added(ks_sp_pipe *p, void *arg)
{
        (void)arg;
        atomic_store(&last_id, ks_sp_pipe_id(p));
        assert_ptr_equal(ks_sp_pipe_find(sp, ks_sp_pipe_id(p)), p);
        snprintf(last_host, sizeof(last_host), "%s", ks_sp_pipe_host(p));
        atomic_fetch_add(&added, 1);
}

static void on_removed(ks_sp_pipe *p, void *arg)
{
        (void)p;
        (void)arg;
        atomic_fetch_add(&removed, 1);
}

static void *loop_main(void *arg)
{
        (void)arg;
        event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        event_base_loopbreak(base);
}

/* Stops the loop thread, so that the test's thread may use sp, until loop_resume. */
static void loop_pause(void)
{
        event_base_once(base, -1, EV_TIMEOUT, stop_cb, NULL, NULL);
        pthread_join(thread, NULL);
}

static void loop_resume(void)
{
        assert_int_equal(pthread_create(&thread, NULL, loop_main, NULL), 0);
}

static int setup(void **state)
{
        (void)state;
        static const ks_sp_callbacks cb = {on_added, on_message, on_removed};
        atomic_store(&added, 0);
        atomic_store(&removed, 0);
        atomic_store(&messages, 0);
        last_host[0] = '\0';
        snprintf(dir, sizeof(dir), "/tmp/test_sp.XXXXXX");
        if (mkdtemp(dir) == NULL) {
                return -1;
        }
        snprintf(ipc_url, sizeof(ipc_url), "ipc://%s/rep", dir);
        if (evthread_use_pthreads() != 0 || (base = event_base_new()) == NULL ||
            ks_sp_new(&sp, base, RECV_MAX, 1 << 20) != KS_OK ||
            ks_sp_listen(sp, "tcp://127.0.0.1:0", KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &listener) !=
                KS_OK ||
            ks_sp_listen_also(listener, ipc_url) != KS_OK) {
                return -1;
        }
        return pthread_create(&thread, NULL, loop_main, NULL);
}

static int teardown(void **state)
{
        (void)state;
        loop_pause();
        ks_sp_free(sp);
        event_base_free(base);
        char path[160];
        snprintf(path, sizeof(path), "%s/rep", dir);
        unlink(path); /* gone already unless a test failed; rmdir needs it gone */
        rmdir(dir);
        return 0;
}

static bool wait_for(atomic_int *v, int want)
{
        int64_t until = ks_mono_ms() + WAIT_MS;
        while (atomic_load(v) < want && ks_mono_ms() < until) {
                usleep(5000);
        }
        return atomic_load(v) >= want;
}

static void url_of(char *url, size_t len)
{
        snprintf(url, len, "tcp://127.0.0.1:%d", ks_sp_listener_port(listener));
}

static void req_round_trip(const char *url, const char *host)
{
        nng_socket req;
        assert_int_equal(nng_req0_open(&req), 0);
        assert_int_equal(nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, WAIT_MS), 0);
        assert_int_equal(nng_dial(req, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        assert_string_equal(last_host, host);
        for (int i = 0; i < 3; i++) {
                char body[16], *got = NULL;
                size_t got_len = 0;
                int n = snprintf(body, sizeof(body), "hello %d", i);
                assert_int_equal(nng_send(req, body, (size_t)n, 0), 0);
                assert_int_equal(nng_recv(req, &got, &got_len, NNG_FLAG_ALLOC), 0);
                char want[24];
                int m = snprintf(want, sizeof(want), "re:%s", body);
                assert_int_equal(got_len, (size_t)m);
                assert_memory_equal(got, want, (size_t)m);
                nng_free(got, got_len);
        }
        assert_int_equal(atomic_load(&messages), 3);
        uint32_t id = atomic_load(&last_id);
        assert_true(id != 0 && (id & 0x80000000u) == 0);
        nng_close(req);
        assert_true(wait_for(&removed, 1));
        assert_null(ks_sp_pipe_find(sp, id)); /* racy only in theory: removed ran on the loop */
}

static void test_nng_req_round_trip(void **state)
{
        (void)state;
        char url[64];
        url_of(url, sizeof(url));
        req_round_trip(url, "127.0.0.1");
}

/* nng's req over its ipc transport, to the listener's second address. */
static void test_nng_req_round_trip_ipc(void **state)
{
        (void)state;
        req_round_trip(ipc_url, "local");
}

/* Pipes of both addresses are the listener's, in the order they came. */
static void test_both_addresses_one_listener(void **state)
{
        (void)state;
        char url[64];
        nng_socket a, b;
        url_of(url, sizeof(url));
        assert_int_equal(nng_req0_open(&a), 0);
        assert_int_equal(nng_dial(a, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        assert_int_equal(nng_req0_open(&b), 0);
        assert_int_equal(nng_dial(b, ipc_url, NULL, 0), 0);
        assert_true(wait_for(&added, 2));
        /* Read on the test's thread while the loop idles: nothing else touches the list. */
        ks_sp_pipe *first = ks_sp_listener_first(listener);
        assert_non_null(first);
        assert_string_equal(ks_sp_pipe_host(first), "127.0.0.1");
        ks_sp_pipe *second = ks_sp_pipe_next(first);
        assert_non_null(second);
        assert_string_equal(ks_sp_pipe_host(second), "local");
        assert_string_equal(ks_sp_pipe_peer(second), ipc_url);
        assert_null(ks_sp_pipe_next(second));
        nng_close(a);
        nng_close(b);
        assert_true(wait_for(&removed, 2));
}

/* A raw unix socket connected to the listener's ipc address, handshake sent. */
static int ipc_peer(void)
{
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        assert_true(strlen(ipc_url) - strlen("ipc://") < sizeof(sun.sun_path));
        memcpy(sun.sun_path, ipc_url + strlen("ipc://"), strlen(ipc_url) - strlen("ipc://") + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
        static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, KS_SP_REQ0, 0, 0};
        assert_int_equal(write(fd, hello, sizeof(hello)), (ssize_t)sizeof(hello));
        assert_true(wait_for(&added, 1));
        return fd;
}

/* Over ipc a frame is a type byte (1, a message) and the length: a message framed as tcp
 * frames it is refused, as nng refuses it; framed as ipc it is answered. */
static void test_ipc_framing(void **state)
{
        (void)state;
        int fd = ipc_peer();
        static const uint8_t msg[9 + 8] = {1,    0, 0, 0, 0,   0,   0,   0,  8,
                                           0x80, 0, 0, 1, 'p', 'i', 'n', 'g'};
        assert_int_equal(write(fd, msg, sizeof(msg)), (ssize_t)sizeof(msg));
        uint8_t back[8 + 9 + 8 + 3];
        ssize_t n = 0, got;
        while (n < 8 + 9 + 11 && (got = read(fd, back + n, sizeof(back) - (size_t)n)) > 0) {
                n += got; /* its handshake, then the reply */
        }
        assert_int_equal(n, 8 + 9 + 11);
        assert_memory_equal(back + 8, "\x01\0\0\0\0\0\0\0\x0b\x80\0\0\x01re:ping", 9 + 11);
        close(fd);
        assert_true(wait_for(&removed, 1));

        fd = ipc_peer();
        static const uint8_t tcp_framed[8 + 8] = {0,    0, 0, 0, 0,   0,   0,   8,
                                                  0x80, 0, 0, 2, 'p', 'i', 'n', 'g'};
        assert_int_equal(write(fd, tcp_framed, sizeof(tcp_framed)), (ssize_t)sizeof(tcp_framed));
        assert_true(wait_for(&removed, 2)); /* type 0 is no message */
        assert_int_equal(atomic_load(&messages), 1);
        close(fd);
}

/* The socket's file: one left by a process that is gone is replaced, one in use is not;
 * it goes with the listener, unless another socket has taken its place. */
static void test_ipc_socket_file(void **state)
{
        (void)state;
        static const ks_sp_callbacks cb = {on_added, on_message, on_removed};
        ks_sp_listener *other = NULL;
        char path[160], url[170];
        struct stat st;
        snprintf(path, sizeof(path), "%s/rep", dir);
        /* In use: the listener of setup accepts on it. */
        assert_int_equal(ks_sp_listen(sp, ipc_url, KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &other),
                         KS_UNAVAILABLE);
        assert_null(other);

        /* Left behind: a socket bound and closed without unlinking, as by a killed process. */
        snprintf(path, sizeof(path), "%s/stale", dir);
        snprintf(url, sizeof(url), "ipc://%s", path);
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        assert_true(strlen(path) < sizeof(sun.sun_path));
        memcpy(sun.sun_path, path, strlen(path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
        close(fd);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(ks_sp_listen_also(listener, url), KS_INVALID_ARGUMENT); /* 2 already */
        assert_int_equal(ks_sp_listen(sp, url, KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &other), KS_OK);
        nng_socket req;
        assert_int_equal(nng_req0_open(&req), 0);
        assert_int_equal(nng_dial(req, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        nng_close(req);
        assert_true(wait_for(&removed, 1));

        /* Not a unix socket's url, or a path too long for one. */
        char long_url[200] = "ipc:///";
        memset(long_url + 7, 'a', 120);
        assert_int_equal(ks_sp_listen(sp, long_url, KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &other),
                         KS_INVALID_ARGUMENT);
        assert_int_equal(ks_sp_listen(sp, "ipc://", KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &other),
                         KS_INVALID_ARGUMENT);

        /* Freed: the files go (teardown frees; checked here by freeing now). */
        loop_pause();
        ks_sp_free(sp);
        assert_int_not_equal(stat(path, &st), 0);
        snprintf(path, sizeof(path), "%s/rep", dir);
        assert_int_not_equal(stat(path, &st), 0);
        assert_int_equal(ks_sp_new(&sp, base, RECV_MAX, 1 << 20), KS_OK);

        /* A file that another socket took after ours was bound stays. */
        assert_int_equal(ks_sp_listen(sp, url, KS_SP_REP0, KS_SP_REQ0, &cb, NULL, &other), KS_OK);
        snprintf(path, sizeof(path), "%s/stale", dir);
        assert_int_equal(unlink(path), 0);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
        ks_sp_free(sp);
        assert_int_equal(stat(path, &st), 0);
        close(fd);
        unlink(path);
        assert_int_equal(ks_sp_new(&sp, base, RECV_MAX, 1 << 20), KS_OK);
        loop_resume();
}

static void test_other_protocol_refused(void **state)
{
        (void)state;
        char url[64];
        nng_socket pub;
        url_of(url, sizeof(url));
        assert_int_equal(nng_pub0_open(&pub), 0);
        assert_int_equal(nng_dial(pub, url, NULL, NNG_FLAG_NONBLOCK), 0);
        usleep(300 * 1000);
        assert_int_equal(atomic_load(&added), 0);
        nng_close(pub);
}

static void test_message_over_bound_closes(void **state)
{
        (void)state;
        char url[64];
        nng_socket req;
        static char big[RECV_MAX * 2];
        url_of(url, sizeof(url));
        assert_int_equal(nng_req0_open(&req), 0);
        assert_int_equal(nng_dial(req, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        assert_int_equal(nng_send(req, big, sizeof(big), 0), 0);
        assert_true(wait_for(&removed, 1));
        assert_int_equal(atomic_load(&messages), 0);
        nng_close(req);
}

/* ---- a dialer, against nng's rep listening ---- */

static ks_sp_dialer *dialer;
static atomic_int d_added, d_removed, d_messages;
static char d_reply[64];
static size_t d_reply_len;
static uint8_t d_ids[8]; /* the last byte of each reply's request id, in the order they came */

static void d_on_added(ks_sp_pipe *p, void *arg)
{
        (void)p;
        (void)arg;
        atomic_fetch_add(&d_added, 1);
}

static void d_on_removed(ks_sp_pipe *p, void *arg)
{
        (void)p;
        (void)arg;
        atomic_fetch_add(&d_removed, 1);
}

static void d_on_message(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)p;
        (void)arg;
        d_reply_len = len < sizeof(d_reply) ? len : sizeof(d_reply);
        memcpy(d_reply, msg, d_reply_len);
        int n = atomic_load(&d_messages);
        if (n < (int)sizeof(d_ids) && len >= 4) {
                d_ids[n] = msg[3];
        }
        atomic_fetch_add(&d_messages, 1);
}

/* On the loop: a request with request id 0x80000007 and "ping". */
static void send_ping(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        static const uint8_t id[4] = {0x80, 0, 0, 7};
        assert_int_equal(ks_sp_send(ks_sp_dialer_pipe(dialer), id, 4, "ping", 4), 0);
}

/* A free loopback port: nng listens on it, and is closed. */
static int free_port(void)
{
        nng_socket s;
        nng_listener l;
        int port = 0;
        if (nng_rep0_open(&s) != 0 || nng_listen(s, "tcp://127.0.0.1:0", &l, 0) != 0 ||
            nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) != 0) {
                return -1;
        }
        nng_close(s);
        return port;
}

static void rep_echo(nng_socket rep)
{
        char *got = NULL;
        size_t len = 0;
        assert_int_equal(nng_recv(rep, &got, &len, NNG_FLAG_ALLOC), 0);
        assert_int_equal(len, 4);
        assert_memory_equal(got, "ping", 4);
        nng_free(got, len);
        assert_int_equal(nng_send(rep, "pong", 4, 0), 0);
}

/* nng's rep listening on url. */
static nng_socket rep_listen(const char *url)
{
        nng_socket rep;
        assert_int_equal(nng_rep0_open(&rep), 0);
        assert_int_equal(nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, WAIT_MS), 0);
        assert_int_equal(nng_listen(rep, url, NULL, 0), 0);
        return rep;
}

/* The dialer's ping, rep's pong: the dialer's nth message is the reply, request id first. */
static void ping_pong(nng_socket rep, int nth)
{
        event_base_once(base, -1, EV_TIMEOUT, send_ping, NULL, NULL);
        rep_echo(rep);
        assert_true(wait_for(&d_messages, nth));
        assert_int_equal(d_reply_len, 8);
        assert_memory_equal(d_reply, "\x80\x00\x00\x07pong", 8);
}

static void test_dialer_round_trip_and_redial(void **state)
{
        (void)state;
        static const ks_sp_callbacks cb = {d_on_added, d_on_message, d_on_removed};
        char url[64];
        int port = free_port();
        assert_true(port > 0);
        snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
        /* Nobody listens yet: the dialer keeps trying. Dialled before the loop runs. */
        assert_int_equal(teardown(NULL), 0);
        assert_int_equal(setup(NULL), 0);
        loop_pause();
        assert_int_equal(ks_sp_dial(sp, url, KS_SP_REQ0, KS_SP_REP0, &cb, NULL, &dialer), KS_OK);
        loop_resume();
        usleep(300 * 1000);
        assert_int_equal(atomic_load(&d_added), 0);

        nng_socket rep = rep_listen(url);
        assert_true(wait_for(&d_added, 1)); /* within the backoff */
        ping_pong(rep, 1);

        /* The listener goes and comes back: the pipe is removed, then dialled again. */
        nng_close(rep);
        assert_true(wait_for(&d_removed, 1));
        rep = rep_listen(url);
        assert_true(wait_for(&d_added, 2));
        ping_pong(rep, 2);
        nng_close(rep);
}

/* nng's rep listening on url (messages up to recv_max), and ks_sp's dialer's pipe to it. */
static nng_socket rep_dialled(const char *url, size_t recv_max)
{
        static const ks_sp_callbacks cb = {d_on_added, d_on_message, d_on_removed};
        atomic_store(&d_added, 0);
        atomic_store(&d_messages, 0);
        nng_socket rep = rep_listen(url);
        assert_int_equal(nng_socket_set_size(rep, NNG_OPT_RECVMAXSZ, recv_max), 0);
        loop_pause();
        assert_int_equal(ks_sp_dial(sp, url, KS_SP_REQ0, KS_SP_REP0, &cb, NULL, &dialer), KS_OK);
        loop_resume();
        assert_true(wait_for(&d_added, 1));
        return rep;
}

/* The same on a unix socket. */
static nng_socket rep_dialled_over_ipc(size_t recv_max)
{
        char url[128];
        snprintf(url, sizeof(url), "ipc://%s/nng-rep", dir);
        return rep_dialled(url, recv_max);
}

/* ks_sp's dialer over ipc, to nng's rep listening on a unix socket. */
static void test_dialer_ipc(void **state)
{
        (void)state;
        nng_socket rep = rep_dialled_over_ipc(1024);
        ping_pong(rep, 1);
        nng_close(rep);
}

#define BIG_BYTES (768 * 1024) /* over a unix socket's send buffer, under the send bound */

/* On the loop, in one turn: a small request, a big one, a small one (ids 1, 2, 3). */
static void send_three(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        static uint8_t big[BIG_BYTES];
        for (size_t i = 0; i < sizeof(big); i++) {
                big[i] = (uint8_t)(i * 31 + 7);
        }
        ks_sp_pipe *p = ks_sp_dialer_pipe(dialer);
        static const uint8_t id1[4] = {0x80, 0, 0, 1}, id2[4] = {0x80, 0, 0, 2},
                             id3[4] = {0x80, 0, 0, 3};
        assert_int_equal(ks_sp_send(p, id1, 4, "one", 3), 0);
        assert_int_equal(ks_sp_send(p, id2, 4, big, sizeof(big)), 0);
        assert_int_equal(ks_sp_send(p, id3, 4, "three", 5), 0);
}

/* On the loop, a turn later, while the big one's rest likely still waits: id 4. */
static void send_fourth(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        static const uint8_t id4[4] = {0x80, 0, 0, 4};
        assert_int_equal(ks_sp_send(ks_sp_dialer_pipe(dialer), id4, 4, "four", 4), 0);
}

/*
 * Messages sent in one turn of the loop are written together after it; what
 * the socket does not take at once (the big one's rest, and the one after)
 * follows through the bufferevent, in order and whole, and so does what a
 * later turn sends while that rest waits.
 */
static void test_dialer_turn_written_in_order(void **state)
{
        (void)state;
        nng_socket rep = rep_dialled_over_ipc(2 * BIG_BYTES);
        event_base_once(base, -1, EV_TIMEOUT, send_three, NULL, NULL);
        event_base_once(base, -1, EV_TIMEOUT, send_fourth, NULL, NULL);
        static const char *const want[4] = {"one", NULL, "three", "four"};
        for (int i = 0; i < 4; i++) {
                uint8_t *got = NULL;
                size_t len = 0;
                assert_int_equal(nng_recv(rep, &got, &len, NNG_FLAG_ALLOC), 0);
                if (want[i] != NULL) {
                        assert_int_equal(len, strlen(want[i]));
                        assert_memory_equal(got, want[i], len);
                } else {
                        assert_int_equal(len, BIG_BYTES);
                        for (size_t k = 0; k < len; k++) {
                                assert_int_equal(got[k], (uint8_t)(k * 31 + 7));
                        }
                }
                nng_free(got, len);
                assert_int_equal(nng_send(rep, "ok", 2, 0), 0);
        }
        assert_true(wait_for(&d_messages, 4));
        for (int i = 0; i < 4; i++) {
                assert_int_equal(d_ids[i], i + 1);
        }
        nng_close(rep);
}

/* ---- TCP options ---- */

/*
 * The connected TCP socket of this process whose local port (local) or
 * peer's port (!local) is port; -1 when none. Both ends of a loopback
 * connection are in the test's process: nng's and ks_sp's.
 */
static int tcp_socket_at(int port, bool local)
{
        for (int fd = 3; fd < 4096; fd++) {
                struct sockaddr_in me, peer;
                socklen_t me_len = sizeof(me), peer_len = sizeof(peer);
                if (getsockname(fd, (struct sockaddr *)&me, &me_len) != 0 ||
                    me.sin_family != AF_INET ||
                    getpeername(fd, (struct sockaddr *)&peer, &peer_len) != 0) {
                        continue;
                }
                if (ntohs(local ? me.sin_port : peer.sin_port) == port) {
                        return fd;
                }
        }
        return -1;
}

static int tcp_option(int fd, int level, int name)
{
        int v = -1;
        socklen_t len = sizeof(v);
        assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
        return v;
}

/* ks_sp's end: no Nagle delay, keepalive probes, and a bound on unacknowledged bytes. */
static void assert_tuned(int fd)
{
        assert_true(fd >= 0);
        assert_int_equal(tcp_option(fd, IPPROTO_TCP, TCP_NODELAY), 1);
        assert_int_equal(tcp_option(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
        assert_int_equal(tcp_option(fd, IPPROTO_TCP, TCP_KEEPIDLE), KS_SP_KEEPALIVE_IDLE_S);
        assert_int_equal(tcp_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), KS_SP_KEEPALIVE_INTERVAL_S);
        assert_int_equal(tcp_option(fd, IPPROTO_TCP, TCP_KEEPCNT), KS_SP_KEEPALIVE_PROBES);
        assert_int_equal(tcp_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), KS_SP_USER_TIMEOUT_MS);
}

/*
 * A peer that vanishes without closing is found by the kernel within
 * seconds: every TCP pipe ks_sp accepts or dials has keepalive probes and
 * a user timeout set (nng's own end, for contrast, has no keepalive).
 */
static void test_tcp_pipes_probe_their_peer(void **state)
{
        (void)state;
        char url[64];
        url_of(url, sizeof(url));
        nng_socket req;
        assert_int_equal(nng_req0_open(&req), 0);
        assert_int_equal(nng_dial(req, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        int port = ks_sp_listener_port(listener);
        assert_tuned(tcp_socket_at(port, true));
        int nng_end = tcp_socket_at(port, false);
        assert_true(nng_end >= 0);
        assert_int_equal(tcp_option(nng_end, SOL_SOCKET, SO_KEEPALIVE), 0);
        nng_close(req);

        int rep_port = free_port();
        assert_true(rep_port > 0);
        snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", rep_port);
        nng_socket rep = rep_dialled(url, 1024);
        assert_tuned(tcp_socket_at(rep_port, false));
        nng_close(rep);
}

/* ---- the handshake's deadline ---- */

#define DEADLINE_MS 500

/* Shortens the handshake's deadline of new connections. */
static void shorten_handshake(void)
{
        loop_pause();
        ks_sp_set_handshake_ms(sp, DEADLINE_MS);
        loop_resume();
}

/* A peer that connects and never sends its 8 bytes is closed at the deadline. */
static void test_no_handshake_closed(void **state)
{
        (void)state;
        shorten_handshake();
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        memcpy(sun.sun_path, ipc_url + strlen("ipc://"), strlen(ipc_url) - strlen("ipc://") + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
        struct timeval tv = {WAIT_MS / 1000, 0};
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        uint8_t got[16];
        int64_t start = ks_mono_ms();
        assert_int_equal(read(fd, got, sizeof(got)), 8); /* the listener's own 8 bytes */
        assert_int_equal(read(fd, got, sizeof(got)), 0); /* then EOF: closed, not timed out */
        assert_true(ks_mono_ms() - start >= DEADLINE_MS - 20);
        assert_int_equal(atomic_load(&added), 0);
        close(fd);
}

/*
 * A pipe past its handshake stays however long it is quiet, on both sides:
 * the deadline is the handshake's alone. (It once stayed armed: a listener
 * closed a pipe, and a dialer its own, at the first pause as long as the
 * deadline after a message came in.)
 */
static void test_quiet_pipe_stays(void **state)
{
        (void)state;
        shorten_handshake();
        nng_socket req;
        assert_int_equal(nng_req0_open(&req), 0);
        assert_int_equal(nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, WAIT_MS), 0);
        char url[64];
        url_of(url, sizeof(url));
        assert_int_equal(nng_dial(req, url, NULL, 0), 0);
        assert_true(wait_for(&added, 1));
        for (int i = 0; i < 2; i++) {
                char *got = NULL;
                size_t len = 0;
                assert_int_equal(nng_send(req, "ping", 4, 0), 0);
                assert_int_equal(nng_recv(req, &got, &len, NNG_FLAG_ALLOC), 0);
                assert_int_equal(len, 7);
                assert_memory_equal(got, "re:ping", 7);
                nng_free(got, len);
                usleep(DEADLINE_MS * 3 * 1000);
                assert_int_equal(atomic_load(&removed), 0);
                assert_int_equal(atomic_load(&added), 1);
        }
        nng_close(req);

        /* The dialer's side: nng's rep answers, the dialer's pipe is quiet, then used again. */
        atomic_store(&d_removed, 0);
        nng_socket rep = rep_dialled_over_ipc(1024);
        ping_pong(rep, 1);
        usleep(DEADLINE_MS * 3 * 1000);
        assert_int_equal(atomic_load(&d_removed), 0);
        ping_pong(rep, 2);
        assert_int_equal(atomic_load(&d_added), 1);
        nng_close(rep);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_nng_req_round_trip, setup, teardown),
            cmocka_unit_test_setup_teardown(test_other_protocol_refused, setup, teardown),
            cmocka_unit_test_setup_teardown(test_message_over_bound_closes, setup, teardown),
            cmocka_unit_test_setup_teardown(test_dialer_round_trip_and_redial, setup, teardown),
            cmocka_unit_test_setup_teardown(test_nng_req_round_trip_ipc, setup, teardown),
            cmocka_unit_test_setup_teardown(test_both_addresses_one_listener, setup, teardown),
            cmocka_unit_test_setup_teardown(test_ipc_framing, setup, teardown),
            cmocka_unit_test_setup_teardown(test_ipc_socket_file, setup, teardown),
            cmocka_unit_test_setup_teardown(test_dialer_ipc, setup, teardown),
            cmocka_unit_test_setup_teardown(test_dialer_turn_written_in_order, setup, teardown),
            cmocka_unit_test_setup_teardown(test_no_handshake_closed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_quiet_pipe_stays, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tcp_pipes_probe_their_peer, setup, teardown),
        };
        int failed = cmocka_run_group_tests(tests, NULL, NULL);
        nng_fini(); /* nng frees closed sockets on its own threads: let it finish before leak checks
                     */
        return failed;
}
