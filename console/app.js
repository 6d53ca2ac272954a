// The console's shell: who is signed in (WhoAmI), the navigation (only what
// the role may do), and a router over /console/<page> with the History API
// (the gateway answers index.html for every page path).
import {auth, sessionHint} from './api.js';
import {may, mayOpen} from './roles.js';
import {el, replace, Status} from './dom.js';
import {acceptPage, signInPage, signUpPage} from './signin.js';
import {dashboardPage} from './dashboard.js';
import {membersPage} from './members.js';
import {keysPage} from './keys.js';
import {auditPage} from './audit.js';
import {tenantsPage} from './tenants.js';
import {customerPage, customersPage} from './customers.js';
import {plansPage} from './plans.js';
import {subscriptionPage, subscriptionsPage} from './subscriptions.js';
import {creditNotesPage, invoicePage, invoicesPage} from './invoices.js';
import {ledgerAccountPage, ledgerPage} from './ledger.js';
import {deliveryPage, webhookEndpointPage, webhookSubscriptionPage, webhooksPage} from './webhooks.js';

const BASE = '/console/';

// page name -> {title, render(ctx), public (signed out; signedInToo: also signed in),
// under: the navigation entry it belongs to}.
// Who may open a page is roles.js's PAGE_NEEDS.
const PAGES = {
  signin: {title: 'Sign in', render: signInPage, public: true},
  signup: {title: 'Sign up', render: signUpPage, public: true},
  accept: {title: 'Accept an invitation', render: acceptPage, public: true, signedInToo: true},
  dashboard: {title: 'Dashboard', render: dashboardPage},
  members: {title: 'Members', render: membersPage},
  keys: {title: 'API keys', render: keysPage},
  audit: {title: 'Audit log', render: auditPage},
  tenants: {title: 'Tenants', render: tenantsPage},
  customers: {title: 'Customers', render: customersPage},
  customer: {title: 'Customer', render: customerPage, under: 'customers'},
  plans: {title: 'Plans', render: plansPage},
  subscriptions: {title: 'Subscriptions', render: subscriptionsPage},
  subscription: {title: 'Subscription', render: subscriptionPage, under: 'subscriptions'},
  invoices: {title: 'Invoices', render: invoicesPage},
  invoice: {title: 'Invoice', render: invoicePage, under: 'invoices'},
  'credit-notes': {title: 'Credit notes', render: creditNotesPage},
  ledger: {title: 'Ledger', render: ledgerPage},
  'ledger-account': {title: 'Ledger account', render: ledgerAccountPage, under: 'ledger'},
  webhooks: {title: 'Webhooks', render: webhooksPage},
  'webhook-endpoint': {title: 'Intake endpoint', render: webhookEndpointPage, under: 'webhooks'},
  'webhook-subscription': {title: 'Webhook subscription', render: webhookSubscriptionPage, under: 'webhooks'},
  delivery: {title: 'Delivery', render: deliveryPage, under: 'webhooks'},
};
const NAV = ['dashboard', 'members', 'keys', 'audit', 'customers', 'plans', 'subscriptions', 'invoices',
  'credit-notes', 'ledger', 'webhooks', 'tenants'];

const state = {me: null};
const main = document.getElementById('main');
const header = document.getElementById('account');
const nav = document.getElementById('nav');

function pageOf(pathname) {
  const name = pathname.startsWith(BASE) ? pathname.slice(BASE.length).replace(/\/$/, '') : '';
  return name;
}

function canOpen(name) {
  return mayOpen(state.me, name);
}

export function navigate(name, {replaceState = false, params = null} = {}) {
  const qs = params ? new URLSearchParams(params).toString() : '';
  const url = BASE + name + (qs ? `?${qs}` : '');
  if (replaceState) window.history.replaceState({}, '', url);
  else window.history.pushState({}, '', url);
  return route();
}

function link(name) {
  const a = el('a', {href: BASE + name}, PAGES[name].title);
  a.addEventListener('click', (ev) => {
    if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    ev.preventDefault();
    navigate(name);
  });
  return a;
}

function renderNav(current) {
  if (!state.me) {
    replace(nav);
    nav.hidden = true;
    return;
  }
  nav.hidden = false;
  const items = NAV.filter(canOpen).map((n) => {
    const a = link(n);
    if (n === current) a.setAttribute('aria-current', 'page');
    else if (PAGES[current] && PAGES[current].under === n) a.setAttribute('aria-current', 'true');
    return el('li', {}, a);
  });
  replace(nav, el('ul', {}, items));
}

function renderAccount() {
  if (!state.me) {
    replace(header);
    return;
  }
  const me = state.me;
  const out = el('button', {type: 'button', class: 'secondary', id: 'signout'}, 'Sign out');
  out.addEventListener('click', signOut);
  replace(header,
    el('span', {class: 'who'},
      el('span', {class: 'tenant', id: 'current-tenant'}, me.tenantName || ''),
      el('span', {class: 'user'}, me.displayName || me.email, ' · ', me.role)),
    out);
}

async function signOut() {
  try {
    await auth('Logout', {});
  } catch (err) {
    // The session is over either way: the cookie is cleared by the reply, or was already gone.
  }
  state.me = null;
  sessionHint.set(false);
  await navigate('signin', {replaceState: true});
}

// Asks who the caller is; null when signed out.
export async function refreshMe() {
  try {
    state.me = await auth('WhoAmI', {});
    sessionHint.set(true);
  } catch (err) {
    if (err.code !== 'unauthenticated') throw err;
    state.me = null;
    sessionHint.set(false);
  }
  return state.me;
}

let routing = 0;
let shown = null; // the path and query of the page drawn last; null before the first
export async function route() {
  const seq = ++routing;
  let name = pageOf(window.location.pathname);
  const ctx = {
    get me() {
      return state.me;
    },
    may: (action, target) => may(state.me, action, target),
    navigate,
    params: new URLSearchParams(window.location.search),
    refreshMe,
    signedIn: async () => {
      await refreshMe();
      await navigate('dashboard', {replaceState: true});
    },
  };
  if (state.me === null && sessionHint.get()) {
    const status = new Status();
    status.loading();
    replace(main, status.node);
    try {
      await refreshMe();
    } catch (err) {
      status.error(err);
      return;
    }
  }
  if (!PAGES[name]) name = state.me ? 'dashboard' : 'signin';
  let page = PAGES[name];
  if (!page.public && !state.me) {
    name = 'signin';
    page = PAGES.signin;
  } else if (page.public && state.me && !page.signedInToo) {
    name = 'dashboard';
    page = PAGES.dashboard;
  } else if (!page.public && !canOpen(name)) {
    name = 'dashboard';
    page = PAGES.dashboard;
  }
  // A page's parameters stay only on the page they were given to.
  if (BASE + name !== window.location.pathname) window.history.replaceState({}, '', BASE + name);
  ctx.params = new URLSearchParams(window.location.search);
  if (seq !== routing) return;
  document.title = `${page.title} · keelson console`;
  renderAccount();
  renderNav(name);
  const heading = el('h1', {id: 'page-title', tabindex: '-1'}, page.title);
  const body = el('div', {class: 'page', dataset: {page: name}});
  replace(main, heading, body);
  // A page the console moved to takes focus at its title, so that a screen
  // reader says where it is; a page loaded by its address leaves focus at
  // the top of the document, where the first Tab reaches the skip link.
  if (shown !== null) heading.focus();
  shown = window.location.pathname + window.location.search;
  await page.render(body, ctx);
}

// Back and forward draw the page of the new address; a change of the
// fragment alone (the skip link's #main) is not a new page.
window.addEventListener('popstate', () => {
  if (window.location.pathname + window.location.search === shown) return;
  route();
});
window.addEventListener('keelson:signed-out', () => {
  const name = pageOf(window.location.pathname);
  if (PAGES[name] && PAGES[name].public) return; // a failed sign-in: the form shows it
  state.me = null;
  sessionHint.set(false);
  navigate('signin', {replaceState: true});
});
route();
