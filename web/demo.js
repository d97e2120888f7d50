// @ts-check
/**
 * The demo page: a Start and a Stop button, the status line, the server's `detail` when it
 * refuses, the remote audio. Everything about sessions and retries is voice-client.js's.
 *
 * The API and Realtime origins (and the voice) come from the deployment's `config.json` beside
 * this script (config.js), never from the page's address: the Realtime origin receives the
 * client secret, so a link must not be able to choose it. Start stays disabled until the
 * configuration is read.
 */

import { loadConfig } from './config.js';
import { createVoiceClient, describeState } from './voice-client.js';

/** States in which Stop has something to stop. */
const ACTIVE = ['connecting', 'connected', 'reconnecting', 'waiting'];

const status = element('status', HTMLElement);
const detail = element('detail', HTMLElement);
const start = element('start', HTMLButtonElement);
const stop = element('stop', HTMLButtonElement);
const audio = element('remote', HTMLAudioElement);

/** @type {import('./config.js').PageConfig} */
let config;
try {
  config = await loadConfig({ url: new URL('config.json', import.meta.url) });
} catch (e) {
  status.textContent = 'This page is not set up correctly. Reload it later.';
  status.dataset.state = 'misconfigured';
  detail.textContent = e instanceof Error ? e.message : '';
  detail.hidden = false;
  throw e;
}

const client = createVoiceClient({
  api: config.api,
  realtime: config.realtime,
  voice: config.voice,
  audio,
  onState: render,
});

start.addEventListener('click', () => client.start());
stop.addEventListener('click', () => client.stop());
render(client.state);

// For browser tests and for a look from the console: the client, its state and its call, and
// the origins it uses.
Object.assign(window, { tollgateVoice: client, tollgateConfig: config });

/** @param {import('./voice-client.js').VoiceState} state */
function render(state) {
  status.textContent = describeState(state);
  status.dataset.state = state.name;
  detail.textContent = state.detail ?? '';
  detail.hidden = !state.detail;
  // A refusal's wait is enforced by the client too; the button only shows it.
  start.disabled = !state.canStart;
  stop.disabled = !ACTIVE.includes(state.name);
}

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {{ new (): T }} type
 * @returns {T}
 */
function element(id, type) {
  const found = document.getElementById(id);
  if (!(found instanceof type)) throw new Error(`the page has no #${id}`);
  return found;
}
