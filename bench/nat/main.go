// Command nat benchmarks gvx's userspace NAT (network = "nat") against
// runsc and runc on a veth into a network namespace the bench makes (the
// data path of a CNI bridge, without the bridge).
//
// In each sandbox a static Go program (bench/nat/guest) connects to a
// server the bench runs on the host — 127.0.0.1 reached as 10.0.2.2 for
// gvx's NAT, the veth's host address for the peers — timing each connect,
// then uploads and downloads -bytes over one connection. It also measures
// the NAT process's memory and create→exec of a NAT sandbox against
// network = "none". `make bench` runs it.
//
//	go run ./bench/nat [-bytes 1073741824] [-connects 200] [-runs 10]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

const (
	ns      = "gvxbench"
	netns   = "gvxbench-nat"
	hostIP  = "10.200.0.1"
	guestIP = "10.200.0.2"
)

type peer struct {
	name    string
	runtime string
	opts    any
	nat     bool // gvx's NAT (else the bench's netns)
}

// result is the guest program's output (bench/nat/guest).
type result struct {
	ConnectNs  []int64 `json:"connect_ns"`
	UploadNs   int64   `json:"upload_ns"`
	DownloadNs int64   `json:"download_ns"`
	Bytes      int64   `json:"bytes"`
}

func main() {
	size := flag.Int64("bytes", 1<<30, "bytes uploaded and downloaded")
	connects := flag.Int("connects", 200, "connects timed")
	runs := flag.Int("runs", 10, "create→exec cycles of none and nat")
	flag.Parse()
	if err := run(*size, *connects, *runs); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(size int64, connects, runs int) error {
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), ns), "bench")
	defer stop()
	b, err := harness.StartBench(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	bins, c, img := b.Bins, b.Client, b.Busybox
	dir, err := os.MkdirTemp("", "gvx-bench-nat-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	guest := filepath.Join(dir, "guest")
	build := exec.Command("go", "build", "-o", guest, "./bench/nat/guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the guest program: %v\n%s", err, out)
	}
	os.Chmod(dir, 0o755)
	if err := makeNetns(); err != nil {
		return err
	}
	defer removeNetns()
	loSrv, err := serve("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer loSrv.Close()
	vethSrv, err := serve(hostIP + ":0")
	if err != nil {
		return err
	}
	defer vethSrv.Close()

	peers := []peer{
		{name: "gvx nat", runtime: api.RuntimeType, nat: true},
		{name: "runsc veth", runtime: "io.containerd.runc.v2", opts: &options.Options{BinaryName: filepath.Join(bins.Runsc, "runsc")}},
		{name: "runc veth", runtime: "io.containerd.runc.v2"},
	}
	fmt.Printf("gvx bench nat: %d connects, %d MiB each way, one sandbox per runtime, %d CPUs\n\n", connects, size>>20, numCPU())
	fmt.Printf("%-11s %10s %10s %12s %12s\n", "runtime", "connect p50", "p95", "guest→host", "host→guest")
	res := map[string]result{}
	var natMem memory
	for _, p := range peers {
		port := vethSrv.Addr().(*net.TCPAddr).Port
		target := fmt.Sprintf("%s:%d", hostIP, port)
		if p.nat {
			port = loSrv.Addr().(*net.TCPAddr).Port
			target = fmt.Sprintf("10.0.2.2:%d", port)
		} else if err := makeNetns(); err != nil {
			// Afresh for each peer: runsc moves the veth's addresses
			// into its netstack, leaving none in the namespace.
			return err
		}
		r, m, err := measure(ctx, c, img, p, guest, target, port, connects, size)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if p.nat {
			natMem = m
		}
		res[p.name] = r
		lat := durations(r.ConnectNs)
		fmt.Printf("%-11s %10s %10s %9.0f MB/s %9.0f MB/s\n", p.name, us(harness.Percentile(lat, 50)), us(harness.Percentile(lat, 95)),
			mbps(r.Bytes, r.UploadNs), mbps(r.Bytes, r.DownloadNs))
	}
	g, rs, rc := res["gvx nat"], res["runsc veth"], res["runc veth"]
	fmt.Printf("\nratios: guest→host throughput gvx/runsc %.2f×, gvx/runc %.2f×; host→guest gvx/runsc %.2f×, gvx/runc %.2f×; connect p50 gvx/runsc %.2f×\n",
		float64(rs.UploadNs)/float64(g.UploadNs), float64(rc.UploadNs)/float64(g.UploadNs),
		float64(rs.DownloadNs)/float64(g.DownloadNs), float64(rc.DownloadNs)/float64(g.DownloadNs),
		float64(harness.Percentile(durations(g.ConnectNs), 50))/float64(harness.Percentile(durations(rs.ConnectNs), 50)))
	fmt.Printf("NAT process 3 s after the transfers: %s\n", natMem)

	none, nat, err := createExec(ctx, c, img, runs)
	if err != nil {
		return err
	}
	fmt.Printf("create→exec (p50 of %d): network none %s, nat %s (+%s)\n", runs, ms(harness.Percentile(none.total, 50)), ms(harness.Percentile(nat.total, 50)),
		ms(harness.Percentile(nat.total, 50)-harness.Percentile(none.total, 50)))
	fmt.Printf("  by phase (p50, none / nat): container %s / %s, task create %s / %s, start %s / %s, exec %s / %s\n",
		ms(harness.Percentile(none.container, 50)), ms(harness.Percentile(nat.container, 50)),
		ms(harness.Percentile(none.create, 50)), ms(harness.Percentile(nat.create, 50)),
		ms(harness.Percentile(none.start, 50)), ms(harness.Percentile(nat.start, 50)),
		ms(harness.Percentile(none.exec, 50)), ms(harness.Percentile(nat.exec, 50)))
	return nil
}

// phases are create→exec cycles' times, whole and by phase.
type phases struct{ total, container, create, start, exec []time.Duration }

// measure runs the guest program in a sandbox of p and returns its
// result and, for the NAT, the NAT process's memory afterwards.
func measure(ctx context.Context, c *client.Client, img client.Image, p peer, guest, target string, port, connects int, size int64) (result, memory, error) {
	opts := []oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "600"),
		oci.WithMounts([]specs.Mount{{Destination: "/bench", Type: "bind", Source: filepath.Dir(guest), Options: []string{"rbind", "ro"}}})}
	if p.nat {
		enc, _ := api.EncodeNAT(api.NAT{Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", port)}}, DNS: []string{"127.0.0.1:53"}})
		opts = append(opts, oci.WithAnnotations(map[string]string{api.AnnotationNetwork: api.NetworkNAT, api.AnnotationNAT: enc}))
	} else {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/var/run/netns/" + netns}))
	}
	id := "nat-" + fmt.Sprint(time.Now().UnixNano())
	cont, err := c.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id, img),
		client.WithRuntime(p.runtime, p.opts), client.WithNewSpec(opts...))
	if err != nil {
		return result{}, memory{}, err
	}
	defer cont.Delete(ctx, client.WithSnapshotCleanup)
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		return result{}, memory{}, err
	}
	defer func() {
		task.Kill(ctx, syscall.SIGKILL)
		if ch, err := task.Wait(ctx); err == nil {
			<-ch
		}
		task.Delete(ctx)
	}()
	if err := task.Start(ctx); err != nil {
		return result{}, memory{}, err
	}
	if p.nat {
		time.Sleep(time.Second) // let start-up settle
		pid, err := natPid(id)
		if err != nil {
			return result{}, memory{}, err
		}
		fmt.Printf("(NAT process idle: %s)\n", readMemory(pid))
	}
	var out, errb bytes.Buffer
	proc, err := task.Exec(ctx, "guest", &specs.Process{Args: []string{"/bench/guest", target, fmt.Sprint(connects), fmt.Sprint(size)}, Cwd: "/"},
		cio.NewCreator(cio.WithStreams(nil, &out, &errb)))
	if err != nil {
		return result{}, memory{}, err
	}
	ch, err := proc.Wait(ctx)
	if err != nil {
		return result{}, memory{}, err
	}
	if err := proc.Start(ctx); err != nil {
		return result{}, memory{}, err
	}
	st := <-ch
	proc.Delete(ctx)
	if st.ExitCode() != 0 {
		return result{}, memory{}, fmt.Errorf("guest exited %d: %s", st.ExitCode(), errb.String())
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return result{}, memory{}, fmt.Errorf("guest output %q: %w", out.String(), err)
	}
	var m memory
	if p.nat {
		// The NAT returns the memory its flows grew 2 s after the last
		// one ended (nat.idleRelease): measure after that.
		time.Sleep(3 * time.Second)
		pid, err := natPid(id)
		if err != nil {
			return result{}, memory{}, err
		}
		m = readMemory(pid)
		if line := natIdleLine(id); line != "" {
			fmt.Printf("(NAT's own account after the transfers: %s)\n", line)
		}
	}
	return r, m, nil
}

// natIdleLine is the last "nat: idle" line of sandbox id's NAT log: its
// Go runtime's memory once it returned what its flows grew.
func natIdleLine(id string) string {
	root := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), ns))
	data, _ := os.ReadFile(root.NATLog(id))
	var last string
	for _, l := range strings.Split(string(data), "\n") {
		if _, after, ok := strings.Cut(l, "nat: idle: "); ok {
			last = after
		}
	}
	return last
}

// natPid is the pid of sandbox id's NAT process, from its stats file.
func natPid(id string) (int, error) {
	root := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), ns))
	data, err := os.ReadFile(root.NATStats(id))
	var s api.NATStats
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		return 0, fmt.Errorf("NAT stats: %w", err)
	}
	return s.Pid, nil
}

// createExec times create→start→exec(true) of sandboxes with network
// none and nat, alternately.
func createExec(ctx context.Context, c *client.Client, img client.Image, runs int) (none, nat phases, err error) {
	enc, _ := api.EncodeNAT(api.NAT{DNS: []string{"127.0.0.1:53"}})
	for i := 0; i < runs; i++ {
		for _, mode := range []string{api.NetworkNone, api.NetworkNAT} {
			ann := map[string]string{api.AnnotationNetwork: mode}
			if mode == api.NetworkNAT {
				ann[api.AnnotationNAT] = enc
			}
			id := fmt.Sprintf("ce-%s-%d", mode, i)
			t0 := time.Now()
			cont, err := c.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id, img), client.WithRuntime(api.RuntimeType, nil),
				client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "60"), oci.WithAnnotations(ann)))
			if err != nil {
				return none, nat, err
			}
			tc := time.Now()
			var ts, te time.Time
			task, err := cont.NewTask(ctx, cio.NullIO)
			if err == nil {
				ts = time.Now()
				err = task.Start(ctx)
			}
			if err == nil {
				te = time.Now()
				var proc client.Process
				proc, err = task.Exec(ctx, "e", &specs.Process{Args: []string{"/bin/true"}, Cwd: "/"}, cio.NullIO)
				if err == nil {
					ch, _ := proc.Wait(ctx)
					if err = proc.Start(ctx); err == nil {
						<-ch
					}
					proc.Delete(ctx)
				}
			}
			end := time.Now()
			if task != nil {
				task.Kill(ctx, syscall.SIGKILL)
				if ch, werr := task.Wait(ctx); werr == nil {
					<-ch
				}
				task.Delete(ctx)
			}
			cont.Delete(ctx, client.WithSnapshotCleanup)
			if err != nil {
				return none, nat, fmt.Errorf("%s: %w", id, err)
			}
			p := &none
			if mode == api.NetworkNAT {
				p = &nat
			}
			p.total = append(p.total, end.Sub(t0))
			p.container = append(p.container, tc.Sub(t0))
			p.create = append(p.create, ts.Sub(tc))
			p.start = append(p.start, te.Sub(ts))
			p.exec = append(p.exec, end.Sub(te))
		}
	}
	return none, nat, nil
}

// memory is a process's: USS, PSS, and its anonymous memory — what each
// further NAT sandbox on a node costs, the gvx-nat binary's pages being
// shared by all of them (a lone sandbox's USS counts them too).
type memory struct{ uss, pss, anon int64 }

func readMemory(pid int) memory {
	var m memory
	m.uss, m.pss, _ = harness.Smaps(pid)
	m.anon, _ = harness.SmapsAnonymous(pid)
	return m
}

func (m memory) String() string {
	return fmt.Sprintf("USS %.1f MiB, PSS %.1f MiB, anonymous %.1f MiB", float64(m.uss)/(1<<20), float64(m.pss)/(1<<20), float64(m.anon)/(1<<20))
}
