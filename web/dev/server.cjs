// The local stand-ins a browser needs, in one Node process (`cargo xtask dev` and the browser
// tests start it; nothing here is deployed):
//
// - the page: `web/` served as static files, and `/api/*` proxied to the functions under
//   `cargo lambda watch`, so page and API share one origin as they do behind CloudFront
//   (`--port`); optionally the same page from a second origin with no API of its own, for the
//   cross-origin test (`--second-port`). Each origin serves its own `config.json`, made here
//   from the ports as the deploy makes the real one from the stack: `{"api": "/api"}` on the
//   first, the first origin's `/api` on the second, and `realtime` the stand-in (or
//   `--realtime-origin`, e.g. https://api.openai.com when the functions mint real secrets).
//   The page reads its origins from that file only, never from its query string;
// - OpenAI, on its own origin as in production (`--realtime-port`):
//   `POST /v1/realtime/client_secrets` (what the ephemeral-key function calls) mints
//   `ek_local_…` secrets and remembers them; `POST /v1/realtime/calls` (what the browser calls)
//   accepts only an unexpired secret it minted, answers the SDP offer with a real WebRTC peer
//   (werift), opens `oai-events` with a `session.created` event and echoes the caller's audio
//   back (Chromium's fake microphone is a tone);
// - a control and log API for tests on the page origin (`/_dev/control`, `/_dev/log`): drop each
//   call after N ms (the idle close that started lesson 000), refuse calls with a status and
//   `Retry-After` (401, 429, a 503 outage), fail the mints with a status and `Retry-After`, mint
//   secrets of a given lifetime, lose the next `/api/session` answer after the function gave it
//   or replace it with a gateway's 502/504; and every `/api/session` request, call and mint with
//   a timestamp.
//
// CommonJS, because its two packages (werift) come from `NODE_PATH` (the cache dir `cargo xtask
// setup` installs into), which ES module resolution ignores.
"use strict";

const http = require("node:http");
const fs = require("node:fs");
const path = require("node:path");
const crypto = require("node:crypto");
const { RTCPeerConnection } = require("werift");

const WEB_ROOT = path.resolve(__dirname, "..");
/** Page files served; anything else under web/ (tests, package files, this dir) is not. */
const PAGE_FILES = new Set(["/index.html", "/demo.js", "/config.js", "/voice-client.js", "/retry.js", "/style.css"]);
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8" };
const MAX_BODY = 256 * 1024;

function parseArgs(argv) {
  const opts = { port: 0, secondPort: null, realtimePort: 0, realtimeOrigin: null, functions: null };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    switch (flag) {
      case "--port": opts.port = Number(value); break;
      case "--second-port": opts.secondPort = Number(value); break;
      case "--realtime-port": opts.realtimePort = Number(value); break;
      case "--realtime-origin": opts.realtimeOrigin = new URL(value).origin; break;
      case "--functions": opts.functions = value.replace(/\/$/, ""); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!opts.functions) throw new Error("--functions http://127.0.0.1:<cargo lambda watch port> is required");
  return opts;
}

/** What tests may change while the server runs, and what it saw. */
const state = {
  control: {
    dropCallsAfterMs: null,
    refuseCalls: null, // {status, retryAfter, count}
    failMints: null, // {status, retryAfter, count}
    secretLifetimeS: null, // mint secrets living this long, whatever the function asked
    loseNextSessionAnswer: false,
    nextSessionAnswer: null, // a status (502, 504) sent instead of the function's next answer
  },
  log: { sessions: [], mints: [], calls: [] },
  secrets: new Map(), // value -> expires_at (s)
  peers: new Set(),
  minted: 0,
};

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new Error("body too large"));
        req.destroy();
      } else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function send(res, status, headers, body) {
  res.writeHead(status, headers);
  res.end(body);
}

function json(res, status, value, extra = {}) {
  send(res, status, { "content-type": "application/json", ...extra }, JSON.stringify(value));
}

// --- the page and the API proxy --------------------------------------------------------------

/**
 * The page server of one origin; `config` is that origin's `config.json`. A `config.json` in
 * web/ (a deploy's leftover) is never served: the dev stack's origins are its own ports.
 */
function pageServer(config) {
  const body = JSON.stringify(config);
  return (req, res) => {
    const { pathname } = new URL(req.url, "http://page");
    if (pathname === "/config.json" && (req.method === "GET" || req.method === "HEAD")) {
      return send(res, 200, { "content-type": "application/json", "cache-control": "no-store" }, body);
    }
    return servePage(req, res);
  };
}

function servePage(req, res) {
  const url = new URL(req.url, "http://page");
  const file = url.pathname === "/" ? "/index.html" : url.pathname;
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, { allow: "GET, HEAD" }, "");
  if (!PAGE_FILES.has(file)) return send(res, 404, { "content-type": "text/plain" }, "not found");
  fs.readFile(path.join(WEB_ROOT, file), (err, data) => {
    if (err) return send(res, 404, { "content-type": "text/plain" }, "not found");
    send(res, 200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream", "cache-control": "no-store" }, data);
  });
}

/** `/api/<rest>` to the function that serves it, as CloudFront's behaviours route it. */
function functionUrl(functions, pathname, search) {
  const rest = pathname.slice("/api".length);
  const fn = /^\/(transfers|accounts)(\/|$)/.test(rest) ? "transfer" : "ephemeral-key";
  return `${functions}/lambda-url/${fn}${rest}${search}`;
}

async function proxyApi(opts, req, res) {
  const url = new URL(req.url, "http://page");
  const body = await readBody(req);
  // Every field the browser sent, a repeated one joined with "," as API Gateway's payload 2.0
  // joins it (`req.headers` keeps only the first of some, e.g. `Authorization`); `cookie` with
  // "; ", as a function sees payload 2.0's `cookies`.
  const headers = {};
  for (const [k, v] of Object.entries(req.headersDistinct)) headers[k] = v.join(k === "cookie" ? "; " : ",");
  delete headers.host;
  delete headers.connection;
  const target = functionUrl(opts.functions, url.pathname, url.search);
  const isSession = url.pathname === "/api/session" && req.method === "POST";
  const entry = isSession
    ? { t: Date.now(), key: req.headers["idempotency-key"] || null, origin: req.headers.origin || null }
    : null;
  if (entry) state.log.sessions.push(entry);
  let answer;
  try {
    answer = await fetch(target, { method: req.method, headers, body: ["GET", "HEAD"].includes(req.method) ? undefined : body });
  } catch (e) {
    return send(res, 502, { "content-type": "text/plain" }, `dev server: the functions did not answer (${e.name})`);
  }
  const out = Buffer.from(await answer.arrayBuffer());
  if (entry) {
    entry.status = answer.status;
    entry.retryAfter = Number(answer.headers.get("retry-after")) || null;
    entry.replayed = answer.headers.get("idempotent-replayed") === "true";
    try {
      entry.secret = JSON.parse(out.toString("utf8")).client_secret || null;
    } catch {
      entry.secret = null;
    }
    if (state.control.loseNextSessionAnswer) {
      // The function answered; the answer never reaches the browser (a lost response).
      state.control.loseNextSessionAnswer = false;
      entry.lost = true;
      req.socket.destroy();
      return;
    }
    if (state.control.nextSessionAnswer) {
      // The function answered; a gateway in between answers with its own 502/504 instead
      // (CloudFront's origin timeout, a function URL whose invocation died after the mint).
      const status = state.control.nextSessionAnswer;
      state.control.nextSessionAnswer = null;
      entry.lost = true;
      entry.gateway = status;
      return send(res, status, { "content-type": "text/html" }, `<html><body>${status} from the dev server's gateway</body></html>`);
    }
  }
  const passed = {};
  answer.headers.forEach((v, k) => {
    if (!["content-length", "transfer-encoding", "connection", "content-encoding"].includes(k)) passed[k] = v;
  });
  send(res, answer.status, passed, out);
}

async function control(req, res) {
  const url = new URL(req.url, "http://page");
  if (url.pathname === "/_dev/log" && req.method === "GET") return json(res, 200, state.log);
  if (url.pathname === "/_dev/control" && req.method === "POST") {
    const change = JSON.parse((await readBody(req)).toString("utf8") || "{}");
    if (change.reset) {
      state.log = { sessions: [], mints: [], calls: [] };
      state.control = {
        dropCallsAfterMs: null,
        refuseCalls: null,
        failMints: null,
        secretLifetimeS: null,
        loseNextSessionAnswer: false,
        nextSessionAnswer: null,
      };
      for (const pc of state.peers) await pc.close().catch(() => {});
      state.peers.clear();
    }
    for (const k of Object.keys(state.control)) if (k in change) state.control[k] = change[k];
    return json(res, 200, state.control);
  }
  return send(res, 404, { "content-type": "text/plain" }, "not found");
}

// --- OpenAI ------------------------------------------------------------------------------------

/**
 * The browser calls `/v1/realtime/calls` from the page's origin, as it calls api.openai.com.
 * `Retry-After` is exposed so the page can honour it; whether the real provider exposes it is
 * not something the page relies on (without it the page waits its own back-off, 60 s at least
 * after a 429).
 */
const OPENAI_CORS = {
  "access-control-allow-origin": "*",
  "access-control-allow-headers": "Authorization, Content-Type",
  "access-control-allow-methods": "POST",
  "access-control-expose-headers": "Location, Retry-After",
};

function takeCount(rule) {
  if (!rule) return null;
  if (rule.count !== undefined) {
    if (rule.count <= 0) return null;
    rule.count -= 1;
  }
  return rule;
}

async function mint(req, res) {
  const body = await readBody(req);
  const now = Date.now();
  const entry = { t: now };
  state.log.mints.push(entry);
  const fail = takeCount(state.control.failMints);
  if (fail) {
    entry.status = fail.status;
    const extra = fail.retryAfter ? { "retry-after": String(fail.retryAfter) } : {};
    return json(res, fail.status, { error: { message: "stand-in: failing on purpose", type: "server_error" } }, extra);
  }
  if (!/^Bearer \S+/.test(req.headers.authorization || "")) {
    entry.status = 401;
    return json(res, 401, { error: { message: "missing API key", type: "invalid_request_error" } });
  }
  let asked = {};
  try {
    asked = JSON.parse(body.toString("utf8"));
  } catch {
    entry.status = 400;
    return json(res, 400, { error: { message: "not JSON", type: "invalid_request_error" } });
  }
  const seconds = state.control.secretLifetimeS ?? (Number(asked?.expires_after?.seconds) || 600);
  state.minted += 1;
  const value = `ek_local_${state.minted}_${crypto.randomBytes(12).toString("hex")}`;
  const expires_at = Math.floor(now / 1000) + seconds;
  state.secrets.set(value, expires_at);
  entry.status = 200;
  entry.secret = value;
  json(res, 200, { value, expires_at, session: asked.session || {} });
}

/** Waits until werift has gathered its candidates, so the answer carries them (no trickle). */
function gathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const sub = pc.iceGatheringStateChange.subscribe((s) => {
      if (s === "complete") {
        sub.unSubscribe();
        resolve();
      }
    });
    setTimeout(resolve, 3000);
  });
}

async function call(req, res) {
  if (req.method === "OPTIONS") return send(res, 204, OPENAI_CORS, "");
  const offer = (await readBody(req)).toString("utf8");
  const entry = { t: Date.now() };
  state.log.calls.push(entry);
  const secret = (req.headers.authorization || "").replace(/^Bearer /, "");
  entry.secret = secret;
  const refuse = takeCount(state.control.refuseCalls);
  const expires = state.secrets.get(secret);
  if (refuse) {
    entry.status = refuse.status;
    const extra = refuse.retryAfter ? { "retry-after": String(refuse.retryAfter) } : {};
    return json(res, refuse.status, { error: { message: "stand-in: refusing on purpose" } }, { ...OPENAI_CORS, ...extra });
  }
  if (!expires || expires * 1000 <= Date.now()) {
    entry.status = 401;
    return json(res, 401, { error: { message: "unknown or expired client secret" } }, OPENAI_CORS);
  }
  if (!(req.headers["content-type"] || "").startsWith("application/sdp") || !offer.startsWith("v=0")) {
    entry.status = 400;
    return json(res, 400, { error: { message: "expected an SDP offer (application/sdp)" } }, OPENAI_CORS);
  }
  const pc = new RTCPeerConnection({});
  state.peers.add(pc);
  const id = `rtc_${crypto.randomBytes(8).toString("hex")}`;
  entry.id = id;
  entry.candidates = (offer.match(/^a=candidate:.*$/gm) || []).map((c) => c.split(" ")[4]);
  const channels = [];
  pc.onDataChannel.subscribe((channel) => {
    channels.push(channel);
    entry.channel = channel.label;
    const hello = () => channel.send(JSON.stringify({ type: "session.created", event_id: `evt_${id}`, session: { id } }));
    if (channel.readyState === "open") hello();
    else channel.stateChanged.subscribe((s) => s === "open" && hello());
  });
  // Echo the caller's microphone back: a real RTP stream with frames, no encoder needed.
  pc.onTransceiverAdded.subscribe(async (transceiver) => {
    // Answer sendrecv (werift answers recvonly for a transceiver with no track yet).
    transceiver.setDirection("sendrecv");
    const [track] = await transceiver.onTrack.asPromise();
    entry.audio = true;
    await transceiver.sender.replaceTrack(track);
  });
  pc.connectionStateChange.subscribe((s) => {
    entry.state = s;
    if (s === "connected" && state.control.dropCallsAfterMs != null) {
      setTimeout(() => {
        entry.dropped = Date.now();
        // Close the channel first and the peer 2 s later: the SCTP stream reset reaches the
        // browser within about a second (a bare
        // close of werift's peer is noticed only by ICE consent, seconds later, as
        // "disconnected").
        for (const c of channels) c.close();
        setTimeout(() => pc.close().catch(() => {}), 2000);
      }, state.control.dropCallsAfterMs);
    }
  });
  try {
    await pc.setRemoteDescription({ type: "offer", sdp: offer });
    await pc.setLocalDescription(await pc.createAnswer());
    await gathered(pc);
  } catch (e) {
    entry.status = 400;
    pc.close().catch(() => {});
    return json(res, 400, { error: { message: `stand-in: cannot answer this offer (${e.name})` } }, OPENAI_CORS);
  }
  entry.status = 201;
  send(res, 201, { "content-type": "application/sdp", location: `/v1/realtime/calls/${id}`, ...OPENAI_CORS }, pc.localDescription.sdp);
}

function openai(req, res) {
  const { pathname } = new URL(req.url, "http://openai");
  if (pathname === "/v1/realtime/client_secrets" && req.method === "POST") return mint(req, res);
  if (pathname === "/v1/realtime/calls") return call(req, res);
  json(res, 404, { error: { message: "stand-in: no such route" } });
}

// --- start ---------------------------------------------------------------------------------------

function listen(handler, port) {
  const server = http.createServer((req, res) => {
    Promise.resolve(handler(req, res)).catch((e) => {
      if (!res.headersSent) send(res, 500, { "content-type": "text/plain" }, `dev server: ${e.name}`);
    });
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server)));
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  // The stand-in first: its port goes into the pages' config.json.
  const realtime = await listen(openai, opts.realtimePort);
  const url = (s) => `http://127.0.0.1:${s.address().port}`;
  const realtimeOrigin = opts.realtimeOrigin || url(realtime);
  const pageConfig = pageServer({ api: "/api", realtime: realtimeOrigin });
  const page = await listen((req, res) => {
    if (req.url.startsWith("/api/") || req.url === "/api") return proxyApi(opts, req, res);
    if (req.url.startsWith("/_dev/")) return control(req, res);
    return pageConfig(req, res);
  }, opts.port);
  // The second origin has no API of its own: its page calls the first origin's, cross-origin.
  const secondConfig = pageServer({ api: `${url(page)}/api`, realtime: realtimeOrigin });
  const second = opts.secondPort == null ? null : await listen(secondConfig, opts.secondPort);
  // One line on stdout that the caller waits for.
  console.log(JSON.stringify({ ready: true, web_url: `${url(page)}/`, second_url: second ? `${url(second)}/` : null, realtime_url: realtimeOrigin }));
  const stop = () => process.exit(0);
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  console.error(`dev server: ${e.message}`);
  process.exit(2);
});
