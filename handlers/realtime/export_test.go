package realtime

// StuckClient registers a client on ch that never reads: a browser whose
// connection stalled. evicted closes when the hub disconnects it.
func (s *Server) StuckClient(ch Channel) (evicted <-chan struct{}) {
	c, _, _ := s.hub.subscribe(ch, "")
	return c.evicted
}
