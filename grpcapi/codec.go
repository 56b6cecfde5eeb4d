package grpcapi

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	encproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's proto codec, but a request that does not decode is the
// caller's error, InvalidArgument: gRPC answers Internal for any codec
// error, so the codec hands the error back in the request (see request) and
// the handlers wrapped by checked answer it.
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2(encproto.Name)} }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*request); ok {
		r.err = c.CodecV2.Unmarshal(data, r.Message)
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// request carries a message to the codec and why it did not decode back.
// Its ProtoReflect is the message's, so that a server without the codec
// decodes it as the message itself.
type request struct {
	proto.Message
	err error
}

// decode receives m through recv, answering InvalidArgument when the codec
// found it malformed.
func decode(recv func(any) error, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return recv(m)
	}
	r := &request{Message: pm}
	if err := recv(r); err != nil {
		return err
	}
	if r.err != nil {
		return status.Errorf(codes.InvalidArgument, "the request is not a valid %s: %v", pm.ProtoReflect().Descriptor().FullName(), r.err)
	}
	return nil
}

// checked returns a copy of d whose handlers receive their requests through
// decode; malformed (if not nil) is told of each unary call so refused.
func checked(d *grpc.ServiceDesc, malformed func(context.Context, error)) *grpc.ServiceDesc {
	c := *d
	c.Methods = slices.Clone(d.Methods)
	for i := range c.Methods {
		h := c.Methods[i].Handler
		c.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			bad := false
			resp, err := h(srv, ctx, func(m any) error {
				err := decode(dec, m)
				bad = status.Code(err) == codes.InvalidArgument
				return err
			}, in)
			if bad && malformed != nil {
				malformed(ctx, err)
			}
			return resp, err
		}
	}
	c.Streams = slices.Clone(d.Streams)
	for i := range c.Streams {
		h := c.Streams[i].Handler
		c.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error { return h(srv, checkedStream{ss}) }
	}
	return &c
}

type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error { return decode(s.ServerStream.RecvMsg, m) }

// malformed counts a rate limit call whose request did not decode.
func (s *Server) malformed(ctx context.Context, err error) { s.finish(ctx, nil, err, noError, 0) }
