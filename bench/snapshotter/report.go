package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// report prints one filesystem's results as a Markdown table plus ratios
// of ext4lite against the other snapshotters.
func report(w io.Writer, fstype string, size int64, n, layers int, o options, rs []result) {
	host := map[string]string{"xfs": "XFS (reflink)", "ext4": "ext4 (no reflink)"}[fstype]
	fmt.Fprintf(w, "\n### %s: %d containers, %s snapshots, image of %d layers (busybox + %d × %d MiB)\n\n",
		host, n, volume.FormatSize(size), layers, o.layers, o.layerMiB)
	fmt.Fprintf(w, "| snapshotter | unpack (median of %d) | Prepare p50 | Prepare p95 | %d Prepares at once (wall) | disk: unpacked image | disk: %d prepared | disk: after %d × %d MiB written | Remove p50 |\n",
		o.rounds, concurrency, n, n, o.writeMiB)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name,
			ms(pct(r.unpack, 50)), ms(pct(r.prepare, 50)), ms(pct(r.prepare, 95)), ms(r.concurrent),
			mib(r.imageDisk), mib(r.prepDisk), mib(r.writeDisk), ms(pct(r.remove, 50)))
	}
	fmt.Fprintln(w)
	me := rs[0]
	for _, peer := range rs[1:] {
		fmt.Fprintf(w, "- %s vs %s: unpack %s, Prepare p50 %s (p95 %s), %d Prepares at once %s, disk after writes %s\n", me.name, peer.name,
			faster(pct(me.unpack, 50), pct(peer.unpack, 50)),
			faster(pct(me.prepare, 50), pct(peer.prepare, 50)),
			faster(pct(me.prepare, 95), pct(peer.prepare, 95)),
			concurrency, faster(me.concurrent, peer.concurrent),
			smaller(me.writeDisk, peer.writeDisk))
	}
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func mib(n int64) string {
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// faster says how much faster mine is than peer ("12× faster", "1.3×
// slower").
func faster(mine, peer time.Duration) string {
	if mine <= 0 || peer <= 0 {
		return "n/a"
	}
	if r := float64(peer) / float64(mine); r >= 1 {
		return ratio(r) + " faster"
	} else {
		return ratio(1/r) + " slower"
	}
}

// smaller says how much less space mine takes than peer.
func smaller(mine, peer int64) string {
	if mine <= 0 || peer <= 0 {
		return "n/a"
	}
	if r := float64(peer) / float64(mine); r >= 1 {
		return ratio(r) + " less"
	} else {
		return ratio(1/r) + " more"
	}
}

func ratio(r float64) string {
	s := fmt.Sprintf("%.1f", r)
	if r >= 10 {
		s = fmt.Sprintf("%.0f", r)
	}
	return strings.TrimSuffix(s, ".0") + "×"
}
