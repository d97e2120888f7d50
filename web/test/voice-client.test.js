// @ts-check
// The voice client's orchestration against a fake API, a fake provider, a fake peer connection
// and a fake clock. Hours pass in microseconds, and every request is counted: a refusal must
// never turn into a request the person did not ask for.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createVoiceClient, describeState } from '../voice-client.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const HOUR = 3_600_000;
const API = 'https://api.example/api';
const REALTIME = 'https://realtime.example';

/**
 * Lets every promise chain that is ready run (fetch bodies, awaits in the client). Turns of the
 * real event loop, not time: nothing here waits for a duration.
 */
async function settle() {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

/** A clock whose time moves only when the test says so. */
class FakeClock {
  t = T0;
  #seq = 0;
  /** @type {Map<number, { at: number, fn: () => void }>} */
  timers = new Map();

  now() {
    return this.t;
  }

  /** @param {() => void} fn @param {number} ms */
  setTimeout(fn, ms) {
    const id = ++this.#seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  }

  /** @param {unknown} id */
  clearTimeout(id) {
    this.timers.delete(/** @type {number} */ (id));
  }

  /** @param {number} id */
  #at(id) {
    return /** @type {{ at: number }} */ (this.timers.get(id)).at;
  }

  /** Runs, in order, every timer due within `ms`, letting the client react after each. */
  async advance(/** @type {number} */ ms) {
    const end = this.t + ms;
    await settle();
    for (;;) {
      /** @type {number | null} */
      let id = null;
      for (const [candidate, timer] of this.timers) {
        // Earliest first; among equals, the one set first (Map order), as real timers do.
        if (timer.at <= end && (id === null || timer.at < this.#at(id))) id = candidate;
      }
      if (id === null) break;
      const timer = /** @type {{ at: number, fn: () => void }} */ (this.timers.get(id));
      this.timers.delete(id);
      this.t = timer.at;
      timer.fn();
      await settle();
    }
    this.t = end;
    await settle();
  }
}

class FakeTrack {
  readyState = 'live';
  stop() {
    this.readyState = 'ended';
  }
}

class FakeDataChannel extends EventTarget {
  readyState = 'connecting';
  /** @param {string} label */
  constructor(label) {
    super();
    this.label = label;
  }
  /** As in a browser, our own close() fires `close` later. */
  close() {
    if (this.readyState === 'closed') return;
    this.readyState = 'closed';
    queueMicrotask(() => this.dispatchEvent(new Event('close')));
  }
  /** The far end closed the channel. */
  remoteClose() {
    this.readyState = 'closed';
    this.dispatchEvent(new Event('close'));
  }
  /** @param {unknown} data */
  receive(data) {
    const event = new Event('message');
    Object.assign(event, { data });
    this.dispatchEvent(event);
  }
}

class FakePeerConnection extends EventTarget {
  connectionState = 'new';
  iceGatheringState = 'new';
  /** @type {{ type: string, sdp: string } | null} */
  localDescription = null;
  /** @type {RTCSessionDescriptionInit | null} */
  remoteDescription = null;
  /** @type {unknown[]} */
  tracks = [];
  /** @type {FakeDataChannel[]} */
  channels = [];
  closed = false;

  /** @param {World} world */
  constructor(world) {
    super();
    this.world = world;
  }
  /** @param {unknown} track */
  addTrack(track) {
    this.tracks.push(track);
  }
  /** @param {string} label */
  createDataChannel(label) {
    const dc = new FakeDataChannel(label);
    this.channels.push(dc);
    return dc;
  }
  async createOffer() {
    return /** @type {RTCSessionDescriptionInit} */ ({ type: 'offer', sdp: 'v=0 offer' });
  }
  /** @param {RTCSessionDescriptionInit} description */
  async setLocalDescription(description) {
    this.iceGatheringState = 'gathering';
    this.localDescription = { type: String(description.type), sdp: `${description.sdp} +candidates` };
    if (this.world.gathers) {
      queueMicrotask(() => {
        this.iceGatheringState = 'complete';
        this.dispatchEvent(new Event('icegatheringstatechange'));
      });
    }
  }
  /** @param {RTCSessionDescriptionInit} description */
  async setRemoteDescription(description) {
    if (description.sdp === 'not sdp') throw new Error('bad answer');
    this.remoteDescription = description;
    if (this.world.connects) queueMicrotask(() => this.setState('connected'));
  }
  /** As in a browser, close() fires no connectionstatechange. */
  close() {
    this.closed = true;
    this.connectionState = 'closed';
    for (const dc of this.channels) dc.close();
  }
  /** @param {string} state */
  setState(state) {
    this.connectionState = state;
    this.dispatchEvent(new Event('connectionstatechange'));
  }
  /** @param {unknown} stream */
  deliverTrack(stream) {
    const event = new Event('track');
    Object.assign(event, { streams: [stream] });
    this.dispatchEvent(event);
  }
}

/**
 * @typedef {object} Sent
 * @property {string} url
 * @property {Record<string, string>} headers
 * @property {string} body
 * @property {number} at
 * @property {AbortSignal | null | undefined} signal
 * @typedef {(request: Sent) => Response | Promise<Response>} Responder
 */

/**
 * A secret's JSON as `POST /session` answers it.
 * @param {string} secret
 * @param {number} [expiresAt] unix seconds; by default 10 minutes after T0
 */
function minted(secret, expiresAt = T0 / 1000 + 600) {
  return Response.json(
    { client_secret: secret, expires_at: expiresAt, model: 'gpt-realtime', voice: 'marin' },
    { status: 200, headers: { 'Cache-Control': 'no-store' } },
  );
}

/**
 * A problem+json answer.
 * @param {number} status
 * @param {string} detail
 * @param {number} [retryAfter]
 */
function problem(status, detail, retryAfter) {
  /** @type {Record<string, string>} */
  const headers = { 'Content-Type': 'application/problem+json' };
  if (retryAfter !== undefined) headers['Retry-After'] = String(retryAfter);
  const body = { type: 'urn:tollgate:problem:x', title: 'x', status, detail, code: 'x', request_id: 'r' };
  if (retryAfter !== undefined) Object.assign(body, { retry_after: retryAfter });
  return new Response(JSON.stringify(body), { status, headers });
}

/** An answer that never comes: settles only when the request is aborted. */
/** @param {Sent} request */
function never(request) {
  return new Promise((_resolve, reject) => {
    request.signal?.addEventListener('abort', () => reject(new Error('aborted')));
  });
}

class World {
  clock = new FakeClock();
  /** @type {Sent[]} */
  sessions = [];
  /** @type {Sent[]} */
  calls = [];
  /** @type {FakePeerConnection[]} */
  pcs = [];
  /** @type {FakeTrack[]} */
  micTracks = [];
  micRequests = 0;
  micAllowed = true;
  gathers = true;
  connects = true;
  /** @type {unknown[]} */
  events = [];
  audio = audioElement();
  #secrets = 0;
  /** How long the secrets `session` mints live (the function's default, 600 s). */
  lifetimeS = 600;
  /** A new secret, living `lifetimeS` from now, as the function mints it. */
  mint() {
    return minted(`ek_${++this.#secrets}`, Math.floor(this.clock.now() / 1000) + this.lifetimeS);
  }
  /** @type {Responder} */
  session = () => this.mint();
  /** @type {Responder} */
  provider = () => new Response('v=0 answer', { status: 201, headers: { 'Content-Type': 'application/sdp' } });
  /** @type {string[]} */
  order = [];

  get pc() {
    return this.pcs[this.pcs.length - 1];
  }

  /**
   * @param {Partial<import('../voice-client.js').VoiceClientOptions>} [options]
   * @param {number} [random]
   */
  client(options = {}, random = 0) {
    let uuid = 0;
    const client = createVoiceClient({
      api: `${API}/`,
      realtime: REALTIME,
      audio: this.audio,
      clock: this.clock,
      random: () => random,
      randomUUID: () => `00000000-0000-4000-8000-${String(++uuid).padStart(12, '0')}`,
      fetch: async (url, init) => {
        const headers = /** @type {Record<string, string>} */ (init.headers);
        const sent = {
          url,
          headers,
          body: String(init.body),
          at: this.clock.now(),
          signal: init.signal,
        };
        if (url === `${API}/session`) {
          this.order.push('session');
          this.sessions.push(sent);
          return this.session(sent);
        }
        if (url === `${REALTIME}/v1/realtime/calls`) {
          this.order.push('calls');
          this.calls.push(sent);
          return this.provider(sent);
        }
        throw new Error(`unexpected request to ${url}`);
      },
      createPeerConnection: () => {
        const pc = new FakePeerConnection(this);
        this.pcs.push(pc);
        return pc;
      },
      getUserMedia: async () => {
        this.order.push('microphone');
        this.micRequests++;
        if (!this.micAllowed) throw new Error('NotAllowedError');
        const track = new FakeTrack();
        this.micTracks.push(track);
        return { getTracks: () => [track] };
      },
      onEvent: (event) => this.events.push(event),
      ...options,
    });
    return client;
  }
}
/** A stand-in for `<audio autoplay>`: where the remote stream goes, how often it was played. */
function audioElement() {
  const element = {
    srcObject: /** @type {unknown} */ (null),
    plays: 0,
    play: async () => {
      element.plays++;
    },
  };
  return element;
}

/**
 * @param {import('../voice-client.js').VoiceClient} client
 * @returns {string[]}
 */
function names(client) {
  return client.history.map((s) => s.name);
}

/** @param {Sent} sent */
const key = (sent) => sent.headers['Idempotency-Key'];

test('start: microphone, POST /session, the offer to /calls with the secret, connected', async () => {
  const w = new World();
  const client = w.client({ voice: 'marin' });
  assert.equal(client.state.name, 'idle');
  assert.equal(client.state.canStart, true);
  assert.equal(client.start(), true);
  await w.clock.advance(0);

  assert.deepEqual(w.order, ['microphone', 'session', 'calls']);
  const [s] = w.sessions;
  assert.equal(s.headers['Content-Type'], 'application/json');
  assert.match(key(s), /^[0-9a-f-]{36}$/);
  assert.equal(s.body, '{"voice":"marin"}');

  const [c] = w.calls;
  assert.equal(c.headers.Authorization, 'Bearer ek_1');
  assert.equal(c.headers['Content-Type'], 'application/sdp');
  assert.equal(c.body, 'v=0 offer +candidates', 'the offer after ICE gathering');

  const pc = w.pc;
  assert.equal(client.peerConnection, pc);
  assert.deepEqual(pc.tracks, [w.micTracks[0]], 'the microphone track is sent');
  assert.deepEqual(pc.channels.map((dc) => dc.label), ['oai-events']);
  assert.equal(client.dataChannel, pc.channels[0]);
  assert.deepEqual(pc.remoteDescription, { type: 'answer', sdp: 'v=0 answer' });
  assert.equal(client.state.name, 'connected');
  assert.deepEqual(names(client), ['connecting', 'connected']);
  assert.equal(client.state.canStart, false);
  assert.equal(client.start(), false, 'no second run while one is active');

  const remote = { id: 'remote stream' };
  pc.deliverTrack(remote);
  assert.equal(w.audio.srcObject, remote, 'the remote audio plays through the element');
  assert.equal(w.audio.plays, 1);
  pc.channels[0].receive('{"type":"session.created"}');
  pc.channels[0].receive('not json');
  assert.deepEqual(w.events, [{ type: 'session.created' }]);
});

test('the body is {} without a voice; onState and statechange see every state', async () => {
  const w = new World();
  /** @type {string[]} */
  const seen = [];
  const client = w.client({ onState: (state) => seen.push(state.name) });
  /** @type {string[]} */
  const events = [];
  client.addEventListener('statechange', (e) => events.push(/** @type {CustomEvent} */ (e).detail.name));
  client.start();
  await w.clock.advance(0);
  assert.equal(w.sessions[0].body, '{}');
  assert.deepEqual(seen, ['connecting', 'connected']);
  assert.deepEqual(events, seen);
});

test('drop: "Disconnected, reconnecting in 3 s", then a new call with the secret held', async () => {
  for (const how of ['failed', 'closed', 'channel']) {
    const w = new World();
    const client = w.client();
    client.start();
    await w.clock.advance(0);
    const first = w.pc;
    if (how === 'channel') first.channels[0].remoteClose();
    else first.setState(how);
    await settle();

    assert.equal(client.state.name, 'reconnecting', how);
    assert.equal(client.state.seconds, 3);
    assert.equal(describeState(client.state), 'Disconnected, reconnecting in 3 s');
    assert.equal(first.closed, true, 'the dropped call is closed');
    assert.equal(client.peerConnection, null);
    await w.clock.advance(2_999);
    assert.equal(w.calls.length, 1, `${how}: nothing before 3 s`);
    await w.clock.advance(1);
    assert.equal(w.calls.length, 2, how);
    assert.equal(w.sessions.length, 1, `${how}: the secret still lives, so no second unit`);
    assert.equal(w.calls[1].headers.Authorization, 'Bearer ek_1');
    assert.notEqual(w.pc, first);
    assert.equal(client.state.name, 'connected');
    assert.equal(w.micRequests, 1, 'the microphone is kept across reconnects');
  }
});

test('repeated drops back off 3, 6, 12, 24, 48 s with jitter, capped at 60 s', async () => {
  for (const random of [0, 0.999_999]) {
    const w = new World();
    const client = w.client({}, random);
    client.start();
    await w.clock.advance(0);
    /** @type {number[]} */
    const dropped = [];
    for (let i = 0; i < 7; i++) {
      dropped.push(w.clock.now());
      w.pc.setState('failed');
      // Long enough for the longest wait, too short for the new call to count as stable.
      await w.clock.advance(60_000);
    }
    const gaps = w.calls.slice(1).map((c, i) => c.at - dropped[i]);
    const nominal = [3_000, 6_000, 12_000, 24_000, 48_000, 48_000, 48_000];
    gaps.forEach((gap, i) => {
      assert.ok(gap >= nominal[i], `random ${random}, gap ${i}: ${gap} < ${nominal[i]}`);
      assert.ok(gap <= nominal[i] * 1.25 && gap <= 60_000, `random ${random}, gap ${i}: ${gap}`);
    });
    if (random === 0) assert.deepEqual(gaps, nominal);
    else assert.equal(gaps[6], 60_000);
  }
});

test('a call that stayed up 60 s resets the back-off', async () => {
  const w = new World();
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  w.pc.setState('failed');
  await w.clock.advance(3_000);
  w.pc.setState('failed');
  assert.equal(client.state.seconds, 6);
  await w.clock.advance(6_000);
  await w.clock.advance(60_000);
  w.pc.setState('failed');
  assert.equal(client.state.seconds, 3);
});

test('a call that stays disconnected for disconnectGraceMs is a drop; one that recovers is not', async () => {
  const w = new World();
  const client = w.client({ disconnectGraceMs: 5_000 });
  client.start();
  await w.clock.advance(0);
  const first = w.pc;
  first.setState('disconnected');
  await w.clock.advance(4_000);
  first.setState('connected');
  await w.clock.advance(2_000);
  assert.equal(client.state.name, 'connected', 'recovered within the grace: still the same call');
  assert.equal(first.closed, false);

  first.setState('disconnected');
  await w.clock.advance(4_999);
  assert.equal(client.state.name, 'connected');
  await w.clock.advance(1);
  assert.equal(client.state.name, 'reconnecting');
  assert.equal(client.state.reason, 'disconnected');
  assert.equal(first.closed, true);
  await w.clock.advance(3_000);
  assert.equal(w.calls.length, 2, 'a new call after the drop');
  assert.equal(w.sessions.length, 1, 'with the same secret');
});

test('the provider\'s 60-minute cap ends the call and reconnects in 3 s', async () => {
  const w = new World();
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  const first = w.pc;
  await w.clock.advance(HOUR - 1);
  assert.equal(client.state.name, 'connected');
  await w.clock.advance(1);
  assert.equal(first.closed, true);
  assert.equal(client.state.name, 'reconnecting');
  assert.equal(client.state.reason, 'cap');
  assert.equal(client.state.seconds, 3);
  await w.clock.advance(3_000);
  assert.equal(w.sessions.length, 2);
  assert.equal(client.state.name, 'connected');
});

test('a call that never connects counts as a drop after connectTimeoutMs', async () => {
  const w = new World();
  w.connects = false;
  const client = w.client({ connectTimeoutMs: 20_000 });
  client.start();
  await w.clock.advance(19_999);
  assert.equal(client.state.name, 'connecting');
  await w.clock.advance(1);
  assert.equal(client.state.name, 'reconnecting');
  assert.equal(client.state.reason, 'timeout');
});

test('429 from /session: shows the wait, sends nothing more for a day, Start only after Retry-After', async () => {
  const w = new World();
  const detail = 'The ip limit of 2 requests per 3600 seconds is reached. Wait 1200 seconds; retrying sooner will not help.';
  w.session = () => problem(429, detail, 1200);
  const client = w.client();
  client.start();
  await w.clock.advance(0);

  assert.equal(client.state.name, 'rate_limited');
  assert.equal(client.state.detail, detail);
  assert.equal(client.state.seconds, 1200);
  assert.equal(client.state.canStart, false);
  assert.equal(client.state.until, T0 + 1_200_000);
  assert.equal(w.micTracks[0].readyState, 'ended', 'the microphone is released');

  await w.clock.advance(1_199_999);
  assert.equal(w.sessions.length, 1);
  assert.equal(client.start(), false, 'no manual restart before Retry-After');
  assert.equal(w.sessions.length, 1);
  await w.clock.advance(1);
  assert.equal(client.state.name, 'rate_limited', 'the refusal stays on show');
  assert.equal(client.state.canStart, true, 'Start is offered once the wait is over');
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 1, 'still nothing on its own');
  assert.equal(w.calls.length, 0);

  w.session = () => minted('ek_later');
  assert.equal(client.start(), true);
  await w.clock.advance(0);
  assert.equal(w.sessions.length, 2);
  assert.equal(client.state.name, 'connected');
});

test('lesson 000: drops then 429 on the reconnect: stop, however often the calls would drop', async () => {
  const w = new World();
  // Secrets shorter-lived than the reconnect wait: each reconnect needs a new one.
  w.lifetimeS = 2;
  const client = w.client();
  let served = 0;
  w.session = () => (++served <= 2 ? w.mint() : problem(429, 'Wait 3600 seconds.', 3600));
  client.start();
  await w.clock.advance(0);
  w.pc.setState('failed');
  await w.clock.advance(3_000);
  w.pc.setState('failed');
  await w.clock.advance(6_000);
  assert.equal(client.state.name, 'rate_limited');
  await w.clock.advance(48 * HOUR);
  assert.equal(w.sessions.length, 3, 'two secrets and one refusal, nothing after');
  // The second rate_limited is the same refusal, once Start is offered again.
  assert.deepEqual(names(client).slice(-3), ['connecting', 'rate_limited', 'rate_limited']);
  assert.equal(client.state.canStart, true);
});

test('403 (kill switch): the operator\'s message, nothing more, Start after a minute', async () => {
  const w = new World();
  w.session = () => problem(403, 'Voice is off for maintenance until 14:00.');
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'disabled');
  assert.equal(client.state.detail, 'Voice is off for maintenance until 14:00.');
  assert.equal(client.state.canStart, false);
  assert.equal(client.start(), false);
  await w.clock.advance(59_999);
  assert.equal(client.start(), false);
  await w.clock.advance(1);
  assert.equal(client.state.canStart, true);
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 1, 'one request, however long the clock runs');
});

test('503: the next try no sooner than Retry-After, under a fresh key; five tries at most', async () => {
  const w = new World();
  w.session = () => problem(503, 'The voice service is not available right now.', 5);
  const client = w.client({}, 0.999_999);
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'waiting');
  assert.equal(client.state.seconds, 6, '5 s plus jitter');
  await w.clock.advance(4_999);
  assert.equal(w.sessions.length, 1);
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 5);
  w.sessions.slice(1).forEach((s, i) => {
    assert.ok(s.at - w.sessions[i].at >= 5_000, `try ${i + 2} came too soon`);
    assert.notEqual(key(s), key(w.sessions[i]));
  });
  assert.equal(client.state.name, 'failed');
  assert.equal(client.state.reason, 'exhausted');
  assert.equal(client.state.canStart, true);
});

test('503 then recovery: connects once the service answers', async () => {
  const w = new World();
  let n = 0;
  w.session = () => (++n < 3 ? problem(503, 'busy', 2) : minted('ek_ok'));
  const client = w.client();
  client.start();
  await w.clock.advance(10_000);
  assert.equal(w.sessions.length, 3);
  assert.equal(client.state.name, 'connected');
  assert.deepEqual(names(client), ['connecting', 'waiting', 'connecting', 'waiting', 'connecting', 'connected']);
});

test('no answer from /session: the retry carries the same key; the next session a new one', async () => {
  for (const how of ['throws', 'body cut off', 'timeout']) {
    const w = new World();
    // Secrets that do not outlive the drop below, so the reconnect asks for a new one.
    w.lifetimeS = 5;
    let n = 0;
    w.session = (request) => {
      if (++n > 1) return w.mint();
      if (how === 'throws') throw new TypeError('Failed to fetch');
      if (how === 'timeout') return never(request);
      const body = new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"client_se'));
          controller.error(new Error('connection reset'));
        },
      });
      return new Response(body, { status: 200 });
    };
    const client = w.client({ requestTimeoutMs: 15_000 });
    client.start();
    await w.clock.advance(how === 'timeout' ? 15_000 : 0);
    assert.equal(client.state.name, 'reconnecting', how);
    assert.equal(client.state.reason, 'network');
    await w.clock.advance(1_000);
    assert.equal(w.sessions.length, 2, how);
    assert.equal(key(w.sessions[1]), key(w.sessions[0]), `${how}: the same key`);
    assert.equal(w.sessions[1].body, w.sessions[0].body);
    assert.equal(client.state.name, 'connected', how);
    w.pc.setState('failed');
    await w.clock.advance(3_000);
    assert.equal(w.sessions.length, 3, how);
    assert.notEqual(key(w.sessions[2]), key(w.sessions[1]), `${how}: a new secret, a new key`);
  }
});

test('no answer five times in a row: stop as failed', async () => {
  const w = new World();
  w.session = () => {
    throw new TypeError('Failed to fetch');
  };
  const client = w.client();
  client.start();
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 5);
  assert.equal(new Set(w.sessions.map(key)).size, 1, 'one attempt, one key');
  assert.equal(client.state.name, 'failed');
});

test('other 5xx from /session: back off under a fresh key', async () => {
  const w = new World();
  let n = 0;
  w.session = () => (++n === 1 ? problem(500, 'Something went wrong on our side.') : minted('ek'));
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'reconnecting');
  await w.clock.advance(1_000);
  assert.equal(w.sessions.length, 2);
  assert.notEqual(key(w.sessions[1]), key(w.sessions[0]));
  assert.equal(client.state.name, 'connected');
});

test('409 after a lost answer: the same key after Retry-After gets the first outcome', async () => {
  const w = new World();
  let n = 0;
  w.session = () => {
    n++;
    if (n === 1) throw new TypeError('Failed to fetch');
    if (n === 2) return problem(409, 'A request with this key is still in progress.', 2);
    return minted('ek_replayed');
  };
  const client = w.client();
  client.start();
  await w.clock.advance(1_000);
  assert.equal(client.state.name, 'waiting');
  await w.clock.advance(2_000);
  assert.equal(w.sessions.length, 3);
  assert.equal(new Set(w.sessions.map(key)).size, 1);
  assert.equal(client.state.name, 'connected');
});

test('400 and 401 from /session: stop, one request', async () => {
  for (const status of [400, 401]) {
    const w = new World();
    w.session = () => problem(status, 'Idempotency-Key must be at least 16 characters.');
    const client = w.client();
    client.start();
    await w.clock.advance(24 * HOUR);
    assert.equal(w.sessions.length, 1, `${status}`);
    assert.equal(client.state.name, 'failed');
    assert.equal(client.state.detail, 'Idempotency-Key must be at least 16 characters.');
    assert.equal(client.state.canStart, true);
  }
});

test('a 200 that holds no secret: stop', async () => {
  const w = new World();
  w.session = () => new Response('<html>hello</html>', { status: 200 });
  const client = w.client();
  client.start();
  await w.clock.advance(HOUR);
  assert.equal(w.sessions.length, 1);
  assert.equal(w.calls.length, 0);
  assert.equal(client.state.name, 'failed');
});

test('401 from /calls re-mints once under a new key; a second 401 stops', async () => {
  const w = new World();
  w.provider = () => new Response('{"error":{"message":"expired"}}', { status: 401 });
  const client = w.client();
  client.start();
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 2);
  assert.equal(w.calls.length, 2);
  assert.notEqual(key(w.sessions[1]), key(w.sessions[0]));
  assert.equal(w.calls[1].at, w.calls[0].at, 're-minted at once');
  assert.equal(w.calls[1].headers.Authorization, 'Bearer ek_2');
  assert.equal(client.state.name, 'failed');
  assert.equal(client.state.reason, 'provider_rejected');
  assert.ok(w.pcs.every((pc) => pc.closed));
});

test('401 from /calls, then the new secret works: connected', async () => {
  const w = new World();
  let n = 0;
  w.provider = () =>
    ++n === 1 ? new Response('', { status: 401 }) : new Response('v=0 answer', { status: 201 });
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 2);
});

test('other /calls failures back off like a drop, with the same secret', async () => {
  const w = new World();
  let n = 0;
  w.provider = (request) => {
    n++;
    if (n === 1) return new Response('', { status: 500 });
    if (n === 2) throw new TypeError('Failed to fetch');
    if (n === 3) return never(request);
    return new Response('v=0 answer', { status: 201 });
  };
  const client = w.client({ requestTimeoutMs: 15_000 });
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'reconnecting');
  assert.equal(client.state.seconds, 3);
  await w.clock.advance(3_000);
  assert.equal(client.state.seconds, 6);
  await w.clock.advance(6_000 + 15_000);
  assert.equal(client.state.seconds, 12);
  await w.clock.advance(12_000);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 1, 'one secret for all four calls');
  assert.ok(w.calls.every((c) => c.headers.Authorization === 'Bearer ek_1'));
});

test('an answer that is not SDP counts as a failed call', async () => {
  const w = new World();
  w.provider = () => new Response('not sdp', { status: 201 });
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'reconnecting');
  assert.equal(client.state.reason, 'setup');
});

test('ICE gathering that never completes: the offer goes out after iceGatheringTimeoutMs', async () => {
  const w = new World();
  w.gathers = false;
  const client = w.client({ iceGatheringTimeoutMs: 3_000 });
  client.start();
  await w.clock.advance(2_999);
  assert.equal(w.calls.length, 0);
  await w.clock.advance(1);
  assert.equal(w.calls.length, 1);
  assert.equal(client.state.name, 'connected');
});

test('microphone refused: stop before any request', async () => {
  const w = new World();
  w.micAllowed = false;
  const client = w.client();
  client.start();
  await w.clock.advance(HOUR);
  assert.equal(w.sessions.length, 0);
  assert.equal(client.state.name, 'failed');
  assert.equal(client.state.reason, 'microphone');
  assert.match(describeState(client.state), /microphone/);
});

test('stop() while connected: everything closed, nothing sent afterwards', async () => {
  const w = new World();
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  w.pc.deliverTrack({ id: 'remote' });
  const pc = w.pc;
  client.stop();
  await settle();
  assert.equal(client.state.name, 'stopped');
  assert.equal(pc.closed, true);
  assert.equal(pc.channels[0].readyState, 'closed');
  assert.equal(w.micTracks[0].readyState, 'ended');
  assert.equal(w.audio.srcObject, null);
  assert.equal(client.peerConnection, null);
  assert.equal(w.clock.timers.size, 0, 'no timer left (the 60-minute cap is cancelled)');
  await w.clock.advance(24 * HOUR);
  assert.equal(w.sessions.length, 1);
  assert.deepEqual(names(client), ['connecting', 'connected', 'stopped'], 'our own close is no drop');
  assert.equal(client.start(), true, 'Start again at once');
});

test('stop() during a reconnect wait cancels it', async () => {
  const w = new World();
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  w.pc.setState('failed');
  client.stop();
  await w.clock.advance(HOUR);
  assert.equal(w.sessions.length, 1);
  assert.equal(client.state.name, 'stopped');
});

test('stop() during /session aborts it; its late answer is ignored', async () => {
  const w = new World();
  /** @type {(r: Response) => void} */
  let answer = () => {};
  w.session = (request) =>
    new Promise((resolve, reject) => {
      answer = resolve;
      request.signal?.addEventListener('abort', () => reject(new Error('aborted')));
    });
  const client = w.client();
  client.start();
  await settle();
  assert.equal(w.sessions.length, 1);
  client.stop();
  assert.equal(w.sessions[0].signal?.aborted, true);
  answer(minted('ek_late'));
  await w.clock.advance(HOUR);
  assert.equal(w.calls.length, 0);
  assert.equal(w.pcs.length, 0);
  assert.equal(client.state.name, 'stopped');
});

test('stop() after a refusal keeps the refusal and its wait', async () => {
  const w = new World();
  w.session = () => problem(429, 'Wait 60 seconds.', 60);
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  client.stop();
  assert.equal(client.state.name, 'rate_limited');
  assert.equal(client.start(), false);
});

test('describeState: short texts for people', () => {
  const base = { reason: null, seconds: null, until: null, detail: null, canStart: false, at: T0 };
  /** @param {Partial<import('../voice-client.js').VoiceState>} s */
  const say = (s) => describeState({ ...base, name: 'idle', ...s }, () => '12:20');
  assert.equal(say({ name: 'reconnecting', seconds: 3, reason: 'failed' }), 'Disconnected, reconnecting in 3 s');
  assert.equal(say({ name: 'reconnecting', seconds: 2, reason: 'network' }), 'Could not reach the service, trying again in 2 s');
  assert.equal(say({ name: 'waiting', seconds: 5 }), 'The service is busy, trying again in 5 s');
  assert.equal(say({ name: 'rate_limited', until: T0 + 1_200_000 }), 'Paused: too many sessions. You can start again at 12:20.');
  assert.equal(say({ name: 'rate_limited', canStart: true, until: T0 }), 'Paused: too many sessions. You can start again now.');
});

// --- Issue 18, item 6: a provider outage must not spend the quota -----------------------------

/**
 * The provider's answer while it is down.
 * @param {number} status
 * @param {number} [retryAfter]
 */
function providerDown(status, retryAfter) {
  /** @type {Record<string, string>} */
  const headers = { 'Content-Type': 'application/json' };
  if (retryAfter !== undefined) headers['Retry-After'] = String(retryAfter);
  return new Response('{"error":{"message":"upstream unavailable"}}', { status, headers });
}

const answered = () => new Response('v=0 answer', { status: 201, headers: { 'Content-Type': 'application/sdp' } });

test('ten minutes of /calls outage cost at most one session unit per secret lifetime', async () => {
  const OUTAGE = 10 * 60_000;
  const MARGIN = 10_000;
  for (const lifetimeS of [600, 120]) {
    const w = new World();
    w.lifetimeS = lifetimeS;
    w.provider = (request) => (request.at < T0 + OUTAGE ? providerDown(503, 5) : answered());
    // No give-up during the outage, so that all ten minutes are spent retrying.
    const client = w.client({ retry: { maxReconnects: 1_000, secretMarginMs: MARGIN } });
    client.start();
    await w.clock.advance(OUTAGE + 60_000);

    assert.equal(client.state.name, 'connected', `${lifetimeS} s: connected once the provider is back`);
    assert.ok(w.calls.length >= 10, `${lifetimeS} s: the outage was retried (${w.calls.length} calls)`);
    const useful = lifetimeS * 1000 - MARGIN;
    const allowed = 1 + Math.floor((w.clock.now() - T0) / useful);
    assert.ok(
      w.sessions.length <= allowed,
      `${lifetimeS} s secrets: ${w.sessions.length} sessions for ${w.calls.length} calls, at most ${allowed}`,
    );
    w.sessions.slice(1).forEach((s, i) => {
      assert.ok(s.at - w.sessions[i].at >= useful, `${lifetimeS} s: session ${i + 2} came before the last one ran out`);
      assert.notEqual(key(s), key(w.sessions[i]), 'a new secret under a new key');
    });
    // Every call carried the secret of the latest session before it.
    for (const c of w.calls) {
      const before = w.sessions.filter((s) => s.at <= c.at).length;
      assert.equal(c.headers.Authorization, `Bearer ek_${before}`);
    }
    // The provider's Retry-After is never undercut.
    w.calls.slice(1).forEach((c, i) => {
      assert.ok(c.at - w.calls[i].at >= 5_000, `call ${i + 2}: ${c.at - w.calls[i].at} ms after a Retry-After of 5 s`);
    });
  }
});

test('a /calls outage with the default policy: one session, then failed after the bounded retries', async () => {
  const w = new World();
  w.provider = () => providerDown(503);
  const client = w.client();
  client.start();
  await w.clock.advance(10 * 60_000);
  assert.equal(w.sessions.length, 1, 'one secret for the whole outage');
  assert.equal(w.calls.length, 9, 'the call and its 8 retries');
  assert.ok(w.calls.every((c) => c.headers.Authorization === 'Bearer ek_1'));
  assert.equal(client.state.name, 'failed');
  assert.equal(client.state.reason, 'provider_unavailable');
  assert.equal(describeState(client.state), 'The voice service is not available. Try again later.');
});

test('/calls 503 with Retry-After: waiting, the next call no sooner and with the same secret', async () => {
  const w = new World();
  let n = 0;
  w.provider = () => (++n <= 2 ? providerDown(503, 20) : answered());
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'waiting');
  assert.equal(client.state.reason, 'provider_error');
  assert.equal(client.state.seconds, 20, 'the provider\'s 20 s, not our 3 s');
  await w.clock.advance(19_999);
  assert.equal(w.calls.length, 1);
  await w.clock.advance(1);
  assert.equal(w.calls.length, 2);
  await w.clock.advance(20_000);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 1);
  assert.deepEqual(w.calls.map((c) => c.headers.Authorization), ['Bearer ek_1', 'Bearer ek_1', 'Bearer ek_1']);
});

test('429 from /calls: the provider\'s limit; wait its Retry-After, then the same secret again', async () => {
  const w = new World();
  let n = 0;
  w.provider = () => (++n === 1 ? providerDown(429, 30) : answered());
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.name, 'waiting');
  assert.equal(client.state.reason, 'provider_busy');
  assert.equal(client.state.seconds, 30);
  await w.clock.advance(29_999);
  assert.equal(w.calls.length, 1, 'nothing before Retry-After');
  await w.clock.advance(1);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 1, 'no new secret: the provider\'s 429 is not our quota');
  assert.equal(w.calls[1].headers.Authorization, 'Bearer ek_1');
});

test('429 from /calls without a readable Retry-After waits 60 s; bounded like every failed call', async () => {
  const w = new World();
  w.provider = () => providerDown(429);
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  assert.equal(client.state.seconds, 60);
  await w.clock.advance(24 * HOUR);
  assert.equal(w.calls.length, 9);
  w.calls.slice(1).forEach((c, i) => assert.ok(c.at - w.calls[i].at >= 60_000));
  assert.equal(client.state.name, 'failed');
  assert.ok(w.sessions.length <= 2, `${w.sessions.length} sessions in ${(w.clock.now() - T0) / 60_000} min`);
});

test('a secret that expired during the wait: a new session under a new key, then the call', async () => {
  const w = new World();
  w.lifetimeS = 15;
  let n = 0;
  w.provider = () => (++n === 1 ? providerDown(503, 10) : answered());
  const client = w.client();
  client.start();
  await w.clock.advance(12_500);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 2, '15 s secret, 12.5 s later: less than the 10 s margin left');
  assert.notEqual(key(w.sessions[1]), key(w.sessions[0]));
  assert.equal(w.calls[1].headers.Authorization, 'Bearer ek_2');
});

test('a 401 from /calls on a held secret: a new session at once', async () => {
  const w = new World();
  let n = 0;
  w.provider = () => {
    n++;
    if (n === 1) return providerDown(503);
    if (n === 2) return new Response('{"error":{"message":"expired"}}', { status: 401 });
    return answered();
  };
  const client = w.client();
  client.start();
  await w.clock.advance(3_000);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 2);
  assert.deepEqual(w.calls.map((c) => c.headers.Authorization), ['Bearer ek_1', 'Bearer ek_1', 'Bearer ek_2']);
  assert.equal(w.calls[2].at, w.calls[1].at);
});

test('502 and 504 from /session (a gateway lost the answer): the retry carries the same key', async () => {
  for (const status of [502, 504]) {
    const w = new World();
    let n = 0;
    w.session = () => (++n === 1 ? new Response('<html>Bad gateway</html>', { status }) : w.mint());
    const client = w.client();
    client.start();
    await w.clock.advance(0);
    assert.equal(client.state.name, 'reconnecting', `${status}`);
    await w.clock.advance(1_000);
    assert.equal(w.sessions.length, 2, `${status}`);
    assert.equal(key(w.sessions[1]), key(w.sessions[0]), `${status}: the same key, so the function replays its secret`);
    assert.equal(client.state.name, 'connected');
  }
});

test('a dropped call reconnects with the secret it holds; a secret past its life is replaced', async () => {
  const w = new World();
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  w.pc.setState('failed');
  await w.clock.advance(3_000);
  assert.equal(client.state.name, 'connected');
  assert.equal(w.sessions.length, 1, 'no second unit for a reconnect');
  assert.equal(w.calls[1].headers.Authorization, 'Bearer ek_1');
  await w.clock.advance(10 * 60_000);
  w.pc.setState('failed');
  await w.clock.advance(3_000);
  assert.equal(w.sessions.length, 2, 'the 10-minute secret ran out');
  assert.notEqual(key(w.sessions[1]), key(w.sessions[0]));
  assert.equal(w.calls[2].headers.Authorization, 'Bearer ek_2');
});

test('a /session answer without expires_at: its secret serves one call only', async () => {
  const w = new World();
  let n = 0;
  w.session = () => Response.json({ client_secret: `ek_${++n}` });
  const client = w.client();
  client.start();
  await w.clock.advance(0);
  w.pc.setState('failed');
  await w.clock.advance(3_000);
  assert.equal(w.sessions.length, 2);
  assert.equal(client.state.name, 'connected');
});
