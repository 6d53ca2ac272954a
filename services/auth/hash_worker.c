/*
 * Hash workers: scrypt in processes of their own, one per hash thread.
 *
 * Why a process. A thread's priority only counts against the other
 * threads of its scheduling group, and Linux groups by process (an
 * autogroup per session where cgroups do not; a cgroup per container
 * where they do). Hash threads inside auth made the whole of auth's group
 * always runnable, so on a machine shared with PostgreSQL and the broker a
 * login storm took half of every core the cheap calls needed, whatever the
 * threads' niceness (docs/performance.md, "ResolveContext during a login
 * storm"). A hash worker is auth's own binary started again
 * (/proc/self/exe AUTH_HASH_WORKER_ARG NICE PARENT_PID): it starts a session of its
 * own, so that it is a scheduling group of its own, and lowers that group's
 * priority and its own to NICE; PostgreSQL, the broker and auth's RPC
 * threads then get a core before it, and it uses what they leave.
 *
 * The channel is a SOCK_SEQPACKET socket pair, on the worker's fd 3: one
 * message per job (a hash_req, then the password, then the stored string)
 * and one per answer (a hash_rep). The worker exits when the socket
 * closes, and is killed when the thread that started it goes
 * (PR_SET_PDEATHSIG); a worker that dies is started again by its thread,
 * which runs the job again (hashing is pure: running it twice is safe).
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ks_log.h"

#define WORKER_FD 3
#define MSG_MAX   (sizeof(hash_req) + AUTH_HASH_INPUT_MAX + 2)

extern char **environ;

typedef struct hash_req {
        uint32_t verify;
        uint32_t password_len;
        uint32_t stored_len;
        ks_scrypt_params params;
} hash_req;

typedef struct hash_rep {
        int32_t rc;
        uint8_t ok, needs_rehash;
        char out[KS_PASSWORD_HASH_MAX];
} hash_rep;

void auth_hash_compute(auth_hash_work *w)
{
        w->ok = false;
        w->needs_rehash = false;
        if (!w->verify) {
                w->rc =
                    ks_password_hash(w->password, &w->params, w->out) == 0 ? KS_OK : KS_INTERNAL;
                return;
        }
        w->rc =
            ks_password_verify(w->password, w->stored, &w->params, &w->ok, &w->needs_rehash) == 0
                ? KS_OK
                : KS_INTERNAL;
}

/* ---- the pool's side ------------------------------------------------------------------- */

/*
 * The worker's environment: none of auth's (its secrets stay in auth),
 * only the sanitizers' options of a test build.
 */
static void worker_env(char **out, int max)
{
        static const char *const keep[] = {"ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS="};
        int n = 0;
        for (char **e = environ; *e != NULL && n < max - 1; e++) {
                for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
                        if (strncmp(*e, keep[i], strlen(keep[i])) == 0) {
                                out[n++] = *e;
                        }
                }
        }
        out[n] = NULL;
}

int auth_hasher_start(auth_hasher *h, const char *exe, int nice)
{
        int sv[2];
        char nice_arg[16], parent_arg[24];
        posix_spawn_file_actions_t fa;

        h->pid = -1;
        h->fd = -1;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
                return KS_INTERNAL;
        }
        snprintf(nice_arg, sizeof(nice_arg), "%d", nice);
        snprintf(parent_arg, sizeof(parent_arg), "%ld", (long)getpid());
        char *argv[] = {(char *)exe, (char *)AUTH_HASH_WORKER_ARG, nice_arg, parent_arg, NULL};
        posix_spawn_file_actions_init(&fa);
        /* dup2 onto fd 3 clears its close-on-exec flag; every other fd of ours closes */
        posix_spawn_file_actions_adddup2(&fa, sv[1], WORKER_FD);
        char *envp[4];
        worker_env(envp, 4);
        int rv = posix_spawn(&h->pid, exe, &fa, NULL, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        close(sv[1]);
        if (rv != 0) {
                close(sv[0]);
                h->pid = -1;
                ks_log_error(NULL, "cannot start a hash worker", "{s:s,s:s}", "exe", exe, "error",
                             strerror(rv));
                return KS_INTERNAL;
        }
        h->fd = sv[0];
        return KS_OK;
}

void auth_hasher_stop(auth_hasher *h)
{
        if (h->fd >= 0) {
                close(h->fd); /* the worker reads the end of its socket and exits */
                h->fd = -1;
        }
        if (h->pid > 0) {
                while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
                }
                h->pid = -1;
        }
}

/* One job on the worker: KS_OK with w's results set, or KS_UNAVAILABLE when the worker is gone. */
static int hasher_once(auth_hasher *h, auth_hash_work *w)
{
        uint8_t msg[MSG_MAX];
        hash_req req = {.verify = w->verify, .params = w->params};
        size_t plen = strlen(w->password);
        size_t slen = w->verify ? strlen(w->stored) : 0;
        ssize_t n;

        if (plen + slen > AUTH_HASH_INPUT_MAX) {
                w->rc = KS_INVALID_ARGUMENT;
                return KS_OK;
        }
        req.password_len = (uint32_t)plen;
        req.stored_len = (uint32_t)slen;
        memcpy(msg, &req, sizeof(req));
        memcpy(msg + sizeof(req), w->password, plen);
        memcpy(msg + sizeof(req) + plen, w->verify ? w->stored : "", slen);
        n = send(h->fd, msg, sizeof(req) + plen + slen, MSG_NOSIGNAL);
        explicit_bzero(msg, sizeof(msg));
        if (n != (ssize_t)(sizeof(req) + plen + slen)) {
                return KS_UNAVAILABLE;
        }
        hash_rep rep;
        do {
                n = recv(h->fd, &rep, sizeof(rep), 0);
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(rep)) {
                return KS_UNAVAILABLE;
        }
        w->rc = rep.rc;
        w->ok = rep.ok != 0;
        w->needs_rehash = rep.needs_rehash != 0;
        memcpy(w->out, rep.out, sizeof(w->out));
        explicit_bzero(&rep, sizeof(rep));
        return KS_OK;
}

int auth_hasher_run(auth_hasher *h, const char *exe, int nice, auth_hash_work *w)
{
        for (int attempt = 0; attempt < 2; attempt++) {
                if (h->fd >= 0 && hasher_once(h, w) == KS_OK) {
                        return KS_OK;
                }
                /* gone (killed, out of memory): reap it and start another */
                if (h->pid > 0) {
                        kill(h->pid, SIGKILL);
                }
                auth_hasher_stop(h);
                ks_log_warn(NULL, "a hash worker was lost: starting another", NULL);
                if (auth_hasher_start(h, exe, nice) != KS_OK) {
                        break;
                }
        }
        w->rc = KS_INTERNAL;
        return KS_INTERNAL;
}

/* ---- the worker's side ----------------------------------------------------------------- */

/* Its own session is its own scheduling group (an autogroup), at nice. */
static void lower_priority(int nice)
{
        if (setsid() < 0) {
                return;
        }
        FILE *f = fopen("/proc/self/autogroup", "w");
        if (f != NULL) {
                fprintf(f, "%d", nice);
                fclose(f); /* no autogroups here (cgroups): the process nice below still holds */
        }
        (void)setpriority(PRIO_PROCESS, 0, nice);
}

int auth_hash_worker_main(int argc, char **argv)
{
        static uint8_t msg[MSG_MAX];
        int nice = argc > 2 ? atoi(argv[2]) : 10;
        long parent = argc > 3 ? atol(argv[3]) : -1;

        /* Its parent gone before the death signal was armed: the parent is no longer the one
         * that started it (not "pid 1": in a container auth itself may be pid 1). */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || (long)getppid() != parent) {
                return 1;
        }
        (void)prctl(PR_SET_NAME, "keelson-hash"); /* in ps and top, not "exe" */
        signal(SIGINT, SIG_IGN); /* a terminal's ^C is for auth, which closes the socket */
        lower_priority(nice < 0 ? 0 : nice > 19 ? 19 : nice);
        for (;;) {
                ssize_t n = recv(WORKER_FD, msg, sizeof(msg), 0);
                if (n == 0) {
                        return 0;
                }
                if (n < 0 && errno == EINTR) {
                        continue;
                }
                hash_req req;
                if (n < (ssize_t)sizeof(req)) {
                        return n < 0 ? 1 : 2;
                }
                memcpy(&req, msg, sizeof(req));
                if ((size_t)req.password_len + req.stored_len > AUTH_HASH_INPUT_MAX ||
                    sizeof(req) + req.password_len + req.stored_len != (size_t)n) {
                        return 2;
                }
                char password[AUTH_HASH_INPUT_MAX + 1], stored[AUTH_HASH_INPUT_MAX + 1];
                memcpy(password, msg + sizeof(req), req.password_len);
                password[req.password_len] = '\0';
                memcpy(stored, msg + sizeof(req) + req.password_len, req.stored_len);
                stored[req.stored_len] = '\0';
                auth_hash_work w = {.verify = req.verify != 0,
                                    .password = password,
                                    .stored = stored,
                                    .params = req.params};
                auth_hash_compute(&w);
                hash_rep rep = {.rc = w.rc, .ok = w.ok, .needs_rehash = w.needs_rehash};
                memcpy(rep.out, w.out, sizeof(rep.out));
                explicit_bzero(password, sizeof(password));
                explicit_bzero(msg, sizeof(msg));
                ssize_t sent = send(WORKER_FD, &rep, sizeof(rep), MSG_NOSIGNAL);
                explicit_bzero(&rep, sizeof(rep));
                explicit_bzero(&w, sizeof(w));
                if (sent != (ssize_t)sizeof(rep)) {
                        return 1;
                }
        }
}
