package simulate

import "context"

// imageCollector is what the simulator drives of image GC.
type imageCollector interface {
	Detect(ctx context.Context) error
	GarbageCollect(ctx context.Context) error
	DeleteUnusedImages(ctx context.Context) error
	FreeSpace(ctx context.Context, bytes int64) (int64, error)
}

// containerCollector is what the simulator drives of container GC.
type containerCollector interface {
	GarbageCollect(ctx context.Context) error
	DeleteAllUnusedContainers(ctx context.Context) error
}

type collectors struct {
	images     imageCollector
	containers containerCollector
}

// newCollectors builds the garbage collectors over the scripted node.
func newCollectors(s *sim) (collectors, error) {
	return collectors{}, nil
}
