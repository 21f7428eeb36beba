package agentrunner_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunner"
	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

func TestValidateConfig(t *testing.T) {
	schema := []*pb.ConfigField{
		{Name: "n", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_INTEGER, DefaultValue: structpb.NewNumberValue(3)},
		{Name: "mode", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_SELECT, Options: []*pb.ConfigOption{{Name: "a"}, {Name: "b"}}},
		{Name: "key", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_SECRET, Required: true},
		{Name: "id", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_STRING, Pattern: "^[A-Za-z0-9_.-]+$"},
	}
	cases := []struct {
		config map[string]any
		field  string
	}{
		{map[string]any{"key": "k"}, ""},
		{map[string]any{"key": "k", "n": 2.5}, "n"},
		{map[string]any{"key": "k", "mode": "c"}, "mode"},
		{map[string]any{}, "key"},
		{map[string]any{"key": true}, "key"},
		{map[string]any{"key": "k", "id": "flow-1.v2"}, ""},
		{map[string]any{"key": "k", "id": "a/b"}, "id"}, // the manifest's pattern, as Python and TS apply it
	}
	for _, c := range cases {
		s, _ := structpb.NewStruct(c.config)
		got, err := agentrunner.ValidateConfig(schema, s)
		if c.field == "" {
			if err != nil || got["n"] != int64(3) {
				t.Errorf("%v: %v %v", c.config, got, err)
			}
			continue
		}
		ce, ok := err.(*agentrunner.ConfigError)
		if !ok || ce.Field != c.field {
			t.Errorf("%v: error %v, want field %s", c.config, err, c.field)
		}
	}
}

func TestCheckInteraction(t *testing.T) {
	ok := &pb.InteractionRequest{InteractionId: "i1", Title: "Deploy?", FallbackText: "reply yes or no",
		Kind: pb.InteractionKind_INTERACTION_KIND_CONFIRMATION, Actions: []*pb.InteractionAction{{Id: "yes", Label: "Yes"}}}
	if err := agentrunner.CheckInteraction(ok); err != nil {
		t.Fatal(err)
	}
	tooMany := &pb.InteractionRequest{InteractionId: "i2", Title: "t", FallbackText: "f"}
	for i := 0; i < 51; i++ {
		tooMany.Fields = append(tooMany.Fields, &pb.InteractionField{Id: strings.Repeat("f", i+1), Label: "l",
			Type: pb.InteractionFieldType_INTERACTION_FIELD_TYPE_TEXT})
	}
	late := &pb.InteractionRequest{InteractionId: "i3", Title: "t", FallbackText: "f",
		ExpiresAt: timestamppb.New(time.Now().Add(25 * time.Hour))}
	noActions := &pb.InteractionRequest{InteractionId: "i4", Title: "t", FallbackText: "f",
		Kind: pb.InteractionKind_INTERACTION_KIND_CONFIRMATION}
	for name, req := range map[string]*pb.InteractionRequest{"51 fields": tooMany, "25 h": late, "no actions": noActions} {
		if e := agentrunner.AsError(agentrunner.CheckInteraction(req)); e == nil || e.Reason != agentrunner.ReasonInvalidArgument {
			t.Errorf("%s: %v", name, e)
		}
	}
}

func TestCheckManifest(t *testing.T) {
	m, err := agentrunner.CheckManifest(&pb.RunnerManifest{Id: "plugin:a/b/c", Label: agentrunner.Text("x")})
	if err != nil || m.GetName() != "c" || m.GetProtocolVersion() != "1" || !m.GetCapabilities().GetEventContext() {
		t.Fatalf("%v %v", m, err)
	}
	bad := []*pb.RunnerManifest{
		{Id: "not-an-id", Label: agentrunner.Text("x")},
		{Id: "plugin:a/b/c"},
		{Id: "plugin:a/b/c", Label: agentrunner.Text("x"), ProtocolVersion: "2"},
		{Id: "plugin:a/b/c", Label: agentrunner.Text("x"), Permissions: &pb.RunnerPermissions{History: []pb.HistoryOperation{0}}},
	}
	for _, b := range bad {
		if _, err := agentrunner.CheckManifest(b); err == nil {
			t.Errorf("accepted %v", b)
		}
	}
}
