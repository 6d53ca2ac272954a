// The console's shell: who is signed in (WhoAmI), the navigation (only what
// the role may do), and a router over /console/<page> with the History API
// (the gateway answers index.html for every page path).
import {auth, sessionHint} from './api.js';
import {el, replace, Status} from './dom.js';
import {signInPage, signUpPage} from './signin.js';
import {dashboardPage} from './dashboard.js';
import {membersPage} from './members.js';
import {keysPage} from './keys.js';
import {auditPage} from './audit.js';
import {tenantsPage} from './tenants.js';

const BASE = '/console/';

// page name -> {title, render(ctx), permission needed (or null), public}
const PAGES = {
  signin: {title: 'Sign in', render: signInPage, public: true},
  signup: {title: 'Sign up', render: signUpPage, public: true},
  dashboard: {title: 'Dashboard', render: dashboardPage, permission: 'org.read'},
  members: {title: 'Members', render: membersPage, permission: 'members.read'},
  keys: {title: 'API keys', render: keysPage, permission: 'api_keys.manage'},
  audit: {title: 'Audit log', render: auditPage, permission: 'audit.read'},
  tenants: {title: 'Tenants', render: tenantsPage, permission: null},
};
const NAV = ['dashboard', 'members', 'keys', 'audit', 'tenants'];

const state = {me: null};
const main = document.getElementById('main');
const header = document.getElementById('account');
const nav = document.getElementById('nav');

function pageOf(pathname) {
  const name = pathname.startsWith(BASE) ? pathname.slice(BASE.length).replace(/\/$/, '') : '';
  return name;
}

export function can(permission) {
  return !permission || (state.me && (state.me.permissions || []).includes(permission));
}

export function navigate(name, {replaceState = false} = {}) {
  const url = BASE + name;
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
  const items = NAV.filter((n) => can(PAGES[n].permission)).map((n) => {
    const a = link(n);
    if (n === current) a.setAttribute('aria-current', 'page');
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
export async function route() {
  const seq = ++routing;
  let name = pageOf(window.location.pathname);
  const ctx = {
    get me() {
      return state.me;
    },
    can,
    navigate,
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
  } else if (page.public && state.me) {
    name = 'dashboard';
    page = PAGES.dashboard;
  } else if (!can(page.permission)) {
    name = 'dashboard';
    page = PAGES.dashboard;
  }
  if (BASE + name !== window.location.pathname) window.history.replaceState({}, '', BASE + name);
  if (seq !== routing) return;
  document.title = `${page.title} · keelson console`;
  renderAccount();
  renderNav(name);
  const heading = el('h1', {id: 'page-title', tabindex: '-1'}, page.title);
  const body = el('div', {class: 'page', dataset: {page: name}});
  replace(main, heading, body);
  heading.focus();
  await page.render(body, ctx);
}

window.addEventListener('popstate', () => route());
window.addEventListener('keelson:signed-out', () => {
  const name = pageOf(window.location.pathname);
  if (PAGES[name] && PAGES[name].public) return; // a failed sign-in: the form shows it
  state.me = null;
  sessionHint.set(false);
  navigate('signin', {replaceState: true});
});
route();
