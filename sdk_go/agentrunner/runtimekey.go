package agentrunner

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// The runtime key comes from the environment only (never a flag: a process list would show it):
// AGENTRUNNER_RUNTIME_KEY, or the file AGENTRUNNER_RUNTIME_KEY_FILE names (a container secret).
const (
	runtimeKeyEnv     = "AGENTRUNNER_RUNTIME_KEY"
	runtimeKeyFileEnv = "AGENTRUNNER_RUNTIME_KEY_FILE"
	allowPlaintextEnv = "AGENTRUNNER_HOST_ALLOW_PLAINTEXT"
)

// RuntimeKeyFromEnv is the runtime key from AGENTRUNNER_RUNTIME_KEY_FILE or AGENTRUNNER_RUNTIME_KEY
// ("" when neither is set); both set is an error rather than a guess which one wins.
func RuntimeKeyFromEnv() (string, error) {
	file := strings.TrimSpace(os.Getenv(runtimeKeyFileEnv))
	key := strings.TrimSpace(os.Getenv(runtimeKeyEnv))
	if file != "" && key != "" {
		return "", fmt.Errorf("both %s and %s are set: keep one", runtimeKeyEnv, runtimeKeyFileEnv)
	}
	if file == "" {
		return key, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("cannot read the runtime key file %s: %w", file, errors.Unwrap(err))
	}
	if key = strings.TrimSpace(string(data)); key == "" {
		return "", fmt.Errorf("the runtime key from %s (%s) is empty", runtimeKeyFileEnv, file)
	}
	return key, nil
}

// TakeRuntimeKey is RuntimeKeyFromEnv, then both variables unset: nothing the runners start inherits
// the key (the -connect mode of Main calls it once).
func TakeRuntimeKey() (string, error) {
	key, err := RuntimeKeyFromEnv()
	os.Unsetenv(runtimeKeyEnv)
	os.Unsetenv(runtimeKeyFileEnv)
	return key, err
}

// checkKeyTransport refuses to send a key over plaintext to a host that is not on loopback, unless
// AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1 says a proxy in front terminates TLS.
func checkKeyTransport(address, key string, tlsOn bool) error {
	if key == "" || tlsOn || isLoopbackTarget(address) || strings.TrimSpace(os.Getenv(allowPlaintextEnv)) == "1" {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address and the connection has no TLS: the runtime key would "+
		"cross the network in clear (set AGENTRUNNER_HOST_CA_FILE, or AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1 "+
		"when a proxy in front of the host terminates TLS)", address)
}

func isLoopbackTarget(address string) bool {
	if strings.Contains(address, ",") { // a fleet's replicas: loopback when every one is
		for _, entry := range strings.Split(address, ",") {
			if strings.TrimSpace(entry) != "" && !isLoopbackTarget(strings.TrimSpace(entry)) {
				return false
			}
		}
		return true
	}
	if strings.HasPrefix(address, "unix:") {
		return true
	}
	host := strings.TrimPrefix(strings.TrimPrefix(address, "dns:///"), "passthrough:///")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
