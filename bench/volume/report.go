package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// targetSize is the image size of issue 3's clone-time target.
const (
	targetSize  = 4 << 30
	targetClone = 20 * time.Millisecond
)

// printTable prints one host filesystem's results: a row per golden image
// and method.
func (b *bench) printTable(goldens []golden, rows [][]row) {
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "image\tgolden\tmethod\thow\truns\tp50\tp95/max\tvs Clone\tspace/copy\n")
	var notes []string
	seen := map[string]bool{}
	for i, g := range goldens {
		ref := rows[i][0]
		for _, r := range rows[i] {
			if r.na != "" {
				fmt.Fprintf(w, "%s\t%s\t%s\tn/a (below)\t-\t-\t-\t-\t-\n", volume.FormatSize(g.size), g.label(), r.method)
				if n := r.method + ": " + r.na; !seen[n] {
					seen[n] = true
					notes = append(notes, n)
				}
				continue
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", volume.FormatSize(g.size), g.label(), r.method, r.how,
				len(r.times), fmtDur(median(r.times)), fmtDur(p95(r.times)), ratio(median(r.times), median(ref.times)),
				volume.FormatSize(median64(r.space)))
		}
	}
	w.Flush()
	for _, n := range notes {
		fmt.Printf("n/a: %s\n", n)
	}
	fmt.Printf("(p95/max: nearest-rank 95th percentile, i.e. the slowest run when there are fewer than 20; vs Clone: p50 / volume.Clone's p50)\n")
}

// targetImageSize is the image size the clone-time target is judged at:
// 4 GiB, or the space test's size when -sizes has no 4G.
func (b *bench) targetImageSize() int64 {
	if hasSize(b.cfg.sizes, targetSize) {
		return targetSize
	}
	return b.cfg.cloneSize
}

// targets adds the clone-time lines of one host filesystem to the
// summary and, on XFS, keeps volume.Clone's times at the target size for
// the verdict.
func (b *bench) targets(typ string, goldens []golden, rows [][]row) {
	for i, g := range goldens {
		if g.size != b.targetImageSize() {
			continue
		}
		c := rows[i][0]
		line := fmt.Sprintf("%s, %s %s: volume.Clone (%s) p50 %s, max %s", typ, volume.FormatSize(g.size), g.label(), c.how,
			fmtDur(median(c.times)), fmtDur(p95(c.times)))
		for _, r := range rows[i][1:] {
			if r.na == "" {
				line += fmt.Sprintf("; %s %s", r.method, fmtDur(median(r.times)))
			}
		}
		b.summary = append(b.summary, line)
		if typ == "xfs" {
			b.targetTimes = append(b.targetTimes, c.times...)
			b.targetFrom = append(b.targetFrom, fmt.Sprintf("%d of the %s golden", len(c.times), g.label()))
		}
	}
}

// verdict is the summary line for the clone-time target: volume.Clone on
// XFS at the target size, over the method table's runs and the space
// test's clones.
func (b *bench) verdict() string {
	t := b.targetTimes
	if len(t) == 0 {
		return ""
	}
	v := "MET"
	switch {
	case median(t) > targetClone:
		v = "NOT MET"
	case p95(t) > targetClone:
		v = "MET at p50, NOT at p95"
	}
	size := b.targetImageSize()
	line := fmt.Sprintf("Target clone ≤ %s at 4 GiB on XFS: %s. volume.Clone of %s images on XFS, %d clones (%s): p50 %s, p95 %s, max %s",
		fmtDur(targetClone), v, volume.FormatSize(size), len(t), strings.Join(b.targetFrom, ", "),
		fmtDur(median(t)), fmtDur(p95(t)), fmtDur(slices.Max(t)))
	if size != targetSize {
		line += fmt.Sprintf(" (at %s: -sizes has no 4G)", volume.FormatSize(size))
	}
	return line
}

func hasSize(sizes []int64, s int64) bool { return slices.Contains(sizes, s) }

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// p95 is the nearest-rank 95th percentile: the maximum below 20 samples.
func p95(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(math.Ceil(0.95*float64(len(s))))-1]
}

func median64(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func ratio(a, ref time.Duration) string {
	if ref <= 0 {
		return "-"
	}
	r := float64(a) / float64(ref)
	if r < 10 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.0f×", r)
}

// fmtDur renders a duration with three significant digits or so.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 10000:
		return fmt.Sprintf("%.2f s", ms/1000)
	default:
		return fmt.Sprintf("%.1f s", ms/1000)
	}
}
