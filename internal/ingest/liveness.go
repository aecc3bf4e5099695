package ingest

// Connected reports whether the stream's current connection is alive: false
// from the moment its call ended (the service went away, a transport error,
// a rotation) until a reconnect installs the next one. A snapshot for
// health reports; the write path never reads it.
func (s *ArrowStream) Connected() bool {
	c := s.cur.Load()
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}
