package agentrunner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// ReadyPrefix starts the line ListenAndServe prints on stdout once it listens: "AGENTRUNNER_LISTENING host:port".
const ReadyPrefix = "AGENTRUNNER_LISTENING"

// Runner is what a runner author implements: a manifest and a Run function that streams results with
// run.Send. Returning nil without a terminal result sends run.completed; returning an error sends
// run.failed (a *Failure chooses the code, an *Error from the host API gives its spec code, anything
// else is runner.exception). ctx ends when the host cancels the call, after a cancel signal's grace,
// just before the run deadline, and when the server shuts down.
type Runner interface {
	Manifest() *pb.RunnerManifest
	Run(ctx context.Context, run *Run) error
}

type funcRunner struct {
	manifest *pb.RunnerManifest
	run      func(ctx context.Context, run *Run) error
}

func (f funcRunner) Manifest() *pb.RunnerManifest            { return f.manifest }
func (f funcRunner) Run(ctx context.Context, run *Run) error { return f.run(ctx, run) }

// RunnerFunc makes a Runner of a manifest and a function.
func RunnerFunc(manifest *pb.RunnerManifest, run func(ctx context.Context, run *Run) error) Runner {
	return funcRunner{manifest, run}
}

type served struct {
	runner   Runner
	manifest *pb.RunnerManifest
}

// Server serves runners as agentrunner.v1.RunnerService.
type Server struct {
	pb.UnimplementedRunnerServiceServer
	runners  []served
	hosts    hostConns
	health   *health.Server
	mu       sync.Mutex
	active   map[*Run]struct{}
	draining bool
	idle     *sync.Cond
}

// NewServer checks every runner's manifest (CheckManifest) and that their ids are unique.
func NewServer(runners ...Runner) (*Server, error) {
	if len(runners) == 0 {
		return nil, errors.New("serve at least one runner")
	}
	s := &Server{active: map[*Run]struct{}{}, health: health.NewServer(), hosts: hostConns{tls: HostTLSFromEnv()}}
	s.idle = sync.NewCond(&s.mu)
	seen := map[string]bool{}
	for _, r := range runners {
		m, err := CheckManifest(r.Manifest())
		if err != nil {
			return nil, err
		}
		if seen[m.GetId()] {
			return nil, fmt.Errorf("runner id %s is served twice", m.GetId())
		}
		seen[m.GetId()] = true
		s.runners = append(s.runners, served{r, m})
	}
	return s, nil
}

// SetHostTLS sets the TLS used towards the host's ProxyService (default: AGENTRUNNER_HOST_* variables,
// else plaintext). Call it before serving.
func (s *Server) SetHostTLS(t *HostTLS) { s.hosts.tls = t }

func (s *Server) hostConn(run *Run) *hostConn {
	c := &hostConn{
		token: run.req.GetRunToken(), runID: run.RunID(), trace: run.Context().GetRuntime().GetTraceId(),
		deadline: run.hostDeadline, ended: run.isEnded,
	}
	if run.req.GetHostApiEndpoint() == "" {
		c.err = errNoEndpoint
	} else {
		c.cc, c.err = s.hosts.get(run.req.GetHostApiEndpoint())
	}
	return c
}

func (s *Server) track(run *Run, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.active, run)
		s.idle.Broadcast()
		return true
	}
	if s.draining {
		return false
	}
	s.active[run] = struct{}{}
	return true
}

func (s *Server) find(id, name string) (served, bool) {
	for _, r := range s.runners {
		if (id != "" && (id == r.manifest.GetId() || id == r.manifest.GetName())) || (id == "" && name == r.manifest.GetName()) {
			return r, true
		}
	}
	if id == "" && name == "" && len(s.runners) == 1 {
		return s.runners[0], true
	}
	return served{}, false
}

// ListRunners implements agentrunner.v1.RunnerService.
func (s *Server) ListRunners(context.Context, *pb.ListRunnersRequest) (*pb.ListRunnersResponse, error) {
	out := &pb.ListRunnersResponse{}
	for _, r := range s.runners {
		out.Runners = append(out.Runners, r.manifest)
	}
	return out, nil
}

// DescribeRunner implements agentrunner.v1.RunnerService.
func (s *Server) DescribeRunner(_ context.Context, req *pb.DescribeRunnerRequest) (*pb.DescribeRunnerResponse, error) {
	r, ok := s.find(req.GetRunnerId(), "")
	if !ok || req.GetRunnerId() == "" {
		return nil, NewError(ReasonNotFound, fmt.Sprintf("no runner %q is served here", req.GetRunnerId()))
	}
	return &pb.DescribeRunnerResponse{Runner: r.manifest}, nil
}

// Run implements agentrunner.v1.RunnerService: it streams the run's results.
func (s *Server) Run(req *pb.RunRequest, stream grpc.ServerStreamingServer[pb.RunResponse]) error {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return NewError(ReasonRunnerUnavailable, "the runner server is shutting down")
	}
	r, ok := s.find(req.GetRunnerId(), req.GetRunnerName())
	if !ok {
		id := req.GetRunnerId()
		if id == "" {
			id = req.GetRunnerName()
		}
		return NewError(ReasonNotFound, fmt.Sprintf("no runner %q here", id))
	}
	if req.GetContext().GetRunId() == "" {
		e := NewError(ReasonInvalidArgument, "context.run_id is required")
		e.Metadata = map[string]string{"field": "context.run_id"}
		return e
	}
	s.execute(stream.Context(), r.runner, r.manifest, req, stream.Send)
	return nil
}

// Register adds the RunnerService, gRPC health (SERVING) and reflection to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterRunnerServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.RunnerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(g)
}

// Drain refuses new runs and lets running ones end for up to grace, then ends them with run.failed
// cancelled (and waits up to a second for those results to go out).
func (s *Server) Drain(grace time.Duration) {
	s.health.Shutdown()
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	wait := func(limit time.Duration) {
		done := make(chan struct{})
		go func() {
			s.mu.Lock()
			for len(s.active) > 0 {
				s.idle.Wait()
			}
			s.mu.Unlock()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(limit):
		}
	}
	wait(grace)
	s.mu.Lock()
	for run := range s.active {
		run.stop(errShutdown)
	}
	s.mu.Unlock()
	wait(time.Second)
	s.hosts.close()
}

// ServerOptions are the gRPC server options the kit uses (16 MiB messages, keepalive).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(16 << 20), grpc.MaxSendMsgSize(16 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
	}
}

// Options of ListenAndServe.
type Options struct {
	// TLSCert and TLSKey serve TLS (PEM files); both or neither.
	TLSCert, TLSKey string
	// Grace is how long in-flight runs may go on after SIGTERM/SIGINT (default 5 s).
	Grace time.Duration
}

// ListenAndServe serves the runners on addr ("127.0.0.1:0" picks a free port) until SIGTERM or
// SIGINT, then drains. It prints "AGENTRUNNER_LISTENING host:port" on stdout when ready.
func ListenAndServe(addr string, opts Options, runners ...Runner) error {
	s, err := NewServer(runners...)
	if err != nil {
		return err
	}
	serverOpts := ServerOptions()
	if opts.TLSCert != "" || opts.TLSKey != "" {
		creds, err := credentials.NewServerTLSFromFile(opts.TLSCert, opts.TLSKey)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		serverOpts = append(serverOpts, grpc.Creds(creds))
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	g := grpc.NewServer(serverOpts...)
	s.Register(g)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	slog.Info("runner server listening", "address", lis.Addr().String())
	fmt.Printf("%s %s\n", ReadyPrefix, lis.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	grace := opts.Grace
	if grace == 0 {
		grace = 5 * time.Second
	}
	slog.Info("shutting down", "grace", grace)
	s.Drain(grace)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		g.Stop()
	}
	return nil
}

// labelFlags collects repeated -label key=value flags.
type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlags) Set(value string) error {
	k, v, ok := strings.Cut(value, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q: expected key=value", value)
	}
	l[k] = v
	return nil
}

// Main serves the runners with flags -host (127.0.0.1), -port (0 = a free port), -tls-cert, -tls-key
// and -grace, logging to stderr; it exits with a one-line message when serving fails. With -connect
// HOST:PORT it is a runtime instead: it dials the host (no listening port; -runtime-id, -label k=v,
// -slots, the key from AGENTRUNNER_RUNTIME_KEY or _KEY_FILE, TLS from AGENTRUNNER_HOST_* variables) and exits 2 when
// the host refuses it.
func Main(runners ...Runner) {
	host := flag.String("host", "127.0.0.1", "interface to bind")
	port := flag.Int("port", 0, "port to bind; 0 picks a free port")
	cert := flag.String("tls-cert", "", "PEM certificate chain for TLS")
	key := flag.String("tls-key", "", "PEM private key for TLS")
	grace := flag.Duration("grace", 5*time.Second, "how long in-flight runs may go on after SIGTERM")
	connect := flag.String("connect", "", "dial the host at HOST:PORT instead of listening (a runtime)")
	runtimeID := flag.String("runtime-id", "", "the runtime's id on the host (default: the hostname)")
	slots := flag.Int("slots", 4, "runs a runtime executes at once at most")
	detect := flag.String("detect", "claude,codex", "harness CLIs a runtime looks for on PATH ('' for none)")
	labels := labelFlags{}
	flag.Var(labels, "label", "a runtime label, key=value (repeat)")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if *connect != "" {
		os.Exit(connectMain(*connect, ConnectOptions{RuntimeID: *runtimeID, Labels: labels, Slots: *slots,
			Grace: *grace, Detect: splitList(*detect)}, runners))
	}
	addr := net.JoinHostPort(*host, fmt.Sprint(*port))
	if err := ListenAndServe(addr, Options{TLSCert: *cert, TLSKey: *key, Grace: *grace}, runners...); err != nil {
		fmt.Fprintln(os.Stderr, "agentrunner:", err)
		os.Exit(1)
	}
}

func splitList(text string) []string {
	out := []string{}
	for _, item := range strings.Split(text, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func connectMain(address string, opts ConnectOptions, runners []Runner) int {
	s, err := NewServer(runners...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentrunner:", err)
		return 1
	}
	if opts.Key, err = TakeRuntimeKey(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Connect(ctx, address, opts); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var refused *RefusedError
		if errors.As(err, &refused) {
			return 2
		}
		return 1
	}
	return 0
}
