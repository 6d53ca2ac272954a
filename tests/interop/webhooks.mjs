// keelson's webhooks against the providers' own libraries, both directions
// (ctest: integration.interop_webhooks; tests/CMakeLists.txt installs the
// pinned libraries of package-lock.json beside this file first).
//
//   intake:   events signed by `stripe` (Stripe-Signature) and by
//             `standardwebhooks` (webhook-signature) are stored; tampered
//             ones, or ones signed with another secret, are refused.
//   delivery: keelson's own billing events, POSTed to a sink of ours, pass
//             `standardwebhooks`' verify(), with one secret and with both
//             secrets of a rotation; a changed body does not.
//
// Our C tests check keelson's signatures against keelson's own code (and
// tests/vectors); this one checks them against the code a tenant really
// runs, so a reading of the specifications that both sides of our code
// share cannot pass unnoticed.
//
// Reads the gateway's address from $KEELSON_IT_STACK/env (written by
// deploy/local/stack.sh start). Prints one line per check; stops at the
// first failure (later checks build on earlier ones) and exits 1.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';

import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import Stripe from 'stripe';

import { check, sleep, stackEnv, summary, waitFor } from './support.mjs';

// Limits: every wait and every request is bounded.
const REQUEST_TIMEOUT_MS = 15000;
const DELIVERY_WAIT_MS = 10000; // an event reaches the sink in well under a second
const STATUS_WAIT_MS = 10000;
const SINK_BODY_MAX_BYTES = 1 << 20;
const SINK_REQUESTS_MAX = 100;

const TOPICS = ['billing.invoice_paid', 'billing.invoice_finalized', 'billing.subscription_changed'];

// ---- the stack -----------------------------------------------------------------

let GW;
await check('the stack\'s gateway address read from $KEELSON_IT_STACK/env', () => {
  GW = stackEnv('KEELSON_IT_GATEWAY_URL');
});

// A Connect JSON call: {status, json, text}.
async function call(service, method, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  const res = await fetch(`${GW}/${service}/${method}`, {
    method: 'POST',
    headers,
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // left null: the status and text say what came
  }
  return { status: res.status, json, text };
}

// A call that must answer 200: its JSON.
async function ok(service, method, body, token) {
  const r = await call(service, method, body, token);
  assert.equal(r.status, 200, `${service}/${method} answered ${r.status}: ${r.text}`);
  assert.ok(r.json, `${service}/${method}: not JSON: ${r.text}`);
  return r.json;
}

const auth = (m, b, t) => ok('keelson.auth.v1.AuthService', m, b, t);
const billing = (m, b, t) => ok('keelson.billing.v1.BillingService', m, b, t);
const webhooks = (m, b, t) => ok('keelson.webhook.v1.WebhookService', m, b, t);

// A POST to the intake, as a provider sends it: {status, json, text}.
async function intake(path, body, headers) {
  const res = await fetch(`${GW}${path}`, {
    method: 'POST',
    headers,
    body,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // left null
  }
  return { status: res.status, json, text };
}

// The body with one byte changed (a digit or letter in the middle, so it
// stays the same length and, mostly, the same shape).
function tamper(body) {
  const b = Buffer.from(body);
  let i = Math.floor(b.length / 2);
  while (i < b.length && !/[0-9a-zA-Z]/.test(String.fromCharCode(b[i]))) {
    i++;
  }
  assert.ok(i < b.length, 'nothing to tamper with');
  b[i] = b[i] === 0x30 ? 0x31 : 0x30;
  return b;
}

function standardSecret(bytes = 32) {
  return `whsec_${randomBytes(bytes).toString('base64')}`;
}

// ---- the sink --------------------------------------------------------------------

// An HTTP server on 127.0.0.1 that answers 200 and keeps every request:
// {at, method, url, headers (lower case), body (the raw bytes)}.
async function startSink() {
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size <= SINK_BODY_MAX_BYTES) {
        chunks.push(c);
      }
    });
    req.on('end', () => {
      if (requests.length < SINK_REQUESTS_MAX) {
        requests.push({
          at: Date.now(),
          method: req.method,
          url: req.url,
          headers: { ...req.headers },
          body: Buffer.concat(chunks),
        });
      }
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return { server, requests, port: server.address().port };
}

function deliveryHeaders(r) {
  return {
    'webhook-id': r.headers['webhook-id'],
    'webhook-timestamp': r.headers['webhook-timestamp'],
    'webhook-signature': r.headers['webhook-signature'],
  };
}

function describe(requests) {
  return requests
    .map((r) => `${r.method} ${r.url} id=${r.headers['webhook-id']} ${r.body.toString('utf8').slice(0, 120)}`)
    .join('\n');
}

// ---- the test -------------------------------------------------------------------

const run = `${Date.now()}-${process.pid}`;
const stripe = new Stripe('sk_test_keelson_interop'); // never calls Stripe: signing only
let token;

await check(`tenant signed up and logged in at ${GW}`, async () => {
  const email = `interop-${run}@example.test`;
  const password = `interop-pw-${randomBytes(8).toString('hex')}`;
  await auth('SignUp', { email, password, tenantName: `interop ${run}`, displayName: 'interop' });
  const j = await auth('Login', { email, password });
  assert.ok(j.sessionToken, `Login: no sessionToken: ${JSON.stringify(j)}`);
  token = j.sessionToken;
});

// ---- intake: Stripe ----

const stripeSecret = `whsec_interop_${randomBytes(16).toString('hex')}`;
let stripeEndpoint;
const stripeEventId = `evt_interop_${randomBytes(8).toString('hex')}`;
const stripePayload = JSON.stringify({
  id: stripeEventId,
  object: 'event',
  api_version: '2024-06-20',
  created: Math.floor(Date.now() / 1000),
  type: 'customer.created', // billing acts not on it: stored as ignored
  livemode: false,
  pending_webhooks: 1,
  request: { id: null, idempotency_key: null },
  data: { object: { id: `cus_interop_${run}`, object: 'customer', email: 'c@example.test' } },
});
let stripeStoredId;

await check('CreateIntakeEndpoint PROVIDER_STRIPE', async () => {
  const j = await webhooks('CreateIntakeEndpoint', { provider: 'PROVIDER_STRIPE', secret: stripeSecret }, token);
  stripeEndpoint = j.endpoint;
  assert.equal(stripeEndpoint.provider, 'PROVIDER_STRIPE');
  assert.equal(stripeEndpoint.path, `/webhooks/stripe/${stripeEndpoint.id}`);
});

await check('stripe.webhooks.generateTestHeaderString: event accepted (200) and stored', async () => {
  const header = stripe.webhooks.generateTestHeaderString({
    payload: stripePayload,
    secret: stripeSecret,
    timestamp: Math.floor(Date.now() / 1000),
  });
  // The library's own check of its header: the header is what Stripe sends.
  stripe.webhooks.constructEvent(stripePayload, header, stripeSecret);
  const r = await intake(stripeEndpoint.path, stripePayload, {
    'Content-Type': 'application/json; charset=utf-8',
    'Stripe-Signature': header,
  });
  assert.equal(r.status, 200, `answered ${r.status}: ${r.text}`);
  assert.ok(r.json && r.json.eventId, `no eventId: ${r.text}`);
  assert.ok(!r.json.duplicate, `first delivery called a duplicate: ${r.text}`);
  stripeStoredId = r.json.eventId;
});

await check('the same Stripe event sent again (new signature): 200 duplicate, same eventId', async () => {
  const header = stripe.webhooks.generateTestHeaderString({
    payload: stripePayload,
    secret: stripeSecret,
    timestamp: Math.floor(Date.now() / 1000),
  });
  const r = await intake(stripeEndpoint.path, stripePayload, { 'Stripe-Signature': header });
  assert.equal(r.status, 200, `answered ${r.status}: ${r.text}`);
  assert.equal(r.json.eventId, stripeStoredId);
  assert.equal(r.json.duplicate, true, r.text);
});

await check('ListReceivedEvents and GetReceivedEvent show the Stripe event, body byte for byte', async () => {
  const list = await webhooks('ListReceivedEvents', { endpointId: stripeEndpoint.id }, token);
  const events = list.events || [];
  assert.equal(events.length, 1, `expected one event: ${JSON.stringify(list)}`);
  const e = events[0];
  assert.equal(e.id, stripeStoredId);
  assert.equal(e.providerEventId, stripeEventId);
  assert.equal(e.provider, 'PROVIDER_STRIPE');
  assert.equal(e.type, 'customer.created');
  assert.equal(e.status, 'RECEIVED_STATUS_IGNORED');
  const got = await webhooks('GetReceivedEvent', { id: stripeStoredId }, token);
  assert.equal(Buffer.from(got.event.body, 'base64').toString('utf8'), stripePayload);
});

await check('Stripe event with one byte changed: 400 signature_mismatch, nothing stored', async () => {
  const header = stripe.webhooks.generateTestHeaderString({
    payload: stripePayload,
    secret: stripeSecret,
    timestamp: Math.floor(Date.now() / 1000),
  });
  const bad = tamper(stripePayload);
  assert.throws(() => stripe.webhooks.constructEvent(bad, header, stripeSecret)); // the library agrees
  const r = await intake(stripeEndpoint.path, bad, { 'Stripe-Signature': header });
  assert.equal(r.status, 400, `answered ${r.status}: ${r.text}`);
  assert.match(r.text, /signature_mismatch/);
  const list = await webhooks('ListReceivedEvents', { endpointId: stripeEndpoint.id }, token);
  assert.equal((list.events || []).length, 1, JSON.stringify(list));
});

// ---- intake: Standard Webhooks ----

const standardSecretIn = standardSecret(24 + Math.floor(Math.random() * 41)); // 24..64 bytes
let standardEndpoint;
const msgId = `msg_interop_${randomBytes(8).toString('hex')}`;
const standardPayload = JSON.stringify({
  type: 'interop.ping',
  timestamp: new Date().toISOString(),
  data: { run, note: 'signed by standardwebhooks' },
});
let standardStoredId;

function standardHeaders(secret, id, payload) {
  const now = new Date();
  return {
    'Content-Type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(id, now, payload),
  };
}

await check('CreateIntakeEndpoint PROVIDER_STANDARD', async () => {
  const j = await webhooks('CreateIntakeEndpoint', { provider: 'PROVIDER_STANDARD', secret: standardSecretIn }, token);
  standardEndpoint = j.endpoint;
  assert.equal(standardEndpoint.provider, 'PROVIDER_STANDARD');
  assert.equal(standardEndpoint.path, `/webhooks/standard/${standardEndpoint.id}`);
});

await check('new Webhook(secret).sign: event accepted (200) and stored', async () => {
  const h = standardHeaders(standardSecretIn, msgId, standardPayload);
  new Webhook(standardSecretIn).verify(standardPayload, h); // the library's own check
  const r = await intake(standardEndpoint.path, standardPayload, h);
  assert.equal(r.status, 200, `answered ${r.status}: ${r.text}`);
  assert.ok(r.json && r.json.eventId && !r.json.duplicate, r.text);
  standardStoredId = r.json.eventId;
});

await check('ListReceivedEvents and GetReceivedEvent show the Standard Webhooks event', async () => {
  const list = await webhooks('ListReceivedEvents', { endpointId: standardEndpoint.id }, token);
  const events = list.events || [];
  assert.equal(events.length, 1, `expected one event: ${JSON.stringify(list)}`);
  const e = events[0];
  assert.equal(e.id, standardStoredId);
  assert.equal(e.providerEventId, msgId);
  assert.equal(e.provider, 'PROVIDER_STANDARD');
  assert.equal(e.type, 'interop.ping');
  assert.equal(e.status, 'RECEIVED_STATUS_IGNORED');
  const got = await webhooks('GetReceivedEvent', { id: standardStoredId }, token);
  assert.equal(Buffer.from(got.event.body, 'base64').toString('utf8'), standardPayload);
});

await check('Standard Webhooks event signed with another secret: 400 signature_mismatch', async () => {
  const id = `msg_interop_${randomBytes(8).toString('hex')}`;
  const r = await intake(standardEndpoint.path, standardPayload, standardHeaders(standardSecret(), id, standardPayload));
  assert.equal(r.status, 400, `answered ${r.status}: ${r.text}`);
  assert.match(r.text, /signature_mismatch/);
});

await check('Standard Webhooks event with one byte changed: 400 signature_mismatch', async () => {
  const id = `msg_interop_${randomBytes(8).toString('hex')}`;
  const h = standardHeaders(standardSecretIn, id, standardPayload);
  const r = await intake(standardEndpoint.path, tamper(standardPayload), h);
  assert.equal(r.status, 400, `answered ${r.status}: ${r.text}`);
  assert.match(r.text, /signature_mismatch/);
  const list = await webhooks('ListReceivedEvents', { endpointId: standardEndpoint.id }, token);
  assert.equal((list.events || []).length, 1, JSON.stringify(list));
});

// ---- delivery ----

const sink = await startSink();
let subscription;
let secret1;
let customerId;
let planId;
let sub;
let invoice;

try {
  await check(`CreateWebhookSubscription to the sink on 127.0.0.1:${sink.port}`, async () => {
    const j = await webhooks(
      'CreateWebhookSubscription',
      { url: `http://127.0.0.1:${sink.port}/hook`, topics: TOPICS, description: 'interop' },
      token,
    );
    subscription = j.subscription;
    secret1 = j.secret;
    assert.ok(subscription && subscription.id, JSON.stringify(j));
    assert.match(secret1, /^whsec_[A-Za-z0-9+/]{43}=$/, 'secret: "whsec_" + base64 of 32 bytes');
    assert.deepEqual([...subscription.topics].sort(), [...TOPICS].sort());
  });

  await check('billing: customer, plan, subscription (paid at once)', async () => {
    const c = await billing(
      'CreateCustomer',
      { email: `customer-${run}@example.test`, name: 'Interop', currency: 'USD', defaultPaymentMethod: 'pm_card_visa' },
      token,
    );
    customerId = c.customer.id;
    const p = await billing(
      'CreatePlan',
      {
        code: 'pro',
        name: 'Pro',
        currency: 'USD',
        intervalUnit: 'INTERVAL_UNIT_MONTH',
        price: { model: 'PRICE_MODEL_FLAT', amount: '2000' },
      },
      token,
    );
    planId = p.plan.id;
    const s = await billing('CreateSubscription', { customerId, planId }, token);
    sub = s.subscription;
    invoice = s.latestInvoice;
    assert.equal(sub.state, 'active', JSON.stringify(s));
    assert.ok(invoice && invoice.id, `no latestInvoice: ${JSON.stringify(s)}`);
    assert.equal(invoice.state, 'paid', JSON.stringify(invoice));
  });

  let first;
  await check(`the sink received 3 POSTs within ${DELIVERY_WAIT_MS} ms`, async () => {
    // Delivery is at least once: the same event again (same webhook-id)
    // is within the contract, a fourth event is not.
    const distinct = () => [...new Map(sink.requests.map((r) => [r.headers['webhook-id'], r])).values()];
    try {
      await waitFor('3 deliveries', DELIVERY_WAIT_MS, () => distinct().length >= 3);
    } catch (err) {
      throw new Error(`${err.message}; received:\n${describe(sink.requests)}`);
    }
    await sleep(300); // nothing more is due
    first = distinct();
    assert.equal(first.length, 3, `received:\n${describe(sink.requests)}`);
    for (const r of first) {
      assert.equal(r.method, 'POST');
      assert.equal(r.url, '/hook');
      assert.match(r.headers['content-type'] || '', /^application\/json/);
      assert.equal(r.headers['webhook-signature'].split(' ').length, 1, 'one secret: one signature');
    }
  });

  const payloads = {};
  await check('new Webhook(secret).verify accepts each delivery', async () => {
    const wh = new Webhook(secret1);
    for (const r of first) {
      const p = wh.verify(r.body, deliveryHeaders(r));
      assert.ok(TOPICS.includes(p.type), `type ${p.type}`);
      assert.ok(!payloads[p.type], `${p.type} delivered twice:\n${describe(first)}`);
      payloads[p.type] = p;
    }
  });

  await check('the verified payloads are what billing answered', async () => {
    const changed = payloads['billing.subscription_changed'];
    assert.equal(changed.data.subscriptionId, sub.id);
    assert.equal(changed.data.customerId, customerId);
    assert.equal(changed.data.toState, 'active');
    assert.equal(changed.data.event, 'create');
    assert.equal(changed.data.planId, planId);
    const finalized = payloads['billing.invoice_finalized'];
    assert.equal(finalized.data.invoiceId, invoice.id);
    assert.equal(finalized.data.subscriptionId, sub.id);
    assert.equal(finalized.data.number, invoice.number);
    assert.equal(finalized.data.currency, 'USD');
    assert.equal(finalized.data.total, '2000');
    const paid = payloads['billing.invoice_paid'];
    assert.equal(paid.data.invoiceId, invoice.id);
    assert.equal(paid.data.subscriptionId, sub.id);
    assert.equal(paid.data.amountPaid, '2000');
    for (const p of Object.values(payloads)) {
      assert.ok(!Number.isNaN(Date.parse(p.timestamp)), `timestamp ${p.timestamp}`);
    }
  });

  await check('a delivery with one byte changed fails verify', async () => {
    const wh = new Webhook(secret1);
    for (const r of first) {
      assert.throws(() => wh.verify(tamper(r.body), deliveryHeaders(r)), WebhookVerificationError);
    }
    assert.throws(() => new Webhook(standardSecret()).verify(first[0].body, deliveryHeaders(first[0])), WebhookVerificationError);
  });

  let secret2;
  await check('RotateWebhookSubscriptionSecret: a new secret, both sign', async () => {
    const j = await webhooks('RotateWebhookSubscriptionSecret', { id: subscription.id }, token);
    secret2 = j.secret;
    assert.match(secret2, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.notEqual(secret2, secret1);
    assert.equal((j.subscription.secrets || []).length, 2, JSON.stringify(j.subscription));
  });

  let after;
  let afterAll;
  await check('CancelSubscription: its billing.subscription_changed reaches the sink', async () => {
    const mark = sink.requests.length;
    const s = await billing('CancelSubscription', { id: sub.id }, token);
    assert.equal(s.subscription.state, 'canceled', JSON.stringify(s));
    try {
      after = await waitFor('subscription_changed after the rotation', DELIVERY_WAIT_MS, () =>
        sink.requests.slice(mark).find((r) => JSON.parse(r.body.toString('utf8')).type === 'billing.subscription_changed'),
      );
    } catch (err) {
      throw new Error(`${err.message}; received:\n${describe(sink.requests.slice(mark))}`);
    }
    afterAll = sink.requests.slice(mark); // and the cancellation's invoice events, if here yet
  });

  await check(`after the rotation (${afterAll.length} POSTs): two v1 signatures; verify passes with the new and the old secret`, async () => {
    const sigs = after.headers['webhook-signature'].split(' ');
    assert.equal(sigs.length, 2, `webhook-signature: ${after.headers['webhook-signature']}`);
    for (const s of sigs) {
      assert.match(s, /^v1,[A-Za-z0-9+/]{43}=$/);
    }
    const pNew = new Webhook(secret2).verify(after.body, deliveryHeaders(after));
    const pOld = new Webhook(secret1).verify(after.body, deliveryHeaders(after));
    assert.deepEqual(pNew, pOld);
    assert.equal(pNew.type, 'billing.subscription_changed');
    assert.equal(pNew.data.subscriptionId, sub.id);
    assert.equal(pNew.data.fromState, 'active');
    assert.equal(pNew.data.toState, 'canceled');
    assert.throws(() => new Webhook(secret2).verify(tamper(after.body), deliveryHeaders(after)), WebhookVerificationError);
    assert.throws(() => new Webhook(standardSecret()).verify(after.body, deliveryHeaders(after)), WebhookVerificationError);
    for (const r of afterAll) {
      assert.equal(r.headers['webhook-signature'].split(' ').length, 2, `${r.body}: ${r.headers['webhook-signature']}`);
      new Webhook(secret2).verify(r.body, deliveryHeaders(r));
      new Webhook(secret1).verify(r.body, deliveryHeaders(r));
    }
  });
  // Last: the checks above are the libraries' view; this one is keelson's
  // own record of the same POSTs, which the tenant reads.
  await check('ListDeliveries: every POST the sink answered 200 is DELIVERY_STATUS_DELIVERED', async () => {
    let j;
    try {
      await waitFor('all delivered', STATUS_WAIT_MS, async () => {
        const seen = new Set(sink.requests.map((r) => r.headers['webhook-id']));
        j = await webhooks('ListDeliveries', { subscriptionId: subscription.id }, token);
        const ds = j.deliveries || [];
        return ds.length === seen.size && ds.every((d) => seen.has(d.eventId) && d.status === 'DELIVERY_STATUS_DELIVERED');
      });
    } catch (err) {
      throw new Error(`${err.message}; ListDeliveries answered ${JSON.stringify(j)}`);
    }
  });
} finally {
  sink.server.close();
  sink.server.closeAllConnections();
}

summary();
