package agentrunner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// DeadlineMargin is how long before deadline_at the kit ends a run with run.failed deadline_exceeded,
// so that the result still reaches the host before the host's own deadline cuts the stream.
const DeadlineMargin = 100 * time.Millisecond

// DefaultCancelGrace is the grace after a cancel signal that carries no grace period.
const DefaultCancelGrace = time.Second

// ErrRunEnded is returned by Send once the run's terminal result was sent (or the stream broke).
var ErrRunEnded = errors.New("agentrunner: the run has ended")

// Why a run's context ended, other than the host cancelling the call.
var (
	errDeadline = errors.New("the run deadline passed")
	errShutdown = errors.New("the runner server is shutting down")
	errFinished = errors.New("the run has ended")
)

type cancelSignal struct{ reason string }

func (c *cancelSignal) Error() string {
	if c.reason == "" {
		return "cancelled by the host"
	}
	return "cancelled by the host: " + c.reason
}

// Run is one run of a runner: its context and config, the host API, control signals, and Send.
type Run struct {
	req      *pb.RunRequest
	manifest *pb.RunnerManifest
	config   map[string]any
	host     pb.ProxyServiceClient
	send     func(*pb.RunResponse) error

	mu        sync.Mutex
	seq       uint64
	ended     bool
	openTools map[string]string
	terminal  chan struct{}
	deadline  time.Time
	timer     *time.Timer
	stop      context.CancelCauseFunc
	ctx       context.Context

	steering     chan *pb.SteeringInput
	cancelled    chan struct{}
	cancelOnce   sync.Once
	cancelReason string
}

// Context is the run context the host sent (event, input, resources, state snapshot, runtime, ...).
func (r *Run) Context() *pb.RunContext { return r.req.GetContext() }

// RunID is the run's id.
func (r *Run) RunID() string { return r.req.GetContext().GetRunId() }

// Text is the input's text.
func (r *Run) Text() string { return r.req.GetContext().GetInput().GetText() }

// Config is the agent's runner config, validated against the manifest's config_schema, with defaults.
func (r *Run) Config() map[string]any { return r.config }

// State is the host's snapshot of one state scope at run start (empty when not granted).
func (r *Run) State(scope pb.StateScope) map[string]any {
	s := r.req.GetContext().GetState()
	var m *structpb.Struct
	switch scope {
	case pb.StateScope_STATE_SCOPE_CONVERSATION:
		m = s.GetConversation()
	case pb.StateScope_STATE_SCOPE_ACTOR:
		m = s.GetActor()
	case pb.StateScope_STATE_SCOPE_SUBJECT:
		m = s.GetSubject()
	case pb.StateScope_STATE_SCOPE_RUNNER:
		m = s.GetRunner()
	case pb.StateScope_STATE_SCOPE_BINDING:
		m = s.GetBinding()
	case pb.StateScope_STATE_SCOPE_WORKSPACE:
		m = s.GetWorkspace()
	}
	return m.AsMap()
}

// Host is the typed client of the host's ProxyService for this run. Every call carries the run
// token, the run id and a traceparent; its deadline is min(DefaultTimeouts[method], remaining run
// time); errors are *Error; after the run ended calls fail locally with FAILED_PRECONDITION.
func (r *Run) Host() pb.ProxyServiceClient { return r.host }

// Deadline is the run deadline (the host may move it with a DeadlineSignal).
func (r *Run) Deadline() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadline, !r.deadline.IsZero()
}

// Steering delivers steering inputs the host pushes on the Control stream (manifest: steering).
func (r *Run) Steering() <-chan *pb.SteeringInput { return r.steering }

// Cancelled is closed when the host asks the run to stop. The run's context is cancelled when the
// signal's grace period ends; a runner that stops earlier returns (or sends run.failed cancelled).
func (r *Run) Cancelled() <-chan struct{} { return r.cancelled }

// CancelReason is the reason of the cancel signal, once Cancelled is closed.
func (r *Run) CancelReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelReason
}

// Send streams one result: it fills run_id, sequence and timestamp. A terminal result (Completed,
// Failed) ends the run: tool calls still open are closed first and every later Send returns
// ErrRunEnded. Send is safe for concurrent use.
func (r *Run) Send(result *pb.RunResult) error {
	if r.ctx != nil && r.ctx.Err() != nil {
		// The run is being ended (cancel, deadline, shutdown): the kit sends its terminal result.
		return fmt.Errorf("%w: %v", ErrRunEnded, context.Cause(r.ctx))
	}
	return r.emit(result)
}

// emit is Send without the context check (the kit's own terminal results).
func (r *Run) emit(result *pb.RunResult) error {
	if result == nil {
		return fmt.Errorf("agentrunner: Send(nil)")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return ErrRunEnded
	}
	if IsTerminal(result) {
		for id, tool := range r.openTools {
			closer := ToolCompleted(id, tool, nil, nil)
			closer.GetToolCallCompleted().ErrorCode = "runner.incomplete"
			closer.GetToolCallCompleted().ErrorMessage = "the run ended before the tool call completed"
			if err := r.sendLocked(closer); err != nil {
				return err
			}
		}
		r.ended = true
		defer close(r.terminal)
	}
	return r.sendLocked(result)
}

func (r *Run) sendLocked(result *pb.RunResult) error {
	if result.RunId != "" && result.RunId != r.RunID() {
		slog.Warn("runner set another run_id; replaced", "run_id", r.RunID(), "given", result.RunId)
	}
	result.RunId = r.RunID()
	r.seq++
	result.Sequence = r.seq
	if result.Timestamp == nil {
		result.Timestamp = timestamppb.Now()
	}
	switch p := result.GetPayload().(type) {
	case *pb.RunResult_ToolCallStarted:
		r.openTools[p.ToolCallStarted.GetToolCallId()] = p.ToolCallStarted.GetToolName()
	case *pb.RunResult_ToolCallCompleted:
		delete(r.openTools, p.ToolCallCompleted.GetToolCallId())
	case nil:
		slog.Warn("runner sent a result type this kit does not know", "run_id", r.RunID())
	}
	if err := r.send(&pb.RunResponse{Result: result}); err != nil {
		r.ended = true
		return fmt.Errorf("%w: %v", ErrRunEnded, err)
	}
	return nil
}

func (r *Run) isEnded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

func (r *Run) hostDeadline() time.Time {
	d, _ := r.Deadline()
	return d
}

// setDeadline moves the run deadline (welcome or DeadlineSignal) and re-arms the deadline timer.
func (r *Run) setDeadline(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadline = at
	if r.timer != nil {
		r.timer.Reset(time.Until(at.Add(-DeadlineMargin)))
	}
}

// onCancel handles a CancelSignal: Cancelled closes now, the context ends after the grace.
func (r *Run) onCancel(reason string, grace time.Duration) {
	r.cancelOnce.Do(func() {
		r.mu.Lock()
		r.cancelReason = reason
		r.mu.Unlock()
		close(r.cancelled)
		time.AfterFunc(grace, func() { r.stop(&cancelSignal{reason}) })
	})
}

// execute runs one run to its terminal result (or until the host cancels the call).
func (s *Server) execute(callCtx context.Context, runner Runner, manifest *pb.RunnerManifest, req *pb.RunRequest,
	send func(*pb.RunResponse) error) {
	run := &Run{
		req: req, manifest: manifest, send: send, openTools: map[string]string{},
		terminal: make(chan struct{}), steering: make(chan *pb.SteeringInput, 16), cancelled: make(chan struct{}),
	}
	config, err := ValidateConfig(manifest.GetConfigSchema(), req.GetContext().GetConfig())
	if err != nil {
		var ce *ConfigError
		errors.As(err, &ce)
		f := &Failure{Code: "runner.config_invalid", Message: err.Error(), Details: map[string]any{"field": ce.Field}}
		_ = run.Send(f.result())
		return
	}
	run.config = config
	if d := req.GetContext().GetRuntime().GetDeadlineAt(); d != nil {
		run.deadline = d.AsTime()
		if time.Until(run.deadline) <= DeadlineMargin {
			_ = run.Send(Failed("deadline_exceeded", "the run deadline passed before it started", true))
			return
		}
	}
	ctx, stop := context.WithCancelCause(callCtx)
	defer stop(errFinished)
	run.stop, run.ctx = stop, ctx
	if !run.deadline.IsZero() {
		run.mu.Lock()
		run.timer = time.AfterFunc(time.Until(run.deadline.Add(-DeadlineMargin)), func() { stop(errDeadline) })
		run.mu.Unlock()
		defer run.timer.Stop()
	}
	run.host = pb.NewProxyServiceClient(s.hostConn(run))
	if !s.track(run, true) {
		_ = run.Send(Failed("cancelled", errShutdown.Error(), false))
		return
	}
	defer s.track(run, false)
	caps := manifest.GetCapabilities()
	control := make(chan struct{})
	if (caps.GetInterrupt() || caps.GetSteering()) && req.GetHostApiEndpoint() != "" {
		go func() { defer close(control); s.control(ctx, run) }()
	} else {
		close(control)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				slog.Error("runner panicked", "run_id", run.RunID(), "panic", p, "stack", string(debug.Stack()))
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		done <- runner.Run(ctx, run)
	}()
	select {
	case err := <-done:
		run.finish(ctx, callCtx, err)
	case <-run.terminal:
	case <-ctx.Done():
		run.finish(ctx, callCtx, nil)
	}
	stop(errFinished)
	<-control
}

// finish sends the terminal result a run still owes once its Run function returned or its context ended.
func (r *Run) finish(ctx, callCtx context.Context, err error) {
	if r.isEnded() || callCtx.Err() != nil {
		return // already terminal, or the host cancelled the call: nothing more is sent
	}
	var cancel *cancelSignal
	cause := context.Cause(ctx)
	switch {
	case ctx.Err() != nil && errors.Is(cause, errDeadline):
		_ = r.emit(Failed("deadline_exceeded", "the run deadline passed", true))
	case ctx.Err() != nil && errors.As(cause, &cancel):
		_ = r.emit(Failed("cancelled", cancel.Error(), false))
	case ctx.Err() != nil && errors.Is(cause, errShutdown):
		_ = r.emit(Failed("cancelled", errShutdown.Error(), false))
	case err == nil:
		_ = r.emit(Completed(""))
	default:
		_ = r.emit(failureOf(r.RunID(), err))
	}
}

// failureOf is the run.failed of an error a Run function returned.
func failureOf(runID string, err error) *pb.RunResult {
	var f *Failure
	if errors.As(err, &f) {
		return f.result()
	}
	var e *Error
	if errors.As(err, &e) {
		r := Failed(e.SpecCode(), e.Message, e.Retryable)
		r.GetRunFailed().Details, _ = Struct(map[string]any{"reason": e.Reason})
		return r
	}
	slog.Error("runner returned an error", "run_id", runID, "error", err)
	msg := err.Error()
	if len(msg) > 500 {
		msg = msg[:499] + "…"
	}
	return Failed("runner.exception", msg, false)
}
