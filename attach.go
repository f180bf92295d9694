package gvx

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/rollout"
)

// Info describes a sandbox of the client's namespace.
type Info struct {
	ID      string
	Image   string // Config.Image it was made from
	Status  Status
	Created time.Time
	Docker  bool
	Pool    string // the pool it came from, if any
	Cmd     []string
	Labels  map[string]string // the user's (Config.Labels)
}

// List returns the client's namespace's sandboxes (those made by this
// SDK), oldest first.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	ctx = c.Context(ctx)
	conts, err := c.ctrd.Containers(ctx, fmt.Sprintf("labels.%q", LabelSandbox))
	if err != nil {
		return nil, newError("list", "", nil, err)
	}
	// A sandbox rolled back is listed as its newest backing; the
	// container it was rolled back from, while the rollback removes it in
	// the background, not at all.
	type found struct {
		info     Info
		backing  bool
		creation time.Time
	}
	byID := map[string]found{}
	for _, cont := range conts {
		info, err := cont.Info(ctx, client.WithoutRefreshedMetadata)
		if err != nil {
			continue // removed meanwhile
		}
		id, backing := info.ID, false
		if sid := info.Labels[rollout.LabelSandbox]; sid != "" {
			id, backing = sid, true
		}
		if f, ok := byID[id]; ok && (f.backing && !backing || f.backing == backing && f.creation.After(info.CreatedAt)) {
			continue
		}
		i := Info{ID: id, Image: info.Labels[LabelImage], Created: info.CreatedAt, Docker: info.Labels[LabelDocker] == "true",
			Pool: info.Labels[LabelPool], Status: StatusStopped, Labels: userLabels(info.Labels)}
		if spec, err := cont.Spec(ctx); err == nil && spec.Process != nil {
			i.Cmd = spec.Process.Args
		}
		if task, err := cont.Task(ctx, nil); err == nil {
			if st, err := task.Status(ctx); err == nil {
				i.Status = statusOf(st.Status)
			}
		}
		byID[id] = found{info: i, backing: backing, creation: info.CreatedAt}
	}
	out := make([]Info, 0, len(byID))
	for _, f := range byID {
		out = append(out, f.info)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Created.Before(out[b].Created) })
	return out, nil
}

// Attach returns sandbox id, made earlier (by this or another program),
// whether it still runs or not: its init's stdio is not reattached, the
// rest (Exec, files, Pause, Close, …) works. ErrNotFound if there is no
// such sandbox.
func (c *Client) Attach(ctx context.Context, id string) (*Sandbox, error) {
	ctx = c.Context(ctx)
	if !ValidID(id) {
		return nil, errorf("attach", id, ErrNotFound, "not a sandbox id ([a-z0-9]+)")
	}
	// A sandbox rolled back is backed by a container the rollout engine
	// restored, labelled with the sandbox's id.
	cont, err := rollout.FindBacking(ctx, c.ctrd, id)
	if err != nil {
		return nil, newError("attach", id, nil, err)
	}
	s := &Sandbox{c: c, id: id, container: cont, exited: make(chan struct{})}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	if s.info.Labels[LabelSandbox] == "" {
		return nil, errorf("attach", id, ErrNotFound, "container %s was not made by gvx's SDK", id)
	}
	s.restored = s.info.Labels[rollout.LabelRole] != ""
	s.cfg = Config{ID: id, Image: s.info.Labels[LabelImage], Docker: s.info.Labels[LabelDocker] == "true", Labels: userLabels(s.info.Labels)}
	task, err := cont.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		close(s.exited)
		return s, nil
	}
	if err != nil {
		return nil, newError("attach", id, nil, err)
	}
	s.task = task
	if s.restored {
		// The engine's to destroy (its volumes are the store's) and to
		// roll back further.
		e, rs, err := s.rollout(ctx)
		if err != nil {
			return nil, err
		}
		// What a rollback of a process that died left of the backing it
		// replaced.
		if err := e.RemoveSuperseded(ctx, rs); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx: attach %s", id)
		}
	}
	if err := s.watch(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Remove removes whatever is left of sandbox id, running or not, with
// everything it owns — or a container restored for a rollback or a fork
// (Sandbox.ID stays the first one's; its backing has an id of its own)
// —; it is not an error if there is nothing.
func (c *Client) Remove(ctx context.Context, id string) error {
	if restored, err := c.restored(ctx, id); err != nil || restored {
		return err
	}
	s, err := c.Attach(ctx, id)
	if err != nil {
		if kindOf(err) == ErrNotFound {
			return nil
		}
		return err
	}
	return s.Close(ctx)
}

// restored removes container id if the rollout engine restored it (a
// rollback's or a fork's backing, a spare), and says whether it did.
func (c *Client) restored(ctx context.Context, id string) (bool, error) {
	cont, err := c.ctrd.LoadContainer(c.Context(ctx), id)
	if err != nil {
		return false, nil // Attach says what
	}
	labels, err := cont.Labels(c.Context(ctx))
	// A sandbox's backing (LabelSandbox) is removed as the sandbox is:
	// Attach finds its newest.
	if err != nil || labels[rollout.LabelRole] == "" || labels[rollout.LabelSandbox] != "" {
		return false, nil
	}
	return true, c.removeRestored(ctx, id)
}

// removeRestored has the engine remove container id, one it restored,
// with its volumes.
func (c *Client) removeRestored(ctx context.Context, id string) error {
	e, err := c.engine()
	if err != nil {
		return err
	}
	if err := e.RemoveRestored(c.Context(ctx), id); err != nil {
		return newError("remove", id, nil, err)
	}
	return nil
}

// Labels are the sandbox's user labels (Config.Labels).
func (s *Sandbox) Labels() map[string]string { return userLabels(s.info.Labels) }

// userLabels drops gvx's own labels.
func userLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if len(k) < 8 || k[:8] != "dev.gvx." {
			out[k] = v
		}
	}
	return out
}
