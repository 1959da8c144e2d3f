"use strict";
// What the peer bench's Node processes share: the JSON-lines command loop, the payloads every
// system publishes, and counting/timing the changes a client receives.

const crypto = require("node:crypto");
const readline = require("node:readline");

// Starts every change of a frame, for every system: counting it counts the changes.
const MARK = '{"position":"';
const MARK_BYTES = Buffer.from(MARK);
const DISTINCT = 10000;

/** Wall-clock milliseconds with sub-millisecond resolution (same clock as Python time.time()). */
function nowMs() {
  return performance.timeOrigin + performance.now();
}

/** A W3C datetime with microseconds, as the rspush bench fragments carry. */
function w3c(ms) {
  const whole = Math.floor(ms);
  const micros = Math.floor((ms - whole) * 1000);
  const iso = new Date(whole).toISOString(); // ...ss.mmmZ
  return iso.slice(0, 23) + String(micros).padStart(3, "0") + "Z";
}

/** Milliseconds since the epoch of a W3C datetime with up to microseconds. */
function parseW3c(text) {
  const dot = text.indexOf(".", 19);
  if (dot < 0) return Date.parse(text);
  const end = text.length - 1; // "Z"
  return Date.parse(text.slice(0, 19) + "Z") + Number("0" + text.slice(dot, end)) * 1000;
}

function change(n, when) {
  return {
    loc: `http://example.com/res${n % DISTINCT}`,
    change: "updated",
    datetime: w3c(when),
    hash: "md5:" + crypto.createHash("md5").update(String(n)).digest("hex"),
    length: n,
    type: "text/html",
  };
}

/** The Change List fragment a Source POSTs to the rspush hub. */
function fragment(changes) {
  const urls = changes
    .map(
      (c) =>
        `<url><loc>${c.loc}</loc><rs:md change="${c.change}" datetime="${c.datetime}" ` +
        `hash="${c.hash}" length="${c.length}" type="${c.type}"/></url>`,
    )
    .join("");
  return Buffer.from(
    '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" ' +
      'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="changelist"/>' +
      urls +
      "</urlset>",
  );
}

/** The same changes as the JSON frame an rspush subscriber receives; the publisher's own
 * stamp (integer ms, like a stream position) stands in for the position a hub assigns. */
function jsonFrame(topic, changes, stampMs, seq) {
  const body = changes
    .map((c, i) => MARK + `${stampMs}-${seq + i}",` + JSON.stringify(c).slice(1))
    .join(",");
  return `{"type":"changes","topic":"${topic}","changes":[${body}]}`;
}

function countMarks(data) {
  let count = 0;
  if (typeof data === "string") {
    for (let at = data.indexOf(MARK); at >= 0; at = data.indexOf(MARK, at + MARK.length)) count++;
  } else {
    const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length);
    for (let at = buf.indexOf(MARK_BYTES); at >= 0; at = buf.indexOf(MARK_BYTES, at + MARK_BYTES.length)) count++;
  }
  return count;
}

/** Serve JSON-lines commands on stdin with `handlers[cmd](command)`; one JSON line back each.
 * The process exits at the end of its stdin. */
function serveCommands(handlers, ready) {
  const reply = (value) => process.stdout.write(JSON.stringify(value) + "\n");
  const lines = readline.createInterface({ input: process.stdin });
  let queue = Promise.resolve();
  lines.on("line", (line) => {
    queue = queue.then(async () => {
      const command = JSON.parse(line);
      try {
        reply(await handlers[command.cmd](command));
      } catch (error) {
        reply({ error: String((error && error.stack) || error) });
      }
    });
  });
  lines.on("close", () => {
    queue.then(async () => {
      if (handlers.close) await handlers.close({}).catch(() => {});
      process.exit(0);
    });
  });
  Promise.resolve(ready).then(
    (value) => reply(value || { ready: true }),
    (error) => {
      reply({ error: String(error) });
      process.exit(1);
    },
  );
}

module.exports = { MARK, nowMs, w3c, parseW3c, change, fragment, jsonFrame, countMarks, serveCommands };
