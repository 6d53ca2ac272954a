// What the interop scripts share: one line per check (stopping at the first
// failure, which later checks build on), the stack's address, bounded waits.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

let passed = 0;

// Runs one check: "ok   name", or "FAIL name" with the error and exit 1.
export async function check(name, fn) {
  try {
    await fn();
  } catch (err) {
    console.log(`FAIL ${name}`);
    console.log(`     ${String(err && err.stack ? err.stack : err).split('\n').join('\n     ')}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
  passed++;
  console.log(`ok   ${name}`);
}

// The last line of a script whose checks all passed.
export function summary() {
  console.log(`${passed} passed, 0 failed`);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Polls fn (sync or async) until it returns something truthy, for at most timeoutMs.
export async function waitFor(what, timeoutMs, fn) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) {
      return v;
    }
    if (Date.now() >= deadline) {
      throw new Error(`${what}: not after ${timeoutMs} ms`);
    }
    await sleep(50);
  }
}

// A value of the env file deploy/local/stack.sh writes into $KEELSON_IT_STACK.
export function stackEnv(key) {
  const dir = process.env.KEELSON_IT_STACK;
  if (!dir) {
    throw new Error('KEELSON_IT_STACK is not set: the folder of a running stack (deploy/local/stack.sh start --dir DIR)');
  }
  let text;
  try {
    text = readFileSync(join(dir, 'env'), 'utf8');
  } catch (err) {
    throw new Error(`cannot read ${join(dir, 'env')} (is the stack started?): ${err.message}`);
  }
  const line = text.split('\n').find((l) => l.startsWith(`${key}=`));
  if (!line) {
    throw new Error(`${join(dir, 'env')} has no ${key} line`);
  }
  return line.slice(key.length + 1).trim();
}
