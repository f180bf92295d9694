package checkpoint

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestOutsidePeers(t *testing.T) {
	tcp := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0100007F:1F90 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0500000A:C350 0200000A:0050 01 00000000:00000000 00:00000000 00000000     0        0 3
   3: 0500000A:C351 0500000A:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4
   4: 0500000A:C352 0300000A:0050 06 00000000:00000000 00:00000000 00000000     0        0 5
   5: 0500000A:C353 0200000A:0050 01 00000000:00000000 00:00000000 00000000     0        0 6
`)
	tcp6 := []byte(`  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:A2C4 01
   1: 0000000000000000FFFF00000500000A:1F90 0000000000000000FFFF00000700000A:D431 01
   2: 00000000000000000000000001000000:1F90 zz:0 01
`)
	got := OutsidePeers(tcp, tcp6)
	want := []string{"10.0.0.2:80", "[::ffff:10.0.0.7]:54321"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OutsidePeers = %v, want %v", got, want)
	}
	if got := OutsidePeers([]byte("garbage\n\n"), nil); len(got) != 0 {
		t.Errorf("garbage: %v", got)
	}
}

func TestInnerTCP(t *testing.T) {
	if err := InnerTCP([]byte("0\n"), nil, 0, nil); err != nil {
		t.Errorf("0: %v", err)
	}
	err := InnerTCP([]byte("3\n"), nil, 0, nil)
	if !errors.Is(err, api.ErrInnerTCP) || !strings.Contains(err.Error(), "3 held") || !strings.Contains(err.Error(), "--network host") {
		t.Errorf("3: %v, want api.ErrInnerTCP naming the count and --network host", err)
	}
	if err := InnerTCP([]byte("gvx-relay: usage"), nil, 0, nil); err == nil || errors.Is(err, api.ErrInnerTCP) {
		t.Errorf("garbage: %v, want an error that is not the refusal", err)
	}
	if err := InnerTCP(nil, []byte("gvx-relay: inner-tcp: ioctl 0x89fd: EINVAL\n"), 1, nil); err == nil || errors.Is(err, api.ErrInnerTCP) || !strings.Contains(err.Error(), "exit 1: gvx-relay: inner-tcp") {
		t.Errorf("a failed count: %v, want an error naming the exit and stderr that is not the refusal", err)
	}
	if err := InnerTCP(nil, nil, -1, errors.New("exec failed")); err == nil || !strings.Contains(err.Error(), "exec failed") {
		t.Errorf("an exec that failed: %v, want its error", err)
	}
}
