package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/digest"
	"github.com/gvxrun/gvx/rollout"
)

// ckDockerRunner is a dind runner whose SDK client keeps its checkpoints
// on an XFS loop filesystem (reflink copies of /var/lib/docker), and that
// directory for the episodes' volumes.
func ckDockerRunner(t *testing.T, spares int) (*dind.Runner, string) {
	t.Helper()
	return ckDockerRunnerWith(t, sdk.Options{Spares: spares})
}

// ckDockerRunnerWith is ckDockerRunner with SDK options o (the containerd,
// namespace and checkpoint store are the test's).
func ckDockerRunnerWith(t *testing.T, o sdk.Options) (*dind.Runner, string) {
	t.Helper()
	dir := loopFS(t, "xfs")
	o.Containerd, o.Namespace, o.CheckpointDir = e.Socket(), testNS, filepath.Join(dir, "store")
	c, err := sdk.Connect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		cks, err := c.Checkpoints(ctx)
		if err != nil {
			t.Error(err)
		}
		for _, ck := range cks {
			if err := c.ReleaseCheckpoint(ctx, ck.ID); err != nil && !errors.Is(err, sdk.ErrNotFound) {
				t.Error(err)
			}
		}
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return &dind.Runner{Client: c}, dir
}

// printsWithin fails the test (not fatally) unless run's output
// contains want within 10 s, tried every 200 ms; the error shows what
// was last printed.
func printsWithin(t *testing.T, what, want string, run func() string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out = run(); strings.Contains(out, want) {
			return
		}
	}
	t.Errorf("%s: %q, want %q", what, out, want)
}

// ckEpisode starts episode id of r (its volume in dir); the test's end
// closes it unless the returned func closed it first.
func ckEpisode(t *testing.T, ctx context.Context, r *dind.Runner, dir, id string) (*dind.Episode, func() error) {
	t.Helper()
	ep, err := r.StartEpisode(ctx, id, dindImage, golden, filepath.Join(dir, id+".ext4"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = ep.Close(context.Background(), false)
		}
	})
	return ep, func() error {
		closed = true
		return ep.Close(ctx, false)
	}
}

// TestDockerCheckpointRollback: a docker-mode sandbox checkpointed with
// dockerd up (an image tagged, a container created and one running) and
// rolled back after changes — into a spare, or without one into the
// restore target the engine made after the checkpoint: dockerd answers on
// the same host socket, the image is back, the container made after the
// checkpoint is gone, the ones made before are there, and `docker run`
// works.
func TestDockerCheckpointRollback(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	for i, o := range []sdk.Options{{}, {NoRestoreTargets: true}, {Spares: 1}} {
		r, dir := ckDockerRunnerWith(t, o)
		id := "dkck" + string(rune('a'+i))
		ep, closeEp := ckEpisode(t, ctx, r, dir, id)
		sock := ep.Docker.Socket
		sbRun(t, ctx, ep.Sandbox, `set -e
docker tag gvx.test/busybox:latest gvx-test/before:1
docker create --name made-before gvx.test/busybox:latest true >/dev/null
docker run -d --name running-before gvx.test/busybox:latest sleep 100000 >/dev/null`)
		ck, err := ep.SDK.Checkpoint(ctx, sdk.CheckpointOptions{})
		if err != nil {
			t.Fatalf("checkpoint of docker-mode %s: %v", id, err)
		}
		t.Logf("%s: checkpoint paused %s", id, ck.Paused)
		// The image keeps the gvx-relay the guest runs, and its manifest
		// says so, as the shim's checkpoints do: a restore after an
		// upgrade runs the relay process on its own code.
		image := filepath.Join(dir, "store", "handles", ck.ID, "image")
		if m, err := checkpoint.ReadManifest(image); err != nil || !m.Docker || !digest.Valid(m.Relay) {
			t.Errorf("%s: the checkpoint's manifest %+v, %v; want docker mode and the relay's digest", id, m, err)
		} else if sum, err := digest.File(filepath.Join(image, checkpoint.RelayFile)); err != nil || sum != m.Relay {
			t.Errorf("%s: the image's %s: %s, %v; want the manifest's %s", id, checkpoint.RelayFile, sum, err, m.Relay)
		}
		sbRun(t, ctx, ep.Sandbox, `set -e
docker run -d --name made-after gvx.test/busybox:latest sleep 100000 >/dev/null
docker rm made-before >/dev/null
docker rmi gvx-test/before:1 >/dev/null`)
		if o.Spares > 0 {
			// A rollback that comes before the spare is ready restores
			// into the restore target instead (≈ 1 s after the save on
			// a busy machine).
			waitFor(t, "a spare of "+ck.ID, func() bool { return spareReady(t, ctx, ck.ID) })
		}
		t0 := time.Now()
		if err := ep.SDK.Rollback(ctx, ck.ID); err != nil {
			t.Fatalf("rollback of %s: %v", id, err)
		}
		how := map[int]string{0: "into a restore target", 1: "on demand", 2: "into a spare"}[i]
		t.Logf("%s: rollback %s took %s", id, how, time.Since(t0))
		if into := intoTargetBacking(t, ctx, ep.SDK.ID()); into != (i == 0) {
			// Without a spare the rollback restores into the restore
			// target made after the checkpoint (waiting for it).
			t.Errorf("%s: the rollback %s restored into a restore target: %t", id, how, into)
		}
		if got := ep.SDK.DockerSocket(); got != sock {
			t.Errorf("docker socket after the rollback %s, want %s", got, sock)
		}
		imgs, err := dind.NewDocker(sock).Images(ctx)
		if err != nil {
			t.Fatalf("dockerd through %s after the rollback: %v", sock, err)
		}
		if all := strings.Join(imgs, " "); !strings.Contains(all, "gvx-test/before:1") || !strings.Contains(all, "gvx.test/busybox:latest") {
			t.Errorf("images after the rollback %v, want gvx-test/before:1 (tagged before the checkpoint, removed after) back", imgs)
		}
		ps := sbRun(t, ctx, ep.Sandbox, "docker ps -a --format '{{.Names}}'")
		if !strings.Contains(ps, "made-before") || !strings.Contains(ps, "running-before") || strings.Contains(ps, "made-after") {
			t.Errorf("containers after the rollback:\n%s\nwant made-before and running-before, not made-after", ps)
		}
		if out := sbRun(t, ctx, ep.Sandbox, "docker run --rm gvx.test/busybox:latest echo ok"); strings.TrimSpace(out) != "ok" {
			t.Errorf("docker run after the rollback: %q", out)
		}
		if out := sbRun(t, ctx, ep.Sandbox, "docker exec running-before echo alive"); strings.TrimSpace(out) != "alive" {
			t.Errorf("docker exec in the container running at the checkpoint: %q", out)
		}
		if err := closeEp(); err != nil {
			t.Errorf("close %s: %v", id, err)
		}
	}
}

// TestDockerGoldenCheckpoint: `gvx golden build --checkpoint` keeps a
// checkpoint of dockerd booted on the golden volume; `gvx episode start`
// restores episodes from it instead of booting dockerd: dockerd answers on
// the episode's documented socket at once, with the preloaded image, and
// `docker run` works; two episodes of one checkpoint diverge; `gvx episode
// rm` removes an episode with its volume copy. The same on gvx's NAT
// (a runtime config with network = "nat"): the seed and each episode run
// a NAT of their own, the episodes' dockerd reached through it.
func TestDockerGoldenCheckpoint(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	for _, network := range []string{api.NetworkSandbox, api.NetworkNAT} {
		t.Run(network, func(t *testing.T) { goldenCheckpoint(t, ctx, network) })
	}
}

func goldenCheckpoint(t *testing.T, ctx context.Context, network string) {
	dir := loopFS(t, "xfs")
	gold := filepath.Join(dir, "golden.ext4")
	ckDir := dind.GoldenCheckpointDir(gold)
	gvxCmd := func(args ...string) string {
		t.Helper()
		r, err := e.run(ctx, "", filepath.Join(e.gvxBin, "gvx"), args...)
		if err != nil || r.code != 0 {
			t.Fatalf("gvx %s: exit %d, %v: %s", strings.Join(args, " "), r.code, err, r.stderr)
		}
		t.Logf("gvx %s: %s", args[0], strings.TrimSpace(r.stderr))
		return r.stdout
	}
	cflags := []string{"--address", e.Socket(), "--namespace", testNS}
	eps := []string{"dkgc1", "dkgc2"}
	if network == api.NetworkNAT {
		cfg := filepath.Join(dir, "nat.toml")
		if err := os.WriteFile(cfg, []byte("network = \"nat\"\n[nat]\ndns = [\"127.0.0.1:9\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cflags = append(cflags, "--runtime-config", cfg)
		eps = []string{"dkgcnat1", "dkgcnat2"}
	}
	out := gvxCmd(append(append([]string{"golden", "build"}, cflags...), "--image", dindImage, "--load", filepath.Join(e.images, "busybox.tar"),
		"--size", "1G", "--checkpoint", gold)...)
	if !strings.Contains(out, "checkpoint") {
		t.Errorf("golden build --checkpoint printed %q, want the checkpoint", out)
	}
	// The command closed what it made: no spare or restore target of a
	// process that has exited.
	if left := orphanedBackings(t, ctx); len(left) > 0 {
		t.Errorf("golden build --checkpoint left restored containers of its exited process: %v", left)
	}
	t.Cleanup(func() {
		c, err := sdk.Connect(context.Background(), sdk.Options{Containerd: e.Socket(), Namespace: testNS, CheckpointDir: ckDir})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		cks, _ := c.Checkpoints(context.Background())
		for _, ck := range cks {
			if err := c.ReleaseCheckpoint(context.Background(), ck.ID); err != nil {
				t.Error(err)
			}
		}
	})
	ck, err := dind.GoldenCheckpoint(ckDir)
	if err != nil || ck == "" {
		t.Fatalf("golden checkpoint in %s: %q, %v", ckDir, ck, err)
	}

	// Two episodes by the CLI, restored from the checkpoint.
	for _, id := range eps {
		out := gvxCmd(append(append([]string{"episode", "start"}, cflags...), "--golden", gold, id)...)
		want := "DOCKER_HOST=unix://" + harness.State.DockerSocket(testNS, id)
		if strings.TrimSpace(out) != want {
			t.Errorf("episode start %s printed %q, want %q", id, out, want)
		}
		t.Cleanup(func() {
			_, _ = e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), append(append([]string{"episode", "rm"}, cflags...), id)...)
		})
	}
	for _, id := range eps {
		imgs, err := dind.NewDocker(harness.State.DockerSocket(testNS, id)).Images(ctx)
		if err != nil {
			t.Fatalf("dockerd of restored episode %s: %v", id, err)
		}
		if !strings.Contains(strings.Join(imgs, " "), "gvx.test/busybox:latest") {
			t.Errorf("images of restored episode %s: %v, want the preloaded busybox", id, imgs)
		}
	}
	if out := ctrSh(t, eps[0], "docker run --name only-in-1 gvx.test/busybox:latest echo ok"); !strings.Contains(out, "ok") {
		t.Errorf("docker run in a restored episode: %q", out)
	}
	if ps := ctrSh(t, eps[1], "docker ps -a --format '{{.Names}}'"); strings.Contains(ps, "only-in-1") {
		t.Errorf("episode %s sees %s's container:\n%s", eps[1], eps[0], ps)
	}
	if out := ctrSh(t, eps[1], "docker run --rm gvx.test/busybox:latest echo ok2"); !strings.Contains(out, "ok2") {
		t.Errorf("docker run in the second restored episode: %q", out)
	}
	if network == api.NetworkNAT {
		for _, id := range eps {
			if out := ctrSh(t, id, "ip -4 -o addr show eth0"); !strings.Contains(out, "10.0.2.15/24") {
				t.Errorf("restored NAT episode %s's eth0: %q", id, out)
			}
			if _, err := os.Stat(api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS)).NATStats(id)); err != nil {
				t.Errorf("restored NAT episode %s has no NAT of its own: %v", id, err)
			}
		}
	}
	for _, id := range eps {
		gvxCmd(append(append([]string{"episode", "rm"}, cflags...), id)...)
	}
	if left, _ := filepath.Glob(filepath.Join(ckDir, "volumes", "*", "*")); len(left) > 0 {
		t.Errorf("episode rm left volume copies: %v", left)
	}
}

// TestDockerCheckpointNAT: a docker-mode sandbox on gvx's NAT (dockerd's
// host socket relayed through a unix socket the NAT publishes, not a host
// socket of the guest's) is checkpointed with dockerd up and rolled back
// through a hot spare: the host socket keeps its path and dockerd answers
// through it, the image removed after the checkpoint is back, an inner
// container reaches the host's server through the NAT (its policy kept),
// and a fork has a docker socket and a NAT of its own.
func TestDockerCheckpointNAT(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	srv := startNATHTTP(t, "inner-through-the-nat")
	r, dir := ckDockerRunner(t, 1)
	r.Network = sdk.NetworkNAT
	r.NAT = &sdk.NAT{DNS: []string{"127.0.0.1:9"}, EgressAllow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}}
	id := "dkcknat"
	ep, closeEp := ckEpisode(t, ctx, r, dir, id)
	sock := ep.Docker.Socket
	inner := fmt.Sprintf("docker run --rm gvx.test/busybox:latest wget -q -O - http://10.0.2.2:%d/", srv.port)
	if out := sbRun(t, ctx, ep.Sandbox, inner); strings.TrimSpace(out) != "inner-through-the-nat" {
		t.Fatalf("inner container through the NAT before the checkpoint: %q", out)
	}
	sbRun(t, ctx, ep.Sandbox, "docker tag gvx.test/busybox:latest gvx-test/before:1")
	ck, err := ep.SDK.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatalf("checkpoint of a docker-mode NAT sandbox: %v", err)
	}
	sbRun(t, ctx, ep.Sandbox, "docker rmi gvx-test/before:1 >/dev/null")
	if err := ep.SDK.Rollback(ctx, ck.ID); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := ep.SDK.DockerSocket(); got != sock {
		t.Errorf("docker socket after the rollback %s, want %s", got, sock)
	}
	imgs, err := dind.NewDocker(sock).Images(ctx)
	if err != nil {
		t.Fatalf("dockerd through %s after the rollback: %v", sock, err)
	}
	if !strings.Contains(strings.Join(imgs, " "), "gvx-test/before:1") {
		t.Errorf("images after the rollback %v, want gvx-test/before:1 back", imgs)
	}
	if out := sbRun(t, ctx, ep.Sandbox, inner); strings.TrimSpace(out) != "inner-through-the-nat" {
		t.Errorf("inner container through the NAT after the rollback: %q", out)
	}
	refused := "docker run --rm gvx.test/busybox:latest wget -q -O - http://10.0.2.2:1/ >/dev/null 2>&1 && echo through || echo refused"
	if out := sbRun(t, ctx, ep.Sandbox, refused); strings.TrimSpace(out) != "refused" {
		t.Errorf("a port the restored NAT's policy does not allow: %q", out)
	}

	forks, err := r.Client.Fork(ctx, ck.ID, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	f := forks[0]
	defer f.Close(ctx)
	if fs := f.DockerSocket(); fs == sock || fs == "" {
		t.Errorf("the fork's docker socket %q, want one of its own (the sandbox's is %s)", fs, sock)
	} else if fimgs, err := dind.NewDocker(fs).Images(ctx); err != nil || !strings.Contains(strings.Join(fimgs, " "), "gvx-test/before:1") {
		t.Errorf("the fork's dockerd through %s: %v, %v", fs, fimgs, err)
	}
	if err := f.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := closeEp(); err != nil {
		t.Errorf("close %s: %v", id, err)
	}
}

// TestDockerCheckpointInnerNetworks: inner containers' networks across
// checkpoints of a docker-mode sandbox. gVisor saves every network
// namespace but restores only the sandbox's own, freezes every socket it
// saves and thaws only that namespace's.
//   - A container on dockerd's bridge that has sent (a ping) makes the
//     save fail (the bridge's learned address cannot be saved): the
//     checkpoint is refused naming the way out, through the SDK and
//     through containerd, and the inner network still works afterwards.
//   - A TCP server in a container's own namespace (`--network none`)
//     would make the restore wait for ever (api.IoctlInnerTCP): the
//     checkpoint is refused before the sandbox is paused, through both
//     paths, and the server still answers.
//   - Without it, a checkpoint succeeds with a TCP server on the
//     sandbox's network (`--network host`) and a ping on a `--network
//     none` container's loopback: both go on in the running sandbox —
//     gvx-sentry thaws the sockets the save froze after each checkpoint
//     (sentry/compat/saveguard.go; without it the ping got no more
//     replies) — and a rollback gives the server back answering.
func TestDockerCheckpointInnerNetworks(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	r, dir := ckDockerRunner(t, 0)
	const id, ref = "dkcknet", "gvx.test/dkcknet:1"
	ep, closeEp := ckEpisode(t, ctx, r, dir, id)
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	run := func(script string) string { return sbRun(t, ctx, ep.Sandbox, script) }
	// answers waits for script to print want.
	answers := func(what, script, want string) {
		t.Helper()
		printsWithin(t, what, want, func() string { return run(script + " 2>&1 || true") })
	}
	// refused checks that the SDK's and ctr's checkpoints are refused
	// with an error containing want, leaving the task running.
	refused := func(what, want string) {
		t.Helper()
		_, err := ep.SDK.Checkpoint(ctx, sdk.CheckpointOptions{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--network host") || strings.Contains(err.Error(), "goroutine") {
			t.Errorf("SDK checkpoint with %s: %v; want the refusal %q naming --network host, without gVisor's goroutine dump", what, err, want)
		}
		res, err := e.ctrResult(ctx, "container", "checkpoint", "--task", id, ref)
		if err != nil {
			t.Fatal(err)
		}
		if res.code == 0 || !strings.Contains(res.stderr, want) {
			t.Errorf("ctr c checkpoint with %s: exit %d, %q; want the refusal %q", what, res.code, res.stderr, want)
		}
		if st := taskStatus(t, id); st != "RUNNING" {
			t.Errorf("%s is %s after the refused checkpoints with %s, want RUNNING", id, st, what)
		}
	}
	// docker0's address in the sandbox: the bridged container's gateway.
	gateway := `$(ip -4 addr show docker0 | awk '/inet / {sub("/.*", "", $2); print $2}')`
	run(`docker run -d --name br gvx.test/busybox:latest sh -c "ping -c 1 -W 3 ` + gateway + ` && sleep 100000" >/dev/null`)
	answers("the bridged container's ping", "docker logs br", "1 packets received")
	refused("a bridged container that sent", "learned the address")
	answers("a ping over the bridge after the refused checkpoints", `docker exec br sh -c "ping -c 1 -W 3 `+gateway+`"`, "1 packets received")
	run("docker rm -f br >/dev/null")

	serve := func(name, network string) {
		run(fmt.Sprintf(`docker run -d --name %[1]s --network %[2]s gvx.test/busybox:latest sh -c 'while true; do echo hi-%[1]s | nc -l -p 8080; done' >/dev/null`, name, network))
	}
	serve("lo", "none")
	serve("hn", "host")
	ownLoopback := `docker exec lo sh -c "nc -w 3 127.0.0.1 8080 </dev/null"`
	sandboxNet := `docker run --rm --network host gvx.test/busybox:latest nc -w 3 127.0.0.1 8080 </dev/null`
	answers("--network none container's loopback", ownLoopback, "hi-lo")
	answers("--network host container", sandboxNet, "hi-hn")
	refused("a TCP server in a --network none container", "TCP sockets in inner containers' own network namespaces")
	answers("--network none container's loopback after the refused checkpoints", ownLoopback, "hi-lo")
	answers("--network host container after the refused checkpoints", sandboxNet, "hi-hn")
	run("docker rm -f lo >/dev/null")

	run("docker run -d --name png --network none gvx.test/busybox:latest ping -i 0.2 127.0.0.1 >/dev/null")
	replies := func() int { return strings.Count(run("docker logs png 2>&1"), "bytes from") }
	answers("the ping on a --network none container's loopback", "docker logs png", "bytes from")
	ck, err := ep.SDK.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatalf("checkpoint with a ping on --network none and a server on --network host: %v", err)
	}
	before := replies()
	time.Sleep(2 * time.Second)
	if after := replies(); after < before+3 {
		t.Errorf("the ping on a --network none container's loopback after the checkpoint: %d replies, then %d 2 s later; want it going on", before, after)
	}
	answers("--network host container after the checkpoint", sandboxNet, "hi-hn")
	if err := ep.SDK.Rollback(ctx, ck.ID); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	answers("--network host container after the rollback", sandboxNet, "hi-hn")
	if err := closeEp(); err != nil {
		t.Errorf("close %s: %v", id, err)
	}
}

// intoTargetBacking says whether sandbox id's backing (the container the
// rollout engine labelled as id's) was restored into a restore target:
// its containerd spec keeps the target annotation from its create.
func intoTargetBacking(t *testing.T, ctx context.Context, id string) bool {
	t.Helper()
	c := mustClient(t)
	cts, err := c.Containers(namespaces.WithNamespace(ctx, testNS), fmt.Sprintf("labels.%q==%s", rollout.LabelSandbox, id))
	if err != nil || len(cts) != 1 {
		t.Fatalf("sandbox %s's backing: %d containers, %v", id, len(cts), err)
	}
	spec, err := cts[0].Spec(namespaces.WithNamespace(ctx, testNS))
	if err != nil {
		t.Fatal(err)
	}
	return spec.Annotations[api.AnnotationRestoreTarget] == "true"
}

// spareReady says whether a spare the rollout engine restored of
// checkpoint ck is ready: restored, and its kernel paused by the engine
// (its pause mark written; the engine pauses through the control socket,
// so containerd still calls the task running).
func spareReady(t *testing.T, ctx context.Context, ck string) bool {
	t.Helper()
	nctx := namespaces.WithNamespace(ctx, testNS)
	cts, err := mustClient(t).Containers(nctx, fmt.Sprintf("labels.%q==spare,labels.%q==%s", rollout.LabelRole, "dev.gvx.rollout.handle", ck))
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range cts {
		mark := api.SentryRoot(filepath.Join(harness.State.SentryRoot(ct.ID()), testNS)).EnginePaused(ct.ID())
		if _, err := os.Stat(mark); err == nil {
			return true
		}
	}
	return false
}

// orphanedBackings lists the containers a rollout engine restored (spares,
// restore targets) whose engine's process is gone (rollout.Orphaned).
func orphanedBackings(t *testing.T, ctx context.Context) []string {
	t.Helper()
	c := mustClient(t)
	nctx := namespaces.WithNamespace(ctx, testNS)
	cts, err := c.Containers(nctx, fmt.Sprintf("labels.%q", rollout.LabelRole))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ct := range cts {
		if labels, err := ct.Labels(nctx); err == nil && rollout.Orphaned(labels) {
			out = append(out, ct.ID())
		}
	}
	return out
}
