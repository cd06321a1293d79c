package main

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sync/errgroup"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/cri-api/pkg/apis/runtime/v1"
	_ "k8s.io/cri-api/pkg/apis/testing"
	_ "k8s.io/kubelet/config/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/yaml"
	_ "k8s.io/client-go/kubernetes"
)

func main() {}
