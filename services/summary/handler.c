/*
 * GetSummary: check the caller, then the cache levels in order (see
 * summary.h), then PostgreSQL.
 *
 * Permission: org.read in the tenant, which every role of the table in
 * services/core/ks_perms.c holds (owner, admin, member, viewer). The role comes
 * from the caller context the gateway resolved (its cache is invalidated on
 * role changes); a context without a known role is refused. The roles the
 * caller may assign follow auth's rule: callers with members.invite or
 * members.set_role (owner, admin) grant at most their own rank.
 */
#include "summary.h"

#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_log.h"
#include "ks_perms.h"

bool sm_uuid_valid(const char *s)
{
        if (s == NULL || strlen(s) != SM_TENANT_LEN) {
                return false;
        }
        for (int i = 0; i < SM_TENANT_LEN; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                char c = s[i];
                if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                        return false;
                }
        }
        return true;
}

static double now_s(void)
{
        return (double)ks_mono_ns() / (double)KS_NS_PER_S;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);
}

/* Test hook: waits until the tenant's generation moves past gen, or pause_ms. */
static void test_pause(sm_service *svc, sm_worker *w, const char *tenant, int64_t gen,
                       uint32_t pause_ms)
{
        int64_t until = ks_now_ms() + (pause_ms > SM_PAUSE_MAX_MS ? SM_PAUSE_MAX_MS : pause_ms);
        int64_t now_gen = gen;

        ks_gauge_add(svc->m.paused, 1);
        while (ks_now_ms() < until && now_gen == gen) {
                sleep_ms(10);
                if (sm_redis_gen(&w->redis, tenant, &now_gen) != 0) {
                        break;
                }
        }
        ks_gauge_add(svc->m.paused, -1);
}

/* A miss on both levels: compute, store under the generation read before the SQL. */
static int fill(ks_call *call, sm_service *svc, sm_worker *w, const char *tenant, int64_t gen,
                uint64_t epoch, sm_counts *out)
{
        const Keelson__Summary__V1__GetSummaryRequest *req = (const void *)call->in;
        int64_t after = gen;
        int rc;

        if ((rc = sm_db_counts(svc, call->request_id, tenant, out)) != KS_OK) {
                return rc;
        }
        if (svc->test_hooks && req->test_fill_pause_ms > 0) {
                test_pause(svc, w, tenant, gen, req->test_fill_pause_ms);
        }
        if (sm_redis_put(&w->redis, tenant, gen, out, svc->ttl_ms) != 0 ||
            sm_redis_gen(&w->redis, tenant, &after) != 0) {
                ks_counter_inc(svc->m.redis_errors);
                atomic_fetch_add(&svc->redis_epoch, 1);
                return KS_OK;
        }
        if (after != gen) {
                /* Invalidated while we computed: stored under the old generation, never read. */
                ks_counter_inc(svc->m.discarded);
                return KS_OK;
        }
        sm_local_put(&svc->local, tenant, gen, epoch, out, ks_now_ms(), svc->ttl_ms);
        return KS_OK;
}

static int lookup(ks_call *call, sm_service *svc, sm_worker *w, const char *tenant, sm_counts *out,
                  sm_source *src)
{
        uint64_t epoch = atomic_load(&svc->redis_epoch);
        int64_t gen = 0;
        int rc;

        *src = SM_SRC_DATABASE;
        if (!svc->cache_enabled) {
                return sm_db_counts(svc, call->request_id, tenant, out);
        }
        if (sm_redis_gen(&w->redis, tenant, &gen) != 0) {
                /* Degraded: no generation, so nothing cached can be trusted. */
                ks_counter_inc(svc->m.redis_errors);
                ks_counter_inc(svc->m.degraded);
                atomic_fetch_add(&svc->redis_epoch, 1);
                return sm_db_counts(svc, call->request_id, tenant, out);
        }
        if (sm_local_get(&svc->local, tenant, gen, epoch, ks_now_ms(), svc->ttl_ms, out)) {
                ks_counter_inc(svc->m.hits_local);
                *src = SM_SRC_LOCAL;
                return KS_OK;
        }
        ks_counter_inc(svc->m.misses_local);
        rc = sm_redis_get(&w->redis, tenant, gen, out);
        if (rc == 0 && ks_now_ms() < out->computed_ms + svc->ttl_ms) {
                ks_counter_inc(svc->m.hits_redis);
                sm_local_put(&svc->local, tenant, gen, epoch, out, ks_now_ms(), svc->ttl_ms);
                *src = SM_SRC_REDIS;
                return KS_OK;
        }
        if (rc < 0) {
                ks_counter_inc(svc->m.redis_errors);
                ks_counter_inc(svc->m.degraded);
                atomic_fetch_add(&svc->redis_epoch, 1);
                return sm_db_counts(svc, call->request_id, tenant, out);
        }
        ks_counter_inc(svc->m.misses_redis);
        return fill(call, svc, w, tenant, gen, epoch, out);
}

static int reply(ks_call *call, const char *tenant, const char *role, const sm_counts *c,
                 sm_source src)
{
        static const char *const sources[] = {"local", "redis", "database"};
        Keelson__Summary__V1__GetSummaryResponse r =
            KEELSON__SUMMARY__V1__GET_SUMMARY_RESPONSE__INIT;
        Keelson__Summary__V1__UsersByState u = KEELSON__SUMMARY__V1__USERS_BY_STATE__INIT;
        Keelson__Summary__V1__MembersByRole m = KEELSON__SUMMARY__V1__MEMBERS_BY_ROLE__INIT;
        char *assignable[KS_ROLES_N];
        size_t n = 0;
        bool grants =
            (ks_role_perms(role) & (KS_PERM_MEMBERS_INVITE | KS_PERM_MEMBERS_SET_ROLE)) != 0;

        /* Who invites or sets roles grants their own rank and below; others nothing. */
        for (int i = 0; grants && i < KS_ROLES_N; i++) {
                if (ks_role_rank(ks_role_name(i)) <= ks_role_rank(role)) {
                        assignable[n++] = (char *)ks_role_name(i);
                }
        }
        u.active = c->active;
        u.invited = c->invited;
        u.locked = c->locked;
        u.disabled = c->disabled;
        m.owner = c->owner;
        m.admin = c->admin;
        m.member = c->member;
        m.viewer = c->viewer;
        r.tenant_id = (char *)tenant;
        r.users = &u;
        r.members = &m;
        r.n_assignable_roles = n;
        r.assignable_roles = assignable;
        r.pending_invitations = c->pending_invitations;
        r.active_api_keys = c->active_api_keys;
        r.computed_at_unix_ms = c->computed_ms;
        r.source = (char *)sources[src];
        return ks_call_reply(call, &r.base);
}

/*
 * A refusal or a failure, logged with the request id the client sees in its
 * error (warn for the caller's fault or a dependency's, error for ours).
 * Only the code and the tenant: the request has nothing worth logging, and
 * the cause (a libpq message, a pool timeout) was logged where it happened.
 */
static int fail(ks_call *call, int code, const char *tenant, const char *msg)
{
        ks_log(code == KS_INTERNAL ? KS_LOG_ERROR : KS_LOG_WARN, call->request_id,
               "summary not served", "{s:s, s:s}", "code", ks_code_name(code), "tenant_id",
               sm_uuid_valid(tenant) ? tenant : "");
        return ks_call_fail(call, code, "%s", msg);
}

static int answer(ks_call *call)
{
        sm_service *svc = call->service;
        sm_worker *w = call->worker_state;
        const ks_caller *c = call->caller;
        sm_counts counts;
        sm_source src;
        int rc;

        if (!c->authenticated || !sm_uuid_valid(c->tenant_id)) {
                return fail(call, KS_UNAUTHENTICATED, NULL, "authentication required");
        }
        if ((ks_role_perms(c->role) & KS_PERM_ORG_READ) == 0) {
                return fail(call, KS_PERMISSION_DENIED, c->tenant_id, "org.read is required");
        }
        rc = lookup(call, svc, w, c->tenant_id, &counts, &src);
        if (rc != KS_OK) {
                return fail(call, rc == KS_UNAVAILABLE ? KS_UNAVAILABLE : KS_INTERNAL, c->tenant_id,
                            "the summary is not available right now");
        }
        if ((rc = reply(call, c->tenant_id, c->role, &counts, src)) != KS_OK) {
                return fail(call, KS_INTERNAL, c->tenant_id,
                            "the summary is not available right now");
        }
        return KS_OK;
}

/* Every answer is timed, refusals and failures too: a slow failure is still slow. */
int sm_get_summary_handler(ks_call *call)
{
        sm_service *svc = call->service;
        double t0 = now_s();
        int rc = answer(call);

        ks_histogram_observe(svc->m.latency, now_s() - t0);
        return rc;
}
