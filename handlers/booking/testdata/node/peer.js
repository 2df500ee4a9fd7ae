// The Scheduler widget's side of a Socket.IO session, for the Go tests: the
// npm socket.io-client connects to the gateway, emits events with an ack and
// prints one JSON line with what came back. Driven by handlers/booking's
// gateway tests; not a tool.
//
//   node peer.js < plan.json
//
// plan: {
//   url:        "http://127.0.0.1:PORT",      the gateway
//   namespace:  "/booking-session",
//   auth:       {bookingSessionId: "…"},        the handshake's auth
//   transports: ["websocket"] | ["polling"],   optional; the client's default otherwise
//   emits:      [{event: "session-event", args: [ … ]}],  each awaited with an ack
//   timeoutMs:  10000                          per connect and per ack
// }
// prints: {connected: true, transport, acks: [ack | {timeout: true}]}
//      or {connectError: "message"}
"use strict";

const { io } = require("socket.io-client");

// The plan comes on stdin: an event over 1 MiB does not fit in an argument.
const plan = JSON.parse(require("fs").readFileSync(0, "utf8"));
const timeoutMs = plan.timeoutMs || 10000;

function done(result, code) {
	process.stdout.write(JSON.stringify(result) + "\n");
	process.exit(code);
}

const opts = { auth: plan.auth || {}, reconnection: false, timeout: timeoutMs, forceNew: true };
if (plan.transports) {
	opts.transports = plan.transports;
}
const socket = io(plan.url + (plan.namespace || "/"), opts);
const guard = setTimeout(() => done({ error: "no answer within " + timeoutMs + " ms" }, 1), 3 * timeoutMs);

socket.on("connect_error", (err) => {
	clearTimeout(guard);
	socket.close();
	done({ connectError: err.message }, 0);
});

socket.on("connect", async () => {
	const acks = [];
	for (const e of plan.emits || []) {
		try {
			acks.push(await socket.timeout(timeoutMs).emitWithAck(e.event, ...(e.args || [])));
		} catch (err) {
			acks.push({ timeout: true, message: String(err && err.message) });
		}
	}
	const transport = socket.io.engine ? socket.io.engine.transport.name : "";
	clearTimeout(guard);
	socket.close();
	done({ connected: true, transport, acks }, 0);
});
