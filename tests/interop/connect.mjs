// keelson's gateway against Connect's own clients (@connectrpc/connect-node
// 2.x), every protocol they speak, on the gateway's one port:
//
//   - Connect, JSON and binary, over HTTP/1.1 and over HTTP/2 (h2c);
//   - gRPC over HTTP/2;
//   - gRPC-Web, binary, over HTTP/1.1 and over HTTP/2;
//   - and grpc-web-text (base64), which no Node client speaks, by hand.
//
// The services come from keelson's descriptor set (the one the gateway
// embeds, written by protoc at build time: $KEELSON_DESCRIPTOR_SET) through
// @bufbuild/protobuf's registry: no generated code. For every transport:
// WhoAmI with the session answers the same user (LedgerService makes and reads
// accounts), and a call without one is
// refused `unauthenticated` with the gateway's message; EventService/Subscribe
// (a server stream) delivers the event of a write made while it is open, and
// Health/Watch answers at once. Then CORS on a
// gateway of the test's own: a preflight from an allowed origin, and one
// from another.
//
// Reads the gateway from $KEELSON_IT_STACK/env. One line per check; stops
// at the first failure and exits 1.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { createFileRegistry, fromBinary, toBinary, create } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from '@connectrpc/connect-node';

import { check, stackEnv, summary, waitFor } from './support.mjs';

const CALL_TIMEOUT_MS = 10000;
const PASSWORD = 'correct horse battery staple';


const registry = createFileRegistry(
  fromBinary(FileDescriptorSetSchema, readFileSync(process.env.KEELSON_DESCRIPTOR_SET)),
);
const AuthService = registry.getService('keelson.auth.v1.AuthService');
assert.ok(AuthService, 'keelson.auth.v1.AuthService in the descriptor set');
const baseUrl = stackEnv('KEELSON_IT_GATEWAY_URL');

const transports = {
  'Connect JSON, HTTP/1.1': createConnectTransport({ baseUrl, httpVersion: '1.1' }),
  'Connect binary, HTTP/1.1': createConnectTransport({
    baseUrl,
    httpVersion: '1.1',
    useBinaryFormat: true,
  }),
  'Connect JSON, HTTP/2': createConnectTransport({ baseUrl, httpVersion: '2' }),
  'Connect binary, HTTP/2': createConnectTransport({
    baseUrl,
    httpVersion: '2',
    useBinaryFormat: true,
  }),
  'gRPC, HTTP/2': createGrpcTransport({ baseUrl }),
  'gRPC-Web, HTTP/1.1': createGrpcWebTransport({ baseUrl, httpVersion: '1.1' }),
  'gRPC-Web, HTTP/2': createGrpcWebTransport({ baseUrl, httpVersion: '2' }),
};

const email = `connect-${randomBytes(6).toString('hex')}@example.test`;
let token;
let userId;

await check('SignUp and Login (Connect JSON, HTTP/1.1)', async () => {
  const auth = createClient(AuthService, transports['Connect JSON, HTTP/1.1']);
  const up = await auth.signUp(
    { email, password: PASSWORD, tenantName: 'Connect interop', displayName: 'Grace' },
    { timeoutMs: CALL_TIMEOUT_MS },
  );
  const login = await auth.login({ email, password: PASSWORD }, { timeoutMs: CALL_TIMEOUT_MS });
  assert.equal(login.userId, up.userId);
  token = login.sessionToken;
  userId = login.userId;
});

for (const [name, transport] of Object.entries(transports)) {
  await check(`${name}: WhoAmI, and unauthenticated without a session`, async () => {
    const auth = createClient(AuthService, transport);
    const me = await auth.whoAmI(
      {},
      { headers: { authorization: `Bearer ${token}` }, timeoutMs: CALL_TIMEOUT_MS },
    );
    assert.equal(me.userId, userId);
    assert.equal(me.email, email);
    try {
      await auth.whoAmI({}, { timeoutMs: CALL_TIMEOUT_MS });
      assert.fail('WhoAmI without a session succeeded');
    } catch (err) {
      const ce = ConnectError.from(err);
      assert.equal(ce.code, Code.Unauthenticated, `code ${Code[ce.code]}: ${ce.rawMessage}`);
      assert.equal(ce.rawMessage, 'missing bearer token');
    }
  });
}

// LedgerService on every transport: two accounts made, then read back.
const LedgerService = registry.getService('keelson.ledger.v1.LedgerService');
assert.ok(LedgerService, 'keelson.ledger.v1.LedgerService in the descriptor set');
const accountId = () => BigInt.asUintN(63, BigInt(`0x${randomBytes(8).toString('hex')}`));

for (const [name, transport] of Object.entries(transports)) {
  await check(`${name}: LedgerService CreateAccounts, then LookupAccounts`, async () => {
    const ledger = createClient(LedgerService, transport);
    const opts = { headers: { authorization: `Bearer ${token}` }, timeoutMs: CALL_TIMEOUT_MS };
    const ids = [accountId(), accountId()];
    const made = await ledger.createAccounts(
      { accounts: ids.map((id) => ({ id, ledger: 840, code: 1 })) },
      opts,
    );
    assert.deepEqual(made.results, [0, 0]); // ok, ok
    const found = await ledger.lookupAccounts({ ids }, opts);
    assert.deepEqual(found.accounts.map((a) => a.id), ids);
    assert.ok(found.accounts.every((a) => a.ledger === 840 && a.debitsPosted === 0n));
  });
}

// EventService/Subscribe, a server stream, on every transport: the first
// message a heartbeat with a cursor; then the event of a write made while
// the stream is open, and none of another tenant's; refused without a
// session and for a topic one may not subscribe to. One transport also
// resumes from a cursor.
const EventService = registry.getService('keelson.events.v1.EventService');
const BillingService = registry.getService('keelson.billing.v1.BillingService');
const SubscriptionChanged = registry.getMessage('keelson.billing.v1.SubscriptionChanged');
const Health = registry.getService('grpc.health.v1.Health');
assert.ok(EventService && BillingService && SubscriptionChanged && Health, 'services in the descriptor set');

// A stream read into got.messages until it ends (got.error) or is aborted.
function subscribe(transport, request, headers = {}) {
  const events = createClient(EventService, transport);
  const ctl = new AbortController();
  const got = { messages: [], error: null, ended: false, abort: () => ctl.abort() };
  (async () => {
    try {
      for await (const m of events.subscribe(request, { headers, signal: ctl.signal })) {
        got.messages.push(m);
      }
    } catch (err) {
      got.error = ConnectError.from(err);
    }
    got.ended = true;
  })();
  return got;
}

const eventsOf = (got) => got.messages.filter((m) => m.event);
const bearerHeader = () => ({ authorization: `Bearer ${token}` });

let customerId;
let planId;
await check('billing: a plan and a customer to subscribe during the streams', async () => {
  const billing = createClient(BillingService, transports['Connect JSON, HTTP/1.1']);
  const opts = { headers: bearerHeader(), timeoutMs: CALL_TIMEOUT_MS };
  planId = (
    await billing.createPlan(
      {
        code: `stream-${randomBytes(4).toString('hex')}`,
        name: 'Streams',
        currency: 'EUR',
        intervalUnit: 3, // INTERVAL_UNIT_MONTH
        price: { model: 1, amount: 1000n }, // PRICE_MODEL_FLAT
      },
      opts,
    )
  ).plan.id;
  customerId = (
    await billing.createCustomer(
      { email: 'streams@example.test', name: 'Streams', currency: 'EUR', defaultPaymentMethod: 'pm_card_visa' },
      opts,
    )
  ).customer.id;
});

const otherEmail = `connect-other-${randomBytes(6).toString('hex')}@example.test`;
let otherToken;
await check('another tenant, to subscribe beside us', async () => {
  const auth = createClient(AuthService, transports['Connect JSON, HTTP/1.1']);
  await auth.signUp({ email: otherEmail, password: PASSWORD, tenantName: 'Other' }, { timeoutMs: CALL_TIMEOUT_MS });
  otherToken = (await auth.login({ email: otherEmail, password: PASSWORD }, { timeoutMs: CALL_TIMEOUT_MS })).sessionToken;
});

let firstEvents;
for (const [name, transport] of Object.entries(transports)) {
  await check(`${name}: EventService/Subscribe streams the event of a write made during it, and no other tenant's`, async () => {
    const topics = { topics: ['billing.subscription_changed'] };
    const mine = subscribe(transport, topics, bearerHeader());
    const theirs = subscribe(transport, topics, { authorization: `Bearer ${otherToken}` });
    await waitFor('the first heartbeats', CALL_TIMEOUT_MS, () => (mine.messages.length > 0 && theirs.messages.length > 0) || mine.error || theirs.error);
    assert.equal(mine.error, null, mine.error && `${Code[mine.error.code]}: ${mine.error.rawMessage}`);
    assert.equal(mine.messages[0].heartbeat, true);
    assert.match(mine.messages[0].cursor, /^v1\./);
    const billing = createClient(BillingService, transports['Connect JSON, HTTP/1.1']);
    const sub = await billing.createSubscription({ customerId, planId }, { headers: bearerHeader(), timeoutMs: CALL_TIMEOUT_MS });
    const subId = sub.subscription.id;
    const ofIt = () =>
      eventsOf(mine).filter((m) => fromBinary(SubscriptionChanged, m.event.payload).subscriptionId === subId);
    await waitFor(`the subscription_changed of ${subId}`, CALL_TIMEOUT_MS, () => ofIt().length > 0 || mine.ended);
    assert.ok(ofIt().length > 0, `no event; the stream ended: ${mine.error && mine.error.rawMessage}`);
    const ev = ofIt()[0].event;
    assert.equal(ev.topic, 'billing.subscription_changed');
    assert.match(ev.eventId, /^[0-9a-f-]{36}$/);
    assert.equal(mine.ended, false, 'the stream stays open');
    assert.equal(eventsOf(theirs).length, 0, 'another tenant sees none of them');
    firstEvents ??= { transport, events: eventsOf(mine) };
    mine.abort();
    theirs.abort();

    const anon = subscribe(transport, topics);
    await waitFor('UNAUTHENTICATED', CALL_TIMEOUT_MS, () => anon.ended);
    assert.equal(anon.error?.code, Code.Unauthenticated);
    assert.equal(anon.error.rawMessage, 'missing bearer token');
    const bad = subscribe(transport, { topics: ['auth.email'] }, bearerHeader());
    await waitFor('INVALID_ARGUMENT', CALL_TIMEOUT_MS, () => bad.ended);
    assert.equal(bad.error?.code, Code.InvalidArgument);
    assert.match(bad.error.rawMessage, /auth\.email is not a topic/);
  });
}

await check('EventService/Subscribe resumed from a cursor: what followed it comes again', async () => {
  // A second write, so that the first event has one after it.
  const billing = createClient(BillingService, transports['Connect JSON, HTTP/1.1']);
  const mine = subscribe(firstEvents.transport, { topics: ['billing.subscription_changed'] }, bearerHeader());
  await waitFor('the first heartbeat', CALL_TIMEOUT_MS, () => mine.messages.length > 0);
  await billing.createSubscription({ customerId, planId }, { headers: bearerHeader(), timeoutMs: CALL_TIMEOUT_MS });
  await waitFor('the second event', CALL_TIMEOUT_MS, () => eventsOf(mine).length > 0);
  mine.abort();
  const first = firstEvents.events[0];
  const resumed = subscribe(transports['Connect binary, HTTP/1.1'], { cursor: first.cursor, topics: ['billing.subscription_changed'] }, bearerHeader());
  await waitFor('the events after the cursor', CALL_TIMEOUT_MS, () =>
    eventsOf(resumed).some((m) => m.event.eventId === eventsOf(mine)[0].event.eventId),
  );
  const ids = eventsOf(resumed).map((m) => m.event.eventId);
  assert.ok(!ids.includes(first.event.eventId), 'the event of the cursor is not sent again');
  assert.ok(!resumed.messages.some((m) => m.gap), 'a resume on the same gateway has no gap');
  resumed.abort();
});

for (const name of ['Connect binary, HTTP/1.1', 'Connect JSON, HTTP/2', 'gRPC-Web, HTTP/1.1']) {
  await check(`${name}: grpc.health.v1.Health/Watch, the gateway SERVING at once`, async () => {
    const health = createClient(Health, transports[name]);
    const ctl = new AbortController();
    for await (const m of health.watch({ service: '' }, { signal: ctl.signal })) {
      assert.equal(m.status, 1); // SERVING
      ctl.abort();
      break;
    }
  });
}

await check('a unary method with application/connect+json: 415, and a Connect error', async () => {
  const res = await fetch(`${baseUrl}/keelson.auth.v1.AuthService/WhoAmI`, {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', authorization: `Bearer ${token}` },
    body: Buffer.concat([Buffer.from([0, 0, 0, 0, 2]), Buffer.from('{}')]),
  });
  assert.equal(res.status, 415);
  assert.equal((await res.json()).code, 'unimplemented');
});

// grpc-web-text: what the grpc-web browser library sends by default.
async function webText(method, message, headers = {}) {
  const bytes = toBinary(method.input, message);
  const framed = Buffer.alloc(5 + bytes.length);
  framed.writeUInt32BE(bytes.length, 1);
  Buffer.from(bytes).copy(framed, 5);
  const res = await fetch(`${baseUrl}/${AuthService.typeName}/${method.name}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/grpc-web-text',
      accept: 'application/grpc-web-text',
      'x-grpc-web': '1',
      ...headers,
    },
    body: framed.toString('base64'),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/grpc-web-text+proto');
  // Each frame is padded base64 of its own: decode them one after the other.
  const text = await res.text();
  const chunks = text.match(/[^=]+=*/g) ?? [];
  const body = Buffer.concat(chunks.map((c) => Buffer.from(c, 'base64')));
  const frames = [];
  for (let at = 0; at < body.length; ) {
    const len = body.readUInt32BE(at + 1);
    frames.push({ flag: body[at], data: body.subarray(at + 5, at + 5 + len) });
    at += 5 + len;
  }
  const trailer = frames.find((f) => f.flag === 0x80);
  assert.ok(trailer, 'a trailer frame');
  const trailers = Object.fromEntries(
    trailer.data
      .toString()
      .split('\r\n')
      .filter((l) => l)
      .map((l) => [l.slice(0, l.indexOf(':')).trim(), l.slice(l.indexOf(':') + 1).trim()]),
  );
  const msg = frames.find((f) => f.flag === 0);
  return { trailers, message: msg ? fromBinary(method.output, msg.data) : null };
}

await check('grpc-web-text (base64): WhoAmI, and unauthenticated without a session', async () => {
  const whoAmI = AuthService.method.whoAmI;
  const ok = await webText(whoAmI, create(whoAmI.input, {}), {
    authorization: `Bearer ${token}`,
  });
  assert.equal(ok.trailers['grpc-status'], '0');
  assert.equal(ok.message.userId, userId);
  const refused = await webText(whoAmI, create(whoAmI.input, {}));
  assert.equal(refused.trailers['grpc-status'], String(Code.Unauthenticated));
  assert.equal(decodeURIComponent(refused.trailers['grpc-message']), 'missing bearer token');
  assert.equal(refused.message, null);
});

// CORS: the stack's gateways allow the origin the fixture configured
// (KEELSON_GATEWAY_CORS_ORIGINS), which ctest also gives this test.
const origin = process.env.KEELSON_IT_CORS_ORIGIN;
assert.ok(origin, 'KEELSON_IT_CORS_ORIGIN');

await check('CORS: a preflight from an allowed origin, and the answer it reads', async () => {
  const pre = await fetch(`${baseUrl}/keelson.auth.v1.AuthService/WhoAmI`, {
    method: 'OPTIONS',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type, x-grpc-web',
    },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), origin);
  assert.match(pre.headers.get('access-control-allow-headers'), /authorization/);
  assert.match(pre.headers.get('access-control-allow-headers'), /x-grpc-web/);
  assert.equal(pre.headers.get('access-control-allow-credentials'), null);
  const res = await fetch(`${baseUrl}/keelson.auth.v1.AuthService/WhoAmI`, {
    method: 'POST',
    headers: { origin, 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: '{}',
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('access-control-allow-origin'), origin);
  assert.match(res.headers.get('access-control-expose-headers'), /grpc-status/);
});

await check('CORS: another origin gets no CORS headers, and its preflight 403', async () => {
  const other = 'https://evil.example';
  const pre = await fetch(`${baseUrl}/keelson.auth.v1.AuthService/WhoAmI`, {
    method: 'OPTIONS',
    headers: { origin: other, 'access-control-request-method': 'POST' },
  });
  assert.equal(pre.status, 403);
  assert.equal(pre.headers.get('access-control-allow-origin'), null);
  const res = await fetch(`${baseUrl}/keelson.auth.v1.AuthService/WhoAmI`, {
    method: 'POST',
    headers: { origin: other, 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: '{}',
  });
  assert.equal(res.headers.get('access-control-allow-origin'), null);
});

summary();
