package agentrunner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the google.rpc.ErrorInfo domain of every protocol error.
const Domain = "agentrunner.langbot.app"

// Error reasons carried in google.rpc.ErrorInfo.reason (agentrunner.v1.ErrorReason without its prefix).
const (
	ReasonUnauthorized       = "UNAUTHORIZED"
	ReasonRunTokenInvalid    = "RUN_TOKEN_INVALID"
	ReasonNotFound           = "NOT_FOUND"
	ReasonDeadlineExceeded   = "DEADLINE_EXCEEDED"
	ReasonPayloadTooLarge    = "PAYLOAD_TOO_LARGE"
	ReasonRateLimited        = "RATE_LIMITED"
	ReasonInvalidArgument    = "INVALID_ARGUMENT"
	ReasonRuntimeError       = "RUNTIME_ERROR"
	ReasonRunnerUnavailable  = "RUNNER_UNAVAILABLE"
	ReasonBindingNotFound    = "BINDING_NOT_FOUND"
	ReasonFailedPrecondition = "FAILED_PRECONDITION"
	ReasonNotImplemented     = "NOT_IMPLEMENTED"
	ReasonAlreadyExists      = "ALREADY_EXISTS"
)

// reasons maps each reason to its gRPC code, default retryability and spec code (PROTOCOL_V1 §9).
var reasons = map[string]struct {
	code      codes.Code
	retryable bool
	spec      string
}{
	ReasonUnauthorized:       {codes.PermissionDenied, false, "unauthorized"},
	ReasonRunTokenInvalid:    {codes.Unauthenticated, false, "unauthorized"},
	ReasonNotFound:           {codes.NotFound, false, "not_found"},
	ReasonDeadlineExceeded:   {codes.DeadlineExceeded, true, "deadline_exceeded"},
	ReasonPayloadTooLarge:    {codes.ResourceExhausted, false, "payload_too_large"},
	ReasonRateLimited:        {codes.ResourceExhausted, true, "rate_limited"},
	ReasonInvalidArgument:    {codes.InvalidArgument, false, "invalid_argument"},
	ReasonRuntimeError:       {codes.Internal, false, "runtime_error"},
	ReasonRunnerUnavailable:  {codes.Unavailable, true, "runtime_error"},
	ReasonBindingNotFound:    {codes.NotFound, false, "not_found"},
	ReasonFailedPrecondition: {codes.FailedPrecondition, false, "invalid_argument"},
	ReasonNotImplemented:     {codes.Unimplemented, false, "unauthorized"},
	ReasonAlreadyExists:      {codes.AlreadyExists, false, "invalid_argument"},
}

// fallback is the reason of a status that carries no ErrorInfo of our domain.
var fallback = map[codes.Code]string{
	codes.PermissionDenied:   ReasonUnauthorized,
	codes.Unauthenticated:    ReasonRunTokenInvalid,
	codes.NotFound:           ReasonNotFound,
	codes.DeadlineExceeded:   ReasonDeadlineExceeded,
	codes.InvalidArgument:    ReasonInvalidArgument,
	codes.FailedPrecondition: ReasonFailedPrecondition,
	codes.Unimplemented:      ReasonNotImplemented,
	codes.AlreadyExists:      ReasonAlreadyExists,
	codes.ResourceExhausted:  ReasonPayloadTooLarge,
}

// Error is a protocol error: a gRPC code, a reason, a retryable flag and lowerCamel metadata. Host
// API calls return it; runner servers return it (it converts to a rich status with one ErrorInfo).
type Error struct {
	Code      codes.Code
	Reason    string
	Message   string
	Retryable bool
	// RetryDelay is the google.rpc.RetryInfo delay, when the peer sent one (for RATE_LIMITED).
	RetryDelay time.Duration
	Metadata   map[string]string
}

// NewError builds an error of a reason with the reason's code and default retryability.
func NewError(reason, message string) *Error {
	spec, ok := reasons[reason]
	if !ok {
		spec = reasons[ReasonRuntimeError]
		reason = ReasonRuntimeError
	}
	return &Error{Code: spec.code, Reason: reason, Message: message, Retryable: spec.retryable}
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s): %s", e.Reason, e.Code, e.Message)
}

// SpecCode is the PROTOCOL_V1 §9 code of the error (`unauthorized`, `not_found`, ...), for run.failed
// results and tool.call.completed error codes.
func (e *Error) SpecCode() string {
	if spec, ok := reasons[e.Reason]; ok {
		return spec.spec
	}
	return "runtime_error"
}

// GRPCStatus makes the error a rich status: exactly one ErrorInfo, plus RetryInfo when a delay is set.
func (e *Error) GRPCStatus() *status.Status {
	meta := map[string]string{"retryable": strconv.FormatBool(e.Retryable)}
	for k, v := range e.Metadata {
		if k != "retryable" {
			meta[k] = v
		}
	}
	st := status.New(e.Code, e.Message)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.Reason, Domain: Domain, Metadata: meta}}
	if e.RetryDelay > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryDelay)})
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withDetails
}

// AsError turns any error of a gRPC call into an *Error (reading ErrorInfo and RetryInfo from the
// status details); context errors become DEADLINE_EXCEEDED or a cancelled RUNTIME_ERROR.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return NewError(ReasonDeadlineExceeded, "the call deadline passed")
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Code: codes.Unknown, Reason: ReasonRuntimeError, Message: err.Error()}
	}
	out := &Error{Code: st.Code(), Message: st.Message()}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == Domain && out.Reason == "" {
				out.Reason = d.GetReason()
				out.Retryable = d.GetMetadata()["retryable"] == "true"
				out.Metadata = map[string]string{}
				for k, v := range d.GetMetadata() {
					if k != "retryable" {
						out.Metadata[k] = v
					}
				}
			}
		case *errdetails.RetryInfo:
			out.RetryDelay = d.GetRetryDelay().AsDuration()
		}
	}
	if out.Reason == "" {
		out.Reason = ReasonRuntimeError
		if r, ok := fallback[st.Code()]; ok {
			out.Reason = r
		}
		out.Retryable = st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded || st.Code() == codes.Aborted
	}
	return out
}
