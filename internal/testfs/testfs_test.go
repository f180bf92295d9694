package testfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHolders finds this process by its open file on a loop filesystem,
// and the mount namespace that has it mounted.
func TestHolders(t *testing.T) {
	mnt := LoopFS(t, "ext4", "16M")
	f, err := os.Create(filepath.Join(mnt, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	loops := LoopsUnder(filepath.Dir(mnt) + "/")
	if len(loops) != 1 {
		t.Fatalf("loop devices on the test's image: %v, want one", loops)
	}
	h := strings.Join(Holders(strings.Fields(loops[0])[0]), "\n")
	for _, want := range []string{
		"has it mounted at " + mnt,
		fmt.Sprintf("pid %d (", os.Getpid()),
		"(" + filepath.Join(mnt, "held") + ")",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("holders lack %q:\n%s", want, h)
		}
	}
}
