package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// dataChunk is the write size of the data generator.
const dataChunk = 1 << 20

// dataGen produces incompressible, never-zero data fast: one random 1 MiB
// buffer, with a per-stream salt and a running block counter stamped at
// the start of every 4 KiB block, so no two blocks anywhere are equal and
// none reads as zeros (which a sparse copy would skip).
type dataGen struct {
	buf   []byte
	salt  uint64
	block uint64
}

func newDataGen(seed uint64) *dataGen {
	g := &dataGen{buf: make([]byte, dataChunk), salt: seed | 1<<63}
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	r.Read(g.buf)
	return g
}

// next returns the next chunk; it is valid until the following call.
func (g *dataGen) next() []byte {
	for off := 0; off < len(g.buf); off += volume.BlockSize {
		binary.LittleEndian.PutUint64(g.buf[off:], g.salt)
		binary.LittleEndian.PutUint64(g.buf[off+8:], g.block)
		g.block++
	}
	return g.buf
}

// writeData creates path and writes n bytes of generated data into it,
// then fsyncs it. With a label it reports progress on stderr every few
// seconds.
func writeData(ctx context.Context, path string, n int64, seed uint64, label string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write data: %w", err)
	}
	defer f.Close()
	g := newDataGen(seed)
	start, last := time.Now(), time.Now()
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("write data to %s: %w", path, err)
		}
		b := g.next()
		if rest := n - done; rest < int64(len(b)) {
			b = b[:rest]
		}
		w, err := f.Write(b)
		done += int64(w)
		if err != nil {
			return fmt.Errorf("write data to %s at %d: %w", path, done, err)
		}
		if label != "" && time.Since(last) >= 3*time.Second {
			last = time.Now()
			progress("%s: %s of %s written (%.0f MiB/s)", label, volume.FormatSize(done), volume.FormatSize(n),
				float64(done)/(1<<20)/time.Since(start).Seconds())
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// progress prints a progress line on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "volbench: "+format+"\n", args...)
}
