package agentrunner

import (
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
		for range 50 {
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
