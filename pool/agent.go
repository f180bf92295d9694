package pool

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// agent is the server's end of a lease pool sandbox's reset agent: a
// socket whose other end is gvx-pause's standard input, gvx-pause
// running as the sandbox's init with api.PauseAgentArg. A reset through
// it starts no process, in the sandbox or on the host.
type agent struct {
	conn net.Conn
	r    *bufio.Reader
}

// newAgent makes a connected pair: the server's agent, and the end to
// give the sandbox's create as its standard input.
func newAgent() (*agent, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("reset agent socket: %w", err)
	}
	local := os.NewFile(uintptr(fds[0]), "agent")
	defer local.Close()
	conn, err := net.FileConn(local)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("reset agent socket: %w", err)
	}
	return &agent{conn: conn, r: bufio.NewReader(conn)}, os.NewFile(uintptr(fds[1]), "agent-guest"), nil
}

// reset asks for a reset (api.PauseAgentRequest) and returns the guest's
// report, within timeout.
func (a *agent) reset(req api.PauseAgentRequest, timeout time.Duration) (*api.GuestState, error) {
	a.conn.SetDeadline(time.Now().Add(timeout))
	defer a.conn.SetDeadline(time.Time{})
	if err := json.NewEncoder(a.conn).Encode(req); err != nil {
		return nil, fmt.Errorf("reset agent: %w", err)
	}
	line, err := a.r.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("reset agent: %w", err)
	}
	var st api.GuestState
	if err := json.Unmarshal(line, &st); err != nil {
		return nil, fmt.Errorf("reset agent: report %q: %w", line, err)
	}
	return &st, nil
}

// agentReset resets sandbox id through its agent, or reports that it has
// none.
func (s *Server) agentReset(id string, req api.PauseAgentRequest) (*api.GuestState, bool, error) {
	s.mu.Lock()
	a := s.agents[id]
	s.mu.Unlock()
	if a == nil {
		return nil, false, nil
	}
	st, err := a.reset(req, agentTimeout)
	return st, true, err
}

// agentTimeout bounds one reset through an agent.
const agentTimeout = 20 * time.Second

// dropAgent closes sandbox id's agent (its sandbox is being destroyed).
func (s *Server) dropAgent(id string) {
	s.mu.Lock()
	a := s.agents[id]
	delete(s.agents, id)
	s.mu.Unlock()
	if a != nil {
		a.conn.Close()
	}
}
