// Subscribes with EventSource to the token holder's user channel
// (/realtime/users/{sub}, the user id read from the JWT's "sub") and, when
// the page names one, to a session channel (/realtime/sessions/{id}), and
// lists every event as it arrives with the channel it came on. The token
// travels as access_token (EventSource cannot send an Authorization header).
(function () {
  "use strict";
  const types = JSON.parse(document.body.dataset.eventTypes || "[]");
  const query = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  const status = document.getElementById("status");
  const list = document.getElementById("events");
  const sessionInput = document.getElementById("session");
  const tokenInput = document.getElementById("token");
  let sources = [];

  // subject is the token's "sub" (the page only reads it to pick the user
  // channel; the server checks the signature).
  function subject(token) {
    const part = token.split(".")[1] || "";
    try {
      const json = atob(part.replace(/-/g, "+").replace(/_/g, "/"));
      return String(JSON.parse(json).sub || "");
    } catch (e) {
      return "";
    }
  }

  function show(channel, type, ev) {
    const li = document.createElement("li");
    li.dataset.channel = channel;
    li.dataset.type = type;
    li.dataset.id = ev.lastEventId;
    const c = document.createElement("span");
    c.className = "channel";
    c.textContent = channel;
    const t = document.createElement("span");
    t.className = "type";
    t.textContent = type;
    li.append(c, " ", t, " ", ev.data);
    list.append(li);
  }

  function update() {
    const states = sources.map(function (s) { return s.state; });
    if (states.length === 0) status.textContent = "idle";
    else if (states.every(function (s) { return s === "connected"; })) status.textContent = "connected";
    else if (states.indexOf("closed") >= 0) status.textContent = "closed";
    else if (states.indexOf("reconnecting") >= 0) status.textContent = "reconnecting";
    else status.textContent = "connecting";
    document.getElementById("channels").textContent = sources.map(function (s) { return s.channel; }).join(", ");
  }

  function open(channel, path, token) {
    const entry = { channel: channel, state: "connecting", source: new EventSource(path + "?access_token=" + encodeURIComponent(token)) };
    const source = entry.source;
    source.onopen = function () { entry.state = "connected"; update(); };
    source.onerror = function () { entry.state = source.readyState === EventSource.CLOSED ? "closed" : "reconnecting"; update(); };
    source.onmessage = function (ev) { show(channel, "message", ev); };
    types.forEach(function (type) {
      source.addEventListener(type, function (ev) { show(channel, type, ev); });
    });
    sources.push(entry);
  }

  function connect(session, token) {
    sources.forEach(function (s) { s.source.close(); });
    sources = [];
    const user = subject(token);
    if (user) open("user " + user, "users/" + encodeURIComponent(user), token);
    if (session) open("session " + session, "sessions/" + encodeURIComponent(session), token);
    update();
  }

  document.getElementById("connect").addEventListener("submit", function (e) {
    e.preventDefault();
    connect(sessionInput.value, tokenInput.value);
  });

  const session = query.get("session");
  const token = fragment.get("token");
  if (session) sessionInput.value = session;
  if (token) connect(session, token);
})();
