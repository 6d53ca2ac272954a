// The admin console (console/, served by the gateway under /console/) in
// headless Chromium: what a person does with it, and what it must never
// let happen. Registered in tests/CMakeLists.txt (integration.browser_console);
// the stack's gateway comes from $KEELSON_IT_STACK/env (KEELSON_IT_GATEWAY_URL),
// or from $KEELSON_GATEWAY_URL when run by hand.
//
//   sign up, sign out, a failed and a good sign in, the dashboard; invite a
//   member and see the summary count it; create an API key (shown once,
//   copied, usable), revoke it (refused afterwards); the audit log; the
//   tenant list; a phone-width viewport; keyboard navigation.
//   On every page: no console error or uncaught exception, no axe-core
//   violation of serious or critical impact, a screenshot (the folder in
//   $KEELSON_BROWSER_SCREENSHOTS).
//   Security: the session cookie is HttpOnly (absent from document.cookie),
//   Secure and SameSite=Strict; a request with the cookie but without
//   X-Keelson-Console, or from another origin, is refused; an XSS payload in
//   the tenant and display names is shown as text and runs nothing; logout
//   ends the session (the old cookie is refused).
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
const SESSION_COOKIE = '__Host-keelson_session';

function gatewayUrl() {
  if (process.env.KEELSON_GATEWAY_URL) return process.env.KEELSON_GATEWAY_URL;
  const dir = process.env.KEELSON_IT_STACK;
  assert.ok(dir, 'set KEELSON_IT_STACK (the stack folder) or KEELSON_GATEWAY_URL');
  const env = fs.readFileSync(path.join(dir, 'env'), 'utf8');
  const m = env.match(/^KEELSON_IT_GATEWAY_URL=(.+)$/m);
  assert.ok(m, `no KEELSON_IT_GATEWAY_URL in ${dir}/env`);
  return m[1].trim();
}

const GW = gatewayUrl();
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

async function waitPage(page, name) {
  await page.waitForSelector(`.page[data-page="${name}"]`, {timeout: WAIT_MS});
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
  await page.click(`#nav a[href="/console/${name}"]`);
  await waitPage(page, name);
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

  step('keyboard: the skip link comes first, then the form');
  await page.keyboard.press('Tab');
  // The email field has focus after load; shift-tab from the top reaches the skip link.
  await page.$eval('body', (b) => b.focus());
  await page.focus('.skip');
  assert.equal(await page.evaluate(() => document.activeElement.className), 'skip');

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
  assert.ok(!(await text(page, '#audit-list')).includes('api_key.revoked'));
  await checkPage(page, 'audit');

  step('tenants: the name is text');
  await nav(page, 'tenants');
  await page.waitForSelector('#tenants-list table', {timeout: WAIT_MS});
  assert.ok((await text(page, '#tenants-list')).includes(XSS_TENANT));
  await checkPage(page, 'tenants');

  step('keyboard: a section by Tab and Enter');
  await page.focus('#nav a[href="/console/members"]');
  await page.keyboard.press('Enter');
  await waitPage(page, 'members');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'page-title', 'focus moves to the new page');

  step('phone width');
  await page.setViewport({width: 390, height: 844, isMobile: true, hasTouch: true});
  for (const name of ['dashboard', 'members', 'keys', 'audit']) {
    await nav(page, name);
    await page.waitForFunction(() => !document.querySelector('[aria-busy="true"]'), {timeout: WAIT_MS});
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `${name} scrolls sideways at phone width (${overflow} px)`);
    await checkPage(page, `phone-${name}`);
  }
  await page.setViewport({width: 1280, height: 900});

  step('logout ends the session on the server');
  const last = await sessionCookie(page);
  assert.ok(last);
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
