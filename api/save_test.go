package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestExplainSave(t *testing.T) {
	if err := ExplainSave(nil); err != nil {
		t.Errorf("ExplainSave(nil) = %v", err)
	}
	other := errors.New("disk full")
	if err := ExplainSave(other); err != other {
		t.Errorf("ExplainSave(%v) = %v, want it unchanged", other, err)
	}
	gv := errors.New("containerManager.Checkpoint: encoding error: struct stack.BridgeFDBEntry does not implement SaverLoader:\ngoroutine 2189 [running]:\ngvisor.dev/gvisor/pkg/state.safely.func1()")
	err := ExplainSave(fmt.Errorf("checkpoint ck-1 of sb: %w", gv))
	if !errors.Is(err, ErrBridgeLearned) || !strings.Contains(err.Error(), "--network host") || strings.Contains(err.Error(), "goroutine") ||
		!strings.Contains(err.Error(), "checkpoint ck-1 of sb: containerManager.Checkpoint: encoding error") {
		t.Errorf("ExplainSave(bridge) = %v: want ErrBridgeLearned, the way out, gVisor's first line and no goroutine dump", err)
	}
	guard := errors.New("containerManager.Checkpoint: " + InnerTCPError(2).Error() + ":\ngoroutine 7 [running]:\ngvisor.dev/gvisor/pkg/state.safely.func1()")
	err = ExplainSave(fmt.Errorf("checkpoint sb: %w", guard))
	if !errors.Is(err, ErrInnerTCP) || err.Error() != InnerTCPError(2).Error() {
		t.Errorf("ExplainSave(save guard) = %q: want ErrInnerTCP with its message alone, %q", err, InnerTCPError(2))
	}
}
