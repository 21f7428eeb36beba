module github.com/langbot-app/langbot-agentrunner/sdk_go

// The lowest Go this module builds with (the kit uses the built-in max of Go 1.21), and each dependency
// at its newest release that still supports it; `go vet` (its stdversion check) refuses a newer standard
// library symbol. The code generators `make gen` runs are in tools/go.mod.
go 1.21

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240814211410-ddb44dafa142
	google.golang.org/grpc v1.67.3
	google.golang.org/protobuf v1.36.5
)

require (
	golang.org/x/net v0.28.0 // indirect
	golang.org/x/sys v0.28.0 // indirect
	golang.org/x/text v0.17.0 // indirect
)
