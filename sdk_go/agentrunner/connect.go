package agentrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// ConnectedPrefix starts the line Connect prints on stdout each time the host accepts the runtime:
// "AGENTRUNNER_RUNTIME_CONNECTED <runtime id> <connection id>".
const ConnectedPrefix = "AGENTRUNNER_RUNTIME_CONNECTED"

// ConnectOptions says how a runtime connects to the host and what it announces.
type ConnectOptions struct {
	// RuntimeID is the runtime's id on the host (default: the hostname).
	RuntimeID string
	// Labels agents select runtimes by (workspace=team-a).
	Labels map[string]string
	// Slots is how many runs it executes at once at most (default 4).
	Slots int
	// Key is the runtime key (default: RuntimeKeyFromEnv, AGENTRUNNER_RUNTIME_KEY or _KEY_FILE).
	Key string
	// Grace is how long open runs may go on when ctx ends (default 5 s).
	Grace time.Duration
	// BackoffInitial and BackoffMax bound the reconnect backoff (default 100 ms doubling to 5 s).
	BackoffInitial, BackoffMax time.Duration
	// Detect lists the harness CLIs to look for on PATH (nil: claude and codex; empty: none).
	Detect []string
}

// RefusedError is the host's refusal of the runtime for a reason waiting cannot fix (credentials, a
// runner id or label it may not serve, a manifest it refuses): Connect returns it.
type RefusedError struct{ Err *Error }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the host refused this runtime: %s %s: %s", e.Err.Code, e.Err.Reason, e.Err.Message)
}

var fatalCodes = map[codes.Code]bool{codes.Unauthenticated: true, codes.PermissionDenied: true, codes.InvalidArgument: true}

// BackoffDelay is the capped exponential backoff with jitter the runtime waits before reconnect attempt
// `attempt` (from 0): half of the step fixed, half random.
func BackoffDelay(attempt int, initial, limit time.Duration) time.Duration {
	step := initial << min(attempt, 30)
	if step > limit || step <= 0 {
		step = limit
	}
	return step/2 + time.Duration(rand.Int63n(int64(step/2)+1))
}

// Connect serves the runners by dialing the host at address (a runtime: no listening port) until ctx
// ends, reconnecting with backoff when the connection drops; when ctx ends it drains (the host places no
// new runs, open runs get opts.Grace). It returns a *RefusedError when the host refuses the runtime.
func (s *Server) Connect(ctx context.Context, address string, opts ConnectOptions) error {
	opts = opts.withDefaults()
	if opts.Detect == nil {
		opts.Detect = []string{"claude", "codex"}
	}
	capabilities := DetectHarnesses(ctx, opts.Detect)
	s.hosts.mu.Lock()
	hostTLS := s.hosts.tls
	s.hosts.mu.Unlock()
	creds, err := hostTLS.credentials()
	if err != nil {
		return fmt.Errorf("host TLS: %w", err)
	}
	if opts.Key == "" {
		if opts.Key, err = RuntimeKeyFromEnv(); err != nil {
			return err
		}
	}
	if err := checkKeyTransport(address, opts.Key, hostTLS != nil); err != nil {
		return err
	}
	rt := &runtimeConn{server: s, address: address, opts: opts, capabilities: capabilities,
		instance: NewID("inst"), creds: grpc.WithTransportCredentials(creds)}
	attempt := 0
	for ctx.Err() == nil {
		welcomed := rt.connections.Load()
		err := rt.session(ctx)
		var refused *RefusedError
		if errors.As(err, &refused) {
			return err
		}
		if ctx.Err() != nil {
			break
		}
		if rt.connections.Load() > welcomed {
			attempt = 0 // (the host had accepted this session: the first retry comes quickly again)
		}
		delay := BackoffDelay(attempt, opts.BackoffInitial, opts.BackoffMax)
		attempt++
		slog.Info("runtime reconnecting", "in", delay, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	return nil
}

func (o ConnectOptions) withDefaults() ConnectOptions {
	if o.RuntimeID == "" {
		o.RuntimeID, _ = os.Hostname()
	}
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	if o.BackoffInitial == 0 {
		o.BackoffInitial = 100 * time.Millisecond
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 5 * time.Second
	}
	return o
}

type runtimeConn struct {
	server       *Server
	address      string
	opts         ConnectOptions
	capabilities []*pb.HarnessCapability
	instance     string
	creds        grpc.DialOption
	active       atomic.Int32
	drained      atomic.Bool
	connections  atomic.Int32
	sessions     atomic.Int32 // sessions started: which replica of a fleet address the next one dials
}

func (rt *runtimeConn) hello() *pb.ConnectRequest {
	host, _ := os.Hostname()
	var runners []*pb.RunnerManifest
	for _, r := range rt.server.runners {
		runners = append(runners, r.manifest)
	}
	return &pb.ConnectRequest{Message: &pb.ConnectRequest_Hello{Hello: &pb.RuntimeHello{
		RuntimeId: rt.opts.RuntimeID, InstanceId: rt.instance,
		Machine: &pb.RuntimeMachine{Hostname: host, Os: runtime.GOOS, Arch: runtime.GOARCH},
		Sdk:     &pb.RuntimeSdk{Language: "go", Version: Version},
		Labels:  rt.opts.Labels, Slots: int32(rt.opts.Slots), Runners: runners, Capabilities: rt.capabilities,
	}}}
}

// session is one connection: register, then heartbeats, slot streams and the host's signals until it
// ends (the stream broke, the host ended it, or ctx ended and the runtime drained).
func (rt *runtimeConn) session(ctx context.Context) error {
	// (a fleet address: this session's streams all go to one replica, the next session to the next one)
	entries, err := fleetEntries(rt.address)
	if err != nil {
		return err
	}
	entry := entries[int(rt.sessions.Add(1)-1)%len(entries)]
	conn, err := grpc.NewClient(entry.target, append(entry.dialOptions(), rt.creds,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pb.NewRuntimeServiceClient(conn)
	sessionCtx, end := context.WithCancel(context.Background())
	defer end()
	if rt.opts.Key != "" {
		sessionCtx = metadata.AppendToOutgoingContext(sessionCtx, "authorization", "Bearer "+rt.opts.Key)
	}
	stream, err := client.Connect(sessionCtx)
	if err != nil {
		return err
	}
	if err := stream.Send(rt.hello()); err != nil {
		return refusal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return refusal(err)
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return errors.New("the host answered hello without welcome")
	}
	rt.drained.Store(welcome.GetDrained())
	rt.connections.Add(1)
	slog.Info("runtime connected", "runtime_id", rt.opts.RuntimeID, "connection", welcome.GetConnectionId())
	fmt.Printf("%s %s %s\n", ConnectedPrefix, rt.opts.RuntimeID, welcome.GetConnectionId())
	var sendMu sync.Mutex
	send := func(m *pb.ConnectRequest) error { sendMu.Lock(); defer sendMu.Unlock(); return stream.Send(m) }
	var wg sync.WaitGroup
	wg.Add(1 + rt.opts.Slots)
	go func() { defer wg.Done(); rt.heartbeats(sessionCtx, send, welcome.GetHeartbeatInterval()) }()
	for i := 0; i < rt.opts.Slots; i++ {
		go func() { defer wg.Done(); rt.slot(sessionCtx, client, welcome.GetConnectionId()) }()
	}
	signals := make(chan error, 1)
	go func() { signals <- rt.signals(stream) }()
	select {
	case err = <-signals:
	case <-ctx.Done():
		_ = send(&pb.ConnectRequest{Message: &pb.ConnectRequest_Drain{Drain: &pb.RuntimeDrain{Reason: "the runtime is shutting down"}}})
		rt.drained.Store(true)
		rt.server.Drain(rt.opts.Grace)
		sendMu.Lock()
		_ = stream.CloseSend()
		sendMu.Unlock()
		select {
		case err = <-signals:
		case <-time.After(2 * time.Second):
		}
	}
	end()
	wg.Wait()
	return err
}

func refusal(err error) error {
	if st, ok := status.FromError(err); ok && fatalCodes[st.Code()] {
		return &RefusedError{Err: AsError(err)}
	}
	return err
}

func (rt *runtimeConn) signals(stream grpc.BidiStreamingClient[pb.ConnectRequest, pb.ConnectResponse]) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return refusal(err)
		}
		if d := msg.GetDrain(); d != nil {
			rt.drained.Store(d.GetDrained())
			slog.Info("runtime drain", "drained", d.GetDrained(), "reason", d.GetReason())
		}
	}
}

func (rt *runtimeConn) heartbeats(ctx context.Context, send func(*pb.ConnectRequest) error, every *durationpb.Duration) {
	interval := every.AsDuration()
	if interval <= 0 {
		interval = 2 * time.Second
	}
	for {
		free := int32(rt.opts.Slots) - rt.active.Load()
		if err := send(&pb.ConnectRequest{Message: &pb.ConnectRequest_Heartbeat{Heartbeat: &pb.RuntimeHeartbeat{FreeSlots: max(free, 0)}}}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// slot keeps one slot stream open while the runtime takes runs; the host places at most one run on it.
func (rt *runtimeConn) slot(ctx context.Context, client pb.RuntimeServiceClient, connectionID string) {
	for ctx.Err() == nil {
		if rt.drained.Load() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		claim, err := client.ClaimRun(ctx)
		if err == nil {
			err = claim.Send(&pb.ClaimRunRequest{Message: &pb.ClaimRunRequest_Ready{Ready: &pb.ClaimReady{ConnectionId: connectionID}}})
		}
		var first *pb.ClaimRunResponse
		if err == nil {
			first, err = claim.Recv()
		}
		if err != nil {
			code := status.Code(err)
			if code == codes.FailedPrecondition || code == codes.Unauthenticated || ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // (io.EOF: the host gave the slot back)
			continue
		}
		if run := first.GetRun(); run != nil {
			rt.execute(ctx, claim, run)
		}
	}
}

// execute runs one claimed run exactly as Server.Run does, its results up the slot stream; the host
// ending the stream (cancel, deadline, connection lost) cancels the run's context at once.
func (rt *runtimeConn) execute(ctx context.Context, claim grpc.BidiStreamingClient[pb.ClaimRunRequest, pb.ClaimRunResponse], run *pb.ClaimedRun) {
	rt.active.Add(1)
	defer rt.active.Add(-1)
	req := proto.Clone(run.GetRequest()).(*pb.RunRequest)
	req.HostApiEndpoint = rt.address
	callCtx, hostEnded := context.WithCancel(ctx)
	defer hostEnded()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := claim.Recv(); err != nil {
				hostEnded()
				return
			}
		}
	}()
	send := func(r *pb.RunResponse) error {
		return claim.Send(&pb.ClaimRunRequest{Message: &pb.ClaimRunRequest_Response{Response: r}})
	}
	r, ok := rt.server.find(req.GetRunnerId(), req.GetRunnerName())
	if !ok || req.GetContext().GetRunId() == "" {
		f := Failed("runner.unavailable", fmt.Sprintf("this runtime serves no runner %q", req.GetRunnerId()), true)
		f.RunId, f.Sequence = req.GetContext().GetRunId(), 1
		_ = send(&pb.RunResponse{Result: f})
	} else {
		rt.server.execute(callCtx, r.runner, r.manifest, req, send)
	}
	_ = claim.CloseSend()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
	}
}
