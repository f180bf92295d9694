package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx"
)

// treeSearch is the other half of an RL rollout: an agent's sandbox
// checkpointed, a bad step undone by a rollback (processes and files as
// they were), and the checkpoint forked into two branches that diverge.
func treeSearch(ctx context.Context, c *gvx.Client, image, golden string) (retErr error) {
	fmt.Println("==> tree search: checkpoint an agent's sandbox, roll a bad step back, fork two branches")
	t0 := time.Now()
	// The agent: a process whose state lives only in its memory (a
	// counter it bumps and reports on each SIGUSR1).
	sb, err := c.New(ctx, gvx.Config{Image: image, Cmd: []string{"sh", "-c",
		`n=0; trap 'n=$((n+1)); echo "step $n" > /tmp/agent' USR1; echo "step 0" > /tmp/agent; while :; do sleep 0.05; done`}})
	if err != nil {
		return err
	}
	var all []*gvx.Sandbox
	all = append(all, sb)
	var cks []string
	defer func() {
		t0 := time.Now()
		for _, s := range all {
			if err := s.Close(ctx); err != nil && retErr == nil {
				retErr = err
			}
		}
		if retErr == nil {
			// Forks' ids start with the first sandbox's: all are closed first.
			for _, s := range all {
				if left := residue(s.ID(), golden); left != "" {
					retErr = errors.New("left on the host: " + left)
					return
				}
			}
			stepLine(t0, "closed the 3 sandboxes: nothing left")
		}
		for _, id := range cks {
			if err := c.ReleaseCheckpoint(ctx, id); err != nil && retErr == nil {
				retErr = err
			}
		}
	}()
	agent := func(s *gvx.Sandbox, script string) (string, error) {
		res, err := s.Exec(ctx, []string{"sh", "-c", script}, gvx.ExecOptions{Timeout: 30 * time.Second})
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(res.Stdout)), nil
	}
	step := func(s *gvx.Sandbox) (string, error) {
		before, _ := agent(s, "cat /tmp/agent")
		if err := s.Signal(ctx, syscall.SIGUSR1); err != nil {
			return "", err
		}
		for i := 0; i < 200; i++ {
			if now, _ := agent(s, "cat /tmp/agent"); now != before {
				return now, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return "", fmt.Errorf("the agent in %s did not take a step", s.ID())
	}
	for i := 0; i < 200; i++ {
		if out, _ := agent(sb, "cat /tmp/agent 2>/dev/null"); out == "step 0" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := step(sb); err != nil {
		return err
	}
	if _, err := agent(sb, "echo 'a good edit' > /tmp/work.txt"); err != nil {
		return err
	}
	stepLine(t0, "agent sandbox %s up, one step taken, a file written", sb.ID())

	t0 = time.Now()
	ck, err := sb.Checkpoint(ctx, gvx.CheckpointOptions{Async: true})
	if err != nil {
		return err
	}
	cks = append(cks, ck.ID)
	stepLine(t0, "checkpoint %s (the caller waits for the pause only)", ck.ID)

	t0 = time.Now()
	if _, err := step(sb); err != nil {
		return err
	}
	if _, err := agent(sb, "echo 'a bad edit' > /tmp/work.txt"); err != nil {
		return err
	}
	stepLine(t0, "a bad step: agent at step 2, the file overwritten")

	t0 = time.Now()
	if err := sb.Rollback(ctx, ck.ID); err != nil {
		return err
	}
	stepLine(t0, "rollback to %s (a restore: no spare kept)", ck.ID)
	state, err := agent(sb, "cat /tmp/agent /tmp/work.txt")
	if err != nil {
		return err
	}
	fmt.Printf("    back: %s\n", strings.ReplaceAll(state, "\n", " · "))
	if !strings.HasPrefix(state, "step 1\na good edit") {
		return fmt.Errorf("after the rollback the sandbox has %q", state)
	}

	t0 = time.Now()
	forks, err := c.Fork(ctx, ck.ID, 2)
	if err != nil {
		return err
	}
	all = append(all, forks...)
	stepLine(t0, "fork of %s into 2 sandboxes", ck.ID)
	for i, f := range forks {
		if _, err := agent(f, fmt.Sprintf("echo 'branch %d' > /tmp/work.txt", i)); err != nil {
			return err
		}
	}
	for _, f := range forks {
		out, err := agent(f, "cat /tmp/agent /tmp/work.txt")
		if err != nil {
			return err
		}
		fmt.Printf("    %s: %s\n", f.ID(), strings.ReplaceAll(out, "\n", " · "))
	}
	return nil
}
