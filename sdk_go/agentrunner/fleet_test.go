package agentrunner

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// replica is a gRPC server with the health service that counts the unary calls it answers.
type replica struct {
	addr   string
	calls  atomic.Int32
	health *health.Server
}

func startReplica(t *testing.T) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{addr: lis.Addr().String(), health: health.NewServer()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, r.health)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

func checkN(t *testing.T, cc *grpc.ClientConn, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

func TestTheHostChannelBalancesRoundRobinOverAFleetAndSkipsADrainingReplica(t *testing.T) {
	a, b, c := startReplica(t), startReplica(t), startReplica(t)
	_, cPort, _ := net.SplitHostPort(c.addr)
	hosts := hostConns{}
	defer hosts.close()
	// one entry by name: resolved when the channel is made
	cc, err := hosts.get(a.addr + ", " + b.addr + ",localhost:" + cPort)
	if err != nil {
		t.Fatal(err)
	}
	// (round robin spreads calls over the replicas whose connection is ready: wait until all three are)
	all := map[string]*replica{"a": a, "b": b, "c": c}
	for deadline := time.Now().Add(10 * time.Second); a.calls.Load() == 0 || b.calls.Load() == 0 || c.calls.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("not every replica answered within 10 s: a %d, b %d, c %d", a.calls.Load(), b.calls.Load(), c.calls.Load())
		}
		checkN(t, cc, 1)
	}
	for _, r := range all {
		r.calls.Store(0)
	}
	checkN(t, cc, 30)
	for name, r := range all {
		if got := r.calls.Load(); got < 9 {
			t.Errorf("replica %s answered %d of 30 calls: not round robin", name, got)
		}
	}
	// a replica that reports NOT_SERVING (draining) gets no new call once the channel has seen it
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := b.calls.Load()
		checkN(t, cc, 10)
		if b.calls.Load() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the draining replica still gets calls after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	aBefore, cBefore := a.calls.Load(), c.calls.Load()
	checkN(t, cc, 20)
	if a.calls.Load() == aBefore || c.calls.Load() == cBefore {
		t.Errorf("the serving replicas did not share the calls: a +%d, c +%d", a.calls.Load()-aBefore, c.calls.Load()-cBefore)
	}
}

func TestADNSTargetIsBalancedAndOneAddressIsUsedAsItIs(t *testing.T) {
	r := startReplica(t)
	_, port, _ := net.SplitHostPort(r.addr)
	target, opts, err := fleetDial("dns:///localhost:" + port)
	if err != nil || target != "dns:///localhost:"+port || len(opts) != 1 {
		t.Fatalf("dns target: %q %d options %v", target, len(opts), err)
	}
	hosts := hostConns{}
	defer hosts.close()
	cc, err := hosts.get("dns:///localhost:" + port)
	if err != nil {
		t.Fatal(err)
	}
	checkN(t, cc, 3)
	if r.calls.Load() != 3 {
		t.Errorf("the replica behind the dns name answered %d of 3 calls", r.calls.Load())
	}
	if target, opts, err := fleetDial("10.0.0.1:50443"); target != "10.0.0.1:50443" || opts != nil || err != nil {
		t.Errorf("one address: %q %v %v", target, opts, err)
	}
}

func TestABadReplicaListIsOneClearError(t *testing.T) {
	for address, want := range map[string]string{
		"10.0.0.1:1,10.0.0.2":               `"10.0.0.2" is not host:port`,
		"10.0.0.1:1,no-such-host.invalid:5": "does not resolve",
	} {
		if _, _, err := fleetDial(address); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v (want %q)", address, err, want)
		}
	}
	// (a runtime dials its replicas by name, one per session: only the form is checked up front)
	if _, err := fleetEntries("10.0.0.1:1,10.0.0.2"); err == nil || !strings.Contains(err.Error(), "not host:port") {
		t.Errorf("a runtime's bad list: %v", err)
	}
}

func TestARuntimesSessionsTakeTurnsOnTheReplicas(t *testing.T) {
	entries, err := fleetEntries("h1:1, h2:2,")
	if err != nil || len(entries) != 2 || entries[0].target != "h1:1" || entries[1].target != "h2:2" {
		t.Fatalf("list: %+v %v", entries, err)
	}
	entries, err = fleetEntries("dns:///localhost:7")
	if err != nil || len(entries) == 0 || entries[0].authority != "localhost:7" || !strings.HasSuffix(entries[0].target, ":7") {
		t.Fatalf("dns: %+v %v", entries, err)
	}
	if entries, _ := fleetEntries("10.0.0.1:5"); len(entries) != 1 || entries[0].target != "10.0.0.1:5" {
		t.Fatalf("one address: %+v", entries)
	}
	if !isLoopbackTarget("127.0.0.1:1,localhost:2") || isLoopbackTarget("127.0.0.1:1,192.0.2.1:2") {
		t.Error("a list is loopback only when every replica is")
	}
}
