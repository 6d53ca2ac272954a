/*
 * Single-use tokens under concurrent use, through the gateway: two
 * ResetPassword calls with one reset token, and two AcceptInvitation calls
 * with one invitation token (for a new address and for an existing
 * account), sent at the same moment from two threads released by one
 * barrier, one through each gateway replica of the stack (so that both auth
 * replicas may take part). Exactly one succeeds; the other gets the refusal
 * of a used token, byte for byte the refusal of a token never issued, and
 * leaves nothing behind: its password is not set, it joins nobody, it
 * publishes nothing. Each case runs several rounds: a claim that were not
 * atomic would let both through in some of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>

#include "auth_it.h"

#define ROUNDS 4

/* The two contenders' passwords: whichever wins, its password is the one in effect. */
static const char *const contender_passwords[2] = {"first contender's password",
                                                   "second contender's password"};

/* ---- two calls at once -------------------------------------------------------- */

/*
 * One of the two calls. Its thread only calls: cmocka's assertions jump,
 * which only the test's own thread may do, so the test checks the replies
 * once both threads are done.
 */
typedef struct contender {
        const char *gateway_url;
        const char *method;
        char body[1024];
        pthread_barrier_t *start;
        it_http_response reply;
        int rc; /* it_auth_call's: 0 when an HTTP reply came */
} contender;

static void *contender_main(void *arg)
{
        contender *c = arg;

        pthread_barrier_wait(c->start);
        c->rc = it_auth_call(c->gateway_url, c->method, c->body, NULL, NULL, &c->reply);
        return NULL;
}

/* Sends both calls at once, each through another gateway when the stack has two. */
static void race(contender c[2])
{
        pthread_barrier_t start;
        pthread_t t[2];

        assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
        for (int i = 0; i < 2; i++) {
                c[i].gateway_url = ait_stack.gateway_urls[i % ait_stack.n_gateways];
                c[i].start = &start;
                memset(&c[i].reply, 0, sizeof(c[i].reply));
                assert_int_equal(pthread_create(&t[i], NULL, contender_main, &c[i]), 0);
        }
        for (int i = 0; i < 2; i++) {
                pthread_join(t[i], NULL);
        }
        pthread_barrier_destroy(&start);
        for (int i = 0; i < 2; i++) {
                if (c[i].rc != 0) {
                        fail_msg("%s: no HTTP reply", c[i].method);
                }
        }
}

/* Exactly one reply is 200, the other equals refusal (status and body); returns the winner. */
static int one_winner(contender c[2], const it_http_response *refusal)
{
        int winners = 0, w = -1;

        for (int i = 0; i < 2; i++) {
                if (c[i].reply.status == 200) {
                        winners++;
                        w = i;
                }
        }
        if (winners != 1) {
                fail_msg("%s: %d of 2 concurrent calls with one token succeeded (%ld %.200s / %ld"
                         " %.200s)",
                         c[0].method, winners, c[0].reply.status, c[0].reply.body,
                         c[1].reply.status, c[1].reply.body);
        }
        const it_http_response *lost = &c[1 - w].reply;
        if (lost->status != refusal->status || lost->body_len != refusal->body_len ||
            memcmp(lost->body, refusal->body, lost->body_len) != 0) {
                fail_msg("%s: the loser got HTTP %ld %.300s, not the used-token refusal %.300s",
                         c[0].method, lost->status, lost->body, refusal->body);
        }
        return w;
}

static void free_replies(contender c[2])
{
        it_http_response_free(&c[0].reply);
        it_http_response_free(&c[1].reply);
}

/* ---- helpers -------------------------------------------------------------------- */

/* ---- ResetPassword ---------------------------------------------------------------- */

static void test_concurrent_resets_one_wins(void **state)
{
        char token[AIT_TOKEN_MAX], body[1024], current[64];
        it_http_response refusal, r;
        contender c[2];
        ait_user u;
        long mark;

        (void)state;
        ait_signup("it-race-reset", "Race Reset", &u);
        snprintf(current, sizeof(current), "%s", AIT_PASSWORD);
        AIT_BODY(body, "{s:s, s:s}", "token", "never-issued-reset-token", "newPassword",
                 contender_passwords[0]);
        ait_call("ResetPassword", body, NULL, &refusal);
        assert_int_equal(refusal.status, 404);
        for (int round = 0; round < ROUNDS; round++) {
                mark = ait_outbox_mark();
                AIT_BODY(body, "{s:s}", "email", u.email);
                ait_call("ForgotPassword", body, NULL, &r);
                assert_int_equal(r.status, 200);
                it_http_response_free(&r);
                assert_int_equal(ait_mail_token(mark, u.email, "password_reset", token), 1);
                assert_int_equal(ait_login_status(u.email, current),
                                 200); /* a session for the winner to revoke */

                memset(c, 0, sizeof(c));
                for (int i = 0; i < 2; i++) {
                        c[i].method = "ResetPassword";
                        AIT_BODY(c[i].body, "{s:s, s:s}", "token", token, "newPassword",
                                 contender_passwords[i]);
                }
                mark = ait_outbox_mark();
                race(c);
                int w = one_winner(c, &refusal);
                free_replies(c);

                /* The winner's password is set; the loser's and the one before are not. */
                assert_int_equal(ait_login_status(u.email, contender_passwords[w]), 200);
                assert_int_equal(ait_login_status(u.email, contender_passwords[1 - w]), 401);
                if (strcmp(current, contender_passwords[w]) != 0) {
                        assert_int_equal(ait_login_status(u.email, current), 401);
                }
                snprintf(current, sizeof(current), "%s", contender_passwords[w]);
                /* The winner's revocation, and nothing else: the loser wrote nothing. */
                assert_int_equal(ait_events(mark, "auth.context_revoked", NULL), 1);
                assert_int_equal(ait_published_after(mark), 1);
        }
        it_http_response_free(&refusal);
}

/* ---- AcceptInvitation --------------------------------------------------------------- */

/*
 * Two accepts of one invitation to email: a new address (each contender
 * with its own password), or an existing account (both prove its password).
 */
static void accept_race(const ait_user *owner, const char *email, bool existing,
                        const it_http_response *refusal)
{
        char token[AIT_TOKEN_MAX], winner_id[AIT_ID_MAX];
        const char *params[2] = {owner->tenant_id, email};
        contender c[2];
        long mark, audit;
        json_t *j, *who;

        ait_invite(owner, email, "member", token);
        memset(c, 0, sizeof(c));
        for (int i = 0; i < 2; i++) {
                c[i].method = "AcceptInvitation";
                AIT_BODY(c[i].body, "{s:s, s:s, s:s}", "token", token, "password",
                         existing ? AIT_PASSWORD : contender_passwords[i], "displayName",
                         i == 0 ? "First" : "Second");
        }
        mark = ait_outbox_mark();
        audit = ait_audit_mark();
        race(c);
        int w = one_winner(c, refusal);
        j = ait_json(&c[w].reply);
        snprintf(winner_id, sizeof(winner_id), "%s", ait_str(j, "userId"));
        who = ait_ok("WhoAmI", "{}", ait_str(j, "sessionToken"));
        assert_string_equal(ait_str(who, "email"), email);
        assert_string_equal(ait_str(who, "tenantId"), owner->tenant_id);
        assert_string_equal(ait_str(who, "role"), "member");
        json_decref(who);
        json_decref(j);
        free_replies(c);

        /* One account for the address, one membership, the invitation accepted by it. */
        assert_int_equal(
            ait_sql_long("SELECT count(*) FROM auth.users WHERE email = $1", 1, &params[1]), 1);
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.memberships m JOIN auth.users u"
                                      " ON u.id = m.user_id WHERE m.tenant_id = $1::uuid"
                                      " AND u.email = $2",
                                      2, params),
                         1);
        params[1] = winner_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.invitations WHERE tenant_id ="
                                      " $1::uuid AND accepted_user_id = $2::uuid",
                                      2, params),
                         1);
        /* One event and one audit row: the loser's transaction left nothing. */
        ait_assert_one_summary(mark, owner->tenant_id, "AcceptInvitation");
        assert_int_equal(ait_published_after(mark), 1);
        assert_int_equal(ait_audit_rows(audit, owner->tenant_id, ""), 1);
        assert_int_equal(ait_audit_rows(audit, owner->tenant_id, "invitation.accepted"), 1);
        if (!existing) {
                assert_int_equal(ait_login_status(email, contender_passwords[w]), 200);
                assert_int_equal(ait_login_status(email, contender_passwords[1 - w]), 401);
        }
}

static void test_concurrent_accepts_one_wins(void **state)
{
        char email[AIT_EMAIL_MAX], body[1024];
        it_http_response refusal;
        ait_user owner, other;

        (void)state;
        ait_signup("it-race-inv", "Race Invite", &owner);
        AIT_BODY(body, "{s:s, s:s}", "token", "never-issued-invitation", "password", AIT_PASSWORD);
        ait_call("AcceptInvitation", body, NULL, &refusal);
        assert_int_equal(refusal.status, 404);
        for (int round = 0; round < ROUNDS; round++) {
                it_unique_email("it-race-inv-new", email, sizeof(email));
                accept_race(&owner, email, false, &refusal);
        }
        for (int round = 0; round < ROUNDS; round++) {
                ait_signup("it-race-inv-old", "Race Elsewhere", &other);
                accept_race(&owner, other.email, true, &refusal);
        }
        it_http_response_free(&refusal);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_concurrent_resets_one_wins),
            cmocka_unit_test(test_concurrent_accepts_one_wins),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
