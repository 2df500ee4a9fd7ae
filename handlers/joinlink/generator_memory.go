package joinlink

import (
	"context"
	"fmt"
	"sync"
)

// MemoryGenerator is a fake bulkRegister for tests and the embedded mode
// (there is no online-session subsystem here): it counts calls per session
// and fails on demand.
type MemoryGenerator struct {
	mu    sync.Mutex
	calls map[int64]int
	fails map[int64][]error
	// Block, when set, is waited on by every call (a slow generation).
	Block chan struct{}
}

var _ Generator = (*MemoryGenerator)(nil)

// NewMemoryGenerator returns a generator that always succeeds.
func NewMemoryGenerator() *MemoryGenerator {
	return &MemoryGenerator{calls: map[int64]int{}, fails: map[int64][]error{}}
}

// FailNext makes the next calls for session fail with errs, in order.
func (g *MemoryGenerator) FailNext(session int64, errs ...error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fails[session] = append(g.fails[session], errs...)
}

// Calls returns how many times bulkRegister ran for session.
func (g *MemoryGenerator) Calls(session int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[session]
}

// BulkRegister implements Generator.
func (g *MemoryGenerator) BulkRegister(ctx context.Context, req BulkRequest, _ int64) (BulkResult, error) {
	if g.Block != nil {
		select {
		case <-g.Block:
		case <-ctx.Done():
			return BulkResult{}, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[req.SessionID]++
	n := g.calls[req.SessionID]
	if errs := g.fails[req.SessionID]; len(errs) > 0 {
		g.fails[req.SessionID] = errs[1:]
		return BulkResult{}, errs[0]
	}
	return BulkResult{JobID: fmt.Sprintf("job-%d-%d", req.SessionID, n), Total: 0}, nil
}
