package nodeapi

import (
	"context"
	"fmt"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Recorder receives events about pods, containers and the node. Its method set
// is that of client-go's record.EventRecorder, so such a recorder can be passed
// as is; [LogRecorder] writes them to a log instead. Methods must not block and
// may be called from any goroutine.
type Recorder interface {
	// Event records an event of eventtype (v1.EventTypeNormal or
	// v1.EventTypeWarning) with reason and message about object.
	Event(object runtime.Object, eventtype, reason, message string)
	// Eventf is Event with a message built by fmt.Sprintf.
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	// AnnotatedEventf is Eventf with annotations on the event.
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// NodeRef returns the reference that node-level events name: the Node object
// called name. As in the kubelet, its UID is the node name.
func NodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

// LogRecorder is a Recorder that writes each event as one log line: Info for
// Normal events, Warn for the others. It is what a standalone node records
// events with. The zero value discards events.
type LogRecorder struct {
	Logger *slog.Logger
}

// Event logs the event.
func (r LogRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.log(object, nil, eventtype, reason, message)
}

// Eventf logs the event.
func (r LogRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.log(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf logs the event with its annotations.
func (r LogRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.log(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r LogRecorder) log(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	if r.Logger == nil {
		return
	}
	level := slog.LevelInfo
	if eventtype != v1.EventTypeNormal {
		level = slog.LevelWarn
	}
	attrs := []any{"type", eventtype, "reason", reason, "object", objectName(object), "message", message}
	if len(annotations) > 0 {
		attrs = append(attrs, "annotations", annotations)
	}
	r.Logger.Log(context.Background(), level, "Event", attrs...)
}

// objectName renders the object an event is about as Kind namespace/name, with
// the field path for a container reference.
func objectName(object runtime.Object) string {
	switch o := object.(type) {
	case nil:
		return ""
	case *v1.ObjectReference:
		s := o.Kind + " " + joinName(o.Namespace, o.Name)
		if o.FieldPath != "" {
			s += " " + o.FieldPath
		}
		return s
	}
	kind := object.GetObjectKind().GroupVersionKind().Kind
	if _, ok := object.(*v1.Pod); ok && kind == "" {
		kind = "Pod"
	}
	if m, err := meta.Accessor(object); err == nil {
		return kind + " " + joinName(m.GetNamespace(), m.GetName())
	}
	return kind
}
