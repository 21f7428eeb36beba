package agentrunnerv1_test

// The language-neutral fixtures (tests/fixtures/) decode strictly with the generated Go contract and
// re-encode to the same JSON, exactly as tests/contract/test_fixtures.py checks for Python.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

const fixtures = "../../tests/fixtures"

func files(t *testing.T, kind string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(fixtures, kind, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no %s fixtures under %s (err %v)", kind, fixtures, err)
	}
	return paths
}

// decode parses a fixture strictly (unknown fields fail) and checks that it re-encodes to the same
// JSON value and survives a binary round trip.
func decode(t *testing.T, path string, msg proto.Message) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(raw, msg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s does not re-encode to itself:\n want %v\n got  %v", path, want, got)
	}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	again := msg.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(wire, again); err != nil || !proto.Equal(msg, again) {
		t.Errorf("%s: binary round trip changed the message (err %v)", path, err)
	}
}

func TestResultFixtures(t *testing.T) {
	payload := (&pb.RunResult{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	members := map[string]bool{}
	for i := 0; i < payload.Fields().Len(); i++ {
		members[string(payload.Fields().Get(i).Name())] = true
	}
	seen := map[string]bool{}
	for _, path := range files(t, "results") {
		stem := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(stem, func(t *testing.T) {
			result := &pb.RunResult{}
			decode(t, path, result)
			set := result.ProtoReflect().WhichOneof(payload)
			if set == nil || string(set.Name()) != stem {
				t.Fatalf("payload is %v, want %s", set, stem)
			}
			if result.GetRunId() == "" || result.GetSequence() < 1 {
				t.Errorf("run_id %q, sequence %d", result.GetRunId(), result.GetSequence())
			}
		})
		seen[stem] = true
	}
	if !reflect.DeepEqual(seen, members) {
		t.Errorf("one fixture per payload member: fixtures %v, members %v", seen, members)
	}
}

func TestContextFixtures(t *testing.T) {
	for _, path := range files(t, "contexts") {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			ctx := &pb.RunContext{}
			decode(t, path, ctx)
			if ctx.GetRunId() == "" || ctx.GetEvent().GetEventId() == "" || ctx.GetEvent().GetEventType() == "" {
				t.Errorf("run id, event id and type are required: %v", ctx.GetEvent())
			}
			if ctx.GetRuntime().GetProtocolVersion() != "1" {
				t.Errorf("protocol version %q", ctx.GetRuntime().GetProtocolVersion())
			}
			if ctx.GetContext().GetInlinePolicy().GetMode() != pb.InlineMode_INLINE_MODE_CURRENT_EVENT {
				t.Errorf("history is never inlined: inline mode %v", ctx.GetContext().GetInlinePolicy().GetMode())
			}
		})
	}
}
