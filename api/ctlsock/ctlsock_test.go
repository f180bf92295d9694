package ctlsock

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// serve answers the calls on one connection accepted from ln the way
// gVisor's control server does: a call whose method is "fail" fails, any
// other succeeds with the number of files that came with it. (The
// client's calls are small: each arrives in one read.)
func serve(t *testing.T, ln *net.UnixListener) {
	conn, err := ln.AcceptUnix()
	if err != nil {
		return
	}
	defer conn.Close()
	for {
		buf, oob := make([]byte, 64<<10), make([]byte, syscall.CmsgSpace(4*4))
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		files := 0
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				fds, _ := syscall.ParseUnixRights(&m)
				for _, fd := range fds {
					syscall.Close(fd)
				}
				files += len(fds)
			}
		}
		var call struct {
			Method string          `json:"method"`
			Arg    json.RawMessage `json:"arg"`
		}
		if err := json.Unmarshal(buf[:n], &call); err != nil {
			t.Errorf("call %q: %v", buf[:n], err)
			return
		}
		data, _ := json.Marshal(map[string]any{"success": call.Method != "fail", "err": "no such thing", "result": files})
		if _, err := conn.Write(data); err != nil {
			return
		}
	}
}

// TestCall: a call carries its files and gets its result; a call the
// server fails returns its error; a server that hangs up is ErrClosed; a
// socket path too long for an address is reached all the same.
func TestCall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ctl.sock")
	addr, release, err := api.UnixAddr(path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	release()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serve(t, ln)
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n int
	if err := c.Call("count", map[string]int{"a": 1}, []*os.File{os.Stdin, os.Stdout}, &n); err != nil || n != 2 {
		t.Errorf("call with two files: result %d, %v", n, err)
	}
	if err := c.Call("fail", nil, nil, nil); err == nil || err.Error() != "fail: no such thing" {
		t.Errorf("a failing call: %v", err)
	}
	ln.Close()
}

// TestClosed: a connection the sandbox closed says ErrClosed.
func TestClosed(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fds[0])
	c, err := FromFile(os.NewFile(uintptr(fds[1]), "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call("x", nil, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("a closed connection: %v, want ErrClosed", err)
	}
}
