package agentrunner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// DefaultHeartbeat is the heartbeat interval when the host's welcome does not name one.
const DefaultHeartbeat = 10 * time.Second

// control runs the run's Control stream until ctx ends: hello first, then an ack for every signal
// (written before the signal acts), heartbeats at the welcome's interval, cancel, steering and
// deadline signals. A host without the stream (UNIMPLEMENTED) is fine; the run goes on without it.
func (s *Server) control(ctx context.Context, run *Run) {
	caps := run.manifest.GetCapabilities()
	accepts := []string{"deadline"}
	if caps.GetInterrupt() {
		accepts = append(accepts, "cancel")
	}
	if caps.GetSteering() {
		accepts = append(accepts, "steering")
	}
	cc, err := s.hosts.get(run.req.GetHostApiEndpoint())
	if err != nil {
		slog.Warn("control stream unavailable", "run_id", run.RunID(), "error", err)
		return
	}
	md := []string{RunTokenHeader, run.req.GetRunToken(), RunIDHeader, run.RunID()}
	if tp := Traceparent(run.Context().GetRuntime().GetTraceId()); tp != "" {
		md = append(md, "traceparent", tp)
	}
	streamCtx := metadata.AppendToOutgoingContext(ctx, md...)
	if d, ok := run.Deadline(); ok {
		var cancel context.CancelFunc
		// The stream may outlive the run deadline a little: the last ack and the run.failed come late.
		streamCtx, cancel = context.WithDeadline(streamCtx, d.Add(5*time.Second))
		defer cancel()
	}
	stream, err := pb.NewProxyServiceClient(cc).Control(streamCtx)
	if err != nil {
		slog.Warn("control stream unavailable", "run_id", run.RunID(), "error", err)
		return
	}
	var writeMu sync.Mutex
	write := func(m *pb.ControlRequest) error {
		writeMu.Lock()
		defer writeMu.Unlock()
		return stream.Send(m)
	}
	hello := &pb.ControlHello{RunId: run.RunID(), RunToken: run.req.GetRunToken(), Accepts: accepts}
	if err := write(&pb.ControlRequest{Message: &pb.ControlRequest_Hello{Hello: hello}}); err != nil {
		logControlEnd(ctx, run, err)
		return
	}
	beats := make(chan struct{})
	defer func() { <-beats }()
	started := false
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !started {
				close(beats)
			}
			logControlEnd(ctx, run, err)
			return
		}
		switch sig := msg.GetSignal().(type) {
		case *pb.ControlResponse_Welcome:
			if d := sig.Welcome.GetDeadlineAt(); d != nil {
				run.setDeadline(d.AsTime())
			}
			interval := DefaultHeartbeat
			if hb := sig.Welcome.GetHeartbeatInterval(); hb != nil && hb.AsDuration() > 0 {
				interval = max(hb.AsDuration(), 50*time.Millisecond)
			}
			if !started {
				started = true
				go heartbeat(ctx, run, interval, write, beats)
			}
			continue
		}
		accepted, detail := true, ""
		switch msg.GetSignal().(type) {
		case *pb.ControlResponse_Cancel, *pb.ControlResponse_Deadline:
		case *pb.ControlResponse_Steering:
			if !caps.GetSteering() {
				accepted, detail = false, "runner does not accept steering"
			}
		default:
			accepted, detail = false, "unknown signal"
		}
		if msg.GetSignalId() != "" {
			ack := &pb.ControlAck{SignalId: msg.GetSignalId(), Accepted: accepted, Detail: detail}
			_ = write(&pb.ControlRequest{Message: &pb.ControlRequest_Ack{Ack: ack}})
		}
		if accepted {
			apply(run, msg)
		}
	}
}

func apply(run *Run, msg *pb.ControlResponse) {
	switch sig := msg.GetSignal().(type) {
	case *pb.ControlResponse_Cancel:
		grace := DefaultCancelGrace
		if g := sig.Cancel.GetGracePeriod(); g != nil {
			grace = max(g.AsDuration(), 0)
		}
		run.onCancel(sig.Cancel.GetReason(), grace)
	case *pb.ControlResponse_Steering:
		select {
		case run.steering <- sig.Steering:
		default:
			slog.Warn("steering input dropped: nobody reads Run.Steering()", "run_id", run.RunID())
		}
	case *pb.ControlResponse_Deadline:
		if d := sig.Deadline.GetDeadlineAt(); d != nil {
			run.setDeadline(d.AsTime())
		}
	}
}

func heartbeat(ctx context.Context, run *Run, every time.Duration, write func(*pb.ControlRequest) error, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			run.mu.Lock()
			seq := run.seq
			run.mu.Unlock()
			beat := &pb.ControlHeartbeat{LastSequence: seq}
			if write(&pb.ControlRequest{Message: &pb.ControlRequest_Heartbeat{Heartbeat: beat}}) != nil {
				return
			}
		}
	}
}

func logControlEnd(ctx context.Context, run *Run, err error) {
	switch {
	case ctx.Err() != nil, errors.Is(err, io.EOF):
	case status.Code(err) == codes.Unimplemented:
		slog.Info("host has no control stream; continuing without it", "run_id", run.RunID())
	default:
		slog.Warn("control stream ended", "run_id", run.RunID(), "error", AsError(err))
	}
}
