// The code generators `make gen` runs (buf.gen.go.yaml: `go -C sdk_go/tools tool ...`), in a module of
// their own so that the runner kit's module (sdk_go/go.mod) does not hand them, or the Go version they
// need, to every module that requires it.
module github.com/langbot-app/langbot-agentrunner/sdk_go/tools

go 1.25.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
