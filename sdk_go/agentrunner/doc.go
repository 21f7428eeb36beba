// Package agentrunner is the Go runner kit of the LangBot AgentRunner Protocol v1 over gRPC.
//
// A runner is a manifest plus a Run function. The kit serves it as agentrunner.v1.RunnerService (with
// gRPC health and reflection), validates the run's config against the manifest, and enforces the
// result stream grammar: every result gets the run id, a sequence number 1..n and a timestamp; exactly
// one terminal result (run.completed or run.failed) ends the stream and nothing follows it; a Run
// function that returns nil gets run.completed, one that returns an error or panics gets run.failed
// (never a gRPC error); tool calls still open at the end are closed with runner.incomplete.
//
// During a run, Run.Host() is a typed client of the host's ProxyService: every call carries the run
// token and a W3C traceparent of the run's trace, and its deadline is the smaller of a per-call default
// and the run's remaining time. When the manifest declares interrupt or steering, the kit opens the
// Control stream: it acknowledges each signal, sends heartbeats, honours a cancel after its grace period
// and delivers steering inputs on Run.Steering(). The run ends with run.failed deadline_exceeded just
// before its deadline.
//
//	func main() {
//		agentrunner.Main(agentrunner.RunnerFunc(manifest, func(ctx context.Context, run *agentrunner.Run) error {
//			return run.Send(agentrunner.Completed("echo: " + run.Text()))
//		}))
//	}
package agentrunner
