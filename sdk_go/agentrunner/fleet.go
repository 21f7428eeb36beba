package agentrunner

// One address for a fleet of host replicas (the Python SDK's agentrunner.fleet, for the Go kit).
//
// A host address may be one host:port (or any gRPC target: used as it is), several comma-separated
// (h1:50443,h2:50443: names resolved once, when the channel is made) or a dns:///name:port target
// whose name resolves to several addresses (a headless service). The last two give one channel that
// balances calls round_robin over the replicas and watches each one's gRPC health service (a
// draining or stopped replica gets no new call). Every ProxyService call works on any replica, so the
// kit's host channel (HostApiEndpoint) takes such an address as it is. A runtime's session is
// different: its ClaimRun streams belong to the replica holding its Connect stream, so each session
// dials one replica, and the next session (after a reconnect) the next one (fleetEntries).

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/health" // registers the client-side health checking healthCheckConfig uses
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// fleetServiceConfig balances round robin over the replicas that report SERVING.
const fleetServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// isFleetAddress says whether address names several replicas (a comma-separated list or a dns: target).
func isFleetAddress(address string) bool {
	address = strings.TrimSpace(address)
	return strings.Contains(address, ",") || strings.HasPrefix(address, "dns:")
}

func splitEntry(entry string) (string, string, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(entry))
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("%q is not host:port (in a comma-separated list of replicas)", strings.TrimSpace(entry))
	}
	return host, port, nil
}

// resolveEntry is host:port's addresses as ip:port ([ip6]:port); an IP literal as it is.
func resolveEntry(host, port string) ([]string, error) {
	ips := []string{host}
	if net.ParseIP(host) == nil {
		found, err := net.LookupHost(host)
		if err != nil {
			return nil, fmt.Errorf("replica address %s does not resolve: %w", net.JoinHostPort(host, port), err)
		}
		ips = found
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out, nil
}

// fleetDial is the gRPC target and dial options for address: as it is for one replica; for several,
// one round-robin, health-checked channel whose authority (and TLS name) is the first entry's.
func fleetDial(address string) (string, []grpc.DialOption, error) {
	address = strings.TrimSpace(address)
	balanced := grpc.WithDefaultServiceConfig(fleetServiceConfig)
	if strings.HasPrefix(address, "dns:") && !strings.Contains(address, ",") {
		return address, []grpc.DialOption{balanced}, nil
	}
	if !strings.Contains(address, ",") || strings.HasPrefix(address, "unix:") {
		return address, nil, nil
	}
	var addrs []resolver.Address
	first := ""
	for _, entry := range strings.Split(address, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		host, port, err := splitEntry(entry)
		if err != nil {
			return "", nil, err
		}
		if first == "" {
			first = net.JoinHostPort(host, port)
		}
		resolved, err := resolveEntry(host, port)
		if err != nil {
			return "", nil, err
		}
		for _, a := range resolved {
			addrs = append(addrs, resolver.Address{Addr: a})
		}
	}
	r := manual.NewBuilderWithScheme("agentrunner-fleet")
	r.InitialState(resolver.State{Addresses: addrs})
	return r.Scheme() + ":///fleet", []grpc.DialOption{grpc.WithResolvers(r), balanced, grpc.WithAuthority(first)}, nil
}

// fleetEntries is the replicas a runtime's sessions take turns on: the entries of a comma-separated
// list, or the addresses a dns:/// name resolves to now (with the name as the authority); one entry
// (the address itself) otherwise.
func fleetEntries(address string) ([]fleetEntry, error) {
	address = strings.TrimSpace(address)
	if !isFleetAddress(address) || strings.HasPrefix(address, "unix:") {
		return []fleetEntry{{target: address}}, nil
	}
	if strings.HasPrefix(address, "dns:") {
		name := address[strings.LastIndex(address, "/")+1:]
		host, port, err := splitEntry(name)
		if err != nil {
			return nil, err
		}
		resolved, err := resolveEntry(host, port)
		if err != nil {
			return nil, err
		}
		entries := make([]fleetEntry, 0, len(resolved))
		for _, a := range resolved {
			entries = append(entries, fleetEntry{target: a, authority: name})
		}
		return entries, nil
	}
	var entries []fleetEntry
	for _, entry := range strings.Split(address, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		if _, _, err := splitEntry(entry); err != nil {
			return nil, err
		}
		entries = append(entries, fleetEntry{target: strings.TrimSpace(entry)})
	}
	return entries, nil
}

// fleetEntry is one replica a runtime session dials (authority: the name TLS checks, when not target's).
type fleetEntry struct {
	target    string
	authority string
}

func (e fleetEntry) dialOptions() []grpc.DialOption {
	if e.authority == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithAuthority(e.authority)}
}
