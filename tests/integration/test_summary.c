/*
 * keelson-summary through the gateway, with the stack's two summary
 * replicas, real Redis and PostgreSQL: repeated reads run no SQL (the
 * replicas' keelson_summary_sql_statements_total), every admin write in auth
 * changes the next summary on both replicas long before the TTL, logins,
 * lockouts, refused writes and writes rolled back after every statement ran
 * leave the cache alone, a fill racing an invalidation is never served
 * (forced with the test-only fill pause the stack enables), a failed summary
 * is logged with its request id and timed, a lost generation does not keep
 * the local level away past the TTL, Redis stopped means PostgreSQL answers
 * until caching resumes, and a tenant sees only its own counts.
 *
 * Billing's figures: a tenant's subscriptions in every state, MRR per
 * currency (a year's 12,000 is 1,000 a month), open and past-due amounts;
 * a billing write invalidates the cached summary like an admin write (the
 * next answer is computed, then cached again) and a fill holding billing's
 * answer while one commits is never served; a billing that does not answer
 * (a lock holds its table, so the stack's own replicas hang past
 * KEELSON_SUMMARY_BILLING_TIMEOUT_MS) leaves the rest of the summary served
 * and its billing part "unavailable", cached only for
 * KEELSON_SUMMARY_PARTIAL_TTL_MS; and a value of the older Redis format (an
 * older replica's, in a rolling deploy) is a miss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <time.h>

#include "billing_it.h"

#define SUMMARY_PATH      "/keelson.summary.v1.AdminSummaryService/GetSummary"
#define WAIT_MS           10000 /* event delivery bound; the replicas' TTL is 30 s */
#define SM_VALUE_TEXT_MAX 4096  /* a cached value's text in Redis (services/summary/summary.h) */
#define REPLICA_MAX       IT_REPLICAS_MAX

static int g_ports[REPLICA_MAX];
static int g_n;

static int setup(void **state)
{
        if (ait_setup(state) != 0) {
                return -1;
        }
        g_n = it_stack_ports("KEELSON_IT_SUMMARY_HEALTH_PORTS", g_ports, REPLICA_MAX);
        return g_n >= 2 ? 0 : -1;
}

static double metric(int replica, const char *series)
{
        return it_metric_at(g_ports[replica], series);
}

static double metric_sum(const char *series)
{
        double sum = 0;

        for (int i = 0; i < g_n; i++) {
                sum += metric(i, series);
        }
        return sum;
}

#define SQL        "keelson_summary_sql_statements_total"
#define SERVED     "keelson_summary_duration_seconds_count"
#define LOCAL_HITS "keelson_summary_cache_hits_total{level=\"local\"}"

/* GetSummary as token's caller, with X-Request-Id rid unless NULL; the whole response. */
static void summary_call(const char *token, const char *body, const char *rid, it_http_response *r)
{
        it_request req = {.token = token, .request_id = rid};

        assert_int_equal(
            it_connect(ait_stack.gateway_url, SUMMARY_PATH, body, strlen(body), &req, r), 0);
}

/* GetSummary as token's caller; the reply as JSON (NULL unless HTTP 200). */
static json_t *summary_body(const char *token, const char *body, long *status)
{
        it_http_response r;
        json_t *j = NULL;

        summary_call(token, body, NULL, &r);
        *status = r.status;
        if (r.status == 200) {
                j = ait_json(&r);
        }
        it_http_response_free(&r);
        return j;
}

static json_t *summary(const char *token)
{
        long status = 0;
        json_t *j = summary_body(token, "{}", &status);

        if (j == NULL) {
                fail_msg("GetSummary: HTTP %ld", status);
        }
        return j;
}

/* proto3 JSON: int64 as a string, absent when 0. */
static long num(json_t *j, const char *obj, const char *key)
{
        json_t *o = obj != NULL ? json_object_get(j, obj) : j;
        json_t *v = json_object_get(o, key);

        if (json_is_string(v)) {
                return strtol(json_string_value(v), NULL, 10);
        }
        return json_is_integer(v) ? (long)json_integer_value(v) : 0;
}

typedef struct figures {
        long active, invited, locked, disabled, owner, admin, member, viewer, pending, keys;
} figures;

static void read_figures(json_t *j, figures *f)
{
        f->active = num(j, "users", "active");
        f->invited = num(j, "users", "invited");
        f->locked = num(j, "users", "locked");
        f->disabled = num(j, "users", "disabled");
        f->owner = num(j, "members", "owner");
        f->admin = num(j, "members", "admin");
        f->member = num(j, "members", "member");
        f->viewer = num(j, "members", "viewer");
        f->pending = num(j, NULL, "pendingInvitations");
        f->keys = num(j, NULL, "activeApiKeys");
}

static void assert_figures(const figures *got, const figures *want)
{
        assert_int_equal(got->active, want->active);
        assert_int_equal(got->invited, want->invited);
        assert_int_equal(got->locked, want->locked);
        assert_int_equal(got->disabled, want->disabled);
        assert_int_equal(got->owner, want->owner);
        assert_int_equal(got->admin, want->admin);
        assert_int_equal(got->member, want->member);
        assert_int_equal(got->viewer, want->viewer);
        assert_int_equal(got->pending, want->pending);
        assert_int_equal(got->keys, want->keys);
}

static bool figures_equal(const figures *a, const figures *b)
{
        return a->active == b->active && a->invited == b->invited && a->locked == b->locked &&
               a->disabled == b->disabled && a->owner == b->owner && a->admin == b->admin &&
               a->member == b->member && a->viewer == b->viewer && a->pending == b->pending &&
               a->keys == b->keys;
}

/* ---- billing's figures in a reply -------------------------------------------------- */

#define AMOUNTS_MAX 4

typedef struct money {
        const char *currency; /* NULL ends a list */
        long amount;
} money;

/* What the reply's "billing" must say, its state being "ok". */
typedef struct billing_figures {
        long active, trialing, past_due, paused, canceled, invoices_open;
        money mrr[AMOUNTS_MAX + 1], open[AMOUNTS_MAX + 1], past_due_amount[AMOUNTS_MAX + 1];
} billing_figures;

/* The list at key is want: the same currencies in the same order, the same amounts. */
static bool amounts_equal(json_t *billing, const char *key, const money *want)
{
        json_t *list = json_object_get(billing, key); /* absent: empty */
        size_t n = 0;

        while (n < AMOUNTS_MAX && want[n].currency != NULL) {
                n++;
        }
        if (json_array_size(list) != n) {
                return false;
        }
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(list, i);
                if (strcmp(bit_str(e, "currency"), want[i].currency) != 0 ||
                    num(e, NULL, "amount") != want[i].amount) {
                        return false;
                }
        }
        return true;
}

static bool billing_equal(json_t *j, const billing_figures *w)
{
        json_t *b = json_object_get(j, "billing");

        return strcmp(bit_str(b, "state"), "ok") == 0 &&
               num(b, "subscriptions", "active") == w->active &&
               num(b, "subscriptions", "trialing") == w->trialing &&
               num(b, "subscriptions", "pastDue") == w->past_due &&
               num(b, "subscriptions", "paused") == w->paused &&
               num(b, "subscriptions", "canceled") == w->canceled &&
               num(b, NULL, "invoicesOpen") == w->invoices_open &&
               amounts_equal(b, "mrr", w->mrr) && amounts_equal(b, "openAmount", w->open) &&
               amounts_equal(b, "pastDueAmount", w->past_due_amount);
}

static void assert_billing(json_t *j, const billing_figures *w)
{
        if (!billing_equal(j, w)) {
                char *s = json_dumps(json_object_get(j, "billing"), JSON_COMPACT);
                fail_msg("billing figures not as expected: %s", s != NULL ? s : "(none)");
        }
}

/*
 * Reads until every replica has answered at least twice since the call
 * began, asserting each answer (billing's figures too, unless bw is NULL):
 * both replicas are warm (or checked) after.
 */
static void read_all_on_every_replica(const char *token, const figures *want,
                                      const billing_figures *bw, const char *tenant)
{
        double before[REPLICA_MAX];
        bool done = false;

        for (int i = 0; i < g_n; i++) {
                before[i] = metric(i, SERVED);
        }
        for (int n = 0; n < 200 && !done; n++) {
                json_t *j = summary(token);
                figures f;
                read_figures(j, &f);
                assert_figures(&f, want);
                if (bw != NULL) {
                        assert_billing(j, bw);
                }
                assert_string_equal(ait_str(j, "tenantId"), tenant);
                json_decref(j);
                done = true;
                for (int i = 0; i < g_n; i++) {
                        done = done && metric(i, SERVED) >= before[i] + 2;
                }
        }
        assert_true(done);
}

static void read_on_every_replica(const char *token, const figures *want, const char *tenant)
{
        read_all_on_every_replica(token, want, NULL, tenant);
}

/* Polls until the summary shows want (bounded far below the TTL), then checks every replica. */
static void wait_figures(const char *token, const figures *want, const char *tenant)
{
        figures f = {0};

        for (int waited = 0; waited <= WAIT_MS; waited += 50) {
                json_t *j = summary(token);
                read_figures(j, &f);
                json_decref(j);
                if (figures_equal(&f, want)) {
                        read_on_every_replica(token, want, tenant);
                        return;
                }
                it_sleep_ms(50);
        }
        fail_msg("summary unchanged %d ms after the write (active %ld, locked %ld, pending %ld,"
                 " keys %ld)",
                 WAIT_MS, f.active, f.locked, f.pending, f.keys);
}

/*
 * One command to the stack's Redis (hiredis's format); a string reply is
 * copied to text (when not NULL), an integer or a string is returned as a
 * number (nil: 0, anything else: -1).
 */
static long redis_run(char *text, size_t len, const char *fmt, ...)
{
        char host[256] = "127.0.0.1";
        int port = 6379;
        const char *p = strrchr(ait_stack.redis_url, ':');
        redisContext *c;
        redisReply *rep;
        va_list ap;
        long v = -1;

        if (p != NULL) {
                port = atoi(p + 1);
        }
        c = redisConnect(host, port);
        assert_true(c != NULL && c->err == 0);
        va_start(ap, fmt);
        rep = redisvCommand(c, fmt, ap);
        va_end(ap);
        assert_non_null(rep);
        if (text != NULL) {
                snprintf(text, len, "%s", rep->type == REDIS_REPLY_STRING ? rep->str : "");
        }
        if (rep->type == REDIS_REPLY_NIL) {
                v = 0;
        } else if (rep->type == REDIS_REPLY_STRING) {
                v = atol(rep->str);
        } else if (rep->type == REDIS_REPLY_INTEGER) {
                v = (long)rep->integer;
        }
        freeReplyObject(rep);
        redisFree(c);
        return v;
}

/* "GET", "DEL" or "INCR" of the tenant's generation key; GET: the generation (absent: 0). */
static long generation_cmd(const char *cmd, const char *tenant)
{
        return redis_run(NULL, 0, "%s keelson:summary:gen:%s", cmd, tenant);
}

static long generation(const char *tenant)
{
        return generation_cmd("GET", tenant);
}

/* users.admin_summary events billing queued for the tenant (its own outbox). */
static long billing_events(const char *tenant)
{
        const char *params[1] = {tenant};

        return ait_sql_long(
            "SELECT count(*) FROM billing.outbox WHERE topic = 'users.admin_summary'"
            " AND tenant_id = $1::uuid",
            1, params);
}

/*
 * Waits until every replica has bumped the tenant's generation for every
 * event auth and billing published.
 */
static long settle(const char *tenant)
{
        long events = ait_events(0, "users.admin_summary", tenant) + billing_events(tenant),
             gen = 0;

        for (int waited = 0; waited <= WAIT_MS; waited += 50) {
                if ((gen = generation(tenant)) >= events * g_n) {
                        return gen;
                }
                it_sleep_ms(50);
        }
        fail_msg("generation %ld after %ld events on %d replicas", gen, events, g_n);
        return -1;
}

static const figures fresh_tenant = {.active = 1, .owner = 1};

/*
 * A tenant of an owner and a member, its summary settled and read on every
 * replica; want gets its figures. Returns its generation.
 */
static long tenant_with_member(const char *prefix, const char *name, ait_user *owner, ait_user *m,
                               figures *want)
{
        long gen;

        ait_tenant_of_two(prefix, name, "member", owner, m);
        *want = fresh_tenant;
        want->active = 2;
        want->member = 1;
        gen = settle(owner->tenant_id);
        read_on_every_replica(owner->token, want, owner->tenant_id);
        return gen;
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_repeated_reads_run_no_sql(void **state)
{
        ait_user owner;
        double sql0;
        int local = 0;

        (void)state;
        ait_signup("it-sum-sql", "Summary SQL", &owner);
        settle(owner.tenant_id);
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);
        sql0 = metric_sum(SQL);
        for (int i = 0; i < 30; i++) {
                json_t *j = summary(owner.token);
                figures f;
                read_figures(j, &f);
                assert_figures(&f, &fresh_tenant);
                assert_string_not_equal(ait_str(j, "source"), "database");
                local += strcmp(ait_str(j, "source"), "local") == 0;
                json_decref(j);
        }
        assert_true(metric_sum(SQL) == sql0);
        assert_true(local > 0);
}

static void test_every_admin_write_changes_the_next_summary(void **state)
{
        ait_user owner;
        figures want = fresh_tenant;
        char body[1024], email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX], user_id[AIT_ID_MAX];
        char key_id[AIT_ID_MAX];
        json_t *j;

        (void)state;
        ait_signup("it-sum-w", "Summary Writes", &owner);
        settle(owner.tenant_id);
        read_on_every_replica(owner.token, &want, owner.tenant_id);

        it_unique_email("it-sum-w-a", email, sizeof(email));
        ait_invite(&owner, email, "member", token);
        want.invited = want.pending = 1;
        wait_figures(owner.token, &want, owner.tenant_id);

        j = ait_accept(token, AIT_PASSWORD);
        snprintf(user_id, sizeof(user_id), "%s", ait_str(j, "userId"));
        json_decref(j);
        want.invited = want.pending = 0;
        want.active = 2;
        want.member = 1;
        wait_figures(owner.token, &want, owner.tenant_id);

        AIT_BODY(body, "{s:s, s:s}", "userId", user_id, "role", "admin");
        json_decref(ait_ok("SetRole", body, owner.token));
        want.member = 0;
        want.admin = 1;
        wait_figures(owner.token, &want, owner.tenant_id);

        AIT_BODY(body, "{s:s}", "userId", user_id);
        json_decref(ait_ok("RemoveMember", body, owner.token));
        want.active = 1;
        want.admin = 0;
        wait_figures(owner.token, &want, owner.tenant_id);

        it_unique_email("it-sum-w-b", email, sizeof(email));
        ait_invite(&owner, email, "viewer", token);
        want.invited = want.pending = 1;
        wait_figures(owner.token, &want, owner.tenant_id);
        j = ait_ok("ListInvitations", "{}", owner.token);
        AIT_BODY(body, "{s:s}", "invitationId",
                 ait_str(json_array_get(json_object_get(j, "invitations"), 0), "id"));
        json_decref(j);
        json_decref(ait_ok("RevokeInvitation", body, owner.token));
        want.invited = want.pending = 0;
        wait_figures(owner.token, &want, owner.tenant_id);

        AIT_BODY(body, "{s:s, s:s}", "name", "dashboard bot", "role", "viewer");
        j = ait_ok("CreateApiKey", body, owner.token);
        snprintf(key_id, sizeof(key_id), "%s", ait_str(json_object_get(j, "apiKey"), "id"));
        json_decref(j);
        want.keys = 1;
        wait_figures(owner.token, &want, owner.tenant_id);

        AIT_BODY(body, "{s:s}", "apiKeyId", key_id);
        json_decref(ait_ok("RevokeApiKey", body, owner.token));
        want.keys = 0;
        wait_figures(owner.token, &want, owner.tenant_id);
}

static void test_login_lockout_and_refused_writes_leave_the_cache(void **state)
{
        ait_user owner, m;
        figures want = fresh_tenant;
        char body[1024], token[AIT_TOKEN_MAX], email[AIT_EMAIL_MAX];
        const char *params[1];
        PGconn *pg;
        long gen0, mark;
        double sql0;

        (void)state;
        gen0 = tenant_with_member("it-sum-l", "Summary Lockout", &owner, &m, &want);
        sql0 = metric_sum(SQL);
        mark = ait_outbox_mark();

        ait_login(&owner, owner.tenant_id, token);
        for (int i = 0; i < 5; i++) { /* KEELSON_AUTH_LOCKOUT_MAX_FAILURES default: locks */
                assert_int_equal(ait_login_status(m.email, "definitely not it"), 401);
        }
        /* Locked now: the right password is refused too (the stack's lock lasts 2 s). */
        AIT_BODY(body, "{s:s, s:s}", "email", m.email, "password", AIT_PASSWORD);
        ait_fails_with("Login", body, NULL, "unauthenticated", "invalid email or password");
        /* Refused, so rolled back: a member may not invite, nobody invites as "emperor". */
        AIT_BODY(body, "{s:[s], s:s}", "emails", "nobody@example.test", "role", "viewer");
        ait_fails_with("Invite", body, m.token, "permission_denied",
                       "your role (member) lacks members.invite");
        AIT_BODY(body, "{s:[s], s:s}", "emails", "nobody@example.test", "role", "emperor");
        ait_fails_with("Invite", body, owner.token, "invalid_argument",
                       "role: one of owner, admin, member, viewer");

        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
        assert_int_equal(generation(owner.tenant_id), gen0);
        read_on_every_replica(token, &want, owner.tenant_id);
        assert_true(metric_sum(SQL) == sql0);

        /*
         * A computed summary counts a lock. The stack's locks last 2 s, too
         * short to wait for an event reliably, so the member is locked for an
         * hour the way auth locks (auth.users.locked_until) and the next admin
         * write brings the count.
         */
        params[0] = m.user_id;
        pg = ait_pg();
        PQclear(it_sql(pg,
                       "UPDATE auth.users SET locked_until = now() + interval '1 hour'"
                       " WHERE id = $1::uuid",
                       1, params));
        it_unique_email("it-sum-l-i", email, sizeof(email));
        ait_invite(&owner, email, "viewer", token);
        want.active = 1;
        want.locked = 1;
        want.invited = want.pending = 1;
        wait_figures(owner.token, &want, owner.tenant_id);
        PQfinish(pg);
}

/* ---- a write rolled back after every statement ran ------------------------------- */

/*
 * Fault injection at COMMIT: a deferred constraint trigger on auth.outbox
 * that fails the commit of any transaction which queued a
 * users.admin_summary for this tenant, with a serialization failure (what a
 * conflict at commit looks like). Everything the write does has run by then,
 * its outbox rows included; the commit rolls it all back.
 */
static const char sql_refuse_fn[] =
    "CREATE OR REPLACE FUNCTION public.it_summary_refuse_commit() RETURNS trigger"
    " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused at commit by test_summary'"
    " USING ERRCODE = 'serialization_failure'; END $$";
#define REFUSE_TRIGGER "it_summary_refuse_commit"

static void refuse_commits(const char *tenant)
{
        char sql[512];
        PGconn *pg = ait_pg();

        /* DDL takes no parameters: the tenant is a uuid the gateway gave us. */
        assert_int_equal(strspn(tenant, "0123456789abcdef-"), strlen(tenant));
        snprintf(sql, sizeof(sql),
                 "CREATE CONSTRAINT TRIGGER " REFUSE_TRIGGER " AFTER INSERT ON auth.outbox"
                 " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
                 " WHEN (NEW.topic = 'users.admin_summary' AND NEW.tenant_id = '%s'::uuid)"
                 " EXECUTE FUNCTION public.it_summary_refuse_commit()",
                 tenant);
        PQclear(it_sql(pg, sql_refuse_fn, 0, NULL));
        PQclear(it_sql(pg, sql, 0, NULL));
        PQfinish(pg);
}

static int allow_commits(void **state)
{
        PGconn *pg = it_pg_connect(&ait_stack);

        (void)state;
        if (pg != NULL) {
                PQclear(PQexec(pg, "DROP TRIGGER IF EXISTS " REFUSE_TRIGGER " ON auth.outbox"));
                PQclear(PQexec(pg, "DROP FUNCTION IF EXISTS public.it_summary_refuse_commit()"));
                PQfinish(pg);
        }
        return 0;
}

/* Values the outbox's id sequence has handed out: rolled-back inserts use them up too. */
static long outbox_ids_used(void)
{
        return ait_sql_long("SELECT last_value FROM auth.outbox_id_seq", 0, NULL);
}

static long open_invitations(const char *token)
{
        json_t *j = ait_ok("ListInvitations", "{}", token);
        long n = (long)json_array_size(json_object_get(j, "invitations"));

        json_decref(j);
        return n;
}

static void test_rolled_back_writes_leave_the_cache(void **state)
{
        ait_user owner, m;
        figures want = fresh_tenant;
        char body[1024], fresh[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        long gen0, mark, ids0;
        double sql0;

        (void)state;
        gen0 = tenant_with_member("it-sum-rb", "Summary Rollback", &owner, &m, &want);
        sql0 = metric_sum(SQL);
        mark = ait_outbox_mark();
        it_unique_email("it-sum-rb-new", fresh, sizeof(fresh));

        /*
         * One transaction for the whole batch (services/auth/invitations.c):
         * the member's address makes it already_exists inside it, after the
         * caller's role was read and the request id claimed, and the new
         * address is not invited either.
         */
        AIT_BODY(body, "{s:[s, s], s:s}", "emails", fresh, m.email, "role", "viewer");
        char already[AIT_EMAIL_MAX + 32];
        snprintf(already, sizeof(already), "%s is already a member", m.email);
        ait_fails_with("Invite", body, owner.token, "already_exists", already);
        assert_int_equal(open_invitations(owner.token), 0);

        /* Every statement runs, the invitation, its mail and the admin_summary row in the
         * outbox too, and the commit fails. */
        ids0 = outbox_ids_used();
        refuse_commits(owner.tenant_id);
        AIT_BODY(body, "{s:[s], s:s}", "emails", fresh, "role", "viewer");
        ait_fails_with("Invite", body, owner.token, "aborted",
                       "conflicting concurrent update, retry");
        allow_commits(NULL);
        assert_true(outbox_ids_used() >= ids0 + 2); /* the mail and the admin_summary were queued */
        assert_int_equal(open_invitations(owner.token), 0);
        assert_int_equal(ait_mail_token(mark, fresh, "invitation", token), 0);

        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
        assert_int_equal(generation(owner.tenant_id), gen0);
        read_on_every_replica(owner.token, &want, owner.tenant_id);
        assert_true(metric_sum(SQL) == sql0);

        /* The same write committed: the summary moves, so the fault was all that held it. */
        ait_invite(&owner, fresh, "viewer", token);
        want.invited = want.pending = 1;
        wait_figures(owner.token, &want, owner.tenant_id);
}

/* ---- the roles each caller may assign --------------------------------------------- */

static void assert_assignable(const char *token, const char *const *want, size_t n)
{
        json_t *j = summary(token);
        json_t *roles = json_object_get(j, "assignableRoles");

        assert_int_equal(json_array_size(roles), n);
        for (size_t i = 0; i < n; i++) {
                assert_string_equal(json_string_value(json_array_get(roles, i)), want[i]);
        }
        json_decref(j);
}

static void test_assignable_roles_follow_the_callers_role(void **state)
{
        static const char *const all[] = {"owner", "admin", "member", "viewer"};
        ait_user owner, admin, member, viewer;

        (void)state;
        ait_tenant_of_two("it-sum-roles", "Summary Roles", "admin", &owner, &admin);
        ait_new_member(&owner, "it-sum-roles-m", "member", &member);
        ait_new_member(&owner, "it-sum-roles-v", "viewer", &viewer);
        settle(owner.tenant_id);
        /* Auth's rule (services/core/ks_perms.c): invite and set-role up to one's own rank. */
        assert_assignable(owner.token, all, 4);
        assert_assignable(admin.token, all + 1, 3);
        assert_assignable(member.token, NULL, 0);
        assert_assignable(viewer.token, NULL, 0);
}

/* ---- a failed summary: logged with its request id, timed -------------------------- */

/* Fault injection: the reader role loses auth's contract, so a fill's SQL fails. */
#define CONTRACT_GRANT "GRANT EXECUTE ON FUNCTION auth.tenant_summary(uuid) TO keelson_summary_rt"
#define CONTRACT_REVOKE                                                                            \
        "REVOKE EXECUTE ON FUNCTION auth.tenant_summary(uuid) FROM keelson_summary_rt"

static void reader_contract(bool granted)
{
        ait_exec(granted ? CONTRACT_GRANT : CONTRACT_REVOKE, 0, NULL);
}

static int grant_reader_contract(void **state)
{
        PGconn *pg = it_pg_connect(&ait_stack);

        (void)state;
        if (pg != NULL) {
                PQclear(PQexec(pg, CONTRACT_GRANT));
                PQfinish(pg);
        }
        return 0;
}

/* How many lines of the summary replicas' logs hold every one of the needles. */
static int log_lines_with(const char *const *needles, int n)
{
        char path[600];
        int found = 0;

        for (int i = 0; i < g_n; i++) {
                snprintf(path, sizeof(path), "%s/logs/summary-%d.log", ait_stack.dir, i + 1);
                found += it_file_lines_with(path, needles, n);
        }
        return found;
}

static void test_a_failed_summary_is_logged_and_timed(void **state)
{
        ait_user owner;
        char rid[96], tenant_field[96];
        const char *needles[4];
        it_http_response r;
        json_t *j;
        double served0;

        (void)state;
        ait_signup("it-sum-fail", "Summary Failure", &owner);
        settle(owner.tenant_id);
        snprintf(rid, sizeof(rid), "it-sum-fail-%s", owner.tenant_id);
        served0 = metric_sum(SERVED);

        reader_contract(false);
        summary_call(owner.token, "{}", rid, &r); /* a new tenant: nothing cached, a fill */
        reader_contract(true);
        assert_int_equal(r.status, 500);
        j = ait_json(&r);
        assert_string_equal(ait_str(j, "code"), "internal");
        assert_null(strstr(r.body, "permission")); /* nothing of PostgreSQL's reaches the client */
        json_decref(j);
        it_http_response_free(&r);

        /* Timed like any answer, and one line an operator finds by the client's request id. */
        assert_true(metric_sum(SERVED) == served0 + 1);
        snprintf(tenant_field, sizeof(tenant_field), "\"tenant_id\":\"%s\"", owner.tenant_id);
        needles[0] = rid;
        needles[1] = "\"msg\":\"summary not served\"";
        needles[2] = "\"level\":\"error\"";
        needles[3] = "\"code\":\"internal\"";
        assert_int_equal(log_lines_with(needles, 4), 1);
        needles[1] = tenant_field;
        assert_int_equal(log_lines_with(needles, 2), 1);
        needles[1] = owner.token;
        assert_int_equal(log_lines_with(needles, 2), 0);

        /* The contract back: the same tenant's summary is computed and served. */
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);
}

/* ---- a lost generation ------------------------------------------------------------ */

/*
 * The tenant's generation key disappears without any replica seeing a
 * Redis error (evicted, flushed, or a Redis restarted behind a proxy): the
 * generations start at 0 again under the replicas' older local entries.
 * Once those have expired (the TTL, 30 s in the stack), fills at the new
 * generation must take their place: the local level serves the tenant again.
 */
#define TTL_MS 30000

static void test_a_lost_generation_does_not_keep_the_local_level_away(void **state)
{
        ait_user owner;
        double hits0[REPLICA_MAX];
        bool back = false;

        (void)state;
        ait_signup("it-sum-gen", "Summary Generation", &owner);
        settle(owner.tenant_id);
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);
        assert_true(generation(owner.tenant_id) > 0);
        assert_int_equal(generation_cmd("DEL", owner.tenant_id), 1);
        for (int i = 0; i < g_n; i++) {
                hits0[i] = metric(i, LOCAL_HITS);
        }
        for (int waited = 0; waited <= TTL_MS + WAIT_MS && !back; waited += 250) {
                json_t *j = summary(owner.token);
                figures f;
                read_figures(j, &f);
                assert_figures(&f, &fresh_tenant);
                json_decref(j);
                back = true;
                for (int i = 0; i < g_n; i++) {
                        back = back && metric(i, LOCAL_HITS) > hits0[i];
                }
                it_sleep_ms(250);
        }
        assert_true(back);
}

typedef struct racer {
        const char *token;
        json_t *reply;
        long status;
} racer;

static void *race_read(void *arg)
{
        racer *r = arg;

        r->reply = summary_body(r->token, "{\"testFillPauseMs\":10000}", &r->status);
        return NULL;
}

static void test_fill_racing_an_invalidation_is_not_served(void **state)
{
        ait_user owner;
        figures want = fresh_tenant, got;
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        racer rc = {0};
        pthread_t t;
        double discarded0 = metric_sum("keelson_summary_fills_discarded_total");
        bool paused = false;

        (void)state;
        ait_signup("it-sum-race", "Summary Race", &owner);
        settle(owner.tenant_id);
        rc.token = owner.token;
        assert_int_equal(pthread_create(&t, NULL, race_read, &rc), 0);
        for (int waited = 0; waited <= WAIT_MS && !paused; waited += 20) {
                paused = metric_sum("keelson_summary_test_fills_paused") >= 1;
                it_sleep_ms(20);
        }
        /* The fill has read the counts and holds them: now the write commits. */
        it_unique_email("it-sum-race-a", email, sizeof(email));
        ait_invite(&owner, email, "member", token);
        pthread_join(t, NULL);
        assert_true(paused);
        assert_int_equal(rc.status, 200);
        read_figures(rc.reply, &got);
        assert_figures(&got, &fresh_tenant); /* computed before the write */
        assert_string_equal(ait_str(rc.reply, "source"), "database");
        json_decref(rc.reply);
        assert_true(metric_sum("keelson_summary_fills_discarded_total") == discarded0 + 1);
        /* The held figures were stored under the old generation: nobody gets them now. */
        want.invited = want.pending = 1;
        read_on_every_replica(owner.token, &want, owner.tenant_id);
}

static void test_a_tenant_sees_only_its_own_counts(void **state)
{
        ait_user a, b, viewer;
        figures want_a = fresh_tenant, want_b = fresh_tenant;
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        json_t *j;

        (void)state;
        ait_signup("it-sum-ta", "Summary A", &a);
        ait_signup("it-sum-tb", "Summary B", &b);
        for (int i = 0; i < 2; i++) {
                it_unique_email("it-sum-ta-i", email, sizeof(email));
                ait_invite(&a, email, "member", token);
        }
        ait_new_member(&b, "it-sum-tb-v", "viewer", &viewer);
        want_a.invited = want_a.pending = 2;
        want_b.active = 2;
        want_b.viewer = 1;
        settle(a.tenant_id);
        settle(b.tenant_id);
        for (int i = 0; i < 5; i++) {
                read_on_every_replica(a.token, &want_a, a.tenant_id);
                read_on_every_replica(b.token, &want_b, b.tenant_id);
                read_on_every_replica(viewer.token, &want_b, b.tenant_id);
        }
        /* A viewer reads (org.read) but may assign nothing; an owner any role. */
        j = summary(viewer.token);
        assert_int_equal(json_array_size(json_object_get(j, "assignableRoles")), 0);
        json_decref(j);
        j = summary(a.token);
        assert_int_equal(json_array_size(json_object_get(j, "assignableRoles")), 4);
        json_decref(j);
}

/* ---- billing's figures ----------------------------------------------------------- */

#define BILLING_UNAVAILABLE "keelson_summary_billing_calls_total{result=\"unavailable\"}"
#define PARTIAL_TTL_MS      5000 /* KEELSON_SUMMARY_PARTIAL_TTL_MS: the stack keeps the default */

/* A subscription of the customer to the plan, in the state it must start in; its id. */
static void subscribe(const bit_tenant *t, const char *customer, const char *plan, int quantity,
                      const char *state, char id[BIT_ID_MAX])
{
        json_t *j = bit_ok(t->owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"%s\",\"quantity\":\"%d\"}",
                           customer, plan, quantity);

        snprintf(id, BIT_ID_MAX, "%s", bit_str(j, "subscription.id"));
        assert_string_equal(bit_str(j, "subscription.state"), state);
        json_decref(j);
}

/* Four customers on a test clock, plans in two currencies, a subscription in every state. */
static void test_billing_figures_of_a_tenant(void **state)
{
        const billing_figures want = {
            .active = 4, /* two monthly, the yearly, the seats */
            .trialing = 1,
            .past_due = 1,
            .paused = 1,
            .canceled = 1,
            .invoices_open = 2,
            /* EUR 3 × 300; USD 1,000 × 3 (two active, the past-due) + 12,000 / 12 */
            .mrr = {{"EUR", 900}, {"USD", 4000}},
            .open = {{"USD", 2000}},            /* the unpaid and the declined invoice */
            .past_due_amount = {{"USD", 1000}}, /* the declined one alone */
        };
        bit_tenant t;
        char clock[BIT_ID_MAX], visa[BIT_ID_MAX], unpaid[BIT_ID_MAX], declined[BIT_ID_MAX];
        char eur[BIT_ID_MAX], sub[BIT_ID_MAX];

        (void)state;
        bit_tenant_new("it-sum-bill", &t);
        bit_clock(&t, bit_utc(2027, 3, 1, 0, 0, 0), clock);
        bit_plan(&t, "monthly", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_plan(&t, "yearly", "USD", "FLAT", 12000, "YEAR", 1, 0);
        bit_plan(&t, "trial", "USD", "FLAT", 500, "MONTH", 1, 14);
        bit_plan(&t, "seats", "EUR", "PER_UNIT", 300, "MONTH", 1, 0);
        bit_customer(&t, "USD", 0, "pm_card_visa", clock, visa);
        bit_customer(&t, "USD", 0, "", clock, unpaid); /* no card: its invoices wait, open */
        bit_customer(&t, "USD", 0, "pm_card_chargeDeclined", clock, declined);
        bit_customer(&t, "EUR", 0, "pm_card_visa", clock, eur);

        subscribe(&t, visa, "monthly", 1, "active", sub);
        subscribe(&t, visa, "yearly", 1, "active", sub);
        subscribe(&t, visa, "trial", 1, "trialing", sub); /* no revenue while trialing */
        subscribe(&t, unpaid, "monthly", 1, "active", sub);
        subscribe(&t, declined, "monthly", 1, "past_due", sub);
        subscribe(&t, eur, "seats", 3, "active", sub);
        subscribe(&t, visa, "monthly", 1, "active", sub);
        json_decref(bit_ok(t.owner.token, "PauseSubscription", "{\"id\":\"%s\"}", sub));
        subscribe(&t, visa, "monthly", 1, "active", sub);
        json_decref(bit_ok(t.owner.token, "CancelSubscription", "{\"id\":\"%s\"}", sub));

        settle(t.owner.tenant_id);
        read_all_on_every_replica(t.owner.token, &fresh_tenant, &want, t.owner.tenant_id);

        /* billing.read is an admin's and an owner's: a member sees that, not the figures. */
        ait_user member;
        ait_new_member(&t.owner, "it-sum-bill-m", "member", &member);
        json_t *j = summary(member.token);
        json_t *b = json_object_get(j, "billing");
        assert_string_equal(ait_str(b, "state"), "not_permitted");
        assert_null(json_object_get(b, "mrr"));
        assert_null(json_object_get(b, "subscriptions"));
        json_decref(j);
}

/* Reads that run nothing: no SQL, no fill, every answer cached and as want. */
static void cached_reads(const char *token, const billing_figures *want)
{
        double sql0 = metric_sum(SQL);

        for (int i = 0; i < 10; i++) {
                json_t *j = summary(token);
                assert_string_not_equal(ait_str(j, "source"), "database");
                assert_billing(j, want);
                json_decref(j);
        }
        assert_true(metric_sum(SQL) == sql0);
}

static void test_a_billing_write_invalidates_the_summary(void **state)
{
        billing_figures before = {.active = 1, .mrr = {{"USD", 1000}}}; /* 12,000 a year */
        billing_figures after = {.active = 2, .mrr = {{"USD", 2000}}};
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX];
        long gen0;
        bool changed = false;

        (void)state;
        bit_tenant_new("it-sum-binv", &t);
        bit_clock(&t, bit_utc(2027, 5, 1, 0, 0, 0), clock);
        bit_plan(&t, "yearly", "USD", "FLAT", 12000, "YEAR", 1, 0);
        bit_plan(&t, "monthly", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 0, "pm_card_visa", clock, cust);
        subscribe(&t, cust, "yearly", 1, "active", sub);
        gen0 = settle(t.owner.tenant_id);
        read_all_on_every_replica(t.owner.token, &fresh_tenant, &before, t.owner.tenant_id);
        cached_reads(t.owner.token, &before);

        /* Billing's write publishes users.admin_summary: the next answer is computed again. */
        subscribe(&t, cust, "monthly", 1, "active", sub);
        for (int waited = 0; waited <= WAIT_MS && !changed; waited += 20) {
                json_t *j = summary(t.owner.token);
                changed = billing_equal(j, &after);
                if (changed) {
                        assert_string_equal(ait_str(j, "source"), "database");
                } else {
                        assert_billing(j, &before); /* cached until the event comes */
                        it_sleep_ms(20);
                }
                json_decref(j);
        }
        assert_true(changed);
        assert_true(settle(t.owner.tenant_id) > gen0);
        read_all_on_every_replica(t.owner.token, &fresh_tenant, &after, t.owner.tenant_id);
        cached_reads(t.owner.token, &after);
}

/* A fill holding billing's figures while a billing write commits: they are never served. */
static void test_fill_racing_a_billing_write_is_not_served(void **state)
{
        const billing_figures none = {0}, after = {.active = 1, .mrr = {{"USD", 1000}}};
        bit_tenant t;
        char clock[BIT_ID_MAX], cust[BIT_ID_MAX], sub[BIT_ID_MAX];
        racer rc = {0};
        pthread_t th;
        double discarded0 = metric_sum("keelson_summary_fills_discarded_total");
        bool paused = false;

        (void)state;
        bit_tenant_new("it-sum-brace", &t);
        bit_clock(&t, bit_utc(2027, 6, 1, 0, 0, 0), clock);
        bit_plan(&t, "monthly", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&t, "USD", 0, "pm_card_visa", clock, cust);
        settle(t.owner.tenant_id);
        rc.token = t.owner.token;
        assert_int_equal(pthread_create(&th, NULL, race_read, &rc), 0);
        for (int waited = 0; waited <= WAIT_MS && !paused; waited += 20) {
                paused = metric_sum("keelson_summary_test_fills_paused") >= 1;
                it_sleep_ms(20);
        }
        /* The fill has billing's answer (no subscription) and holds it: now billing writes. */
        subscribe(&t, cust, "monthly", 1, "active", sub);
        pthread_join(th, NULL);
        assert_true(paused);
        assert_int_equal(rc.status, 200);
        assert_billing(rc.reply, &none); /* asked before the write */
        assert_string_equal(ait_str(rc.reply, "source"), "database");
        json_decref(rc.reply);
        assert_true(metric_sum("keelson_summary_fills_discarded_total") == discarded0 + 1);
        read_all_on_every_replica(t.owner.token, &fresh_tenant, &after, t.owner.tenant_id);
}

/* ---- billing not answering -------------------------------------------------------- */

/*
 * Fault injection: a transaction of the test holds billing.subscriptions in
 * ACCESS EXCLUSIVE mode, so the stack's own billing replicas wait on it in
 * GetBillingSummary, past the summary's KEELSON_SUMMARY_BILLING_TIMEOUT_MS.
 * Closing the connection releases it (the teardown does, whatever happened).
 */
static PGconn *g_billing_lock;

static void hold_billing(void)
{
        g_billing_lock = ait_pg();
        PQclear(it_sql(g_billing_lock, "BEGIN", 0, NULL));
        PQclear(it_sql(g_billing_lock, "LOCK TABLE billing.subscriptions IN ACCESS EXCLUSIVE MODE",
                       0, NULL));
}

static int release_billing(void **state)
{
        (void)state;
        if (g_billing_lock != NULL) {
                PQfinish(g_billing_lock);
                g_billing_lock = NULL;
        }
        return 0;
}

static void assert_billing_unavailable(json_t *j)
{
        json_t *b = json_object_get(j, "billing");

        assert_string_equal(bit_str(b, "state"), "unavailable");
        assert_null(json_object_get(b, "subscriptions")); /* absent, not zero */
        assert_null(json_object_get(b, "mrr"));
}

static void test_billing_unavailable_leaves_the_rest_cached_briefly(void **state)
{
        ait_user owner;
        char rid[96];
        const char *needles[3];
        it_http_response r;
        figures f;
        json_t *j;
        double unavailable0;
        long gen0;
        bool back = false;

        (void)state;
        ait_signup("it-sum-bdown", "Summary Billing Down", &owner);
        gen0 = settle(owner.tenant_id);
        unavailable0 = metric_sum(BILLING_UNAVAILABLE);
        hold_billing();

        snprintf(rid, sizeof(rid), "it-sum-bdown-%s", owner.tenant_id);
        summary_call(owner.token, "{}", rid, &r); /* nothing cached: a fill, billing hangs */
        assert_int_equal(r.status, 200);
        j = ait_json(&r);
        read_figures(j, &f);
        assert_figures(&f, &fresh_tenant); /* auth's part is whole */
        assert_string_equal(ait_str(j, "source"), "database");
        assert_billing_unavailable(j);
        json_decref(j);
        it_http_response_free(&r);
        assert_true(metric_sum(BILLING_UNAVAILABLE) == unavailable0 + 1);
        needles[0] = rid;
        needles[1] = "\"msg\":\"billing figures unavailable\"";
        needles[2] = "\"code\":\"deadline_exceeded\"";
        assert_int_equal(log_lines_with(needles, 3), 1);

        /* Cached, on both levels: no more waiting on billing while the value lives. */
        for (int i = 0; i < 10; i++) {
                j = summary(owner.token);
                assert_string_not_equal(ait_str(j, "source"), "database");
                assert_billing_unavailable(j);
                json_decref(j);
        }
        assert_true(metric_sum(BILLING_UNAVAILABLE) == unavailable0 + 1);

        /* Billing answers again: with no write and no event, the short TTL brings it back. */
        release_billing(NULL);
        for (int waited = 0; waited <= PARTIAL_TTL_MS + WAIT_MS && !back; waited += 100) {
                j = summary(owner.token);
                back = strcmp(bit_str(json_object_get(j, "billing"), "state"), "ok") == 0;
                if (back) {
                        assert_string_equal(ait_str(j, "source"), "database");
                }
                json_decref(j);
                it_sleep_ms(100);
        }
        assert_true(back);
        assert_int_equal(generation(owner.tenant_id), gen0);
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);
}

/* ---- a rolling deploy: the older value format --------------------------------------- */

static void test_an_older_value_format_is_a_miss(void **state)
{
        ait_user owner;
        char value[SM_VALUE_TEXT_MAX], old[160];
        long gen;
        json_t *j;
        figures f;

        (void)state;
        ait_signup("it-sum-v1", "Summary V1", &owner);
        settle(owner.tenant_id);
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);

        /*
         * A replica of before billing's figures stored its format ("v1", the
         * counts alone) at a generation no replica has read yet: 99 members.
         */
        gen = generation_cmd("INCR", owner.tenant_id);
        snprintf(old, sizeof(old), "v1 %lld 99 0 0 0 99 0 0 0 0 0", (long long)time(NULL) * 1000);
        redis_run(NULL, 0, "SET keelson:summary:v:%s:%ld %s PX 30000", owner.tenant_id, gen, old);

        j = summary(owner.token);
        read_figures(j, &f);
        assert_figures(&f, &fresh_tenant);
        assert_string_equal(ait_str(j, "source"), "database");
        assert_string_equal(bit_str(json_object_get(j, "billing"), "state"), "ok");
        json_decref(j);
        /* The fill stored the new format in its place, which the other replica reads. */
        redis_run(value, sizeof(value), "GET keelson:summary:v:%s:%ld", owner.tenant_id, gen);
        assert_int_equal(strncmp(value, "v2 ", 3), 0);
        read_on_every_replica(owner.token, &fresh_tenant, owner.tenant_id);
}

static bool g_redis_stopped;

static int start_redis_again(void **state)
{
        (void)state;
        if (g_redis_stopped && it_stack_redis(&ait_stack, 1) == 0) {
                g_redis_stopped = false;
        }
        return 0;
}

static void test_redis_down_serves_from_postgres_then_caching_resumes(void **state)
{
        ait_user owner;
        figures want = fresh_tenant;
        char email[AIT_EMAIL_MAX], token[AIT_TOKEN_MAX];
        double degraded0;
        bool cached = false;

        (void)state;
        ait_signup("it-sum-redis", "Summary Redis", &owner);
        settle(owner.tenant_id);
        read_on_every_replica(owner.token, &want, owner.tenant_id);
        degraded0 = metric_sum("keelson_summary_degraded_total");
        assert_int_equal(it_stack_redis(&ait_stack, 0), 0);
        g_redis_stopped = true;

        for (int i = 0; i < 10; i++) {
                json_t *j = summary(owner.token);
                assert_string_equal(ait_str(j, "source"), "database");
                json_decref(j);
        }
        read_on_every_replica(owner.token, &want, owner.tenant_id);
        it_unique_email("it-sum-redis-a", email, sizeof(email));
        ait_invite(&owner, email, "member", token);
        want.invited = want.pending = 1;
        read_on_every_replica(owner.token, &want, owner.tenant_id); /* no cache: at once */
        assert_true(metric_sum("keelson_summary_degraded_total") >= degraded0 + 10);

        assert_int_equal(it_stack_redis(&ait_stack, 1), 0);
        g_redis_stopped = false;
        for (int waited = 0; waited <= WAIT_MS && !cached; waited += 100) {
                json_t *j = summary(owner.token);
                cached = strcmp(ait_str(j, "source"), "database") != 0;
                json_decref(j);
                it_sleep_ms(100);
        }
        assert_true(cached);
        read_on_every_replica(owner.token, &want, owner.tenant_id);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_repeated_reads_run_no_sql),
            cmocka_unit_test(test_every_admin_write_changes_the_next_summary),
            cmocka_unit_test(test_login_lockout_and_refused_writes_leave_the_cache),
            cmocka_unit_test_teardown(test_rolled_back_writes_leave_the_cache, allow_commits),
            cmocka_unit_test(test_assignable_roles_follow_the_callers_role),
            cmocka_unit_test_teardown(test_a_failed_summary_is_logged_and_timed,
                                      grant_reader_contract),
            cmocka_unit_test(test_a_lost_generation_does_not_keep_the_local_level_away),
            cmocka_unit_test(test_fill_racing_an_invalidation_is_not_served),
            cmocka_unit_test(test_a_tenant_sees_only_its_own_counts),
            cmocka_unit_test(test_billing_figures_of_a_tenant),
            cmocka_unit_test(test_a_billing_write_invalidates_the_summary),
            cmocka_unit_test(test_fill_racing_a_billing_write_is_not_served),
            cmocka_unit_test_teardown(test_billing_unavailable_leaves_the_rest_cached_briefly,
                                      release_billing),
            cmocka_unit_test(test_an_older_value_format_is_a_miss),
            /* Last: a restarted Redis starts every generation at 0 again. */
            cmocka_unit_test_teardown(test_redis_down_serves_from_postgres_then_caching_resumes,
                                      start_redis_again),
        };

        return cmocka_run_group_tests(tests, setup, NULL);
}
