package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gvxrun/gvx/internal/filecopy"
)

// SaveRelay puts gvx-relay copy src (a copy in the state directory's
// relay store, named by its digest, never written again) into image
// directory dir as RelayFile: a hard link when dir is on the store's
// filesystem, a copy otherwise.
func SaveRelay(dir, src string) error {
	dst := filepath.Join(dir, RelayFile)
	// Never write through a file already there: it may be a link to the
	// store's copy.
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("save gvx-relay %s: %w", src, err)
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	if err := filecopy.File(src, dst, 0o555); err != nil {
		return fmt.Errorf("save gvx-relay %s: %w", src, err)
	}
	return nil
}
