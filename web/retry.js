// @ts-check
/**
 * The retry classes of lesson 000, written once.
 *
 * Lesson 000's client reconnected 3 s after any failure, 429 included: every refusal became a
 * new request, every request pushed the rate-limit counter up, and the window never reopened.
 * The rule here is the lesson's: reconnect when the call was *cut off*, stop when the service
 * *refused*. Every outcome of a session attempt is classified by {@link RetryPolicy#decide},
 * and nothing else in the client decides whether to try again.
 *
 * What a retry costs decides the rest. A new client secret costs a unit of this client's
 * quota (`POST /session`); a new call with the secret it already holds costs nothing of ours.
 * So a failed or dropped call is retried with the same secret until it expires, honouring the
 * provider's `Retry-After` (a 429 from `/calls` included: that is the provider's shared limit,
 * not this client's quota), and a new secret is asked for only when the old one ran out or
 * the provider refused it (401). A lost answer from `/session` (no answer, or a gateway's
 * 502/504) is retried under the same `Idempotency-Key`, which replays the secret the function
 * may have minted instead of spending a second unit. A 429 or 403 from `/session` stops.
 *
 * This module is pure logic: no timers, no network. It reads the time through an injected
 * `now()` and draws jitter from an injected `random()`, so tests drive it with a fake clock.
 * The caller (voice-client.js) carries out the decisions.
 */

/**
 * The clock the client runs on; injected so tests can run hours in microseconds.
 * @typedef {object} Clock
 * @property {() => number} now milliseconds since the epoch
 * @property {(fn: () => void, ms: number) => unknown} setTimeout
 * @property {(handle: unknown) => void} clearTimeout
 */

/**
 * Why a call ended without the person asking:
 * `failed` and `closed` (the peer connection's state), `channel_closed` (the `oai-events`
 * data channel closed), `cap` (the provider's 60-minute limit on a call), `timeout` (the peer
 * connection did not connect in time), `setup` (the offer or answer could not be applied).
 * @typedef {'failed' | 'closed' | 'disconnected' | 'channel_closed' | 'cap' | 'timeout' | 'setup'} DropReason
 */

/**
 * Everything that can end a session attempt other than success.
 * - `session`: `POST {api}/session` answered, with a status other than 200.
 * - `session_lost`: `POST {api}/session` got no answer: fetch threw, the request timed out,
 *   or the body of a 200 was cut off. The server may have minted a secret and stored it under
 *   the key, so the retry carries the same key and gets that secret replayed.
 * - `session_unusable`: a 200 whose body holds no client secret (a proxy's page, a bug).
 * - `calls`: `POST {realtime}/v1/realtime/calls` answered with a status other than 2xx.
 * - `calls_lost`: `POST {realtime}/v1/realtime/calls` got no answer.
 * - `drop`: the call was set up (or being set up) and ended; `uptimeMs` is how long it was
 *   connected (0 if never).
 * - `microphone`: `getUserMedia` failed (refused, no device).
 * @typedef {{ kind: 'session', status: number, retryAfter: number | null, detail: string | null }
 *   | { kind: 'session_lost' }
 *   | { kind: 'session_unusable' }
 *   | { kind: 'calls', status: number, retryAfter: number | null }
 *   | { kind: 'calls_lost' }
 *   | { kind: 'drop', reason: DropReason, uptimeMs: number }
 *   | { kind: 'microphone' }} Outcome
 */

/**
 * What to do about an outcome.
 * - `retry`: after `delayMs`, try again; `state` is what the person sees meanwhile. `next` says
 *   what is tried:
 *   - `call`: a new call with the run's client secret, as long as it still has
 *     `secretMarginMs` to live when the wait is over ({@link RetryPolicy#secretUsable}); only
 *     a secret that has run out is replaced, by `POST /session` under a fresh key. Every
 *     failure of a call (a drop, a 5xx or 429 from `/calls`, no answer) is retried this way: a
 *     secret serves many calls until it expires, so an outage of the provider costs at most
 *     one unit of quota per secret lifetime.
 *   - `session`: `POST /session` for a new secret. `sameKey` says whether the request carries
 *     the previous request's `Idempotency-Key` (after no answer, a gateway's 502/504, or a 409
 *     that says that very request is still running: the function may have minted and stored
 *     a secret under it, which the same key gets replayed without a second unit); otherwise
 *     a fresh key.
 * - `stop`: nothing more is sent on its own. `restartAt` (ms since the epoch) is the earliest
 *   moment a manual Start is offered again.
 * @typedef {{ action: 'retry', state: 'reconnecting' | 'waiting' | 'connecting',
 *     delayMs: number, next: 'call' | 'session', sameKey: boolean, reason: RetryReason }
 *   | { action: 'stop', state: 'rate_limited' | 'disabled' | 'failed',
 *     restartAt: number, detail: string | null, reason: StopReason }} Decision
 */

/**
 * @typedef {'drop' | 'network' | 'server_error' | 'unavailable' | 'in_progress' | 'remint'
 *   | 'provider_error' | 'provider_busy'} RetryReason
 * @typedef {'rate_limited' | 'disabled' | 'rejected' | 'provider_rejected' | 'unusable_answer'
 *   | 'exhausted' | 'keeps_dropping' | 'provider_unavailable' | 'microphone'} StopReason
 */

/**
 * The numbers of the policy. Every automatic wait is its nominal value plus up to `jitter`
 * (a fraction) of it, drawn afresh each time: never less than the nominal value, so a
 * `Retry-After` is never undercut, and clients that failed together do not come back in the
 * same instant.
 * @typedef {object} RetryOptions
 * @property {number} dropBaseMs first reconnect after a drop (lesson 000's 3 s)
 * @property {number} dropCapMs longest reconnect wait, jitter included
 * @property {number} stableCallMs a call connected at least this long resets the drop back-off
 * @property {number} maxReconnects consecutive failed calls (drops shorter than
 *   `stableCallMs`, provider failures) retried on their own; the next one stops as `failed`
 * @property {number} secretMarginMs a client secret is used for a new call only while it has
 *   at least this long to live (time for ICE gathering and the `/calls` request); past that,
 *   a new session. The browser's clock against the server's `expires_at`: a clock running
 *   behind costs one `/calls` 401 and a new secret, one running ahead only the reuse
 * @property {number} sessionBaseMs first wait after a network error or 5xx from `/session`
 * @property {number} sessionCapMs longest such wait, jitter included
 * @property {number} maxSessionAttempts `/session` requests in a row that may fail (503, 5xx,
 *   409, no answer) before the client stops as `failed`
 * @property {number} defaultRetryAfterS wait assumed when a 429, 409 or 503 carries no
 *   usable `Retry-After` (the API always sends one; a proxy might not, and a cross-origin
 *   provider's is readable only if it lists it in `Access-Control-Expose-Headers`)
 * @property {number} disabledRestartMs after a 403 (kill switch), how long Start stays
 *   unavailable
 * @property {number} jitter fraction added on top of each automatic wait, at most
 */

/** @type {Readonly<RetryOptions>} */
export const RETRY_DEFAULTS = Object.freeze({
  dropBaseMs: 3_000,
  dropCapMs: 60_000,
  stableCallMs: 60_000,
  maxReconnects: 8,
  secretMarginMs: 10_000,
  sessionBaseMs: 1_000,
  sessionCapMs: 30_000,
  maxSessionAttempts: 5,
  defaultRetryAfterS: 60,
  disabledRestartMs: 60_000,
  jitter: 0.25,
});

/**
 * Parses a `Retry-After` field value into whole seconds to wait, at least 1.
 *
 * Our functions always send an integer of seconds; RFC 9110 also allows an HTTP-date, which a
 * proxy or another provider might send, so that is accepted too (a date in the past gives 1).
 * Anything else gives `null`: the caller then uses its own default, never zero.
 * @param {string | null | undefined} value
 * @param {number} nowMs
 * @returns {number | null}
 */
export function parseRetryAfter(value, nowMs) {
  if (value == null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Math.max(1, Number(text));
  // An HTTP-date always names a weekday ("Sun, 06 Nov 1994 08:49:37 GMT"); requiring a letter
  // keeps Date.parse's leniency from turning "1.5" or "-3" into a date.
  if (!/^[A-Za-z]{3},/.test(text)) return null;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return null;
  return Math.max(1, Math.ceil((at - nowMs) / 1000));
}

/**
 * The wait a refusal asks for: the `Retry-After` header, or the problem body's `retry_after`
 * (a cross-origin page sees the header only if the API exposes it), the longer of the two when
 * both are there, so the wait is never undercut.
 * @param {string | null | undefined} header
 * @param {unknown} bodyValue the problem's `retry_after`
 * @param {number} nowMs
 * @returns {number | null} whole seconds, at least 1
 */
export function retryAfterSeconds(header, bodyValue, nowMs) {
  const fromHeader = parseRetryAfter(header, nowMs);
  const fromBody =
    typeof bodyValue === 'number' && Number.isFinite(bodyValue) && bodyValue >= 0
      ? Math.max(1, Math.ceil(bodyValue))
      : null;
  if (fromHeader === null) return fromBody;
  if (fromBody === null) return fromHeader;
  return Math.max(fromHeader, fromBody);
}

/**
 * Exponential back-off with jitter: attempt `n` (from 1) waits `base * 2^(n-1)`, plus up to
 * `jitter` of that, and never more than `cap` in total (the nominal wait stops growing at
 * `cap / (1 + jitter)`, so the jitter still spreads clients out at the cap).
 * @param {number} n
 * @param {number} baseMs
 * @param {number} capMs
 * @param {number} jitter
 * @param {() => number} random in [0, 1)
 * @returns {number} milliseconds
 */
export function backoffDelay(n, baseMs, capMs, jitter, random) {
  const nominal = Math.min(baseMs * 2 ** Math.max(0, n - 1), capMs / (1 + jitter));
  return withJitter(nominal, jitter, random);
}

/**
 * @param {number} nominalMs
 * @param {number} jitter
 * @param {() => number} random
 */
function withJitter(nominalMs, jitter, random) {
  return Math.round(nominalMs * (1 + jitter * random()));
}

/**
 * The state of one run of the client (from a Start to a stop): counts consecutive failures of
 * each kind and turns each outcome into a {@link Decision}. A new Start makes a new policy.
 */
export class RetryPolicy {
  /** @type {RetryOptions} */
  #o;
  /** @type {() => number} */
  #now;
  /** @type {() => number} */
  #random;
  /** `/session` requests in a row without a 200. */
  #sessionFailures = 0;
  /** Calls in a row that failed or dropped before `stableCallMs`. */
  #callFailures = 0;
  /** 401s from `/calls` since the last call that connected. */
  #callsUnauthorized = 0;

  /**
   * @param {{ now: () => number, random: () => number, options?: Partial<RetryOptions> }} deps
   */
  constructor({ now, random, options = {} }) {
    this.#o = { ...RETRY_DEFAULTS, ...options };
    this.#now = now;
    this.#random = random;
  }

  /** `POST /session` answered 200 with a secret: the session back-off starts over. */
  minted() {
    this.#sessionFailures = 0;
  }

  /**
   * Whether a client secret that expires at `expiresAtMs` (ms since the epoch) may set up one
   * more call: it must outlive the set-up by `secretMarginMs`. Asked when a `call` retry's wait
   * is over; a secret that fails this is replaced through `POST /session` under a fresh key.
   * @param {number} expiresAtMs
   * @returns {boolean}
   */
  secretUsable(expiresAtMs) {
    return expiresAtMs - this.#now() >= this.#o.secretMarginMs;
  }

  /** The peer connection reached `connected`: a provider 401 may be re-minted again. */
  connected() {
    this.#callsUnauthorized = 0;
  }

  /**
   * Classifies an outcome. This is the only place that decides whether to try again.
   * @param {Outcome} outcome
   * @returns {Decision}
   */
  decide(outcome) {
    switch (outcome.kind) {
      case 'session':
        return this.#sessionAnswer(outcome.status, outcome.retryAfter, outcome.detail);
      case 'session_lost':
        // No answer: the server may have minted and stored a secret under this key. The same
        // key gets that secret replayed, and no second quota unit is spent.
        return this.#sessionRetry('reconnecting', 'network', true, this.#sessionBackoff());
      case 'session_unusable':
        return this.#stop('failed', 'unusable_answer', 0, null);
      case 'calls':
        return this.#callsAnswer(outcome.status, outcome.retryAfter);
      case 'calls_lost':
        return this.#callFailed('provider_error', 0);
      case 'drop':
        // A call that stayed up a while was a good call; its end is a fresh start
        // (the provider's 60-minute cap, an idle close), not a streak.
        if (outcome.uptimeMs >= this.#o.stableCallMs) this.#callFailures = 0;
        return this.#callFailed('drop', 0);
      case 'microphone':
        return this.#stop('failed', 'microphone', 0, null);
    }
  }

  /**
   * @param {number} status
   * @param {number | null} retryAfter
   * @param {string | null} detail
   * @returns {Decision}
   */
  #sessionAnswer(status, retryAfter, detail) {
    if (status === 429) {
      // Refused, not disconnected: retrying cannot change the answer, and a retry loop is what
      // kept lesson 000's window shut. Stop; Start comes back once the wait is over.
      const wait = (retryAfter ?? this.#o.defaultRetryAfterS) * 1000;
      return this.#stop('rate_limited', 'rate_limited', wait, detail);
    }
    if (status === 403) {
      // The kill switch (or a misrouted request): "stop; reload later". Nothing automatic;
      // a person may try again after a while, one request per press.
      return this.#stop('disabled', 'disabled', this.#o.disabledRestartMs, detail);
    }
    if (status === 503) {
      const wait = (retryAfter ?? this.#o.defaultRetryAfterS) * 1000;
      return this.#sessionRetry('waiting', 'unavailable', false, this.#jittered(wait));
    }
    if (status === 409) {
      // Our own earlier request with this key is still running (we resent it after getting
      // no answer, or a gateway's 502/504): the same key, after Retry-After, gets that
      // request's outcome.
      const wait = (retryAfter ?? 1) * 1000;
      return this.#sessionRetry('waiting', 'in_progress', true, this.#jittered(wait));
    }
    if (status === 502 || status === 504) {
      // A gateway's answer (CloudFront, API Gateway, the function URL): the function may have
      // minted and stored a secret whose answer was lost on the way, as with no answer at all.
      // The same key gets that secret replayed, or a 409 while it is still running.
      return this.#sessionRetry('reconnecting', 'server_error', true, this.#sessionBackoff());
    }
    if (status >= 500) {
      // The function's own 500: nothing was stored under the key, so a new key loses nothing.
      return this.#sessionRetry('reconnecting', 'server_error', false, this.#sessionBackoff());
    }
    // 400, 401 and any other answer: the request is wrong, not the moment. Waiting won't fix it.
    return this.#stop('failed', 'rejected', 0, detail);
  }

  /**
   * @param {number} status
   * @param {number | null} retryAfter
   * @returns {Decision}
   */
  #callsAnswer(status, retryAfter) {
    if (status === 401) {
      // The secret may have expired on the way (a long wait, a replayed secret near its end, a
      // clock behind the server's): one new secret, under a new key (the old key would replay
      // the refused secret). A second 401 in a row is not about expiry.
      this.#callsUnauthorized += 1;
      if (this.#callsUnauthorized >= 2) return this.#stop('failed', 'provider_rejected', 0, null);
      return {
        action: 'retry',
        state: 'connecting',
        delayMs: 0,
        next: 'session',
        sameKey: false,
        reason: 'remint',
      };
    }
    if (status === 429) {
      // The provider's limit, not ours: it is shared by every browser of the deployment and
      // reopens on its own, and our secret stays valid meanwhile. Unlike a 429 from /session
      // (this client's quota, where a retry can only be refused again, and lesson 000's loop
      // kept the window shut), waiting it out and trying the same secret again spends no unit
      // of ours and sends one request per wait; stopping instead would make the person's next
      // Start spend a new unit. So: wait at least its Retry-After (60 s when none is readable),
      // never less than the back-off, on the same bounded count as every failed call.
      const asked = (retryAfter ?? this.#o.defaultRetryAfterS) * 1000;
      return this.#callFailed('provider_busy', asked);
    }
    return this.#callFailed('provider_error', retryAfter === null ? 0 : retryAfter * 1000);
  }

  /**
   * A call that could not be made or did not last: a new call with the same secret (while it
   * lives), backing off. A `Retry-After` the provider sent is a floor: the wait is the longer
   * of it and the back-off, each with its jitter, so neither is undercut.
   * @param {RetryReason} reason
   * @param {number} askedMs the provider's `Retry-After` in ms, 0 when it gave none
   * @returns {Decision}
   */
  #callFailed(reason, askedMs) {
    this.#callFailures += 1;
    if (this.#callFailures > this.#o.maxReconnects) {
      const why = reason === 'drop' ? 'keeps_dropping' : 'provider_unavailable';
      return this.#stop('failed', why, 0, null);
    }
    const o = this.#o;
    const backoff = backoffDelay(this.#callFailures, o.dropBaseMs, o.dropCapMs, o.jitter, this.#random);
    const delayMs = askedMs > 0 ? Math.max(backoff, this.#jittered(askedMs)) : backoff;
    // Told when to come back: the provider is busy, not gone.
    const state = askedMs > 0 ? 'waiting' : 'reconnecting';
    return { action: 'retry', state, delayMs, next: 'call', sameKey: false, reason };
  }

  /**
   * @param {'reconnecting' | 'waiting'} state
   * @param {RetryReason} reason
   * @param {boolean} sameKey
   * @param {number} delayMs
   * @returns {Decision}
   */
  #sessionRetry(state, reason, sameKey, delayMs) {
    this.#sessionFailures += 1;
    if (this.#sessionFailures >= this.#o.maxSessionAttempts) {
      return this.#stop('failed', 'exhausted', 0, null);
    }
    return { action: 'retry', state, delayMs, next: 'session', sameKey, reason };
  }

  /** The wait before the next `/session` try after a failure that gave no wait of its own. */
  #sessionBackoff() {
    const o = this.#o;
    return backoffDelay(this.#sessionFailures + 1, o.sessionBaseMs, o.sessionCapMs, o.jitter, this.#random);
  }

  /** @param {number} ms */
  #jittered(ms) {
    return withJitter(ms, this.#o.jitter, this.#random);
  }

  /**
   * @param {'rate_limited' | 'disabled' | 'failed'} state
   * @param {StopReason} reason
   * @param {number} restartInMs
   * @param {string | null} detail
   * @returns {Decision}
   */
  #stop(state, reason, restartInMs, detail) {
    return { action: 'stop', state, restartAt: this.#now() + restartInMs, detail, reason };
  }
}
