// Command counter is the Go example runner: it streams its reply, reads the conversation's history
// through the host API and keeps a per-conversation turn counter in host-owned state.
//
//	go run ./examples/counter -port 50071
package main

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunner"
	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

const turnsKey = "counter.turns"

var manifest = &pb.RunnerManifest{
	Id:          "plugin:example/go-counter/default",
	Label:       agentrunner.Text("Go counter"),
	Description: agentrunner.Text("Streams an echo, reads history, counts the conversation's turns."),
	Capabilities: &pb.RunnerCapabilities{
		Streaming: true, Interrupt: true, Steering: true, StatefulSession: true,
	},
	Permissions: &pb.RunnerPermissions{
		History: []pb.HistoryOperation{pb.HistoryOperation_HISTORY_OPERATION_PAGE},
		State:   []pb.StateScope{pb.StateScope_STATE_SCOPE_CONVERSATION},
	},
	ContextPolicy: &pb.ContextPolicy{SupportsHistoryPull: true},
	ConfigSchema: []*pb.ConfigField{{
		Name: "prefix", Type: pb.ConfigFieldType_CONFIG_FIELD_TYPE_STRING,
		Label: agentrunner.Text("Reply prefix"), DefaultValue: structpb.NewStringValue("echo: "),
	}},
}

func run(ctx context.Context, run *agentrunner.Run) error {
	reply := run.Config()["prefix"].(string) + run.Text()
	// History is pulled, never inlined. A failed pull is reported in the metadata, not fatal.
	seen := "history unavailable"
	if run.Context().GetContext().GetAvailableApis().GetHistoryPage() {
		page, err := run.Host().ListHistory(ctx, &pb.ListHistoryRequest{Limit: 50})
		if err == nil {
			seen = fmt.Sprintf("%d earlier items", len(page.GetItems()))
		} else {
			seen = "history error: " + agentrunner.AsError(err).Reason
		}
	}
	turn := 1.0
	if n, ok := run.State(pb.StateScope_STATE_SCOPE_CONVERSATION)[turnsKey].(float64); ok {
		turn = n + 1
	}
	id := agentrunner.NewID("msg")
	if run.Context().GetDelivery().GetSupportsStreaming() {
		for _, word := range strings.SplitAfter(reply, " ") {
			if err := run.Send(agentrunner.DeltaOf(id, word)); err != nil {
				return err
			}
		}
	}
	state, err := agentrunner.State(pb.StateScope_STATE_SCOPE_CONVERSATION, turnsKey, turn)
	if err != nil {
		return err
	}
	if err := run.Send(state); err != nil {
		return err
	}
	done := agentrunner.Completed(reply)
	done.GetRunCompleted().GetMessage().MessageId = id
	done.Metadata, _ = agentrunner.Struct(map[string]any{"turn": turn, "history": seen})
	return run.Send(done)
}

func main() {
	agentrunner.Main(agentrunner.RunnerFunc(manifest, run))
}
