package volumes

import (
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// defaultMode is the mode of a volume's files when neither the item nor the
// volume names one (the API's default for these volume kinds).
const defaultMode = 0o644

// ResourceValue resolves a downward API resourceFieldRef of the pod (a
// container's request or limit, divided by the divisor), as the container
// environment does.
type ResourceValue func(ref *v1.ResourceFieldSelector) (string, error)

// modeOf is an item's mode, else the volume's, else defaultMode.
func modeOf(item, volume *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case volume != nil:
		return os.FileMode(*volume)
	}
	return defaultMode
}

// keysPayload is the payload of a ConfigMap's or Secret's data: every key
// when items is empty, else the items, a missing key being an error unless
// optional. kind names the object in the error ("configmap", "secret").
func keysPayload(data map[string][]byte, items []v1.KeyToPath, mode *int32, optional bool, missing func(key string) error) (Payload, error) {
	out := Payload{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = File{Data: v, Mode: modeOf(nil, mode)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, missing(it.Key)
		}
		out[it.Path] = File{Data: v, Mode: modeOf(it.Mode, mode)}
	}
	return out, nil
}

// configMapData is a ConfigMap's data and binaryData as bytes.
func configMapData(cm *v1.ConfigMap) map[string][]byte {
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out
}

// configMapPayload is the payload of a configMap volume or projection; cm is
// nil for an optional ConfigMap that does not exist.
func configMapPayload(cm *v1.ConfigMap, items []v1.KeyToPath, mode *int32, optional bool) (Payload, error) {
	if cm == nil {
		return Payload{}, nil
	}
	return keysPayload(configMapData(cm), items, mode, optional, func(key string) error {
		return fmt.Errorf("configmap references non-existent config key: %s", key)
	})
}

// secretPayload is the payload of a secret volume or projection; s is nil
// for an optional Secret that does not exist.
func secretPayload(s *v1.Secret, items []v1.KeyToPath, mode *int32, optional bool) (Payload, error) {
	if s == nil {
		return Payload{}, nil
	}
	return keysPayload(s.Data, items, mode, optional, func(key string) error {
		return fmt.Errorf("references non-existent secret key: %s", key)
	})
}

// downwardPayload is the payload of a downwardAPI volume or projection.
func downwardPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, mode *int32, res ResourceValue) (Payload, error) {
	out := Payload{}
	var errs []error
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = nodeapi.FieldRefValue(pod, it.FieldRef.FieldPath, nodeapi.FieldInVolume, nodeapi.PodFacts{})
		case it.ResourceFieldRef != nil:
			if res == nil {
				err = fmt.Errorf("resourceFieldRef %q cannot be resolved here", it.ResourceFieldRef.Resource)
			} else {
				val, err = res(it.ResourceFieldRef)
			}
		default:
			err = fmt.Errorf("item %q has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[it.Path] = File{Data: []byte(val), Mode: modeOf(it.Mode, mode)}
	}
	return out, utilerrors.NewAggregate(errs)
}
