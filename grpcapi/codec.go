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

// A request that does not decode (a malformed protobuf, a string that is
// not UTF-8) is the caller's error, InvalidArgument. gRPC answers Internal
// for any error of a codec, whatever its status, so the server's codec does
// not fail: it hands the error back in the request it decoded into, and
// the service's handlers (wrapped by checked) answer it.

// codec is gRPC's proto codec, but for a request it decodes without
// failing (see request). Messages are marshalled as the proto codec does.
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
// decodes it as the message itself (and answers Internal as gRPC does).
type request struct {
	proto.Message
	err error
}

// decode receives m through recv (a stream's RecvMsg), and answers
// InvalidArgument when the codec found it malformed.
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
// decode. malformed (if not nil) is told of each unary call answered
// InvalidArgument that way.
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

// checkedStream receives a stream's requests through decode.
type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error { return decode(s.ServerStream.RecvMsg, m) }

// malformed counts a rate limit call whose request did not decode, as
// ShouldRateLimit counts the calls it answers.
func (s *Server) malformed(ctx context.Context, err error) { s.finish(ctx, nil, err, noError, 0) }
