/*
 * A client that got no reply (a 504, a dropped connection) sends its
 * CreateTransfers batch again. When the first one had committed, the resend
 * answers exists for every event, and the ledger logs nothing at error
 * level: the unique violation the resend meets on its first, guessing run
 * (transfers.c, transfers_tx) is part of the plan, not an alarm for whoever
 * watches the logs.
 *
 * Through the gateway, on the stack's ledger replicas, whose logs (the
 * stack's logs/ledger-*.log) are read from where they stood before the
 * resend.
 */
#include "ledger_it.h"

#include <glob.h>
#include <sys/stat.h>

#define ACCOUNTS 20
#define BATCH    200
#define LOGS_MAX IT_REPLICAS_MAX

static it_stack g_stack;

typedef struct log_marks {
        size_t n;
        char path[LOGS_MAX][600];
        off_t size[LOGS_MAX];
} log_marks;

/* Where each ledger replica's log ends now. */
static void mark_logs(log_marks *m)
{
        char pattern[600];
        glob_t g;

        memset(m, 0, sizeof(*m));
        snprintf(pattern, sizeof(pattern), "%s/logs/ledger-*.log", g_stack.dir);
        assert_int_equal(glob(pattern, 0, NULL, &g), 0);
        for (size_t i = 0; i < g.gl_pathc && m->n < LOGS_MAX; i++, m->n++) {
                struct stat st;
                snprintf(m->path[m->n], sizeof(m->path[0]), "%s", g.gl_pathv[i]);
                m->size[m->n] = stat(g.gl_pathv[i], &st) == 0 ? st.st_size : 0;
        }
        globfree(&g);
        assert_true(m->n > 0);
}

/* The error lines the logs gained since mark_logs, printed; returns their count. */
static int errors_since(const log_marks *m)
{
        char line[8192];
        int n = 0;

        for (size_t i = 0; i < m->n; i++) {
                FILE *f = fopen(m->path[i], "r");
                assert_non_null(f);
                assert_int_equal(fseeko(f, m->size[i], SEEK_SET), 0);
                while (fgets(line, sizeof(line), f) != NULL) {
                        if (strstr(line, "\"level\":\"error\"") != NULL) {
                                print_message("%s: %s", m->path[i], line);
                                n++;
                        }
                }
                fclose(f);
        }
        return n;
}

static void test_resend_of_a_committed_batch_logs_no_error(void **state)
{
        (void)state;
        static lt_account_pb accounts[ACCOUNTS];
        static lt_transfer_pb transfers[BATCH];
        static int results[BATCH];
        lt_tenant t;
        log_marks marks;

        lt_tenant_new(&g_stack, "ledger-resend-log", &t);
        for (int i = 0; i < ACCOUNTS; i++) {
                lt_account_init(&accounts[i], (u128)i + 1, 1, 1, 0);
        }
        lt_create_accounts(&t, accounts, ACCOUNTS, results);
        for (int i = 0; i < BATCH; i++) {
                lt_transfer_init(&transfers[i], lt_u128(7, (uint64_t)i + 1),
                                 (u128)(i % ACCOUNTS) + 1, (u128)((i + 1) % ACCOUNTS) + 1,
                                 (u128)i + 1, 1, 1, 0);
        }
        lt_create_transfers(&t, transfers, BATCH, results);
        for (int i = 0; i < BATCH; i++) {
                assert_int_equal(results[i], TR(ok));
        }

        /* The resend, as after a 504: the batch had committed. */
        double reruns = lt_ledger_metric("keelson_ledger_exact_reruns_total");
        mark_logs(&marks);
        lt_create_transfers(&t, transfers, BATCH, results);
        for (int i = 0; i < BATCH; i++) {
                if (results[i] != TR(exists)) {
                        fail_msg("event %d of the resend: %s", i, lt_tr_name(results[i]));
                }
        }
        /* The path under test ran: the guess met the stored ids, the batch ran again exactly. */
        assert_true(lt_ledger_metric("keelson_ledger_exact_reruns_total") > reruns);
        assert_int_equal(errors_since(&marks), 0);
}

static int setup(void **state)
{
        (void)state;
        return it_stack_load(&g_stack);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_resend_of_a_committed_batch_logs_no_error),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
