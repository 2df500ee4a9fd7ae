package realtime

import (
	"slices"
	"sync"
	"time"
)

// Hub fans events out to the SSE clients of one instance. Deliver never
// blocks: every client has a bounded buffer, and a client whose buffer is
// full is disconnected (and counted) rather than slowing the consumer or
// the other clients; its browser reconnects with Last-Event-ID and resumes
// from the channel's window.
//
// The window keeps the last WindowSize events of each channel (and no more
// than WindowBytes of their data) for WindowTTL; a channel with no clients
// and no recent event is forgotten.
type Hub struct {
	windowSize  int
	windowBytes int
	windowTTL   time.Duration
	buffer      int
	now         func() time.Time
	m           *metrics

	mu       sync.Mutex
	channels map[Channel]*channelState
}

type channelState struct {
	clients map[*client]struct{}
	window  []windowEntry // oldest first, at most windowSize
	bytes   int           // data bytes in window
	last    time.Time     // last event or subscription
}

type windowEntry struct {
	e  Event
	at time.Time
}

// client is one SSE connection's subscription.
type client struct {
	ch      chan Event
	evicted chan struct{} // closed when the hub drops the client
}

func newHub(windowSize, windowBytes, buffer int, windowTTL time.Duration, m *metrics) *Hub {
	return &Hub{windowSize: windowSize, windowBytes: windowBytes, windowTTL: windowTTL, buffer: buffer, now: time.Now, m: m, channels: map[Channel]*channelState{}}
}

// Deliver sends e to the clients of its channel and keeps it in the window.
// An event whose id is already in the window is a redelivery: dropped.
func (h *Hub) Deliver(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	st := h.state(e.Channel, now)
	if e.ID != "" && slices.ContainsFunc(st.window, func(w windowEntry) bool { return w.e.ID == e.ID }) {
		h.m.duplicates.Inc()
		return
	}
	h.m.events.WithLabelValues(string(e.Channel.Kind)).Inc()
	if h.windowSize > 0 {
		st.window = append(st.window, windowEntry{e: e, at: now})
		st.bytes += len(e.Data)
		drop := 0
		for len(st.window)-drop > h.windowSize || (st.bytes > h.windowBytes && len(st.window)-drop > 1) {
			st.bytes -= len(st.window[drop].e.Data)
			drop++
		}
		st.window = slices.Delete(st.window, 0, drop)
	}
	for c := range st.clients {
		select {
		case c.ch <- e:
		default:
			h.evictLocked(e.Channel, st, c)
			h.m.evicted.WithLabelValues(string(e.Channel.Kind)).Inc()
		}
	}
}

func (h *Hub) state(ch Channel, now time.Time) *channelState {
	st, ok := h.channels[ch]
	if !ok {
		st = &channelState{clients: map[*client]struct{}{}}
		h.channels[ch] = st
	}
	st.last = now
	return st
}

// subscribe registers a client on ch and returns, atomically with the
// registration (no gap, no duplicate), the events to replay: those after
// lastEventID in the window, volatile ones left out. resumed is false when
// lastEventID was given but is not in the window (too old, or another
// instance's window that this one never saw).
func (h *Hub) subscribe(ch Channel, lastEventID string) (c *client, replay []Event, resumed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	st := h.state(ch, now)
	c = &client{ch: make(chan Event, h.buffer), evicted: make(chan struct{})}
	st.clients[c] = struct{}{}
	h.m.clients.WithLabelValues(string(ch.Kind)).Inc()
	if lastEventID == "" {
		return c, nil, true
	}
	i := slices.IndexFunc(st.window, func(w windowEntry) bool { return w.e.ID == lastEventID })
	if i < 0 {
		return c, nil, false
	}
	for _, w := range st.window[i+1:] {
		if !w.e.Volatile && now.Sub(w.at) <= h.windowTTL {
			replay = append(replay, w.e)
		}
	}
	return c, replay, true
}

// unsubscribe removes c (a no-op after an eviction).
func (h *Hub) unsubscribe(ch Channel, c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, ok := h.channels[ch]; ok {
		if _, ok := st.clients[c]; ok {
			h.evictLocked(ch, st, c)
		}
	}
}

func (h *Hub) evictLocked(ch Channel, st *channelState, c *client) {
	delete(st.clients, c)
	close(c.evicted)
	h.m.clients.WithLabelValues(string(ch.Kind)).Dec()
}

// sweep forgets channels without clients whose last activity is older than
// the window's TTL, and trims expired events from the others.
func (h *Hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for ch, st := range h.channels {
		if len(st.clients) == 0 && now.Sub(st.last) > h.windowTTL {
			delete(h.channels, ch)
			continue
		}
		keep := slices.IndexFunc(st.window, func(w windowEntry) bool { return now.Sub(w.at) <= h.windowTTL })
		if keep < 0 {
			keep = len(st.window)
		}
		for _, w := range st.window[:keep] {
			st.bytes -= len(w.e.Data)
		}
		st.window = slices.Delete(st.window, 0, keep)
	}
}
