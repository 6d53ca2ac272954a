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
//   Billing, ledger, webhooks: a webhook subscription and a Standard
//   Webhooks intake endpoint; a plan, a customer (an XSS payload in its
//   name, shown as text), a subscription and its invoice with its lines; the
//   subscription's history, a pause; a credit note; the dashboard's charts;
//   the ledger's trial balance and the cash account's balance once the
//   payment is posted (polled, bounded); the subscription's deliveries and a
//   redelivery; an event received by the endpoint (signed here) re-applied.
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

async function contains(page, selector, needle) {
  await page.waitForFunction((sel, n) => document.querySelector(sel)?.textContent.includes(n), {timeout: WAIT_MS}, selector, needle);
}

async function idle(page) {
  await page.waitForFunction(() => !document.querySelector('[aria-busy="true"]') && !document.querySelector('.status.loading'), {timeout: WAIT_MS});
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
  await page.click('#credit-submit');
  await contains(page, '#invoice-detail', 'CN-');
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
  for (let i = 0; !(await page.$eval('#ledger-accounts', (n) => n.textContent.includes('billing: cash'))); i += 1) {
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
  assert.equal(await text(page, '#account-balance'), '$19.99', 'the cash account holds the payment');
  await contains(page, '#account-transfers', 'debit');
  await checkPage(page, 'ledger-account');

  step('webhooks: the deliveries of the subscription, a redelivery (polled, bounded)');
  await nav(page, 'webhooks');
  await follow(page, '#webhook-subscriptions-list', 'invoices out', 'webhook-subscription');
  for (let i = 0; !(await page.$eval('#deliveries-list', (n) => n.textContent.includes('billing.invoice'))); i += 1) {
    assert.ok(i < POLL_TRIES, 'no delivery was made for the invoice events');
    await pause(); // the fan-out follows the event
    await page.reload({waitUntil: 'networkidle0'});
    await waitPage(page, 'webhook-subscription');
    await idle(page);
  }
  await checkPage(page, 'webhook-subscription');
  const redeliver = await page.$eval('#deliveries-list tbody tr button', (b) => b.getAttribute('aria-label'));
  await page.click(`#deliveries-list button[aria-label="${redeliver}"]`);
  await clickButton(page, '#deliveries-list', (await page.$eval('#deliveries-list .confirm button', (b) => b.textContent)));
  await contains(page, '.status.ok', 'pending again');
  await follow(page, '#deliveries-list', '', 'delivery');
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
  await contains(page, '#received-list', msgId);
  await clickButton(page, '#received-list', 'Re-apply');
  await clickButton(page, '#received-list', `Re-apply ${msgId}`);
  await contains(page, '.status.ok', msgId);
  await checkPage(page, 'webhook-endpoint');

  step('what a role may not do is not offered (its permissions as WhoAmI tells them)');
  // The console decides what to offer from WhoAmI alone; the page is told
  // an admin's and then a member's permissions (the server would still
  // refuse them: that is billing's and the ledger's own tests).
  const ADMIN = ['org.read', 'members.read', 'members.invite', 'members.remove', 'members.set_role', 'billing.read',
    'audit.read', 'api_keys.manage', 'webhooks.read', 'webhooks.manage'];
  const MEMBER = ['org.read', 'members.read'];
  for (const [role, perms] of [['admin', ADMIN], ['member', MEMBER]]) {
    const p2 = await browser.newPage();
    p2.on('pageerror', (e) => problems.push(`uncaught (${role}): ${e.message}`));
    await p2.evaluateOnNewDocument((r, ps) => {
      const real = window.fetch.bind(window);
      window.fetch = async (url, init) => {
        const res = await real(url, init);
        if (!String(url).endsWith('/WhoAmI') || !res.ok) return res;
        const me = await res.json();
        return new Response(JSON.stringify({...me, role: r, permissions: ps}), {status: 200, headers: {'Content-Type': 'application/json'}});
      };
    }, role, perms);
    const navOf = async () => p2.$$eval('#nav a', (as) => as.map((a) => a.getAttribute('href')));
    if (role === 'admin') {
      for (const [url, name, absent] of [[`${GW}/console/customers`, 'customers', '#customer-submit'], [customerUrl, 'customer', '#subscribe-submit'],
        [`${GW}/console/plans`, 'plans', '#plan-submit'], [invoiceUrl, 'invoice', '#credit-submit'],
        [subscriptionUrl, 'subscription', '#subscription-actions button']]) {
        await p2.goto(url, {waitUntil: 'networkidle0'});
        await waitPage(p2, name);
        await idle(p2);
        assert.equal(await p2.$(absent), null, `an admin is offered ${absent} on ${name}`);
      }
      await p2.goto(`${GW}/console/webhooks`, {waitUntil: 'networkidle0'});
      await waitPage(p2, 'webhooks');
      assert.ok(await p2.$('#sub-submit'), 'an admin manages webhooks');
    } else {
      await p2.goto(`${GW}/console/customers`, {waitUntil: 'networkidle0'});
      await waitPage(p2, 'dashboard'); // not offered: the router goes to the dashboard
      const links = await navOf();
      for (const hidden of ['customers', 'plans', 'subscriptions', 'invoices', 'credit-notes', 'webhooks', 'keys', 'audit']) {
        assert.ok(!links.includes(`/console/${hidden}`), `a member is offered ${hidden}`);
      }
      assert.ok(links.includes('/console/ledger'), 'every role reads the ledger');
    }
    await p2.close();
  }

  step('keyboard: a section by Tab and Enter');
  await page.focus('#nav a[href="/console/members"]');
  await page.keyboard.press('Enter');
  await waitPage(page, 'members');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'page-title', 'focus moves to the new page');

  step('phone width');
  await page.setViewport({width: 390, height: 844, isMobile: true, hasTouch: true});
  for (const name of ['dashboard', 'members', 'keys', 'audit', 'customers', 'plans', 'subscriptions', 'invoices',
    'credit-notes', 'ledger', 'webhooks']) {
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
