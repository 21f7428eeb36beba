package agentrunner

// Version is the release of this module: one number for the contract and the Python, Go and TypeScript
// kits (VERSION at the repository's root; tools/versions.py keeps every copy equal). The module is
// tagged sdk_go/vVersion, so `go get github.com/langbot-app/langbot-agentrunner/sdk_go@vVersion` finds it.
const Version = "1.1.0"
