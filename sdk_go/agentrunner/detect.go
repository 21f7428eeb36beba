package agentrunner

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

var versionPattern = regexp.MustCompile(`\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?`)
var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_ .()-]`)

// DetectHarnesses reports, for each harness CLI name (claude, codex), whether it is on PATH, its version
// (`--version`) and whether it is logged in (`claude auth status --json`, `codex login status`), the way
// the Python SDK does: no key, token or account name leaves the machine.
func DetectHarnesses(ctx context.Context, names []string) []*pb.HarnessCapability {
	out := make([]*pb.HarnessCapability, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func(i int, name string) { defer wg.Done(); out[i] = detectHarness(ctx, name) }(i, name)
	}
	wg.Wait()
	return out
}

func runFor(ctx context.Context, path string, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return "timed out", -1
	}
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return string(out), code
}

func detectHarness(ctx context.Context, name string) *pb.HarnessCapability {
	c := &pb.HarnessCapability{Name: name}
	path, err := exec.LookPath(name)
	if err != nil {
		return c
	}
	c.Present, c.Path = true, path
	if text, code := runFor(ctx, path, "--version"); code == 0 {
		c.Version = versionPattern.FindString(text)
	}
	switch name {
	case "claude":
		text, _ := runFor(ctx, path, "auth", "status", "--json")
		c.LoginStatus, c.LoginDetail = claudeLogin(text)
	case "codex":
		text, code := runFor(ctx, path, "login", "status")
		c.LoginStatus, c.LoginDetail = codexLogin(text, code)
	default:
		c.LoginStatus = pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_UNKNOWN
	}
	return c
}

func safe(text string) string {
	text = unsafeChars.ReplaceAllString(text, "")
	if len(text) > 80 {
		text = text[:80]
	}
	return text
}

func claudeLogin(text string) (pb.HarnessLoginStatus, string) {
	var status struct {
		LoggedIn     *bool  `json:"loggedIn"`
		AuthMethod   string `json:"authMethod"`
		APIKeySource string `json:"apiKeySource"`
	}
	start := strings.Index(text, "{")
	if start < 0 || json.Unmarshal([]byte(text[start:]), &status) != nil || status.LoggedIn == nil {
		return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_UNKNOWN, "`claude auth status` gave no status"
	}
	if !*status.LoggedIn {
		return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_OUT, "not logged in (`claude auth login` or ANTHROPIC_API_KEY)"
	}
	detail := "logged in, auth method " + safe(status.AuthMethod)
	if status.APIKeySource != "" {
		detail += " from " + safe(status.APIKeySource)
	}
	return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_IN, detail
}

func codexLogin(text string, code int) (pb.HarnessLoginStatus, string) {
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "WARNING") {
			lines = append(lines, line)
		}
	}
	if strings.Contains(strings.ToLower(strings.Join(lines, " ")), "not logged in") {
		return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_OUT, "not logged in (`codex login`)"
	}
	if code == 0 && len(lines) > 0 {
		first := lines[0]
		for _, line := range lines {
			if l := strings.ToLower(line); strings.Contains(l, "log") || strings.Contains(l, "key") {
				first = line
				break
			}
		}
		first, _, _ = strings.Cut(first, " - ")
		first, _, _ = strings.Cut(first, ":")
		return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_LOGGED_IN, safe(first)
	}
	return pb.HarnessLoginStatus_HARNESS_LOGIN_STATUS_UNKNOWN, "`codex login status` failed"
}
