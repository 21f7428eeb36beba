package agentrunner

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Metadata keys of host API calls.
const (
	RunTokenHeader = "x-agentrunner-run-token"
	RunIDHeader    = "x-agentrunner-run-id"
)

// DefaultTimeouts are the per-call defaults of host API calls by method name (clipped by the run's
// remaining time); other methods get 15 s. A deadline already on the caller's context is kept when
// it is earlier.
var DefaultTimeouts = map[string]time.Duration{
	"InvokeModel": 120 * time.Second, "StreamModel": 120 * time.Second, "RerankDocuments": 30 * time.Second,
	"CountTokens": 30 * time.Second, "GetToolDetail": 15 * time.Second, "CallTool": 60 * time.Second,
	"ListKnowledgeBases": 15 * time.Second, "RetrieveKnowledge": 30 * time.Second, "GetPrompt": 15 * time.Second,
	"ListHistory": 30 * time.Second, "SearchHistory": 30 * time.Second, "GetEvent": 15 * time.Second,
	"ListEvents": 30 * time.Second, "GetArtifactMetadata": 15 * time.Second, "ReadArtifact": 30 * time.Second,
	"DownloadArtifact": 120 * time.Second, "PullSteering": 10 * time.Second,
	"RequestPlatformAction": 60 * time.Second, "SendReply": 30 * time.Second, "SendMessage": 60 * time.Second,
}

const defaultTimeout = 15 * time.Second

// HostTLS is TLS towards the host's ProxyService (needed when the host listens with TLS): CAFile
// verifies the host, CertFile + KeyFile present a client certificate (mutual TLS).
type HostTLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// HostTLSFromEnv reads AGENTRUNNER_HOST_CA_FILE, _CERT_FILE, _KEY_FILE and _SERVER_NAME (nil when unset),
// the same variables the Python SDK reads.
func HostTLSFromEnv() *HostTLS {
	t := &HostTLS{
		CAFile: os.Getenv("AGENTRUNNER_HOST_CA_FILE"), CertFile: os.Getenv("AGENTRUNNER_HOST_CERT_FILE"),
		KeyFile: os.Getenv("AGENTRUNNER_HOST_KEY_FILE"), ServerName: os.Getenv("AGENTRUNNER_HOST_SERVER_NAME"),
	}
	if *t == (HostTLS{}) {
		return nil
	}
	return t
}

func (t *HostTLS) credentials() (credentials.TransportCredentials, error) {
	if t == nil {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", t.CAFile)
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// hostConns keeps one connection per host endpoint for the whole process.
type hostConns struct {
	mu    sync.Mutex
	tls   *HostTLS
	conns map[string]*grpc.ClientConn
}

func (h *hostConns) get(endpoint string) (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cc, ok := h.conns[endpoint]; ok {
		return cc, nil
	}
	creds, err := h.tls.credentials()
	if err != nil {
		return nil, fmt.Errorf("host TLS: %w", err)
	}
	target, fleetOpts, err := fleetDial(endpoint) // several replicas: round robin (fleet.go)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(target, append(fleetOpts, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))...)
	if err != nil {
		return nil, err
	}
	if h.conns == nil {
		h.conns = map[string]*grpc.ClientConn{}
	}
	h.conns[endpoint] = cc
	return cc, nil
}

func (h *hostConns) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, cc := range h.conns {
		_ = cc.Close()
		delete(h.conns, k)
	}
}

var traceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Traceparent is a W3C traceparent for a new span of the trace, or "" without a valid trace id.
func Traceparent(trace string) string {
	trace = strings.ToLower(trace)
	if !traceID.MatchString(trace) || trace == strings.Repeat("0", 32) {
		return ""
	}
	span := make([]byte, 8)
	_, _ = rand.Read(span)
	return "00-" + trace + "-" + hex.EncodeToString(span) + "-01"
}

// hostConn is the run-scoped grpc.ClientConnInterface behind Run.Host(): it adds the run token, the
// run id and a traceparent to every call, bounds its deadline, refuses calls once the run has ended,
// and returns failures as *Error.
type hostConn struct {
	cc       *grpc.ClientConn
	err      error
	token    string
	runID    string
	trace    string
	deadline func() time.Time
	ended    func() bool
}

func (c *hostConn) prepare(ctx context.Context, method string) (context.Context, context.CancelFunc, error) {
	name := method[strings.LastIndex(method, "/")+1:]
	if c.err != nil {
		return nil, nil, c.err
	}
	if c.ended() {
		return nil, nil, NewError(ReasonFailedPrecondition, name+": the run has ended")
	}
	timeout, ok := DefaultTimeouts[name]
	if !ok {
		timeout = defaultTimeout
	}
	at := time.Now().Add(timeout)
	if run := c.deadline(); !run.IsZero() {
		if !time.Now().Before(run) {
			return nil, nil, NewError(ReasonDeadlineExceeded, "the run deadline passed before "+name)
		}
		if run.Before(at) {
			at = run
		}
	}
	md := []string{RunTokenHeader, c.token, RunIDHeader, c.runID}
	if tp := Traceparent(c.trace); tp != "" {
		md = append(md, "traceparent", tp)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	ctx, cancel := context.WithDeadline(ctx, at)
	return ctx, cancel, nil
}

func (c *hostConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	ctx, cancel, err := c.prepare(ctx, method)
	if err != nil {
		return err
	}
	defer cancel()
	if err := c.cc.Invoke(ctx, method, args, reply, opts...); err != nil {
		return AsError(err)
	}
	return nil
}

func (c *hostConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel, err := c.prepare(ctx, method)
	if err != nil {
		return nil, err
	}
	s, err := c.cc.NewStream(ctx, desc, method, opts...)
	if err != nil {
		cancel()
		return nil, AsError(err)
	}
	return &hostStream{ClientStream: s, cancel: cancel}, nil
}

// hostStream ends its context when the stream ends and converts errors.
type hostStream struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *hostStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
		if !errors.Is(err, io.EOF) {
			return AsError(err)
		}
	}
	return err
}

var errNoEndpoint = &Error{Code: codes.PermissionDenied, Reason: ReasonUnauthorized, Message: "the host gave this run no API endpoint"}
