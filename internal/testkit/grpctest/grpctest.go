// Package grpctest holds what tests send to a gRPC server below its
// generated clients.
package grpctest

import "google.golang.org/grpc/mem"

// RawCodec sends and receives a message's bytes as they are (a *[]byte), so
// that a test can send what no proto codec would marshal. It is named
// "proto": the server reads what it sends as a protobuf.
type RawCodec struct{}

func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (RawCodec) Name() string { return "proto" }
