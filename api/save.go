package api

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBridgeLearned is what ExplainSave makes of gVisor's failure to save
// a sandbox whose network bridge has learned an address.
var ErrBridgeLearned = errors.New("a network bridge in the guest (dockerd's docker0 or another) has learned the address of a container attached to it, and gVisor cannot save a bridge's learned addresses (stack.BridgeFDBEntry)")

// ErrInnerTCP is the refusal of a checkpoint of a docker-mode sandbox
// whose inner containers' own network namespaces hold TCP sockets that
// gVisor's restore would wait on for ever (IoctlInnerTCP).
var ErrInnerTCP = errors.New("TCP sockets in inner containers' own network namespaces (listening, connecting or connected, TIME-WAIT included) cannot be checkpointed: gVisor restores only the sandbox's own network namespace, and the restore of such a checkpoint never finishes")

// InnerTCPError is the refusal of a checkpoint while n such sockets are
// held, naming the ways out.
func InnerTCPError(n int) error {
	return fmt.Errorf("%w: %d held now. Run inner containers that serve or connect over TCP across checkpoints with --network host "+
		"(the sandbox's own network, still isolated from the host), or stop them (and wait out TIME-WAIT, 60 s) before the checkpoint; "+
		"containers on --network none or a bridge that hold no TCP socket are fine; the sandbox keeps running", ErrInnerTCP, n)
}

// bridgeFDBType names the type gVisor's encoder refuses then.
const bridgeFDBType = "stack.BridgeFDBEntry"

// ExplainSave turns the errors of gVisor's save that gvx knows into ones
// that say what to do, keeping only the first line of gVisor's (its
// encoder appends goroutine dumps); others are returned as they are.
func ExplainSave(err error) error {
	if err == nil {
		return err
	}
	if first, _, _ := strings.Cut(err.Error(), "\n"); strings.Contains(first, ErrInnerTCP.Error()) {
		// gvx-sentry's own refusal from inside the save (its save
		// guard), behind gVisor's prefixes and before its trace.
		_, rest, _ := strings.Cut(first, ErrInnerTCP.Error())
		return fmt.Errorf("%w%s", ErrInnerTCP, strings.TrimSuffix(strings.TrimSpace(rest), ":"))
	}
	if !strings.Contains(err.Error(), bridgeFDBType) {
		return err
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	return fmt.Errorf("%w: a bridge learns once a container on it sends, and its learned addresses go only with the container. "+
		"Run inner containers that must live through checkpoints with --network host (the sandbox's own network, still isolated from the host) or --network none, "+
		"or remove the bridged ones before the checkpoint; the sandbox keeps running (gVisor: %s)", ErrBridgeLearned, strings.TrimSpace(first))
}
