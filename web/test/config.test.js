// @ts-check
// The page's configuration: where it sends the API requests and the client secret. It comes
// from the deployment's config.json only, with safe defaults when the file is absent.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CONFIG_DEFAULTS, ConfigError, loadConfig, parseConfig } from '../config.js';

const URL_ = 'https://page.example/config.json';

/**
 * A fetch answering `status` with `body`, recording what it was asked.
 * @param {number} status
 * @param {string} body
 */
function serve(status, body) {
  /** @type {{ url: string, init: RequestInit }[]} */
  const asked = [];
  /** @param {string} url @param {RequestInit} init */
  const fetch = async (url, init) => {
    asked.push({ url, init });
    return { status, text: async () => body };
  };
  return { fetch, asked };
}

test('defaults: the API on our own origin, OpenAI for Realtime', () => {
  assert.deepEqual(parseConfig({}), { api: '/api', realtime: 'https://api.openai.com', voice: undefined });
  assert.deepEqual({ ...CONFIG_DEFAULTS }, parseConfig({}));
});

test('the deployment\'s values, normalised', () => {
  assert.deepEqual(
    parseConfig({ api: 'https://abc.execute-api.eu-west-1.amazonaws.com/', realtime: 'https://realtime.example:8443/', voice: 'cedar' }),
    { api: 'https://abc.execute-api.eu-west-1.amazonaws.com', realtime: 'https://realtime.example:8443', voice: 'cedar' },
  );
  assert.equal(parseConfig({ api: '/api/' }).api, '/api');
  assert.equal(parseConfig({ api: 'https://xyz.lambda-url.us-east-1.on.aws/prod' }).api, 'https://xyz.lambda-url.us-east-1.on.aws/prod');
  // The dev stack: plain http on this machine only.
  assert.equal(parseConfig({ realtime: 'http://127.0.0.1:9000' }).realtime, 'http://127.0.0.1:9000');
  assert.equal(parseConfig({ api: 'http://localhost:8080/api' }).api, 'http://localhost:8080/api');
});

test('a wrong value is an error, never a quiet default', () => {
  const wrong = [
    null,
    [],
    'https://api.openai.com',
    { realtme: 'https://api.openai.com' },
    { api: '' },
    { api: 42 },
    { api: '//evil.example/api' },
    { api: '/\\evil.example' },
    { api: 'api' },
    { api: '/api?x=1' },
    { api: 'http://evil.example/api' },
    { api: 'javascript:alert(1)' },
    { realtime: 'http://evil.example' },
    { realtime: 'https://api.openai.com/v1' },
    { realtime: 'https://api.openai.com/?x' },
    { realtime: 'https://user:pw@api.openai.com' },
    { realtime: 'api.openai.com' },
    { voice: '' },
    { voice: 1 },
  ];
  for (const value of wrong) {
    assert.throws(() => parseConfig(value), ConfigError, JSON.stringify(value));
  }
});

test('loadConfig: reads the file, same-origin, no redirect, revalidated', async () => {
  const { fetch, asked } = serve(200, '{"api": "/api", "realtime": "https://realtime.example"}');
  const config = await loadConfig({ url: new URL(URL_), fetch });
  assert.equal(config.realtime, 'https://realtime.example');
  assert.equal(asked.length, 1);
  assert.equal(asked[0].url, URL_);
  assert.equal(asked[0].init.redirect, 'error');
  assert.equal(asked[0].init.credentials, 'same-origin');
  assert.equal(asked[0].init.cache, 'no-cache');
});

test('loadConfig: no file (404, or S3\'s 403) gives the defaults', async () => {
  for (const status of [404, 403]) {
    const { fetch } = serve(status, '<Error><Code>AccessDenied</Code></Error>');
    assert.deepEqual(await loadConfig({ url: URL_, fetch }), { ...CONFIG_DEFAULTS });
  }
});

test('loadConfig: a file that cannot be read or used stops the page', async () => {
  for (const [status, body] of /** @type {const} */ ([
    [500, ''],
    [200, 'not json'],
    [200, '{"realtime": "http://evil.example"}'],
  ])) {
    const { fetch } = serve(status, body);
    await assert.rejects(loadConfig({ url: URL_, fetch }), ConfigError, `${status} ${body}`);
  }
  const failing = async () => {
    throw new TypeError('Failed to fetch');
  };
  await assert.rejects(loadConfig({ url: URL_, fetch: failing }), ConfigError);
});
