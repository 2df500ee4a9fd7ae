package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a loopback port that forwards every connection to
// one target and can break them the way a network does: Cut resets every
// open connection (and refuses new ones for a while), Stall stops forwarding
// bytes in both directions while the connections stay open. eventpipe's
// broker URL points at Addr; the harness's own clients do not.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	links       map[*link]struct{}
	refuseUntil time.Time
	// gate is closed while traffic flows; during a stall it is an open
	// channel that Stall closes when the stall is over.
	gate   chan struct{}
	closed bool

	wg sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, upstream net.Conn
	once             sync.Once
	done             chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		for _, c := range []net.Conn{l.client, l.upstream} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, as a broken network gives
			}
			_ = c.Close()
		}
	})
}

// NewProxy listens on 127.0.0.1 on a free port and forwards to target
// (host:port, loopback only).
func NewProxy(target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("proxy target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("proxy target %q: only loopback addresses", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, gate: open}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Open is the number of connections the proxy holds now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.closed || time.Now().Before(p.refuseUntil)
		p.mu.Unlock()
		if refuse {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, upstream: upstream, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(l, upstream, client) }()
	go func() { defer both.Done(); p.pipe(l, client, upstream) }()
	both.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst, holding every chunk while the proxy is stalled.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			select {
			case <-gate:
			case <-l.done:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a reset: the link closes both ways
		}
	}
}

// Cut resets every open connection and refuses (resets) new ones for down;
// it returns how many it cut.
func (p *Proxy) Cut(down time.Duration) int {
	p.mu.Lock()
	p.refuseUntil = time.Now().Add(down)
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Stall stops forwarding on every connection, open and new, for d: the
// connections stay open, the bytes wait. It returns when the stall is over,
// or at once when one is already under way.
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	select {
	case <-p.gate:
	default:
		p.mu.Unlock()
		return // already stalled
	}
	stalled := make(chan struct{})
	p.gate = stalled
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	close(stalled)
	p.mu.Unlock()
}

// Close stops accepting, resets every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut(0)
	p.wg.Wait()
	return err
}
