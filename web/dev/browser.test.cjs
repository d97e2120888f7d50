// The demo page in a real browser against the real local stack: Debian's headless Chromium
// (driven by playwright-core) with a fake microphone, the functions under `cargo lambda watch`,
// DynamoDB Local, and `web/dev/server.cjs` (the page with `/api`, and the OpenAI stand-in with a
// werift WebRTC peer). `cargo xtask test` starts the stack and runs this file
// (`node --test --test-concurrency=1`); the tests share the stack, so they run one after another
// and each starts from a reset: the `ip` counter of 127.0.0.1 emptied, the dev server's log and
// faults cleared.
//
// What counts is observed at the servers: `/api/session` requests as the dev server proxied
// them (with their Idempotency-Key and the function's status), the stand-in's calls and mints,
// and the counters in DynamoDB (through the `tollgate` CLI).
//
// The page takes its origins from the `config.json` each dev origin serves (its own `/api`, or
// the first origin's from the second; the stand-in for Realtime), as a deployed page takes
// them from the one the deploy wrote: the page's address carries no parameters.
//
// Environment (set by `cargo xtask test`): TOLLGATE_STACK_FILE, TOLLGATE_CLI, CHROMIUM,
// NODE_PATH (playwright-core), and SCREENSHOT_DIR to keep a picture of each state.
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const { execFileSync } = require("node:child_process");
const { chromium } = require("playwright-core");

const stack = JSON.parse(fs.readFileSync(process.env.TOLLGATE_STACK_FILE, "utf8"));
const web = new URL(stack.web_url);
const pageOrigin = web.origin;
const realtime = stack.web.realtime_url;
const second = new URL(stack.web.second_url);

/** The page as served with its API, or from another origin calling this origin's `/api`. */
function pageUrl(origin = pageOrigin) {
  return `${origin}/`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function control(change) {
  const r = await fetch(`${pageOrigin}/_dev/control`, { method: "POST", body: JSON.stringify(change) });
  assert.equal(r.status, 200);
}

async function serverLog() {
  return (await fetch(`${pageOrigin}/_dev/log`)).json();
}

function cli(...args) {
  const out = execFileSync(process.env.TOLLGATE_CLI, ["--json", ...args], {
    env: { ...process.env, TOLLGATE_STACK_FILE: process.env.TOLLGATE_STACK_FILE },
    encoding: "utf8",
  });
  return JSON.parse(out);
}

function ipCount() {
  return cli("limits", "show", "--function", "ephemeral-key", "--layer", "ip", "--key", "127.0.0.1").count;
}

async function killSwitch(enabled, message) {
  const r = await fetch(`${pageOrigin}/api/internal/kill-switch`, {
    method: "PUT",
    headers: { "content-type": "application/json", "x-internal-token": stack.internal_token },
    body: JSON.stringify({ function: "ephemeral-key", enabled, message }),
  });
  assert.equal(r.status, 200, await r.text());
}

/** Waits for `check` to return something truthy, polling; fails with `what` after `ms`. */
async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

let browser;

test.before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: [
      "--no-sandbox",
      "--use-fake-ui-for-media-stream",
      "--use-fake-device-for-media-stream",
      "--autoplay-policy=no-user-gesture-required",
      // Host candidates as addresses, not mDNS names the local peer cannot resolve.
      "--disable-features=WebRtcHideLocalIpsWithMdns",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
});

test.after(async () => {
  await browser?.close();
});

/**
 * A fresh page at `url`, with the counters and the dev server reset. With `clock`, the page's
 * timers run on Playwright's clock: time flows as usual until a test moves it on with
 * `page.clock.runFor`, which fires every timer due in that span at once (the page's own
 * waits, as [`quiet`] uses them), without the test waiting that long.
 */
async function open(t, url = pageUrl(), { clock = false } = {}) {
  cli("limits", "reset", "--function", "ephemeral-key", "--layer", "ip", "--key", "127.0.0.1");
  await control({ reset: true });
  const context = await browser.newContext();
  if (clock) await context.clock.install();
  const page = await context.newPage();
  const console = [];
  page.on("console", (m) => console.push(m.text()));
  t.after(async () => {
    if (t.diagnostic) t.diagnostic(`page console: ${console.slice(-10).join(" | ")}`);
    await context.close();
  });
  await page.goto(url);
  return page;
}

const state = (page) => page.locator("#status").getAttribute("data-state");
const detail = async (page) => (await page.locator("#detail").textContent()) || "";

/**
 * Moves the page's clock `ms` on (every timer due in that span fires) and returns the
 * `/api/session` requests the page started meanwhile: a page that would retry within `ms`
 * retries here. The short real wait lets a request a timer started reach the dev server's log.
 */
async function quiet(page, ms) {
  const started = [];
  const seen = (r) => r.url().endsWith("/api/session") && started.push(r.method());
  page.on("request", seen);
  await page.clock.runFor(ms);
  await sleep(1_000);
  page.off("request", seen);
  return started;
}

async function waitState(page, wanted, ms) {
  await until(`#status data-state=${wanted}`, async () => (await state(page)) === wanted, ms);
}

async function screenshot(page, name) {
  const dir = process.env.SCREENSHOT_DIR;
  if (dir) await page.screenshot({ path: path.join(dir, `${name}.png`) });
}

/** Inbound audio packets on the page's current call. */
async function audioPackets(page) {
  return page.evaluate(async () => {
    const pc = window.tollgateVoice && window.tollgateVoice.peerConnection;
    if (!pc) return 0;
    let packets = 0;
    (await pc.getStats()).forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "audio") packets += s.packetsReceived || 0;
    });
    return packets;
  });
}

test("start: connected, one call with the minted secret, remote audio arrives", async (t) => {
  const page = await open(t);
  await page.click("#start");
  await waitState(page, "connected");
  const log = await serverLog();
  assert.equal(log.sessions.length, 1);
  assert.equal(log.sessions[0].status, 200);
  assert.match(log.sessions[0].key, /^[0-9a-f-]{36}$/, "a UUID Idempotency-Key");
  assert.equal(log.calls.length, 1);
  assert.equal(log.calls[0].status, 201);
  assert.equal(log.calls[0].secret, log.sessions[0].secret, "the call carries the secret /session gave");
  await until("remote audio packets", async () => (await audioPackets(page)) > 0);
  await until("the oai-events channel", async () => (await serverLog()).calls[0].channel === "oai-events");
  await screenshot(page, "connected");
  await page.click("#stop");
  await waitState(page, "stopped");
});

test("a dropped call reconnects after at least 3 s with the secret it holds: no second session", async (t) => {
  const page = await open(t);
  await control({ dropCallsAfterMs: 1500 });
  await page.click("#start");
  await waitState(page, "connected");
  await waitState(page, "reconnecting", 10_000);
  await screenshot(page, "reconnecting");
  const log = await until("a second call", async () => {
    const l = await serverLog();
    return l.calls.length >= 2 && l;
  });
  const dropped = log.calls[0].dropped;
  assert.ok(dropped, "the stand-in dropped the first call");
  assert.ok(log.calls[1].t - dropped >= 3000, `reconnected ${log.calls[1].t - dropped} ms after the drop`);
  assert.equal(log.calls[1].secret, log.calls[0].secret, "the same, unexpired secret");
  assert.equal(log.sessions.length, 1, "no second /session for a reconnect");
  assert.equal(log.mints.length, 1);
  assert.equal(ipCount(), 1, "one quota unit");
  await page.click("#stop");
});

test("the third session of the window gets 429: the page shows the wait and sends nothing more", async (t) => {
  const page = await open(t, pageUrl(), { clock: true });
  // Secrets that do not outlive a reconnect's wait: each reconnect needs a new session.
  await control({ dropCallsAfterMs: 1000, secretLifetimeS: 5 });
  await page.click("#start");
  await waitState(page, "rate_limited", 30_000);
  await screenshot(page, "rate-limited");
  const d = await detail(page);
  assert.match(d, /\d/, `the wait is shown: ${d}`);
  const before = (await serverLog()).sessions;
  assert.deepEqual(before.map((s) => s.status), [200, 200, 429]);
  // The page's time moved on to just before the 429's Retry-After (at most ten minutes; the
  // sliding hour keeps the two units for half an hour or more): every wait it set fires, and
  // nothing more is sent.
  const wait = Math.min(10 * 60_000, before[2].retryAfter * 1000 - 5_000);
  assert.ok(wait >= 60_000, `Retry-After ${before[2].retryAfter} s`);
  assert.deepEqual(await quiet(page, wait), [], "the page started no request after the 429");
  const after = (await serverLog()).sessions;
  assert.equal(after.length, before.length, "no request to /session after the 429");
  assert.equal(await state(page), "rate_limited");
  assert.ok(await page.locator("#start").isDisabled(), "no manual restart before Retry-After");
  assert.equal(ipCount(), 2, "the counter stays at the limit");
});

test("kill switch on: the operator's message is shown and nothing more is sent", async (t) => {
  const page = await open(t, pageUrl(), { clock: true });
  const message = "Voice is paused for maintenance until 14:00 UTC.";
  await killSwitch(true, message);
  t.after(() => killSwitch(false));
  await page.click("#start");
  await waitState(page, "disabled");
  assert.equal((await detail(page)).trim(), message);
  await screenshot(page, "disabled");
  const sent = (await serverLog()).sessions.length;
  assert.equal(sent, 1);
  assert.deepEqual(await quiet(page, 10 * 60_000), [], "no request in ten minutes of the page's time");
  assert.equal((await serverLog()).sessions.length, sent, "no further request");
});

test("upstream failing: attempts are at least Retry-After apart, then the page connects", async (t) => {
  const page = await open(t);
  await control({ failMints: { status: 500, count: 2 } });
  await page.click("#start");
  await waitState(page, "connected", 40_000);
  const sessions = (await serverLog()).sessions;
  assert.ok(sessions.length >= 2, JSON.stringify(sessions));
  for (let i = 1; i < sessions.length; i++) {
    const prev = sessions[i - 1];
    if (prev.status !== 503) continue;
    const gap = sessions[i].t - prev.t;
    assert.ok(gap >= prev.retryAfter * 1000, `attempt ${i} came ${gap} ms after a 503 with Retry-After ${prev.retryAfter}`);
  }
  assert.equal(sessions.at(-1).status, 200);
  await page.click("#stop");
});

test("a lost /session answer: the retry carries the same key and gets the same secret, one unit used", async (t) => {
  const page = await open(t);
  await control({ loseNextSessionAnswer: true });
  await page.click("#start");
  await waitState(page, "connected", 30_000);
  const sessions = (await serverLog()).sessions;
  assert.equal(sessions.length, 2, JSON.stringify(sessions));
  assert.ok(sessions[0].lost);
  assert.equal(sessions[1].key, sessions[0].key, "the same attempt, the same key");
  assert.equal(sessions[1].replayed, true, "Idempotent-Replayed: true");
  assert.equal(sessions[1].secret, sessions[0].secret);
  assert.equal(ipCount(), 1, "one quota unit");
  await page.click("#stop");
});

test("a /calls outage with Retry-After: the page waits it out with its one secret", async (t) => {
  const page = await open(t);
  await control({ refuseCalls: { status: 503, retryAfter: 4, count: 2 } });
  await page.click("#start");
  await waitState(page, "waiting", 10_000);
  assert.match(await page.locator("#status").textContent(), /trying again in \d+ s/);
  await waitState(page, "connected", 40_000);
  const log = await serverLog();
  assert.deepEqual(log.calls.map((c) => c.status), [503, 503, 201]);
  for (let i = 1; i < log.calls.length; i++) {
    const gap = log.calls[i].t - log.calls[i - 1].t;
    assert.ok(gap >= 4000, `call ${i + 1} came ${gap} ms after a 503 with Retry-After 4`);
    assert.equal(log.calls[i].secret, log.calls[0].secret, "every try carries the same secret");
  }
  assert.equal(log.sessions.length, 1, JSON.stringify(log.sessions));
  assert.equal(log.mints.length, 1, "one secret minted for the whole outage");
  assert.equal(ipCount(), 1, "one quota unit");
  await page.click("#stop");
});

test("a gateway's 504 after the mint: the retry carries the same key and gets the same secret", async (t) => {
  const page = await open(t);
  await control({ nextSessionAnswer: 504 });
  await page.click("#start");
  await waitState(page, "connected", 30_000);
  const log = await serverLog();
  const sessions = log.sessions;
  assert.equal(sessions.length, 2, JSON.stringify(sessions));
  assert.equal(sessions[0].gateway, 504);
  assert.equal(sessions[1].key, sessions[0].key, "the same key after a gateway's 504");
  assert.equal(sessions[1].replayed, true, "Idempotent-Replayed: true");
  assert.equal(sessions[1].secret, sessions[0].secret);
  assert.equal(log.mints.length, 1);
  assert.equal(ipCount(), 1, "one quota unit");
  await page.click("#stop");
});

test("a crafted link cannot choose where the page sends its requests and the secret", async (t) => {
  // Another origin that would take the secret: it counts whatever reaches it.
  const hits = [];
  const evil = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url} ${req.headers.authorization || ""}`);
    res.writeHead(204, { "access-control-allow-origin": "*", "access-control-allow-headers": "*" });
    res.end();
  });
  await new Promise((resolve) => evil.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => evil.close(resolve)));
  const evilOrigin = `http://127.0.0.1:${evil.address().port}`;
  const links = [
    `?realtime=${encodeURIComponent(evilOrigin)}`,
    `?api=${encodeURIComponent(`${evilOrigin}/api`)}&voice=x`,
  ];
  for (const query of links) {
    const page = await open(t, `${pageOrigin}/${query}`);
    const requested = [];
    page.on("request", (r) => requested.push(r.url()));
    await until("the Start button", async () => !(await page.locator("#start").isDisabled()));
    await page.click("#start");
    await until(`${query}: connected, or a request elsewhere`, async () => hits.length > 0 || (await state(page)) === "connected");
    assert.deepEqual(hits, [], `${query}: nothing reaches the origin in the link`);
    assert.deepEqual(requested.filter((u) => u.startsWith(evilOrigin)), [], query);
    const log = await serverLog();
    assert.equal(log.sessions.length, 1, `${query}: POST /api/session on the page's own origin`);
    assert.equal(log.calls.length, 1, `${query}: the offer went to the configured Realtime origin`);
    assert.equal(log.calls[0].secret, log.sessions[0].secret);
    const config = await page.evaluate(() => ({ api: window.tollgateConfig.api, realtime: window.tollgateConfig.realtime }));
    assert.deepEqual(config, { api: "/api", realtime }, "the origins of the page's config.json");
    await page.click("#stop");
  }
});

test("cross-origin: a listed origin works, another is blocked by the browser", async (t) => {
  const listed = await open(t, pageUrl(second.origin));
  await listed.click("#start");
  await waitState(listed, "connected");
  assert.equal((await serverLog()).sessions[0].origin, second.origin);
  await listed.click("#stop");

  // The same server under another name is another origin, not in CORS_ALLOWED_ORIGINS.
  const other = `http://localhost:${second.port}`;
  const blocked = await open(t, pageUrl(other));
  await blocked.click("#start");
  // The refused preflight makes the page's fetch throw, as a lost answer does: it says so and
  // waits to try again with the same key. By then the POST would have reached the server.
  await waitState(blocked, "reconnecting");
  assert.equal((await serverLog()).sessions.length, 0, "the browser never sent the POST");
  await blocked.click("#stop").catch(() => {});
});
