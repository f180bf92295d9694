package checkpoint

import (
	"testing"

	"gvisor.dev/gvisor/pkg/sentry/state/checkpointfiles"

	"github.com/gvxrun/gvx/api/contracttest"
)

// TestContractFiles: the image files the root module writes when it drives
// a save itself are the ones gVisor's restore reads.
func TestContractFiles(t *testing.T) {
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	for key, gvisor := range map[string]string{
		"checkpoint_state_file":      checkpointfiles.StateFileName,
		"checkpoint_pages_meta_file": checkpointfiles.PagesMetadataFileName,
		"checkpoint_pages_file":      checkpointfiles.PagesFileName,
	} {
		if c.Name(key) != gvisor {
			t.Errorf("%s: contract.json says %q, gVisor %q", key, c.Name(key), gvisor)
		}
	}
}
