/*
 * front_common.h: what the HTTP front prototypes share: the argument line,
 * the fixed reply, one SO_REUSEPORT listening socket per thread, and the
 * threads themselves. Prototypes only (tools/http_front/RESULTS.md).
 */
#ifndef FRONT_COMMON_H
#define FRONT_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The reply every candidate serves: 20 bytes. */
#define FRONT_BODY        "01234567890123456789"
#define FRONT_BODY_BYTES  (sizeof(FRONT_BODY) - 1)
#define FRONT_THREADS_MAX 16

struct front_args {
        int port;
        int threads;
};

static inline void front_parse_args(int argc, char **argv, struct front_args *out)
{
        if (argc < 2 || argc > 3) {
                fprintf(stderr, "usage: %s PORT [THREADS (1)]\n", argv[0]);
                exit(2);
        }
        out->port = atoi(argv[1]);
        out->threads = argc == 3 ? atoi(argv[2]) : 1;
        if (out->port <= 0 || out->port > 65535 || out->threads < 1 ||
            out->threads > FRONT_THREADS_MAX) {
                fprintf(stderr, "%s: bad PORT or THREADS (1..%d)\n", argv[0], FRONT_THREADS_MAX);
                exit(2);
        }
        signal(SIGPIPE, SIG_IGN);
}

/* A non-blocking socket listening on 127.0.0.1:port with SO_REUSEPORT, so
 * that each thread owns one and the kernel spreads connections over them. */
static inline int front_listen(int port)
{
        struct sockaddr_in sin;
        int fd, one = 1;

        if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
                perror("socket");
                exit(1);
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)port);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 1024) != 0) {
                perror("bind/listen");
                exit(1);
        }
        return fd;
}

/* Runs fn(listen_fd) on `threads` threads (the first on the caller's) and
 * never returns while they run. Every listening socket is made before any
 * thread starts, so a client never meets a port with fewer listeners. */
static inline void front_run_threads(const struct front_args *args, void *(*fn)(void *))
{
        pthread_t tids[FRONT_THREADS_MAX];
        intptr_t fds[FRONT_THREADS_MAX];

        for (int i = 0; i < args->threads; i++)
                fds[i] = front_listen(args->port);
        for (int i = 1; i < args->threads; i++) {
                if (pthread_create(&tids[i], NULL, fn, (void *)fds[i]) != 0) {
                        perror("pthread_create");
                        exit(1);
                }
        }
        fn((void *)fds[0]);
}

#endif
