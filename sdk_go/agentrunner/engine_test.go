package agentrunner_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunner"
	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

var testManifest = &pb.RunnerManifest{
	Id:           "plugin:test/engine/default",
	Label:        agentrunner.Text("Engine test"),
	Capabilities: &pb.RunnerCapabilities{Streaming: true, Interrupt: true},
	Permissions:  &pb.RunnerPermissions{History: []pb.HistoryOperation{pb.HistoryOperation_HISTORY_OPERATION_PAGE}},
	ConfigSchema: []*pb.ConfigField{{Name: "prefix", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_STRING,
		DefaultValue: structpb.NewStringValue("> ")}},
}

// fakeHost is a ProxyService that records ListHistory calls and runs a scripted Control stream.
type fakeHost struct {
	pb.UnimplementedProxyServiceServer
	mu       sync.Mutex
	calls    []metadata.MD
	left     []time.Duration
	history  error
	signals  []*pb.ControlResponse
	acks     chan *pb.ControlAck
	hello    chan *pb.ControlHello
	endpoint string
}

func (h *fakeHost) ListHistory(ctx context.Context, _ *pb.ListHistoryRequest) (*pb.ListHistoryResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	d, _ := ctx.Deadline()
	h.mu.Lock()
	h.calls = append(h.calls, md)
	h.left = append(h.left, time.Until(d))
	err := h.history
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &pb.ListHistoryResponse{Items: []*pb.TranscriptItem{{Content: "earlier"}}}, nil
}

func (h *fakeHost) Control(stream grpc.BidiStreamingServer[pb.ControlRequest, pb.ControlResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h.hello <- first.GetHello()
	welcome := &pb.ControlWelcome{HeartbeatInterval: durationpb.New(50 * time.Millisecond)}
	if err := stream.Send(&pb.ControlResponse{Signal: &pb.ControlResponse_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	for _, s := range h.signals {
		if err := stream.Send(s); err != nil {
			return err
		}
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		if ack := msg.GetAck(); ack != nil {
			h.acks <- ack
		}
	}
}

func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func startHost(t *testing.T, h *fakeHost) *fakeHost {
	h.acks, h.hello = make(chan *pb.ControlAck, 8), make(chan *pb.ControlHello, 1)
	h.endpoint = serve(t, func(g *grpc.Server) { pb.RegisterProxyServiceServer(g, h) })
	return h
}

// runOnce serves the runner, sends one Run and returns every result and the call's final error.
func runOnce(t *testing.T, r agentrunner.Runner, host *fakeHost, ctx *pb.RunContext) ([]*pb.RunResult, error) {
	t.Helper()
	s, err := agentrunner.NewServer(r)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Register)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := &pb.RunRequest{RunnerId: testManifest.Id, Context: ctx, RunToken: "tok-1"}
	if host != nil {
		req.HostApiEndpoint = host.endpoint
	}
	call, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewRunnerServiceClient(cc).Run(call, req)
	if err != nil {
		return nil, err
	}
	var out []*pb.RunResult
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, resp.GetResult())
	}
}

func runContext(deadline time.Duration) *pb.RunContext {
	return &pb.RunContext{
		RunId:   "run-1",
		Input:   &pb.RunInput{Text: "hi"},
		Context: &pb.ContextAccess{AvailableApis: &pb.ContextApis{HistoryPage: true}},
		Runtime: &pb.RuntimeContext{ProtocolVersion: "1", TraceId: "0af7651916cd43dd8448eb211c80319c",
			DeadlineAt: timestamppb.New(time.Now().Add(deadline))},
	}
}

func types(results []*pb.RunResult) []string {
	out := []string{}
	for _, r := range results {
		out = append(out, agentrunner.ResultType(r))
	}
	return out
}

func grammar(t *testing.T, results []*pb.RunResult) {
	t.Helper()
	for i, r := range results {
		if r.GetSequence() != uint64(i+1) || r.GetRunId() != "run-1" || r.GetTimestamp() == nil {
			t.Errorf("result %d: sequence %d run_id %q timestamp %v", i+1, r.GetSequence(), r.GetRunId(), r.GetTimestamp())
		}
	}
	if len(results) == 0 || !agentrunner.IsTerminal(results[len(results)-1]) {
		t.Fatalf("no terminal result last: %v", types(results))
	}
}

func TestGrammarIsEnforced(t *testing.T) {
	var late error
	r := agentrunner.RunnerFunc(testManifest, func(ctx context.Context, run *agentrunner.Run) error {
		_ = run.Send(agentrunner.Delta(run.Config()["prefix"].(string) + run.Text()))
		_ = run.Send(agentrunner.ToolStarted("call-1", "search", map[string]any{"q": "x"}))
		_ = run.Send(agentrunner.Completed("done"))
		late = run.Send(agentrunner.Delta("after the end"))
		return nil
	})
	results, err := runOnce(t, r, nil, runContext(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	grammar(t, results)
	want := "message.delta tool.call.started tool.call.completed run.completed"
	if got := strings.Join(types(results), " "); got != want {
		t.Fatalf("results %q, want %q", got, want)
	}
	if results[0].GetMessageDelta().GetText() != "> hi" {
		t.Errorf("config default not applied: %q", results[0].GetMessageDelta().GetText())
	}
	if results[2].GetToolCallCompleted().GetErrorCode() != "runner.incomplete" {
		t.Errorf("open tool call closed with %q", results[2].GetToolCallCompleted().GetErrorCode())
	}
	if !errors.Is(late, agentrunner.ErrRunEnded) {
		t.Errorf("Send after the terminal result returned %v", late)
	}
}

func TestFailuresAreResultsNotErrors(t *testing.T) {
	cases := map[string]struct {
		run  func(ctx context.Context, run *agentrunner.Run) error
		code string
	}{
		"returns nil":      {func(context.Context, *agentrunner.Run) error { return nil }, ""},
		"returns an error": {func(context.Context, *agentrunner.Run) error { return errors.New("boom") }, "runner.exception"},
		"panics":           {func(context.Context, *agentrunner.Run) error { panic("kaboom") }, "runner.exception"},
		"returns a Failure": {func(context.Context, *agentrunner.Run) error {
			return &agentrunner.Failure{Code: "runner.error", Message: "controlled"}
		}, "runner.error"},
		"returns a host error": {func(context.Context, *agentrunner.Run) error {
			return agentrunner.NewError(agentrunner.ReasonUnauthorized, "no")
		}, "unauthorized"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			results, err := runOnce(t, agentrunner.RunnerFunc(testManifest, c.run), nil, runContext(10*time.Second))
			if err != nil {
				t.Fatalf("gRPC error instead of a result: %v", err)
			}
			grammar(t, results)
			last := results[len(results)-1]
			if got := last.GetRunFailed().GetCode(); got != c.code {
				t.Errorf("terminal %s code %q, want %q", agentrunner.ResultType(last), got, c.code)
			}
			if strings.Contains(last.GetRunFailed().GetMessage(), "goroutine") {
				t.Errorf("a stack trace reached the host: %q", last.GetRunFailed().GetMessage())
			}
		})
	}
}

func TestConfigIsValidatedBeforeRun(t *testing.T) {
	called := false
	r := agentrunner.RunnerFunc(testManifest, func(context.Context, *agentrunner.Run) error { called = true; return nil })
	ctx := runContext(10 * time.Second)
	ctx.Config, _ = structpb.NewStruct(map[string]any{"prefix": 5})
	results, err := runOnce(t, r, nil, ctx)
	if err != nil || called {
		t.Fatalf("err %v, run called %v", err, called)
	}
	f := results[len(results)-1].GetRunFailed()
	if f.GetCode() != "runner.config_invalid" || f.GetDetails().AsMap()["field"] != "prefix" {
		t.Fatalf("got %v", f)
	}
}

func TestHostCallsCarryTokenTraceAndDeadline(t *testing.T) {
	host := startHost(t, &fakeHost{})
	var first error
	r := agentrunner.RunnerFunc(testManifest, func(ctx context.Context, run *agentrunner.Run) error {
		_, first = run.Host().ListHistory(ctx, &pb.ListHistoryRequest{})
		host.mu.Lock()
		host.history = (&agentrunner.Error{Code: codes.ResourceExhausted, Reason: agentrunner.ReasonRateLimited,
			Message: "slow down", Retryable: true, RetryDelay: 2 * time.Second})
		host.mu.Unlock()
		_, err := run.Host().ListHistory(ctx, &pb.ListHistoryRequest{})
		if e := agentrunner.AsError(err); e == nil || e.RetryDelay != 2*time.Second || e.Reason != agentrunner.ReasonRateLimited {
			t.Errorf("host error decoded as %#v", e)
		}
		return err
	})
	results, err := runOnce(t, r, host, runContext(3*time.Second))
	if err != nil || first != nil {
		t.Fatalf("err %v, first call %v", err, first)
	}
	if len(host.calls) != 2 {
		t.Fatalf("%d calls", len(host.calls))
	}
	md := host.calls[0]
	if md.Get(agentrunner.RunTokenHeader)[0] != "tok-1" || md.Get(agentrunner.RunIDHeader)[0] != "run-1" {
		t.Errorf("metadata %v", md)
	}
	if tp := md.Get("traceparent"); len(tp) != 1 || !strings.HasPrefix(tp[0], "00-0af7651916cd43dd8448eb211c80319c-") {
		t.Errorf("traceparent %v", tp)
	}
	if host.left[0] > 3*time.Second || host.left[0] <= 0 {
		t.Errorf("call deadline %v is not within the 3 s run deadline", host.left[0])
	}
	f := results[len(results)-1].GetRunFailed()
	if f.GetCode() != "rate_limited" || !f.GetRetryable() || f.GetDetails().AsMap()["reason"] != "RATE_LIMITED" {
		t.Errorf("host error became %v", f)
	}
}

func TestCancelSignalEndsTheRunAfterItsGrace(t *testing.T) {
	cancel := &pb.CancelSignal{Reason: "user left", GracePeriod: durationpb.New(100 * time.Millisecond)}
	host := startHost(t, &fakeHost{signals: []*pb.ControlResponse{
		{SignalId: "sig-1", Signal: &pb.ControlResponse_Cancel{Cancel: cancel}}}})
	var sawCancel bool
	r := agentrunner.RunnerFunc(testManifest, func(ctx context.Context, run *agentrunner.Run) error {
		<-run.Cancelled()
		sawCancel = run.CancelReason() == "user left"
		<-ctx.Done() // a runner that ignores the signal is stopped when the grace ends
		return ctx.Err()
	})
	started := time.Now()
	results, err := runOnce(t, r, host, runContext(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	grammar(t, results)
	if f := results[len(results)-1].GetRunFailed(); f.GetCode() != "cancelled" || !strings.Contains(f.GetMessage(), "user left") {
		t.Fatalf("terminal %v", results[len(results)-1])
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Errorf("cancel took %v", took)
	}
	hello := <-host.hello
	if hello.GetRunId() != "run-1" || hello.GetRunToken() != "tok-1" {
		t.Errorf("hello %v", hello)
	}
	if ack := <-host.acks; ack.GetSignalId() != "sig-1" || !ack.GetAccepted() || !sawCancel {
		t.Errorf("ack %v, runner saw the cancel: %v", ack, sawCancel)
	}
}

func TestTheRunEndsBeforeItsDeadline(t *testing.T) {
	r := agentrunner.RunnerFunc(testManifest, func(ctx context.Context, run *agentrunner.Run) error {
		<-ctx.Done()
		return run.Send(agentrunner.Completed("too late")) // refused: the kit ends the run
	})
	ctx := runContext(400 * time.Millisecond)
	deadline := ctx.GetRuntime().GetDeadlineAt().AsTime()
	results, err := runOnce(t, r, nil, ctx)
	if err != nil {
		t.Fatal(err)
	}
	grammar(t, results)
	if f := results[len(results)-1].GetRunFailed(); f.GetCode() != "deadline_exceeded" || !f.GetRetryable() {
		t.Fatalf("terminal %v", results[len(results)-1])
	}
	if results[len(results)-1].GetTimestamp().AsTime().After(deadline) {
		t.Errorf("run.failed sent after the deadline")
	}
}

func TestDescribeUnknownRunnerIsNotFoundWithErrorInfo(t *testing.T) {
	s, _ := agentrunner.NewServer(agentrunner.RunnerFunc(testManifest, func(context.Context, *agentrunner.Run) error { return nil }))
	_, err := s.DescribeRunner(context.Background(), &pb.DescribeRunnerRequest{RunnerId: "plugin:x/y/z"})
	st := status.Convert(err)
	if st.Code() != codes.NotFound || len(st.Details()) != 1 {
		t.Fatalf("status %v details %v", st.Code(), st.Details())
	}
	info, ok := st.Details()[0].(*errdetails.ErrorInfo)
	if !ok || info.GetReason() != "NOT_FOUND" || info.GetDomain() != agentrunner.Domain || info.GetMetadata()["retryable"] != "false" {
		t.Fatalf("detail %v", st.Details()[0])
	}
}
