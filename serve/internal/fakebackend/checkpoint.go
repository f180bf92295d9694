package fakebackend

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

// checkpoint is a fake checkpoint: the sandbox's Env and narrowing then
// (a real checkpoint keeps the container's spec, the narrowing in it),
// and its tree.
type checkpoint struct {
	lineage string
	env     []string
	narrow  *api.Narrow
}

// Checkpoint saves the sandbox's Env (its fake state).
func (s *Sandbox) Checkpoint(_ context.Context, _ bool) (backend.Checkpoint, error) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.FailCheckpoint != nil {
		return backend.Checkpoint{}, b.FailCheckpoint
	}
	if b.cks == nil {
		b.cks = map[string]checkpoint{}
	}
	b.seq++
	id := fmt.Sprintf("ck-%d", b.seq)
	s.mu.Lock()
	defer s.mu.Unlock()
	b.cks[id] = checkpoint{lineage: s.lineage(), env: append([]string(nil), s.Env...), narrow: s.Narrow}
	parent := s.Parent
	s.Parent = id
	return backend.Checkpoint{ID: id, Parent: parent, Created: time.Now()}, nil
}

func (s *Sandbox) lineage() string {
	if s.Lineage != "" {
		return s.Lineage
	}
	return s.ID
}

// Rollback puts the checkpoint's Env and narrowing back.
func (s *Sandbox) Rollback(_ context.Context, id string) error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	ck, ok := b.cks[id]
	if !ok {
		return fmt.Errorf("%w: %s", backend.ErrNoCheckpoint, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ck.lineage != s.lineage() {
		return fmt.Errorf("%w: %s", backend.ErrForeignCheckpoint, id)
	}
	s.Env = append([]string(nil), ck.env...)
	s.Narrow = ck.narrow
	s.Parent = id
	s.Rollbacks++
	return nil
}

// Fork makes n sandboxes with the checkpoint's Env.
func (b *Backend) Fork(_ context.Context, id string, n int) ([]backend.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ck, ok := b.cks[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", backend.ErrNoCheckpoint, id)
	}
	var out []backend.Sandbox
	for i := 0; i < n; i++ {
		b.seq++
		s := &Sandbox{b: b, ID: fmt.Sprintf("fork-%d", b.seq), Lineage: ck.lineage, Parent: id,
			Env: append([]string(nil), ck.env...), Narrow: ck.narrow, procs: map[*execCmd]bool{}}
		b.boxes[s.ID] = s
		out = append(out, s)
	}
	return out, nil
}

// ReleaseCheckpoint deletes a fake checkpoint.
func (b *Backend) ReleaseCheckpoint(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.cks[id]; !ok {
		return fmt.Errorf("%w: %s", backend.ErrNoCheckpoint, id)
	}
	delete(b.cks, id)
	return nil
}

// Checkpoints lists the fake checkpoints.
func (b *Backend) Checkpoints(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.cks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}
