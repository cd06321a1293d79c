package cri

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error classes of runtime calls. Every error returned by a Client method wraps
// at most one of them; check with errors.Is.
var (
	// ErrNotFound: the container, sandbox or image does not exist.
	ErrNotFound = errors.New("cri: not found")
	// ErrUnavailable: the runtime is not reachable (socket missing, runtime
	// restarting). Retrying later may succeed.
	ErrUnavailable = errors.New("cri: runtime unavailable")
	// ErrTimeout: the call's deadline passed before the runtime answered.
	ErrTimeout = errors.New("cri: timeout")
	// ErrUnimplemented: the runtime does not implement the call.
	ErrUnimplemented = errors.New("cri: not implemented by the runtime")
	// ErrInvalid: the runtime rejected the request's arguments.
	ErrInvalid = errors.New("cri: invalid argument")
)

// classify wraps err, returned by the gRPC call op, with its error class and op.
// A nil err stays nil.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		class = ErrTimeout
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("cri %s: %w", op, err)
	default:
		switch status.Code(err) {
		case codes.NotFound:
			class = ErrNotFound
		case codes.Unavailable:
			class = ErrUnavailable
		case codes.DeadlineExceeded:
			class = ErrTimeout
		case codes.Unimplemented:
			class = ErrUnimplemented
		case codes.InvalidArgument:
			class = ErrInvalid
		case codes.Canceled:
			return fmt.Errorf("cri %s: %w", op, context.Canceled)
		}
	}
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	if class == nil {
		return fmt.Errorf("cri %s: %s (%w)", op, msg, err)
	}
	return fmt.Errorf("cri %s: %w: %s", op, class, msg)
}
