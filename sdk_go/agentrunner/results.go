package agentrunner

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// ResultTypes maps each RunResult payload (oneof field name) to its spec type string (PROTOCOL_V1 §7.3).
var ResultTypes = map[string]string{
	"message_delta":         "message.delta",
	"message_completed":     "message.completed",
	"tool_call_started":     "tool.call.started",
	"tool_call_completed":   "tool.call.completed",
	"artifact_created":      "artifact.created",
	"state_updated":         "state.updated",
	"action_requested":      "action.requested",
	"run_completed":         "run.completed",
	"run_failed":            "run.failed",
	"run_log":               "run.log",
	"interaction_requested": "interaction.requested",
}

// ResultType is the spec type string of a result ("message.delta", ...), or "" for a payload this
// reader does not know (a newer result type, which readers ignore).
func ResultType(r *pb.RunResult) string {
	field := r.ProtoReflect().WhichOneof(r.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
	if field == nil {
		return ""
	}
	return ResultTypes[string(field.Name())]
}

// IsTerminal reports whether the result ends the run (run.completed or run.failed).
func IsTerminal(r *pb.RunResult) bool {
	switch r.GetPayload().(type) {
	case *pb.RunResult_RunCompleted, *pb.RunResult_RunFailed:
		return true
	}
	return false
}

// NewID returns a fresh opaque id such as "msg_3f2a9c0d1e4b5a6f" (messages, tool calls).
func NewID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Struct converts a JSON-like map into a google.protobuf.Struct (nil for an empty map).
func Struct(m map[string]any) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	return structpb.NewStruct(m)
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := Struct(m)
	if err != nil {
		panic(fmt.Sprintf("agentrunner: not JSON: %v", err))
	}
	return s
}

// Delta is a message.delta: text is the increment since the previous delta of the same message.
func Delta(text string) *pb.RunResult {
	return &pb.RunResult{Payload: &pb.RunResult_MessageDelta{MessageDelta: &pb.MessageDelta{Text: text}}}
}

// DeltaOf is a message.delta of the message messageID (so deltas and the final message group).
func DeltaOf(messageID, text string) *pb.RunResult {
	r := Delta(text)
	r.GetMessageDelta().MessageId = messageID
	return r
}

// Message is a message.completed: one complete assistant message (a run may send several).
func Message(content string) *pb.RunResult {
	msg := &pb.AssistantMessage{Content: content}
	return &pb.RunResult{Payload: &pb.RunResult_MessageCompleted{MessageCompleted: &pb.MessageCompleted{Message: msg}}}
}

// ToolStarted is a tool.call.started; pair it with ToolCompleted of the same id.
func ToolStarted(callID, tool string, parameters map[string]any) *pb.RunResult {
	body := &pb.ToolCallStarted{ToolCallId: callID, ToolName: tool, Parameters: mustStruct(parameters)}
	return &pb.RunResult{Payload: &pb.RunResult_ToolCallStarted{ToolCallStarted: body}}
}

// ToolCompleted is a tool.call.completed. A non-nil err fills error_code (the spec code of an *Error,
// else runtime_error) and error_message.
func ToolCompleted(callID, tool string, preview map[string]any, err error) *pb.RunResult {
	body := &pb.ToolCallCompleted{ToolCallId: callID, ToolName: tool, ResultPreview: mustStruct(preview)}
	if err != nil {
		e := AsError(err)
		body.ErrorCode, body.ErrorMessage = e.SpecCode(), e.Message
	}
	return &pb.RunResult{Payload: &pb.RunResult_ToolCallCompleted{ToolCallCompleted: body}}
}

// State is a state.updated: asks the host to write host-owned state (a nil value deletes the key).
// The value must be JSON (string, float64, bool, nil, []any, map[string]any or a number type).
func State(scope pb.StateScope, key string, value any) (*pb.RunResult, error) {
	if scope == pb.StateScope_STATE_SCOPE_UNSPECIFIED {
		return nil, fmt.Errorf("agentrunner: state scope must be set")
	}
	if key == "" || len(key) > 256 {
		return nil, fmt.Errorf("agentrunner: state key must have 1..256 characters")
	}
	v, err := structpb.NewValue(value)
	if err != nil {
		return nil, fmt.Errorf("agentrunner: state value is not JSON: %w", err)
	}
	body := &pb.StateUpdated{Scope: scope, Key: key, Value: v}
	return &pb.RunResult{Payload: &pb.RunResult_StateUpdated{StateUpdated: body}}, nil
}

// Log is a run.log line kept in the run ledger (never shown as message text).
func Log(level pb.RunLogLevel, text string) *pb.RunResult {
	return &pb.RunResult{Payload: &pb.RunResult_RunLog{RunLog: &pb.RunLog{Level: level, Text: text}}}
}

// Interaction is an interaction.requested around a request; check it first with CheckInteraction.
func Interaction(req *pb.InteractionRequest) *pb.RunResult {
	body := &pb.InteractionRequested{Interaction: req}
	return &pb.RunResult{Payload: &pb.RunResult_InteractionRequested{InteractionRequested: body}}
}

// Completed is run.completed (terminal) carrying the final message; "" sends no message.
func Completed(content string) *pb.RunResult {
	body := &pb.RunCompleted{FinishReason: "stop"}
	if content != "" {
		body.Message = &pb.AssistantMessage{Content: content}
	}
	return &pb.RunResult{Payload: &pb.RunResult_RunCompleted{RunCompleted: body}}
}

// Failed is run.failed (terminal): code like "runner.error"; the message must not hold a stack trace.
func Failed(code, message string, retryable bool) *pb.RunResult {
	body := &pb.RunFailed{Code: code, Message: message, Retryable: retryable}
	return &pb.RunResult{Payload: &pb.RunResult_RunFailed{RunFailed: body}}
}

// Failure is an error a Run function returns to end the run with its own run.failed code.
type Failure struct {
	Code      string
	Message   string
	Retryable bool
	Details   map[string]any
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

func (f *Failure) result() *pb.RunResult {
	r := Failed(f.Code, f.Message, f.Retryable)
	if s, err := Struct(f.Details); err == nil {
		r.GetRunFailed().Details = s
	}
	return r
}
