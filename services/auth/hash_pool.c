/*
 * The hash pool: scrypt on threads of its own, off the RPC workers' path.
 *
 * A password hash costs 25-50 ms of one core. If RPC workers ran scrypt
 * themselves, a burst of logins would occupy every worker and a cheap
 * ResolveContext would wait behind them. Here a fixed number of hash
 * threads (KEELSON_AUTH_HASH_WORKERS, default the number of cores: more
 * would only share the same cores) takes jobs from a bounded queue
 * (KEELSON_AUTH_HASH_QUEUE_MAX). An RPC worker with a hash to do queues a
 * job and waits for it; when the queue is full the job is refused at once
 * (resource_exhausted) instead of waiting. So at most workers + queue_max
 * RPC workers are ever blocked on hashing, main.c checks that this leaves
 * RPC workers free, and those keep answering cheap methods during a login
 * storm.
 *
 * Free workers are not enough when the cores themselves are busy with
 * scrypt: a ResolveContext needs CPU too (this process, the broker,
 * PostgreSQL). So each hash thread hands its scrypt to a hash worker
 * process of its own, at a lower priority in a scheduling group of its own
 * (KEELSON_AUTH_HASH_NICE, default 10; hash_worker.c says why a process):
 * a cheap call gets a core first and logins use what is left. Nothing
 * starves: with no cheap work, hashes use every core. (Tests may let the
 * threads hash themselves: auth_hash_pool_new with no worker_exe.)
 *
 * A job lives on its caller's stack: the caller waits until the job is done,
 * or removes it from the queue itself when its deadline passes first (a
 * running job is always waited for: scrypt cannot be interrupted, and the
 * wait is bounded by one hash).
 */
#include "auth.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_log.h"

#define HASH_WORKERS_MAX 256
#define HASH_QUEUE_MAX   65536
/* A call without a deadline still waits at most this long in the queue. */
#define NO_DEADLINE_WAIT_MS 60000

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
        job_state state;
        auth_hash_work work;
        struct job *next;
} job;

struct auth_hash_pool {
        pthread_mutex_t mu;
        pthread_cond_t work_cv; /* a job was queued, or stop */
        pthread_cond_t done_cv; /* a job finished */
        job *head, *tail;
        int queued;
        int running;
        int queue_max;
        bool stop;
        pthread_t *threads;
        auth_hasher *hashers; /* one per thread, with worker_exe */
        int n_threads;
        int nice;
        bool pinned; /* the threads (and their workers) run on cpus only */
        cpu_set_t cpus;
        char *worker_exe; /* NULL: the threads hash themselves */
        atomic_uint_fast64_t rejected;
        ks_gauge *queue_gauge;
        ks_counter *rejected_counter;
};

typedef struct thread_arg {
        auth_hash_pool *p;
        int index;
} thread_arg;

static void *worker_main(void *arg)
{
        thread_arg ta = *(thread_arg *)arg;
        free(arg);
        auth_hash_pool *p = ta.p;
        auth_hasher *h = p->worker_exe != NULL ? &p->hashers[ta.index] : NULL;
        job *j;

        /* Before its worker starts: a process inherits its parent thread's CPUs. */
        if (p->pinned && pthread_setaffinity_np(pthread_self(), sizeof(p->cpus), &p->cpus) != 0) {
                ks_log_warn(NULL, "cannot pin the hash thread to its CPUs", NULL);
        }
        /* Linux: a thread's nice value is its own (PRIO_PROCESS with its tid). */
        if (h == NULL && p->nice > 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), p->nice) != 0) {
                ks_log_warn(NULL, "cannot lower the hash thread's priority", NULL);
        }
        /* Started here: the worker is killed if this thread goes (PR_SET_PDEATHSIG). */
        if (h != NULL) {
                (void)auth_hasher_start(h, p->worker_exe, p->nice); /* else: at its first job */
        }
        pthread_mutex_lock(&p->mu);
        for (;;) {
                while (!p->stop && p->head == NULL) {
                        pthread_cond_wait(&p->work_cv, &p->mu);
                }
                if (p->head == NULL) {
                        break; /* stopping, and nothing left to do */
                }
                j = p->head;
                p->head = j->next;
                if (p->head == NULL) {
                        p->tail = NULL;
                }
                p->queued--;
                ks_gauge_set(p->queue_gauge, p->queued);
                j->state = JOB_RUNNING;
                p->running++;
                pthread_mutex_unlock(&p->mu);
                if (h != NULL) {
                        (void)auth_hasher_run(h, p->worker_exe, p->nice, &j->work);
                } else {
                        auth_hash_compute(&j->work);
                }
                pthread_mutex_lock(&p->mu);
                p->running--;
                j->state = JOB_DONE;
                pthread_cond_broadcast(&p->done_cv);
        }
        pthread_mutex_unlock(&p->mu);
        if (h != NULL) {
                auth_hasher_stop(h);
        }
        return NULL;
}

bool auth_hash_cpus(const cpu_set_t *allowed, int workers, cpu_set_t *out)
{
        int n = CPU_COUNT(allowed), taken = 0;
        if (workers < 1 || workers >= n) {
                return false;
        }
        CPU_ZERO(out);
        for (size_t cpu = CPU_SETSIZE; cpu-- > 0 && taken < workers;) {
                if (CPU_ISSET(cpu, allowed)) {
                        CPU_SET(cpu, out);
                        taken++;
                }
        }
        return true;
}

int auth_hash_pool_new(auth_hash_pool **out, int workers, int queue_max, int nice,
                       const char *worker_exe, const cpu_set_t *cpus)
{
        auth_hash_pool *p;

        *out = NULL;
        if (workers < 1 || workers > HASH_WORKERS_MAX || queue_max < 1 ||
            queue_max > HASH_QUEUE_MAX || nice < 0 || nice > 19 ||
            (p = calloc(1, sizeof(*p))) == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        p->queue_max = queue_max;
        p->nice = nice;
        if (cpus != NULL) {
                p->pinned = true;
                p->cpus = *cpus;
        }
        /* done_cv's timed waits read the monotonic clock: a caller's deadline is moved onto it. */
        if (ks_cond_init_monotonic(&p->done_cv) != 0) {
                free(p);
                return KS_INTERNAL;
        }
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->work_cv, NULL);
        p->queue_gauge = ks_gauge_get(ks_metrics_default(), "keelson_auth_hash_queue_depth",
                                      "Password hash jobs waiting for a hash thread", NULL);
        p->rejected_counter =
            ks_counter_get(ks_metrics_default(), "keelson_auth_hash_rejected_total",
                           "Password hash jobs refused because the hash queue was full", NULL);
        if ((p->threads = calloc((size_t)workers, sizeof(*p->threads))) == NULL ||
            (p->hashers = calloc((size_t)workers, sizeof(*p->hashers))) == NULL ||
            (worker_exe != NULL && (p->worker_exe = strdup(worker_exe)) == NULL)) {
                auth_hash_pool_free(p);
                return KS_INTERNAL;
        }
        for (int i = 0; i < workers; i++) {
                thread_arg *ta = malloc(sizeof(*ta));
                p->hashers[i] = (auth_hasher){.pid = -1, .fd = -1};
                if (ta == NULL) {
                        auth_hash_pool_free(p);
                        return KS_INTERNAL;
                }
                *ta = (thread_arg){.p = p, .index = i};
                if (pthread_create(&p->threads[i], NULL, worker_main, ta) != 0) {
                        free(ta);
                        auth_hash_pool_free(p);
                        return KS_INTERNAL;
                }
                p->n_threads++;
        }
        *out = p;
        return KS_OK;
}

void auth_hash_pool_free(auth_hash_pool *p)
{
        if (p == NULL) {
                return;
        }
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads; i++) {
                pthread_join(p->threads[i], NULL);
        }
        free(p->threads);
        free(p->hashers);
        free(p->worker_exe);
        pthread_cond_destroy(&p->done_cv);
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
}

/* When a queued job gives up: the caller's deadline, or NO_DEADLINE_WAIT_MS without one. */
static struct timespec queue_deadline(int64_t deadline_unix_ms)
{
        ks_deadline d = deadline_unix_ms > 0 ? ks_deadline_from_unix_ms(deadline_unix_ms)
                                             : ks_deadline_after_ms(NO_DEADLINE_WAIT_MS);

        return ks_deadline_timespec(d);
}

/* Removes a job that is still queued (under the lock). */
static void unlink_job(auth_hash_pool *p, job *j)
{
        job **pp = &p->head, *prev = NULL;

        while (*pp != NULL && *pp != j) {
                prev = *pp;
                pp = &(*pp)->next;
        }
        if (*pp == NULL) {
                return;
        }
        *pp = j->next;
        if (p->tail == j) {
                p->tail = prev;
        }
        p->queued--;
        ks_gauge_set(p->queue_gauge, p->queued);
}

static int submit_and_wait(auth_hash_pool *p, job *j, int64_t deadline_unix_ms)
{
        struct timespec until = queue_deadline(deadline_unix_ms);
        int rc = KS_OK;

        pthread_mutex_lock(&p->mu);
        if (p->stop || p->queued >= p->queue_max) {
                pthread_mutex_unlock(&p->mu);
                atomic_fetch_add(&p->rejected, 1);
                ks_counter_inc(p->rejected_counter);
                return p->stop ? KS_UNAVAILABLE : KS_RESOURCE_EXHAUSTED;
        }
        j->state = JOB_QUEUED;
        j->next = NULL;
        if (p->tail != NULL) {
                p->tail->next = j;
        } else {
                p->head = j;
        }
        p->tail = j;
        p->queued++;
        ks_gauge_set(p->queue_gauge, p->queued);
        pthread_cond_signal(&p->work_cv);
        while (j->state != JOB_DONE) {
                if (j->state == JOB_QUEUED &&
                    pthread_cond_timedwait(&p->done_cv, &p->mu, &until) == ETIMEDOUT &&
                    j->state == JOB_QUEUED) {
                        unlink_job(p, j);
                        rc = KS_DEADLINE_EXCEEDED;
                        break;
                }
                if (j->state == JOB_RUNNING) {
                        pthread_cond_wait(&p->done_cv, &p->mu);
                }
        }
        pthread_mutex_unlock(&p->mu);
        return rc != KS_OK ? rc : j->work.rc;
}

int auth_hash_password(auth_hash_pool *p, const char *password, const ks_scrypt_params *params,
                       char out[KS_PASSWORD_HASH_MAX], int64_t deadline_unix_ms)
{
        job j;
        int rc;

        memset(&j, 0, sizeof(j));
        j.work.password = password;
        j.work.params = *params;
        rc = submit_and_wait(p, &j, deadline_unix_ms);
        if (rc == KS_OK) {
                memcpy(out, j.work.out, KS_PASSWORD_HASH_MAX);
        }
        explicit_bzero(&j, sizeof(j));
        return rc;
}

int auth_verify_password(auth_hash_pool *p, const char *password, const char *stored,
                         const ks_scrypt_params *current, bool *ok, bool *needs_rehash,
                         int64_t deadline_unix_ms)
{
        job j;
        int rc;

        memset(&j, 0, sizeof(j));
        j.work.verify = true;
        j.work.password = password;
        j.work.stored = stored;
        j.work.params = *current;
        rc = submit_and_wait(p, &j, deadline_unix_ms);
        *ok = rc == KS_OK && j.work.ok;
        if (needs_rehash != NULL) {
                *needs_rehash = rc == KS_OK && j.work.needs_rehash;
        }
        return rc;
}

int auth_hash_pool_worker_pid(auth_hash_pool *p, int i)
{
        int pid;

        if (i < 0 || i >= p->n_threads || p->worker_exe == NULL) {
                return -1;
        }
        pthread_mutex_lock(&p->mu);
        pid = p->hashers[i].pid;
        pthread_mutex_unlock(&p->mu);
        return pid;
}

int auth_hash_pool_queued(auth_hash_pool *p)
{
        int n;

        pthread_mutex_lock(&p->mu);
        n = p->queued;
        pthread_mutex_unlock(&p->mu);
        return n;
}

bool auth_hash_pool_full(auth_hash_pool *p)
{
        bool full;

        pthread_mutex_lock(&p->mu);
        full = p->queued >= p->queue_max;
        pthread_mutex_unlock(&p->mu);
        if (full) {
                /* The caller refuses on it: counted like a refused submission. */
                atomic_fetch_add(&p->rejected, 1);
                ks_counter_inc(p->rejected_counter);
        }
        return full;
}

int auth_hash_pool_running(auth_hash_pool *p)
{
        int n;

        pthread_mutex_lock(&p->mu);
        n = p->running;
        pthread_mutex_unlock(&p->mu);
        return n;
}

ks_counter *auth_hash_pool_rejected_counter(auth_hash_pool *p)
{
        return p->rejected_counter;
}

uint64_t auth_hash_pool_rejected(auth_hash_pool *p)
{
        return (uint64_t)atomic_load(&p->rejected);
}
