"use strict";
// The publisher of the peer bench, one process for every system (JSON lines on stdin):
//
//   setup {system, url, token?, stream?}   connect (rspush: a keep-alive HTTP connection)
//   burst {topic, messages, per}           `messages` messages of `per` changes, one after the
//                                          other, each publish call awaited (prepared first)
//                                          and timed
//   paced {topic, messages, per, rate}     `per` changes every per/rate s (datetime = now),
//                                          each call awaited; late calls counted
//
// rspush: POST the changes as a Change List fragment, as a Source does, answered 202 once
// accepted. Peers: the same changes as the JSON frame an rspush subscriber gets — Socket.IO
// emitWithAck to the server (acked once its broadcast is under way), NATS core publish +
// flush (the server has read it), JetStream publish (PubAck: stored in the stream).

const http = require("node:http");
const { io } = require("socket.io-client");
const nats = require("nats");
const { nowMs, change, fragment, jsonFrame, serveCommands } = require("./common.js");

let target = null;
let seq = 0;
let clock = nowMs() - 3600 * 1000;

function nextChanges(per, when) {
  const changes = [];
  for (let i = 0; i < per; i++) {
    // Strictly increasing change times, as one Source's changes are.
    clock = Math.max(when === undefined ? clock + 0.01 : when, clock + 0.001);
    changes.push(change(seq + i, clock));
  }
  return changes;
}

async function setupRspush({ url, token }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const base = new URL(url);
  return {
    encode: (topic, changes) => fragment(changes),
    publish: (topic, body) =>
      new Promise((resolve, reject) => {
        const request = http.request(
          {
            agent,
            host: base.hostname,
            port: base.port,
            method: "POST",
            path: `/topics/${topic}/changes`,
            headers: {
              Authorization: `Bearer ${token}`,
              "Content-Type": "application/xml",
              "Content-Length": body.length,
            },
          },
          (response) => {
            const parts = [];
            response.on("data", (d) => parts.push(d));
            response.on("end", () =>
              response.statusCode === 202
                ? resolve()
                : reject(new Error(`POST ${response.statusCode} ${Buffer.concat(parts).slice(0, 300)}`)),
            );
          },
        );
        request.on("error", reject);
        request.end(body);
      }),
    close: async () => agent.destroy(),
  };
}

async function setupSocketio({ url }) {
  const socket = io(url, { transports: ["websocket"], forceNew: true });
  await new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("connect_error", reject);
  });
  return {
    encode: (topic, changes) => jsonFrame(topic, changes, Math.floor(nowMs()), seq),
    publish: (topic, payload) => socket.timeout(30000).emitWithAck("publish", topic, payload),
    close: async () => socket.close(),
  };
}

async function setupNats({ url }) {
  const nc = await nats.connect({ servers: url });
  return {
    encode: (topic, changes) => Buffer.from(jsonFrame(topic, changes, Math.floor(nowMs()), seq)),
    publish: async (topic, payload) => {
      nc.publish(`bench.${topic}`, payload);
      await nc.flush();
    },
    close: () => nc.close(),
  };
}

async function setupJetstream({ url, stream }) {
  const nc = await nats.connect({ servers: url });
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({
    name: stream,
    subjects: ["bench.>"],
    storage: nats.StorageType.File,
    retention: nats.RetentionPolicy.Limits,
  });
  const js = nc.jetstream();
  return {
    encode: (topic, changes) => Buffer.from(jsonFrame(topic, changes, Math.floor(nowMs()), seq)),
    publish: (topic, payload) => js.publish(`bench.${topic}`, payload),
    close: () => nc.close(),
  };
}

const SETUP = { rspush: setupRspush, socketio: setupSocketio, nats: setupNats, jetstream: setupJetstream };

async function burst({ topic, messages, per }) {
  const payloads = [];
  for (let m = 0; m < messages; m++) {
    payloads.push(target.encode(topic, nextChanges(per)));
    seq += per;
  }
  const calls = [];
  const started = nowMs();
  for (const payload of payloads) {
    const t0 = performance.now();
    await target.publish(topic, payload);
    calls.push(performance.now() - t0);
  }
  return { started: started / 1000, finished: nowMs() / 1000, call_ms: calls };
}

async function paced({ topic, messages, per, rate }) {
  const interval = (per / rate) * 1000;
  const calls = [];
  let late = 0;
  const start = performance.now() + 50;
  for (let m = 0; m < messages; m++) {
    const delay = start + m * interval - performance.now();
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    else late += 1;
    // The change datetime is the publish-call start: end to end = receive - datetime.
    const payload = target.encode(topic, nextChanges(per, nowMs()));
    seq += per;
    const t0 = performance.now();
    await target.publish(topic, payload);
    calls.push(performance.now() - t0);
  }
  const seconds = (performance.now() - start) / 1000;
  return { call_ms: calls, late, rate: (messages * per) / seconds };
}

serveCommands({
  setup: async (c) => {
    target = await SETUP[c.system](c);
    return { ok: true };
  },
  burst,
  paced,
  close: async () => {
    if (target) await target.close();
    target = null;
    return { ok: true };
  },
});
