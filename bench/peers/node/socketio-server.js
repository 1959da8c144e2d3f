"use strict";
// The Socket.IO peer: Socket.IO 4.8 with the Redis Streams adapter on a valkey-server (the
// binary the rspush hub embeds, on a unix socket as the hub uses it) and connection-state
// recovery on, so that a client that reconnects gets what it missed, as rspush's resume does.
//
//   node socketio-server.js PORT REDIS_SOCKET_PATH
//
// A subscriber connects with ?topic=T, is put in room T and told "subscribed". A publisher
// emits ("publish", topic, payload, ack): the payload goes to room T through the adapter and
// the ack answers once the broadcast is under way. Prints {"port": PORT} once listening.

const http = require("node:http");
const { Server } = require("socket.io");
const { createAdapter } = require("@socket.io/redis-streams-adapter");
const { Redis } = require("ioredis");

async function main() {
  const [port, redisPath] = [Number(process.argv[2]), process.argv[3]];
  const redis = new Redis({ path: redisPath, lazyConnect: true });
  await redis.connect();
  const server = http.createServer();
  const io = new Server(server, {
    adapter: createAdapter(redis),
    connectionStateRecovery: { maxDisconnectionDuration: 2 * 60 * 1000 },
    serveClient: false,
    perMessageDeflate: false,
    maxHttpBufferSize: 50 * 1024 * 1024,
  });
  io.on("connection", (socket) => {
    const topic = socket.handshake.query.topic;
    if (topic) {
      socket.join(String(topic));
      socket.emit("subscribed", topic);
    }
    socket.on("publish", (room, payload, ack) => {
      io.to(room).emit("changes", payload);
      if (typeof ack === "function") ack("accepted");
    });
  });
  server.listen(port, "127.0.0.1", () => {
    process.stdout.write(JSON.stringify({ port }) + "\n");
  });
  const stop = () => {
    io.close();
    redis.disconnect();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((error) => {
  process.stderr.write(String((error && error.stack) || error) + "\n");
  process.exit(1);
});
