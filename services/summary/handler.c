/*
 * GetSummary: check the caller, then the cache levels in order (see
 * summary.h), then compute: auth's counts from PostgreSQL, then billing's
 * figures from keelson-billing, asked as the caller (billing.c).
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

#include "ks_assert.h"
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

/*
 * The figures, uncached: auth's counts (a failure fails the summary), then
 * billing's (a failure only makes them unavailable). One after the other: a
 * fill is rare, and billing is not asked for a summary that cannot be
 * answered.
 */
static int compute(ks_call *call, sm_service *svc, const char *tenant, sm_counts *out)
{
        int rc = sm_db_counts(svc, call->request_id, tenant, out);

        if (rc == KS_OK) {
                sm_billing_ask(svc, call, &out->billing);
        }
        return rc;
}

static int64_t ttl_of(const sm_service *svc, const sm_counts *c)
{
        return sm_value_ttl_ms(c, svc->ttl_ms, svc->partial_ttl_ms);
}

/*
 * A miss on both levels: compute, store under the generation read before
 * the SQL and the billing call, so that an invalidation coming in meanwhile
 * (from auth's writes or billing's) leaves the value where no later read
 * looks.
 */
static int fill(ks_call *call, sm_service *svc, sm_worker *w, const char *tenant, int64_t gen,
                uint64_t epoch, sm_counts *out)
{
        const Keelson__Summary__V1__GetSummaryRequest *req = (const void *)call->in;
        int64_t after = gen;
        int rc;

        if ((rc = compute(call, svc, tenant, out)) != KS_OK) {
                return rc;
        }
        if (svc->test_hooks && req->test_fill_pause_ms > 0) {
                test_pause(svc, w, tenant, gen, req->test_fill_pause_ms);
        }
        if (sm_redis_put(&w->redis, tenant, gen, out, ttl_of(svc, out)) != 0 ||
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
        sm_local_put(&svc->local, tenant, gen, epoch, out, ks_now_ms(), ttl_of(svc, out));
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
                return compute(call, svc, tenant, out);
        }
        if (sm_redis_gen(&w->redis, tenant, &gen) != 0) {
                /* Degraded: no generation, so nothing cached can be trusted. */
                ks_counter_inc(svc->m.redis_errors);
                ks_counter_inc(svc->m.degraded);
                atomic_fetch_add(&svc->redis_epoch, 1);
                return compute(call, svc, tenant, out);
        }
        if (sm_local_get(&svc->local, tenant, gen, epoch, ks_now_ms(), out)) {
                ks_counter_inc(svc->m.hits_local);
                *src = SM_SRC_LOCAL;
                return KS_OK;
        }
        ks_counter_inc(svc->m.misses_local);
        rc = sm_redis_get(&w->redis, tenant, gen, out);
        if (rc == 0 && ks_now_ms() < out->computed_ms + ttl_of(svc, out)) {
                ks_counter_inc(svc->m.hits_redis);
                sm_local_put(&svc->local, tenant, gen, epoch, out, ks_now_ms(), ttl_of(svc, out));
                *src = SM_SRC_REDIS;
                return KS_OK;
        }
        if (rc < 0) {
                ks_counter_inc(svc->m.redis_errors);
                ks_counter_inc(svc->m.degraded);
                atomic_fetch_add(&svc->redis_epoch, 1);
                return compute(call, svc, tenant, out);
        }
        ks_counter_inc(svc->m.misses_redis);
        return fill(call, svc, w, tenant, gen, epoch, out);
}

/* The response's billing part, pointing into this storage (on the replying stack). */
typedef struct billing_msg {
        Keelson__Summary__V1__BillingFigures b;
        Keelson__Summary__V1__SubscriptionsByState subs;
        Keelson__Summary__V1__CurrencyAmount v[3][SM_CURRENCIES_MAX];
        Keelson__Summary__V1__CurrencyAmount *p[3][SM_CURRENCIES_MAX];
} billing_msg;

static size_t amounts_msg(const sm_amounts *a, Keelson__Summary__V1__CurrencyAmount *v,
                          Keelson__Summary__V1__CurrencyAmount **p)
{
        KS_ASSERT(a->n <= SM_CURRENCIES_MAX);
        for (uint32_t i = 0; i < a->n; i++) {
                keelson__summary__v1__currency_amount__init(&v[i]);
                v[i].currency = (char *)a->v[i].currency;
                v[i].amount = a->v[i].amount;
                p[i] = &v[i];
        }
        return a->n;
}

/*
 * Unavailable, or not for this role (billing's figures are billing.read's:
 * admins and owners): the state alone, no figure (absent, not zero).
 */
static Keelson__Summary__V1__BillingFigures *billing_of(const sm_billing *f, const char *role,
                                                        billing_msg *m)
{
        keelson__summary__v1__billing_figures__init(&m->b);
        if ((ks_role_perms(role) & KS_PERM_BILLING_READ) == 0) {
                m->b.state = "not_permitted";
                return &m->b;
        }
        m->b.state = (char *)(f->available ? "ok" : "unavailable");
        if (!f->available) {
                return &m->b;
        }
        keelson__summary__v1__subscriptions_by_state__init(&m->subs);
        m->subs.active = f->active;
        m->subs.trialing = f->trialing;
        m->subs.past_due = f->past_due;
        m->subs.paused = f->paused;
        m->subs.canceled = f->canceled;
        m->b.subscriptions = &m->subs;
        m->b.n_mrr = amounts_msg(&f->mrr, m->v[0], m->p[0]);
        m->b.mrr = m->p[0];
        m->b.n_open_amount = amounts_msg(&f->open_amount, m->v[1], m->p[1]);
        m->b.open_amount = m->p[1];
        m->b.n_past_due_amount = amounts_msg(&f->past_due_amount, m->v[2], m->p[2]);
        m->b.past_due_amount = m->p[2];
        m->b.invoices_open = f->invoices_open;
        return &m->b;
}

static int reply(ks_call *call, const char *tenant, const char *role, const sm_counts *c,
                 sm_source src)
{
        static const char *const sources[] = {"local", "redis", "database"};
        Keelson__Summary__V1__GetSummaryResponse r =
            KEELSON__SUMMARY__V1__GET_SUMMARY_RESPONSE__INIT;
        Keelson__Summary__V1__UsersByState u = KEELSON__SUMMARY__V1__USERS_BY_STATE__INIT;
        Keelson__Summary__V1__MembersByRole m = KEELSON__SUMMARY__V1__MEMBERS_BY_ROLE__INIT;
        billing_msg bm;
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
        r.billing = billing_of(&c->billing, role, &bm);
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
