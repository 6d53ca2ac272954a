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
// WhoAmI with the session answers the same user, and a call without one is
// refused `unauthenticated` with the gateway's message. Then CORS on a
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

import { check, stackEnv, summary } from './support.mjs';

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
