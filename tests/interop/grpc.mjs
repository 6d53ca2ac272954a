// keelson's gateway against the gRPC client teams really run: @grpc/grpc-js
// with stubs made at run time from keelson's own .proto files by
// @grpc/proto-loader, over cleartext HTTP/2 to the gateway's one port
// (ctest: integration.interop_grpc; tests/CMakeLists.txt installs the pinned
// libraries of package-lock.json beside this file first).
//
//   - AuthService: SignUp and Login (public), WhoAmI with the session in the
//     `authorization` metadata, the same answer as Connect JSON gives;
//   - LedgerService: CreateAccounts, CreateTransfers (and its resend:
//     `exists`), LookupAccounts with the balances the transfer left;
//   - BillingService: CreateCustomer with an `idempotency-key`, sent twice
//     (the second answer replayed: the same customer), then ListCustomers;
//     no gateway code is specific to either method;
//   - errors as gRPC statuses with their messages: UNAUTHENTICATED without a
//     session, INVALID_ARGUMENT for a bad email, UNIMPLEMENTED for a method
//     no service has;
//   - deadlines: a Login (tens of ms of password hashing on auth) with a
//     grpc-timeout of a few ms, sent with node:http2 so that no client-side
//     timer can answer it: DEADLINE_EXCEEDED in the gateway's own trailers,
//     counted by the gateway as a call that ran out upstream; grpc-js's
//     deadline too; and the gateway serving on;
//   - the 4 MiB message limit from grpc-js (its own send limit raised): a
//     message of exactly 4 MiB accepted (WhoAmI answers), one byte more
//     RESOURCE_EXHAUSTED;
//   - gzip-compressed requests (grpc-encoding: gzip);
//   - grpc.health.v1.Health/Check: "" and a keelson service SERVING, an
//     unknown name NOT_FOUND; Watch: the status at once, SERVICE_UNKNOWN
//     for an unknown name;
//   - keelson.events.v1.EventService/Subscribe, a server stream: a
//     heartbeat with a cursor first; the tenant's billing events as its
//     writes commit, none of another tenant's; a resume from a cursor sends
//     what followed it again; an unknown topic and a missing token refused;
//     an API key of a role with billing.read (admin) receives the events of
//     a write, one of a role without it (member) is PERMISSION_DENIED;
//   - grpc.reflection v1 and v1alpha, a bidirectional stream: list_services
//     names the public services and not the internal ones; the file of
//     AuthService describes WhoAmI and not the internal ResolveContext; an
//     unknown symbol is answered NOT_FOUND on the stream, which goes on.
//
// Reads the gateway's address from $KEELSON_IT_STACK/env and the protos
// from $KEELSON_PROTO_DIR. Prints one line per check; stops at the first
// failure and exits 1.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';

import { fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { check, stackEnv, summary, waitFor } from './support.mjs';

const CALL_TIMEOUT_MS = 10000;
const PASSWORD = 'correct horse battery staple';


const protoDir = process.env.KEELSON_PROTO_DIR;
assert.ok(protoDir, 'KEELSON_PROTO_DIR');
const defs = protoLoader.loadSync(
  [
    'keelson/auth/v1/auth.proto',
    'keelson/billing/v1/billing.proto',
    'keelson/ledger/v1/ledger.proto',
    'grpc/health/v1/health.proto',
    'keelson/events/v1/event_service.proto',
    'grpc/reflection/v1/reflection.proto',
    'grpc/reflection/v1alpha/reflection.proto',
  ],
  { includeDirs: [protoDir], keepCase: false, longs: String, enums: String, defaults: true },
);
const pkg = grpc.loadPackageDefinition(defs);
const target = new URL(stackEnv('KEELSON_IT_GATEWAY_URL')).host;
const plain = grpc.credentials.createInsecure();

const auth = new pkg.keelson.auth.v1.AuthService(target, plain);
const billing = new pkg.keelson.billing.v1.BillingService(target, plain);
const ledger = new pkg.keelson.ledger.v1.LedgerService(target, plain);
const health = new pkg.grpc.health.v1.Health(target, plain);
const authGzip = new pkg.keelson.auth.v1.AuthService(target, plain, {
  'grpc.default_compression_algorithm': 2, // gzip
});

function deadline() {
  return new Date(Date.now() + CALL_TIMEOUT_MS);
}

// A unary call as a promise: resolves to the reply, rejects with the ServiceError.
function call(client, method, request, metadata = new grpc.Metadata()) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: deadline() }, (err, reply) =>
      err ? reject(err) : resolve(reply),
    );
  });
}

async function refused(promise, code) {
  try {
    await promise;
  } catch (err) {
    assert.equal(err.code, code, `status ${err.code} (${err.details}), want ${code}`);
    return err;
  }
  assert.fail(`the call succeeded; want status ${code}`);
}

function bearer(token) {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${token}`);
  return md;
}

const email = `grpc-${randomBytes(6).toString('hex')}@example.test`;
let token;
let userId;
let login;

await check('SignUp and Login over gRPC', async () => {
  const up = await call(auth, 'signUp', {
    email,
    password: PASSWORD,
    tenantName: 'gRPC interop',
    displayName: 'Ada',
  });
  assert.match(up.userId, /^[0-9a-f-]{36}$/);
  login = await call(auth, 'login', { email, password: PASSWORD });
  assert.ok(login.sessionToken.length > 20);
  assert.equal(login.userId, up.userId);
  token = login.sessionToken;
  userId = login.userId;
});

await check('WhoAmI with the session in the authorization metadata', async () => {
  const me = await call(auth, 'whoAmI', {}, bearer(token));
  assert.equal(me.userId, userId);
  assert.equal(me.email, email);
  assert.equal(me.displayName, 'Ada');
});

await check('WhoAmI without a session: UNAUTHENTICATED with its message', async () => {
  const err = await refused(call(auth, 'whoAmI', {}), grpc.status.UNAUTHENTICATED);
  assert.equal(err.details, 'missing bearer token');
});

await check('SignUp with a bad email: INVALID_ARGUMENT, message as the service wrote it', async () => {
  const err = await refused(
    call(auth, 'signUp', { email: 'not an address', password: PASSWORD, tenantName: 'x' }),
    grpc.status.INVALID_ARGUMENT,
  );
  assert.ok(err.details.length > 0);
});

await check('a gzip-compressed request (grpc-encoding: gzip)', async () => {
  const me = await call(authGzip, 'whoAmI', {}, bearer(token));
  assert.equal(me.userId, userId);
});

await check('CreateCustomer twice with one idempotency-key: one customer', async () => {
  const md = bearer(token);
  md.set('idempotency-key', `grpc-${randomBytes(8).toString('hex')}`);
  const request = { email: 'payer@example.test', name: 'Payer', currency: 'EUR', taxRateBp: 2000 };
  const first = await call(billing, 'createCustomer', request, md);
  const second = await call(billing, 'createCustomer', request, md);
  assert.match(first.customer.id, /^[0-9a-f-]{36}$/);
  assert.equal(second.customer.id, first.customer.id);
  const list = await call(billing, 'listCustomers', { pageSize: 10 }, bearer(token));
  assert.deepEqual(
    list.customers.map((c) => c.id),
    [first.customer.id],
  );
});

await check('LedgerService over gRPC: accounts, a transfer, the balances it left', async () => {
  const md = bearer(token);
  const id = () => BigInt.asUintN(63, BigInt(`0x${randomBytes(8).toString('hex')}`)).toString();
  const [debit, credit, transfer] = [id(), id(), id()];
  const accounts = await call(
    ledger,
    'createAccounts',
    { accounts: [debit, credit].map((a) => ({ id: a, ledger: 840, code: 1 })) },
    md,
  );
  assert.deepEqual(accounts.results, ['ok', 'ok']);
  const moved = await call(
    ledger,
    'createTransfers',
    {
      transfers: [
        { id: transfer, debitAccountId: debit, creditAccountId: credit, amount: '250', ledger: 840, code: 1 },
      ],
    },
    md,
  );
  assert.deepEqual(moved.results, ['ok']);
  const found = await call(ledger, 'lookupAccounts', { ids: [debit, credit] }, md);
  assert.equal(found.accounts[0].debitsPosted, '250');
  assert.equal(found.accounts[1].creditsPosted, '250');
  // The same transfer again: exists, as TigerBeetle answers a resend.
  const again = await call(
    ledger,
    'createTransfers',
    {
      transfers: [
        { id: transfer, debitAccountId: debit, creditAccountId: credit, amount: '250', ledger: 840, code: 1 },
      ],
    },
    md,
  );
  assert.deepEqual(again.results, ['exists']);
});

await check('a method no service has: UNIMPLEMENTED', async () => {
  const client = new grpc.Client(target, plain);
  await refused(
    new Promise((resolve, reject) =>
      client.makeUnaryRequest(
        '/keelson.auth.v1.AuthService/NoSuchMethod',
        (x) => x,
        (x) => x,
        Buffer.alloc(0),
        new grpc.Metadata(),
        { deadline: deadline() },
        (err, reply) => (err ? reject(err) : resolve(reply)),
      ),
    ),
    grpc.status.UNIMPLEMENTED,
  );
  client.close();
});

// ---- deadlines, seen from the wire ----------------------------------------------------

// One gRPC call with node:http2, which keeps no deadline of its own: what the
// server answered, with grpc-status from its trailers (or its Trailers-Only headers).
function rawGrpc(path, message, headers = {}) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${target}`);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    let head = {};
    let trailers = {};
    req.on('response', (h) => (head = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', () => {});
    req.on('error', reject);
    req.on('end', () => {
      session.close();
      const st = trailers['grpc-status'] ?? head['grpc-status'];
      const msg = trailers['grpc-message'] ?? head['grpc-message'];
      resolve({ status: head[':status'], grpcStatus: Number(st), grpcMessage: msg });
    });
    req.end(frame);
  });
}

// A protobuf string field (wire type 2; lengths under 128).
function pbString(field, s) {
  const b = Buffer.from(s);
  assert.ok(b.length < 128);
  return Buffer.concat([Buffer.from([(field << 3) | 2, b.length]), b]);
}

// A series of the first gateway's /metrics (its admin port is the env's first).
async function gatewayMetric(series) {
  const port = stackEnv('KEELSON_IT_GATEWAY_ADMIN_PORTS').split(',')[0];
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

await check('a deadline that runs out while auth hashes: DEADLINE_EXCEEDED from the gateway', async () => {
  const series = 'keelson_gateway_upstream_errors_total{service="auth",code="deadline_exceeded"}';
  const before = await gatewayMetric(series);
  const login = Buffer.concat([pbString(1, email), pbString(2, PASSWORD)]);
  // 30 ms: time enough for the gateway to send the call on even when sanitizers and
  // the hashes of the checks before slow it (5 ms ran out there once, uncounted), and
  // short against the hash itself (scrypt at the defaults, about 80 ms of a core).
  const answer = await rawGrpc('/keelson.auth.v1.AuthService/Login', login, { 'grpc-timeout': '30m' });
  assert.equal(answer.status, 200);
  assert.equal(answer.grpcStatus, grpc.status.DEADLINE_EXCEEDED, `${answer.grpcStatus} ${answer.grpcMessage}`);
  // The gateway's timer or auth's own check of the deadline, whichever runs out first.
  assert.match(answer.grpcMessage, /^deadline exceeded/);
  // The call had gone upstream: the gateway counts a call that ran out there, not one
  // refused at its start (a deadline already past is the client's and not counted).
  assert.equal(await gatewayMetric(series), before + 1);
  // The same call with time enough is answered by the same path.
  const ok = await rawGrpc('/keelson.auth.v1.AuthService/Login', login, { 'grpc-timeout': '10S' });
  assert.equal(ok.grpcStatus, grpc.status.OK);
});

await check('grpc-js with a deadline of a few ms on Login: DEADLINE_EXCEEDED; the gateway serves on', async () => {
  const err = await refused(
    new Promise((resolve, reject) =>
      auth.login({ email, password: PASSWORD }, new grpc.Metadata(), { deadline: new Date(Date.now() + 5) }, (e, r) =>
        e ? reject(e) : resolve(r),
      ),
    ),
    grpc.status.DEADLINE_EXCEEDED,
  );
  assert.ok(err.details.length > 0);
  const me = await call(auth, 'whoAmI', {}, bearer(token));
  assert.equal(me.userId, userId);
});

// ---- the 4 MiB message limit -----------------------------------------------------------

const MESSAGE_MAX = 4 << 20;

// A WhoAmIRequest of exactly len bytes: an unknown field 15 (ignored by auth) filling it.
function whoAmIOf(len) {
  const fieldLen = len - 1 - 4; // its tag, a 4-byte varint length, the bytes
  const b = Buffer.alloc(len, 'x'.charCodeAt(0));
  b[0] = (15 << 3) | 2;
  b[1] = 0x80 | (fieldLen & 0x7f);
  b[2] = 0x80 | ((fieldLen >> 7) & 0x7f);
  b[3] = 0x80 | ((fieldLen >> 14) & 0x7f);
  b[4] = (fieldLen >> 21) & 0x7f;
  return b;
}

await check('a 4 MiB message from grpc-js accepted, one byte more RESOURCE_EXHAUSTED', async () => {
  const client = new grpc.Client(target, plain, {
    'grpc.max_send_message_length': 8 << 20,
    'grpc.max_receive_message_length': 8 << 20,
  });
  const send = (len) =>
    new Promise((resolve, reject) =>
      client.makeUnaryRequest(
        '/keelson.auth.v1.AuthService/WhoAmI',
        (x) => x,
        (x) => x,
        whoAmIOf(len),
        bearer(token),
        { deadline: deadline() },
        (err, reply) => (err ? reject(err) : resolve(reply)),
      ),
    );
  const reply = await send(MESSAGE_MAX); // framing accepted; WhoAmI answers
  assert.ok(reply.length > 0);
  const err = await refused(send(MESSAGE_MAX + 1), grpc.status.RESOURCE_EXHAUSTED);
  assert.ok(err.details.length > 0, 'a message says what was too large');
  // The channel and the gateway go on.
  assert.ok((await send(1024)).length > 0);
  client.close();
});

await check('grpc.health.v1.Health/Check', async () => {
  assert.equal((await call(health, 'check', { service: '' })).status, 'SERVING');
  assert.equal(
    (await call(health, 'check', { service: 'keelson.auth.v1.AuthService' })).status,
    'SERVING',
  );
  await refused(call(health, 'check', { service: 'no.such.Service' }), grpc.status.NOT_FOUND);
});

await check('grpc.health.v1.Health/Watch: the status at once, SERVICE_UNKNOWN for an unknown name', async () => {
  for (const [service, want] of [
    ['keelson.auth.v1.AuthService', 'SERVING'],
    ['no.such.Service', 'SERVICE_UNKNOWN'],
  ]) {
    const stream = health.watch({ service });
    const first = await new Promise((resolve, reject) => {
      stream.once('data', resolve);
      stream.once('error', reject);
    });
    assert.equal(first.status, want);
    stream.on('error', () => {}); // the cancel below ends it CANCELLED
    stream.cancel();
  }
});

// ---- EventService ----------------------------------------------------------------

const events = new pkg.keelson.events.v1.EventService(target, plain);

// A Subscribe stream and what it has received so far.
function subscribe(tok, request = {}) {
  const md = tok ? bearer(tok) : new grpc.Metadata();
  const call = events.subscribe(request, md);
  const got = { messages: [], error: null, call };
  call.on('data', (m) => got.messages.push(m));
  call.on('error', (e) => (got.error = e));
  return got;
}


const eventsOf = (got) => got.messages.filter((m) => m.event);

// A subscription with its first invoice, written with md: billing.subscription_changed and
// billing.invoice_finalized at least.
async function subscriptionWrite(md) {
  const plan = await call(
    billing,
    'createPlan',
    {
      code: `events-${randomBytes(4).toString('hex')}`,
      name: 'Events',
      currency: 'EUR',
      intervalUnit: 'INTERVAL_UNIT_MONTH',
      price: { model: 'PRICE_MODEL_FLAT', amount: 1000 },
    },
    md,
  );
  const customer = await call(
    billing,
    'createCustomer',
    { email: 'events@example.test', name: 'Events', currency: 'EUR', defaultPaymentMethod: 'pm_card_visa' },
    md,
  );
  await call(billing, 'createSubscription', { customerId: customer.customer.id, planId: plan.plan.id }, md);
}

await check('EventService/Subscribe: refused without a token and for an unknown topic', async () => {
  const anon = subscribe(null);
  await waitFor('UNAUTHENTICATED', CALL_TIMEOUT_MS, () => anon.error);
  assert.equal(anon.error.code, grpc.status.UNAUTHENTICATED);
  const bad = subscribe(token, { topics: ['auth.email'] });
  await waitFor('INVALID_ARGUMENT', CALL_TIMEOUT_MS, () => bad.error);
  assert.equal(bad.error.code, grpc.status.INVALID_ARGUMENT);
});

await check('EventService/Subscribe: the tenant\'s billing events, nobody else\'s; resume from a cursor', async () => {
  // Another tenant, subscribed at the same time.
  const otherEmail = `grpc-other-${randomBytes(6).toString('hex')}@example.test`;
  await call(auth, 'signUp', { email: otherEmail, password: PASSWORD, tenantName: 'Other' });
  const other = (await call(auth, 'login', { email: otherEmail, password: PASSWORD })).sessionToken;
  const mine = subscribe(token);
  const theirs = subscribe(other);
  await waitFor('the first heartbeats', CALL_TIMEOUT_MS, () => mine.messages.length > 0 && theirs.messages.length > 0);
  assert.equal(mine.messages[0].heartbeat, true);
  assert.match(mine.messages[0].cursor, /^v1\./);

  await subscriptionWrite(bearer(token));
  await waitFor('two events', CALL_TIMEOUT_MS, () => eventsOf(mine).length >= 2);
  const topics = eventsOf(mine).map((m) => m.event.topic);
  assert.ok(topics.includes('billing.subscription_changed'), topics.join());
  assert.ok(topics.includes('billing.invoice_finalized'), topics.join());
  for (const m of eventsOf(mine)) {
    assert.equal(m.event.tenantId, login.tenantId);
    assert.match(m.event.eventId, /^[0-9a-f-]{36}$/);
  }
  assert.equal(eventsOf(theirs).length, 0, 'another tenant sees none of them');
  mine.call.cancel();
  theirs.call.cancel();

  // Resume from the first event's cursor: what followed it comes again.
  const seen = eventsOf(mine);
  const resumed = subscribe(token, { cursor: seen[0].cursor });
  await waitFor('the events after the cursor', CALL_TIMEOUT_MS, () => eventsOf(resumed).length >= seen.length - 1);
  assert.deepEqual(
    eventsOf(resumed).slice(0, seen.length - 1).map((m) => m.event.eventId),
    seen.slice(1).map((m) => m.event.eventId),
  );
  assert.ok(!resumed.messages.some((m) => m.gap), 'a resume on the same gateway has no gap');
  resumed.call.cancel();

  const garbled = subscribe(token, { cursor: 'not a cursor' });
  await waitFor('INVALID_ARGUMENT', CALL_TIMEOUT_MS, () => garbled.error);
  assert.equal(garbled.error.code, grpc.status.INVALID_ARGUMENT);
});

await check('EventService/Subscribe with API keys: billing.read receives events, a member key PERMISSION_DENIED', async () => {
  const key = async (role) =>
    (await call(auth, 'createApiKey', { name: `events-${role}`, role }, bearer(token))).key;
  const admin = await key('admin');
  const member = await key('member');
  assert.match(admin, /^ks_live_/);

  const denied = subscribe(member);
  await waitFor('PERMISSION_DENIED', CALL_TIMEOUT_MS, () => denied.error);
  assert.equal(denied.error.code, grpc.status.PERMISSION_DENIED);
  assert.match(denied.error.details, /billing\.read/);
  assert.equal(eventsOf(denied).length, 0);

  const byKey = subscribe(admin);
  await waitFor('the first heartbeat', CALL_TIMEOUT_MS, () => byKey.messages.length > 0);
  await subscriptionWrite(bearer(token));
  await waitFor('the write\'s events', CALL_TIMEOUT_MS, () => eventsOf(byKey).length >= 2);
  for (const m of eventsOf(byKey)) {
    assert.equal(m.event.tenantId, login.tenantId);
  }
  assert.equal(byKey.error, null);
  byKey.call.on('error', () => {}); // the cancel ends it CANCELLED
  byKey.call.cancel();
});

// One reflection stream: each request written, its answer read, in turn.
async function reflect(pkgName, requests) {
  const client = new pkg.grpc.reflection[pkgName].ServerReflection(target, plain);
  const call = client.serverReflectionInfo({ deadline: deadline() });
  const answers = [];
  const done = new Promise((resolve, reject) => {
    call.on('error', reject);
    call.on('status', (st) => (st.code === grpc.status.OK ? resolve() : reject(st)));
  });
  const next = () =>
    new Promise((resolve, reject) => {
      call.once('data', resolve);
      call.once('error', reject);
    });
  for (const r of requests) {
    const answer = next();
    call.write(r);
    answers.push(await answer);
  }
  call.end();
  await done;
  client.close();
  return answers;
}

for (const version of ['v1', 'v1alpha']) {
  await check(`grpc.reflection.${version}: list_services, file_containing_symbol, NOT_FOUND`, async () => {
    const [list, file, missing, again] = await reflect(version, [
      { listServices: '' },
      { fileContainingSymbol: 'keelson.auth.v1.AuthService' },
      { fileContainingSymbol: 'no.such.Symbol' },
      { fileContainingSymbol: 'keelson.auth.v1.AuthService.WhoAmI' },
    ]);
    const names = list.listServicesResponse.service.map((s) => s.name);
    for (const want of [
      'keelson.auth.v1.AuthService',
      'keelson.billing.v1.BillingService',
      'grpc.health.v1.Health',
      'grpc.reflection.v1.ServerReflection',
    ]) {
      assert.ok(names.includes(want), `${want} in ${names}`);
    }
    const files = file.fileDescriptorResponse.fileDescriptorProto.map((b) =>
      fromBinary(FileDescriptorProtoSchema, b),
    );
    const authFile = files.find((f) => f.name === 'keelson/auth/v1/auth.proto');
    assert.ok(authFile, 'auth.proto in the answer');
    const methods = authFile.service.find((s) => s.name === 'AuthService').method.map((m) => m.name);
    assert.ok(methods.includes('WhoAmI'));
    assert.ok(!methods.includes('ResolveContext'), 'an internal method is not described');
    assert.equal(missing.errorResponse.errorCode, grpc.status.NOT_FOUND);
    assert.ok(again.fileDescriptorResponse, 'the stream goes on after a NOT_FOUND');
  });
}

for (const c of [auth, billing, ledger, health, authGzip, events]) {
  c.close();
}
summary();
