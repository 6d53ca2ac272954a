// The admin console (console/, served by the gateway under /console/) in
// headless Chromium: what a person does with it, and what it must never
// let happen. Registered in tests/CMakeLists.txt (integration.browser_console);
// the stack's gateway comes from $KEELSON_IT_STACK/env (KEELSON_IT_GATEWAY_URL),
// or from $KEELSON_GATEWAY_URL when run by hand.
//
//   sign up, sign out, a failed and a good sign in, the dashboard; invite a
//   member and see the summary count it; create an API key (shown once,
//   copied, usable), revoke it (refused afterwards); the audit log; the
//   tenant list; every section and every detail page at phone width
//   (nothing scrolls sideways); keyboard navigation: from the top
//   of a page Tab reaches the skip link, Sign out, the navigation and a
//   form's fields in order; the skip link moves focus to the content without
//   drawing the page again; a section opens by Tab and Enter; an invitation
//   is revoked with the keyboard alone (Enter, its confirmation, Escape and
//   Cancel stepping back).
//   On every page: no console error or uncaught exception, no axe-core
//   violation of serious or critical impact, a screenshot (the folder in
//   $KEELSON_BROWSER_SCREENSHOTS).
//   Security: the session cookie is HttpOnly (absent from document.cookie),
//   Secure and SameSite=Strict; a request with the cookie but without
//   X-Keelson-Console, or from another origin, is refused; an XSS payload in
//   the tenant and display names is shown as text and runs nothing; logout
//   ends the session (the old cookie is refused).
//   Billing, ledger, webhooks: a webhook subscription and a Standard
//   Webhooks intake endpoint; a plan, a customer (an XSS payload in its
//   name, shown as text), a subscription and its invoice with its lines; the
//   subscription's history, a pause; a credit note; the dashboard's charts;
//   the ledger's trial balance and the cash account's balance once the
//   payment is posted (polled, bounded); the subscription's deliveries and a
//   redelivery; an event received by the endpoint (signed here) re-applied.
//   Then what a tenant operator does next: the customer updated, a one-off
//   invoice (draft, another line, finalized) paid in part by hand, the
//   subscription changed to another plan and quantity after a preview of its
//   exact lines, a plan archived.
//   Roles, with real sessions: an admin and a member invited from the
//   console accept in browser contexts of their own (the accept page, then
//   sign out and in), are offered nothing their role may not do (writes and
//   pages), still do what it may, and the server refuses with
//   permission_denied what the page would have offered (called from the
//   page's own session).
//   Then the owner changes a member's role, revokes an invitation and removes
//   the member (a double click on its confirmation calls RemoveMember once;
//   the audit log shows each); the audit log filtered by the
//   server (an action whose rows are on no first page, an actor) and paged
//   under a filter, after keys created and revoked in a loop; accepts, signed in, an invitation
//   to a second tenant (its name an XSS payload too) and switches back; and
//   pages through a list longer than a page.
import {execFileSync} from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import assert from 'node:assert/strict';
import puppeteer from 'puppeteer-core';

const require = createRequire(import.meta.url);
const AXE_SOURCE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const WAIT_MS = 20000; // how long an expected element may take to appear (not asserted)
const XSS_TENANT = '<img src=x onerror=alert(1)>';
const XSS_NAME = '<script>alert(2)</script><img src=x onerror=alert(3)> Ada';
const XSS_CUSTOMER = '<img src=x onerror=alert(4)>Grace';
const SESSION_COOKIE = '__Host-keelson_session';
const POLL_TRIES = 80; // bounded waits for what other services do after a write
const POLL_PAUSE_MS = 250;

// A setting of the stack: from the environment, else from $KEELSON_IT_STACK/env.
function stackSetting(name) {
  if (process.env[name]) return process.env[name];
  const dir = process.env.KEELSON_IT_STACK;
  assert.ok(dir, `set KEELSON_IT_STACK (the stack folder) or ${name}`);
  const env = fs.readFileSync(path.join(dir, 'env'), 'utf8');
  const m = env.match(new RegExp(`^${name}=(.+)$`, 'm'));
  assert.ok(m, `no ${name} in ${dir}/env`);
  return m[1].trim();
}

const GW = process.env.KEELSON_GATEWAY_URL || stackSetting('KEELSON_IT_GATEWAY_URL');
const SHOTS = process.env.KEELSON_BROWSER_SCREENSHOTS || path.resolve('browser-screenshots');
const CHROMIUM = process.env.KEELSON_CHROMIUM || '/usr/bin/chromium';
fs.mkdirSync(SHOTS, {recursive: true});

const problems = []; // console errors, uncaught exceptions, dialogs: each fails the test
let expectedNetworkErrors = 0; // 401s a step provokes on purpose
const dialogs = [];

function step(name) {
  console.log(`# ${name}`);
}

async function rpc(method, body, headers = {}) {
  const res = await fetch(`${GW}/keelson.auth.v1.AuthService/${method}`, {
    method: 'POST',
    headers: {'Content-Type': 'application/json', ...headers},
    body: JSON.stringify(body),
  });
  return {status: res.status, body: await res.json()};
}

// Every reply of 500 or more fails the test, named with its time, address
// and body, so that a failure can be matched with the services' logs.
function watchServerErrors(p, who) {
  p.on('response', async (res) => {
    if (res.status() < 500) return;
    let body = '';
    try {
      body = (await res.text()).slice(0, 300);
    } catch (err) {
      body = `(body unreadable: ${err.message})`;
    }
    const line = `server error (${who}) at ${new Date().toISOString()}: ${res.request().method()} ${res.url()} ${res.status()} ${body}`;
    console.log(`# ${line}`);
    problems.push(line);
  });
}

async function waitPage(page, name) {
  try {
    await page.waitForSelector(`.page[data-page="${name}"]`, {timeout: WAIT_MS});
  } catch (err) {
    const shown = await page.$eval('main', (m) => m.innerText).catch(() => '(no main)');
    throw new Error(`the ${name} page did not show; ${page.url()} shows: ${shown.slice(0, 300)}`, {cause: err});
  }
}

async function checkPage(page, name) {
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, {resultTypes: ['violations']});
    return r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5)}));
  });
  for (const v of violations) console.log(`  axe ${v.impact}: ${v.id} (${v.help}) at ${v.nodes.join(', ')}`);
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${name}: accessibility violations of serious or critical impact`);
  await page.screenshot({path: path.join(SHOTS, `${name}.png`), fullPage: true});
  assert.deepEqual(dialogs, [], `${name}: a dialog opened (script ran)`);
}

async function text(page, selector) {
  await page.waitForSelector(selector, {timeout: WAIT_MS});
  return page.$eval(selector, (n) => n.textContent);
}

async function fill(page, selector, value) {
  await page.click(selector, {count: 3});
  await page.$eval(selector, (n) => { n.value = ''; });
  await page.type(selector, value);
}

async function sessionCookie(page) {
  const cookies = await page.browserContext().cookies();
  return cookies.find((c) => c.name === SESSION_COOKIE);
}

async function nav(page, name) {
  await page.waitForSelector(`#nav a[href="/console/${name}"]`, {visible: true, timeout: WAIT_MS});
  await page.click(`#nav a[href="/console/${name}"]`);
  await waitPage(page, name);
}

// Clicks the button of scope whose text is exactly label (a confirmButton's
// second step has no id of its own).
async function clickButton(page, scope, label) {
  await page.waitForFunction((sc, l) => [...document.querySelectorAll(`${sc} button`)].some((b) => b.textContent === l && !b.disabled),
    {timeout: WAIT_MS}, scope, label);
  await page.evaluate((sc, l) => [...document.querySelectorAll(`${sc} button`)].find((b) => b.textContent === l).click(), scope, label);
}

// Clicks the button labelled label in the row of scope that holds rowText.
// (Written out twice: the page's CSP allows no eval to share it.)
async function clickInRow(page, scope, rowText, label) {
  await page.waitForFunction((sc, t, l) => [...document.querySelectorAll(`${sc} tr`)].filter((tr) => tr.textContent.includes(t))
    .some((tr) => [...tr.querySelectorAll('button')].some((x) => x.textContent === l && !x.disabled)), {timeout: WAIT_MS}, scope, rowText, label);
  await page.evaluate((sc, t, l) => [...document.querySelectorAll(`${sc} tr`)].filter((tr) => tr.textContent.includes(t))
    .flatMap((tr) => [...tr.querySelectorAll('button')]).find((x) => x.textContent === l && !x.disabled).click(), scope, rowText, label);
}

async function contains(page, selector, needle) {
  await page.waitForFunction((sel, n) => document.querySelector(sel)?.textContent.includes(n), {timeout: WAIT_MS}, selector, needle);
}

// Nothing is loading: no list busy, no status or placeholder saying
// "Loading…" (a page shows one until its first read answers).
async function idle(page) {
  await page.waitForFunction(() => !document.querySelector('[aria-busy="true"]') && !document.querySelector('main .loading'), {timeout: WAIT_MS});
}

// Follows the first link in scope whose text includes needle (or whose href does).
async function follow(page, scope, needle, name) {
  await page.waitForFunction((sc, n) => [...document.querySelectorAll(`${sc} a`)].some((a) => a.textContent.includes(n) || a.href.includes(n)),
    {timeout: WAIT_MS}, scope, needle);
  await page.evaluate((sc, n) => [...document.querySelectorAll(`${sc} a`)].find((a) => a.textContent.includes(n) || a.href.includes(n)).click(), scope, needle);
  await waitPage(page, name);
  await idle(page);
}

async function pause() {
  await new Promise((ok) => setTimeout(ok, POLL_PAUSE_MS));
}

// A Standard Webhooks request, signed as a provider signs it.
function standardWebhook(secret, msgId, body) {
  const ts = Math.floor(Date.now() / 1000);
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const sig = crypto.createHmac('sha256', key).update(`${msgId}.${ts}.${body}`).digest('base64');
  return {'content-type': 'application/json', 'webhook-id': msgId, 'webhook-timestamp': String(ts), 'webhook-signature': `v1,${sig}`};
}

// The string fields of a protobuf message (wire type 2), by field number:
// enough for auth.email's EmailRequested (to = 1, kind = 2, token = 3).
function protoStrings(buf) {
  const out = {};
  let i = 0;
  const varint = () => {
    let v = 0;
    for (let shift = 0; ; shift += 7) {
      const b = buf[i++];
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const wire = key & 7;
    if (wire === 0) varint();
    else if (wire === 2) {
      const len = varint();
      out[Math.floor(key / 8)] = buf.subarray(i, i + len).toString('utf8');
      i += len;
    } else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else throw new Error(`wire type ${wire}`);
  }
  return out;
}

// The token of the invitation mailed to address: what a mail sender puts in
// its link, read from auth's outbox (the event auth.email) as the mail
// sender would get it. Polled, bounded: the row is written by the Invite.
async function invitationToken(address) {
  const dsn = stackSetting('KEELSON_IT_PG_DSN');
  for (let i = 0; i < POLL_TRIES; i += 1) {
    const rows = execFileSync('psql', [dsn, '-At', '-c',
      "SELECT encode(payload, 'hex') FROM auth.outbox WHERE topic = 'auth.email' ORDER BY id DESC LIMIT 200"],
    {encoding: 'utf8'}).split('\n').filter(Boolean);
    for (const row of rows) {
      const m = protoStrings(Buffer.from(row, 'hex'));
      if (m[1] === address && m[2] === 'invitation') return m[3];
    }
    await pause();
  }
  throw new Error(`no invitation mail to ${address}`);
}

// A call made from the page, with its own session (the cookie and the
// console's header, as the console's api.js makes it): {status, code, message}.
async function callFromPage(page, service, method, body) {
  return page.evaluate(async (sv, m, b) => {
    const res = await fetch(`/keelson.${sv}/${m}`, {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json', 'X-Keelson-Console': '1'}, body: JSON.stringify(b)});
    const j = await res.json().catch(() => ({}));
    return {status: res.status, code: j.code || '', message: j.message || ''};
  }, service, method, body);
}

// What has focus, as the keyboard steps name it: '#id', 'a <href>' for a
// link without an id, else the tag and its label or text; 'body' for none.
async function focused(page) {
  return page.evaluate(() => {
    const a = document.activeElement;
    if (!a || a === document.body) return 'body';
    if (a.id) return `#${a.id}`;
    if (a.tagName === 'A') return `a ${a.getAttribute('href')}`;
    return `${a.tagName.toLowerCase()} ${(a.getAttribute('aria-label') || a.textContent).trim()}`;
  });
}

// Presses Tab until want has focus (in a table row holding rowText, when
// given), at most max times, as a keyboard user would get there.
async function tabTo(page, want, rowText = '', max = 80) {
  for (let i = 0; i < max; i += 1) {
    await page.keyboard.press('Tab');
    if (await focused(page) !== want) continue;
    if (!rowText || await page.evaluate((t) => Boolean(document.activeElement.closest('tr')?.textContent.includes(t)), rowText)) return;
  }
  throw new Error(`${want}${rowText ? ` (in the row of ${rowText})` : ''} is not reached by Tab`);
}

// How many calls of method the page makes while fn runs.
async function callsDuring(page, method, fn) {
  let n = 0;
  const seen = (req) => {
    if (new URL(req.url()).pathname.endsWith(`/${method}`)) n += 1;
  };
  page.on('request', seen);
  try {
    await fn();
  } finally {
    page.off('request', seen);
  }
  return n;
}

// At phone width: the page drawn (loaded), nothing scrolls sideways, and checkPage's checks.
async function phoneCheck(page, name, shot) {
  await waitPage(page, name);
  await idle(page);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `${shot} scrolls sideways at phone width (${overflow} px)`);
  await checkPage(page, `phone-${shot}`);
}

async function pendingInvitations(page) {
  await page.waitForSelector('#tile-pending .tile-value', {timeout: WAIT_MS});
  return page.$eval('#tile-pending .tile-value', (n) => n.textContent);
}

async function main() {
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  try {
    await run(browser);
  } finally {
    await browser.close();
  }
}

async function run(browser) {
  const origin = new URL(GW).origin;
  await browser.defaultBrowserContext().overridePermissions(origin, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
  const page = await browser.newPage();
  await page.setViewport({width: 1280, height: 900});
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expectedNetworkErrors > 0 && /status of 401/.test(m.text())) {
      expectedNetworkErrors -= 1;
      return;
    }
    problems.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  watchServerErrors(page, 'owner');
  page.on('dialog', async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });

  const id = `${Date.now()}${Math.floor(Math.random() * 1e6)}`;
  const email = `ada.${id}@example.com`;
  const password = 'correct horse battery';

  step('the console answers with its security headers');
  const res = await page.goto(`${GW}/console/`, {waitUntil: 'networkidle0'});
  assert.equal(res.status(), 200);
  const h = res.headers();
  assert.match(h['content-security-policy'], /default-src 'none'/);
  assert.match(h['content-security-policy'], /script-src 'self'/);
  assert.match(h['content-security-policy'], /frame-ancestors 'none'/);
  assert.doesNotMatch(h['content-security-policy'], /unsafe-inline|unsafe-eval/);
  assert.equal(h['x-content-type-options'], 'nosniff');
  assert.equal(h['referrer-policy'], 'no-referrer');
  await waitPage(page, 'signin');
  await checkPage(page, 'signin');

  step('sign up with an XSS payload in the names');
  await page.click('a[href="/console/signup"]');
  await waitPage(page, 'signup');
  await checkPage(page, 'signup');
  await fill(page, '#signup-email', email);
  await fill(page, '#signup-password', password);
  await fill(page, '#signup-display', XSS_NAME);
  await fill(page, '#signup-tenant', XSS_TENANT);
  await page.click('#signup-submit');
  await waitPage(page, 'dashboard');
  assert.equal(await text(page, '#current-tenant'), XSS_TENANT, 'the tenant name is shown as text');
  assert.match(await text(page, '#account .user'), /<script>alert\(2\)<\/script>/);
  assert.equal(await page.$$eval('#account img, #account script', (n) => n.length), 0);
  assert.equal(await pendingInvitations(page), '0');
  await checkPage(page, 'dashboard');

  step('the session is an HttpOnly, Secure, SameSite=Strict cookie that scripts cannot read');
  const cookie = await sessionCookie(page);
  assert.ok(cookie, 'the browser kept the Secure cookie over http://127.0.0.1');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.secure, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(cookie.path, '/');
  const visible = await page.evaluate(() => document.cookie);
  assert.ok(!visible.includes(SESSION_COOKIE) && !visible.includes(cookie.value), 'document.cookie shows the session');
  const stored = await page.evaluate(() => JSON.stringify({...window.localStorage, ...window.sessionStorage}));
  assert.ok(!stored.includes(cookie.value), 'the token is in web storage');

  step('the cookie alone, or from another origin, authenticates nothing');
  const withCookie = {Cookie: `${SESSION_COOKIE}=${cookie.value}`};
  let r = await rpc('WhoAmI', {}, withCookie);
  assert.ok(r.status === 401 || r.status === 403, `cookie without X-Keelson-Console: ${r.status}`);
  r = await rpc('WhoAmI', {}, {...withCookie, 'X-Keelson-Console': '1', Origin: 'http://evil.example'});
  assert.ok(r.status === 401 || r.status === 403, `cookie from another origin: ${r.status}`);
  r = await rpc('WhoAmI', {}, {...withCookie, 'X-Keelson-Console': '1', 'Sec-Fetch-Site': 'cross-site'});
  assert.ok(r.status === 401 || r.status === 403, `cookie cross-site: ${r.status}`);
  r = await rpc('WhoAmI', {}, {...withCookie, 'X-Keelson-Console': '1', Origin: origin});
  assert.equal(r.status, 200, 'the console\'s own request works');
  assert.equal(r.body.email, email);

  step('sign out, a wrong password shows the Connect error, sign in');
  await page.click('#signout');
  await waitPage(page, 'signin');
  assert.equal(await sessionCookie(page), undefined, 'sign out cleared the cookie');
  await fill(page, '#signin-email', email);
  await fill(page, '#signin-password', 'not the password');
  expectedNetworkErrors += 1;
  await page.click('#signin-submit');
  await page.waitForSelector('.status.error', {timeout: WAIT_MS});
  assert.match(await text(page, '.status.error'), /invalid email or password/);
  await checkPage(page, 'signin-error');
  await fill(page, '#signin-password', password);
  await page.click('#signin-submit');
  await waitPage(page, 'dashboard');

  step('keyboard: from the top of a page, the skip link, the navigation and a form, in order');
  await page.goto(`${GW}/console/keys`, {waitUntil: 'networkidle0'});
  await waitPage(page, 'keys');
  await idle(page);
  assert.equal(await focused(page), 'body', 'a page loaded by its address moved focus away from its top');
  const tabOrder = [];
  for (let i = 0; i < 40 && tabOrder[tabOrder.length - 1] !== '#key-submit'; i += 1) {
    await page.keyboard.press('Tab');
    const now = await focused(page);
    if (now !== tabOrder[tabOrder.length - 1]) tabOrder.push(now); // a date field takes a Tab per part
  }
  assert.deepEqual(tabOrder, ['a #main', '#signout',
    ...['dashboard', 'members', 'keys', 'audit', 'customers', 'plans', 'subscriptions', 'invoices', 'credit-notes', 'ledger',
      'webhooks', 'tenants'].map((n) => `a /console/${n}`),
    '#key-name', '#key-role', '#key-expires', '#key-submit'], 'the Tab order from the top of the API keys page');
  await page.reload({waitUntil: 'networkidle0'});
  await waitPage(page, 'keys');
  await idle(page);
  await page.$eval('#key-name', (n) => { n.value = 'typed before the skip'; });
  await page.keyboard.press('Tab');
  assert.equal(await focused(page), 'a #main', 'the first Tab reaches the skip link');
  assert.ok(await page.$eval('.skip', (a) => a.getBoundingClientRect().left >= 0), 'the focused skip link is on screen');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.id === 'main', {timeout: WAIT_MS});
  assert.equal(await page.$eval('#key-name', (n) => n.value), 'typed before the skip', 'the skip link drew the page again');
  await page.keyboard.press('Tab');
  assert.equal(await focused(page), '#key-name', 'after the skip link, Tab goes past the navigation to the content');
  await page.$eval('#key-name', (n) => { n.value = ''; });

  step('members: the display name is text; invite a member');
  await nav(page, 'members');
  await page.waitForSelector('#members-list table', {timeout: WAIT_MS});
  assert.ok((await text(page, '#members-list table')).includes(XSS_NAME));
  assert.equal(await page.$$eval('#members-list img, #members-list script', (n) => n.length), 0);
  const invitee = `bob.${id}@example.com`;
  await fill(page, '#invite-emails', invitee);
  await page.select('#invite-role', 'member');
  await page.click('#invite-submit');
  await page.waitForFunction((e) => document.querySelector('#invitations-list')?.textContent.includes(e), {timeout: WAIT_MS}, invitee);
  await checkPage(page, 'members');

  step('the dashboard counts the invitation');
  await nav(page, 'dashboard');
  for (let i = 0; (await pendingInvitations(page)) !== '1'; i += 1) {
    assert.ok(i < 40, 'the summary never counted the invitation');
    await new Promise((ok) => setTimeout(ok, 250)); // the summary hears of the write by an event
    await page.click('#summary-refresh');
    await page.waitForSelector('#summary:not([aria-busy])', {timeout: WAIT_MS});
  }
  await checkPage(page, 'dashboard-after-invite');

  step('an API key: shown once, copied, usable, revoked');
  await nav(page, 'keys');
  await page.waitForSelector('#keys-list:not([aria-busy])', {timeout: WAIT_MS});
  await checkPage(page, 'keys');
  await fill(page, '#key-name', 'ci');
  await page.select('#key-role', 'admin');
  await page.click('#key-submit');
  await page.waitForSelector('#new-key', {timeout: WAIT_MS});
  const key = await page.$eval('#new-key', (n) => n.value);
  assert.match(key, /^ks_live_[A-Za-z0-9_-]{43}$/);
  await page.click('#copy-key');
  await page.waitForFunction(() => document.querySelector('#copy-status')?.textContent !== '', {timeout: WAIT_MS});
  const copied = await page.evaluate(() => navigator.clipboard.readText().catch(() => null));
  if (copied !== null) assert.equal(copied, key, 'the clipboard holds the key');
  await checkPage(page, 'keys-created');
  r = await rpc('ListMembers', {}, {Authorization: `Bearer ${key}`});
  assert.equal(r.status, 200, 'the new key works');
  await page.click('#dismiss-key');
  assert.equal(await page.$('#new-key'), null);
  assert.ok(!(await page.evaluate(() => document.body.innerText)).includes(key), 'the key is shown once');
  await page.click('button[aria-label="Revoke ci"]');
  await page.waitForFunction(() => document.querySelector('.status.ok')?.textContent.includes('revoked'), {timeout: WAIT_MS});
  r = await rpc('ListMembers', {}, {Authorization: `Bearer ${key}`});
  assert.equal(r.status, 401, 'the revoked key is refused');
  await page.click('#keys-revoked');
  await page.waitForFunction(() => document.querySelector('#keys-list')?.textContent.includes('revoked'), {timeout: WAIT_MS});

  step('the audit log');
  await nav(page, 'audit');
  await page.waitForFunction(() => document.querySelector('#audit-list')?.textContent.includes('api_key.revoked'), {timeout: WAIT_MS});
  assert.ok((await text(page, '#audit-list')).includes('invitation.created'));
  await page.select('#audit-action', 'api_key.created');
  await idle(page);
  assert.ok((await text(page, '#audit-list')).includes('api_key.created'));
  assert.ok(!(await text(page, '#audit-list')).includes('api_key.revoked'));
  await checkPage(page, 'audit');

  step('tenants: the name is text');
  await nav(page, 'tenants');
  await page.waitForSelector('#tenants-list table', {timeout: WAIT_MS});
  assert.ok((await text(page, '#tenants-list')).includes(XSS_TENANT));
  await checkPage(page, 'tenants');

  step('webhooks: an intake endpoint and an outbound subscription');
  await nav(page, 'webhooks');
  await idle(page);
  await checkPage(page, 'webhooks');
  const intakeSecret = `whsec_${crypto.randomBytes(32).toString('base64')}`;
  await page.select('#endpoint-provider', 'PROVIDER_STANDARD');
  await fill(page, '#endpoint-secret', intakeSecret);
  await fill(page, '#endpoint-description', 'provider test');
  await page.click('#endpoint-submit');
  await contains(page, '#endpoints-list', 'provider test');
  await fill(page, '#sub-url', 'https://hooks.keelson.invalid/console-test');
  await fill(page, '#sub-description', 'invoices out');
  await page.click('#sub-submit');
  await page.waitForSelector('#new-secret', {timeout: WAIT_MS});
  assert.match(await page.$eval('#new-secret', (n) => n.value), /^whsec_/);
  await checkPage(page, 'webhooks-created');
  await page.click('#dismiss-secret');
  await contains(page, '#webhook-subscriptions-list', 'invoices out');

  step('billing: a plan, a customer with an XSS payload in its name, a subscription and its invoice');
  const planCode = `basic-${id}`;
  await nav(page, 'plans');
  await idle(page);
  await checkPage(page, 'plans');
  await fill(page, '#plan-code', planCode);
  await fill(page, '#plan-name', 'Basic');
  await fill(page, '#plan-amount', '1999');
  await page.click('#plan-submit');
  await contains(page, '#plans-list', planCode);
  await nav(page, 'customers');
  await idle(page);
  await checkPage(page, 'customers');
  const customerEmail = `grace.${id}@example.com`;
  await fill(page, '#customer-email', customerEmail);
  await fill(page, '#customer-name', XSS_CUSTOMER);
  await page.select('#customer-pm', 'pm_card_visa');
  await page.click('#customer-submit');
  await contains(page, '#customers-list', XSS_CUSTOMER);
  assert.equal(await page.$$eval('#customers-list img, #customers-list script', (n) => n.length), 0, 'the customer name made markup');
  await fill(page, '#customers-email', customerEmail.toUpperCase());
  await page.keyboard.press('Enter');
  await idle(page);
  assert.equal(await page.$$eval('#customers-list tbody tr', (n) => n.length), 1, 'the email filter');
  await follow(page, '#customers-list', XSS_CUSTOMER, 'customer');
  assert.ok((await text(page, '#page-title')).includes(XSS_CUSTOMER));
  const customerUrl = page.url();
  assert.equal(await page.$$eval('main img, main script', (n) => n.length), 0);
  await page.waitForSelector('#subscribe-plan', {timeout: WAIT_MS});
  await checkPage(page, 'customer');
  await page.select('#subscribe-plan', planCode);
  await page.select('#subscribe-trial', '-1');
  await page.click('#subscribe-submit');
  await contains(page, '#customer-invoices', 'INV-');
  await contains(page, '#customer-subscriptions', 'active');
  await follow(page, '#customer-invoices', 'INV-', 'invoice');
  await page.waitForSelector('#invoice-lines table', {timeout: WAIT_MS});
  const lines = await text(page, '#invoice-lines table');
  assert.ok(lines.includes('Basic') && lines.includes('$19.99'), `the invoice's line: ${lines}`);
  assert.ok((await text(page, '#invoice-detail')).includes('paid'), 'the visa card paid the invoice');
  const invoiceUrl = page.url();
  await checkPage(page, 'invoice');

  step('billing: the subscription, its history, a pause; a credit note');
  await follow(page, '#invoice-detail', 'subscription?id=', 'subscription');
  await contains(page, '#subscription-history', 'create');
  const subscriptionUrl = page.url();
  await checkPage(page, 'subscription');
  await clickButton(page, '#subscription-actions', 'Pause');
  await clickButton(page, '#subscription-actions', 'Pause now');
  await contains(page, '#subscription-history', 'pause');
  assert.ok((await text(page, '#subscription-detail')).includes('paused'));
  await clickButton(page, '#subscription-actions', 'Resume');
  await clickButton(page, '#subscription-actions', 'Resume now');
  await contains(page, '#subscription-history', 'resume');
  await follow(page, '#subscription-invoices', 'INV-', 'invoice');
  await page.waitForSelector('#credit-amount', {timeout: WAIT_MS});
  await fill(page, '#credit-amount', '500');
  await fill(page, '#credit-reason', 'goodwill');
  // Paid with pm_card_visa: the note may go back to the card instead of the balance.
  await page.click('#credit-refund');
  await page.click('#credit-submit');
  await contains(page, '#invoice-detail', 'CN-');
  await contains(page, '#invoice-detail', 'refund');
  await nav(page, 'subscriptions');
  await idle(page);
  await contains(page, '#subscriptions-list', planCode);
  await checkPage(page, 'subscriptions');
  await nav(page, 'invoices');
  await idle(page);
  await contains(page, '#invoices-list', 'INV-');
  await checkPage(page, 'invoices');
  await nav(page, 'credit-notes');
  await idle(page);
  await contains(page, '#credit-notes-list', 'goodwill');
  await checkPage(page, 'credit-notes');

  step('the dashboard draws the billing charts');
  await nav(page, 'dashboard');
  await page.waitForSelector('#chart-invoices svg text', {timeout: WAIT_MS});
  await page.waitForSelector('#chart-subscriptions svg', {timeout: WAIT_MS});
  assert.ok((await text(page, '#chart-revenue-USD')).includes('$19.99'), 'the revenue chart writes its numbers');
  assert.ok((await text(page, '#billing-history-note')).includes('newest invoices'));
  await checkPage(page, 'dashboard-billing');

  step('the ledger: the payment reaches the cash account (polled, bounded)');
  await nav(page, 'ledger');
  for (let i = 0; !(await text(page, '#ledger-accounts')).includes('billing: cash'); i += 1) {
    assert.ok(i < POLL_TRIES, 'the invoice never reached the ledger');
    await pause(); // the billing relay posts to the ledger after commit
    await page.click('#ledger-show');
    await idle(page);
  }
  assert.ok((await text(page, '#trial-totals')).includes('yes: debits equal credits'));
  await checkPage(page, 'ledger');
  await page.evaluate(() => [...document.querySelectorAll('#ledger-accounts tbody tr')]
    .find((tr) => tr.textContent.includes('billing: cash')).querySelector('a').click());
  await waitPage(page, 'ledger-account');
  const ledgerAccountUrl = page.url();
  assert.equal(await text(page, '#account-balance'), '$14.99', 'the cash account holds the payment less the refund');
  await contains(page, '#account-transfers', 'debit');
  await checkPage(page, 'ledger-account');

  step('webhooks: the deliveries of the subscription, a redelivery (polled, bounded)');
  await nav(page, 'webhooks');
  await follow(page, '#webhook-subscriptions-list', 'invoices out', 'webhook-subscription');
  for (let i = 0; !(await text(page, '#deliveries-list')).includes('billing.invoice'); i += 1) {
    assert.ok(i < POLL_TRIES, 'no delivery was made for the invoice events');
    await pause(); // the fan-out follows the event
    await page.reload({waitUntil: 'networkidle0'});
    await waitPage(page, 'webhook-subscription');
    await idle(page);
  }
  await checkPage(page, 'webhook-subscription');
  const webhookSubscriptionUrl = page.url();
  const redeliver = await page.$eval('#deliveries-list tbody tr button', (b) => b.getAttribute('aria-label'));
  await page.click(`#deliveries-list button[aria-label="${redeliver}"]`);
  await clickButton(page, '#deliveries-list', (await page.$eval('#deliveries-list .confirm button', (b) => b.textContent)));
  await contains(page, '.status.ok', 'pending again');
  await follow(page, '#deliveries-list', '', 'delivery');
  const deliveryUrl = page.url();
  await page.waitForSelector('pre.body', {timeout: WAIT_MS});
  assert.ok((await text(page, 'pre.body')).includes('billing.'), 'the delivery shows its body');
  await checkPage(page, 'delivery');

  step('webhooks: an event received by the endpoint, re-applied');
  await nav(page, 'webhooks');
  await idle(page);
  const endpointHref = await page.$eval('#endpoints-list tbody a', (a) => a.getAttribute('href'));
  const endpointId = new URL(endpointHref, GW).searchParams.get('id');
  const msgId = `msg_${id}`;
  const hookBody = JSON.stringify({type: 'console.test', data: {n: 1}});
  const hook = await fetch(`${GW}/webhooks/standard/${endpointId}`, {method: 'POST', headers: standardWebhook(intakeSecret, msgId, hookBody), body: hookBody});
  assert.equal(hook.status, 200, `the signed event was refused: ${await hook.text()}`);
  await follow(page, '#endpoints-list', 'provider test', 'webhook-endpoint');
  const endpointUrl = page.url();
  await contains(page, '#received-list', msgId);
  await clickButton(page, '#received-list', 'Re-apply');
  await clickButton(page, '#received-list', `Re-apply ${msgId}`);
  await contains(page, '.status.ok', msgId);
  await checkPage(page, 'webhook-endpoint');

  step('billing: the customer updated (UpdateCustomer names what changed)');
  await page.goto(customerUrl, {waitUntil: 'networkidle0'});
  await waitPage(page, 'customer');
  await idle(page);
  await fill(page, '#edit-tax', '1000');
  await page.$eval('#edit-pm', (n) => { n.value = ''; }); // invoices now wait to be paid by hand
  await page.click('#edit-submit');
  await contains(page, '.status.ok', 'Saved: tax rate bp, default payment method');
  const facts = await text(page, '#customer-detail');
  assert.ok(facts.includes('10.00%') && facts.includes('none'), `the customer's new fields: ${facts}`);
  assert.ok((await text(page, '#page-title')).includes(XSS_CUSTOMER), 'the name was kept');
  await checkPage(page, 'customer-updated');

  step('billing: a one-off invoice, a draft with another line, finalized, paid in part by hand');
  await fill(page, '#oneoff-description', 'Onboarding');
  await fill(page, '#oneoff-line-1-desc', 'Setup');
  await fill(page, '#oneoff-line-1-unit', '15000');
  await page.click('#oneoff-add-line');
  await fill(page, '#oneoff-line-2-desc', 'Launch discount');
  await fill(page, '#oneoff-line-2-unit', '-2500');
  await page.click('#oneoff-submit');
  await waitPage(page, 'invoice');
  await page.waitForSelector('#finalize-submit', {timeout: WAIT_MS});
  assert.ok((await text(page, '#page-title')).includes('draft'));
  await fill(page, '#add-line-1-desc', 'Training hour');
  await fill(page, '#add-line-1-qty', '2');
  await fill(page, '#add-line-1-unit', '1000');
  await page.click('#add-lines-submit');
  await contains(page, '.status.ok', 'Lines added');
  const draftLines = await text(page, '#invoice-lines table');
  assert.ok(draftLines.includes('Setup') && draftLines.includes('Launch discount') && draftLines.includes('Training hour'), draftLines);
  await checkPage(page, 'invoice-draft');
  await page.click('#finalize-submit');
  await contains(page, '.status.ok', 'Finalized as INV-');
  // (15000 - 2500 + 2 x 1000) at 10%: 14500 + 1450 = 15950.
  assert.ok((await text(page, '#invoice-detail')).includes('$159.50'), 'the total with 10% tax');
  assert.equal(await page.$('#finalize-submit'), null, 'a finalized invoice takes no lines');
  // The form offers what remains: the total less the customer's credit (the credit note above).
  const remaining = Number(await page.$eval('#payment-amount', (n) => n.value));
  assert.ok(remaining > 5000 && remaining <= 15950, `left to pay: ${remaining}`);
  await fill(page, '#payment-amount', '5000');
  await fill(page, '#payment-reference', 'wire 2027-001');
  await page.click('#payment-submit');
  await contains(page, '.status.ok', 'Recorded $50.00: the invoice is open');
  const paid = await text(page, '#invoice-detail');
  const left = `$${((remaining - 5000) / 100).toFixed(2)}`;
  assert.ok(paid.includes('wire 2027-001') && paid.includes('out of band') && paid.includes(left), `the payment, ${left} left: ${paid}`);
  const openInvoiceUrl = page.url();
  await checkPage(page, 'invoice-paid-in-part');

  step('billing: a change of plan and quantity, previewed line by line, then made');
  const seatsCode = `seats-${id}`;
  await nav(page, 'plans');
  await idle(page);
  await fill(page, '#plan-code', seatsCode);
  await fill(page, '#plan-name', 'Seats');
  await page.select('#plan-model', 'PRICE_MODEL_PER_UNIT');
  await fill(page, '#plan-amount', '1000');
  await page.click('#plan-submit');
  await contains(page, '#plans-list', seatsCode);
  await page.goto(subscriptionUrl, {waitUntil: 'networkidle0'});
  await waitPage(page, 'subscription');
  await page.waitForSelector('#change-plan', {timeout: WAIT_MS});
  await page.select('#change-plan', seatsCode);
  await fill(page, '#change-quantity', '3');
  await page.select('#change-proration', 'always_invoice');
  await page.click('#change-preview-submit');
  await page.waitForSelector('#change-preview table', {timeout: WAIT_MS});
  const preview = await text(page, '#change-preview');
  assert.ok(preview.includes('Unused time') && preview.includes('Remaining time') && preview.includes('3 × Seats'), `the preview: ${preview}`);
  assert.ok(await page.$('#change-confirm'), 'the preview offers to make the change');
  await checkPage(page, 'subscription-change-preview');
  await fill(page, '#change-quantity', '2');
  assert.equal(await page.$('#change-confirm'), null, 'an edit drops the preview it no longer matches');
  await fill(page, '#change-quantity', '3');
  await page.click('#change-preview-submit');
  await page.waitForSelector('#change-confirm', {timeout: WAIT_MS});
  await page.click('#change-confirm');
  await contains(page, '.status.ok', `Changed to ${seatsCode} v1, quantity 3; invoiced as INV-`);
  await contains(page, '#subscription-history', `to ${seatsCode} v1, quantity 1 to 3`);
  assert.ok((await text(page, '#subscription-detail')).includes(`${seatsCode} v1`));

  step('billing: a plan edited (a new price is a new version), a plan archived');
  await nav(page, 'plans');
  await idle(page);
  await page.click(`button[aria-label="Edit ${seatsCode}"]`);
  await page.waitForSelector('#plan-edit-amount', {timeout: WAIT_MS});
  assert.equal(await page.evaluate(() => document.activeElement.id), 'plan-edit-name', 'focus moves to the edit form');
  await fill(page, '#plan-edit-name', 'Team seats');
  await fill(page, '#plan-edit-amount', '1200');
  await page.click('#plan-edit-submit');
  await contains(page, '.status.ok', `The plan ${seatsCode} is at version 2: $12.00 per unit every month.`);
  await contains(page, '#plans-list', 'Team seats');
  await checkPage(page, 'plans-edited');
  await page.click(`button[aria-label="Archive ${planCode}"]`);
  await clickButton(page, '#plans-list', `Archive ${planCode}`);
  await contains(page, '.status.ok', `The plan ${planCode} was archived`);
  await idle(page);
  assert.ok(!(await text(page, '#plans-list')).includes(planCode), 'an archived plan leaves the list');
  await page.click('#plans-archived');
  await contains(page, '#plans-list', planCode);
  await checkPage(page, 'plans-archived');

  step('roles: an admin and a member, invited from the console');
  const adminEmail = `carol.${id}@example.com`;
  await nav(page, 'members');
  await fill(page, '#invite-emails', adminEmail);
  await page.select('#invite-role', 'admin');
  await page.click('#invite-submit');
  await contains(page, '#invitations-list', adminEmail);
  const ownerEmail = email;
  const memberEmail = invitee; // invited as a member above

  // A second person's browser: its own context (cookies, storage), the
  // invitation accepted on the console's accept page, then signed out and
  // in again through the sign-in form. Its 403s are counted, not errors.
  async function personOf(address, role, displayName) {
    const token = await invitationToken(address);
    const context = await browser.createBrowserContext();
    const p = await context.newPage();
    await p.setViewport({width: 1280, height: 900});
    const who = {page: p, context, forbidden: 0};
    p.on('console', (m) => {
      if (m.type() !== 'error') return;
      if (who.forbidden > 0 && /status of 403/.test(m.text())) {
        who.forbidden -= 1;
        return;
      }
      problems.push(`console error (${role}): ${m.text()}`);
    });
    p.on('pageerror', (e) => problems.push(`uncaught (${role}): ${e.message}`));
    watchServerErrors(p, role);
    p.on('dialog', async (d) => {
      dialogs.push(d.message());
      await d.dismiss();
    });
    await p.goto(`${GW}/console/accept?token=${encodeURIComponent(token)}`, {waitUntil: 'networkidle0'});
    await waitPage(p, 'accept');
    assert.ok(!p.url().includes(token), 'the token left the address bar');
    assert.equal(await p.$eval('#accept-token', (n) => n.value), token);
    if (role === 'member') await checkPage(p, 'accept');
    await fill(p, '#accept-password', password);
    await fill(p, '#accept-display', displayName);
    await p.click('#accept-submit');
    await waitPage(p, 'dashboard');
    assert.match(await text(p, '#account .user'), new RegExp(`${displayName} · ${role}`));
    await p.click('#signout');
    await waitPage(p, 'signin');
    await fill(p, '#signin-email', address);
    await fill(p, '#signin-password', password);
    await p.click('#signin-submit');
    await waitPage(p, 'dashboard');
    assert.ok((await text(p, '#account .user')).includes(role));
    const cookie = (await context.cookies()).find((c) => c.name === SESSION_COOKIE);
    assert.ok(cookie && cookie.httpOnly, `${role}: a session cookie of its own`);
    return who;
  }
  // A call the page's session makes that the server must refuse.
  async function refused(who, service, method, body, message) {
    who.forbidden += 1;
    const got = await callFromPage(who.page, service, method, body);
    assert.equal(got.status, 403, `${method}: ${JSON.stringify(got)}`);
    assert.equal(got.code, 'permission_denied', `${method}: ${JSON.stringify(got)}`);
    if (message) assert.match(got.message, message);
  }
  // The browser logs each 403 as a console error, a moment after the reply.
  async function refusalsShown(who) {
    for (let i = 0; who.forbidden > 0 && i < POLL_TRIES; i += 1) await pause();
    assert.equal(who.forbidden, 0, 'a refusal did not show as a 403');
  }
  async function open(p, url, name) {
    await p.goto(url, {waitUntil: 'networkidle0'});
    await waitPage(p, name);
    await idle(p);
  }
  const ownerId = (await rpc('Login', {email: ownerEmail, password})).body.userId;
  assert.ok(ownerId);

  step('roles: a member is offered only what members may do, and the server refuses the rest');
  const member = await personOf(memberEmail, 'member', 'Bob');
  const mp = member.page;
  const memberLinks = await mp.$$eval('#nav a', (as) => as.map((a) => a.getAttribute('href')));
  for (const hidden of ['customers', 'plans', 'subscriptions', 'invoices', 'credit-notes', 'webhooks', 'keys', 'audit']) {
    assert.ok(!memberLinks.includes(`/console/${hidden}`), `a member is offered ${hidden}`);
  }
  for (const shown of ['dashboard', 'members', 'ledger', 'tenants']) {
    assert.ok(memberLinks.includes(`/console/${shown}`), `a member is not offered ${shown}`);
  }
  assert.ok((await text(mp, '#summary')).includes('Billing figures are shown to owners and admins'));
  await checkPage(mp, 'member-dashboard');
  for (const [url, name] of [[customerUrl, 'customer'], [invoiceUrl, 'invoice'], [`${GW}/console/keys`, 'keys'], [`${GW}/console/audit`, 'audit']]) {
    await mp.goto(url, {waitUntil: 'networkidle0'});
    await waitPage(mp, 'dashboard'); // not offered: the router shows the dashboard instead
    assert.equal(new URL(mp.url()).pathname, '/console/dashboard', `a member reached ${name}`);
  }
  await nav(mp, 'members');
  await contains(mp, '#members-list', ownerEmail);
  assert.equal(await mp.$$eval('#members-list select, #members-list button.danger', (n) => n.length), 0, 'a member is offered a role change or a removal');
  assert.equal(await mp.$('#invite-emails'), null, 'a member is offered to invite');
  assert.equal(await mp.$('#invitations-list'), null, 'a member is shown the invitations');
  await checkPage(mp, 'member-members');
  await nav(mp, 'ledger');
  await contains(mp, '#ledger-accounts', 'billing: cash');
  assert.ok((await text(mp, '#trial-totals')).includes('yes: debits equal credits'), 'a member reads the ledger');
  assert.ok(!(await mp.$$eval('#ledger-accounts a', (as) => as.some((a) => a.href.includes('/console/customer?')))), 'a member is offered a link to a customer');
  await checkPage(mp, 'member-ledger');
  await refused(member, 'auth.v1.AuthService', 'Invite', {emails: [`eve.${id}@example.com`], role: 'viewer'}, /lacks members.invite/);
  await refused(member, 'auth.v1.AuthService', 'SetRole', {userId: ownerId, role: 'viewer'}, /lacks members.set_role/);
  await refused(member, 'auth.v1.AuthService', 'RemoveMember', {userId: ownerId}, /lacks members.remove/);
  await refused(member, 'auth.v1.AuthService', 'CreateApiKey', {name: 'x', role: 'viewer'}, /lacks api_keys.manage/);
  await refused(member, 'auth.v1.AuthService', 'ListAudit', {}, /lacks audit.read/);
  await refused(member, 'billing.v1.BillingService', 'ListCustomers', {}, /lacks billing.read/);
  await refused(member, 'billing.v1.BillingService', 'CreateCustomer', {email: 'x@example.com', currency: 'USD'}, /lacks billing.manage/);
  await refused(member, 'webhook.v1.WebhookService', 'ListWebhookSubscriptions', {});
  await refusalsShown(member);

  step('roles: an admin reads billing but is offered none of its writes, nor anything above its rank');
  const admin = await personOf(adminEmail, 'admin', 'Carol');
  const ap = admin.page;
  const adminLinks = await ap.$$eval('#nav a', (as) => as.map((a) => a.getAttribute('href')));
  for (const shown of ['customers', 'plans', 'subscriptions', 'invoices', 'credit-notes', 'webhooks', 'keys', 'audit', 'ledger']) {
    assert.ok(adminLinks.includes(`/console/${shown}`), `an admin is not offered ${shown}`);
  }
  await open(ap, `${GW}/console/customers`, 'customers');
  await contains(ap, '#customers-list', XSS_CUSTOMER);
  assert.equal(await ap.$('#customer-submit'), null, 'an admin is offered CreateCustomer');
  await open(ap, customerUrl, 'customer');
  await contains(ap, '#customer-subscriptions', seatsCode);
  for (const absent of ['#edit-submit', '#oneoff-submit', '#subscribe-submit', '#customer-detail button']) {
    assert.equal(await ap.$(absent), null, `an admin is offered ${absent} on the customer`);
  }
  await checkPage(ap, 'admin-customer');
  await open(ap, `${GW}/console/plans`, 'plans');
  await contains(ap, '#plans-list', seatsCode);
  assert.equal(await ap.$('#plan-submit'), null, 'an admin is offered CreatePlan');
  assert.equal(await ap.$('#plans-list button'), null, 'an admin is offered ArchivePlan');
  await open(ap, subscriptionUrl, 'subscription');
  await contains(ap, '#subscription-history', 'change');
  assert.equal(await ap.$('#subscription-actions button'), null, 'an admin is offered a pause or a cancel');
  assert.equal(await ap.$('#change-plan'), null, 'an admin is offered ChangeSubscription');
  await open(ap, openInvoiceUrl, 'invoice');
  await contains(ap, '#invoice-detail', 'wire 2027-001');
  for (const absent of ['#invoice-actions', '#payment-submit', '#credit-submit', '#finalize-submit']) {
    assert.equal(await ap.$(absent), null, `an admin is offered ${absent} on an open invoice`);
  }
  await checkPage(ap, 'admin-invoice');
  await nav(ap, 'members');
  await contains(ap, '#members-list', ownerEmail);
  const rows = await ap.$$eval('#members-list tbody tr', (trs) => trs.map((tr) => ({text: tr.textContent,
    roles: [...tr.querySelectorAll('select option')].map((o) => o.value), remove: Boolean(tr.querySelector('button.danger'))})));
  const ownerRow = rows.find((r) => r.text.includes(ownerEmail));
  const memberRow = rows.find((r) => r.text.includes(memberEmail));
  assert.deepEqual(ownerRow.roles, [], 'an admin is offered to change the owner\'s role');
  assert.equal(ownerRow.remove, false, 'an admin is offered to remove the owner');
  assert.deepEqual(memberRow.roles, ['admin', 'member', 'viewer'], 'an admin grants up to its own role');
  assert.equal(memberRow.remove, true, 'an admin removes a member');
  assert.deepEqual(await ap.$$eval('#invite-role option', (os) => os.map((o) => o.value)), ['admin', 'member', 'viewer']);
  await checkPage(ap, 'admin-members');
  await nav(ap, 'keys');
  assert.deepEqual(await ap.$$eval('#key-role option', (os) => os.map((o) => o.value)), ['admin', 'member', 'viewer']);
  await fill(ap, '#key-name', 'admin export');
  await ap.select('#key-role', 'viewer');
  await ap.click('#key-submit');
  await ap.waitForSelector('#new-key', {timeout: WAIT_MS});
  assert.match(await ap.$eval('#new-key', (n) => n.value), /^ks_live_/, 'an admin creates a key of a lower role');
  await refused(admin, 'billing.v1.BillingService', 'CreateCustomer', {email: 'x@example.com', currency: 'USD'}, /your role \(admin\) lacks billing.manage/);
  await refused(admin, 'billing.v1.BillingService', 'ChangeSubscription',
    {id: new URL(subscriptionUrl).searchParams.get('id'), quantity: '5'}, /lacks billing.manage/);
  await refused(admin, 'billing.v1.BillingService', 'RecordPayment',
    {id: new URL(openInvoiceUrl).searchParams.get('id'), amount: '1'}, /lacks billing.manage/);
  await refused(admin, 'billing.v1.BillingService', 'ArchivePlan', {code: seatsCode}, /lacks billing.manage/);
  await refused(admin, 'auth.v1.AuthService', 'SetRole', {userId: ownerId, role: 'viewer'});
  await refused(admin, 'auth.v1.AuthService', 'RemoveMember', {userId: ownerId});
  await refused(admin, 'auth.v1.AuthService', 'Invite', {emails: [`eve.${id}@example.com`], role: 'owner'}, /above your own/);
  await refusalsShown(admin);
  const adminPreview = await callFromPage(ap, 'billing.v1.BillingService', 'PreviewChange',
    {id: new URL(subscriptionUrl).searchParams.get('id'), quantity: '4'});
  assert.equal(adminPreview.status, 200, `an admin previews (billing.read): ${JSON.stringify(adminPreview)}`);
  await admin.context.close();
  await member.context.close();

  step('billing: a cancellation at period end, withdrawn, then a cancellation now');
  await page.goto(subscriptionUrl, {waitUntil: 'networkidle0'});
  await waitPage(page, 'subscription');
  await idle(page);
  await clickButton(page, '#subscription-actions', 'Cancel at period end');
  await clickButton(page, '#subscription-actions', 'Cancel at the period\'s end');
  await contains(page, '.status.ok', 'canceled at its period\'s end');
  assert.match(await text(page, '#subscription-detail'), /Cancels at period endyes/);
  await clickButton(page, '#subscription-actions', 'Keep after the period');
  await clickButton(page, '#subscription-actions', 'Withdraw the cancellation');
  await page.waitForFunction(() => /Cancels at period endno/.test(document.querySelector('#subscription-detail')?.textContent), {timeout: WAIT_MS});
  await clickButton(page, '#subscription-actions', 'Cancel now');
  await clickButton(page, '#subscription-actions', 'Cancel now, for good');
  await contains(page, '.status.ok', 'The subscription is canceled.');
  await contains(page, '#subscription-history', 'cancel');
  assert.equal(await page.$('#subscription-actions button'), null, 'a canceled subscription offers no move');
  assert.equal(await page.$('#change-plan'), null, 'a canceled subscription offers no change');
  await checkPage(page, 'subscription-canceled');

  step('billing: the open invoice written off, then paid in full by hand');
  await page.goto(openInvoiceUrl, {waitUntil: 'networkidle0'});
  await waitPage(page, 'invoice');
  await idle(page);
  await clickButton(page, '#invoice-actions', 'Write off');
  await clickButton(page, '#invoice-actions', 'Mark uncollectible');
  await contains(page, '.status.ok', 'Written off.');
  await contains(page, '#invoice-detail', 'uncollectible');
  await page.waitForSelector('#payment-submit', {timeout: WAIT_MS}); // money may still come in
  await page.click('#payment-submit'); // what remains, as the form offers
  await contains(page, '.status.ok', 'the invoice is paid');
  assert.equal(await page.$('#payment-submit'), null, 'a paid invoice takes no payment');

  step('members: a role changed, an invitation revoked, a member removed');
  await nav(page, 'members');
  await contains(page, '#members-list', memberEmail);
  await page.select(`#members-list select[aria-label="Role of Bob <${memberEmail}>"]`, 'viewer');
  await clickInRow(page, '#members-list', memberEmail, 'Save role');
  await contains(page, '.status.ok', `${memberEmail} is now viewer.`);
  await contains(page, '#members-list', 'viewer');
  const eve = `eve.${id}@example.com`;
  await fill(page, '#invite-emails', eve);
  await page.select('#invite-role', 'viewer');
  await page.click('#invite-submit');
  await contains(page, '#invitations-list', eve);
  // With the keyboard alone: Tab to the row's Revoke, Enter asks once more
  // (focus on the confirmation), Escape and Cancel step back, Enter twice revokes.
  await page.focus('#invite-emails');
  await tabTo(page, 'button Revoke', eve);
  await page.keyboard.press('Enter');
  assert.equal(await focused(page), `button Revoke the invitation of ${eve}`, 'Enter moves focus to the confirmation');
  await page.keyboard.press('Escape');
  assert.equal(await focused(page), 'button Revoke', 'Escape steps back to Revoke');
  await page.keyboard.press('Enter');
  await page.keyboard.press('Tab');
  assert.equal(await focused(page), 'button Cancel');
  await page.keyboard.press('Enter');
  assert.equal(await focused(page), 'button Revoke', 'Cancel steps back to Revoke');
  assert.ok((await text(page, '#invitations-list')).includes(eve), 'a step back revoked');
  await page.keyboard.press('Enter');
  await page.keyboard.press('Enter');
  await contains(page, 'section[aria-labelledby="invitations-h"] .status.ok', `The invitation of ${eve} was revoked.`);
  await page.waitForFunction((e) => !document.querySelector('#invitations-list')?.textContent.includes(e), {timeout: WAIT_MS}, eve);
  await clickInRow(page, '#members-list', memberEmail, 'Remove');
  // A double click on the confirmation removes once (the second click finds it disabled).
  const removals = await callsDuring(page, 'RemoveMember', async () => {
    const yes = await page.waitForFunction((l) => [...document.querySelectorAll('#members-list button')].find((b) => b.textContent === l),
      {timeout: WAIT_MS}, `Remove ${memberEmail}`);
    await yes.asElement().click({count: 2});
    await contains(page, '.status.ok', `${memberEmail} was removed.`);
    await page.waitForFunction((e) => !document.querySelector('#members-list')?.textContent.includes(e), {timeout: WAIT_MS}, memberEmail);
    await idle(page);
  });
  assert.equal(removals, 1, 'a double click on the confirmation called RemoveMember more than once');
  await checkPage(page, 'members-after-changes');
  await nav(page, 'audit');
  await contains(page, '#audit-list', 'member.removed');
  for (const action of ['member.role_set', 'invitation.revoked', 'invitation.accepted']) await contains(page, '#audit-list', action);

  step('the audit log, filtered by the server and paged under a filter');
  r = await rpc('Login', {email, password});
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const ownerBearer = {Authorization: `Bearer ${r.body.sessionToken}`};
  assert.equal(r.body.userId, ownerId);
  // 27 keys created and revoked: more than a page (25) of either action,
  // and the members' rows pushed off the first page of the whole log.
  for (let i = 0; i < 27; i += 1) {
    r = await rpc('CreateApiKey', {name: `churn-${i}`, role: 'viewer'}, ownerBearer);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    r = await rpc('RevokeApiKey', {apiKeyId: r.body.apiKey.id}, ownerBearer);
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  await nav(page, 'audit');
  await idle(page);
  assert.ok(!(await text(page, '#audit-list')).includes('member.removed'), 'the member rows are past the first page');
  // 54 newer rows: the member's removal is the first row of page 3.
  await clickButton(page, 'nav[aria-label="Audit log pages"]', 'Next page');
  await contains(page, 'nav[aria-label="Audit log pages"] .page-no', 'Page 2');
  await clickButton(page, 'nav[aria-label="Audit log pages"]', 'Next page');
  await contains(page, 'nav[aria-label="Audit log pages"] .page-no', 'Page 3');
  await contains(page, '#audit-list', 'member.removed');
  // The server's filter: the action whose rows were on no first page, alone.
  await page.select('#audit-action', 'member.removed');
  await contains(page, 'nav[aria-label="Audit log pages"] .page-no', 'Page 1');
  await idle(page);
  let shown = await page.$$eval('#audit-list tbody tr td:nth-child(2)', (n) => n.map((td) => td.textContent));
  assert.deepEqual(shown, ['member.removed']);
  // Paging keeps the filter: both pages of api_key.revoked hold nothing else.
  await page.select('#audit-action', 'api_key.revoked');
  await idle(page);
  shown = await page.$$eval('#audit-list tbody tr td:nth-child(2)', (n) => n.map((td) => td.textContent));
  assert.equal(shown.length, 25);
  assert.ok(shown.every((a) => a === 'api_key.revoked'), shown.join());
  await clickButton(page, 'nav[aria-label="Audit log pages"]', 'Next page');
  await contains(page, 'nav[aria-label="Audit log pages"] .page-no', 'Page 2');
  await idle(page);
  shown = await page.$$eval('#audit-list tbody tr td:nth-child(2)', (n) => n.map((td) => td.textContent));
  assert.ok(shown.length >= 3 && shown.every((a) => a === 'api_key.revoked'), shown.join());
  assert.ok(await page.$eval('nav[aria-label="Audit log pages"] button:last-child', (b) => b.disabled), 'the last page');
  await clickButton(page, 'nav[aria-label="Audit log pages"]', 'Previous page');
  await contains(page, 'nav[aria-label="Audit log pages"] .page-no', 'Page 1');
  // An actor: the owner's own rows; a malformed one is refused before any request.
  await page.select('#audit-action', '');
  await idle(page);
  await fill(page, '#audit-actor', 'not-a-user-id');
  await page.click('#audit-apply');
  await contains(page, '.status.error', 'a user id');
  await fill(page, '#audit-actor', ownerId);
  await page.click('#audit-apply');
  await page.waitForFunction(() => !document.querySelector('.status.error'), {timeout: WAIT_MS});
  await idle(page);
  const actors = await page.$$eval('#audit-list tbody tr td:nth-child(3)', (n) => n.map((td) => td.textContent));
  assert.equal(actors.length, 25);
  assert.ok(actors.every((a) => a === `user ${ownerId}`), actors.join());
  await checkPage(page, 'audit-filtered');

  step('tenants: an invitation to another tenant accepted by a signed-in account, and the switch back');
  const otherTenant = '<img src=x onerror=alert(5)> Other';
  const dan = `dan.${id}@example.com`;
  r = await rpc('SignUp', {email: dan, password, displayName: 'Dan', tenantName: otherTenant});
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await rpc('Login', {email: dan, password});
  r = await rpc('Invite', {emails: [email], role: 'member'}, {Authorization: `Bearer ${r.body.sessionToken}`});
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await page.goto(`${GW}/console/accept?token=${encodeURIComponent(await invitationToken(email))}`, {waitUntil: 'networkidle0'});
  await waitPage(page, 'accept');
  await fill(page, '#accept-password', password); // an existing account: its own password
  await page.click('#accept-submit');
  await waitPage(page, 'dashboard');
  assert.equal(await text(page, '#current-tenant'), otherTenant, 'the session moved to the new tenant');
  assert.ok((await text(page, '#account .user')).includes('member'));
  await nav(page, 'tenants');
  await contains(page, '#tenants-list', otherTenant);
  assert.ok((await text(page, '#tenants-list')).includes(XSS_TENANT));
  assert.equal(await page.$$eval('main img, main script', (n) => n.length), 0, 'a tenant name made markup');
  await checkPage(page, 'tenants-two');
  await page.click(`button[aria-label="Switch to ${XSS_TENANT}"]`);
  await waitPage(page, 'dashboard');
  assert.equal(await text(page, '#current-tenant'), XSS_TENANT, 'switched back');
  assert.ok((await text(page, '#account .user')).includes('owner'));

  step('long lists are paged');
  for (let i = 0; i < 21; i += 1) {
    const made = await callFromPage(page, 'billing.v1.BillingService', 'CreateCustomer', {email: `paged.${i}.${id}@example.com`, currency: 'EUR'});
    assert.equal(made.status, 200, JSON.stringify(made));
  }
  await nav(page, 'customers');
  await idle(page);
  assert.equal(await page.$$eval('#customers-list tbody tr', (n) => n.length), 20, 'a page of 20');
  assert.ok(!(await text(page, '#customers-list')).includes(XSS_CUSTOMER), 'the oldest customer is on the second page');
  await clickButton(page, 'nav.pager', 'Next page');
  await contains(page, '#customers-list', XSS_CUSTOMER);
  assert.equal(await text(page, 'nav.pager .page-no'), 'Page 2');
  assert.equal(await page.$eval('nav.pager button:last-child', (b) => b.disabled), true, 'the last page has no next');
  await clickButton(page, 'nav.pager', 'Previous page');
  await page.waitForFunction(() => document.querySelector('nav.pager .page-no')?.textContent === 'Page 1', {timeout: WAIT_MS});
  await checkPage(page, 'customers-paged');

  step('keyboard: a section by Tab and Enter');
  await page.focus('#nav a[href="/console/members"]');
  await page.keyboard.press('Enter');
  await waitPage(page, 'members');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'page-title', 'focus moves to the new page');

  step('phone width: every section, then every detail page');
  await page.setViewport({width: 390, height: 844, isMobile: true, hasTouch: true});
  for (const name of ['dashboard', 'members', 'keys', 'audit', 'customers', 'plans', 'subscriptions', 'invoices',
    'credit-notes', 'ledger', 'webhooks', 'tenants']) {
    await nav(page, name);
    await phoneCheck(page, name, name);
  }
  for (const [url, name, shot] of [[customerUrl, 'customer', 'customer'], [subscriptionUrl, 'subscription', 'subscription'],
    [invoiceUrl, 'invoice', 'invoice'], [openInvoiceUrl, 'invoice', 'invoice-one-off'], [ledgerAccountUrl, 'ledger-account', 'ledger-account'],
    [endpointUrl, 'webhook-endpoint', 'webhook-endpoint'], [webhookSubscriptionUrl, 'webhook-subscription', 'webhook-subscription'],
    [deliveryUrl, 'delivery', 'delivery']]) {
    await page.goto(url, {waitUntil: 'networkidle0'});
    await phoneCheck(page, name, shot);
  }
  await page.setViewport({width: 1280, height: 900}); // leaving isMobile reloads the page

  step('logout ends the session on the server');
  const last = await sessionCookie(page);
  assert.ok(last);
  await page.waitForSelector('#signout', {visible: true, timeout: WAIT_MS});
  await page.click('#signout');
  await waitPage(page, 'signin');
  assert.equal(await sessionCookie(page), undefined);
  r = await rpc('WhoAmI', {}, {Cookie: `${SESSION_COOKIE}=${last.value}`, 'X-Keelson-Console': '1', Origin: origin});
  assert.equal(r.status, 401, 'the old cookie still works after logout');
  r = await rpc('WhoAmI', {}, {Authorization: `Bearer ${last.value}`});
  assert.equal(r.status, 401, 'the old token still works after logout');

  assert.deepEqual(problems, [], 'console errors or uncaught exceptions');
  assert.deepEqual(dialogs, [], 'a dialog opened');
  assert.equal(expectedNetworkErrors, 0, 'an expected 401 did not show');
  console.log(`ok: screenshots in ${SHOTS}`);
}

main().catch((err) => {
  console.error(err);
  if (problems.length) console.error(problems.join('\n'));
  process.exit(1);
});
