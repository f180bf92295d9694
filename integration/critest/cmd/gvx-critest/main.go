// Command gvx-critest runs critest (cri-tools' CRI conformance suite)
// against gvx's runtime handler and runc's on one private containerd, one
// after the other, and writes the comparison between the critest markers
// of docs/compatibility.md and the specs gvx passes to the floor file
// (TestCritestFloor holds gvx to it). `make critest` runs it with the
// binaries' directories in GVX_BIN, CONTAINERD_BIN, CRITEST_BIN and
// CRANE_BIN.
//
// With -focus or -skip it only prints the table. It exits 1 when gvx
// failed a spec of the floor it found (the files are written all the
// same: the diff shows the drop).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/integration/critest"
	"github.com/gvxrun/gvx/integration/harness"
)

func main() {
	doc := flag.String("doc", "docs/compatibility.md", "the document whose critest markers get the table (empty: none)")
	floor := flag.String("floor", "integration/testdata/critest-floor.txt", "the floor file: the specs gvx passes (empty: none)")
	out := flag.String("out", "_output/critest", "directory for the reports, logs and configuration")
	handlers := flag.String("handlers", "gvx,runc", "runtime handlers, the reference (runc) last")
	focus := flag.String("focus", "", "ginkgo focus regexp (then nothing is written)")
	skip := flag.String("skip", "", "ginkgo skip regexp (then nothing is written)")
	script := flag.String("script", "hack/mkimage-critest.sh", "the script that builds and pushes critest's images")
	flag.Parse()
	if err := run(*doc, *floor, *out, *handlers, *focus, *skip, *script); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-critest: %v\n", err)
		os.Exit(1)
	}
}

func run(doc, floorPath, out, handlers, focus, skip, script string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, v := range []string{"GVX_BIN", "CONTAINERD_BIN", "CRITEST_BIN", "CRANE_BIN"} {
		if os.Getenv(v) == "" {
			return fmt.Errorf("%s not set (run make critest)", v)
		}
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	cfg := critest.Config{
		Bins:    harness.BinsFromEnv(),
		Critest: filepath.Join(os.Getenv("CRITEST_BIN"), "critest"),
		Crane:   filepath.Join(os.Getenv("CRANE_BIN"), "crane"),
		Script:  script,
		Dir:     out,
		Log:     os.Stderr,
	}
	env, err := critest.Setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	var runs []critest.Run
	for _, h := range strings.Split(handlers, ",") {
		r, wall, err := env.Run(ctx, critest.RunOptions{Handler: h, Focus: focus, Skip: skip, Dir: out})
		if err != nil {
			return err
		}
		runs = append(runs, critest.Run{Handler: h, Report: r, Wall: wall})
	}
	env.Close()

	header := fmt.Sprintf("critest %s against containerd %s with each runtime handler in turn, `make critest` (%s; %s, %d cores, kernel %s). Full reports: `_output/critest/critest-HANDLER.json`.",
		envOr("CRITEST_VERSION", "?"), envOr("CONTAINERD_VERSION", "?"), time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), kernel())
	table := critest.Markdown(header, runs)
	fmt.Println(table)

	// gvx's drops below the floor it had.
	var drops []string
	var gvx *critest.Run
	for i := range runs {
		if runs[i].Handler == "gvx" {
			gvx = &runs[i]
		}
	}
	if gvx != nil && floorPath != "" {
		if old, err := critest.ReadFloor(floorPath); err == nil {
			for _, n := range old {
				if s, ok := gvx.Report.Get(n); ok && s.State != critest.Passed {
					drops = append(drops, fmt.Sprintf("%s: %s %s", n, s.Raw, s.Failure))
				}
			}
		}
	}
	if focus == "" && skip == "" {
		if doc != "" {
			if err := critest.UpdateDoc(doc, table); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "gvx-critest: wrote the table to %s\n", doc)
		}
		if gvx != nil && floorPath != "" {
			h := "The critest specs gvx passes: TestCritestFloor fails when gvx fails one of them.\nWritten by make critest (integration/critest); " + time.Now().UTC().Format("2006-01-02") + "."
			if err := critest.WriteFloor(floorPath, h, gvx.Report); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "gvx-critest: wrote %d specs to %s\n", len(gvx.Report.Passed()), floorPath)
		}
	}
	if len(drops) > 0 {
		return fmt.Errorf("gvx failed %d specs of its floor:\n  %s", len(drops), strings.Join(drops, "\n  "))
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func kernel() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "?"
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}
