"use strict";
// One client process of the peer bench: holds its share of the subscribers of one system and
// runs the bench's commands on them (JSON lines on stdin, one JSON line back each).
//
//   connect {system, url, n, topic, stream?}  subscribe n clients to topic
//   arm {expected, record}                    count from 0 until each client holds `expected`
//                                             changes; `record` also times each change
//   collect {timeout}                         wait for that (at most `timeout` s), summary
//   close {}                                  close every client
//
// Systems: rspush (ws, subscribe message, JSON frames), socketio (socket.io-client, room per
// topic), nats (core subscription on bench.<topic>), jetstream (a durable pull consumer per
// client on bench.<topic>, explicit acks). Every client counts the changes of what it receives
// the same way (the position mark that starts each change) and records, per change, receive
// time - acceptance time and receive time - the change's datetime (the publish-call start).

const WebSocket = require("ws");
const { io } = require("socket.io-client");
const nats = require("nats");
const { MARK, nowMs, parseW3c, countMarks, serveCommands } = require("./common.js");

const CONNECT_CONCURRENCY = 32;

class Subscriber {
  constructor(owner) {
    this.owner = owner;
    this.got = 0;
    this.frames = 0;
    this.done = null;
    this.closed = null;
  }

  onData(data, acceptMs) {
    const now = nowMs();
    const owner = this.owner;
    const count = countMarks(data);
    this.frames += 1;
    this.got += count;
    if (owner.record) owner.time(now, data, acceptMs);
    if (this.done === null && owner.expected !== null && this.got >= owner.expected) {
      this.done = now;
      owner.oneDone();
    }
  }
}

class Pool {
  constructor() {
    this.subscribers = [];
    this.expected = null;
    this.record = false;
    this.accept = [];
    this.e2e = [];
    this.parsed = new Map();
    this.remaining = 0;
    this.finish = null;
  }

  /** Per change: receive - acceptance, receive - datetime. Every client gets the same
   * frames: each distinct frame is parsed once (keyed by its first position). */
  time(now, data, acceptMs) {
    const text = typeof data === "string" ? data : Buffer.from(data.buffer, data.byteOffset, data.length).toString();
    const at = text.indexOf(MARK) + MARK.length;
    const key = text.slice(at, text.indexOf('"', at));
    let changes = this.parsed.get(key);
    if (changes === undefined) {
      const frame = JSON.parse(text);
      changes = frame.changes.map((c) => [Number(c.position.split("-")[0]), parseW3c(c.datetime)]);
      this.parsed.set(key, changes);
    }
    for (const [accepted, posted] of changes) {
      this.accept.push(now - (acceptMs === undefined ? accepted : acceptMs));
      this.e2e.push(now - posted);
    }
  }

  oneDone() {
    this.remaining -= 1;
    if (this.remaining === 0 && this.finish) this.finish();
  }

  async connect({ system, url, n, topic, stream }) {
    const started = nowMs();
    const made = [];
    let next = 0;
    const worker = async () => {
      while (next < n) {
        const index = next++;
        made.push(await this.open(system, url, topic, stream, index));
      }
    };
    await Promise.all(Array.from({ length: Math.min(n, CONNECT_CONCURRENCY) }, worker));
    this.subscribers.push(...made);
    return { n: this.subscribers.length, seconds: (nowMs() - started) / 1000 };
  }

  open(system, url, topic, stream, index) {
    const sub = new Subscriber(this);
    if (system === "rspush") return this.openRspush(sub, url, topic);
    if (system === "socketio") return this.openSocketio(sub, url, topic);
    if (system === "nats") return this.openNats(sub, url, topic);
    if (system === "jetstream") return this.openJetstream(sub, url, topic, stream, index);
    throw new Error(`unknown system ${system}`);
  }

  openRspush(sub, url, topic) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 0 });
      let subscribed = false;
      ws.on("open", () => {
        ws.send(JSON.stringify({ type: "subscribe", version: 1, format: "json", topics: [{ topic }] }));
      });
      ws.on("message", (data) => {
        if (!subscribed) {
          if (!data.includes('"subscribed"')) return reject(new Error(`not subscribed: ${data.slice(0, 200)}`));
          subscribed = true;
          return resolve(sub);
        }
        sub.onData(data);
      });
      ws.on("close", (code) => {
        sub.closed = code;
      });
      ws.on("error", reject);
      sub.close = () =>
        new Promise((done) => {
          if (ws.readyState === WebSocket.CLOSED) return done();
          ws.once("close", done);
          ws.close();
          setTimeout(() => (ws.terminate(), done()), 5000).unref();
        });
    });
  }

  openSocketio(sub, url, topic) {
    return new Promise((resolve, reject) => {
      const socket = io(url, { transports: ["websocket"], forceNew: true, reconnection: false, query: { topic } });
      socket.once("subscribed", () => resolve(sub));
      socket.on("changes", (payload) => sub.onData(payload));
      socket.on("connect_error", reject);
      socket.on("disconnect", (reason) => {
        sub.closed = reason;
      });
      sub.close = async () => socket.close();
    });
  }

  async openNats(sub, url, topic) {
    const nc = await nats.connect({ servers: url, maxReconnectAttempts: 0 });
    nc.subscribe(`bench.${topic}`, { callback: (err, msg) => err || sub.onData(msg.data) });
    await nc.flush(); // the subscription is registered at the server
    sub.close = () => nc.close();
    return sub;
  }

  async openJetstream(sub, url, topic, stream, index) {
    const nc = await nats.connect({ servers: url, maxReconnectAttempts: 0 });
    const jsm = await nc.jetstreamManager();
    const name = `sub-${process.pid}-${topic}-${index}`;
    await jsm.consumers.add(stream, {
      durable_name: name,
      ack_policy: nats.AckPolicy.Explicit,
      deliver_policy: nats.DeliverPolicy.New,
      filter_subject: `bench.${topic}`,
    });
    const consumer = await nc.jetstream().consumers.get(stream, name);
    const messages = await consumer.consume({ max_messages: 256 });
    (async () => {
      for await (const msg of messages) {
        sub.onData(msg.data, msg.info.timestampNanos / 1e6); // stored at the server
        msg.ack();
      }
    })().catch(() => {});
    sub.close = async () => {
      await messages.close().catch(() => {});
      await jsm.consumers.delete(stream, name).catch(() => {});
      await nc.close();
    };
    return sub;
  }

  arm({ expected, record }) {
    this.expected = expected;
    this.record = Boolean(record);
    this.accept = [];
    this.e2e = [];
    this.parsed.clear();
    this.remaining = 0;
    for (const sub of this.subscribers) {
      // Counted from 0 when the command arrives (the bench sends it before publishing).
      sub.got = 0;
      sub.frames = 0;
      sub.done = null;
      this.remaining += 1;
    }
    this.cpuStart = process.cpuUsage();
    return { armed: this.subscribers.length };
  }

  collect({ timeout }) {
    return new Promise((resolve) => {
      const cpuStart = this.cpuStart;
      const end = () => {
        clearTimeout(timer);
        this.finish = null;
        this.expected = null;
        const subs = this.subscribers;
        const cpu = process.cpuUsage(cpuStart);
        const done = subs.filter((s) => s.done !== null).map((s) => s.done / 1000);
        const result = {
          clients: subs.length,
          complete: done.length,
          got: subs.reduce((a, s) => a + s.got, 0),
          frames: subs.reduce((a, s) => a + s.frames, 0),
          last_done: done.length ? Math.max(...done) : null,
          closed: subs.filter((s) => s.closed !== null).length,
          cpu_s: (cpu.user + cpu.system) / 1e6,
        };
        if (this.record) {
          result.accept_ms = this.accept.map((v) => Math.round(v * 1000) / 1000);
          result.e2e_ms = this.e2e.map((v) => Math.round(v * 1000) / 1000);
        }
        this.record = false;
        resolve(result);
      };
      const timer = setTimeout(end, timeout * 1000);
      this.finish = end;
      if (this.remaining === 0) end();
    });
  }

  async close() {
    const subs = this.subscribers;
    this.subscribers = [];
    for (let first = 0; first < subs.length; first += 200) {
      await Promise.all(subs.slice(first, first + 200).map((s) => Promise.resolve(s.close()).catch(() => {})));
    }
    return { closed: subs.length };
  }
}

const pool = new Pool();
serveCommands({
  connect: (c) => pool.connect(c),
  arm: (c) => pool.arm(c),
  collect: (c) => pool.collect(c),
  close: () => pool.close(),
});
