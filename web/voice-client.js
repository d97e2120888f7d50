// @ts-check
/**
 * A voice client for Tollgate's `POST /session` and OpenAI Realtime over WebRTC.
 *
 * One session attempt: the microphone, `POST {api}/session` for a client secret, a peer
 * connection with the microphone track and the `oai-events` data channel, the SDP offer posted
 * to `{realtime}/v1/realtime/calls` with the secret, the answer applied, the remote audio
 * played. The secret is kept for the run's next calls (a reconnect, a retried set-up) until it
 * expires or the provider refuses it: a secret costs a unit of quota, a call does not. Whether
 * to try again after anything goes wrong, and with which secret or key, is decided by retry.js
 * alone; this module carries the decisions out, with timers from the injected clock, and makes
 * sure that after a stop nothing is sent on its own.
 *
 * Plain ES module, no dependencies: a page imports it as it is.
 */

import { RetryPolicy, retryAfterSeconds } from './retry.js';

/**
 * @typedef {import('./retry.js').Clock} Clock
 * @typedef {import('./retry.js').Decision} Decision
 * @typedef {import('./retry.js').DropReason} DropReason
 * @typedef {import('./retry.js').Outcome} Outcome
 * @typedef {import('./retry.js').RetryOptions} RetryOptions
 */

/**
 * - `idle`: not started yet.
 * - `connecting`: asking for a secret or setting up the call.
 * - `connected`: the call is up.
 * - `reconnecting`: the call dropped (or the network failed); the next try is in `seconds`.
 * - `waiting`: the service said 503 (or 409), or the provider answered `/calls` with a 429 or
 *   a `Retry-After`; the next try is in `seconds`, never sooner than its `Retry-After`.
 * - `rate_limited`: 429 from `/session`. Stopped; Start comes back at `until`.
 * - `disabled`: 403 from `/session` (the kill switch). Stopped; Start comes back at `until`.
 * - `failed`: a request that waiting will not fix (400, 401, a second provider 401), the
 *   microphone refused, or the bounded retries used up. Stopped.
 * - `stopped`: the person pressed Stop.
 * @typedef {'idle' | 'connecting' | 'connected' | 'reconnecting' | 'waiting' | 'rate_limited'
 *   | 'disabled' | 'failed' | 'stopped'} StateName
 */

/**
 * A snapshot of the client, given to `onState` and to `statechange` listeners.
 * @typedef {object} VoiceState
 * @property {StateName} name
 * @property {string | null} reason why, in a word (retry.js's `RetryReason`/`StopReason`, or
 *   the drop's cause); null when there is nothing to explain
 * @property {number | null} seconds `reconnecting`/`waiting`: whole seconds until the next
 *   try; `rate_limited`/`disabled`: until Start is offered again (0 once it is)
 * @property {number | null} until ms since the epoch that wait ends
 * @property {string | null} detail the server's `detail` when it refused (for 403 the
 *   operator's message), else null
 * @property {boolean} canStart whether `start()` would start now
 * @property {number} at ms since the epoch this state began
 */

/**
 * @typedef {{ stop(): void, readonly readyState: string }} TrackLike
 * @typedef {{ getTracks(): TrackLike[] }} StreamLike
 * @typedef {{
 *   readonly readyState: string,
 *   close(): void,
 *   addEventListener(type: string, listener: (event: any) => void): void,
 * }} DataChannelLike
 * @typedef {{
 *   readonly connectionState: string,
 *   readonly iceGatheringState: string,
 *   readonly localDescription: { readonly sdp: string } | null,
 *   addTrack(track: TrackLike, stream: StreamLike): unknown,
 *   createDataChannel(label: string): DataChannelLike,
 *   createOffer(): Promise<RTCSessionDescriptionInit>,
 *   setLocalDescription(description: RTCSessionDescriptionInit): Promise<void>,
 *   setRemoteDescription(description: RTCSessionDescriptionInit): Promise<void>,
 *   addEventListener(type: string, listener: (event: any) => void): void,
 *   removeEventListener(type: string, listener: (event: any) => void): void,
 *   close(): void,
 * }} PeerConnectionLike
 * @typedef {{ srcObject: unknown, play?(): Promise<void> }} AudioSink
 * @typedef {{ readonly status: number, readonly headers: { get(name: string): string | null },
 *   text(): Promise<string> }} ResponseLike
 * @typedef {(url: string, init: RequestInit) => Promise<ResponseLike>} FetchLike
 */

/**
 * @typedef {object} VoiceClientOptions
 * @property {string} [api] base URL of the API: `/api` behind CloudFront (the default), or a
 *   function URL such as `https://xyz.lambda-url.us-east-1.on.aws`
 * @property {string} [realtime] base URL of OpenAI Realtime, default `https://api.openai.com`
 * @property {AudioSink | null} [audio] where the remote audio plays, e.g. `<audio autoplay>`
 * @property {string} [voice] sent as `{"voice": ...}`; the server's default when absent
 * @property {(state: VoiceState) => void} [onState] called on every state change
 * @property {(event: unknown) => void} [onEvent] each `oai-events` message, parsed JSON
 * @property {Partial<RetryOptions>} [retry] the retry policy's numbers (retry.js)
 * @property {number} [iceGatheringTimeoutMs] longest wait for ICE gathering before the offer
 *   is posted with the candidates found so far (default 3000)
 * @property {number} [connectTimeoutMs] longest wait from the answer to `connected`; then it
 *   counts as a drop (default 20000)
 * @property {number} [requestTimeoutMs] longest wait for an HTTP answer, body included; then
 *   it counts as no answer (default 15000)
 * @property {number} [disconnectGraceMs] how long a call may stay `disconnected` before it
 *   counts as dropped (default 5000): a peer that goes away without a word is noticed by ICE
 *   consent as `disconnected`, and `failed` can take half a minute more
 * @property {number} [maxCallMs] the provider's cap on a call; the client ends the call then
 *   and reconnects as after a drop (default 60 minutes)
 * @property {FetchLike} [fetch] injectable: `fetch`
 * @property {() => PeerConnectionLike} [createPeerConnection] injectable:
 *   `() => new RTCPeerConnection()`
 * @property {(constraints: { audio: true }) => Promise<StreamLike>} [getUserMedia]
 *   injectable: `navigator.mediaDevices.getUserMedia`
 * @property {Clock} [clock] injectable: `Date.now`, `setTimeout`, `clearTimeout`
 * @property {() => number} [random] injectable: `Math.random`
 * @property {() => string} [randomUUID] injectable: `crypto.randomUUID`
 */

/** @type {Clock} */
const systemClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (handle) => globalThis.clearTimeout(/** @type {number} */ (handle)),
};

/** States in which the client is at work and may send on its own. */
const ACTIVE = new Set(['connecting', 'connected', 'reconnecting', 'waiting']);

/**
 * One peer connection and what belongs to it.
 * @typedef {object} Call
 * @property {PeerConnectionLike} pc
 * @property {DataChannelLike | null} dc
 * @property {number | null} connectedAt
 * @property {unknown[]} timers
 */

/**
 * The client. Make one with {@link createVoiceClient}. Dispatches `statechange` events whose
 * `detail` is the new {@link VoiceState}.
 */
export class VoiceClient extends EventTarget {
  /** @type {Required<Omit<VoiceClientOptions, 'voice' | 'onState' | 'onEvent' | 'retry' | 'audio'>>} */
  #o;
  /** @type {AudioSink | null} */
  #audio;
  /** @type {string} the `/session` body; the same bytes on every try under one key */
  #body;
  /** @type {Partial<RetryOptions>} */
  #retryOptions;
  /** @type {((event: unknown) => void) | undefined} */
  #onEvent;
  /** @type {RetryPolicy} */
  #policy;
  /** @type {VoiceState} */
  #state;
  /** Bumped by every start and stop: a continuation of an older run does nothing. */
  #run = 0;
  #key = '';
  /**
   * The run's client secret, kept for the next calls until it expires or `/calls` refuses it:
   * a secret costs a unit of quota, a call with one we hold costs nothing. `expiresAt` is ms
   * since the epoch (0 when `/session` gave none: such a secret serves only its first call).
   * @type {{ value: string, expiresAt: number } | null}
   */
  #secret = null;
  /** Earliest time a manual start is allowed (after 429/403). */
  #restartAt = 0;
  /** The one pending timer of the run: the next try, or the end of a wait for Start. */
  /** @type {unknown} */
  #timer = null;
  /** @type {AbortController | null} */
  #inflight = null;
  /** @type {Call | null} */
  #call = null;
  /** @type {StreamLike | null} */
  #mic = null;
  /** The last states, oldest first (at most 100): for tests and for debugging a page. */
  /** @type {VoiceState[]} */
  history = [];

  /** @param {VoiceClientOptions} options */
  constructor(options = {}) {
    super();
    this.#o = {
      api: trimSlash(options.api ?? '/api'),
      realtime: trimSlash(options.realtime ?? 'https://api.openai.com'),
      iceGatheringTimeoutMs: options.iceGatheringTimeoutMs ?? 3_000,
      connectTimeoutMs: options.connectTimeoutMs ?? 20_000,
      disconnectGraceMs: options.disconnectGraceMs ?? 5_000,
      requestTimeoutMs: options.requestTimeoutMs ?? 15_000,
      maxCallMs: options.maxCallMs ?? 60 * 60 * 1000,
      fetch: options.fetch ?? ((url, init) => globalThis.fetch(url, init)),
      createPeerConnection: options.createPeerConnection ?? (() => new RTCPeerConnection()),
      getUserMedia:
        options.getUserMedia ?? ((constraints) => navigator.mediaDevices.getUserMedia(constraints)),
      clock: options.clock ?? systemClock,
      random: options.random ?? Math.random,
      randomUUID: options.randomUUID ?? (() => crypto.randomUUID()),
    };
    this.#audio = options.audio ?? null;
    this.#body = JSON.stringify(options.voice === undefined ? {} : { voice: options.voice });
    this.#retryOptions = options.retry ?? {};
    this.#onEvent = options.onEvent;
    this.#policy = this.#newPolicy();
    const onState = options.onState;
    if (onState) {
      this.addEventListener('statechange', (event) => {
        onState(/** @type {CustomEvent<VoiceState>} */ (event).detail);
      });
    }
    this.#state = this.#snapshot('idle', {});
  }

  /** @returns {VoiceState} the current state */
  get state() {
    return this.#state;
  }

  /** @returns {PeerConnectionLike | null} the peer connection of the current call, if any */
  get peerConnection() {
    return this.#call?.pc ?? null;
  }

  /** @returns {DataChannelLike | null} the `oai-events` channel of the current call, if any */
  get dataChannel() {
    return this.#call?.dc ?? null;
  }

  /** @returns {string} the `Idempotency-Key` of the latest `/session` request ('' before one) */
  get idempotencyKey() {
    return this.#key;
  }

  /**
   * Starts a run: a new retry policy, a new key. Does nothing (and returns false) while a run
   * is active or before a refusal's wait is over.
   * @returns {boolean} whether a run started
   */
  start() {
    if (!this.#state.canStart) return false;
    this.#cancelTimer();
    const run = ++this.#run;
    this.#policy = this.#newPolicy();
    this.#restartAt = 0;
    this.#key = '';
    this.#secret = null;
    void this.#attempt(run, 'session', false);
    return true;
  }

  /**
   * Ends the run: the request in flight is aborted, the call and the microphone closed, every
   * timer cancelled. A stop after a refusal keeps the refusal (and its wait) on show.
   */
  stop() {
    if (!ACTIVE.has(this.#state.name)) return;
    this.#run++;
    this.#teardown();
    this.#set('stopped', {});
  }

  #newPolicy() {
    const { clock, random } = this.#o;
    return new RetryPolicy({ now: () => clock.now(), random, options: this.#retryOptions });
  }

  /**
   * One session attempt: microphone, secret (the one held, while it lives, or a new one), call.
   * @param {number} run
   * @param {'call' | 'session'} next what the policy said to try (retry.js `Decision`)
   * @param {boolean} sameKey for `session`: resend the previous request's key
   */
  async #attempt(run, next, sameKey) {
    this.#set('connecting', {});
    if (!(await this.#microphone(run))) return;
    const held = this.#secret;
    if (next === 'call' && held !== null && this.#policy.secretUsable(held.expiresAt)) {
      return this.#connect(run, held.value);
    }
    // A new secret: an expired one is not replayed under its old key, so a fresh key.
    this.#secret = null;
    if (next === 'call' || !sameKey || this.#key === '') this.#key = this.#o.randomUUID();
    const answer = await this.#request(`${this.#o.api}/session`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': this.#key },
      body: this.#body,
    });
    if (run !== this.#run) return;
    if (answer === null) return this.#apply(run, { kind: 'session_lost' });
    const json = parseJson(answer.body);
    if (answer.status === 200) {
      const secret = json?.client_secret;
      if (typeof secret !== 'string' || secret === '') {
        return this.#apply(run, { kind: 'session_unusable' });
      }
      const expiresAt = json?.expires_at;
      this.#secret = {
        value: secret,
        expiresAt: typeof expiresAt === 'number' && Number.isFinite(expiresAt) ? expiresAt * 1000 : 0,
      };
      this.#policy.minted();
      return this.#connect(run, secret);
    }
    const now = this.#o.clock.now();
    const detail = typeof json?.detail === 'string' ? json.detail : null;
    const retryAfter = retryAfterSeconds(answer.headers.get('Retry-After'), json?.retry_after, now);
    this.#apply(run, { kind: 'session', status: answer.status, retryAfter, detail });
  }

  /**
   * The microphone, asked for once per run (before the first secret, so that a refusal costs
   * no quota and a slow permission prompt cannot outlast the secret), again if its track ended.
   * @param {number} run
   * @returns {Promise<boolean>} whether to go on
   */
  async #microphone(run) {
    if (this.#mic && this.#mic.getTracks().every((t) => t.readyState !== 'ended')) return true;
    this.#stopMic();
    try {
      const mic = await this.#o.getUserMedia({ audio: true });
      if (run !== this.#run) {
        mic.getTracks().forEach((t) => t.stop());
        return false;
      }
      this.#mic = mic;
      return true;
    } catch {
      if (run === this.#run) this.#apply(run, { kind: 'microphone' });
      return false;
    }
  }

  /**
   * The WebRTC half: offer, `/calls`, answer.
   * @param {number} run
   * @param {string} secret
   */
  async #connect(run, secret) {
    const mic = /** @type {StreamLike} */ (this.#mic);
    const pc = this.#o.createPeerConnection();
    /** @type {Call} */
    const call = { pc, dc: null, connectedAt: null, timers: [] };
    this.#call = call;
    pc.addEventListener('track', (event) => {
      if (this.#call !== call || !this.#audio) return;
      this.#audio.srcObject = event.streams?.[0] ?? null;
      this.#audio.play?.().catch(() => {});
    });
    pc.addEventListener('connectionstatechange', () => {
      const state = pc.connectionState;
      if (state === 'connected') this.#connected(run, call);
      else if (state === 'failed' || state === 'closed') this.#dropped(run, call, state);
      // `disconnected` often recovers within a second or two; one that lasts is a drop (it
      // would become `failed` only much later).
      else if (state === 'disconnected') {
        this.#after(call, this.#o.disconnectGraceMs, () => {
          if (pc.connectionState === 'disconnected') this.#dropped(run, call, 'disconnected');
        });
      }
    });
    for (const track of mic.getTracks()) pc.addTrack(track, mic);
    const dc = pc.createDataChannel('oai-events');
    call.dc = dc;
    dc.addEventListener('close', () => this.#dropped(run, call, 'channel_closed'));
    dc.addEventListener('message', (event) => {
      if (this.#call !== call || !this.#onEvent) return;
      const data = typeof event.data === 'string' ? parseJson(event.data) : null;
      if (data !== null) this.#onEvent(data);
    });

    try {
      await pc.setLocalDescription(await pc.createOffer());
      await this.#iceGathered(pc);
    } catch {
      return this.#dropped(run, call, 'setup');
    }
    if (this.#call !== call) return;
    const answer = await this.#request(`${this.#o.realtime}/v1/realtime/calls`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/sdp' },
      body: pc.localDescription?.sdp ?? '',
    });
    if (this.#call !== call) return;
    if (answer === null) {
      this.#endCall(call);
      return this.#apply(run, { kind: 'calls_lost' });
    }
    if (answer.status < 200 || answer.status > 299) {
      this.#endCall(call);
      const now = this.#o.clock.now();
      const retryAfter = retryAfterSeconds(answer.headers.get('Retry-After'), null, now);
      return this.#apply(run, { kind: 'calls', status: answer.status, retryAfter });
    }
    try {
      await pc.setRemoteDescription({ type: 'answer', sdp: answer.body });
    } catch {
      return this.#dropped(run, call, 'setup');
    }
    if (this.#call !== call || call.connectedAt !== null) return;
    this.#after(call, this.#o.connectTimeoutMs, () => this.#dropped(run, call, 'timeout'));
  }

  /**
   * Non-trickle ICE: the offer goes out once gathering is complete (the local stand-in takes no
   * trickled candidates), or after a timeout with the candidates found by then.
   * @param {PeerConnectionLike} pc
   * @returns {Promise<void>}
   */
  #iceGathered(pc) {
    if (pc.iceGatheringState === 'complete') return Promise.resolve();
    const clock = this.#o.clock;
    return new Promise((resolve) => {
      const done = () => {
        clock.clearTimeout(timer);
        pc.removeEventListener('icegatheringstatechange', onState);
        pc.removeEventListener('icecandidate', onCandidate);
        resolve();
      };
      const onState = () => {
        if (pc.iceGatheringState === 'complete') done();
      };
      /** @param {{ candidate?: unknown }} event */
      const onCandidate = (event) => {
        if (!event.candidate) done();
      };
      const timer = clock.setTimeout(done, this.#o.iceGatheringTimeoutMs);
      pc.addEventListener('icegatheringstatechange', onState);
      pc.addEventListener('icecandidate', onCandidate);
    });
  }

  /**
   * @param {number} run
   * @param {Call} call
   */
  #connected(run, call) {
    if (run !== this.#run || this.#call !== call) return;
    if (call.connectedAt === null) {
      call.connectedAt = this.#o.clock.now();
      for (const timer of call.timers) this.#o.clock.clearTimeout(timer);
      call.timers = [];
      this.#policy.connected();
      this.#after(call, this.#o.maxCallMs, () => this.#dropped(run, call, 'cap'));
    }
    if (this.#state.name !== 'connected') this.#set('connected', {});
  }

  /**
   * The call ended without being asked to: hand it to the policy.
   * @param {number} run
   * @param {Call} call
   * @param {DropReason} reason
   */
  #dropped(run, call, reason) {
    if (run !== this.#run || this.#call !== call) return;
    const now = this.#o.clock.now();
    const uptimeMs = call.connectedAt === null ? 0 : now - call.connectedAt;
    this.#endCall(call);
    this.#apply(run, { kind: 'drop', reason, uptimeMs }, reason);
  }

  /**
   * Carries out the policy's decision on an outcome.
   * @param {number} run
   * @param {Outcome} outcome
   * @param {string} [cause] shown as the state's reason instead of the decision's
   */
  #apply(run, outcome, cause) {
    if (run !== this.#run) return;
    const decision = this.#policy.decide(outcome);
    const clock = this.#o.clock;
    if (decision.action === 'retry') {
      if (decision.next === 'session') this.#secret = null;
      if (decision.delayMs <= 0) {
        void this.#attempt(run, decision.next, decision.sameKey);
        return;
      }
      const until = clock.now() + decision.delayMs;
      this.#set(decision.state, { reason: cause ?? decision.reason, until });
      this.#cancelTimer();
      this.#timer = clock.setTimeout(() => {
        this.#timer = null;
        if (run === this.#run) void this.#attempt(run, decision.next, decision.sameKey);
      }, decision.delayMs);
      return;
    }
    // Stop: nothing more goes out on its own.
    this.#run++;
    this.#teardown();
    this.#restartAt = decision.restartAt;
    const fields = { reason: decision.reason, detail: decision.detail, until: decision.restartAt };
    this.#set(decision.state, fields);
    const wait = decision.restartAt - clock.now();
    if (wait > 0) {
      const name = decision.state;
      this.#timer = clock.setTimeout(() => {
        this.#timer = null;
        if (this.#state.name === name) this.#set(name, fields);
      }, wait);
    }
  }

  /**
   * A fetch with a deadline (the injected clock's) that counts the body too. `null` means no
   * answer: fetch threw, the deadline passed, or the body was cut off.
   * @param {string} url
   * @param {RequestInit} init
   * @returns {Promise<{ status: number, headers: { get(name: string): string | null }, body: string } | null>}
   */
  async #request(url, init) {
    const controller = new AbortController();
    this.#inflight = controller;
    const clock = this.#o.clock;
    const deadline = clock.setTimeout(() => controller.abort(), this.#o.requestTimeoutMs);
    try {
      const response = await this.#o.fetch(url, { ...init, signal: controller.signal });
      const body = await response.text();
      return { status: response.status, headers: response.headers, body };
    } catch {
      return null;
    } finally {
      clock.clearTimeout(deadline);
      if (this.#inflight === controller) this.#inflight = null;
    }
  }

  /**
   * @param {Call} call
   * @param {number} ms
   * @param {() => void} fn
   */
  #after(call, ms, fn) {
    call.timers.push(this.#o.clock.setTimeout(fn, ms));
  }

  /** @param {Call} call */
  #endCall(call) {
    if (this.#call === call) this.#call = null;
    for (const timer of call.timers) this.#o.clock.clearTimeout(timer);
    call.timers = [];
    try {
      call.dc?.close();
    } catch {
      // already closed
    }
    try {
      call.pc.close();
    } catch {
      // already closed
    }
    if (this.#audio) this.#audio.srcObject = null;
  }

  #stopMic() {
    this.#mic?.getTracks().forEach((t) => t.stop());
    this.#mic = null;
  }

  /** Everything off: request, timer, call, microphone. */
  #teardown() {
    this.#inflight?.abort();
    this.#inflight = null;
    this.#cancelTimer();
    if (this.#call) this.#endCall(this.#call);
    this.#stopMic();
  }

  #cancelTimer() {
    if (this.#timer !== null) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = null;
  }

  /**
   * @param {StateName} name
   * @param {{ reason?: string | null, detail?: string | null, until?: number }} fields
   * @returns {VoiceState}
   */
  #snapshot(name, fields) {
    const now = this.#o.clock.now();
    const until = fields.until ?? null;
    const waitLeft = until === null ? null : Math.max(0, until - now);
    const refused = name === 'rate_limited' || name === 'disabled' || name === 'failed';
    return Object.freeze({
      name,
      reason: fields.reason ?? null,
      // Rounded for the waits the client runs itself (a 3.4 s reconnect says "3 s"), rounded up
      // for a refusal's wait, which a person must not be told is shorter than it is.
      seconds:
        waitLeft === null ? null : refused ? Math.ceil(waitLeft / 1000) : Math.max(1, Math.round(waitLeft / 1000)),
      until,
      detail: fields.detail ?? null,
      canStart: !ACTIVE.has(name) && now >= this.#restartAt,
      at: now,
    });
  }

  /**
   * @param {StateName} name
   * @param {{ reason?: string | null, detail?: string | null, until?: number }} fields
   */
  #set(name, fields) {
    const state = this.#snapshot(name, fields);
    this.#state = state;
    this.history.push(state);
    if (this.history.length > 100) this.history.shift();
    this.dispatchEvent(new CustomEvent('statechange', { detail: state }));
  }
}

/**
 * Makes a voice client. Nothing is sent until `start()`.
 * @param {VoiceClientOptions} [options]
 * @returns {VoiceClient}
 */
export function createVoiceClient(options = {}) {
  return new VoiceClient(options);
}

/**
 * The status line for people, in English. Short and calm: a refusal is not an alarm.
 * @param {VoiceState} state
 * @param {(ms: number) => string} [formatTime] how to write a time of day
 * @returns {string}
 */
export function describeState(state, formatTime = defaultTime) {
  const s = state.seconds ?? 0;
  switch (state.name) {
    case 'idle':
      return 'Press Start to talk.';
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return 'Connected. Go ahead and talk.';
    case 'reconnecting':
      return state.reason === 'network' ||
        state.reason === 'server_error' ||
        state.reason === 'provider_error'
        ? `Could not reach the service, trying again in ${s} s`
        : `Disconnected, reconnecting in ${s} s`;
    case 'waiting':
      return `The service is busy, trying again in ${s} s`;
    case 'rate_limited':
      return state.canStart || state.until === null
        ? 'Paused: too many sessions. You can start again now.'
        : `Paused: too many sessions. You can start again at ${formatTime(state.until)}.`;
    case 'disabled':
      return 'The service is switched off for now.';
    case 'failed':
      return failedText(state.reason);
    case 'stopped':
      return 'Stopped.';
  }
}

/** @param {string | null} reason */
function failedText(reason) {
  switch (reason) {
    case 'microphone':
      return 'The microphone is not available. Allow it, then press Start.';
    case 'exhausted':
      return 'The service is not answering. Try again later.';
    case 'keeps_dropping':
      return 'The call keeps dropping. Try again later.';
    case 'provider_unavailable':
      return 'The voice service is not available. Try again later.';
    case 'provider_rejected':
      return 'The voice service refused the session.';
    default:
      return 'Could not start the session.';
  }
}

/** @param {number} ms */
function defaultTime(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

/** @param {string} url */
function trimSlash(url) {
  return url.replace(/\/+$/, '');
}

/**
 * @param {string} text
 * @returns {Record<string, unknown> | null}
 */
function parseJson(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === 'object' ? value : null;
  } catch {
    return null;
  }
}
