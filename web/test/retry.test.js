// @ts-check
// The retry classes of lesson 000, one by one, with a clock and a random source the test holds.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  RETRY_DEFAULTS,
  RetryPolicy,
  backoffDelay,
  parseRetryAfter,
  retryAfterSeconds,
} from '../retry.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

/**
 * A policy on a clock standing at T0 and a random source returning `r` (changeable).
 * @param {Partial<import('../retry.js').RetryOptions>} [options]
 */
function policy(options) {
  const env = { now: T0, r: 0 };
  const p = new RetryPolicy({ now: () => env.now, random: () => env.r, options });
  return { p, env };
}

/**
 * @param {import('../retry.js').Decision} d
 * @returns {Extract<import('../retry.js').Decision, { action: 'retry' }>}
 */
function retry(d) {
  assert.equal(d.action, 'retry', `expected a retry, got ${JSON.stringify(d)}`);
  return /** @type {any} */ (d);
}

/**
 * @param {import('../retry.js').Decision} d
 * @returns {Extract<import('../retry.js').Decision, { action: 'stop' }>}
 */
function stop(d) {
  assert.equal(d.action, 'stop', `expected a stop, got ${JSON.stringify(d)}`);
  return /** @type {any} */ (d);
}

/** @param {number} status @param {number | null} [retryAfter] @param {string | null} [detail] */
const session = (status, retryAfter = null, detail = null) =>
  /** @type {const} */ ({ kind: 'session', status, retryAfter, detail });
/** @param {number} [uptimeMs] */
const drop = (uptimeMs = 0) => /** @type {const} */ ({ kind: 'drop', reason: 'failed', uptimeMs });

test('Retry-After: whole seconds, never below 1', () => {
  assert.equal(parseRetryAfter('120', T0), 120);
  assert.equal(parseRetryAfter(' 7 ', T0), 7);
  assert.equal(parseRetryAfter('0', T0), 1);
  for (const bad of ['', 'soon', '1.5', '-3', '+3', '1e3', '3 s']) {
    assert.equal(parseRetryAfter(bad, T0), null, bad);
  }
  assert.equal(parseRetryAfter(null, T0), null);
  assert.equal(parseRetryAfter(undefined, T0), null);
});

test('Retry-After: an HTTP-date counts from now, rounded up; a past date gives 1', () => {
  const inNinetyAndABit = new Date(T0 + 90_500).toUTCString(); // toUTCString drops the 500 ms
  assert.equal(parseRetryAfter(inNinetyAndABit, T0), 90);
  assert.equal(parseRetryAfter(new Date(T0 + 90_000).toUTCString(), T0 - 1), 91);
  assert.equal(parseRetryAfter(new Date(T0 - 3_600_000).toUTCString(), T0), 1);
  assert.equal(parseRetryAfter('Sun, 99 Nov 1994 08:49:37 GMT', T0), null);
});

test('Retry-After: header and problem body, the longer of the two', () => {
  assert.equal(retryAfterSeconds('30', 30, T0), 30);
  assert.equal(retryAfterSeconds('30', 45, T0), 45);
  assert.equal(retryAfterSeconds('50', 45, T0), 50);
  assert.equal(retryAfterSeconds(null, 45, T0), 45, 'a cross-origin page may see only the body');
  assert.equal(retryAfterSeconds(null, 0.2, T0), 1);
  assert.equal(retryAfterSeconds('12', 'x', T0), 12);
  assert.equal(retryAfterSeconds(null, -5, T0), null);
  assert.equal(retryAfterSeconds(null, undefined, T0), null);
});

test('back-off: doubles from the base, jitter only upwards, never above the cap', () => {
  const { dropBaseMs: base, dropCapMs: cap, jitter } = RETRY_DEFAULTS;
  assert.equal(backoffDelay(1, base, cap, jitter, () => 0), 3_000);
  assert.equal(backoffDelay(2, base, cap, jitter, () => 0), 6_000);
  assert.equal(backoffDelay(3, base, cap, jitter, () => 0), 12_000);
  assert.equal(backoffDelay(4, base, cap, jitter, () => 0), 24_000);
  assert.equal(backoffDelay(5, base, cap, jitter, () => 0), 48_000);
  assert.equal(backoffDelay(6, base, cap, jitter, () => 0), 48_000, 'the nominal wait stops at cap/1.25');
  for (let n = 1; n <= 40; n++) {
    const low = backoffDelay(n, base, cap, jitter, () => 0);
    const high = backoffDelay(n, base, cap, jitter, () => 0.999_999);
    assert.ok(low >= base, `n=${n}: ${low} below the base`);
    assert.ok(high <= cap, `n=${n}: ${high} above the cap`);
    assert.ok(high > low, `n=${n}: no jitter (${low}..${high})`);
    assert.ok(high <= Math.round(low * 1.25), `n=${n}: jitter over 25 %`);
  }
});

test('drop: "reconnecting in 3 s", a new call with the secret held, backing off to the cap', () => {
  const { p, env } = policy();
  env.r = 0;
  const first = retry(p.decide(drop()));
  assert.deepEqual(first, {
    action: 'retry',
    state: 'reconnecting',
    delayMs: 3_000,
    next: 'call',
    sameKey: false,
    reason: 'drop',
  });
  const waits = [first.delayMs];
  for (let i = 0; i < 7; i++) waits.push(retry(p.decide(drop(5_000))).delayMs);
  assert.deepEqual(waits, [3_000, 6_000, 12_000, 24_000, 48_000, 48_000, 48_000, 48_000]);
});

test('drop: jitter stays within [nominal, 1.25 x nominal] and under 60 s', () => {
  for (const r of [0, 0.3, 0.7, 0.999_999]) {
    const { p, env } = policy();
    env.r = r;
    let nominal = 3_000;
    for (let i = 0; i < RETRY_DEFAULTS.maxReconnects; i++) {
      const d = retry(p.decide(drop())).delayMs;
      assert.ok(d >= nominal && d <= nominal * 1.25, `r=${r}, drop ${i + 1}: ${d} vs ${nominal}`);
      assert.ok(d <= 60_000, `r=${r}: ${d}`);
      nominal = Math.min(nominal * 2, 48_000);
    }
  }
});

test('drop: a call that stayed up 60 s resets the back-off; a shorter one does not', () => {
  const { p } = policy();
  retry(p.decide(drop()));
  retry(p.decide(drop()));
  assert.equal(retry(p.decide(drop(59_999))).delayMs, 12_000);
  assert.equal(retry(p.decide(drop(60_000))).delayMs, 3_000);
  // The provider's 60-minute cap is such a drop.
  assert.equal(retry(p.decide({ kind: 'drop', reason: 'cap', uptimeMs: 3_600_000 })).delayMs, 3_000);
});

test('drop: after maxReconnects short calls in a row the client stops as failed', () => {
  const { p } = policy({ maxReconnects: 3 });
  retry(p.decide(drop()));
  retry(p.decide(drop()));
  retry(p.decide(drop()));
  const s = stop(p.decide(drop()));
  assert.equal(s.state, 'failed');
  assert.equal(s.reason, 'keeps_dropping');
  assert.equal(s.restartAt, T0, 'a person may press Start again at once');
});

test('429 from /session: stop quietly with the detail; Start again only after Retry-After', () => {
  const { p } = policy();
  const detail = 'The ip limit of 2 requests per 3600 seconds is reached. Wait 1200 seconds; retrying sooner will not help.';
  const s = stop(p.decide(session(429, 1200, detail)));
  assert.deepEqual(s, {
    action: 'stop',
    state: 'rate_limited',
    restartAt: T0 + 1_200_000,
    detail,
    reason: 'rate_limited',
  });
  // Without a readable Retry-After the client still waits (defaultRetryAfterS), never 0.
  const { p: p2 } = policy();
  assert.equal(stop(p2.decide(session(429))).restartAt, T0 + 60_000);
});

test('429 and 403 stop whatever came before, even mid back-off', () => {
  const { p } = policy();
  retry(p.decide(drop()));
  retry(p.decide(session(503, 5)));
  assert.equal(stop(p.decide(session(429, 10))).state, 'rate_limited');
  const { p: p2 } = policy();
  retry(p2.decide({ kind: 'session_lost' }));
  assert.equal(stop(p2.decide(session(403))).state, 'disabled');
});

test('403 from /session: stop with the operator\'s message; Start comes back after a minute', () => {
  const { p } = policy();
  const s = stop(p.decide(session(403, null, 'Down for maintenance until 14:00.')));
  assert.equal(s.state, 'disabled');
  assert.equal(s.detail, 'Down for maintenance until 14:00.');
  assert.equal(s.restartAt, T0 + RETRY_DEFAULTS.disabledRestartMs);
  assert.equal(RETRY_DEFAULTS.disabledRestartMs, 60_000);
});

test('503: wait Retry-After, never less, under a fresh key; bounded', () => {
  for (const r of [0, 0.5, 0.999_999]) {
    const { p, env } = policy();
    env.r = r;
    for (let i = 1; i < RETRY_DEFAULTS.maxSessionAttempts; i++) {
      const d = retry(p.decide(session(503, 7)));
      assert.equal(d.state, 'waiting');
      assert.equal(d.sameKey, false, 'a 503 frees the key; the next try is a new attempt');
      assert.ok(d.delayMs >= 7_000 && d.delayMs <= 8_750, `${d.delayMs}`);
    }
    const s = stop(p.decide(session(503, 7)));
    assert.equal(s.state, 'failed');
    assert.equal(s.reason, 'exhausted');
  }
});

test('503: a secret minted in between starts the count over', () => {
  const { p } = policy({ maxSessionAttempts: 2 });
  retry(p.decide(session(503, 1)));
  p.minted();
  retry(p.decide(session(503, 1)));
  stop(p.decide(session(503, 1)));
});

test('no answer from /session: the same key again, backing off, bounded', () => {
  const { p } = policy();
  const waits = [];
  for (let i = 1; i < RETRY_DEFAULTS.maxSessionAttempts; i++) {
    const d = retry(p.decide({ kind: 'session_lost' }));
    assert.equal(d.sameKey, true, 'only after no answer is the key reused');
    assert.equal(d.state, 'reconnecting');
    assert.equal(d.reason, 'network');
    waits.push(d.delayMs);
  }
  assert.deepEqual(waits, [1_000, 2_000, 4_000, 8_000]);
  assert.equal(stop(p.decide({ kind: 'session_lost' })).reason, 'exhausted');
});

test('other 5xx from /session: back off under a fresh key, bounded', () => {
  const { p } = policy();
  for (const status of [500, 501, 599]) {
    const d = retry(p.decide(session(status)));
    assert.equal(d.next, 'session');
    assert.equal(d.sameKey, false, `${status}`);
    assert.equal(d.reason, 'server_error');
  }
  retry(p.decide(session(500)));
  assert.equal(stop(p.decide(session(500))).reason, 'exhausted');
});

test('502 and 504 from /session (a gateway that lost the answer): the same key, backing off', () => {
  const { p } = policy();
  const waits = [];
  for (const status of [502, 504, 502, 504]) {
    const d = retry(p.decide(session(status)));
    assert.equal(d.next, 'session');
    assert.equal(d.sameKey, true, `${status}: the function may have minted under this key`);
    assert.equal(d.state, 'reconnecting');
    waits.push(d.delayMs);
  }
  assert.deepEqual(waits, [1_000, 2_000, 4_000, 8_000]);
  assert.equal(stop(p.decide(session(504))).reason, 'exhausted');
});

test('409 (our earlier request still running): the same key after Retry-After', () => {
  const { p } = policy();
  const d = retry(p.decide(session(409, 2)));
  assert.equal(d.sameKey, true);
  assert.ok(d.delayMs >= 2_000);
});

test('400, 401 and other 4xx from /session: stop, a bug and not a state to wait out', () => {
  for (const status of [400, 401, 404, 405, 413, 422]) {
    const { p } = policy();
    const s = stop(p.decide(session(status, null, 'why')));
    assert.equal(s.state, 'failed', `${status}`);
    assert.equal(s.reason, 'rejected');
    assert.equal(s.detail, 'why');
    assert.equal(s.restartAt, T0);
  }
});

test('a 200 without a secret, or no microphone: stop as failed', () => {
  assert.equal(stop(policy().p.decide({ kind: 'session_unusable' })).state, 'failed');
  assert.equal(stop(policy().p.decide({ kind: 'microphone' })).reason, 'microphone');
});

test('401 from /calls re-mints once, at once, under a new key; a second 401 stops', () => {
  const { p } = policy();
  assert.deepEqual(p.decide({ kind: 'calls', status: 401, retryAfter: null }), {
    action: 'retry',
    state: 'connecting',
    delayMs: 0,
    next: 'session',
    sameKey: false,
    reason: 'remint',
  });
  const s = stop(p.decide({ kind: 'calls', status: 401, retryAfter: null }));
  assert.equal(s.state, 'failed');
  assert.equal(s.reason, 'provider_rejected');
});

test('401 from /calls: a call that connected in between allows one more re-mint', () => {
  const { p } = policy();
  retry(p.decide({ kind: 'calls', status: 401, retryAfter: null }));
  p.connected();
  retry(p.decide(drop(120_000)));
  assert.equal(retry(p.decide({ kind: 'calls', status: 401, retryAfter: null })).reason, 'remint');
});

test('429 from /calls (the provider\'s limit): wait its Retry-After, then a call with the same secret', () => {
  const { p } = policy();
  const d = retry(p.decide({ kind: 'calls', status: 429, retryAfter: 30 }));
  assert.deepEqual(d, {
    action: 'retry',
    state: 'waiting',
    delayMs: 30_000,
    next: 'call',
    sameKey: false,
    reason: 'provider_busy',
  });
  // No readable Retry-After (a cross-origin header the provider does not expose): 60 s.
  assert.equal(retry(p.decide({ kind: 'calls', status: 429, retryAfter: null })).delayMs, 60_000);
  // Never below the back-off of the streak it is part of.
  const { p: p2 } = policy();
  for (let i = 0; i < 5; i++) retry(p2.decide(drop()));
  assert.equal(retry(p2.decide({ kind: 'calls', status: 429, retryAfter: 1 })).delayMs, 48_000);
});

test('/calls failures: a Retry-After is a floor under the back-off, jitter on both', () => {
  for (const r of [0, 0.999_999]) {
    const { p, env } = policy();
    env.r = r;
    const d = retry(p.decide({ kind: 'calls', status: 503, retryAfter: 20 }));
    assert.equal(d.state, 'waiting', 'told when to come back');
    assert.equal(d.next, 'call');
    assert.ok(d.delayMs >= 20_000 && d.delayMs <= 25_000, `r=${r}: ${d.delayMs}`);
    const e = retry(p.decide({ kind: 'calls', status: 500, retryAfter: null }));
    assert.equal(e.state, 'reconnecting');
    assert.ok(e.delayMs >= 6_000 && e.delayMs <= 7_500, `r=${r}: ${e.delayMs}`);
  }
});

test('/calls failing maxReconnects times in a row: failed, the provider unavailable', () => {
  const { p } = policy({ maxReconnects: 2 });
  retry(p.decide({ kind: 'calls', status: 503, retryAfter: 5 }));
  retry(p.decide({ kind: 'calls_lost' }));
  assert.equal(stop(p.decide({ kind: 'calls', status: 502, retryAfter: null })).reason, 'provider_unavailable');
});

test('a secret is used for another call only while it outlives the margin', () => {
  const { p, env } = policy({ secretMarginMs: 10_000 });
  assert.equal(p.secretUsable(T0 + 600_000), true);
  assert.equal(p.secretUsable(T0 + 10_000), true);
  assert.equal(p.secretUsable(T0 + 9_999), false);
  assert.equal(p.secretUsable(0), false, 'a secret without a stated life');
  env.now = T0 + 595_000;
  assert.equal(p.secretUsable(T0 + 600_000), false);
  assert.equal(RETRY_DEFAULTS.secretMarginMs, 10_000);
});

test('other /calls failures back off like a drop, on the same count', () => {
  const { p } = policy();
  assert.equal(retry(p.decide({ kind: 'calls', status: 500, retryAfter: null })).delayMs, 3_000);
  assert.equal(retry(p.decide({ kind: 'calls_lost' })).delayMs, 6_000);
  assert.equal(retry(p.decide(drop())).delayMs, 12_000);
  const d = retry(p.decide({ kind: 'calls', status: 400, retryAfter: null }));
  assert.equal(d.next, 'call', 'the same secret, while it lives');
  assert.equal(d.reason, 'provider_error');
});
