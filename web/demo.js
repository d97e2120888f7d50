// @ts-check
/**
 * The demo page: a Start and a Stop button, the status line, the server's `detail` when it
 * refuses, the remote audio. Everything about sessions and retries is voice-client.js's.
 *
 * Query parameters (for local runs and tests; the deployed Content-Security-Policy allows
 * connections only to our origin and the Realtime endpoint, whatever they say):
 * `api` (default `/api`), `realtime` (default `https://api.openai.com`), `voice` (optional).
 */

import { createVoiceClient, describeState } from './voice-client.js';

/** States in which Stop has something to stop. */
const ACTIVE = ['connecting', 'connected', 'reconnecting', 'waiting'];

const params = new URLSearchParams(window.location.search);
const status = element('status', HTMLElement);
const detail = element('detail', HTMLElement);
const start = element('start', HTMLButtonElement);
const stop = element('stop', HTMLButtonElement);
const audio = element('remote', HTMLAudioElement);

const client = createVoiceClient({
  api: params.get('api') || '/api',
  realtime: params.get('realtime') || 'https://api.openai.com',
  voice: params.get('voice') || undefined,
  audio,
  onState: render,
});

start.addEventListener('click', () => client.start());
stop.addEventListener('click', () => client.stop());
render(client.state);

// For browser tests and for a look from the console: the client, its state and its call.
Object.assign(window, { tollgateVoice: client });

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
