/*
 * Unit tests of the auth service's hash pool (services/auth/hash_pool.c):
 * results match ks_crypto's, a full queue refuses at once instead of
 * growing, and a job whose deadline passes in the queue is dropped; each
 * with the threads hashing themselves and with hash worker processes (this
 * binary started again as one, as auth is), which also must run in a
 * session of their own at the pool's nice value, be replaced when killed,
 * and be gone once the pool is freed.
 *
 * Linked with keelson_auth_lib: the same hash_pool.o the service runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "auth.h"

/* Fast parameters for the checks of results. */
static const ks_scrypt_params fast = {1u << 10, 8, 1, 64, 16};
/*
 * Slow enough (a few hundred ms, 128 MiB) to hold the only hash thread while
 * the test looks, also on a machine busy with other tests under ASan.
 */
static const ks_scrypt_params slow = {1u << 17, 8, 1, 64, 16};

/* NULL: the threads hash themselves; else the hash workers' binary (this one). */
static const char *g_exe;

static int use_threads(void **state)
{
        (void)state;
        g_exe = NULL;
        return 0;
}

static int use_processes(void **state)
{
        (void)state;
        g_exe = "/proc/self/exe";
        return 0;
}

static void test_hash_then_verify(void **state)
{
        auth_hash_pool *p = NULL;
        char stored[KS_PASSWORD_HASH_MAX];
        bool ok = false, rehash = true;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 2, 4, 0, g_exe, NULL), KS_OK);
        assert_int_equal(auth_hash_password(p, "correct horse", &fast, stored, 0), KS_OK);
        assert_int_equal(auth_verify_password(p, "correct horse", stored, &fast, &ok, &rehash, 0),
                         KS_OK);
        assert_true(ok);
        assert_false(rehash);
        assert_int_equal(auth_verify_password(p, "wrong horse", stored, &fast, &ok, NULL, 0),
                         KS_OK);
        assert_false(ok);
        /* A malformed stored string is a failed check, not a match. */
        assert_int_equal(auth_verify_password(p, "x", "$nonsense$", &fast, &ok, NULL, 0),
                         KS_INTERNAL);
        assert_false(ok);
        auth_hash_pool_free(p);
}

static void test_bad_sizes(void **state)
{
        auth_hash_pool *p = NULL;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 0, 1, 0, g_exe, NULL), KS_INVALID_ARGUMENT);
        assert_int_equal(auth_hash_pool_new(&p, 1, 0, 0, g_exe, NULL), KS_INVALID_ARGUMENT);
        assert_int_equal(auth_hash_pool_new(&p, 1, 1, 20, g_exe, NULL), KS_INVALID_ARGUMENT);
        assert_null(p);
        auth_hash_pool_free(NULL);
}

typedef struct slow_job {
        auth_hash_pool *p;
        int rc;
        char out[KS_PASSWORD_HASH_MAX];
} slow_job;

static void *run_slow(void *arg)
{
        slow_job *j = arg;

        j->rc = auth_hash_password(j->p, "slow", &slow, j->out, 0);
        return NULL;
}

/* Waits until exactly `running` jobs are hashed and `queued` wait. */
static void wait_state(auth_hash_pool *p, int running, int queued)
{
        struct timespec pause = {0, 1000000};

        for (int i = 0; i < 10000 && (auth_hash_pool_running(p) != running ||
                                      auth_hash_pool_queued(p) != queued);
             i++) {
                nanosleep(&pause, NULL);
        }
        assert_int_equal(auth_hash_pool_running(p), running);
        assert_int_equal(auth_hash_pool_queued(p), queued);
}

static void test_full_queue_refuses_at_once(void **state)
{
        auth_hash_pool *p = NULL;
        slow_job a, b;
        pthread_t ta, tb;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 1, 0, g_exe, NULL), KS_OK);
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.p = b.p = p;
        assert_int_equal(pthread_create(&ta, NULL, run_slow, &a), 0);
        wait_state(p, 1, 0); /* a holds the only hash thread */
        assert_int_equal(pthread_create(&tb, NULL, run_slow, &b), 0);
        wait_state(p, 1, 1); /* b waits: the queue is full */
        assert_int_equal(auth_hash_password(p, "more", &fast, out, 0), KS_RESOURCE_EXHAUSTED);
        assert_true(auth_hash_pool_rejected(p) >= 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_int_equal(a.rc, KS_OK);
        assert_int_equal(b.rc, KS_OK);
        /* Room again. */
        assert_int_equal(auth_hash_password(p, "more", &fast, out, 0), KS_OK);
        auth_hash_pool_free(p);
}

static void test_deadline_drops_a_queued_job(void **state)
{
        auth_hash_pool *p = NULL;
        slow_job a, b;
        pthread_t ta, tb;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 4, 0, g_exe, NULL), KS_OK);
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.p = b.p = p;
        assert_int_equal(pthread_create(&ta, NULL, run_slow, &a), 0);
        wait_state(p, 1, 0);
        assert_int_equal(pthread_create(&tb, NULL, run_slow, &b), 0);
        wait_state(p, 1, 1); /* one slow job runs, one waits */
        /* Already past: it cannot wait for the slow jobs ahead of it. */
        assert_int_equal(auth_hash_password(p, "late", &fast, out, ks_now_ms() - 1),
                         KS_DEADLINE_EXCEEDED);
        assert_int_equal(auth_hash_pool_queued(p), 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_int_equal(a.rc, KS_OK);
        assert_int_equal(b.rc, KS_OK);
        auth_hash_pool_free(p);
}

/* Field n (1-based, after the command) of /proc/pid/stat, or -1. */
static long stat_field(int pid, int n)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
                return -1;
        }
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = strrchr(buf, ')'); /* the command may hold spaces */
        if (p == NULL) {
                return -1;
        }
        p += 2; /* field 3, the state */
        for (int i = 3; i < n; i++) {
                p = strchr(p, ' ');
                if (p == NULL) {
                        return -1;
                }
                p++;
        }
        return strtol(p, NULL, 10);
}

/* True when /proc/pid/environ holds needle. */
static bool environ_has(int pid, const char *needle)
{
        char path[64], buf[65536];
        snprintf(path, sizeof(path), "/proc/%d/environ", pid);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        return memmem(buf, len, needle, strlen(needle)) != NULL;
}

/*
 * Worker i's pid once it has set itself up (its last step: nice at want), or what it has after
 * about ten seconds. A test's jobs may all have gone to another worker while a loaded machine had
 * not yet run this one's start, which its own thread does.
 */
static int worker_set_up(auth_hash_pool *p, int i, int want)
{
        struct timespec pause = {0, 1000000};
        int pid = auth_hash_pool_worker_pid(p, i);

        for (int n = 0; n < 10000 && (pid <= 0 || stat_field(pid, 19) != want); n++) {
                nanosleep(&pause, NULL);
                pid = auth_hash_pool_worker_pid(p, i);
        }
        return pid;
}

/* A worker per thread, in a session of its own, at the pool's nice value, with none of our
 * environment (a secret stays in auth). */
static void test_workers_run_apart(void **state)
{
        auth_hash_pool *p = NULL;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        setenv("KEELSON_PG_DSN", "postgresql://u:hash-worker-secret@h/db", 1);
        setenv("UBSAN_OPTIONS",
               getenv("UBSAN_OPTIONS") ? getenv("UBSAN_OPTIONS") : "print_stacktrace=1", 1);
        assert_int_equal(auth_hash_pool_new(&p, 2, 4, 7, "/proc/self/exe", NULL), KS_OK);
        assert_int_equal(auth_hash_password(p, "a", &fast, out, 0), KS_OK);
        assert_int_equal(auth_hash_password(p, "b", &fast, out, 0), KS_OK);
        for (int i = 0; i < 2; i++) {
                int pid = worker_set_up(p, i, 7);
                assert_true(pid > 0);
                assert_int_not_equal(pid, getpid());
                assert_int_equal(stat_field(pid, 6), pid); /* session id: its own */
                assert_int_equal(stat_field(pid, 19), 7);  /* nice */
                assert_false(environ_has(pid, "hash-worker-secret"));
                assert_true(environ_has(pid, "UBSAN_OPTIONS=")); /* what it is given: seen */
                char path[64], comm[32] = "";
                snprintf(path, sizeof(path), "/proc/%d/comm", pid);
                FILE *f = fopen(path, "r");
                assert_non_null(f);
                assert_non_null(fgets(comm, sizeof(comm), f));
                fclose(f);
                assert_string_equal(comm, "keelson-hash\n");
        }
        assert_int_equal(auth_hash_pool_worker_pid(p, 2), -1);
        unsetenv("KEELSON_PG_DSN");
        auth_hash_pool_free(p);
}

/* A worker that dies is replaced, and the job still gets its answer. */
static void test_killed_worker_is_replaced(void **state)
{
        auth_hash_pool *p = NULL;
        char stored[KS_PASSWORD_HASH_MAX];
        bool ok = false;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 4, 0, "/proc/self/exe", NULL), KS_OK);
        assert_int_equal(auth_hash_password(p, "before", &fast, stored, 0), KS_OK);
        int pid = auth_hash_pool_worker_pid(p, 0);
        assert_true(pid > 0);
        assert_int_equal(kill(pid, SIGKILL), 0);
        assert_int_equal(auth_verify_password(p, "before", stored, &fast, &ok, NULL, 0), KS_OK);
        assert_true(ok);
        int again = auth_hash_pool_worker_pid(p, 0);
        assert_true(again > 0);
        assert_int_not_equal(again, pid);
        auth_hash_pool_free(p);
        /* freed: the worker has exited and been reaped */
        assert_int_equal(kill(again, 0), -1);
        assert_int_equal(errno, ESRCH);
}

/* Runs this binary as a hash worker for parent pid `parent`, fd 3 a socket; its exit status. */
static int worker_status(long parent, bool close_first)
{
        int sv[2];
        char nice[] = "0", par[24];
        pid_t pid;
        posix_spawn_file_actions_t fa;

        snprintf(par, sizeof(par), "%ld", parent);
        char *argv[] = {"/proc/self/exe", AUTH_HASH_WORKER_ARG, nice, par, NULL};
        char *envp[] = {NULL};
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
        assert_int_equal(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp), 0);
        posix_spawn_file_actions_destroy(&fa);
        close(sv[1]);
        if (close_first) {
                close(sv[0]); /* the pool is gone: the worker reads the end and leaves */
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!close_first) {
                close(sv[0]);
        }
        assert_true(WIFEXITED(status));
        return WEXITSTATUS(status);
}

/*
 * A worker serves only the process that started it: started for another
 * parent (its own died before the death signal was armed), it leaves at
 * once; for its parent, it serves until the socket closes. Its parent may
 * be pid 1 (auth in a container), which is not taken for "orphaned".
 */
static void test_worker_checks_its_parent(void **state)
{
        (void)state;
        assert_int_equal(worker_status(getpid() + 1000000L, false), 1);
        assert_int_equal(worker_status(getpid(), true), 0);
}

/* With threads hashing themselves there is no worker process. */
static void test_threads_have_no_worker(void **state)
{
        auth_hash_pool *p = NULL;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 1, 0, NULL, NULL), KS_OK);
        assert_int_equal(auth_hash_pool_worker_pid(p, 0), -1);
        auth_hash_pool_free(p);
}

/* The CPUs hashing is pinned to: the highest numbered of those allowed, never all of them. */
static void test_hash_cpus(void **state)
{
        cpu_set_t allowed, out;

        (void)state;
        CPU_ZERO(&allowed);
        CPU_SET(0, &allowed);
        CPU_SET(2, &allowed);
        CPU_SET(3, &allowed);
        CPU_SET(5, &allowed);
        assert_true(auth_hash_cpus(&allowed, 2, &out));
        assert_int_equal(CPU_COUNT(&out), 2);
        assert_true(CPU_ISSET(5, &out) && CPU_ISSET(3, &out));
        assert_true(auth_hash_cpus(&allowed, 1, &out));
        assert_int_equal(CPU_COUNT(&out), 1);
        assert_true(CPU_ISSET(5, &out));
        assert_true(auth_hash_cpus(&allowed, 3, &out));
        assert_false(CPU_ISSET(0, &out)); /* the first is always left to the cheap calls */
        assert_false(auth_hash_cpus(&allowed, 4, &out));
        assert_false(auth_hash_cpus(&allowed, 9, &out));
        assert_false(auth_hash_cpus(&allowed, 0, &out));
        CPU_ZERO(&allowed);
        CPU_SET(1, &allowed);
        assert_false(auth_hash_cpus(&allowed, 1, &out)); /* one CPU: nothing to keep apart */
}

/* A pinned pool's worker processes run on its CPUs only. */
static void test_workers_pinned(void **state)
{
        auth_hash_pool *p = NULL;
        cpu_set_t allowed, cpus, got;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
        if (!auth_hash_cpus(&allowed, 1, &cpus)) {
                skip(); /* a single CPU: nothing to pin apart */
        }
        assert_int_equal(auth_hash_pool_new(&p, 1, 4, 0, "/proc/self/exe", &cpus), KS_OK);
        assert_int_equal(auth_hash_password(p, "a", &fast, out, 0), KS_OK);
        int pid = auth_hash_pool_worker_pid(p, 0);
        assert_true(pid > 0);
        assert_int_equal(sched_getaffinity(pid, sizeof(got), &got), 0);
        assert_true(CPU_EQUAL(&got, &cpus));
        assert_int_equal(CPU_COUNT(&got), 1);
        auth_hash_pool_free(p);
}

int main(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], AUTH_HASH_WORKER_ARG) == 0) {
                return auth_hash_worker_main(argc, argv);
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup(test_hash_then_verify, use_threads),
            cmocka_unit_test_setup(test_bad_sizes, use_threads),
            cmocka_unit_test_setup(test_full_queue_refuses_at_once, use_threads),
            cmocka_unit_test_setup(test_deadline_drops_a_queued_job, use_threads),
            cmocka_unit_test_setup(test_hash_then_verify, use_processes),
            cmocka_unit_test_setup(test_bad_sizes, use_processes),
            cmocka_unit_test_setup(test_full_queue_refuses_at_once, use_processes),
            cmocka_unit_test_setup(test_deadline_drops_a_queued_job, use_processes),
            cmocka_unit_test(test_workers_run_apart),
            cmocka_unit_test(test_killed_worker_is_replaced),
            cmocka_unit_test(test_threads_have_no_worker),
            cmocka_unit_test(test_worker_checks_its_parent),
            cmocka_unit_test(test_hash_cpus),
            cmocka_unit_test(test_workers_pinned),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
