package metrics

import (
	"context"
	"errors"
	"strings"

	"github.com/containerd/errdefs"
)

// Failure classes: the outcome label of a failed operation.
const (
	OK                = "ok"
	ClassImage        = "image"
	ClassVolume       = "volume"
	ClassSandboxStart = "sandbox_start"
	ClassAdopt        = "adopt"
	ClassTimeout      = "timeout"
	ClassOOM          = "oom"
	ClassQuota        = "quota"
	ClassAdmission    = "admission"
	ClassOther        = "other"
)

// Classed is an error that knows its failure class.
type Classed interface{ FailureClass() string }

type classed struct {
	class string
	err   error
}

func (c *classed) Error() string        { return c.err.Error() }
func (c *classed) Unwrap() error        { return c.err }
func (c *classed) FailureClass() string { return c.class }

// WithClass marks err as of class (nil stays nil).
func WithClass(class string, err error) error {
	if err == nil {
		return nil
	}
	return &classed{class, err}
}

// Classify is err's failure class: the class it was marked with, else
// what its kind (a deadline, containerd's ResourceExhausted) or, last,
// the step its message names says.
func Classify(err error) string {
	if err == nil {
		return OK
	}
	var c Classed
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTimeout
	}
	if errdefs.IsResourceExhausted(err) {
		return ClassAdmission
	}
	msg := strings.ToLower(err.Error())
	for _, k := range []struct{ class, words string }{
		{ClassOOM, "oom|out of memory"},
		{ClassQuota, "quota|pids limit|memory limit"},
		{ClassTimeout, "timed out|deadline exceeded|timeout"},
		{ClassVolume, "volume|ext4"},
		{ClassImage, "image|pull|unpack|manifest|snapshot"},
		{ClassAdopt, "adopt|pool"},
		{ClassSandboxStart, "sandbox|gvx-sentry|start|create|runtime"},
	} {
		for _, w := range strings.Split(k.words, "|") {
			if strings.Contains(msg, w) {
				return k.class
			}
		}
	}
	return ClassOther
}
