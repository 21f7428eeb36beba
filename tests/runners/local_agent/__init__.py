"""Tests of the local agent runner (HostDouble over real gRPC)."""
