package cri

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The unfiltered ListPodSandbox and ListContainers calls are the relist's,
// made every second whatever happens on the node; decoding their replies
// (every sandbox's and container's labels and annotations into fresh maps)
// was most of an idle agent's CPU. Those calls decode only the items that
// changed since the previous unfiltered list: an item whose encoding holds
// the same fields as the one listed before under its ID, in any order (a
// runtime may encode map entries in any order), is the object decoded
// before, which is exactly what decoding it again would give. (Field order
// matters only for a singular field encoded twice or a map key repeated,
// which no protobuf encoder produces.)

// The full method names of the two lists (runtime.v1.RuntimeService).
const (
	methodListPodSandbox = "/runtime.v1.RuntimeService/ListPodSandbox"
	methodListContainers = "/runtime.v1.RuntimeService/ListContainers"
)

// listField is the field number of the items in both list responses
// (ListPodSandboxResponse.items, ListContainersResponse.containers); idField
// is the items' id field (PodSandbox.id, Container.id).
const (
	listField protowire.Number = 1
	idField   protowire.Number = 1
)

// itemCache holds the items of the previous unfiltered list, by ID. The
// objects it holds are shared with every caller that was returned them, so
// nobody may modify them.
type itemCache[T any, PT interface {
	*T
	proto.Message
}] struct {
	mu      sync.Mutex // guards the fields below
	gen     uint64     // the number of lists decoded
	items   map[string]*cachedItem[T]
	scratch [][]byte  // an item's fields while it is looked up
	buf     []byte    // a reply that came in several buffers, joined
	hash    hash.Hash // SHA-256, for fieldsSum
	sum     []byte    // its result
}

// cachedItem is one decoded item, the digest of its encoding's fields (see
// fieldsSum), and the last list that had it.
type cachedItem[T any] struct {
	sum  [sha256.Size]byte
	item *T
	gen  uint64
}

// decodeBuffers is decode of the reply in data, which it does not keep.
func (c *itemCache[T, PT]) decodeBuffers(data mem.BufferSlice) ([]*T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(data) == 1 {
		return c.decodeLocked(data[0].ReadOnlyData())
	}
	c.buf = slices.Grow(c.buf[:0], data.Len())[:data.Len()]
	data.CopyTo(c.buf)
	return c.decodeLocked(c.buf)
}

// decodeLocked returns the items of a list response encoded in b, decoding
// those not in the cache, and leaves the cache holding exactly this list's
// items. Fields other than the items are skipped, as unknown fields would be.
// The items keep no reference to b. c.mu must be held.
func (c *itemCache[T, PT]) decodeLocked(b []byte) ([]*T, error) {
	if c.items == nil {
		c.items = map[string]*cachedItem[T]{}
	}
	c.gen++
	var out []*T
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != listField || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		ci, err := c.lookup(v)
		if err != nil {
			return nil, err
		}
		ci.gen = c.gen
		out = append(out, ci.item)
	}
	for k, ci := range c.items {
		if ci.gen != c.gen {
			delete(c.items, k)
		}
	}
	return out, nil
}

// lookup returns the cached item encoded as v, decoding and caching it
// when the cache has none with v's ID and fields.
func (c *itemCache[T, PT]) lookup(v []byte) (*cachedItem[T], error) {
	fields, id, err := splitFields(v, c.scratch[:0])
	c.scratch = fields
	if err != nil {
		return nil, err
	}
	slices.SortFunc(fields, bytes.Compare)
	sum := c.fieldsSum(fields)
	ci := c.items[string(id)] // no allocation for the lookup
	if ci != nil && ci.sum == sum {
		return ci, nil
	}
	item := PT(new(T))
	if err := proto.Unmarshal(v, item); err != nil {
		return nil, err
	}
	ci = &cachedItem[T]{sum: sum, item: (*T)(item)}
	c.items[string(id)] = ci
	return ci, nil
}

// fieldsSum is the SHA-256 of an item's fields, sorted, one after the
// other. Each field is a whole tag and value, so the concatenation reads
// back as the same fields: equal sums mean the same fields, in any order.
// The cache keeps the 32 bytes rather than the item's encoding.
func (c *itemCache[T, PT]) fieldsSum(sorted [][]byte) [sha256.Size]byte {
	if c.hash == nil {
		c.hash = sha256.New()
	}
	c.hash.Reset()
	for _, f := range sorted {
		c.hash.Write(f)
	}
	c.sum = c.hash.Sum(c.sum[:0])
	return [sha256.Size]byte(c.sum)
}

// splitFields appends to fields each field of the message encoded in v (tag
// and value) and returns them and the value of its id field (nil if none).
func splitFields(v []byte, fields [][]byte) (_ [][]byte, id []byte, _ error) {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return fields, nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, v[n:])
		if m < 0 {
			return fields, nil, protowire.ParseError(m)
		}
		if num == idField && typ == protowire.BytesType {
			id, _ = protowire.ConsumeBytes(v[n:])
		}
		fields = append(fields, v[:n+m])
		v = v[n+m:]
	}
	return fields, id, nil
}

// listReply receives a list response through listCodec: its items, decoded
// through cache.
type listReply[T any, PT interface {
	*T
	proto.Message
}] struct {
	cache *itemCache[T, PT]
	items []*T
}

func (r *listReply[T, PT]) decodeList(data mem.BufferSlice) error {
	items, err := r.cache.decodeBuffers(data)
	r.items = items
	return err
}

// listDecoder is what listCodec decodes into.
type listDecoder interface {
	decodeList(data mem.BufferSlice) error
}

// listCodec is gRPC's proto codec, but decodes a listDecoder itself, from
// the reply's buffers before gRPC frees them.
type listCodec struct{ proto encoding.CodecV2 }

func newListCodec() (listCodec, error) {
	c := encoding.GetCodecV2("proto")
	if c == nil {
		return listCodec{}, errors.New("cri: gRPC's proto codec is not registered")
	}
	return listCodec{proto: c}, nil
}

func (c listCodec) Name() string { return c.proto.Name() }

func (c listCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c listCodec) Unmarshal(data mem.BufferSlice, v any) error {
	d, ok := v.(listDecoder)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	return d.decodeList(data)
}

// listCaches are a Client's caches of the unfiltered lists.
type listCaches struct {
	codec      listCodec
	sandboxes  itemCache[runtimeapi.PodSandbox, *runtimeapi.PodSandbox]
	containers itemCache[runtimeapi.Container, *runtimeapi.Container]
}

// listAll makes the unfiltered list call method with req and returns its
// items, decoded through cache.
func listAll[T any, PT interface {
	*T
	proto.Message
}](ctx context.Context, c *Client, op, method string, req proto.Message, cache *itemCache[T, PT]) ([]*T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply := &listReply[T, PT]{cache: cache}
	if err := c.conn.Invoke(ctx, method, req, reply, grpc.ForceCodecV2(c.lists.codec)); err != nil {
		return nil, classify(op, err)
	}
	return reply.items, nil
}
