package envd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
)

// The messages of envd's process and filesystem services, written from
// the published protocol (package process and package filesystem of
// envd's spec) in proto3's JSON mapping: lowerCamel names, int64 as
// strings, enums as names, bytes as base64, zero values omitted, oneofs
// as one set field.

// ProcessConfig is what a process runs.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// PTYSize is a terminal's size.
type PTYSize struct {
	Cols uint32 `json:"cols,omitempty"`
	Rows uint32 `json:"rows,omitempty"`
}

// PTY asks for a terminal.
type PTY struct {
	Size *PTYSize `json:"size,omitempty"`
}

// ProcessSelector names a process by pid or tag (a oneof).
type ProcessSelector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

func (s *ProcessSelector) String() string {
	switch {
	case s == nil:
		return "no process"
	case s.PID != nil:
		return "pid " + strconv.FormatUint(uint64(*s.PID), 10)
	case s.Tag != nil:
		return "tag " + strconv.Quote(*s.Tag)
	}
	return "an empty selector"
}

// StartRequest starts a process.
type StartRequest struct {
	Process *ProcessConfig `json:"process"`
	PTY     *PTY           `json:"pty,omitempty"`
	Tag     *string        `json:"tag,omitempty"`
	Stdin   *bool          `json:"stdin,omitempty"`
}

// ConnectRequest attaches to a running process.
type ConnectRequest struct {
	Process *ProcessSelector `json:"process"`
}

// ProcessEvent is one event of a process's stream (a oneof).
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent says the process runs as PID.
type StartEvent struct {
	PID uint32 `json:"pid"`
}

// DataEvent is output (a oneof of stdout, stderr, pty).
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

// EndEvent says the process ended.
type EndEvent struct {
	ExitCode int32  `json:"exitCode,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	Status   string `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
}

// StreamResponse is StartResponse and ConnectResponse.
type StreamResponse struct {
	Event *ProcessEvent `json:"event"`
}

// ProcessInfo is one entry of List.
type ProcessInfo struct {
	Config *ProcessConfig `json:"config"`
	PID    uint32         `json:"pid"`
	Tag    *string        `json:"tag,omitempty"`
}

// ListResponse lists the running processes.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessInput is input (a oneof of stdin, pty).
type ProcessInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

// SendInputRequest writes to a process's input.
type SendInputRequest struct {
	Process *ProcessSelector `json:"process"`
	Input   *ProcessInput    `json:"input"`
}

// SendSignalRequest signals a process.
type SendSignalRequest struct {
	Process *ProcessSelector `json:"process"`
	Signal  Signal           `json:"signal"`
}

// CloseStdinRequest closes a process's stdin.
type CloseStdinRequest struct {
	Process *ProcessSelector `json:"process"`
}

// UpdateRequest resizes a process's terminal.
type UpdateRequest struct {
	Process *ProcessSelector `json:"process"`
	PTY     *PTY             `json:"pty,omitempty"`
}

// Empty is the empty response message.
type Empty struct{}

// Signal is the process.Signal enum: its JSON is the value's name; a
// number is accepted too.
type Signal syscall.Signal

var signalNames = map[string]syscall.Signal{
	"SIGNAL_UNSPECIFIED": 0,
	"SIGNAL_SIGTERM":     syscall.SIGTERM,
	"SIGNAL_SIGKILL":     syscall.SIGKILL,
}

// UnmarshalJSON reads a name or a number.
func (s *Signal) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		v, ok := signalNames[name]
		if !ok {
			return fmt.Errorf("unknown signal %q (known: SIGNAL_SIGTERM, SIGNAL_SIGKILL)", name)
		}
		*s = Signal(v)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("signal %s is neither a name nor a number", b)
	}
	*s = Signal(n)
	return nil
}

// FileType is the filesystem.FileType enum.
type FileType string

// File types.
const (
	FileTypeUnspecified FileType = "FILE_TYPE_UNSPECIFIED"
	FileTypeFile        FileType = "FILE_TYPE_FILE"
	FileTypeDirectory   FileType = "FILE_TYPE_DIRECTORY"
	FileTypeSymlink     FileType = "FILE_TYPE_SYMLINK"
)

// EntryInfo describes a file.
type EntryInfo struct {
	Name          string            `json:"name"`
	Type          FileType          `json:"type"`
	Path          string            `json:"path"`
	Size          int64             `json:"size,string,omitempty"`
	Mode          uint32            `json:"mode,omitempty"`
	Permissions   string            `json:"permissions,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Group         string            `json:"group,omitempty"`
	ModifiedTime  string            `json:"modifiedTime,omitempty"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// PathRequest is StatRequest, MakeDirRequest and RemoveRequest.
type PathRequest struct {
	Path string `json:"path"`
}

// EntryResponse is StatResponse, MakeDirResponse and MoveResponse.
type EntryResponse struct {
	Entry *EntryInfo `json:"entry"`
}

// MoveRequest renames a file.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// ListDirRequest lists a directory to a depth.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth,omitempty"`
}

// ListDirResponse is a directory's entries.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// WatchDirRequest watches a directory.
type WatchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive,omitempty"`
	IncludeEntry       bool   `json:"includeEntry,omitempty"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts,omitempty"`
}

// EventType is the filesystem.EventType enum.
type EventType string

// Event types.
const (
	EventCreate EventType = "EVENT_TYPE_CREATE"
	EventWrite  EventType = "EVENT_TYPE_WRITE"
	EventRemove EventType = "EVENT_TYPE_REMOVE"
	EventRename EventType = "EVENT_TYPE_RENAME"
	EventChmod  EventType = "EVENT_TYPE_CHMOD"
)

// FilesystemEvent is one change in a watched directory.
type FilesystemEvent struct {
	Name  string     `json:"name"`
	Type  EventType  `json:"type"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

// WatchDirResponse is one message of a watch (a oneof).
type WatchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

// CreateWatcherResponse names a polled watcher.
type CreateWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

// WatcherRequest is GetWatcherEventsRequest and RemoveWatcherRequest.
type WatcherRequest struct {
	WatcherID string `json:"watcherId"`
}

// GetWatcherEventsResponse is what a polled watcher saw since last asked.
type GetWatcherEventsResponse struct {
	Events []FilesystemEvent `json:"events"`
}
