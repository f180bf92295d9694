package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// bench runs in the private mount namespace; wd is the scratch directory.
type bench struct {
	cfg     config
	wd      string
	imgMnt  string // mount point for images (filling, space test)
	summary []string
	// targetTimes are volume.Clone's times on XFS at the target size,
	// from the method table and the space test; targetFrom says which.
	targetTimes []time.Duration
	targetFrom  []string
}

// golden is a source image on a host filesystem.
type golden struct {
	size   int64
	filled bool
	path   string
	alloc  int64 // bytes allocated to the file
}

func (g golden) label() string {
	if g.filled {
		return "50 %"
	}
	return "empty"
}

// row is one measured (or n/a) method for one golden image.
type row struct {
	method string
	how    string // volume.Clone's Method, or the copy kind judged from the space used
	na     string // reason the method does not apply
	times  []time.Duration
	space  []int64 // filesystem bytes used by each copy
}

func (b *bench) run(ctx context.Context) error {
	b.imgMnt = filepath.Join(b.wd, "m")
	if err := os.Mkdir(b.imgMnt, 0o755); err != nil {
		return fmt.Errorf("image mount point: %w", err)
	}
	b.header(ctx)
	for _, typ := range []string{"xfs", "ext4"} {
		if b.cfg.only != "" && b.cfg.only != typ {
			continue
		}
		if err := b.runFS(ctx, typ); err != nil {
			return fmt.Errorf("%s: %w", typ, err)
		}
	}
	fmt.Printf("\n== Summary ==\n")
	for _, s := range b.summary {
		fmt.Println(s)
	}
	if v := b.verdict(); v != "" {
		fmt.Println(v)
	}
	return nil
}

func (b *bench) header(ctx context.Context) {
	first := func(name string, args ...string) string {
		out, err := sh(ctx, name, args...)
		if err != nil {
			return "?"
		}
		l, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return strings.TrimSpace(l)
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	cmd := "go run ./bench/volume"
	if len(b.cfg.args) > 0 {
		cmd += " " + strings.Join(b.cfg.args, " ")
	}
	var sizes []string
	for _, s := range b.cfg.sizes {
		sizes = append(sizes, volume.FormatSize(s))
	}
	fmt.Printf("gvx volbench: ext4lite volume clones (issue 3)\n")
	fmt.Printf("command: %s   (as root)\n", cmd)
	fmt.Printf("date: %s; kernel %s; %d CPUs; %s; %s; %s; %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSpace(string(kernel)), runtime.NumCPU(),
		runtime.Version(), first("cp", "--version"), first("mkfs.xfs", "-V"), strings.TrimSuffix(first("mke2fs", "-V"), ":"))
	fmt.Printf("images: %s, each empty (fresh volume.Create) and 50 %% filled (a file of half the image size with\n"+
		"  non-zero pseudo-random data, written through a loop mount); made once per host filesystem, shared by all methods\n",
		strings.Join(sizes, ", "))
	fmt.Printf("host filesystems: a %s file per type in %s (preallocated), one at a time, on a direct-I/O loop device\n"+
		"  (cached once, like a disk), mounted in a private mount namespace; the images in them use buffered loop devices\n",
		volume.FormatSize(hostFSSize(b.cfg)), b.cfg.dir)
	fmt.Printf("timing: warm page cache (caches are NOT dropped; each golden is read once before its runs); every copy\n"+
		"  ends durable (fsync); times include opening/creating the files and, for cp, starting the process (~1 ms);\n"+
		"  %d runs per measurement, %d when the first run took > %s; in rounds (each round runs every method once);\n"+
		"  the destination is deleted between runs and its space awaited (untimed)\n",
		b.cfg.runs, b.cfg.slowRuns, b.cfg.slowAfter)
	fmt.Printf("space/copy: the host filesystem's used bytes (statfs after syncfs) after the copy minus before, median\n")
	fmt.Printf("methods:\n")
	for _, m := range methods {
		fmt.Printf("  %-26s %s\n", m.name, m.legend)
	}
}

// runFS makes one host filesystem, its golden images, measures every
// method on each and runs the space test, then tears it all down.
func (b *bench) runFS(ctx context.Context, typ string) (err error) {
	size := hostFSSize(b.cfg)
	progress("%s: making a %s host filesystem", typ, volume.FormatSize(size))
	h, err := newHostFS(ctx, b.wd, typ, size)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := h.close(); err == nil {
			err = cerr
		}
	}()
	reflink := typ == "xfs"
	title := map[string]string{"xfs": "XFS (reflink)", "ext4": "ext4 (no reflink: fallback)"}[typ]
	dio := "direct I/O"
	if !h.dio {
		dio = "buffered (direct I/O refused)"
	}
	fmt.Printf("\n== %s: %s loop filesystem, `%s`, loop device %s ==\n", title, volume.FormatSize(size), strings.Join(h.mkfs, " "), dio)

	var goldens []golden
	for _, s := range b.cfg.sizes {
		for _, filled := range []bool{false, true} {
			g, err := b.makeGolden(ctx, h, s, filled)
			if err != nil {
				return err
			}
			goldens = append(goldens, g)
		}
	}
	fmt.Printf("golden images:\n")
	for _, g := range goldens {
		fmt.Printf("  %-8s %-6s allocated %s\n", volume.FormatSize(g.size), g.label(), volume.FormatSize(g.alloc))
	}

	var rows [][]row
	for _, g := range goldens {
		rs, err := b.measureGolden(ctx, h, g, reflink)
		if err != nil {
			return fmt.Errorf("%s %s golden: %w", volume.FormatSize(g.size), g.label(), err)
		}
		rows = append(rows, rs)
	}
	b.printTable(goldens, rows)
	b.targets(typ, goldens, rows)

	if b.cfg.clones > 0 {
		var src golden
		var perFilledCopy int64
		for i, g := range goldens {
			// XFS: the 50 % golden. ext4: the empty one, since every
			// sparse copy duplicates the golden's data.
			if g.size == b.cfg.cloneSize && g.filled == reflink {
				src = g
			}
			if g.size == b.cfg.cloneSize && g.filled {
				perFilledCopy = median64(rows[i][0].space)
			}
		}
		if err := b.spaceTest(ctx, h, src, perFilledCopy); err != nil {
			return fmt.Errorf("space test: %w", err)
		}
	}
	for _, g := range goldens {
		if err := os.Remove(g.path); err != nil {
			return fmt.Errorf("remove golden: %w", err)
		}
	}
	return nil
}

// makeGolden creates an image with volume.Create and, for filled, writes
// a file of half its size through a loop mount.
func (b *bench) makeGolden(ctx context.Context, h *hostFS, size int64, filled bool) (golden, error) {
	g := golden{size: size, filled: filled}
	g.path = filepath.Join(h.mnt, fmt.Sprintf("golden-%s-%s.img", sizeName(size), map[bool]string{false: "empty", true: "half"}[filled]))
	start := time.Now()
	if _, err := volume.Create(ctx, g.path, volume.CreateOptions{Size: size, Label: "volbench"}); err != nil {
		return g, err
	}
	if filled {
		label := fmt.Sprintf("%s: filling the %s golden", h.typ, volume.FormatSize(size))
		progress("%s with %s of data", label, volume.FormatSize(size/2))
		if err := mountLoop(g.path, b.imgMnt); err != nil {
			return g, err
		}
		werr := writeData(ctx, filepath.Join(b.imgMnt, "data"), size/2, uint64(size), label)
		if err := unmount(b.imgMnt, g.path); err != nil {
			return g, errors.Join(werr, err)
		}
		if werr != nil {
			return g, werr
		}
		info, err := volume.Inspect(ctx, g.path)
		if err != nil {
			return g, err
		}
		if !info.Clean {
			return g, fmt.Errorf("golden %s is not clean after unmount (state %s)", g.path, info.State)
		}
		progress("%s: done in %s", label, fmtDur(time.Since(start)))
	}
	a, err := allocated(g.path)
	g.alloc = a
	return g, err
}

// measureGolden measures every method on one golden image, in rounds:
// each round runs every method once, in order, so page-cache and
// writeback state drift evenly over all of them instead of favouring the
// methods measured last. A method whose first run was slow gets slowRuns
// runs instead of runs. The destination is deleted between runs.
func (b *bench) measureGolden(ctx context.Context, h *hostFS, g golden, reflink bool) ([]row, error) {
	if err := warm(g.path); err != nil {
		return nil, err
	}
	rows := make([]row, len(methods))
	n := make([]int, len(methods))
	hows := make([]map[string]bool, len(methods))
	for i, m := range methods {
		rows[i].method = m.name
		n[i] = b.cfg.runs
		hows[i] = map[string]bool{}
		if !reflink && m.skipNoReflink != "" {
			rows[i].na = m.skipNoReflink
		}
	}
	for run := 0; run < b.cfg.runs; run++ {
		for i, m := range methods {
			r := &rows[i]
			if r.na != "" || run >= n[i] {
				continue
			}
			label := fmt.Sprintf("%s %s %s, %s run %d/%d", h.typ, volume.FormatSize(g.size), g.label(), m.name, run+1, n[i])
			d, space, how, err := b.once(ctx, h, g, m, label)
			if err != nil {
				if m.needsReflink && !reflink && run == 0 {
					r.na = "fails without reflink (cp: " + lastPart(err.Error()) + ")"
					progress("%s: n/a (%s)", label, r.na)
					continue
				}
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			r.times = append(r.times, d)
			r.space = append(r.space, space)
			if how != "" {
				hows[i][how] = true
			}
			if run == 0 && d > b.cfg.slowAfter {
				n[i] = min(n[i], b.cfg.slowRuns)
			}
		}
	}
	for i := range rows {
		var list []string
		for h := range hows[i] {
			list = append(list, h)
		}
		if len(list) > 0 {
			rows[i].how = strings.Join(list, "+")
		} else if rows[i].na == "" {
			rows[i].how = copyKind(median64(rows[i].space), g)
		}
	}
	return rows, nil
}

// once runs one method once: copies g to a new file, checks its length,
// measures the space it took, deletes it and waits until that space is
// free again. It returns the copy's duration, its space and the method's
// note on how it copied.
func (b *bench) once(ctx context.Context, h *hostFS, g golden, m method, label string) (time.Duration, int64, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, "", err
	}
	dst := filepath.Join(h.mnt, "copy.img")
	before, err := used(h.mnt)
	if err != nil {
		return 0, 0, "", err
	}
	stop := watch(label, dst)
	start := time.Now()
	how, err := m.run(ctx, g.path, dst)
	d := time.Since(start)
	stop()
	if err != nil {
		os.Remove(dst)
		return 0, 0, "", err
	}
	if err := checkCopy(g, dst); err != nil {
		return 0, 0, "", err
	}
	after, err := used(h.mnt)
	if err != nil {
		return 0, 0, "", err
	}
	if err := os.Remove(dst); err != nil {
		return 0, 0, "", fmt.Errorf("remove copy: %w", err)
	}
	if _, err := settle(h.mnt, before); err != nil {
		return 0, 0, "", err
	}
	progress("%s: %s, +%s", label, fmtDur(d), volume.FormatSize(after-before))
	return d, after - before, how, nil
}
