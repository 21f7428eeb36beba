package agentrunner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

func TestBackoffDelayIsCappedExponentialWithJitter(t *testing.T) {
	initial, limit := 100*time.Millisecond, 5*time.Second
	seen := map[time.Duration]bool{}
	for attempt := 0; attempt < 12; attempt++ {
		step := min(initial<<attempt, limit)
		for i := 0; i < 50; i++ {
			d := BackoffDelay(attempt, initial, limit)
			if d < step/2 || d > step {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, step/2, step)
			}
			seen[d] = true
		}
	}
	if len(seen) < 100 {
		t.Fatalf("the delays are not jittered (%d distinct)", len(seen))
	}
}

func TestLoginStatusesNameNoSecret(t *testing.T) {
	status, detail := codexLogin("WARNING: aliases\nAPI key configured - sk-test-***ghijk\nAuthentication is checked when you send a request.\n", 0)
	if status != pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_IN || detail != "API key configured" {
		t.Fatalf("codex: %v %q", status, detail)
	}
	if status, _ := codexLogin("Not logged in\n", 1); status != pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_OUT {
		t.Fatalf("codex logged out: %v", status)
	}
	status, detail = claudeLogin(`{"loggedIn": true, "authMethod": "api_key", "apiKeySource": "ANTHROPIC_API_KEY", "email": "a@b.c"}`)
	if status != pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_IN || detail != "logged in, auth method api_key from ANTHROPIC_API_KEY" {
		t.Fatalf("claude: %v %q", status, detail)
	}
	if strings.Contains(detail, "a@b.c") {
		t.Fatal("the account leaked")
	}
	if status, _ := claudeLogin("not json"); status != pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_UNKNOWN {
		t.Fatalf("claude garbage: %v", status)
	}
}

func TestTakeRuntimeKeyReadsTheFileAndLeavesNothingInTheEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "runtime.key")
	if err := os.WriteFile(file, []byte("arr_from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTRUNNER_RUNTIME_KEY", "")
	t.Setenv("AGENTRUNNER_RUNTIME_KEY_FILE", file)
	key, err := TakeRuntimeKey()
	if err != nil || key != "arr_from-the-file" {
		t.Fatalf("key %q, err %v", key, err)
	}
	for _, name := range []string{"AGENTRUNNER_RUNTIME_KEY", "AGENTRUNNER_RUNTIME_KEY_FILE"} {
		if _, set := os.LookupEnv(name); set {
			t.Fatalf("%s still set: a runner's child would inherit it", name)
		}
	}
	t.Setenv("AGENTRUNNER_RUNTIME_KEY", "arr_x")
	t.Setenv("AGENTRUNNER_RUNTIME_KEY_FILE", file)
	if _, err := RuntimeKeyFromEnv(); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Fatalf("both set: %v", err)
	}
}

func TestAKeyGoesOverPlaintextOnlyToLoopback(t *testing.T) {
	t.Setenv("AGENTRUNNER_HOST_ALLOW_PLAINTEXT", "")
	for address, ok := range map[string]bool{"127.0.0.1:5": true, "localhost:5": true, "[::1]:5": true,
		"192.0.2.1:5": false, "host.example.com:5": false} {
		if err := checkKeyTransport(address, "arr_k", false); (err == nil) != ok {
			t.Errorf("%s: %v", address, err)
		}
		if err := checkKeyTransport(address, "arr_k", true); err != nil {
			t.Errorf("%s over TLS: %v", address, err)
		}
	}
	t.Setenv("AGENTRUNNER_HOST_ALLOW_PLAINTEXT", "1")
	if err := checkKeyTransport("192.0.2.1:5", "arr_k", false); err != nil {
		t.Errorf("allowed plaintext: %v", err)
	}
}
