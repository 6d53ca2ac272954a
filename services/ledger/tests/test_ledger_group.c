/*
 * Unit tests of group.c, the per-tenant queue that gathers waiting
 * CreateTransfers batches: no database, a recording group function. A gate
 * holds the first leader inside its run while other batches queue behind
 * it, so what each group holds is known in advance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ledger.h"

#define TENANT_A "0f2766d4-810c-4c82-aaf2-ed9f39cf4840"
#define TENANT_B "c0b2f1b9-f776-4bc6-ad6d-ed6802ac06e9"
#define CALLERS  6

/* What the group function saw, and a gate that can hold a run. */
typedef struct recorder {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool hold;     /* a run waits while this is set */
        int held;      /* runs waiting at the gate */
        int runs;      /* groups run */
        int sizes[64]; /* members per group, in run order */
        int order[64]; /* the n of every member, in run order: who went in which order */
        int n_order;
} recorder;

static recorder rec;

static void record(lg_service *svc, const char *tenant, lg_member *const *m, int k)
{
        (void)svc;
        (void)tenant;
        pthread_mutex_lock(&rec.mu);
        rec.held++;
        pthread_cond_broadcast(&rec.cv);
        while (rec.hold) {
                pthread_cond_wait(&rec.cv, &rec.mu);
        }
        rec.held--;
        rec.sizes[rec.runs++] = k;
        for (int i = 0; i < k; i++) {
                rec.order[rec.n_order++] = m[i]->n;
                m[i]->rc = 100 + m[i]->n; /* each gets its own answer back */
        }
        pthread_mutex_unlock(&rec.mu);
}

static void gate(bool hold)
{
        pthread_mutex_lock(&rec.mu);
        rec.hold = hold;
        pthread_cond_broadcast(&rec.cv);
        pthread_mutex_unlock(&rec.mu);
}

static void wait_held(int n)
{
        pthread_mutex_lock(&rec.mu);
        while (rec.held < n) {
                pthread_cond_wait(&rec.cv, &rec.mu);
        }
        pthread_mutex_unlock(&rec.mu);
}

static void sleep_ms(long ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* Until the tenant has n batches waiting (a caller thread has queued). */
static void wait_queued(lg_service *svc, const char *tenant, int n)
{
        for (int i = 0; i < 5000 && lg_group_waiting(svc, tenant) < n; i++) {
                sleep_ms(1);
        }
        assert_int_equal(lg_group_waiting(svc, tenant), n);
}

typedef struct caller {
        lg_service *svc;
        const char *tenant;
        lg_member m;
        int rc;
        pthread_t thread;
} caller;

static void *call(void *arg)
{
        caller *c = arg;
        c->rc = lg_group_run(c->svc, c->tenant, &c->m, record);
        return NULL;
}

static void start(caller *c, lg_service *svc, const char *tenant, int n)
{
        *c = (caller){.svc = svc, .tenant = tenant, .m = {.n = n}};
        assert_int_equal(pthread_create(&c->thread, NULL, call, c), 0);
}

static int setup(void **state)
{
        static lg_service svc;

        memset(&svc, 0, sizeof(svc));
        memset(&rec, 0, sizeof(rec));
        pthread_mutex_init(&rec.mu, NULL);
        pthread_cond_init(&rec.cv, NULL);
        svc.batch_max = 10;
        if (lg_groups_new(&svc.groups) != 0) {
                return -1;
        }
        *state = &svc;
        return 0;
}

static int teardown(void **state)
{
        lg_service *svc = *state;

        lg_groups_free(svc->groups);
        pthread_mutex_destroy(&rec.mu);
        pthread_cond_destroy(&rec.cv);
        return 0;
}

/* A tenant with nothing running: the batch runs at once, alone. */
static void test_alone(void **state)
{
        lg_service *svc = *state;
        lg_member m = {.n = 3};

        assert_int_equal(lg_group_run(svc, TENANT_A, &m, record), 103);
        assert_int_equal(rec.runs, 1);
        assert_int_equal(rec.sizes[0], 1);
        assert_int_equal(lg_group_waiting(svc, TENANT_A), 0);
}

/*
 * Batches that queue while one runs go together next, in arrival order,
 * as many as fit in the batch max; the rest form the group after.
 */
static void test_waiting_batches_go_together(void **state)
{
        lg_service *svc = *state;
        caller c[CALLERS];
        /* The leader (1 event), then 2, 3, 4, 5, 6: 2+3+4 = 9 fit in 10, then 5, then 6. */
        gate(true);
        start(&c[0], svc, TENANT_A, 1);
        wait_held(1);
        for (int i = 1; i < CALLERS; i++) {
                start(&c[i], svc, TENANT_A, i + 1);
                wait_queued(svc, TENANT_A, i);
        }
        gate(false);
        for (int i = 0; i < CALLERS; i++) {
                pthread_join(c[i].thread, NULL);
                assert_int_equal(c[i].rc, 100 + i + 1);
        }
        assert_int_equal(rec.runs, 4);
        int sizes[4] = {1, 3, 1, 1};
        for (int i = 0; i < 4; i++) {
                assert_int_equal(rec.sizes[i], sizes[i]);
        }
        for (int i = 0; i < CALLERS; i++) {
                assert_int_equal(rec.order[i], i + 1); /* first come, first run */
        }
        assert_int_equal(lg_group_waiting(svc, TENANT_A), 0);
}

/* Another tenant's batch never waits behind this one's: it runs while the first is held. */
static void test_tenant_not_blocked(void **state)
{
        lg_service *svc = *state;
        caller a, b;

        gate(true);
        start(&a, svc, TENANT_A, 1);
        wait_held(1);
        start(&b, svc, TENANT_B, 2);
        wait_held(2); /* B reached its run while A's is held: it did not queue */
        assert_int_equal(lg_group_waiting(svc, TENANT_B), 0);
        gate(false);
        pthread_join(a.thread, NULL);
        pthread_join(b.thread, NULL);
        assert_int_equal(a.rc, 101);
        assert_int_equal(b.rc, 102);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_alone, setup, teardown),
            cmocka_unit_test_setup_teardown(test_waiting_batches_go_together, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tenant_not_blocked, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
