// Subscribes to /realtime/sessions/{id} with EventSource and lists every
// event as it arrives. The token travels as access_token (EventSource cannot
// send an Authorization header).
(function () {
  "use strict";
  const types = JSON.parse(document.body.dataset.eventTypes || "[]");
  const query = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  const status = document.getElementById("status");
  const list = document.getElementById("events");
  const sessionInput = document.getElementById("session");
  const tokenInput = document.getElementById("token");
  let source = null;

  function show(type, ev) {
    const li = document.createElement("li");
    li.dataset.type = type;
    li.dataset.id = ev.lastEventId;
    const t = document.createElement("span");
    t.className = "type";
    t.textContent = type;
    li.append(t, " ", ev.data);
    list.append(li);
  }

  function connect(session, token) {
    if (source) source.close();
    const url = "sessions/" + encodeURIComponent(session) + "?access_token=" + encodeURIComponent(token);
    source = new EventSource(url);
    status.textContent = "connecting";
    source.onopen = function () { status.textContent = "connected"; };
    source.onerror = function () { status.textContent = source.readyState === EventSource.CLOSED ? "closed" : "reconnecting"; };
    source.onmessage = function (ev) { show("message", ev); };
    types.forEach(function (type) {
      source.addEventListener(type, function (ev) { show(type, ev); });
    });
  }

  document.getElementById("connect").addEventListener("submit", function (e) {
    e.preventDefault();
    connect(sessionInput.value, tokenInput.value);
  });

  const session = query.get("session");
  const token = fragment.get("token");
  if (session) sessionInput.value = session;
  if (session && token) connect(session, token);
})();
