// @ts-check
/**
 * Where the demo page sends its requests, read from the deployment and never from the page's
 * own address.
 *
 * The page sends `Authorization: Bearer <client secret>` to the Realtime origin, so whoever
 * picks that origin gets the secret. An earlier page took it (and the API's) from `?realtime=`
 * and `?api=`: a crafted link sent a person's secret anywhere the Content-Security-Policy let
 * it, which behind CloudFront was the CSP alone and with `Frontend=httpapi` (no CSP of ours)
 * nothing at all. Now the origins come from `config.json`, a same-origin file beside the page
 * that the deploy writes from the stack (the `PageConfig` output) and the dev server generates
 * from its own ports; the query string is not read at all.
 *
 * `config.json`: `{"api": "/api", "realtime": "https://api.openai.com"}`, both optional, plus an
 * optional `voice`. A missing file (404, or S3's 403 for a key it does not hold) gives the
 * defaults, which are right behind CloudFront: the API on our own origin and OpenAI. A file
 * that is there but wrong (not JSON, an unknown field, an origin that is not https) is an
 * error and the page does not start: a typo must not quietly fall back to the defaults.
 *
 * Pure logic plus one injected `fetch`, so the rules are unit-tested in Node.
 */

/**
 * @typedef {object} PageConfig
 * @property {string} api base URL of the API: a path on the page's own origin (`/api`) or an
 *   absolute URL (a function URL, an HTTP API), no trailing slash
 * @property {string} realtime the origin of OpenAI Realtime (`https://api.openai.com`)
 * @property {string | undefined} voice the voice to ask for; the server's default when absent
 */

/** @type {Readonly<PageConfig>} */
export const CONFIG_DEFAULTS = Object.freeze({
  api: '/api',
  realtime: 'https://api.openai.com',
  voice: undefined,
});

/** Why the page cannot start: its configuration file is there but unusable. */
export class ConfigError extends Error {
  name = 'ConfigError';
}

const FIELDS = new Set(['api', 'realtime', 'voice']);

/**
 * Checks a parsed `config.json` and fills in the defaults.
 * @param {unknown} value
 * @returns {PageConfig}
 * @throws {ConfigError}
 */
export function parseConfig(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ConfigError('config.json must hold a JSON object');
  }
  const fields = /** @type {Record<string, unknown>} */ (value);
  for (const name of Object.keys(fields)) {
    if (!FIELDS.has(name)) throw new ConfigError(`config.json: unknown field "${name}"`);
  }
  const { api, realtime, voice } = fields;
  return {
    api: api === undefined ? CONFIG_DEFAULTS.api : apiBase(api),
    realtime: realtime === undefined ? CONFIG_DEFAULTS.realtime : origin(realtime),
    voice: voice === undefined ? undefined : nonEmpty(voice, 'voice'),
  };
}

/**
 * Reads `config.json` at `url` (resolve it against the page's scripts, not the page's address).
 * @param {{ url: URL | string, fetch?: (url: string, init: RequestInit) => Promise<{
 *   status: number, text(): Promise<string> }> }} options
 * @returns {Promise<PageConfig>}
 * @throws {ConfigError} when the file cannot be read or is wrong
 */
export async function loadConfig({ url, fetch = (u, init) => globalThis.fetch(u, init) }) {
  let response;
  try {
    // A redirect would let another origin answer for ours: refused. Revalidated on each load,
    // so a new deploy's origins apply on the next reload.
    response = await fetch(String(url), { cache: 'no-cache', credentials: 'same-origin', redirect: 'error' });
  } catch {
    throw new ConfigError('config.json could not be read');
  }
  // S3 behind CloudFront answers 403 for a key it does not hold (the distribution may not list
  // the bucket): absent, like a 404.
  if (response.status === 404 || response.status === 403) return { ...CONFIG_DEFAULTS };
  if (response.status !== 200) throw new ConfigError(`config.json answered ${response.status}`);
  let value;
  try {
    value = JSON.parse(await response.text());
  } catch {
    throw new ConfigError('config.json is not JSON');
  }
  return parseConfig(value);
}

/**
 * A same-origin path (`/api`, not `//host`, which is another origin) or an absolute URL.
 * @param {unknown} value
 */
function apiBase(value) {
  const text = nonEmpty(value, 'api');
  if (text.startsWith('/') && !text.startsWith('//') && !text.includes('\\')) {
    if (/[?#]/.test(text)) throw new ConfigError('config.json: api must have no query or fragment');
    return trimSlash(text);
  }
  const url = absolute(text, 'api');
  if (url.search || url.hash) throw new ConfigError('config.json: api must have no query or fragment');
  return trimSlash(url.href);
}

/**
 * An origin and nothing else: scheme, host, optional port.
 * @param {unknown} value
 */
function origin(value) {
  const url = absolute(nonEmpty(value, 'realtime'), 'realtime');
  if (url.pathname !== '/' || url.search || url.hash) {
    throw new ConfigError('config.json: realtime must be an origin, without a path');
  }
  return url.origin;
}

/**
 * An absolute URL whose scheme keeps the secret off the wire in the clear: https, or http on
 * this machine (the dev stack). No user or password in it.
 * @param {string} text
 * @param {string} field
 */
function absolute(text, field) {
  let url;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError(`config.json: ${field} is not a URL`);
  }
  const local = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
  if (!(url.protocol === 'https:' || (url.protocol === 'http:' && local))) {
    throw new ConfigError(`config.json: ${field} must be https (http only on 127.0.0.1 or localhost)`);
  }
  if (url.username || url.password) throw new ConfigError(`config.json: ${field} must hold no credentials`);
  return url;
}

/**
 * @param {unknown} value
 * @param {string} field
 * @returns {string}
 */
function nonEmpty(value, field) {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new ConfigError(`config.json: ${field} must be a non-empty string`);
  }
  return value.trim();
}

/** @param {string} url */
function trimSlash(url) {
  return url.replace(/\/+$/, '');
}
