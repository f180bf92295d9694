// Package janitor finds what gvx sandboxes left on a host and reclaims it.
//
// One Sweep looks at sandboxes past their maximum lifetime, gvx shims and
// sandbox processes nobody owns any more, the state directory (sentry
// roots, rootfs mounts, volume staging and docker directories, pool
// sandboxes and pools), cgroups, loop devices and volume clones, image
// pools' containerd leases and stdio FIFOs nobody holds open. It reconciles against containerd first: what a
// containerd still knows is not garbage, and where a containerd that may
// own something does not answer, the sweep leaves that kind alone and says
// so. Processes get SIGTERM, then SIGKILL after a grace period. One
// failure never stops the sweep; a dry run changes nothing. `gvx gc` runs
// one sweep; `gvx pool serve` and `gvx serve` run one at an interval.
package janitor

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/taskio"
)

// Options say where to look and how hard to reclaim.
type Options struct {
	// Layout is the state directory the sandboxes use.
	Layout api.Layout
	// Sentry is gvx-sentry, used to delete pool sandboxes whose processes
	// their cgroup does not hold ("": cgroup kill only).
	Sentry string
	// Containerd lists the containerd sockets to reconcile against; the
	// containerds of running gvx shims are added.
	Containerd []string
	// VolumeDirs are directories of ext4lite volumes: their sandbox
	// clones and the loop devices on them are candidates too.
	VolumeDirs []string
	// FIFODirs are roots of containerd clients' stdio FIFO directories
	// (FromConfig: containerd's default and the SDK's).
	FIFODirs []string
	// ShimSocketDirs are containerd's shim socket directories
	// (FromConfig: DefaultShimSocketDir).
	ShimSocketDirs []string
	// MaxLifetime stops gvx sandboxes older than this (0: none, unless a
	// container's dev.gvx.max-lifetime says otherwise).
	MaxLifetime time.Duration
	// MinAge spares anything younger (a create under way).
	MinAge time.Duration
	// Grace is how long processes have between SIGTERM and SIGKILL.
	Grace time.Duration
	// DryRun reports what would be reclaimed and changes nothing.
	DryRun bool
}

// FromConfig is the sweep a gvx config describes; sentry is its
// gvx-sentry ("" if unknown).
func FromConfig(cfg config.Config, sentry string) Options {
	j := cfg.Janitor
	addrs := j.Containerd
	if len(addrs) == 0 && cfg.Pool.Containerd != "" {
		addrs = []string{cfg.Pool.Containerd}
	}
	return Options{Layout: cfg.Layout(), Sentry: sentry, Containerd: addrs, VolumeDirs: j.VolumeDirs,
		FIFODirs: []string{taskio.DefaultRoot, api.SDKFIFODir}, ShimSocketDirs: []string{DefaultShimSocketDir},
		MaxLifetime: j.MaxLifetime, MinAge: j.MinAge, Grace: j.Grace}
}

// Kind is a kind of leftover.
type Kind string

// The kinds a sweep reclaims.
const (
	KindSandbox     Kind = "sandbox"      // a containerd task past its lifetime
	KindShim        Kind = "shim"         // a shim whose task containerd no longer knows
	KindProcess     Kind = "process"      // sandbox processes nobody owns
	KindPoolSandbox Kind = "pool sandbox" // a pool's sandbox no server or task owns
	KindPool        Kind = "pool"         // a pool directory with no server and no sandbox
	KindMount       Kind = "mount"
	KindStateDir    Kind = "state dir"
	KindCgroup      Kind = "cgroup"
	KindLoop        Kind = "loop device"
	KindClone       Kind = "volume clone"
	KindLease       Kind = "lease"       // an image pool's containerd lease
	KindFIFO        Kind = "fifo"        // stdio FIFOs of a process whose creator died
	KindRelay       Kind = "relay copy"  // a gvx-relay build no sandbox runs any more
	KindRestored    Kind = "restored"    // a rollout engine's spare or restore target whose process is gone
	KindShimSocket  Kind = "shim socket" // a shim socket nothing listens on
)

// Item is one leftover found.
type Item struct {
	Kind Kind
	What string
	// Why it is garbage.
	Why string
	// How it was reclaimed ("SIGTERM", "SIGKILL", "removed", …); empty
	// in a dry run.
	How string
	Err error
}

// Report is what one sweep found and did.
type Report struct {
	DryRun bool
	Items  []Item
	// Skipped names what the sweep did not look at, and why.
	Skipped []string
	Took    time.Duration
}

// Reclaimed counts the items reclaimed without error, by kind.
func (r *Report) Reclaimed() map[string]int {
	out := map[string]int{}
	for _, it := range r.Items {
		if it.Err == nil && it.How != "" {
			out[string(it.Kind)]++
		}
	}
	return out
}

// Failed counts the items whose reclaim failed.
func (r *Report) Failed() int {
	n := 0
	for _, it := range r.Items {
		if it.Err != nil {
			n++
		}
	}
	return n
}

// Write prints the report, one line per item, then a summary.
func (r *Report) Write(w io.Writer) {
	for _, it := range r.Items {
		switch {
		case it.Err != nil:
			fmt.Fprintf(w, "FAILED %s %s (%s): %v\n", it.Kind, it.What, it.Why, it.Err)
		case r.DryRun:
			fmt.Fprintf(w, "would reclaim %s %s (%s)\n", it.Kind, it.What, it.Why)
		default:
			fmt.Fprintf(w, "reclaimed %s %s (%s): %s\n", it.Kind, it.What, it.Why, it.How)
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	fmt.Fprintln(w, r.Summary())
}

// Summary is the report in one line.
func (r *Report) Summary() string {
	counts := map[Kind]int{}
	for _, it := range r.Items {
		if it.Err == nil {
			counts[it.Kind]++
		}
	}
	kinds := make([]string, 0, len(counts))
	total := 0
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		total += n
	}
	sort.Strings(kinds)
	verb := "reclaimed"
	if r.DryRun {
		verb = "would reclaim"
	}
	detail := ""
	if len(kinds) > 0 {
		detail = " (" + strings.Join(kinds, ", ") + ")"
	}
	return fmt.Sprintf("gvx gc: %s %d%s, %d failed, in %s", verb, total, detail, r.Failed(), r.Took.Round(time.Millisecond))
}

// sweep is one Sweep under way.
type sweep struct {
	o     Options
	r     *Report
	now   time.Time
	procs map[int]*proc
	cd    *reconcile
	// orphanShims are the shims found orphaned (their sandboxes' owner
	// is gone too); reaped the sandbox processes this sweep stops.
	orphanShims map[int]bool
	reaped      map[int]bool
	// stopped are the task ids of those shims: containerd cleans up after
	// them, so their state waits for the next sweep.
	stopped map[string]bool
	// served: pool directory → a server answers for it.
	served map[api.PoolDir]bool
	// taskCgroups are cgroups of sandboxes found to be garbage.
	taskCgroups map[string]bool
	// inUse counts the sentry roots and pool directories this sweep
	// leaves (sharedNetNS).
	inUse int
}

// Sweep finds leftovers and, unless o.DryRun, reclaims them.
func Sweep(ctx context.Context, o Options) *Report {
	t0 := time.Now()
	s := &sweep{o: o, r: &Report{DryRun: o.DryRun}, now: t0, orphanShims: map[int]bool{}, reaped: map[int]bool{}, stopped: map[string]bool{}, taskCgroups: map[string]bool{}, served: map[api.PoolDir]bool{}}
	s.procs = procTable()
	s.cd = connect(ctx, s.addresses())
	defer s.cd.close()
	for _, a := range s.cd.unreachable {
		s.skip("containerd %s does not answer: nothing it may own is reclaimed (sentry roots, task directories and cgroups, claimed pool sandboxes, volume clones)", a)
	}
	s.lifetimes(ctx)
	s.restored(ctx)
	s.shims(ctx)
	s.pools(ctx)
	s.sandboxProcs(ctx)
	s.stateDirs(ctx)
	s.cgroups(ctx)
	s.loops(ctx)
	s.clones(ctx)
	s.leases(ctx)
	s.fifos(ctx)
	s.relays(ctx)
	s.shimSockets(ctx)
	s.sharedNetNS()
	s.r.Took = time.Since(t0)
	return s.r
}

// add records an item; reclaim (nil in a dry run) reclaims it and says how.
func (s *sweep) add(kind Kind, what, why string, reclaim func() (string, error)) bool {
	it := Item{Kind: kind, What: what, Why: why}
	if !s.o.DryRun {
		it.How, it.Err = reclaim()
	}
	s.r.Items = append(s.r.Items, it)
	return it.Err == nil
}

func (s *sweep) skip(format string, args ...any) {
	s.r.Skipped = append(s.r.Skipped, fmt.Sprintf(format, args...))
}

// old: created at t, it is past the minimum age.
func (s *sweep) old(t time.Time) bool { return s.o.MinAge <= 0 || s.now.Sub(t) >= s.o.MinAge }

// Every sweeps at interval until ctx is done, logging what each sweep
// reclaimed and passing its report to done (if not nil).
func Every(ctx context.Context, interval time.Duration, o Options, done func(*Report)) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r := Sweep(ctx, o)
		for _, it := range r.Items {
			if it.Err != nil {
				log.G(ctx).WithError(it.Err).Warnf("gvx gc: %s %s (%s) not reclaimed", it.Kind, it.What, it.Why)
			} else {
				log.G(ctx).Infof("gvx gc: reclaimed %s %s (%s): %s", it.Kind, it.What, it.Why, it.How)
			}
		}
		if len(r.Items) > 0 {
			log.G(ctx).Info(r.Summary())
		}
		if done != nil {
			done(r)
		}
	}
}
