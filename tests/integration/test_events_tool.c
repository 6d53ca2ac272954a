/*
 * tools/keelson_events.c, the first external event subscriber, against the
 * stack: started on the stack's broker, it prints the users.admin_summary
 * event of a sign-up as a JSON line with the payload decoded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth_it.h"
#include "it_support.h"

static void test_prints_the_admin_summary_event_of_a_signup(void **state)
{
        (void)state;
        const char *bin = getenv("KEELSON_IT_EVENTS_BIN");
        assert_non_null(bin);
        assert_int_equal(ait_setup(NULL), 0);

        char cmd[1024];
        /* "echo $$; exec": the first line is the pid, to stop the tool when done */
        snprintf(cmd, sizeof(cmd), "echo $$; exec timeout 30 %s --broker %s --count 50 users.", bin,
                 ait_stack.broker_url);
        FILE *out = popen(cmd, "r");
        assert_non_null(out);
        char pid_line[32];
        assert_non_null(fgets(pid_line, sizeof(pid_line), out));
        pid_t pid = (pid_t)atoi(pid_line);
        assert_true(pid > 0);
        sleep(1); /* pub/sub: the subscriber hears only what is published after it joined */

        ait_user u;
        ait_signup("events-tool", "Events Tool Inc", &u);

        bool found = false;
        char line[4096];
        while (!found && fgets(line, sizeof(line), out) != NULL) {
                json_t *j = json_loads(line, 0, NULL);
                assert_non_null(j); /* every line is one JSON object */
                const char *topic = json_string_value(json_object_get(j, "topic"));
                const char *tenant = json_string_value(json_object_get(j, "tenantId"));
                json_t *msg = json_object_get(j, "message");
                assert_string_equal(topic, "users.admin_summary"); /* the prefix filter held */
                if (tenant != NULL && strcmp(tenant, u.tenant_id) == 0) {
                        assert_non_null(msg);
                        assert_string_equal(json_string_value(json_object_get(msg, "tenantId")),
                                            u.tenant_id);
                        assert_string_equal(json_string_value(json_object_get(msg, "reason")),
                                            "SignUp");
                        assert_non_null(json_object_get(j, "eventId"));
                        found = true;
                }
                json_decref(j);
        }
        kill(pid, SIGTERM);
        pclose(out);
        assert_true(found);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_prints_the_admin_summary_event_of_a_signup),
        };
        return cmocka_run_group_tests_name("events_tool", tests, NULL, NULL);
}
