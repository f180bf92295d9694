package shimstart

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The bootstrap messages of containerd's shim protocol
// (containerd.runtime.bootstrap.v1, api/runtime/bootstrap/v1), in
// protobuf's wire format, written from the message definitions: the
// fields this command reads of BootstrapParams, and the BootstrapResult it
// answers with.

// Field numbers of BootstrapParams.
const (
	paramInstanceID  = 1 // string
	paramNamespace   = 2 // string
	paramLogLevel    = 3 // LogLevel (an int32 enum)
	paramGRPCAddress = 6 // string: containerd_grpc_address
	paramSocketDir   = 9 // optional string
)

// logLevelDebug is LogLevel's LOG_LEVEL_DEBUG (TRACE is below it).
const logLevelDebug = -4

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// params are the bootstrap parameters the command uses.
type params struct {
	instanceID, namespace, grpcAddress, socketDir string
	logLevel                                      int32
}

// decodeParams decodes a BootstrapParams message; fields it does not use
// are skipped.
func decodeParams(b []byte) (params, error) {
	var p params
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return p, errors.New("bootstrap parameters: bad field key")
		}
		b = b[n:]
		field, wire := key>>3, key&7
		switch wire {
		case wireVarint:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return p, fmt.Errorf("bootstrap parameters: field %d: bad varint", field)
			}
			b = b[n:]
			if field == paramLogLevel {
				p.logLevel = int32(int64(v))
			}
		case wireBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return p, fmt.Errorf("bootstrap parameters: field %d: bad length", field)
			}
			v := string(b[n : n+int(l)])
			b = b[n+int(l):]
			switch field {
			case paramInstanceID:
				p.instanceID = v
			case paramNamespace:
				p.namespace = v
			case paramGRPCAddress:
				p.grpcAddress = v
			case paramSocketDir:
				p.socketDir = v
			}
		case wireFixed64, wireFixed32:
			size := 8
			if wire == wireFixed32 {
				size = 4
			}
			if len(b) < size {
				return p, fmt.Errorf("bootstrap parameters: field %d: truncated", field)
			}
			b = b[size:]
		default:
			return p, fmt.Errorf("bootstrap parameters: field %d: unsupported wire type %d", field, wire)
		}
	}
	return p, nil
}

// encodeResult is a BootstrapResult: version 3 of the shim API, address,
// protocol ttrpc.
func encodeResult(address string) []byte {
	var b []byte
	b = binary.AppendUvarint(b, 1<<3|wireVarint)
	b = binary.AppendUvarint(b, 3)
	for _, f := range []struct {
		num uint64
		s   string
	}{{2, address}, {3, "ttrpc"}} {
		b = binary.AppendUvarint(b, f.num<<3|wireBytes)
		b = binary.AppendUvarint(b, uint64(len(f.s)))
		b = append(b, f.s...)
	}
	return b
}
