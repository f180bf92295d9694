package hook

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: gvx-hook takes the loopback argument the shim passes, as
// contract.json spells it (it then tries the network namespace).
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	err := Run([]string{c.Name("hook_loopback")}, strings.NewReader(`{"pid":2147483646}`))
	if err == nil || !strings.Contains(err.Error(), "open network namespace") {
		t.Errorf("Run(%s) = %v, want it to bring up lo", c.Name("hook_loopback"), err)
	}
}
